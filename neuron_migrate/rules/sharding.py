"""NM230-NM234: sharded training. torch_xla's FSDP becomes FSDP2 `fully_shard` (NM231), its ZeRO-1 optimizer
torch.distributed's (NM232), NxD's tensor-parallel layers plain layers and a DTensor plan (NM233), SPMD meshes and
parameter shardings DeviceMesh and `distribute_tensor` (NM234); what does not carry over one to one is marked
(NM230), with the native pieces named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.engine.facts import fact
from neuron_migrate.engine.names import Occurrence, dotted_str
from neuron_migrate.rules import Rule
from neuron_migrate.rules.patterns import arg, code, reads_of, short, string_value
from neuron_migrate.rules.rewrites import dist, paren, replace_statement, world_size
from neuron_migrate.rules.target import target
from neuron_migrate.syntax.parse import expression

FSDP = frozenset({"torch_xla.distributed.fsdp.XlaFullyShardedDataParallel",
                  "torch_xla.distributed.fsdp.xla_fully_sharded_data_parallel.XlaFullyShardedDataParallel"})
TRANSFORMER_POLICY = frozenset({"torch_xla.distributed.fsdp.wrap.transformer_auto_wrap_policy",
                                "torch_xla.distributed.fsdp.transformer_auto_wrap_policy"})
SIZE_POLICY = frozenset({"torch_xla.distributed.fsdp.wrap.size_based_auto_wrap_policy",
                         "torch_xla.distributed.fsdp.size_based_auto_wrap_policy"})
# fully_shard takes the modules to shard, not a policy; torch_xla's size-based policy walked the model and wrapped
# each submodule holding `min_num_params` parameters outside the submodules it had already wrapped (not inside an
# nn.MultiheadAttention, never an nn.ModuleList / nn.ModuleDict): a recursive walk the program should name itself.
SIZE_POLICY_WHY = ("a size-based policy has no `fully_shard` counterpart: call `fully_shard` on each block it "
                   "wrapped (the submodules over `min_num_params` parameters), or name the block classes")
POLICIES = SIZE_POLICY | TRANSFORMER_POLICY
# torch's policies of the same names take the same keywords (`min_num_params`, `force_leaf_modules`,
# `exclude_wrap_modules`, `transformer_layer_cls`), but each FSDP calls its own by keyword (torch_xla's with
# `unwrapped_params=`, torch's with `nonwrapped_numel=`): a policy moves with the FSDP that calls it, never alone.
TORCH_WRAP = "torch.distributed.fsdp.wrap"
PARTIAL = frozenset({"functools.partial"})
CONSOLIDATE = frozenset({f"torch_xla.distributed.fsdp.{m}{f}" for m in ("", "state_dict_utils.")
                         for f in ("consolidate_sharded_model_checkpoints", "consolidate_sharded_state_dicts")})
ZERO = frozenset({"torch_xla.distributed.zero_redundancy_optimizer.ZeroRedundancyOptimizer"})

FSDP_HINT = "FSDP2 `torch.distributed.fsdp.fully_shard(module, mesh=init_device_mesh(\"neuron\", (world_size,)))` " \
            "on each block and then on the model"
DCP_HINT = "`torch.distributed.checkpoint` (`dcp.save({\"model\": get_model_state_dict(model), \"optim\": " \
           "get_optimizer_state_dict(model, optimizer)}, checkpoint_id=folder)`; `dcp_to_torch_save` makes one file)"
ZERO_HINT = "`torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=...)` with the gradients " \
            "averaged over the ranks and, unless it was given grad_clipping=False, " \
            "`torch.nn.utils.clip_grad_norm_(params, max_norm or 1.0)` before each `step()`"

# What an NM230 marker asks for (its few words; the finding and `explain` say the rest).
TODO_FSDP = "shard with FSDP2 fully_shard by hand"
TODO_DCP = "save with torch.distributed.checkpoint"
# The consolidation joins the shards the program itself wrote: once migrated, those are native, and the one file is
# a full state_dict gathered on the CPU (or DCP's folder made one); the converter is for the shards of old runs.
TODO_FULL = "save a full state_dict"
FULL_HINT = "a full state_dict instead of the shards (`torch.save(get_model_state_dict(model, options=" \
            "StateDictOptions(full_state_dict=True, cpu_offload=True)), path)` on rank 0, every rank calling it), " \
            "or `dcp.save` and `dcp_to_torch_save` for one file; the shards written before the migration convert " \
            "without torch_xla: `neuron-migrate checkpoint convert SHARDS_FOLDER model.pt`"
TODO_ZERO = "use the native ZeRO-1 optimizer by hand"
TODO_SPMD = "shard with DeviceMesh / DTensor"

# XlaFullyShardedDataParallel's keywords without a meaning for FSDP2 (the reason is in NM231's catalogue entry).
FSDP_DROPPED = frozenset({
    "flatten_parameters", "execute_sharding_on_init", "optimization_barrier_in_forward",
    "optimization_barrier_in_backward", "sync_on_finalization", "disable_reshard_on_root", "shard_param_on_dim_0",
    "pin_layout_in_collective_ops", "reduce_scatter_bucket_size_mb", "coalesce_all_gather_ops",
    "_shard_size_multiple", "_use_xla_patched_linear", "_debug_msg", "_debug_print", "_debug_dummy_forward_pass",
    "_debug_dummy_all_gather_op", "_debug_dummy_all_reduce_op", "_debug_dummy_reduce_scatter_op",
    "_debug_dummy_optimization_barrier_op",
})
# ... and those that change what is computed or where (marked): buffer_dtype, sharding_groups / _rank /
# _world_size, auto_wrapper_callable, param_init_fn, and any auto_wrap_policy but the transformer one.
FSDP_MAPPED = frozenset({"reshard_after_forward", "compute_dtype", "fp32_reduce_scatter", "auto_wrap_policy"})
# FSDP1 (`torch.distributed.fsdp.FullyShardedDataParallel`) takes a wrap policy as torch_xla's FSDP did, and the
# buffers' dtype in its MixedPrecision: what FSDP2 cannot take, it can.
FSDP1_MAPPED = FSDP_MAPPED | {"buffer_dtype", "flatten_parameters"}
FSDP1_HINT = "FSDP1 `torch.distributed.fsdp.FullyShardedDataParallel(module, auto_wrap_policy=...)`, a wrap " \
             "policy moved to torch's of the same name"

# ZeroRedundancyOptimizer's keywords without a native meaning (dropped) and those that change the result (marked
# unless they hold their default).
ZERO_DROPPED = frozenset({"pin_layout", "bucket_cap_mb_all_gather", "bucket_cap_mb_reduce_scatter",
                          "use_grad_acc_hook"})
ZERO_DEFAULTS = {"optimizer_dtype": "None", "sharding_groups": "None", "grad_norm_groups": "None",
                 "lazy_init": "False", "save_master_weights": "False", "higher_cc_precision": "False"}


@fact
def fully_sharded(ctx) -> set[str]:
    """The names bound to a model FSDP2 now shards (filled as NM231 rewrites): its gradients are reduced by
    FSDP, so a step on an optimizer over them needs no averaging (rules/gradients.py asks)."""
    return set()


def _free_name(ctx, *candidates: str) -> str:
    taken = lambda n: any(n in s.bindings or n in s.reads for s in ctx.analysis.scopes)  # noqa: E731
    return next((n for n in candidates if not taken(n)), candidates[-1] + "_")


def _literal(node: cst.BaseExpression | None) -> str | None:
    """True / False / None as text; None for anything else."""
    return node.value if isinstance(node, cst.Name) and node.value in ("True", "False", "None") else None


def _alone(occ: Occurrence, node: cst.Call) -> str | None:
    """"assign" / "return" when `node` is the whole value of the only small statement on its line."""
    small, line = occ.small, occ.statement
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    if isinstance(small, cst.Assign) and small.value is node and len(small.targets) == 1:
        return "assign"
    if isinstance(small, cst.Return) and small.value is node:
        return "return"
    return None


def _names_in(node: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n)

        def visit_Attribute(self, n: cst.Attribute) -> None:
            found.append(n)
    node.visit(Collect())
    return found


def _reads_in(node: cst.CSTNode) -> list[str]:
    """The names read in `node` (the heads of attribute chains; not attribute or keyword names)."""
    found: list[str] = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)
            return False
    node.visit(Collect())
    return found


class DroppedReads:
    """Reads an edit takes away; an import they leave without a read goes (linters would flag it: F401)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.counts: dict[tuple[int, str], int] = {}
        self.reused: set[str] = set()  # names the new code reads again (the block classes of a wrap policy)

    def add(self, node: cst.CSTNode) -> None:
        ctx = self.ctx
        for name in _reads_in(node):
            scope = ctx.analysis.lookup(name, ctx.current.scope)
            if scope is not None:
                self.counts[(id(scope), name)] = self.counts.get((id(scope), name), 0) + 1

    def drop_imports(self) -> None:
        ctx = self.ctx
        scopes = {id(sc): sc for sc in ctx.analysis.scopes}
        for (key, name), count in self.counts.items():
            scope = scopes[key]
            bindings = scope.bindings.get(name, [])
            if name in self.reused or len(bindings) != 1 or bindings[0].kind != "import" \
                    or (bindings[0].qualname or "").split(".")[0] == "torch_xla" or reads_of(ctx, name, scope) != count:
                continue  # torch_xla's imports: the engine's tidy-up (NM190)
            statement = bindings[0].node
            if isinstance(statement, (cst.Import, cst.ImportFrom)) and not isinstance(statement.names, cst.ImportStar):
                if len(statement.names) == 1:
                    ctx.remove(statement)
                else:
                    ctx.replace(statement, lambda old, name=name: _without_alias(old, name))


def _without_alias(statement, name: str):
    kept = [a for a in statement.names if _bound(a) != name]
    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return statement.with_changes(names=kept)


@dataclass
class Policy:
    """The classes a `transformer_auto_wrap_policy` names (None: no policy; `marked`: one not understood)."""

    classes: list[str] | None = None
    marked: str = ""
    statement: cst.CSTNode | None = None  # `policy = partial(...)`, read only by the wrap: it goes with it


class FullyShard(Rule):
    """NM231: `XlaFullyShardedDataParallel(model, ...)` -> `fully_shard` on each block the wrap policy names, then
    on the model, on a 1-D DeviceMesh over every process; `model.module` -> `model`; NM230 for the rest."""

    codes = ("NM231", "NM255", "NM230")
    triggers = (b"XlaFullyShardedDataParallel", b"consolidate_sharded", b"get_shard_metadata")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        # (scope, name) -> the value bound to it by an assignment alone on its line, and that line
        self.policies: dict[tuple[int, str], tuple[cst.BaseExpression, cst.CSTNode]] = {}
        self.wrapped: dict[tuple[int, str], bool] = {}  # (scope, name) of FSDP targets -> rewritten
        self.dropped = DroppedReads(ctx)
        self.assigned: dict[tuple[int, str], list[cst.BaseExpression]] = {}  # every value a plain name is bound to
        self.policy_reads: list[tuple[Occurrence, cst.CSTNode]] = []  # torch_xla's wrap policies, where read
        self.moved = False  # an FSDP call was rewritten (FSDP2 or FSDP1)
        self.held = False  # an FSDP call was marked: torch_xla's policies stay for it
        self.fsdp1: list[tuple[Occurrence, cst.Call, str | None, list[str]]] = []  # FSDP1's calls, made in finish

    def finish(self) -> None:
        ctx = self.ctx
        held = self.held  # an FSDP the file keeps calls torch_xla's policies: the others cannot take torch's
        for occ, node, name, options, why2 in self.fsdp1:
            ctx.current = occ
            given = arg(node, None, "auto_wrap_policy")
            if held and given is not None and _literal(given.value) != "None":
                why = "another FSDP call of this file stays torch_xla's, and the wrap policies with it"
                ctx.report("NM230", node, call=short(node), fixed=f"{FSDP1_HINT} ({why})", todo=TODO_FSDP)
                if name is not None:
                    self.wrapped[(id(occ.scope), name)] = False
                continue
            self._fsdp1(node, name, options, why2)
        ctx.current = None
        self.dropped.drop_imports()
        self._move_policies()

    def _move_policies(self) -> None:
        """torch_xla's wrap policies still read once every FSDP of the file moved: torch's of the same name."""
        ctx = self.ctx
        if not self.moved or self.held:
            return
        for occ, node in self.policy_reads:
            if node in ctx.handled:
                continue  # went with the wrap (FSDP2's blocks)
            ctx.current = occ
            ctx.handled.add(node)
            attribute = ctx.qualname(node).rsplit(".", 1)[-1]
            ctx.replace(node, expression(f"{ctx.module_ref(TORCH_WRAP, 'fsdp_wrap')}.{attribute}"))
        ctx.current = None

    def visit_Name(self, node: cst.Name) -> None:
        occ = self.ctx.current
        if not (type(occ.parent) is cst.Attribute and occ.parent.value is node):
            self._policy_read(node)

    def _policy_read(self, node: cst.CSTNode) -> None:
        occ = self.ctx.current
        if type(occ.small) not in (cst.Import, cst.ImportFrom) and self.ctx.qualname(node) in POLICIES:
            self.policy_reads.append((occ, node))

    # -- what the file holds ---------------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        occ = self.ctx.current
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and occ.small is node \
                and isinstance(occ.statement, cst.SimpleStatementLine) and len(occ.statement.body) == 1:
            self.policies[(id(occ.scope), node.targets[0].target.value)] = (node.value, occ.statement)
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self.assigned.setdefault((id(occ.scope), node.targets[0].target.value), []).append(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        """`model.module` where `model` was wrapped and now is the model itself."""
        ctx = self.ctx
        self._policy_read(node)
        if node.attr.value != "module" or not isinstance(node.value, cst.Name):
            return
        scope = ctx.analysis.lookup(node.value.value, ctx.current.scope)
        if scope is not None and self.wrapped.get((id(scope), node.value.value)):
            ctx.replace(node, cst.Name(node.value.value))

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual in FSDP:
            self._fsdp(node)
        elif qual in CONSOLIDATE:
            ctx.report("NM230", node, call=short(node), fixed=FULL_HINT, todo=TODO_FULL)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "get_shard_metadata" \
                and isinstance(node.func.value, cst.Name):
            scope = ctx.analysis.lookup(node.func.value.value, ctx.current.scope)
            if scope is not None and (id(scope), node.func.value.value) in self.wrapped:
                ctx.report("NM230", node, call=short(node), fixed=DCP_HINT, todo=TODO_DCP)

    # -- the rewrite -----------------------------------------------------------------------------------------
    def _fsdp(self, node: cst.Call) -> None:
        ctx = self.ctx
        occ = ctx.current
        module = arg(node, 0, "module")
        form = _alone(occ, node)
        name = None
        if form == "assign" and isinstance(occ.small.targets[0].target, cst.Name):
            name = occ.small.targets[0].target.value
        # what the model is read as after the wrap (`model`, `self.model`): FSDP reduces its gradients, and NM107 does
        # not compile it (TorchNeuron compiles SimpleFSDP, not FSDP's hooks)
        bound = dotted_str(occ.small.targets[0].target) if form == "assign" else None
        keywords, why = self._keywords(node, module)
        policy = self._policy(arg(node, None, "auto_wrap_policy"))
        why = why or policy.marked
        if not why and policy.classes and form is None:
            why = "the wrap policy needs a statement of its own"
        if why:
            options, why1 = self._fsdp1_options(node, module)
            if not why1:  # FSDP1 takes the policy (or the option) FSDP2 has no form for: once the file is read
                self.fsdp1.append((occ, node, name, options, why))
                if name is not None:
                    self.wrapped[(id(occ.scope), name)] = False  # FSDP1 wraps: `model.module` stays
                if bound is not None:
                    ctx.facts.fully_sharded.add(bound)
                return
            ctx.report("NM230", node, call=short(node), fixed=f"{FSDP_HINT} ({why})", todo=TODO_FSDP)
            self.held = True
            if name is not None:
                self.wrapped[(id(occ.scope), name)] = False
            return
        if name is not None:
            self.wrapped[(id(occ.scope), name)] = False
        if not ctx.report("NM231", node, call=short(node), fixed=FSDP_HINT):
            self.held = True
            return
        self.moved = True
        if name is not None:
            self.wrapped[(id(occ.scope), name)] = True
        if bound is not None:
            ctx.facts.fully_sharded.add(bound)
        given = arg(node, None, "auto_wrap_policy")
        for inner in _names_in(given.value) if given is not None else ():
            ctx.handled.add(inner)
        if given is not None and not isinstance(given.value, cst.Name):
            self.dropped.add(given.value)
        fsdp = ctx.module_ref("torch.distributed.fsdp", "fsdp")
        mesh_of = f"{dist(ctx)}.device_mesh.init_device_mesh({target(ctx).device_type()}, ({world_size(ctx)},))"
        if form is None:
            ctx.replace(node, expression(f"{fsdp}.fully_shard({code(module.value)}, mesh={mesh_of}{keywords})"))
            return
        self.dropped.reused.update(_head(expression(c)) for c in policy.classes or ())
        if policy.statement is not None:
            self._take_policy(policy.statement)
        mesh = _free_name(ctx, "mesh", "fsdp_mesh")
        lines = [f"{mesh} = {mesh_of}"]
        if keywords and policy.classes:
            held = _free_name(ctx, "fsdp_options")
            lines.append(f"{held} = dict({keywords[2:]})")
            keywords = f", **{held}"
        model = code(module.value)
        if policy.classes and not isinstance(module.value, (cst.Name, cst.Attribute)):
            model = name or _free_name(ctx, "model", "sharded_model")
            lines.append(f"{model} = {code(module.value)}")
        if policy.classes:
            sub = _free_name(ctx, "submodule", "block")
            kinds = policy.classes[0] if len(policy.classes) == 1 else f"({', '.join(policy.classes)})"
            lines += [f"for {sub} in {paren(model)}.modules():",
                      f"    if isinstance({sub}, {kinds}):",
                      f"        {fsdp}.fully_shard({sub}, mesh={mesh}{keywords})"]
        call = f"{fsdp}.fully_shard({model}, mesh={mesh}{keywords})"
        small = occ.small
        lines.append(f"return {call}" if form == "return" else f"{code(small.targets[0].target)} = {call}")
        statement = occ.statement

        def build(old: cst.SimpleStatementLine) -> cst.FlattenSentinel:
            new = list(cst.parse_module("\n".join(lines) + "\n").body)
            new[0] = new[0].with_changes(leading_lines=old.leading_lines)
            return cst.FlattenSentinel(new)
        ctx.replace(statement, build)

    def _fsdp1_options(self, node: cst.Call, module: cst.Arg | None) -> tuple[list[str], str]:
        """The keywords FSDP1 takes for the legacy ones (`mixed_precision=...`), or why they cannot be mapped."""
        ctx = self.ctx
        if module is None or any(a.star for a in node.args):
            return [], "the module is not passed plainly"
        for a in node.args:
            if a is not module and a.keyword is None:
                return [], "positional options"
            key = a.keyword.value if a.keyword is not None else None
            if key is not None and key not in FSDP_DROPPED and key not in FSDP1_MAPPED:
                return [], f"`{key}` has no one-to-one counterpart"
        policy = arg(node, None, "auto_wrap_policy")
        if policy is not None and not self._known_policy(policy.value):
            return [], "the wrap policy is not torch_xla's size-based or transformer policy, found in this file"
        fsdp = ctx.module_ref("torch.distributed.fsdp", "fsdp")
        torch = ctx.module_ref("torch")
        options = [f"device_id={target(ctx).current_device()}"]
        reshard = arg(node, None, "reshard_after_forward")
        value = _literal(reshard.value) if reshard is not None else "True"
        if value != "True":  # FSDP1's default, FULL_SHARD, reshards after the forward pass
            grad_op = f"{fsdp}.ShardingStrategy.SHARD_GRAD_OP"
            options.append(f"sharding_strategy={grad_op}" if value == "False" else
                           f"sharding_strategy=({fsdp}.ShardingStrategy.FULL_SHARD if {code(reshard.value)} "
                           f"else {grad_op})")
        flatten = arg(node, None, "flatten_parameters")
        value = _literal(flatten.value) if flatten is not None else "True"
        if value != "True":  # the parameters as they were (their names, one group each): FSDP1 keeps them so
            options.append("use_orig_params=True" if value == "False" else
                           f"use_orig_params=not {paren(code(flatten.value))}")
        given = {k: arg(node, None, k) for k in ("compute_dtype", "fp32_reduce_scatter", "buffer_dtype")}
        dtypes = {k: (code(a.value) if a is not None and _literal(a.value) != "None" else None)
                  for k, a in given.items()}
        compute = dtypes["compute_dtype"] or f"{torch}.float32"  # torch_xla's defaults: float32, buffers alike
        fp32 = _literal(given["fp32_reduce_scatter"].value) if given["fp32_reduce_scatter"] is not None else "False"
        reduce = compute if fp32 == "False" else f"{torch}.float32" if fp32 == "True" \
            else f"({torch}.float32 if {dtypes['fp32_reduce_scatter']} else {compute})"
        buffers = dtypes["buffer_dtype"] or compute
        if {compute, reduce, buffers} != {f"{torch}.float32"}:
            options.append(f"mixed_precision={fsdp}.MixedPrecision(param_dtype={compute}, reduce_dtype={reduce}, "
                           f"buffer_dtype={buffers})")
        return options, ""

    def _known_policy(self, value: cst.BaseExpression, seen: int = 0) -> bool:
        """None, torch_xla's size-based or transformer policy, `partial(<it>, keyword=...)`, or a name this file
        binds only to those (and to literals on other paths, `policy = "size_based"` before the branch that
        chooses: no callable either FSDP could take): what torch's policy of the same name replaces."""
        ctx = self.ctx
        if _literal(value) == "None" or ctx.qualname(value) in POLICIES:
            return True
        if seen and isinstance(value, (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float)):
            return True
        if isinstance(value, cst.Call) and ctx.qualname(value.func) in PARTIAL and value.args \
                and value.args[0].keyword is None and not value.args[0].star \
                and ctx.qualname(value.args[0].value) in POLICIES \
                and all(a.keyword is not None for a in value.args[1:]):
            return True
        if not isinstance(value, cst.Name) or seen:
            return False
        scope = ctx.analysis.lookup(value.value, ctx.current.scope)
        bound = scope.bindings.get(value.value, []) if scope is not None else []
        values = self.assigned.get((id(scope), value.value), [])
        return bool(bound) and len(bound) == len(values) and all(b.kind == "assign" for b in bound) \
            and all(self._known_policy(v, 1) for v in values)

    def _fsdp1(self, node: cst.Call, name: str | None, options: list[str], why: str) -> None:
        """`FullyShardedDataParallel(module, <the options kept>, device_id=..., mixed_precision=...)` in place;
        `why` FSDP2 could not take the call."""
        ctx = self.ctx
        if not ctx.report("NM255", node, call=short(node), fixed=f"{FSDP1_HINT} (for FSDP2: {why})"):
            self.held = True
            return
        self.moved = True
        func = expression(f"{ctx.module_ref('torch.distributed.fsdp', 'fsdp')}.FullyShardedDataParallel")
        skip = FSDP_DROPPED | (FSDP1_MAPPED - {"auto_wrap_policy"})
        added = [cst.Arg(value=a.value, keyword=a.keyword, equal=a.equal)
                 for a in expression(f"f({', '.join(options)})").args]

        def build(old: cst.Call) -> cst.Call:
            kept = [a for a in old.args if a.keyword is None or a.keyword.value not in skip
                    and not (a.keyword.value == "auto_wrap_policy" and _literal(a.value) == "None")]
            commas = [a.comma for a in old.args[:-1]]
            comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            if commas and all(isinstance(c, cst.Comma) and isinstance(c.whitespace_after, cst.ParenthesizedWhitespace)
                              for c in commas):
                comma = commas[-1]  # one argument a line: so are the new ones
                kept = [a.with_changes(comma=comma) for a in kept]
            args = [*kept[:-1], kept[-1].with_changes(comma=comma), *(a.with_changes(comma=comma) for a in added)]
            args[-1] = args[-1].with_changes(comma=old.args[-1].comma)
            return old.with_changes(func=func, args=args)
        ctx.replace(node, build)

    def _take_policy(self, statement: cst.SimpleStatementLine) -> None:
        """The policy's assignment goes with the wrap that read it; its names are handled here (no NM199)."""
        ctx = self.ctx
        ctx.remove(statement)
        self.dropped.add(statement.body[0].value)
        for node in _names_in(statement):
            ctx.handled.add(node)

    def _keywords(self, node: cst.Call, module: cst.Arg | None) -> tuple[str, str]:
        """The keywords `fully_shard` takes for the legacy ones (`, mp_policy=...`), or why they cannot be mapped."""
        ctx = self.ctx
        if module is None or any(a.star for a in node.args):
            return "", "the module is not passed plainly"
        for a in node.args:
            if a is not module and a.keyword is None:
                return "", "positional options"
            key = a.keyword.value if a.keyword is not None else None
            if key is not None and key not in FSDP_DROPPED and key not in FSDP_MAPPED:
                return "", f"`{key}` has no one-to-one counterpart"
        out = ""
        reshard = arg(node, None, "reshard_after_forward")
        if reshard is not None:
            out += f", reshard_after_forward={code(reshard.value)}"
        dtype = arg(node, None, "compute_dtype")
        fp32 = arg(node, None, "fp32_reduce_scatter")
        if dtype is not None and _literal(dtype.value) != "None":
            fp32_value = _literal(fp32.value) if fp32 is not None else "False"
            if fp32_value not in ("True", "False"):
                return "", "`fp32_reduce_scatter` is not a literal"
            torch = ctx.module_ref("torch")
            reduce = f"{torch}.float32" if fp32_value == "True" else code(dtype.value)
            out += f", mp_policy={ctx.module_ref('torch.distributed.fsdp', 'fsdp')}.MixedPrecisionPolicy(" \
                   f"param_dtype={code(dtype.value)}, reduce_dtype={reduce})"
        return out, ""

    def _policy(self, given: cst.Arg | None) -> Policy:
        if given is None or _literal(given.value) == "None":
            return Policy()
        ctx = self.ctx
        value = given.value
        if isinstance(value, cst.Name):
            scope = ctx.analysis.lookup(value.value, ctx.current.scope)
            bound = scope.bindings.get(value.value, []) if scope is not None else []
            held = self.policies.get((id(scope), value.value))
            if len(bound) != 1 or bound[0].kind != "assign" or held is None or scope.reads.get(value.value) != 1:
                return Policy(marked="the wrap policy is not found in this file, or is used elsewhere too")
            value, statement = held
        if not (isinstance(value, cst.Call) and ctx.qualname(value.func) in PARTIAL):
            return Policy(marked="only `partial(transformer_auto_wrap_policy, transformer_layer_cls={...})` maps")
        first = arg(value, 0, None)
        classes = arg(value, None, "transformer_layer_cls")
        if first is not None and ctx.qualname(first.value) in SIZE_POLICY:
            return Policy(marked=SIZE_POLICY_WHY)
        if first is None or ctx.qualname(first.value) not in TRANSFORMER_POLICY or classes is None \
                or len(value.args) != 2 or not isinstance(classes.value, (cst.Set, cst.List, cst.Tuple)):
            return Policy(marked="only `partial(transformer_auto_wrap_policy, transformer_layer_cls={...})` maps")
        names = []
        for element in classes.value.elements:
            if not isinstance(element, cst.Element) or dotted_str(element.value) is None:
                return Policy(marked="the block classes are not plain names")
            names.append(code(element.value))
        if not names:
            return Policy(marked="no block class is named")
        return Policy(classes=names, statement=statement if isinstance(given.value, cst.Name) else None)


@dataclass
class ZeroSite:
    occ: Occurrence
    node: cst.Call
    name: str
    clip: str | None  # the max norm to clip to, None for no clipping
    steps: list[tuple[Occurrence, cst.Call]] = field(default_factory=list)


class ZeroOptimizer(Rule):
    """NM232: torch_xla's `ZeroRedundancyOptimizer(params, optimizer_class, ...)` ->
    `torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=...)`, with what torch_xla's did in
    its `step()` made explicit before each step of that optimizer in the file: averaging the gradients over the
    ranks and (its default) clipping their norm to 1.0. NM230 where the steps are not all found."""

    codes = ("NM232", "NM230")
    triggers = (b"ZeroRedundancyOptimizer",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.sites: list[ZeroSite] = []
        self.steps: list[tuple[Occurrence, cst.Call, int, str]] = []  # (occ, call, scope id, name)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "step" and isinstance(func.value, cst.Name):
            scope = ctx.analysis.lookup(func.value.value, ctx.current.scope)
            if scope is not None:
                self.steps.append((ctx.current, node, id(scope), func.value.value))
            return
        if ctx.qualname(func) not in ZERO:
            return
        occ = ctx.current
        clip, why = self._clip(node)
        name = occ.small.targets[0].target.value if _alone(occ, node) == "assign" \
            and isinstance(occ.small.targets[0].target, cst.Name) else None
        if why or name is None:
            ctx.report("NM230", node, call=short(node),
                       fixed=f"{ZERO_HINT} ({why or 'the optimizer is not bound to a name of its own'})",
                       todo=TODO_ZERO)
            return
        self.sites.append(ZeroSite(occ, node, name, clip))

    def _clip(self, node: cst.Call) -> tuple[str | None, str]:
        """The max norm the legacy optimizer clipped to (None: it did not), or why the call cannot be mapped."""
        if any(a.star == "*" for a in node.args) or arg(node, 0, "params") is None \
                or arg(node, 1, "optimizer_class") is None:
            return None, "the parameters or the optimizer class are not passed plainly"
        for a in node.args:
            key = a.keyword.value if a.keyword is not None else None
            if a.keyword is None and a not in (arg(node, 0, None), arg(node, 1, None)) and not a.star:
                return None, "positional options"
            if key in ZERO_DEFAULTS and (_literal(a.value) or "") != ZERO_DEFAULTS[key]:
                return None, f"`{key}` has no native counterpart"
        clipping = arg(node, None, "grad_clipping")
        on = _literal(clipping.value) if clipping is not None else "True"
        if on not in ("True", "False"):
            return None, "`grad_clipping` is not a literal"
        norm = arg(node, None, "max_norm")
        if on == "False":
            return None, ""
        if norm is None or _literal(norm.value) == "None":
            return "1.0", ""
        return code(norm.value), ""

    def finish(self) -> None:
        ctx = self.ctx
        for site in self.sites:
            ctx.current = site.occ
            steps = [(occ, call) for occ, call, scope, name in self.steps
                     if name == site.name and scope == id(site.occ.scope)]
            if not steps or not all(self._plain(occ, call) for occ, call in steps):
                ctx.report("NM230", site.node, call=short(site.node),
                           fixed=f"{ZERO_HINT} (the steps of `{site.name}` are not all plain statements here)",
                           todo=TODO_ZERO)
                continue
            if not ctx.report("NM232", site.node, call=short(site.node), fixed=ZERO_HINT):
                continue
            self._rewrite(site)
            for occ, _call in steps:
                ctx.current = occ
                ctx.insert_before(occ.statement, self._before_step(site))
        ctx.current = None

    @staticmethod
    def _plain(occ: Occurrence, call: cst.Call) -> bool:
        """`opt.step()` alone on its line: what goes before it runs exactly as often."""
        return isinstance(occ.small, cst.Expr) and occ.small.value is call and \
            isinstance(occ.statement, cst.SimpleStatementLine) and len(occ.statement.body) == 1

    def _rewrite(self, site: ZeroSite) -> None:
        """The call in place (its layout kept): the native class, `optimizer_class=` by keyword, the options
        without a native meaning and the clipping ones (now before each step) left out."""
        ctx = self.ctx
        func = expression(f"{ctx.module_ref('torch.distributed.optim', 'dist_optim')}.ZeroRedundancyOptimizer")
        skip = {"grad_clipping", "max_norm", *ZERO_DROPPED, *ZERO_DEFAULTS}
        second = arg(site.node, 1, None)
        no_space = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                   whitespace_after=cst.SimpleWhitespace(""))

        def build(old: cst.Call) -> cst.Call:
            args = []
            for original, a in zip(site.node.args, old.args):
                if a.keyword is not None and a.keyword.value in skip:
                    continue
                if original is second:
                    a = a.with_changes(keyword=cst.Name("optimizer_class"), equal=no_space)
                args.append(a)
            args[-1] = args[-1].with_changes(comma=old.args[-1].comma)
            return old.with_changes(func=func, args=args)
        ctx.replace(site.node, build)

    def _before_step(self, site: ZeroSite) -> str:
        """Average the gradients over the ranks and clip them, as torch_xla's step did."""
        ctx = self.ctx
        opt = site.name
        param = _free_name(ctx, "param", "_param")
        d = dist(ctx)
        params = f"[p for group in {opt}.param_groups for p in group[{ctx.string('params')}]]"
        size = world_size(ctx)
        world = size if "WORLD_SIZE" in ctx.facts.rank_names else f"{d}.get_world_size()"  # one name, as NM106's
        text = (f"if {size} > 1:\n"
                f"    for {param} in {params}:\n"
                f"        if {param}.grad is not None:\n"
                f"            {d}.all_reduce({param}.grad)\n"
                f"            {param}.grad /= {world}\n")
        if site.clip is not None:
            text += f"{ctx.module_ref('torch')}.nn.utils.clip_grad_norm_({params}, {site.clip})\n"
        return text


SPMD = ("torch_xla.distributed.spmd.", "torch_xla.experimental.xla_sharding.")
SPMD_HINT = "`init_device_mesh(\"neuron\", shape, mesh_dim_names=...)` and DTensor (`distribute_tensor`, " \
            "`parallelize_module`)"


SPMD_MODULES = ("torch_xla.distributed.spmd.", "torch_xla.distributed.spmd.xla_sharding.",
                "torch_xla.experimental.xla_sharding.")
MESH = frozenset(f"{m}Mesh" for m in SPMD_MODULES)
MARK_SHARDING = frozenset(f"{m}mark_sharding" for m in SPMD_MODULES)
ALL_DEVICES = frozenset({"numpy.arange", "range"})  # device_ids: every device in order, as init_device_mesh takes them
PARAMETER_NAMES = frozenset({"weight", "bias"})


class Spmd(Rule):
    """NM234: `xs.Mesh(np.arange(n), shape, axis_names)` with a 1-D or 2-D shape -> `init_device_mesh(...)`, and
    `xs.mark_sharding(module.weight, mesh, spec)` on such a mesh with a simple partition spec ->
    `module.weight = nn.Parameter(distribute_tensor(module.weight, mesh, placements))`; NM230 for the rest of SPMD."""

    codes = ("NM234", "NM230")
    triggers = (b"torch_xla",)
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return any(q.startswith(SPMD) for q in scan.quals)  # every report is on a name under one of them

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.meshes: dict[tuple[int, str], list[str] | None] = {}  # (scope, name) -> axis names (None: unnamed)
        self.dims: dict[tuple[int, str], int] = {}
        self.held: set[tuple[int, str]] = set()  # meshes reported but not rewritten
        self.dropped = DroppedReads(ctx)

    def finish(self) -> None:
        self.dropped.drop_imports()

    def visit_Call(self, node: cst.Call) -> None:
        qual = self.ctx.qualname(node.func) or ""
        if qual in MESH and self._mesh(node):
            return
        if qual in MARK_SHARDING and self._mark(node):
            return
        if qual.startswith(SPMD):
            self.ctx.report("NM230", node, call=short(node), fixed=SPMD_HINT, todo=TODO_SPMD)

    def _mesh(self, node: cst.Call) -> bool:
        ctx = self.ctx
        occ = ctx.current
        ids, shape, names = arg(node, 0, "device_ids"), arg(node, 1, "mesh_shape"), arg(node, 2, "axis_names")
        if ids is None or shape is None or len(node.args) != 2 + (names is not None) or _alone(occ, node) != "assign" \
                or not isinstance(occ.small.targets[0].target, cst.Name):
            return False
        inner = ids.value
        if isinstance(inner, cst.Call) and ctx.qualname(inner.func) in ("numpy.array", "builtins.list", "list") \
                and len(inner.args) == 1:
            inner = inner.args[0].value
        if not (isinstance(inner, cst.Call) and ctx.qualname(inner.func) in ALL_DEVICES) \
                or not isinstance(shape.value, cst.Tuple) or len(shape.value.elements) not in (1, 2):
            return False
        axis = None
        if names is not None:
            if not isinstance(names.value, cst.Tuple) or len(names.value.elements) != len(shape.value.elements):
                return False
            axis = [string_value(e.value) for e in names.value.elements]
            if None in axis:
                return False
        key = (id(occ.scope), occ.small.targets[0].target.value)
        if not ctx.report("NM234", node, call=short(node), fixed="`init_device_mesh(...)` over every process"):
            self.held.add(key)  # suppressed, or held back: the shardings over it cannot move either
            return True
        self.meshes[key], self.dims[key] = axis, len(shape.value.elements)
        for dropped in _names_in(ids.value):  # every device, in order: init_device_mesh takes them so
            ctx.handled.add(dropped)
        self.dropped.add(ids.value)
        named = f", mesh_dim_names={code(names.value)}" if names is not None else ""
        ctx.replace(node, expression(f"{dist(ctx)}.device_mesh.init_device_mesh({target(ctx).device_type()}, "
                                     f"{code(shape.value)}{named})"))
        return True

    def _mark(self, node: cst.Call) -> bool:
        ctx = self.ctx
        occ = ctx.current
        tensor, mesh, spec = arg(node, 0, "t"), arg(node, 1, "mesh"), arg(node, 2, "partition_spec")
        if tensor is None or mesh is None or spec is None or len(node.args) != 3 \
                or not (isinstance(occ.small, cst.Expr) and occ.small.value is node and len(occ.statement.body) == 1):
            return False
        t = tensor.value
        if not (isinstance(t, cst.Attribute) and t.attr.value in PARAMETER_NAMES and dotted_str(t) is not None) \
                or not isinstance(mesh.value, cst.Name) or not isinstance(spec.value, cst.Tuple):
            return False
        scope = ctx.analysis.lookup(mesh.value.value, occ.scope)
        key = (id(scope), mesh.value.value)
        if key in self.held:
            if ctx.report("NM234", node, call=short(node), fixed="`nn.Parameter(distribute_tensor(...))`"):
                ctx.fix_failed(ctx.decisions[-1], "its mesh stays an xs.Mesh")
            return True
        if key not in self.dims:
            return False
        names, ndim = self.meshes[key], self.dims[key]
        owner: dict[int, int] = {}  # mesh dimension -> the tensor dimension sharded over it
        for d, element in enumerate(spec.value.elements):
            value = element.value
            if _literal(value) == "None":
                continue
            m = int(value.value) if isinstance(value, cst.Integer) else \
                (names.index(string_value(value)) if names and string_value(value) in names else None)
            if m is None or m >= ndim or m in owner:
                return False
            owner[m] = d
        t_code = code(t)
        fixed = "`nn.Parameter(distribute_tensor(...))` with the matching placements"
        if not ctx.report("NM234", node, call=short(node), fixed=fixed):
            return True
        d_mod = ctx.module_ref("torch.distributed.tensor", "dtensor")
        placements = ", ".join(f"{d_mod}.Shard({owner[m]})" if m in owner else f"{d_mod}.Replicate()"
                               for m in range(ndim))
        nn = ctx.module_ref("torch.nn", "nn")
        replace_statement(ctx, occ.statement, lambda _call: [
            f"{t_code} = {nn}.Parameter({d_mod}.distribute_tensor({t_code}, {code(mesh.value)}, [{placements}]))"])
        return True


# -- NxD tensor parallelism ------------------------------------------------------------------------------------
NXD_LAYERS = "neuronx_distributed.parallel_layers."
LAYER_KINDS = {"ColumnParallelLinear": "Linear", "RowParallelLinear": "Linear", "ParallelEmbedding": "Embedding"}
LAYERS = {f"{NXD_LAYERS}{m}{cls}": cls for cls in LAYER_KINDS for m in ("", "layers.")}
LAYERS.update({f"neuronx_distributed.{cls}": cls for cls in LAYER_KINDS})
INIT_TP = frozenset({f"{NXD_LAYERS}parallel_state.initialize_model_parallel",
                     "neuronx_distributed.parallel_state.initialize_model_parallel"})
MODULE_LIST = frozenset({"torch.nn.ModuleList", "torch.nn.modules.container.ModuleList"})
# The layers' arguments: passed on to the plain layer, dropped (no meaning natively) or, other than their default,
# marked (NM230). Checked against neuronx-distributed's parallel_layers/layers.py.
LINEAR_PASSED = {"input_size": 0, "output_size": 1, "bias": 2, "dtype": 4, "device": 5}  # position 3: the flag
LINEAR_DROPPED = frozenset({"keep_master_weight"})
LINEAR_DEFAULTS = {"stride": "1", "sequence_parallel_enabled": "False", "skip_bias_add": "False", "pad": "False",
                   "init_method": "None"}
EMBEDDING_PASSED = ("num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq",
                    "sparse", "init_method", "device", "dtype", "shard_across_embedding", "pad")
TP_HINT = "plain `nn.Linear` / `nn.Embedding` layers and `parallelize_module(model, mesh[\"tp\"], {...: " \
          "ColwiseParallel(), ...: RowwiseParallel()})` on `init_device_mesh(\"neuron\", (dp, tp), " \
          "mesh_dim_names=(\"dp\", \"tp\"))`"
TODO_TP = "use DTensor tensor parallelism by hand"


@fact
def nxd_imports_taken(ctx) -> set[int]:
    """The ids of the neuronx_distributed imports NM233 removed: NM506 does not report them."""
    return set()


@dataclass
class Layer:
    occ: Occurrence
    node: cst.Call
    owner: str  # the class whose __init__ sets it
    attribute: str
    kind: str  # ColumnParallelLinear, ...
    style: str = ""  # the plan entry, once mapped
    plain: str = ""  # the plain layer's call


class TensorParallel(Rule):
    """NM233: NxD's tensor-parallel layers set in a model definition (`self.fc1 = ColumnParallelLinear(...)`) ->
    plain layers, and after the model is built (in the scope that called `initialize_model_parallel`, which becomes
    the DeviceMesh) one `parallelize_module` with the plan their kinds and attribute paths give. NM230 where the
    file's flow is not that one."""

    codes = ("NM233", "NM230")
    triggers = (b"ParallelLinear", b"ParallelEmbedding")
    context = (b"neuronx_distributed",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.layers: list[Layer] = []
        self.children: dict[str, list[tuple[str, str]]] = {}  # class -> [(attribute path part, child class)]
        self.inits: list[tuple[Occurrence, cst.Call]] = []
        self.builds: list[tuple[Occurrence, str, str, int]] = []  # (occ, class, target name, order)
        self.order: dict[int, int] = {}
        self.uses: dict[str, int] = {}  # head name -> reads the rewrite takes away
        self.imports: list[tuple[Occurrence, cst.CSTNode]] = []
        self.classes: set[str] = set()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.ctx.current.scope.kind == "module":
            self.classes.add(node.name.value)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not node.relative and (dotted_str(node.module) or "").split(".")[0] == "neuronx_distributed":
            self.imports.append((self.ctx.current, node))

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        occ = ctx.current
        self.order[id(node)] = len(self.order)
        qual = ctx.qualname(node.func)
        if qual in LAYERS:
            where = self._attribute_of(occ, node)
            if where is None:
                ctx.report("NM230", node, call=short(node), fixed=f"{TP_HINT} (the layer is not set in a model "
                           "definition's `__init__`)", todo=TODO_TP)
                return
            self.layers.append(Layer(occ, node, where[0], where[1], LAYERS[qual]))
        elif qual in INIT_TP:
            self.inits.append((occ, node))
        elif isinstance(node.func, cst.Name):
            self._child_or_build(occ, node)

    @staticmethod
    def _attribute_of(occ: Occurrence, node: cst.CSTNode) -> tuple[str, str] | None:
        """(class, attribute) of `self.<attribute> = <node>` alone on its line in a class's `__init__`."""
        scope = occ.scope
        small = occ.small
        if scope.kind != "function" or scope.parent is None or scope.parent.kind != "class" \
                or scope.node.name.value != "__init__" or not isinstance(small, cst.Assign) or small.value is not node \
                or len(small.targets) != 1:
            return None
        target = small.targets[0].target
        if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
            return scope.parent.node.name.value, target.attr.value
        return None

    def _child_or_build(self, occ: Occurrence, node: cst.Call) -> None:
        name = node.func.value
        where = self._attribute_of(occ, node)
        if where is not None:
            self.children.setdefault(where[0], []).append((where[1], name))
            return
        small = occ.small
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
                and occ.scope.kind in ("module", "function") and (small.value is node or _moved(small.value, node)):
            self.builds.append((occ, name, small.targets[0].target.value, self.order[id(node)]))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        """`self.blocks = nn.ModuleList(Block(...) for _ in ...)`: the class of the list's items, under `blocks.*`."""
        ctx = self.ctx
        occ = ctx.current
        small = occ.small
        if not isinstance(small, cst.Assign) or not isinstance(small.value, cst.Call) or small.value.func is not node:
            return
        if ctx.qualname(node) not in MODULE_LIST:
            return
        where = self._attribute_of(occ, small.value)
        first = arg(small.value, 0, "modules")
        inner = first.value if first is not None else None
        if isinstance(inner, (cst.GeneratorExp, cst.ListComp)):
            inner = inner.elt
        elif isinstance(inner, cst.List) and inner.elements:
            inner = inner.elements[0].value
        if where is not None and isinstance(inner, cst.Call) and isinstance(inner.func, cst.Name):
            self.children.setdefault(where[0], []).append((f"{where[1]}.*", inner.func.value))

    # -- the decision ----------------------------------------------------------------------------------------
    def finish(self) -> None:
        ctx = self.ctx
        if not self.layers:
            return
        plans = {}
        why = self._map_layers()
        roots = [b for b in self.builds if self._paths(b[1])]
        if not why:
            if len(self.inits) != 1:
                why = "`initialize_model_parallel(...)` is not called once in this file"
            elif len(roots) != 1:
                why = "the model is not built once in this file"
            else:
                init_occ, init = self.inits[0]
                build = roots[0]
                size = arg(init, 0, "tensor_model_parallel_size")
                if build[0].scope is not init_occ.scope or self.order[id(init)] > build[3]:
                    why = "the model is not built after `initialize_model_parallel(...)` in the same function"
                elif size is None or any(a is not size for a in init.args):
                    why = "`initialize_model_parallel(...)` takes more than the tensor-parallel size"
                elif not (isinstance(init_occ.small, cst.Expr) and init_occ.small.value is init
                          and len(init_occ.statement.body) == 1):
                    why = "`initialize_model_parallel(...)` is not a statement of its own"
                else:
                    plans = self._paths(build[1])
        if why:
            for layer in self.layers:
                ctx.current = layer.occ
                ctx.report("NM230", layer.node, call=short(layer.node), fixed=f"{TP_HINT} ({why})", todo=TODO_TP)
            ctx.current = None
            return
        init_occ, init = self.inits[0]
        ctx.current = init_occ
        if not ctx.report("NM233", init, call=short(init), fixed=TP_HINT):
            ctx.current = None
            return
        for layer in self.layers:
            ctx.current = layer.occ
            ctx.handled.add(layer.node)
            ctx.replace(layer.node, expression(layer.plain))
        self._mesh_and_plan(init_occ, init, roots[0], plans)
        self._drop_imports()
        ctx.current = None

    def _paths(self, cls: str, seen: frozenset = frozenset()) -> dict[str, str]:
        """The plan entries for a model of class `cls`: attribute path -> style."""
        if cls in seen:
            return {}
        out = {}
        for layer in self.layers:
            if layer.owner == cls:
                out[layer.attribute] = layer.style
        for attribute, child in self.children.get(cls, ()):
            for path, style in self._paths(child, seen | {cls}).items():
                out[f"{attribute}.{path}"] = style
        return out

    def _map_layers(self) -> str:
        """Map every layer to its plain layer and plan style; the reason when one cannot be."""
        ctx = self.ctx
        for layer in self.layers:
            ctx.current = layer.occ
            node = layer.node
            if any(a.star for a in node.args):
                return "a layer takes `*args` / `**kwargs`"
            nn = ctx.module_ref("torch.nn", "nn")
            t = ctx.module_ref("torch.distributed.tensor.parallel", "tp")
            replicate = f"{ctx.module_ref('torch.distributed.tensor', 'dtensor')}.Replicate()"
            if layer.kind == "ParallelEmbedding":
                values = {name: arg(node, i, name) for i, name in enumerate(EMBEDDING_PASSED)}
                if any(a not in values.values() for a in node.args):
                    return "an argument `ParallelEmbedding` does not take"
                sparse = values["sparse"]
                if sparse is not None and _literal(sparse.value) != "False":
                    return "`sparse` of `ParallelEmbedding`"
                init = values.pop("init_method")
                across, pad = values.pop("shard_across_embedding"), values.pop("pad")
                if init is not None or (pad is not None and _literal(pad.value) != "False"):
                    return f"`{'init_method' if init is not None else 'pad'}` of `ParallelEmbedding`"
                across_value = _literal(across.value) if across is not None else "False"
                if across_value not in ("True", "False"):
                    return "`shard_across_embedding` is not a literal"
                kind = "Embedding"
                layer.style = f"{t}.RowwiseParallel(input_layouts={replicate})" if across_value == "False" else \
                    f"{t}.ColwiseParallel(input_layouts={replicate}, output_layouts={replicate})"
            else:
                values = {name: arg(node, i, name) for name, i in LINEAR_PASSED.items()}
                flag = "gather_output" if layer.kind == "ColumnParallelLinear" else "input_is_parallel"
                known = set(LINEAR_PASSED) | LINEAR_DROPPED | set(LINEAR_DEFAULTS) | {flag}
                for a in node.args:
                    if a.keyword is not None and a.keyword.value not in known:
                        return f"`{a.keyword.value}` of `{layer.kind}`"
                    if a.keyword is None and a not in values.values() and a is not arg(node, 3, None):
                        return f"positional options of `{layer.kind}`"
                    if a.keyword is not None and a.keyword.value in LINEAR_DEFAULTS \
                            and (_literal(a.value) or "") != LINEAR_DEFAULTS[a.keyword.value] \
                            and not (a.keyword.value == "stride" and code(a.value) == "1"):
                        return f"`{a.keyword.value}` of `{layer.kind}`"
                given = arg(node, 3, flag)
                value = _literal(given.value) if given is not None else ("True" if flag == "gather_output" else "False")
                if value not in ("True", "False"):
                    return f"`{flag}` is not a literal"
                kind = "Linear"
                if layer.kind == "ColumnParallelLinear":
                    layer.style = f"{t}.ColwiseParallel(output_layouts={replicate})" if value == "True" \
                        else f"{t}.ColwiseParallel()"
                else:
                    layer.style = f"{t}.RowwiseParallel()" if value == "True" \
                        else f"{t}.RowwiseParallel(input_layouts={replicate})"
            if any(v is None for k, v in values.items() if k in ("input_size", "output_size", "num_embeddings",
                                                                  "embedding_dim")):
                return f"the sizes of `{layer.kind}` are not passed plainly"
            parts = []
            for i, (name, a) in enumerate(values.items()):
                if a is None:
                    continue
                parts.append(code(a.value) if a.keyword is None and i < 2 else f"{name}={code(a.value)}")
            layer.plain = f"{nn}.{kind}({', '.join(parts)})"
            self.uses[_head(node.func)] = self.uses.get(_head(node.func), 0) + 1
        ctx.current = None
        return ""

    def _mesh_and_plan(self, init_occ: Occurrence, init: cst.Call, build, plans: dict[str, str]) -> None:
        ctx = self.ctx
        self.uses[_head(init.func)] = self.uses.get(_head(init.func), 0) + 1
        mesh = _free_name(ctx, "device_mesh", "tp_device_mesh")
        device = target(ctx).device_type()
        q = ctx.quote
        world = world_size(ctx)
        start = f"{mesh} = {dist(ctx)}.device_mesh.init_device_mesh({device}, ("

        def mesh_line(call: cst.Call) -> str:  # the call as the other rules left it (its size rewritten too)
            size = code(arg(call, 0, "tensor_model_parallel_size").value)
            data = "1" if size == world else f"{world} // {paren(size)}"  # tensor parallel over every process
            return f"{start}{data}, {size}), mesh_dim_names=({q}dp{q}, {q}tp{q}))"
        replace_statement(ctx, init_occ.statement, lambda call: [mesh_line(call)])
        occ, _cls, name, _order = build
        ctx.current = occ
        t = ctx.module_ref("torch.distributed.tensor.parallel", "tp")
        entries = ", ".join(f"{q}{path}{q}: {style}" for path, style in plans.items())
        ctx.insert_after(occ.statement,
                         f"{name} = {t}.parallelize_module({name}, {mesh}[{q}tp{q}], {{{entries}}})\n")

    def _drop_imports(self) -> None:
        """The neuronx_distributed names the rewrite no longer reads leave their import."""
        ctx = self.ctx
        for occ, node in self.imports:
            if isinstance(node.names, cst.ImportStar):
                continue
            scope = occ.scope
            keep = [a for a in node.names
                    if not self.uses.get(_bound(a)) or reads_of(ctx, _bound(a), scope) != self.uses[_bound(a)]]
            if len(keep) == len(node.names):
                continue
            if not keep:
                ctx.facts.nxd_imports_taken.add(id(node))
                ctx.remove(occ.statement if len(occ.statement.body) == 1 else node)
            else:
                kept = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in keep]
                ctx.replace(node, lambda old, kept=kept: old.with_changes(names=kept, lpar=None, rpar=None))



def _bound(alias: cst.ImportAlias) -> str:
    return alias.asname.name.value if alias.asname is not None else dotted_str(alias.name).split(".")[0]


def _head(expr: cst.BaseExpression) -> str:
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else ""


def _moved(value: cst.BaseExpression, node: cst.Call) -> bool:
    """`Net(...).to(device)`: the build, placed."""
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to" \
        and value.func.value is node
