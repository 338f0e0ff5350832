"""NM220 / NM221 / NM222: torch_xla checkpoint writers and readers become torch.save / torch.load; NM235 marks NxD's
readers of per-rank shards."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.rules.patterns import XM, arg, code, short
from neuron_migrate.rules import Rule
from neuron_migrate.rules.rewrites import guard_statement, is_statement, local_rank, only_args, rank
from neuron_migrate.syntax.parse import expression

XSER = "torch_xla.utils.serialization"
SAVE = frozenset({f"{XM}.save", f"{XSER}.save"})
LOAD = frozenset({f"{XSER}.load"})


def cpu_copy(ctx, value: str) -> str:
    pytree = ctx.module_ref("torch.utils._pytree", "pytree")
    torch = ctx.module_ref("torch")
    return f"{pytree}.tree_map_only({torch}.Tensor, {torch}.Tensor.cpu, {value})"


class Save(Rule):
    """`xm.save(obj, path, master_only=True, global_master=False)` and `xser.save(...)` (same arguments)."""

    codes = ("NM220", "NM221")
    triggers = (b"torch_xla",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual not in SAVE:
            return
        data, path = arg(node, 0, "data"), arg(node, 1, "file_or_path") or arg(node, 1, "path")
        master_only, global_master = arg(node, 2, "master_only"), arg(node, 3, "global_master")
        flags = [code(a.value) if a else None for a in (master_only, global_master)]
        if data is None or path is None or not only_args(node, data, path, master_only, global_master) \
                or not is_statement(ctx, node) or any(f not in (None, "True", "False") for f in flags):
            return
        condition = None
        if flags[0] != "False":
            condition = f"{rank(ctx) if flags[1] == 'True' else local_rank(ctx)} == 0"
        template = f"{ctx.module_ref('torch')}.save({cpu_copy(ctx, '{value}')}, {{target}})"

        def build(call: cst.Call) -> cst.BaseExpression:
            value = code(arg(call, 0, "data").value)
            target = code((arg(call, 1, "file_or_path") or arg(call, 1, "path")).value)
            return expression(template.format(value=value, target=target))

        fixed = code(build(node)) if condition is None else f"if {condition}: {code(build(node))}"
        code_ = "NM220" if qual.startswith(XM) else "NM221"
        if ctx.report(code_, node, call=short(node), fixed=fixed):
            ctx.replace(node, build)
            if condition is not None:
                guard_statement(ctx, ctx.current.statement, condition, local=flags[1] != "True")


class Load(Rule):
    codes = ("NM221", "NM222")
    triggers = (b"serialization",)

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(LOAD)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in LOAD:
            return
        fixed = f"{ctx.module_ref('torch')}.load"
        ctx.report("NM222", node, call=short(node))
        if ctx.report("NM221", node, call=short(node), fixed=f"{fixed}(...)"):
            ctx.replace(node.func, expression(fixed))


NXD_LOAD = frozenset({"neuronx_distributed.trainer.load_checkpoint",
                      "neuronx_distributed.trainer.checkpoint.load_checkpoint",
                      "neuronx_distributed.parallel_layers.load",
                      "neuronx_distributed.parallel_layers.checkpointing.load"})


class NxdLoad(Rule):
    """NM235: NxD's readers of per-rank TP/PP shards; the marker names the command that converts them."""

    codes = ("NM235",)
    triggers = (b"load",)
    context = (b"neuronx_distributed",)

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(NXD_LOAD)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualname(node.func) not in NXD_LOAD:
            return
        sharded, xser = arg(node, None, "sharded"), arg(node, None, "load_xser")
        if sharded is not None and code(sharded.value) == "False" and (xser is None or code(xser.value) == "False"):
            return  # `parallel_layers.load(file, sharded=False)`: one plain torch.save file, which torch.load reads
        self.ctx.report("NM235", node, call=short(node))
