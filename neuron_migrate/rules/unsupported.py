"""NM301-NM308: PyTorch APIs the native backend does not run (or runs on the CPU) as written."""

from __future__ import annotations

import functools

import libcst as cst

from neuron_migrate.catalogue import load_data
from neuron_migrate.engine.facts import NEURON_DEVICE_USE
from neuron_migrate.engine.names import dotted_str, not_a_read
from neuron_migrate.rules.patterns import arg, short
from neuron_migrate.rules import Rule, names_pattern
from neuron_migrate.rules import release

# Qualified names (a name or a whole module) -> the code that reports them.
UNSUPPORTED = {
    "torch.sparse": "NM301",
    **{f"torch.{n}": "NM301" for n in (
        "sparse_coo_tensor", "sparse_csr_tensor", "sparse_csc_tensor", "sparse_bsr_tensor", "sparse_bsc_tensor",
        "sparse_compressed_tensor", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc",
        "smm", "hspmm", "sspaddmm")},
    "torch.func": "NM302",
    "torch.vmap": "NM302",
    "functorch": "NM302",
    "torch.nested": "NM303",
    "torch.distributions": "NM304",
    "torch.fft": "NM305",
    "torch.float8_e8m0fnu": "NM306",
    "torch.float4_e2m1fn_x2": "NM306",
}
TO_SPARSE = frozenset({"to_sparse", "to_sparse_coo", "to_sparse_csr", "to_sparse_csc", "to_sparse_bsr",
                       "to_sparse_bsc"})
SPARSE_GRADIENT = frozenset({"torch.nn.Embedding", "torch.nn.EmbeddingBag", "torch.nn.modules.sparse.Embedding",
                             "torch.nn.modules.sparse.EmbeddingBag", "torch.nn.functional.embedding",
                             "torch.nn.functional.embedding_bag", "torch.nn.Embedding.from_pretrained",
                             "torch.nn.EmbeddingBag.from_pretrained"})
TORCHAO = "torchao"
DENSE = "keep the tensor dense (build it dense, or call `.to_dense()` before it reaches the device)"
DENSE_GRADIENTS = "drop `sparse=True`: dense gradients work with every optimizer (but not `torch.optim.SparseAdam`)"


def lookup(table: dict[str, str], qualname: str | None) -> str | None:
    """The table entry for `qualname` or for the closest module that contains it."""
    while qualname:
        if qualname in table:
            return table[qualname]
        qualname = qualname.rpartition(".")[0]
    return None


def reference(ctx, node: cst.CSTNode) -> str | None:
    """The qualified name of a whole name chain read in code (not a part of a chain, an import, a keyword)."""
    parent = ctx.current.parent
    kind = type(parent)  # exact types: isinstance on LibCST's ABCs is slow, and every name comes here
    if kind is cst.Attribute and (parent.value is node or parent.attr is node):
        return None
    if not_a_read(node, parent):
        return None
    if (kind is cst.AssignTarget or kind is cst.AnnAssign or kind is cst.AugAssign) and parent.target is node:
        return None  # a name bound here (`synchronize = None` in an except handler) is not a read of the API
    if type(ctx.current.small) in (cst.Import, cst.ImportFrom):
        return None
    return ctx.qualname(node)


def spelled_as(node: cst.CSTNode, qualname: str) -> dict[str, str]:
    """Message fields `name` (as written) and `qualname` (` (`what it is`)`, only when that says more)."""
    return spelled_as_text(dotted_str(node), qualname)


def spelled_as_text(spelled: str | None, qualname: str) -> dict[str, str]:
    """`spelled_as` of a name chain spelled `spelled` (its parts joined by dots; None: not a plain chain)."""
    name = spelled or qualname
    return {"name": name, "qualname": "" if name == qualname else f" (`{qualname}`)"}


def imports_any(ctx, roots: tuple[str, ...]) -> bool:
    """Whether the file imports from one of these top-level packages (anywhere, in any scope)."""
    return any(b.kind == "import" and (b.qualname or "").split(".")[0] in roots
               for scope in ctx.analysis.scopes for bindings in scope.bindings.values() for b in bindings)


# Bytes a file moving to neuron always holds (see FileContext.moving_to_neuron): the pre-filter context of
# rules that only report there.
MOVING_TO_NEURON = (b"torch_xla", b"neuron")


def moving_to_neuron(ctx) -> bool:
    """Whether the file belongs to a program moving to the neuron device (see FileContext.moving_to_neuron)."""
    return ctx.moving_to_neuron


def may_move_to_neuron(scan, settings) -> bool:
    """The tree pre-filter's side of `moving_to_neuron` (engine/facts.py): false only where the file imports
    neither torch_xla nor torch_neuronx in any scope, spells no use of the neuron device and no moving program
    reaches it."""
    if settings.project is not None and settings.project.moving is not None:
        return True
    return scan.imports_under(("torch_xla", "torch_neuronx")) or NEURON_DEVICE_USE.search(scan.text) is not None


def is_true(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


class UnsupportedApi(Rule):
    codes = ("NM301", "NM302", "NM303", "NM304", "NM305", "NM306")
    # every name in the table ends in one of these (`from torch import func`, `torch.sparse_coo`, ...)
    triggers = tuple(sorted({k.rpartition(".")[2].encode() for k in UNSUPPORTED} | {b"sparse"}))
    context = (b"torch",)  # every name above comes from torch or functorch
    pattern = names_pattern({k.rpartition(".")[2] for k in UNSUPPORTED} | TO_SPARSE | {"sparse", "functorch"})
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual_under(UNSUPPORTED) or not scan.called.isdisjoint(TO_SPARSE) \
            or scan.any_qual(SPARSE_GRADIENT)

    def _reference(self, node: cst.CSTNode) -> None:
        qual = reference(self.ctx, node)
        code = lookup(UNSUPPORTED, qual)
        if code == "NM306" and release.torchao_supported(self.ctx.settings):
            return  # MX formats: supported through TorchAO Neuron on this target
        if code is not None:
            self.ctx.report(code, node, hint=DENSE, status=release.torchao_status(self.ctx.settings),
                            **spelled_as(node, qual))

    visit_Attribute = visit_Name = _reference

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in TO_SPARSE and lookup(
                UNSUPPORTED, ctx.qualname(func)) is None:
            ctx.report("NM301", func.attr, name=f".{func.attr.value}()", qualname="", hint=DENSE)
            return
        if ctx.qualname(func) in SPARSE_GRADIENT:
            sparse = arg(node, None, "sparse")
            if sparse is not None and is_true(sparse.value):
                ctx.report("NM301", sparse, name=short(node), qualname=" (sparse gradients)", hint=DENSE_GRADIENTS)


class TorchAo(Rule):
    """TorchAO is reported where it is imported: its APIs are many, the import is the decision."""

    codes = ("NM307",)
    triggers = (b"torchao",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_module_under((TORCHAO,))

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            self._module(alias, dotted_str(alias.name))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None:
            return
        self._module(node, dotted_str(node.module))

    def _module(self, node: cst.CSTNode, module: str | None) -> None:
        if module is not None and (module == TORCHAO or module.startswith(TORCHAO + ".")):
            if release.torchao_supported(self.ctx.settings):
                return  # TorchAO Neuron is the supported route here; `pin` swaps the wheel (NM612)
            self.ctx.report("NM307", node, module=module, status=release.torchao_status(self.ctx.settings))


@functools.lru_cache(maxsize=1)
def fallback_ops() -> dict[str, dict]:
    """`rules/fallback_ops.toml`: aten operator -> note and the Python APIs that reach it."""
    return load_data("fallback_ops.toml")["ops"]


@functools.lru_cache(maxsize=1)
def fallback_calls() -> dict[str, str]:
    return {call: op for op, entry in fallback_ops().items() for call in entry.get("python", ())}


class CpuFallbackOp(Rule):
    codes = ("NM308",)
    triggers = tuple(sorted({call.rpartition(".")[2].encode() for call in fallback_calls()}))
    context = (b"torch",)
    pattern = names_pattern({call.rpartition(".")[2] for call in fallback_calls()})
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(fallback_calls())

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        op = fallback_calls().get(qual or "")
        if op is not None:
            ctx.report("NM308", node.func, call=dotted_str(node.func) or qual, op=op, note=fallback_ops()[op]["note"])
