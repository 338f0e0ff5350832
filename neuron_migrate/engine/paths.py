"""Code paths: which hardware each statement of a file runs for, as a file fact (`ctx.facts.paths`).

Real code often has several paths: a guarded `import torch_xla` with a CUDA or CPU fallback, a `HAS_XLA` flag,
`if torch.cuda.is_available():` branches, `"cuda" if torch.cuda.is_available() else "cpu"`. Every statement
(and each arm of `x if c else y`, and the right operand of `a and b` / `a or b`) is put on one path:

    XLA       reached only when torch_xla (the XLA-based stack) is in use: the body of a guarded import after the
              import, `if xm is not None:`, `if HAS_XLA:`, `if is_torch_xla_available():`, `device.type == "xla"`,
              `xr.device_type() == "NEURON"`, and the rest of a block after `if not HAS_XLA: return ...`
    TPU       XLA used for TPU: `xr.device_type() == "TPU"`, `PJRT_DEVICE == "TPU"`, `is_tpu_available()`
    CUDA, MPS, XPU, OTHER (npu, hpu, mlu, ...)
              a branch that tests for that backend (`torch.cuda.is_available()`, `device.type == "mps"`, ...); the
              condition itself is on that path too
    FALLBACK  where XLA is absent: the `except ImportError` handler of a guarded import, the `else` of an XLA
              test, and CPU branches (`device.type == "cpu"`)
    COMMON    everything else

Tests are told apart through the name analysis (`engine/names.py`): a flag is a name bound in the guard of a
torch_xla import (`HAS_XLA = True` / `= False`), a name assigned an XLA test, a function whose body is such a
guard or returns such a test, or an imported helper whose own name says what it tests (accelerate's
`is_torch_xla_available`, transformers' `is_torch_tpu_available`, Lightning's `_XLA_AVAILABLE`).

The rules do not read the paths: `FileContext.report` asks `allows` whether a finding may act where its node is
(`Rule.acts_on` says which paths a family's codes act on), and in a multi-backend file it collects the XLA
branches that get one NM111 marker each (`mark_branches`).
"""

from __future__ import annotations

import functools
import re

import libcst as cst

from neuron_migrate.engine.facts import NEURON_DEVICE_USE, fact, uses_neuron_device
from neuron_migrate.engine.names import Resolver, Scope, dotted, dotted_str, import_target
from neuron_migrate.syntax.walk import KINDS, SYNTAX, children, field_order, node_kind, syntax_fields

XLA, TPU, CUDA, MPS, XPU, OTHER, FALLBACK, COMMON = "xla", "tpu", "cuda", "mps", "xpu", "other", "fallback", "common"
OTHER_PATHS = frozenset({TPU, CUDA, MPS, XPU, OTHER, FALLBACK})  # hardware paths that are not the XLA path
BACKENDS = frozenset({CUDA, MPS, XPU, OTHER})  # other accelerators (for the multi-backend fact)

# What a rule family's codes act on (`Rule.acts_on`):
XLA_REWRITE = "xla-rewrite"  # XLA code and common code; never another hardware path; not at all in multi-backend files
# a torch_xla query every path may evaluate (the hardware a device is): also in the condition of a branch for
# another backend, where the path that evaluates the condition is not another backend's; never held for a marker
XLA_QUERY = "xla-query"
CUDA_LEFTOVER = "cuda-leftover"  # CUDA code left in a program moving to neuron: XLA-path code, or common code of a
#                                  file where XLA is not optional; never a CUDA (or other backend) branch or test

NATIVE_BRANCH = "NM111"

_GUARD_EXCEPTIONS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
_STRING_KINDS = {"xla": XLA, "neuron": XLA, "tpu": TPU, "cuda": CUDA, "gpu": CUDA, "nccl": CUDA, "mps": MPS,
                 "xpu": XPU, "npu": OTHER, "hpu": OTHER, "mlu": OTHER, "musa": OTHER, "sdaa": OTHER, "cpu": FALLBACK,
                 "gloo": FALLBACK}
_ENUM_KINDS = {"XLA": XLA, "TPU": TPU, "MULTI_GPU": CUDA, "CUDA": CUDA, "GPU": CUDA, "MPS": MPS, "MULTI_XPU": XPU,
               "XPU": XPU, "MULTI_NPU": OTHER, "MULTI_MLU": OTHER, "MULTI_HPU": OTHER, "MULTI_MUSA": OTHER,
               "MULTI_SDAA": OTHER, "MULTI_CPU": FALLBACK, "CPU": FALLBACK, "MULTI_NEURON": XLA, "NEURON": XLA}
# Availability helpers by their own name (`is_torch_xla_available`, `is_cuda_available`, `_XLA_AVAILABLE`,
# `_XLA_GREATER_EQUAL_2_1`, `is_torch_neuroncore_available`): the kind is the backend the name tests.
_HELPER = re.compile(r"^_?(?:is_)?(?:torch_)?(?P<k>xla|tpu|cuda|gpu|mps|xpu|npu|hpu|mlu|musa|sdaa|neuroncore)"
                     r"(?:_\w+)?_available$|^_(?P<v>XLA|TPU)_(?:GREATER|LESS)", re.I)
_HELPER_KINDS = {"neuroncore": XLA}
# Helpers whose name says TPU but which test for torch_xla on any device: transformers' and accelerate's former
# spellings of `is_torch_xla_available` (true on Trainium too)
_XLA_HELPERS = frozenset({"is_torch_tpu_available", "is_tpu_available"})
# torch's own availability tests
_TORCH_TESTS = {"torch.cuda.is_available": CUDA, "torch.cuda.is_bf16_supported": CUDA, "torch.version.cuda": CUDA,
                "torch.backends.cudnn.is_available": CUDA, "torch.cuda.device_count": CUDA,
                "torch.cuda.is_initialized": CUDA, "torch.backends.mps.is_available": MPS,
                "torch.backends.mps.is_built": MPS, "torch.mps.is_available": MPS, "torch.xpu.is_available": XPU,
                "torch.xpu.device_count": XPU, "torch.npu.is_available": OTHER, "torch.hpu.is_available": OTHER,
                "torch.mlu.is_available": OTHER}
# `find_spec("torch_xla")`, `RequirementCache("torch_xla>=2.1")`, `package_available("torch_xla")`
PACKAGE_PROBES = frozenset({"find_spec", "find_loader", "RequirementCache", "module_available", "package_available",
                            "_is_package_available", "is_package_available", "_package_available"})
_TPU_TEXT = re.compile(r"(?<![A-Za-z])(?:tpu|TPU|Tpu)")


@functools.lru_cache(maxsize=None)
def _fields(node_type: type) -> tuple[str, ...]:
    return syntax_fields(node_type)


def _kind_of_string(value: str | None) -> str | None:
    if value is None:
        return None
    return _STRING_KINDS.get(value.split(":")[0].lower())


def _string(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _terminates(block: cst.BaseSuite) -> bool:
    body = block.body if isinstance(block, cst.IndentedBlock) else [block]
    if not body:
        return False
    last = body[-1]
    small = last.body[-1] if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else None
    if isinstance(block, cst.SimpleStatementSuite):
        small = block.body[-1] if block.body else None
    return isinstance(small, (cst.Return, cst.Raise, cst.Continue, cst.Break))


def _handler_guards(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elements if isinstance(handler.type, cst.Tuple) else None
    names = [dotted_str(e.value) for e in types] if types is not None else [dotted_str(handler.type)]
    return any(n is not None and n.split(".")[-1] in _GUARD_EXCEPTIONS for n in names)


def guards_imports(node: cst.Try) -> bool:
    """Whether a handler of this `try` catches a failed import (ImportError, ModuleNotFoundError, Exception, bare)."""
    return any(_handler_guards(h) for h in node.handlers)


# The packages whose import marks the XLA path: torch_xla, and torch_neuronx (what a migrated detection imports,
# so that a second run sees the same paths).
XLA_PACKAGES = ("torch_xla", "torch_neuronx")


def _is_legacy_import(small: cst.CSTNode) -> bool:
    if type(small) is cst.Import:
        return any((dotted_str(a.name) or "").split(".")[0] in XLA_PACKAGES for a in small.names)
    if type(small) is cst.ImportFrom and small.module is not None and not small.relative:
        return (dotted_str(small.module) or "").split(".")[0] in XLA_PACKAGES
    return False


def _bool(node: cst.CSTNode) -> bool | None:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


_ASK = object()  # `_name_kind`'s qualified name when its caller has none


class PathLogic:
    """What the code paths decide the same way on either tree: `Paths` walks LibCST's, engine/treepaths.py's
    `TreePaths` Python's. A subclass sets `resolver` (the scope table: names.Analysis or treenames.TreeNames) and
    `program` (`facts.program`), and says how its import nodes read (`_imported`, `_from_import`,
    `_relative_import`); the walk, the tests of its node types and the file-wide facts from its text are its own."""

    resolver: Resolver
    program: bool
    kinds: set[str]
    flags: dict[tuple[int, str], str]
    functions: dict
    detections: set
    evaluated_on: dict
    guarded_imports: set
    unguarded: bool
    conditional: bool
    own_switch: bool

    def _answer(self, text: str) -> None:
        """The file-wide answers, once the walk is done (see the module docstring)."""
        self.xla_optional = not self.unguarded and (bool(self.guarded_imports) or XLA in self.kinds or self.conditional
                                                    or self._imports_xla_in_functions() or self._neuron_switch())
        self.two_devices = _two_devices(text)
        others = self.kinds & BACKENDS
        self.multi_backend = self.xla_optional and (
            TPU in self.kinds or len(others) >= 2 or self.own_switch or bool(_TPU_TEXT.search(text)))

    def allows(self, acts_on: str, node) -> bool:
        """Whether a finding of a family that acts on `acts_on` may act at `node` (report it, fix or mark it)."""
        path = self.path_of(node)
        if acts_on == CUDA_LEFTOVER:
            if self.multi_backend or path in OTHER_PATHS or self.two_devices or self.neuron_library:
                return False
            return path == XLA or not self.xla_optional
        if acts_on == XLA_QUERY:
            return path not in OTHER_PATHS or self._evaluated_path(node) not in OTHER_PATHS
        return path not in OTHER_PATHS

    def _condition(self, test, path, branch, body, orelse, scope) -> None:
        """The condition of a branch: on the tested backend's path when it tests another backend; marked as a
        detection when it tests for XLA."""
        tested = body if body != path else orelse if orelse != path else None
        if tested in (XLA, FALLBACK) and (body == XLA or orelse == XLA):
            self.detections.add(test)
            self._expressions(test, path, branch, scope)
        elif tested is not None and tested in OTHER_PATHS:
            self._set(test, tested, None)
            self.evaluated_on[test] = path
            self._expressions(test, tested, None, scope)
        else:
            self._expressions(test, path, branch, scope)

    def _branch(self, test, path: str, scope: Scope) -> tuple[str, str]:
        """(the path of the code a test lets run, the path of its `else`)."""
        found = self._test(test, scope)
        if found is None:
            return path, path
        kind, positive = found
        self.kinds.add(kind)
        if path == TPU and kind == XLA:
            return path, path  # an XLA test inside a TPU branch
        other = FALLBACK if kind == XLA and path == COMMON else path
        return (kind, other) if positive else (other, kind)

    def _name_kind(self, expr, scope: Scope, called: bool = False, qual: str | None | object = _ASK) -> str | None:
        """The backend a name or dotted name stands for in a test (`qual`: its qualified name where the caller
        has it already)."""
        analysis = self.resolver
        if qual is _ASK:
            qual = analysis.qualname(expr, scope)
        if qual in _TORCH_TESTS:
            return _TORCH_TESTS[qual]
        parts = analysis._dotted(expr)
        if not parts:
            return None
        if len(parts) > 1:
            if qual is not None:
                return _helper_kind(parts[-1]) if called or qual.split(".")[0] != "torch" else None
            return None
        name = parts[0]
        owner = analysis.lookup(name, scope)
        if owner is None:
            return None
        known = self.flags.get((id(owner), name))
        if known is not None:
            return known
        bindings = owner.bindings[name]
        target = import_target(bindings)
        if target is not None and target.split(".")[0] in XLA_PACKAGES:
            return XLA  # `xm` of a guarded import, tested: `if xm:`, `xm is not None`
        for b in bindings:
            if b.kind == "import" and b.alias is not None:
                imported = self._imported(b.alias).split(".")[-1]
                kind = _helper_kind(imported)
                if kind == XLA and self._from_import(b.node) and (self._relative_import(b.node)
                                                                   or imported.startswith("_")):
                    # a library's own backend switch: accelerate's `from .utils import is_torch_xla_available`,
                    # Lightning's private `_XLA_AVAILABLE`
                    self.own_switch = True
                return kind
            if b.kind == "def" and b.node in self.functions:
                return self.functions[b.node]
            if b.kind == "def":
                return _helper_kind(name)
        return None

    def _relative(self, parts: list[str] | None) -> bool:
        """Whether the head of `parts` is bound by a relative import (the package's own names)."""
        if not parts:
            return False
        owner = self.resolver.lookup(parts[0], self.resolver.module_scope)
        return owner is not None and any(self._relative_import(b.node) for b in owner.bindings[parts[0]])

    def _owner_key(self, name: str, scope: Scope) -> tuple[int, str]:
        owner = self.resolver.module_scope if name in scope.globals else scope
        return id(owner), name

    @functools.cached_property
    def _imports_xla(self) -> bool:
        """The file imports torch_xla in some scope (a comment or docstring that names it does not count)."""
        return any(b.kind == "import" and (b.qualname or "").split(".")[0] == "torch_xla"
                   for scope in self.resolver.scopes for bindings in scope.bindings.values() for b in bindings)

    def _imports_xla_in_functions(self) -> bool:
        """A torch_xla import inside a function makes XLA optional (the module's other functions serve other
        paths), except one in a program's function outside any branch: the program needs torch_xla there and moves
        to neuron (`facts.moving_to_neuron`), and its CUDA code is a leftover, as with an import at module level."""
        program = self.program
        return any(b.kind == "import" and (b.qualname or "").split(".")[0] in XLA_PACKAGES
                   and not (program and self._outside_branches(b.node))
                   for s in self.resolver.scopes if s.kind == "function"
                   for bindings in s.bindings.values() for b in bindings)


class Paths(PathLogic):
    """The paths of one file (see the module docstring)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        analysis = self.resolver = ctx.analysis
        self._scopes = {s.node: s for s in analysis.scopes if s.kind in ("function", "class", "module")}
        self._path: dict[cst.CSTNode, tuple[str, cst.CSTNode | None]] = {}  # node -> (path, XLA branch statement)
        self.detections: set[cst.CSTNode] = set()  # conditions that test for XLA (`xm is not None`, `HAS_XLA`)
        # conditions that test for another backend, with the path that evaluates them (the `if` statement's own):
        # a torch_xla query in one (`if xm.xla_device_hw(d) == "TPU":`) runs on that path, not the tested one
        self.evaluated_on: dict[cst.CSTNode, str] = {}
        self.flags: dict[tuple[int, str], str] = {}  # (owner scope id, name) -> kind it tests
        self.functions: dict[cst.FunctionDef, str] = {}  # local availability functions -> kind
        self.guarded_imports: set[cst.CSTNode] = set()  # torch_xla import small statements inside a try guard
        self.kinds: set[str] = set()  # every kind some test in the file tests for
        self.unguarded = False  # a module-level torch_xla import outside any guard
        self.conditional = False  # a torch_xla import in a branch of another backend (`if ON_TPU:`)
        # multi-backend: statement a marker stands above -> ([the XLA branches' heads], [the calls held there])
        self.branches: dict[cst.CSTNode, tuple[list[str], list[str]]] = {}
        self.own_switch = False  # XLA is tested through the package's own helpers (a relative import)
        self._continued: set[cst.If] = set()  # `if not HAS_XLA: return`: the code after it is the XLA branch
        self._walk_block(analysis.module.body, COMMON, None, analysis.module_scope, toplevel=True)
        self._answer(ctx.source.text)

    @property
    def program(self) -> bool:
        return self.ctx.facts.program

    @staticmethod
    def _imported(alias: cst.ImportAlias) -> str:
        return dotted_str(alias.name) or ""

    @staticmethod
    def _from_import(node) -> bool:
        return isinstance(node, cst.ImportFrom)

    @staticmethod
    def _relative_import(node) -> bool:
        return isinstance(node, cst.ImportFrom) and bool(node.relative)

    # -- queries ---------------------------------------------------------------------------------------------
    def where(self, node: cst.CSTNode) -> tuple[str, cst.CSTNode | None]:
        """(the path `node` is on, the statement that opened its XLA branch or None)."""
        parents = self.ctx.analysis.parents
        current = node
        while current is not None:
            found = self._path.get(current)
            if found is not None:
                return found
            current = parents.get(current)
        return COMMON, None

    def path_of(self, node: cst.CSTNode) -> str:
        return self.where(node)[0]

    def in_detection(self, node: cst.CSTNode) -> bool:
        """Whether `node` is part of a condition that tests for XLA (`xm is not None`, `if HAS_XLA:`)."""
        parents = self.ctx.analysis.parents
        current = node
        while current is not None:
            if current in self.detections:
                return True
            if isinstance(current, (cst.BaseStatement, cst.BaseSmallStatement)):
                return False
            current = parents.get(current)
        return False

    def kept_detection(self, node: cst.CSTNode, scope: Scope) -> bool:
        """`node` is the name of a guarded torch_xla import read in an XLA test (`xm is not None`): the import tidy
        keeps that test working (`import torch_neuronx as xm`), so it is no leftover."""
        if not isinstance(node, cst.Name) or not self.in_detection(node):
            return False
        owner = self.ctx.analysis.lookup(node.value, scope)
        return owner is not None and any(b.kind == "import" and b.node in self.guarded_imports
                                         for b in owner.bindings[node.value])

    def _evaluated_path(self, node: cst.CSTNode) -> str:
        """The path that evaluates the condition holding `node`, where `node` is in the condition of a branch for
        another backend (the call in `if xm.xla_device_hw(d) == "TPU":` runs before any branch is taken); else
        the path `node` is on."""
        parents = self.ctx.analysis.parents
        current = node
        while current is not None and not isinstance(current, (cst.BaseStatement, cst.BaseSmallStatement)):
            if current in self.evaluated_on:
                return self.evaluated_on[current]
            current = parents.get(current)
        return self.path_of(node)

    # -- multi-backend files: one marker per XLA branch ----------------------------------------------------
    def hold(self, node: cst.CSTNode, statement: cst.CSTNode | None, fields: dict, scope: Scope | None) -> None:
        """A finding on XLA code of a multi-backend file: not reported itself; its branch gets one NM111 marker.
        (Findings on common code that names no torch_xla API are about code every backend runs: left alone.)"""
        if self.path_of(node) != XLA and not self._names_xla(node, scope):
            return
        found = self._anchor(node, statement)
        if found is None:
            return
        place, head = found
        heads, uses = self.branches.setdefault(place, ([], []))
        if head not in heads:
            heads.append(head)
        name = fields.get("name") or fields.get("call") or dotted_str(node) or _short(node)
        name = re.sub(r"\(.*", "", str(name), flags=re.S)
        if name and name not in uses:
            uses.append(name)

    def _names_xla(self, node: cst.CSTNode, scope: Scope | None) -> bool:
        expr = node.func if isinstance(node, cst.Call) else node
        qual = self.ctx.analysis.qualname(expr, scope or self.ctx.analysis.module_scope)
        return qual is not None and qual.split(".")[0] in XLA_PACKAGES

    def _anchor(self, node: cst.CSTNode, statement: cst.CSTNode | None) -> tuple[cst.CSTNode, str] | None:
        """(the statement the marker stands above, how the message names the branch)."""
        parents = self.ctx.analysis.parents
        module = self.ctx.analysis.module
        _path, branch = self.where(node)
        current = branch if branch is not None else (statement or node)
        if branch is None:  # common code: the function (or top-level statement) that holds it
            while current is not None and not isinstance(current, cst.FunctionDef) and parents.get(current) is not module:
                current = parents.get(current)
        while current is not None and not isinstance(current, cst.BaseStatement):
            current = parents.get(current)  # an arm of `x if c else y`: its statement
        if current is None:
            return None
        parent = parents.get(current)
        head = _head(current, current in self._continued, isinstance(parent, cst.If) and parent.orelse is current)
        while isinstance(current, cst.If) and isinstance(parents.get(current), cst.If) and \
                parents.get(current).orelse is current:
            current = parents.get(current)  # an `elif`: the marker stands above the `if` of its chain
        return current, head

    def mark_branches(self) -> None:
        """Report NM111 once per XLA branch that held findings (a multi-backend file; see `hold`)."""
        from neuron_migrate.rules.target import native_device

        ctx = self.ctx
        ctx.current = None
        for place, (heads, uses) in self.branches.items():
            ctx.report(NATIVE_BRANCH, place, statement=place, branch=" and ".join(heads),
                       uses=", ".join(f"`{u}`" for u in uses[:4]) + (", ..." if len(uses) > 4 else ""),
                       device=native_device(ctx))

    # -- the walk --------------------------------------------------------------------------------------------
    def _set(self, node: cst.CSTNode, path: str, branch: cst.CSTNode | None) -> None:
        self._path[node] = (path, branch)

    def _walk_block(self, body, path: str, branch, scope: Scope, toplevel: bool = False) -> None:
        for statement in body:
            self._set(statement, path, branch)
            path, branch = self._statement(statement, path, branch, scope, toplevel)

    def _statement(self, node: cst.CSTNode, path: str, branch, scope: Scope, toplevel: bool):
        """Walk one statement; returns the path (and branch) of the statements after it in its block."""
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if _is_legacy_import(small) and toplevel and path == COMMON:
                    self.unguarded = True
                elif _is_legacy_import(small) and path in OTHER_PATHS:
                    self.conditional = True  # `if is_tpu(): import torch_xla...`: the program runs without it
                self._assign_flag(small, scope)
                self._expressions(small, path, branch, scope)
            return path, branch
        if isinstance(node, cst.If):
            return self._if(node, path, branch, scope)
        if isinstance(node, cst.Try):
            self._try(node, path, branch, scope)
            return path, branch
        if isinstance(node, cst.FunctionDef):
            inner = self._scopes.get(node, scope)
            for deco in node.decorators:
                self._expressions(deco, path, branch, scope)
            self._walk_suite(node.body, path, branch, inner)
            kind = self._function_kind(node, inner)
            if kind is not None:
                self.functions[node] = kind
            return path, branch
        if isinstance(node, cst.ClassDef):
            self._walk_suite(node.body, path, branch, self._scopes.get(node, scope))
            return path, branch
        for name in ("test", "iter", "items"):  # While, For, With heads
            value = getattr(node, name, None)
            if isinstance(value, cst.CSTNode):
                self._expressions(value, path, branch, scope)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    self._expressions(item, path, branch, scope)
        for name in ("body", "orelse", "finalbody"):
            value = getattr(node, name, None)
            if isinstance(value, cst.Else):
                value = value.body
            if isinstance(value, cst.BaseSuite):
                self._walk_suite(value, path, branch, scope)
        for case in getattr(node, "cases", ()) or ():
            self._walk_suite(case.body, path, branch, scope)
        return path, branch

    def _walk_suite(self, suite, path: str, branch, scope: Scope) -> None:
        if isinstance(suite, cst.IndentedBlock):
            self._walk_block(suite.body, path, branch, scope)
        elif isinstance(suite, cst.SimpleStatementSuite):
            self._set(suite, path, branch)
            for small in suite.body:
                self._assign_flag(small, scope)
                self._expressions(small, path, branch, scope)

    def _if(self, node: cst.If, path: str, branch, scope: Scope):
        body, orelse = self._branch(node.test, path, scope)
        self._condition(node.test, path, branch, body, orelse, scope)
        body_branch = node if body == XLA and path != XLA else branch
        else_branch = node if orelse == XLA and path != XLA else branch
        self._set(node.body, body, body_branch)
        self._walk_suite(node.body, body, body_branch, scope)
        if isinstance(node.orelse, cst.If):
            self._set(node.orelse, orelse, else_branch)
            self._if(node.orelse, orelse, else_branch, scope)
        elif isinstance(node.orelse, cst.Else):
            self._set(node.orelse, orelse, else_branch)
            self._walk_suite(node.orelse.body, orelse, else_branch, scope)
        if node.orelse is None and _terminates(node.body) and orelse != path and not self._value_test(node.test):
            if orelse == XLA and path != XLA:
                self._continued.add(node)
                return orelse, node
            return orelse, branch
        return path, branch

    def _try(self, node: cst.Try, path: str, branch, scope: Scope) -> None:
        guarded = any(_handler_guards(h) for h in node.handlers)
        xla_from = None
        for i, statement in enumerate(node.body.body):
            if isinstance(statement, cst.SimpleStatementLine) and any(_is_legacy_import(s) for s in statement.body):
                xla_from = i
                break
        if not guarded or xla_from is None:
            self._walk_suite(node.body, path, branch, scope)
            for h in node.handlers:
                self._walk_suite(h.body, path, branch, scope)
        else:
            self.kinds.add(XLA)
            inner_branch = node if path != XLA else branch
            for i, statement in enumerate(node.body.body):
                p, b = (XLA, inner_branch) if i >= xla_from else (path, branch)
                self._set(statement, p, b)
                if isinstance(statement, cst.SimpleStatementLine):
                    for small in statement.body:
                        if _is_legacy_import(small):
                            self.guarded_imports.add(small)
                        elif i > xla_from:
                            self._guard_flag(small, scope, True)
                self._statement(statement, p, b, scope, False)
            for h in node.handlers:
                hp = FALLBACK if _handler_guards(h) else path
                self._set(h, hp, None if hp == FALLBACK else branch)
                if hp == FALLBACK:
                    for statement in h.body.body:
                        if isinstance(statement, cst.SimpleStatementLine):
                            for small in statement.body:
                                self._guard_flag(small, scope, False)
                self._walk_suite(h.body, hp, None if hp == FALLBACK else branch, scope)
            if node.orelse is not None:
                self._set(node.orelse, XLA, inner_branch)
                self._walk_suite(node.orelse.body, XLA, inner_branch, scope)
        if node.orelse is not None and xla_from is None:
            self._walk_suite(node.orelse.body, path, branch, scope)
        if node.finalbody is not None:
            self._walk_suite(node.finalbody.body, path, branch, scope)

    def _expressions(self, node: cst.CSTNode, path: str, branch, scope: Scope) -> None:
        """The arms of `x if c else y` and `a and b` / `a or b` inside an expression."""
        stack = [(node, path, branch)]
        in_order = field_order()
        while stack:
            current, p, b = stack.pop()
            kind = type(current)  # exact types: isinstance on LibCST's ABC-based classes costs more, for every node
            if kind is cst.IfExp:
                body, orelse = self._branch(current.test, p, scope)
                self._condition(current.test, p, b, body, orelse, scope)
                for arm, q in ((current.body, body), (current.orelse, orelse)):
                    qb = current if q == XLA and p != XLA else b
                    self._set(arm, q, qb)
                    stack.append((arm, q, qb))
                continue
            if kind is cst.Call and p not in OTHER_PATHS:
                found = self._call(current, scope)  # `ok = torch.cuda.is_available()`: asks that backend
                if found is not None and found[0] in OTHER_PATHS:
                    self.kinds.add(found[0])
                    self._set(current, found[0], None)
                    p, b = found[0], None
            if kind is cst.BooleanOperation:
                body, orelse = self._branch(current.left, p, scope)
                right = body if isinstance(current.operator, cst.And) else orelse
                if right != p:
                    if right in (XLA, FALLBACK):
                        self.detections.add(current.left)
                    else:
                        self._set(current.left, right, None)
                rb = current if right == XLA and p != XLA else b
                self._set(current.right, right, rb)
                stack.append((current.left, self._path.get(current.left, (p, b))[0], b))
                stack.append((current.right, right, rb))
                continue
            if not in_order:
                stack.extend((c, p, b) for c in children(current, tokens=False))
                continue
            for name in _fields(kind):  # `children(current, tokens=False)` inline: this visits every node of the file
                value = getattr(current, name)
                for item in value if type(value) is tuple or type(value) is list else (value,):
                    item_kind = KINDS.get(type(item))
                    if item_kind is None:
                        item_kind = KINDS[type(item)] = node_kind(type(item))
                    if item_kind >= SYNTAX:
                        stack.append((item, p, b))

    # -- tests -----------------------------------------------------------------------------------------------
    def _test(self, test: cst.BaseExpression, scope: Scope) -> tuple[str, bool] | None:
        """(the kind a condition tests for, True when it holds where that kind is in use) or None."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            found = self._test(test.expression, scope)
            return (found[0], not found[1]) if found else None
        if type(test) is cst.BooleanOperation:
            left, right = self._test(test.left, scope), self._test(test.right, scope)
            if isinstance(test.operator, cst.And):  # `xm is not None and x`: runs where XLA is
                positive = [f for f in (left, right) if f is not None and f[1]]
                if positive:
                    return positive[0]
            return left if left is not None and left == right else None
        if isinstance(test, cst.Comparison):
            return self._comparison(test, scope)
        if isinstance(test, cst.Call):
            return self._call(test, scope)
        if isinstance(test, (cst.Name, cst.Attribute)):
            kind = self._name_kind(test, scope)
            return (kind, True) if kind else None
        return None

    def _value_test(self, test: cst.BaseExpression) -> bool:
        """A test of a value's device (`t.device.type == "xla"`), not of what is installed: after
        `if t.device.type == "xla": return t` the function goes on for tensors elsewhere, XLA or not."""
        while isinstance(test, cst.UnaryOperation):
            test = test.expression
        if isinstance(test, cst.BooleanOperation):
            return self._value_test(test.left) or self._value_test(test.right)
        return isinstance(test, cst.Comparison) and any(
            self._value_kind(o) is not None for o in (test.left, *(c.comparator for c in test.comparisons)))

    def _comparison(self, test: cst.Comparison, scope: Scope) -> tuple[str, bool] | None:
        if len(test.comparisons) != 1:
            return None
        target = test.comparisons[0]
        op, right, left = target.operator, target.comparator, test.left
        positive = isinstance(op, (cst.Equal, cst.Is, cst.In))
        if not (positive or isinstance(op, (cst.NotEqual, cst.IsNot, cst.NotIn))):
            if isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)) and isinstance(left, cst.Call):
                found = self._call(left, scope)  # torch.cuda.device_count() > 0
                return found
            return None
        if isinstance(op, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) and right.value == "None":
            kind = self._name_kind(left, scope) if isinstance(left, (cst.Name, cst.Attribute)) else \
                self._probe(left, scope) if isinstance(left, cst.Call) else None
            return (kind, not positive) if kind else None
        for a, b in ((left, right), (right, left)):
            kind = self._value_kind(a)
            if kind is not None:
                return kind, positive
        return None

    def _value_kind(self, node: cst.CSTNode) -> str | None:
        value = _string(node)
        if value is not None:
            return _kind_of_string(value)
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            kinds = {self._value_kind(e.value) for e in node.elements}
            return kinds.pop() if len(kinds) == 1 else None
        if isinstance(node, cst.Attribute) and isinstance(node.value, (cst.Name, cst.Attribute)):
            kind = _ENUM_KINDS.get(node.attr.value)  # DistributedType.XLA, accelerator type enums
            if kind is not None and self._relative(dotted(node.value)):
                self.own_switch = True
            return kind
        return None

    def _call(self, call: cst.Call, scope: Scope) -> tuple[str, bool] | None:
        probe = self._probe(call, scope)
        if probe is not None:
            return probe, True
        qual = self.ctx.analysis.qualname(call.func, scope)
        if qual in _TORCH_TESTS:
            return _TORCH_TESTS[qual], True
        if type(call.func) in (cst.Name, cst.Attribute):
            kind = self._name_kind(call.func, scope, called=True, qual=qual)
            if kind == XLA and any(a.keyword is not None and a.keyword.value == "check_is_tpu"
                                   and _bool(a.value) for a in call.args):
                kind = TPU
            if kind is not None:
                return kind, True
        return None

    def _probe(self, call: cst.Call, scope: Scope) -> str | None:
        """`find_spec("torch_xla")` and the like: XLA."""
        parts = dotted(call.func)
        if parts and parts[-1] in PACKAGE_PROBES and call.args:
            value = _string(call.args[0].value)
            if value is not None and re.match(r"torch[_-](?:xla|neuronx)\b", value):
                return XLA
        return None

    # -- flags -----------------------------------------------------------------------------------------------
    def _guard_flag(self, small: cst.CSTNode, scope: Scope, value: bool) -> None:
        """`HAS_XLA = True` after a guarded torch_xla import (and `= False` / `= None` in its handler)."""
        if isinstance(small, cst.Assign) and (_bool(small.value) is value or (not value and isinstance(
                small.value, cst.Name) and small.value.value == "None")):
            for t in small.targets:
                if isinstance(t.target, cst.Name):
                    self.flags[self._owner_key(t.target.value, scope)] = XLA

    def _assign_flag(self, small: cst.CSTNode, scope: Scope) -> None:
        """`HAS_XLA = find_spec("torch_xla") is not None`, `_XLA_AVAILABLE = RequirementCache("torch_xla")`."""
        if isinstance(small, cst.Assign):
            value, targets = small.value, [t.target for t in small.targets]
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            value, targets = small.value, [small.target]
        else:
            return
        found = self._test(value, scope)
        if found is None or not found[1]:
            return
        if found[0] == XLA:
            self.detections.add(value)  # `USE_XLA = xm is not None`
        for t in targets:
            if isinstance(t, cst.Name):
                self.flags[self._owner_key(t.value, scope)] = found[0]

    def _function_kind(self, node: cst.FunctionDef, inner: Scope) -> str | None:
        """A function that tells whether a backend is there: its body is a guarded import returning True / False,
        or returns an availability test."""
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
        body = [s for s in body if not _docstring(s)]
        if len(body) == 1 and isinstance(body[0], cst.Try) and any(
                isinstance(s, cst.SimpleStatementLine) and any(_is_legacy_import(x) for x in s.body)
                for s in body[0].body.body):
            returns = [_returned(s) for s in body[0].body.body] + [_returned(s) for h in body[0].handlers
                                                                    for s in h.body.body]
            if any(isinstance(r, cst.Name) and r.value == "True" for r in returns):
                return XLA
        if body and isinstance(body[-1], cst.SimpleStatementLine):
            value = _returned(body[-1])
            if value is not None:
                found = self._test(value, inner)
                if found is not None and found[1]:
                    return found[0]
        return None

    @functools.cached_property
    def neuron_library(self) -> bool:
        """A module that is no program (`facts.program`: no `__main__` block, not run by a launch script or
        notebook), uses the neuron device only inside its functions and classes and imports torch_xla nowhere. That
        is what a module importing torch_xla inside one function's XLA path (XLA optional: its CUDA code stays;
        `_imports_xla_in_functions`) looks like after the rewrite, so its CUDA code stays too: a second run must
        not take what the first one left."""
        if not uses_neuron_device(self.ctx.source.text) or self._imports_xla or self.ctx.facts.program:
            return False
        module = self.ctx.analysis.module
        return not any(NEURON_DEVICE_USE.search(module.code_for_node(stmt)) for stmt in module.body
                       if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)))

    def _neuron_switch(self) -> bool:
        """The file imports torch_xla nowhere and picks the neuron device in one branch of an `if` and not in
        another (an `if` whose block returns is one branch, the rest of its block the other): the form a torch_xla
        import inside one branch (XLA optional) takes after the rewrite, so that a second run sees the same paths
        as the first and leaves the other branches' CUDA code alone."""
        if self._imports_xla or not uses_neuron_device(self.ctx.source.text):
            return False
        module = self.ctx.analysis.module
        parents = self.ctx.analysis.parents
        for node in parents:
            if not isinstance(node, cst.If) or isinstance(parents.get(node), cst.If):
                continue
            arms, branch = [node.body], node.orelse
            while branch is not None:
                arms.append(branch.body)
                branch = branch.orelse if isinstance(branch, cst.If) else None
            if node.orelse is None:
                block = parents.get(node)
                if not _terminates(node.body) or not isinstance(block, cst.IndentedBlock):
                    continue
                arms.append(cst.IndentedBlock(body=block.body[block.body.index(node) + 1:]))
            found = [bool(NEURON_DEVICE_USE.search(module.code_for_node(arm))) for arm in arms]
            if any(found) and not all(found):
                return True
        return False

    def _outside_branches(self, node: cst.CSTNode) -> bool:
        """`node` runs whenever its function does: no `if`, `match` or `try` between it and the function (a loop or
        a `with` may be)."""
        parents = self.ctx.analysis.parents
        current = parents.get(node)
        while current is not None and not isinstance(current, (cst.FunctionDef, cst.Lambda)):
            if isinstance(current, (cst.If, cst.Else, cst.Try, cst.TryStar, cst.Match)):
                return False
            current = parents.get(current)
        return current is not None


def _short(node: cst.CSTNode) -> str:
    text = cst.Module([]).code_for_node(node).strip().splitlines()[0]
    return text if len(text) <= 60 else text[:57] + "..."


def _head(statement: cst.CSTNode, continued: bool = False, elif_: bool = False) -> str:
    """How a marker names an XLA branch: `if is_torch_xla_available()`, `def step`, `try: import ...`, or the code
    after `if not HAS_XLA: return`."""
    if isinstance(statement, cst.If):
        if continued:
            return f"the code after `if {_short(statement.test)}: return`"
        return f"`{'elif' if elif_ else 'if'} {_short(statement.test)}`"
    if isinstance(statement, cst.FunctionDef):
        return f"`def {statement.name.value}`"
    if isinstance(statement, cst.Try):
        first = statement.body.body[0] if statement.body.body else None
        return f"`try: {_short(first)}`" if first is not None else "`try`"
    return f"`{_short(statement)}`"


def _docstring(statement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Expr) and isinstance(statement.body[0].value, (cst.SimpleString,
                                                                              cst.ConcatenatedString))


def _returned(statement) -> cst.BaseExpression | None:
    if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[-1], cst.Return):
        return statement.body[-1].value
    return None


@functools.lru_cache(maxsize=512)
def _helper_kind(name: str) -> str | None:
    if name in _XLA_HELPERS:
        return XLA
    m = _HELPER.match(name)
    if m is None:
        return None
    k = (m.group("k") or m.group("v")).lower()
    return _HELPER_KINDS.get(k) or _STRING_KINDS.get(k)


@fact
def paths(ctx) -> Paths:
    """The code paths of the file (engine/paths.py)."""
    return Paths(ctx)


@functools.lru_cache(maxsize=1)
def _families() -> dict[str, str]:
    from neuron_migrate.rules import all_rules

    out: dict[str, str] = {}
    for rule in all_rules():
        for code in rule.codes:
            out.setdefault(code, rule.acts_on)
    return out


def acts_on(code: str) -> str:
    """Which paths `code`'s family acts on (`Rule.acts_on` of the rule that reports it; NM199: XLA rewrites)."""
    return _families().get(code, XLA_REWRITE)


# Data put on CUDA unconditionally (`device="cuda"`, `.cuda()`, `.to("cuda")`), and the XLA device asked for (or,
# after a rewrite, the neuron device: a second run must decide as the first did).
# (Code, not comments: a line's text before any `#`.)
_CUDA_DATA = re.compile(r"""^[^#\n]*?(?:\bdevice\s*=\s*["']cuda|\.cuda\(|\.to\(\s*["']cuda)""", re.M)
_XLA_DEVICE = re.compile(r"""^[^#\n]*?(?:\bxla_device\(|\btorch_xla\.device\(|\bdevice\(\s*["']neuron"""
                         r"""|current_accelerator\()""", re.M)


def _two_devices(text: str) -> bool:
    """The program uses the XLA device and CUDA side by side on purpose (a benchmark comparing them): it could only
    run where both were, so its CUDA code is a CUDA path, not a leftover of a GPU version, and stays as written."""
    return "cuda" in text and _CUDA_DATA.search(text) is not None and _XLA_DEVICE.search(text) is not None
