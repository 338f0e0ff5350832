"""NM201-NM208: process group, launch, ranks and collectives move from torch_xla to torch.distributed.

Ranks and sizes are read from the variables torchrun sets (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), with the
defaults 0 / 1 / 0 that the legacy calls returned in a single process: no process group is needed to ask,
just as torch_xla needed none.
"""

from __future__ import annotations

import libcst as cst

from neuron_migrate.rules.patterns import XM, arg, code, short, string_value
from neuron_migrate.rules.rewrites import (LOOSE_PARENTS, assigned_name, dist, env_int, is_statement, keep_parens,
                                     local_rank, only_args, paren, rank, replace_statement)
from neuron_migrate.rules.target import target
from neuron_migrate.rules import Rule
from neuron_migrate.syntax.parse import expression

XR = "torch_xla.runtime"
XMP = "torch_xla.distributed.xla_multiprocessing"

RANK_CALLS = {
    f"{XM}.get_ordinal": ("RANK", "0"),
    f"{XR}.global_ordinal": ("RANK", "0"),
    f"{XM}.xrt_world_size": ("WORLD_SIZE", "1"),
    f"{XR}.world_size": ("WORLD_SIZE", "1"),
    f"{XM}.get_local_ordinal": ("LOCAL_RANK", "0"),
    f"{XR}.local_ordinal": ("LOCAL_RANK", "0"),
    f"{XR}.process_index": ("RANK", "0"),
    f"{XR}.process_count": ("WORLD_SIZE", "1"),
    f"{XR}.local_process_count": ("LOCAL_WORLD_SIZE", "1"),
}
IS_MASTER = frozenset({f"{XM}.is_master_ordinal"})
SPAWN = frozenset({f"{XMP}.spawn"})
INIT_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group",
                                "torch.distributed.distributed_c10d.init_process_group"})

REDUCE_OPS = {"sum": "SUM", "mul": "PRODUCT", "and": "BAND", "or": "BOR", "min": "MIN", "max": "MAX"}
REDUCE_CONSTANTS = {f"{XM}.REDUCE_{name.upper()}": op for name, op in REDUCE_OPS.items()}
ALL_REDUCE = frozenset({f"{XM}.all_reduce"})
ALL_GATHER = frozenset({f"{XM}.all_gather"})
REDUCE_SCATTER = frozenset({f"{XM}.reduce_scatter"})
ALL_TO_ALL = frozenset({f"{XM}.all_to_all"})
RENDEZVOUS = frozenset({f"{XM}.rendezvous"})
MESH_REDUCE = frozenset({f"{XM}.mesh_reduce"})


class RankAndWorldSize(Rule):
    """NM203: ordinals and world size from the launcher's environment; NM203 also for the master test."""

    codes = ("NM203",)
    triggers = (b"torch_xla",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual in RANK_CALLS:
            variable, default = RANK_CALLS[qual]
            given = arg(node, 0, "defval")
            if not only_args(node, given):
                return
            fixed = env_int(ctx, variable, code(given.value) if given else default)
        elif qual in IS_MASTER:
            local = arg(node, 0, "local")
            if not only_args(node, local):
                return
            value = code(local.value) if local else "True"
            if value not in ("True", "False"):
                return
            fixed = f"{local_rank(ctx) if value == 'True' else rank(ctx)} == 0"
            if not isinstance(ctx.current.parent, LOOSE_PARENTS):
                fixed = f"({fixed})"
        else:
            return
        if ctx.report("NM203", node, call=short(node), fixed=fixed):
            ctx.replace(node, expression(fixed))


class ProcessGroup(Rule):
    """NM201: `init_process_group("xla", init_method="xla://")` -> the `neuron` backend, `env://`."""

    codes = ("NM201",)
    triggers = (b"xla",)
    context = (b"init_process_group",)  # the last component of every name in INIT_PROCESS_GROUP

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in INIT_PROCESS_GROUP:
            return
        backend = arg(node, 0, "backend")
        method = arg(node, 1, "init_method")
        wrong = [a.value for a in (backend, method)
                 if a is not None and string_value(a.value) in ("xla", "xla://")]
        if not wrong:
            return
        fixed = {"xla": target(ctx).process_group_backend(), "xla://": ctx.string("env://")}
        text = ", ".join(code(w) for w in wrong)
        after = ", ".join(fixed[string_value(w)] for w in wrong)
        if ctx.report("NM201", node, text=text, fixed=after):
            for w in wrong:
                ctx.replace(w, expression(fixed[string_value(w)]))


class Spawn(Rule):
    """NM202: `xmp.spawn(fn, args=(...), nprocs=N)` -> `fn(local rank, ...)`, launched by torchrun."""

    codes = ("NM202",)
    triggers = (b"xla_multiprocessing",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in SPAWN:
            return
        fn = arg(node, 0, "fn")
        args = arg(node, 1, "args")
        nprocs = arg(node, 2, "nprocs")
        method = arg(node, 3, "start_method")
        if fn is None or not only_args(node, fn, args, nprocs, method) or not is_statement(ctx, node):
            return
        index = local_rank(ctx)

        def direct(call: cst.Call) -> str:
            spawned = arg(call, 1, "args")
            if spawned is None:
                rest = []
            elif isinstance(spawned.value, cst.Tuple):
                rest = [f"*{code(e.value)}" if isinstance(e, cst.StarredElement) else code(e.value)
                        for e in spawned.value.elements]
            else:
                rest = [f"*{code(spawned.value)}"]
            return f"{code(arg(call, 0, 'fn').value)}({', '.join([index, *rest])})"

        procs = code(nprocs.value) if nprocs is not None and isinstance(nprocs.value, cst.Integer) else "<NeuronCores>"
        if ctx.report("NM202", node, call=short(node), fixed=direct(node), nprocs=procs):
            ctx.replace(node, lambda new: expression(direct(new)))
            setup = target(ctx).select_device_statement(index)
            if "init_process_group" not in ctx.source.text and self._defined_here(fn.value):
                setup += f"{dist(ctx)}.init_process_group(backend={target(ctx).process_group_backend()}, " \
                         f"init_method={ctx.string('env://')})\n"
            ctx.insert_before(ctx.current.statement, setup)


    def _defined_here(self, fn: cst.BaseExpression) -> bool:
        """The spawned function is a `def` of this file (so that its missing process group is known)."""
        if not isinstance(fn, cst.Name):
            return False
        owner = self.ctx.analysis.lookup(fn.value, self.ctx.scope)
        return owner is not None and all(b.kind == "def" for b in owner.bindings[fn.value])


class Collectives(Rule):
    """NM204 all_reduce / all_gather, NM205 rendezvous, NM206 mesh_reduce, NM207 REDUCE_* constants,
    NM208 replica groups (manual)."""

    codes = ("NM204", "NM205", "NM206", "NM207", "NM208")
    triggers = (b"torch_xla",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.consumed: set[cst.CSTNode] = set()  # REDUCE_* nodes a rewritten call already translated

    def visit_Call(self, node: cst.Call) -> None:
        qual = self.ctx.qualname(node.func)
        if qual is not None and qual.startswith(XM) and node.args:
            # a reduce type handed to a torch_xla call stays a torch_xla reduce type unless the call is rewritten
            self.consumed.add(node.args[0].value)
        if qual in ALL_REDUCE:
            self._all_reduce(node)
        elif qual in ALL_GATHER:
            self._all_gather(node)
        elif qual in REDUCE_SCATTER:
            self._reduce_scatter(node)
        elif qual in ALL_TO_ALL:
            self._all_to_all(node)
        elif qual in RENDEZVOUS:
            self._rendezvous(node)
        elif qual in MESH_REDUCE:
            self._mesh_reduce(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._constant(node)

    def visit_Name(self, node: cst.Name) -> None:
        if type(self.ctx.current.parent) is not cst.Attribute:
            self._constant(node)

    # -- helpers ---------------------------------------------------------------------------------------
    def _groups(self, node: cst.Call, groups: cst.Arg | None) -> bool:
        """Replica groups have no one-line equivalent: mark the call and leave it (True)."""
        if groups is None or (isinstance(groups.value, cst.Name) and groups.value.value == "None"):
            return False
        self.ctx.report("NM208", node, call=short(node))
        self.ctx.handled.add(node.args[0].value)
        return True

    def _op(self, reduce_type: cst.BaseExpression) -> str | None:
        value = string_value(reduce_type)
        name = REDUCE_OPS.get(value) if value is not None else REDUCE_CONSTANTS.get(self.ctx.qualname(reduce_type))
        if name is None:
            return None
        self.ctx.handled.add(reduce_type)
        return f"{dist(self.ctx)}.ReduceOp.{name}"

    def _constant(self, node: cst.CSTNode) -> None:
        ctx = self.ctx
        if node in self.consumed:
            return
        name = REDUCE_CONSTANTS.get(ctx.qualname(node))
        if name is None or isinstance(ctx.current.small, (cst.Import, cst.ImportFrom)):
            return
        fixed = f"{dist(ctx)}.ReduceOp.{name}"
        if ctx.report("NM207", node, text=code(node), fixed=fixed):
            ctx.replace(node, expression(fixed))

    # -- the calls -------------------------------------------------------------------------------------
    def _all_reduce(self, node: cst.Call) -> None:
        ctx = self.ctx
        reduce_type = arg(node, 0, "reduce_type")
        inputs = arg(node, 1, "inputs")
        scale = arg(node, 2, "scale")
        groups = arg(node, 3, "groups")
        pin = arg(node, 4, "pin_layout")
        if reduce_type is None or inputs is None or not only_args(node, reduce_type, inputs, scale, groups, pin):
            return
        if self._groups(node, groups):
            return
        op = self._op(reduce_type.value)
        if op is None:
            return
        factor = None if scale is None or code(scale.value) in ("1", "1.0") else code(scale.value)
        if is_statement(ctx, node) and isinstance(inputs.value, (cst.List, cst.Tuple)):
            # the list form reduces every tensor in place
            d = dist(ctx)

            def in_place(call: cst.Call) -> list[str]:
                lines = []
                for element in arg(call, 1, "inputs").value.elements:
                    tensor = code(element.value)
                    lines.append(f"{d}.all_reduce({tensor}, op={op})")
                    if factor is not None:
                        lines.append(f"{tensor}.mul_({code(arg(call, 2, 'scale').value)})")
                return lines

            if ctx.report("NM204", node, call=short(node), fixed="; ".join(in_place(node))):
                replace_statement(ctx, ctx.current.statement, in_place)
            return
        if is_statement(ctx, node) or isinstance(inputs.value, (cst.List, cst.Tuple)):
            return  # a list held in a variable, or a list result used: left to NM199
        functional = ctx.module_ref("torch.distributed.nn.functional", "dist_fn")
        loose = isinstance(ctx.current.parent, LOOSE_PARENTS)

        def build(call: cst.Call) -> str:
            text = f"{functional}.all_reduce({code(arg(call, 1, 'inputs').value)}, op={op})"
            if factor is None:
                return text
            text += f" * {paren(code(arg(call, 2, 'scale').value))}"
            return text if loose else f"({text})"

        if ctx.report("NM204", node, call=short(node), fixed=build(node)):
            ctx.replace(node, lambda new: keep_parens(new, build(new)))

    def _all_gather(self, node: cst.Call) -> None:
        ctx = self.ctx
        value = arg(node, 0, "value")
        dim = arg(node, 1, "dim")
        groups = arg(node, 2, "groups")
        pin = arg(node, 4, "pin_layout")
        if value is None or not only_args(node, value, dim, groups, pin) or self._groups(node, groups):
            return
        torch = ctx.module_ref("torch")
        functional = ctx.module_ref("torch.distributed.nn.functional", "dist_fn")
        fixed = f"{torch}.cat({functional}.all_gather({{tensor}}), dim={code(dim.value) if dim else 0})"
        if ctx.report("NM204", node, call=short(node), fixed=fixed.format(tensor=code(value.value))):
            ctx.replace(node, lambda new: keep_parens(new, fixed.format(tensor=code(arg(new, 0, "value").value))))

    def _reduce_scatter(self, node: cst.Call) -> None:
        """`y = xm.reduce_scatter(op, x, scale, 0, n)`: this rank's 1/n of the reduced `x`, along dim 0."""
        ctx = self.ctx
        names = ("reduce_type", "input", "scale", "scatter_dim", "shard_count", "groups", "output", "pin_layout")
        given = [arg(node, i, name) for i, name in enumerate(names)]
        reduce_type, tensor, scale, dim, count, groups, output, _ = given
        target = assigned_name(ctx, node)
        if None in (reduce_type, tensor, scale, dim, count) or output is not None or not only_args(node, *given) \
                or not _same_name_free(tensor, target) or code(dim.value) != "0" or self._groups(node, groups):
            return
        op = self._op(reduce_type.value)
        if op is None:
            return
        d = dist(ctx)

        def scatter(call: cst.Call) -> list[str]:
            x, n = code(arg(call, 1, "input").value), code(arg(call, 4, "shard_count").value)
            lines = [f"{target} = {x}.new_empty({x}.shape[0] // {paren(n)}, *{x}.shape[1:])",
                     f"{d}.reduce_scatter_tensor({target}, {x}, op={op})"]
            factor = code(arg(call, 2, "scale").value)
            return lines + ([f"{target}.mul_({factor})"] if factor not in ("1", "1.0") else [])

        if ctx.report("NM204", node, call=short(node), fixed="; ".join(scatter(node))):
            replace_statement(ctx, ctx.current.statement, scatter)

    def _all_to_all(self, node: cst.Call) -> None:
        """`y = xm.all_to_all(x, 0, 0, n)`: chunk i of `x` goes to rank i; the received chunks, in rank order."""
        ctx = self.ctx
        names = ("value", "split_dimension", "concat_dimension", "split_count", "groups", "pin_layout")
        given = [arg(node, i, name) for i, name in enumerate(names)]
        tensor, split, concat, count, groups, _ = given
        target = assigned_name(ctx, node)
        if None in (tensor, split, concat, count) or not only_args(node, *given) \
                or not _same_name_free(tensor, target) or {code(split.value), code(concat.value)} != {"0"} \
                or self._groups(node, groups):
            return
        torch, d = ctx.module_ref("torch"), dist(ctx)

        def exchange(call: cst.Call) -> list[str]:
            x = code(arg(call, 0, "value").value)
            return [f"{target} = {torch}.empty_like({x})", f"{d}.all_to_all_single({target}, {x})"]

        if ctx.report("NM204", node, call=short(node), fixed="; ".join(exchange(node))):
            replace_statement(ctx, ctx.current.statement, exchange)

    def _rendezvous(self, node: cst.Call) -> None:
        ctx = self.ctx
        tag = arg(node, 0, "tag")
        if not only_args(node, tag) or not is_statement(ctx, node):
            return  # a payload to exchange: left to NM199 (all_gather_object)
        fixed = f"{dist(ctx)}.barrier()"
        if ctx.report("NM205", node, call=short(node), fixed=fixed):
            ctx.replace(node, expression(fixed))

    def _mesh_reduce(self, node: cst.Call) -> None:
        ctx = self.ctx
        tag = arg(node, 0, "tag")
        data = arg(node, 1, "data")
        fn = arg(node, 2, "reduce_fn")
        target = assigned_name(ctx, node)
        if data is None or fn is None or target is None or not only_args(node, tag, data, fn):
            return
        gathered = f"{target}_per_rank"
        if any(gathered in s.bindings or gathered in s.reads for s in ctx.analysis.scopes):
            return
        d = dist(ctx)

        def gather(call: cst.Call) -> list[str]:
            return [f"{gathered} = [None] * {d}.get_world_size()",
                    f"{d}.all_gather_object({gathered}, {code(arg(call, 1, 'data').value)})",
                    f"{target} = {paren(code(arg(call, 2, 'reduce_fn').value))}({gathered})"]

        if ctx.report("NM206", node, call=short(node), fixed="; ".join(gather(node))):
            replace_statement(ctx, ctx.current.statement, gather)


def _same_name_free(tensor: cst.Arg, target: str | None) -> bool:
    """The input is a plain name other than the assignment target (the new lines read it more than once)."""
    return target is not None and isinstance(tensor.value, cst.Name) and tensor.value.value != target
