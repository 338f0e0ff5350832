"""NM223-NM230: logging, step closures, seeds, renamed utilities, metrics and sharding APIs."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.patterns import XM, arg, code, short
from neuron_migrate.rules import Rule
from neuron_migrate.rewrites import alone_on_line, guard_statement, is_statement, only_args, rank
from neuron_migrate.cstparse import expression

MASTER_PRINT = frozenset({f"{XM}.master_print"})
STEP_CLOSURE = frozenset({f"{XM}.add_step_closure"})
SEED = frozenset({f"{XM}.set_rng_state", "torch_xla.manual_seed", "torch_xla.torch_xla.manual_seed"})

# Same callable, other home: legacy qualified name -> (module, attribute).
RENAMES = {
    "torch_xla.utils.checkpoint.checkpoint": ("NM226", "torch.utils.checkpoint", "checkpoint"),
    "torch_xla.amp.syncfree.SGD": ("NM227", "torch.optim", "SGD"),
    "torch_xla.amp.syncfree.Adam": ("NM227", "torch.optim", "Adam"),
    "torch_xla.amp.syncfree.AdamW": ("NM227", "torch.optim", "AdamW"),
}
for _name in ("SGD", "Adam", "AdamW"):
    RENAMES[f"torch_xla.amp.syncfree.{_name.lower()}.{_name}"] = RENAMES[f"torch_xla.amp.syncfree.{_name}"]

METRICS = "torch_xla.debug.metrics."
FSDP = "FSDP2 `torch.distributed.fsdp.fully_shard(module)` on each block and the model"
SHARDING = {
    "torch_xla.distributed.fsdp.XlaFullyShardedDataParallel": FSDP,
    "torch_xla.distributed.fsdp.xla_fully_sharded_data_parallel.XlaFullyShardedDataParallel": FSDP,
    "torch_xla.distributed.zero_redundancy_optimizer.ZeroRedundancyOptimizer":
        "FSDP2 `fully_shard` (it shards the optimizer state too) or `torch.distributed.optim.ZeroRedundancyOptimizer`; "
        "torch_xla's ZeroRedundancyOptimizer clips the gradients by default (grad_clipping=True, max_norm=1.0): "
        "unless it was given grad_clipping=False, keep that with `torch.nn.utils.clip_grad_norm_(params, 1.0)` "
        "before each `optimizer.step()`",
}
SPMD = ("torch_xla.distributed.spmd.", "torch_xla.experimental.xla_sharding.")
SPMD_HINT = "`init_device_mesh(\"neuron\", shape, mesh_dim_names=...)` and DTensor (`distribute_tensor`, " \
            "`parallelize_module`)"


class MasterPrint(Rule):
    codes = ("NM223",)
    triggers = (b"torch_xla",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in MASTER_PRINT or not alone_on_line(ctx, node) or not is_statement(ctx, node):
            return
        fd, finalizer = arg(node, None, "fd"), arg(node, None, "finalizer")
        flush = arg(node, None, "flush")
        if any(a.keyword is not None and a not in (fd, finalizer, flush) for a in node.args):
            return
        extra = [f"{code(finalizer.value)}()"] if finalizer is not None else []
        condition = f"{rank(ctx)} == 0"

        def build(call: cst.Call) -> cst.Call:
            args = []
            for a in call.args:
                name = a.keyword.value if a.keyword is not None else None
                if name == "finalizer":
                    continue
                if name == "fd":
                    a = a.with_changes(keyword=cst.Name("file"))
                args.append(a)
            if args:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return call.with_changes(func=cst.Name("print"), args=args)

        if ctx.report("NM223", node, call=short(node), fixed=f"if {condition}: {code(build(node))}"):
            ctx.replace(node, build)
            guard_statement(ctx, ctx.current.statement, condition, extra)


class StepClosure(Rule):
    codes = ("NM224",)
    triggers = (b"add_step_closure",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in STEP_CLOSURE or not is_statement(ctx, node):
            return
        fn, args, run_async = arg(node, 0, "closure"), arg(node, 1, "args"), arg(node, 2, "run_async")
        if fn is None or not only_args(node, fn, args, run_async):
            return
        if args is None:
            rest = ""
        elif isinstance(args.value, cst.Tuple):
            rest = ", ".join(code(e) .rstrip(", ") for e in args.value.elements)
        else:
            rest = f"*{code(args.value)}"
        target = code(fn.value)
        if not isinstance(fn.value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            target = f"({target})"
        fixed = f"{target}({rest})"
        if ctx.report("NM224", node, call=short(node), fixed=fixed):
            ctx.replace(node, expression(fixed))


class Seed(Rule):
    codes = ("NM225",)
    triggers = (b"torch_xla",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in SEED:
            return
        seed = arg(node, 0, "seed")
        if seed is None or not only_args(node, seed):
            return  # device=: left to NM199
        fixed = f"{ctx.module_ref('torch')}.neuron.manual_seed"
        if ctx.report("NM225", node, call=short(node), fixed=f"{fixed}({code(seed.value)})"):
            ctx.replace(node.func, expression(fixed))


class Renamed(Rule):
    """NM226 / NM227: the same function or class under its PyTorch name."""

    codes = ("NM226", "NM227")
    triggers = (b"torch_xla",)

    def _reference(self, node: cst.CSTNode) -> None:
        ctx = self.ctx
        occ = ctx.current
        if type(occ.parent) is cst.Attribute and occ.parent.value is node:
            return  # only the whole chain
        if type(occ.small) in (cst.Import, cst.ImportFrom):  # exact types: isinstance on LibCST's ABCs is slow
            return
        found = RENAMES.get(ctx.qualname(node))
        if found is None:
            return
        rule, module, attribute = found
        fixed = f"{ctx.module_ref(module)}.{attribute}"
        if ctx.report(rule, node, call=code(node), fixed=fixed):
            ctx.replace(node, expression(fixed))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._reference(node)

    def visit_Name(self, node: cst.Name) -> None:
        if type(self.ctx.current.parent) is not cst.Attribute or self.ctx.current.parent.value is node:
            self._reference(node)


class Metrics(Rule):
    codes = ("NM228",)
    triggers = (b"torch_xla",)

    def visit_Call(self, node: cst.Call) -> None:
        if (self.ctx.qualname(node.func) or "").startswith(METRICS):
            self.ctx.report("NM228", node, call=short(node))


class Sharding(Rule):
    codes = ("NM230",)
    triggers = (b"torch_xla",)

    def visit_Call(self, node: cst.Call) -> None:
        qual = self.ctx.qualname(node.func) or ""
        hint = SHARDING.get(qual) or (SPMD_HINT if qual.startswith(SPMD) else None)
        if hint is not None:
            self.ctx.report("NM230", node, call=short(node), fixed=hint)
