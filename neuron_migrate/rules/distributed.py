"""NM201-NM208: process group, launch, ranks and collectives move from torch_xla to torch.distributed.

Ranks and sizes are read from the variables torchrun sets (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), with the
defaults 0 / 1 / 0 that the legacy calls returned in a single process: no process group is needed to ask,
just as torch_xla needed none.
"""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.engine.edits import pure
from neuron_migrate.engine.facts import fact
from neuron_migrate.engine.names import dotted, dotted_str, not_a_read
from neuron_migrate.rules.patterns import (INIT_PROCESS_GROUP, XM, arg, code, has_star, respell_device, short,
                                          string_value)
from neuron_migrate.rules.checkpoint import cpu_copy, holds_no_tensor
from neuron_migrate.rules.device_names import bound_value
from neuron_migrate.rules.rewrites import (LOOSE_PARENTS, alone_on_line, assigned_name, assigned_values, dist, env_int,
                                     free_name, guard_statement, is_statement, keep_parens, local_rank, loose,
                                     one_line_body, only_args, paren, rank, replace_statement, several_processes,
                                     sole_body_if, world_size)
from neuron_migrate.rules.target import target
from neuron_migrate.rules import Rule
from neuron_migrate.syntax.parse import expression
from neuron_migrate.syntax.walk import children

XR = "torch_xla.runtime"
XMP = "torch_xla.distributed.xla_multiprocessing"
XLA_BACKEND = "torch_xla.distributed.xla_backend"

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

NATIVE = "torch.distributed."
REDUCE_OPS = {"sum": "SUM", "mul": "PRODUCT", "and": "BAND", "or": "BOR", "min": "MIN", "max": "MAX"}
REDUCE_CONSTANTS = {f"{XM}.REDUCE_{name.upper()}": op for name, op in REDUCE_OPS.items()}
ALL_REDUCE = frozenset({f"{XM}.all_reduce"})
ALL_GATHER = frozenset({f"{XM}.all_gather"})
REDUCE_SCATTER = frozenset({f"{XM}.reduce_scatter"})
ALL_TO_ALL = frozenset({f"{XM}.all_to_all"})
RENDEZVOUS = frozenset({f"{XM}.rendezvous"})
MESH_REDUCE = frozenset({f"{XM}.mesh_reduce"})
BROADCAST_MASTER_PARAM = frozenset({f"{XM}.broadcast_master_param"})
FETCH_GRADIENTS = frozenset({f"{XM}._fetch_gradients"})
# neuronx-distributed's group getters (`get_data_parallel_group(as_list=False)`): the process group, or with
# `as_list=True` its replica groups for torch_xla's collectives.
NXD_GROUP_GETTERS = ("neuronx_distributed.parallel_layers.parallel_state.get_",)


# annotations of a value that holds several tensors (`List[torch.Tensor]`, `list[Tensor]`, `Sequence[...]`)
LIST_ANNOTATION = re.compile(r"\b(?:List|list|Sequence|Tuple|tuple|Iterable|Collection)\b")


class RankAndWorldSize(Rule):
    """NM203: ordinals and world size from the launcher's environment; NM203 also for the master test."""

    codes = ("NM203",)
    triggers = (b"torch_xla",)
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(RANK_CALLS) or scan.any_qual(IS_MASTER)

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
            which = local_rank(ctx) if value == 'True' else rank(ctx)
            parent = ctx.current.parent
            if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not) \
                    and parent.expression is node and not node.lpar:
                # `not xm.is_master_ordinal()`: `LOCAL_RANK != 0` (comparisons bind tighter than `not`: it fits
                # wherever the `not` did), not `not (LOCAL_RANK == 0)` (ruff's SIM201)
                fixed = f"{which} != 0"
                if ctx.report("NM203", node, call=short(node), fixed=fixed):
                    ctx.replace(parent, lambda new: keep_parens(new, fixed))
                return
            fixed = f"{which} == 0"
            if not isinstance(parent, LOOSE_PARENTS):
                fixed = f"({fixed})"
        else:
            return
        if ctx.report("NM203", node, call=short(node), fixed=fixed):
            ctx.replace(node, expression(fixed))


class ProcessGroup(Rule):
    """NM201: `init_process_group("xla", init_method="xla://")` -> the `neuron` backend, `env://`, and the
    process bound to its own device first (torch_xla's Neuron integration did that from `LOCAL_RANK`)."""

    codes = ("NM201",)
    triggers = (b"xla",)
    context = (b"init_process_group",)  # the last component of every name in INIT_PROCESS_GROUP

    @classmethod
    def words(cls) -> tuple[str, ...]:
        """A call that spells no XLA backend (`init_process_group(args.dist_backend)`) in a function that spells no
        trigger is still reported where the file registered torch_xla's backend (`_map`): `check`'s lean parse
        keeps the function, as `rewrite`'s full one sees it."""
        return ("init_process_group",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.held: list[tuple] = []  # (occurrence, call, name, its "xla" literal): decided in finish

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in INIT_PROCESS_GROUP:
            return
        backend = arg(node, 0, "backend")
        if backend is not None and string_value(backend.value) is None:
            # `device = "xla"; dist.init_process_group(device)`: decided once NM102 has decided on the literal
            literal = bound_value(ctx, backend.value)
            if string_value(literal) == "xla":
                self.held.append((ctx.current, node, backend.value, literal))
                return
            if string_value(literal) is None and dotted(backend.value) and _registers_xla_backend(ctx):
                self._map(node, backend.value)
                return
        self._rewrite(node)

    def _map(self, node: cst.Call, value: cst.BaseExpression) -> None:
        """`init_process_group(backend=args.distributed_backend)` in a file that registered torch_xla's `xla`
        backend: the value comes from a launch script, a default or a configuration, and may still be "xla" there;
        it becomes the neuron backend at the call, each process bound to its NeuronCore first, and any other backend
        (nccl, gloo) stays as it was passed."""
        ctx = self.ctx
        name, xla = code(value), ctx.string("xla")
        fixed = f"{target(ctx).process_group_backend()} if {name} == {xla} else {name}"
        pinned = pinned_cores(ctx)
        bind = _placeable(ctx, node) and not pinned
        note = f" (no set_device: the program sets {pinned} itself)" if pinned else (
            f", after binding the process to its own device when it is {xla}" if bind else "")
        if ctx.report("NM201", node, text=f"{name} == {xla}", fixed=fixed, note=note):
            ctx.replace(value, expression(fixed))
            if bind:
                binding = target(ctx).select_device_statement(local_rank(ctx))
                ctx.insert_before(ctx.current.statement, f"if {name} == {xla}:\n"
                                  + "".join(f"    {line}\n" for line in binding.splitlines()))

    def finish(self) -> None:
        ctx = self.ctx
        for occ, node, name, literal in self.held:
            ctx.current = occ
            self._rewrite(node, name, literal)
        ctx.current = None

    def _rewrite(self, node: cst.Call, held: cst.Name | None = None, literal: cst.CSTNode | None = None) -> None:
        ctx = self.ctx
        backend = arg(node, 0, "backend")
        method = arg(node, 1, "init_method")
        wrong = [a.value for a in (backend, method)
                 if a is not None and string_value(a.value) in XLA_GROUP_STRINGS]
        if not wrong and held is None:
            return
        env = ctx.string("env://")
        group = target(ctx)
        fixed = {"xla": group.process_group_backend(), "xla://": env, "pjrt://": env}
        text = ", ".join([*(f"{code(held)} = {code(literal)}" for _ in [held] if held is not None),
                          *(code(w) for w in wrong)])
        # a held name: its value is respelled where it is set, by NM102 where the name is a device name (the
        # portable style then asks torch for the device's backend), else here; where NM117 keeps the names the
        # file was given from outside, it stays as it is
        respelled = held is not None and any(d.node is literal for d in ctx.decisions)
        kept = held is not None and any(d.code == "NM117" for d in ctx.decisions)
        own = held is not None and not respelled and not kept
        backend_of = f"{dist(ctx)}.get_default_backend_for_device({code(held)})" \
            if respelled and group.portable else None
        if held is None:
            name_fix = []
        elif backend_of is not None:
            name_fix = [backend_of]
        elif respelled:
            name_fix = [f"{code(held)} = {code(respell_device(literal))}"]
        else:
            name_fix = [f"{code(held)} = {fixed['xla']}" + (" (NM117 says where it comes from)" if kept else "")]
        after = ", ".join([*name_fix, *(fixed[string_value(w)] for w in wrong)])
        pinned = pinned_cores(ctx)
        bind = backend is not None and (backend.value in wrong or held is not None) and _placeable(ctx, node)
        # each process sees only the cores the program gave it, from index 0: no binding to the local rank
        note = f" (no set_device: the program sets {pinned} itself)" if bind and pinned else ""
        # torch_xla's rendezvous worked in a plain `python train.py` too; env:// needs torchrun's variables, so
        # one process started without them gets a group of its own (an in-memory store, rank 0 of 1)
        alone = method is not None and method.value in wrong and is_statement(ctx, node) \
            and not started_by_torchrun(ctx, node) \
            and not has_star(node) and all(a.keyword is None or a.keyword.value not in ("rank", "world_size", "store")
                                           for a in node.args)
        if alone:
            d, os_ = dist(ctx), ctx.module_ref("os")
            started = f"{ctx.string('RANK')} in {os_}.environ"
            after += f" when torchrun started the process ({started}), else a group of one process"

            def both(call: cst.Call) -> list[str]:
                kept = [a for i, a in enumerate(call.args)
                        if not (a.keyword is not None and a.keyword.value == "init_method")
                        and not (a.keyword is None and i == 1)]
                single = ", ".join([*(code(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for a in kept),
                                    f"store={d}.HashStore()", "rank=0", "world_size=1"])
                return [f"if {started}:\n    {code(call)}\nelse:\n    {code(call.func)}({single})"]

        if ctx.report("NM201", node, text=text, fixed=after, note=note):
            for w in wrong:
                ctx.replace(w, expression(fixed[string_value(w)]))
            if backend_of is not None:
                ctx.replace(held, expression(backend_of))
            if own:
                ctx.replace(literal, expression(fixed["xla"]))
            binding = group.select_device_statement(local_rank(ctx)) if bind and not pinned else ""
            start = _block_start(ctx.current)
            at_exit = ""
            closing = _closing_barrier(ctx, ctx.current.statement) if bind and is_statement(ctx, node) else None
            if closing is not None:
                # the program ends with its own barrier: the group goes after it, on a normal return only (once,
                # where several arms make the group before that call)
                destroy = f"{dist(ctx)}.destroy_process_group()"
                if not any(code(s).strip() == destroy for s in ctx.edits.after.get(closing, ())):
                    ctx.insert_after(closing, destroy + "\n")
            elif bind and is_statement(ctx, node):
                at_exit = destroy_at_exit(ctx)
            if alone:
                first = binding if start is ctx.current.statement else ""
                replace_statement(ctx, ctx.current.statement, lambda call: [*filter(None, [first.rstrip()]),
                                                                            *both(call), *filter(None, [at_exit])])
                binding = "" if first else binding
            if binding:  # every rank on its own device, before the group is made and before the block uses one
                ctx.insert_before(start, binding)
            if at_exit and not alone:
                ctx.insert_after(ctx.current.statement, at_exit + "\n")


XLA_GROUP_STRINGS = ("xla", "xla://", "pjrt://")
# What a program sets to choose the NeuronCores its process sees (`os.environ["NEURON_RT_VISIBLE_CORES"] =
# os.environ["LOCAL_RANK"]`): each process then sees its own cores from index 0, and binding it to its local rank
# would ask every rank above 0 for a device it does not see
VISIBILITY = ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES")
ENVIRON_WRITES = ("setdefault", "update", "__setitem__")


@fact
def pinned_cores(ctx) -> str | None:
    """The runtime variable of VISIBILITY the program itself sets (`os.environ[...] = ...`,
    `os.environ.setdefault(...)` / `.update(...)`, `os.putenv(...)`), or None."""
    if not any(name in ctx.source.text for name in VISIBILITY):
        return None
    for node in _walk(ctx.module):
        keys: list[cst.BaseExpression] = []
        if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign):
            targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
            keys = [t.slice[0].slice.value for t in targets if type(t) is cst.Subscript and len(t.slice) == 1
                    and type(t.slice[0].slice) is cst.Index and (dotted(t.value) or [""])[-1] == "environ"]
        elif type(node) is cst.Call:
            parts = dotted(node.func) or []
            if parts[-2:-1] == ["environ"] and parts[-1] in ENVIRON_WRITES or parts[-1:] == ["putenv"]:
                keys = [a.value for a in node.args[:1] if a.keyword is None]
                first = node.args[0].value if node.args else None
                if type(first) is cst.Dict:
                    keys = [e.key for e in first.elements if type(e) is cst.DictElement]
                keys += [cst.SimpleString(repr(a.keyword.value)) for a in node.args if a.keyword is not None]
        for key in keys:
            if string_value(key) in VISIBILITY:
                return string_value(key)
    return None


def destroy_at_exit(ctx) -> str:
    """The group destroyed when the program ends normally (torch_xla's went with its runtime; a process that
    leaves a live gloo group aborts: "terminate called without an active exception").

    A barrier first: a rank that destroys its group while another still finishes its last collectives (an
    all-reduce whose send is in flight, FSDP's last reduce-scatter) makes that rank's gloo thread abort the same
    way; on the CPU about one two-process FSDP run in two ended so without it, none in 24 with it. The handler
    also runs after an uncaught exception, where a barrier would hold the failed rank until the process-group
    timeout (30 min) while the others wait for it in a collective: an uncaught exception sets `sys.last_value`
    before the handlers run, so the failed rank leaves at once and torchrun stops the rest."""
    d = dist(ctx)
    return (f"{ctx.module_ref('atexit')}.register(lambda: {d}.is_initialized() and not hasattr("
            f"{ctx.module_ref('sys')}, {ctx.string('last_value')}) and ({d}.barrier(), {d}.destroy_process_group()))")



def _closing_barrier(ctx, statement: cst.CSTNode) -> cst.CSTNode | None:
    """The statement with which the program ends on its own barrier once `statement` has run, or None: all
    that runs after `statement` up to the module's end (the rest of its block, then of the blocks of the `if` /
    `else` arms that hold it) is one call of a function the file defines whose last statement is
    `xm.rendezvous(...)` or `dist.barrier()` (`_mp_fn(0, args)`). The group can go right after it: every rank
    has finished its collectives there."""
    parents = ctx.analysis.parents
    rest: list[cst.CSTNode] = []
    node = statement
    while True:
        block = parents.get(node)
        if type(block) not in (cst.IndentedBlock, cst.Module):
            return None
        body = list(block.body)
        rest += body[body.index(node) + 1:]
        if block is ctx.module:
            break
        owner = parents.get(block)
        if type(owner) is cst.Else:
            owner = parents.get(owner)
        if type(owner) is not cst.If:
            return None
        while type(parents.get(owner)) is cst.If:  # an `elif`: its `if`
            owner = parents.get(owner)
        node = owner
    if len(rest) != 1:
        return None
    last = rest[0]
    call = last.body[0].value if type(last) is cst.SimpleStatementLine and len(last.body) == 1 \
        and type(last.body[0]) is cst.Expr else None
    return last if type(call) is cst.Call and _ends_on_barrier(ctx, call.func) else None


def _ends_on_barrier(ctx, fn: cst.BaseExpression) -> bool:
    """`fn` names a function the file defines once whose last statement is `xm.rendezvous(...)` or
    `dist.barrier()`: when it returns, every rank has finished its collectives."""
    if type(fn) is not cst.Name:
        return False
    owner = ctx.analysis.lookup(fn.value, ctx.scope)
    defs = [b.node for b in owner.bindings[fn.value]] if owner is not None else []
    if len(defs) != 1 or type(defs[0]) is not cst.FunctionDef or type(defs[0].body) is not cst.IndentedBlock:
        return False
    end = defs[0].body.body[-1]
    call = end.body[0].value if type(end) is cst.SimpleStatementLine and len(end.body) == 1 \
        and type(end.body[0]) is cst.Expr else None
    scope = next((sc for sc in ctx.analysis.scopes if sc.node is defs[0]), ctx.scope)  # its own imports count
    return type(call) is cst.Call and ctx.qualname(call.func, scope) in RENDEZVOUS | {"torch.distributed.barrier"}


def _block_start(occ) -> cst.CSTNode:
    """The first statement of the block that holds `occ`'s statement, after its docstring and imports (the
    statement itself at module level, where the imports and definitions come first)."""
    block = occ.block
    if not isinstance(block, cst.IndentedBlock):
        return occ.statement
    for statement in block.body:
        if statement is occ.statement:
            break
        if isinstance(statement, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom))
                or (isinstance(s, cst.Expr) and isinstance(s.value, (cst.SimpleString, cst.ConcatenatedString)))
                for s in statement.body):
            continue
        return statement
    return occ.statement


def _registers_xla_backend(ctx) -> bool:
    """The file imports `torch_xla.distributed.xla_backend`, which registered the `xla` process-group backend."""
    return "xla_backend" in ctx.source.text and any(
        b.kind == "import" and XLA_BACKEND in ((b.qualname or ""), b.alias and dotted_str(b.alias.name))
        for scope in ctx.analysis.scopes for bindings in scope.bindings.values() for b in bindings)


def _placeable(ctx, node: cst.Call) -> bool:
    """A statement can be put in front of the one holding `node`, on the same path (not a one-line compound)."""
    occ = ctx.current
    return isinstance(occ.statement, cst.SimpleStatementLine) and occ.small is not None \
        and getattr(occ.small, "value", None) is node


LAUNCH = frozenset({"torch_xla.launch", "torch_xla.torch_xla.launch"})  # spawn's successor (torch_xla 2.5)
ALL_DEVICES = "all"


def spawn_call(qual: str | None, node: cst.Call) -> tuple[cst.Arg, cst.Arg | None, cst.Arg | None, str | None] | None:
    """`xmp.spawn(fn, args, nprocs, start_method)` or `torch_xla.launch(fn, args, start_method,
    debug_single_process)`, both of which call `fn(index, *args)` in each process: the function, its arguments, the
    start method and the process count (ALL_DEVICES: one per device, a literal count, or None where the program
    computes it); None for another call, or one with arguments not known here."""
    if qual in SPAWN:
        given = [arg(node, i, name) for i, name in enumerate(("fn", "args", "nprocs", "start_method"))]
        fn, args, nprocs, method = given
        # `join=True` / `daemon=False`, spawn's defaults, say nothing torchrun does not do (a spawn that returns its
        # context without joining, or starts daemons, is left to a person)
        given += [a for a in node.args if a.keyword is not None and (a.keyword.value, code(a.value)) in
                  (("join", "True"), ("daemon", "False"))]
        value = nprocs.value if nprocs is not None else cst.Name("None")
        count = ALL_DEVICES if type(value) is cst.Name and value.value == "None" else \
            value.value if type(value) is cst.Integer else None
    elif qual in LAUNCH:
        given = [arg(node, i, name) for i, name in enumerate(("fn", "args", "start_method", "debug_single_process"))]
        fn, args, method, single = given
        flag = code(single.value) if single is not None else "False"
        count = ALL_DEVICES if flag == "False" else "1" if flag == "True" else None
    else:
        return None
    if fn is None or not only_args(node, *given):
        return None
    return fn, args, method, count


def _count_text(node: cst.Call) -> str:
    """The expression that computes a spawn's process count (`flags.num_cores`, `debug_single_process=flag`)."""
    given = arg(node, 2, "nprocs") or arg(node, 3, "debug_single_process")
    return code(given.value) if given.keyword is None or given.keyword.value == "nprocs" else \
        f"debug_single_process={code(given.value)}"


class Spawn(Rule):
    """NM202: `xmp.spawn(fn, args=(...), nprocs=N)` -> `fn(local rank, ...)`, launched by torchrun; NM242: a spawn
    that starts a function it was given (a launcher in a library), computes its process count or picks a start
    method is marked with the torchrun command that replaces it."""

    codes = ("NM202", "NM242")
    triggers = (b"torch_xla",)  # xmp.spawn and torch_xla.launch are imported from torch_xla
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(SPAWN) or scan.any_qual(LAUNCH)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        found = spawn_call(ctx.qualname(node.func), node)
        if found is None:
            return
        fn, args, method, count = found
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

        procs = count if count not in (None, ALL_DEVICES) else "<NeuronCores>"
        defined = self._defined_here(fn.value)
        reasons = []
        if not defined:
            reasons.append(f"starts `{code(fn.value)}`, a function it was given (a launcher that a library offers)")
        if count is None:
            reasons.append(f"computes its process count (`{_count_text(node)}`)")
            single = arg(node, 3, "debug_single_process") if ctx.qualname(node.func) in LAUNCH else None
            procs = f"<1 if {code(single.value)} else NeuronCores>" if single is not None \
                else f"<the value of {_count_text(node)}>"
        if method is not None:
            reasons.append(f"picks a start method (`{code(method.value)}`): torchrun starts every process afresh, so "
                           f"the code before this call runs in each of them")

        def launcher() -> None:
            if reasons:
                ctx.report("NM242", node, call=short(node), reason="; ".join(reasons), fixed=direct(node),
                           torchrun=f"torchrun --nproc_per_node={procs} <script>")

        unused = self._unused_result(node)
        if not defined or not (is_statement(ctx, node) or unused):
            launcher()
            return  # the launcher stays as it is, marked; an expression: left to NM199
        made, init = self._makes_process_group(fn.value)
        project = ctx.settings.project
        if made is None and project is not None and project.group_elsewhere:
            made = "other"  # the program makes its group in another of its files (it is made once, there)
        branch, widen = self._uncovered(init) if made == "xla" else (None, False)
        needs = self._needs_group() if made is None else None
        note = "" if branch is None else f"; the process group made under `if {code(branch.test)}:` is made " \
            f"when torchrun started several processes too (the collectives need it)"
        if needs:
            note = f"; a process group is made for one process too (`{needs}` needs one)"
        fixed = ctx.report("NM202", node, call=short(node), fixed=direct(node), nprocs=procs, note=note)
        if not fixed or method is not None:
            # a count the program computes says nothing more once the direct call is written: NM202's message
            # names torchrun's `--nproc_per_node`, and a marker would speak of a launch that is gone
            launcher()
        if fixed:
            ctx.replace(node, lambda new: expression(direct(new)))
            if unused:  # `result = xmp.spawn(...)`, never read: the per-process results have no counterpart
                ctx.replace(ctx.current.small, lambda new: cst.Expr(value=new.value))
            self._drop_count(node)
            if made == "xla":
                # the spawned function makes its group, and NM201 binds the device there; where only some paths
                # make it, torchrun's several processes make it too
                if branch is not None:
                    self._cover(branch, widen)
                return
            d, group = dist(ctx), target(ctx)
            if made is None and started_by_torchrun(ctx, ctx.current.statement) is False:
                # the arm a plain `python train.py` takes (torchrun's runs take the other): one process, on the
                # first device; a group of one process only where the file builds what needs one
                if needs:
                    backend = f"backend={group.process_group_backend()}"
                    ctx.insert_before(ctx.current.statement, f"{d}.init_process_group({backend}, "
                                                             f"store={d}.HashStore(), rank=0, world_size=1)\n")
                    ctx.insert_after(ctx.current.statement, f"{d}.destroy_process_group()\n")
                return
            setup = "" if pinned_cores(ctx) else group.select_device_statement(index)
            if made is None:
                others = "init_process_group" in ctx.source.text  # another path may have made it already
                backend = f"backend={group.process_group_backend()}"
                torchrun = f"{d}.init_process_group({backend}, init_method={ctx.string('env://')})"
                if needs:
                    # an API that needs a group on one process too: torchrun's group, else one of one process
                    # (as NM201 makes for `python train.py`)
                    alone = f"{d}.init_process_group({backend}, store={d}.HashStore(), rank=0, world_size=1)"
                    started = f"{ctx.string('RANK')} in {ctx.module_ref('os')}.environ"
                    block = f"if {started}:\n    {torchrun}\nelse:\n    {alone}\n"
                    setup += f"if not {d}.is_initialized():\n" + "".join(
                        f"    {line}\n" for line in block.splitlines()) if others else block
                else:
                    test = several_processes(ctx) + (f" and not {d}.is_initialized()" if others else "")
                    setup += f"if {test}:\n    {torchrun}\n"
                # the group this rewrite makes is destroyed when the function returns (not when it raises), after
                # the barrier that lets every rank finish its last collectives first (see destroy_at_exit): the
                # function's own, where it ends on one
                barrier = "" if _ends_on_barrier(ctx, fn.value) else f"    {d}.barrier()\n"
                ctx.insert_after(ctx.current.statement,
                                 f"if {d}.is_initialized():\n{barrier}    {d}.destroy_process_group()\n")
                writes = self._downloads_before(ctx.current.statement)
                if writes:
                    # code that ran once in the spawning parent (a dataset download) now runs in every process
                    # torchrun starts: the group is made before it, and local rank 0 downloads first
                    several = several_processes(ctx)
                    ctx.insert_before(writes[0], f"{setup}if {index} != 0 and {several}:\n    {d}.barrier()\n")
                    ctx.insert_after(writes[-1], f"if {index} == 0 and {several}:\n    {d}.barrier()\n")
                    return
            ctx.insert_before(ctx.current.statement, setup)

    def _unused_result(self, node: cst.Call) -> bool:
        """`result = xmp.spawn(...)` alone on its line, and nothing reads `result`."""
        ctx = self.ctx
        small, statement = ctx.current.small, ctx.current.statement
        if not isinstance(small, cst.Assign) or small.value is not node or len(small.targets) != 1 \
                or not isinstance(small.targets[0].target, cst.Name) \
                or not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        name = small.targets[0].target.value
        return not any(scope.reads.get(name, 0) for scope in ctx.analysis.scopes)

    def _drop_count(self, node: cst.Call) -> None:
        """The process count the direct call no longer takes (`debug_single_process = FLAGS.num_cores == 1`
        before `torch_xla.launch(..., debug_single_process=debug_single_process)`): its assignment goes where it
        stands in the spawn's block, computes it from names only, and nothing else reads or binds the name."""
        ctx = self.ctx
        given = arg(node, 2, "nprocs") if ctx.qualname(node.func) in SPAWN else arg(node, 3, "debug_single_process")
        if given is None or type(given.value) is not cst.Name:
            return
        name = given.value.value
        owner = ctx.analysis.lookup(name, ctx.scope)
        if owner is None or sum(scope.reads.get(name, 0) for scope in ctx.analysis.scopes) != 1 \
                or sum(len(scope.bindings.get(name, ())) for scope in ctx.analysis.scopes) != 1:
            return
        binding = owner.bindings[name][0]
        target = ctx.analysis.parents.get(binding.node)  # the Name's AssignTarget
        small = ctx.analysis.parents.get(target)
        line = ctx.analysis.parents.get(small)
        if binding.kind != "assign" or type(small) is not cst.Assign or len(small.targets) != 1 \
                or type(line) is not cst.SimpleStatementLine or len(line.body) != 1 \
                or ctx.analysis.parents.get(line) is not ctx.current.block or not pure(small.value):
            return
        ctx.remove(small)

    def _downloads_before(self, statement: cst.CSTNode) -> list[cst.CSTNode]:
        """The statements that run before the spawn `statement` in the program and write files every process
        would now write at once: a dataset download (`download=True`, a call of a `*download*` function), at
        module level or earlier in the spawn's block (`if __name__ == "__main__":`). In order; [] when the spawn
        is not at module level or in such a block, or nothing downloads."""
        parents = self.ctx.analysis.parents
        block = parents.get(statement)
        owner = parents.get(block) if block is not None else None
        module = self.ctx.module
        if block is module:
            top, own = statement, []
        elif type(owner) is cst.If and parents.get(owner) is module and type(block) is cst.IndentedBlock:
            top, own = owner, list(block.body[:next(i for i, s in enumerate(block.body) if s is statement)])
        else:
            return []
        before = list(module.body[:next(i for i, s in enumerate(module.body) if s is top)])
        return [s for s in (*before, *own) if not isinstance(s, (cst.FunctionDef, cst.ClassDef)) and _downloads(s)]

    def _defs(self, name: str, scope) -> list[cst.FunctionDef]:
        owner = self.ctx.analysis.lookup(name, scope)
        if owner is None or not all(b.kind == "def" for b in owner.bindings[name]):
            return []
        return [b.node for b in owner.bindings[name] if isinstance(b.node, cst.FunctionDef)]

    def _defined_here(self, fn: cst.BaseExpression) -> bool:
        """The spawned function is a `def` of this file (so that what it does is known)."""
        return isinstance(fn, cst.Name) and bool(self._defs(fn.value, self.ctx.scope))

    def _makes_process_group(self, fn: cst.Name) -> tuple[str | None, cst.Call | None]:
        """Whether the spawned function, or a function of this file it calls, calls `init_process_group`: "xla"
        (the group NM201 rewrites, binding the device there), "other", or None; and that call. A class of the
        file that it builds counts with its `__init__`, and a method with the methods it calls on `self`."""
        module = self.ctx.analysis.module_scope
        todo, seen = [(f, None) for f in self._defs(fn.value, self.ctx.scope)], set()
        while todo:
            function, owner = todo.pop()
            if id(function) in seen:
                continue
            seen.add(id(function))
            for call in _calls(function):
                parts = dotted(call.func) or []
                if parts[-1:] == ["init_process_group"]:
                    backend = arg(call, 0, "backend")
                    return ("xla" if backend is not None and string_value(backend.value) == "xla" else "other"), call
                if len(parts) == 1:
                    todo.extend((f, None) for f in self._defs(parts[0], module))
                    for cls in self._classes(parts[0]):
                        todo.extend((f, cls) for f in _methods(cls, "__init__"))
                elif len(parts) == 2 and parts[0] == "self" and owner is not None:
                    todo.extend((f, owner) for f in _methods(owner, parts[1]))
        return None, None

    def _resolved_calls(self) -> list[tuple[cst.Call, str]]:
        """Every call of the file whose function resolves through the file's imports, with its name (resolved in
        the scope of each function that holds it, so that an import inside a function counts)."""
        ctx, found, seen = self.ctx, [], set()
        for scope in ctx.analysis.scopes:
            if type(scope.node) not in (cst.Module, cst.FunctionDef):
                continue
            for call in _calls(scope.node):
                qual = ctx.qualname(call.func, scope)
                if qual is not None and id(call) not in seen:
                    seen.add(id(call))
                    found.append((call, qual))
        return found

    def _needs_group(self) -> str | None:
        """The first thing the file builds that needs a default process group on one process too (ZeRO-1, DDP,
        FSDP, a device mesh; torch_xla's ran on one device without one), by its last name; or None."""
        return next((qual.rsplit(".", 1)[-1] for _, qual in self._resolved_calls()
                     if qual in NEEDS_GROUP or qual.startswith(NEEDS_GROUP_MODULES)), None)

    def _uncovered(self, init: cst.Call) -> tuple[cst.If | None, bool]:
        """The `if` that makes the spawned function's group only on some paths (`if flags.ddp:`), where the file
        has a torch_xla collective that the migration guards with the world size and that runs outside that `if`
        (nor under another `if` with the same test), or a step whose gradients it averages; and whether its test
        can take `or WORLD_SIZE > 1` (the call its only statement, no `else`, not an `elif`: else what more the
        `if` runs would run under torchrun too). (None, False) where the group is made on every path, or where
        no such collective exists."""
        ctx = self.ctx
        parents = ctx.analysis.parents
        line = parents.get(parents.get(init))
        block = parents.get(line)
        branch = parents.get(block)
        if type(line) is not cst.SimpleStatementLine or type(branch) is not cst.If or branch.body is not block:
            return None, False
        test = code(branch.test)
        if several_processes(ctx) in test:
            return None, False
        for call, qual in self._resolved_calls():
            if qual in AVERAGING or (qual in GUARDED_COLLECTIVES and not _under_test(parents, call, test)):
                alone = len(block.body) == 1 and branch.orelse is None and type(parents.get(branch)) is not cst.If
                return branch, alone
        return None, False

    def _cover(self, branch: cst.If, widen: bool) -> None:
        """`if flags.ddp or WORLD_SIZE > 1:`; else torchrun's group made after the whole `if` where that did not
        make one (the process on its device first), and destroyed at exit as NM201's is."""
        ctx = self.ctx
        guard = several_processes(ctx)
        if widen:
            ctx.replace(branch, lambda new: new.with_changes(test=expression(f"{either(new.test)} or {guard}")))
            return
        top, parents = branch, ctx.analysis.parents
        while type(parents.get(top)) is cst.If:  # the first test of an `if` / `elif` chain
            top = parents.get(top)
        d, group = dist(ctx), target(ctx)
        bind = "" if pinned_cores(ctx) else group.select_device_statement(local_rank(ctx))
        ctx.insert_after(top, f"if {guard} and not {d}.is_initialized():\n" + "".join(
            f"    {line}\n" for line in bind.splitlines()) + f"    {d}.init_process_group(backend="
            f"{group.process_group_backend()}, init_method={ctx.string('env://')})\n    {destroy_at_exit(ctx)}\n")

    def _classes(self, name: str) -> list[cst.ClassDef]:
        owner = self.ctx.analysis.lookup(name, self.ctx.analysis.module_scope)
        if owner is None or not all(b.kind == "class" for b in owner.bindings[name]):
            return []
        return [b.node for b in owner.bindings[name] if isinstance(b.node, cst.ClassDef)]


# The torch_xla collectives the migration turns into torch.distributed calls under `WORLD_SIZE > 1` (NM204-NM206,
# NM106): torch_xla ran them without a process group, torch.distributed needs one on every path that reaches them.
GUARDED_COLLECTIVES = ALL_REDUCE | ALL_GATHER | REDUCE_SCATTER | ALL_TO_ALL | RENDEZVOUS | MESH_REDUCE \
    | BROADCAST_MASTER_PARAM
# The gradient averaging of a step (NM106) may wrap the model in DDP where it is placed, outside any test
AVERAGING = frozenset({f"{XM}.optimizer_step", f"{XM}.reduce_gradients"})
# What needs a default process group even in one process (the rewrite of torch_xla's, or the native API).
NEEDS_GROUP = frozenset({
    "torch_xla.distributed.zero_redundancy_optimizer.ZeroRedundancyOptimizer",
    "torch_xla.distributed.fsdp.XlaFullyShardedDataParallel",
    "torch_xla.distributed.fsdp.xla_fully_sharded_data_parallel.XlaFullyShardedDataParallel",
    "torch.distributed.optim.ZeroRedundancyOptimizer",
    "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.distributed.device_mesh.init_device_mesh",
})
NEEDS_GROUP_MODULES = ("torch.distributed.fsdp.", "torch.distributed._composable.", "torch.distributed.tensor.")


def process_group_of(ctx, groups: cst.BaseExpression) -> str | None:
    """The process group whose replica groups `groups` lists, as code, or None when it is a list of its own
    (`[[0, 1], [2, 3]]`, a variable): `g._mesh` (torch_xla's xla-backend ProcessGroup) is `g`;
    `parallel_state.get_data_parallel_group(as_list=True)` (neuronx-distributed) is the same getter without
    `as_list`, which returns the group."""
    if isinstance(groups, cst.Attribute) and groups.attr.value == "_mesh":
        return code(groups.value)
    if isinstance(groups, cst.Call) and (ctx.qualname(groups.func) or "").startswith(NXD_GROUP_GETTERS) \
            and len(groups.args) == 1 and groups.args[0].keyword is not None \
            and groups.args[0].keyword.value == "as_list" and code(groups.args[0].value) == "True":
        return code(groups.with_changes(args=[]))
    return None


def _under_test(parents: dict, node: cst.CSTNode, test: str) -> bool:
    """`node` lies in the body of an `if` whose test reads `test`."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if type(parent) is cst.If and parent.body is child and code(parent.test) == test:
            return True
        child, parent = parent, parents.get(parent)
    return False


# The variables torchrun sets in every process it starts (and a plain `python train.py` does not)
TORCHRUN_VARIABLES = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                "TORCHELASTIC_RUN_ID"})


def started_by_torchrun(ctx, node: cst.CSTNode) -> bool | None:
    """Whether the `if` tests around `node` say torchrun started the process: True in the body of an `if` that
    requires one of TORCHRUN_VARIABLES (`if os.environ.get("WORLD_SIZE"):`, `if "RANK" in os.environ:`), False
    in its `else` where the test is that alone; None where no test says (or the program sets those variables itself)."""
    from neuron_migrate.rules.processes import SETS_RANKS

    if SETS_RANKS.search(ctx.source.text):
        return None
    parents = ctx.analysis.parents
    child, parent = node, parents.get(node)
    while parent is not None:
        if type(parent) is cst.If and _requires_torchrun(ctx, parent.test):
            if parent.body is child:
                return True
            # the `else` of `A and B` also runs under torchrun when B is false (`... and not args.spawn`): only a
            # test that is torchrun's alone makes its `else` the plain `python` path
            if type(parent.orelse) is cst.Else and parent.orelse is child and type(parent.test) is not \
                    cst.BooleanOperation:
                return False
        child, parent = parent, parents.get(parent)
    return None


def _requires_torchrun(ctx, test: cst.BaseExpression) -> bool:
    """`test` holds only where torchrun's variables are set: `os.environ.get(V)` / `os.getenv(V)`, `V in
    os.environ`, `os.environ.get(V) is not None`, `int(os.environ.get("WORLD_SIZE", ...)) > 1`, or an `and`
    with one of them."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return _requires_torchrun(ctx, test.left) or _requires_torchrun(ctx, test.right)
    if type(test) is cst.Call:
        return _environ_read(ctx, test, default_ok=False)
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return False
    left, op, right = test.left, test.comparisons[0].operator, test.comparisons[0].comparator
    if type(op) is cst.In:
        return string_value(left) in TORCHRUN_VARIABLES and ctx.qualname(right) == "os.environ"
    if type(op) is cst.IsNot:
        return type(left) is cst.Call and _environ_read(ctx, left, default_ok=False) and code(right) == "None"
    if type(op) is cst.GreaterThan and code(right) == "1" and type(left) is cst.Call and len(left.args) == 1 \
            and ctx.qualname(left.func) == "int" and type(left.args[0].value) is cst.Call:
        return _environ_read(ctx, left.args[0].value, default_ok=True, names=("WORLD_SIZE", "LOCAL_WORLD_SIZE"))
    return False


def _environ_read(ctx, call: cst.Call, default_ok: bool, names=TORCHRUN_VARIABLES) -> bool:
    """`os.environ.get(V)` or `os.getenv(V)` of one of `names` (with a default only where `default_ok`)."""
    if ctx.qualname(call.func) not in ("os.environ.get", "os.getenv") or not call.args:
        return False
    return string_value(call.args[0].value) in names and (len(call.args) == 1 or default_ok and len(call.args) == 2)


def either(test: cst.BaseExpression) -> str:
    """`test` as the left operand of `or`: in parentheses where it binds more loosely (`x if c else y`)."""
    text = code(test)
    return f"({text})" if type(test) in (cst.IfExp, cst.Lambda, cst.NamedExpr) and not test.lpar else text


def _downloads(statement: cst.CSTNode) -> bool:
    """The statement downloads files when it runs: a call with `download=True` (torchvision's datasets) or of a
    function whose name says download (`snapshot_download(...)`, `download_dataset()`); not in a def it holds."""
    stack: list[cst.CSTNode] = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if type(node) is cst.Call:
            parts = dotted(node.func) or []
            if (parts and "download" in parts[-1].lower()) or any(
                    a.keyword is not None and a.keyword.value == "download" and code(a.value) == "True"
                    for a in node.args):
                return True
        stack.extend(children(node))
    return False


def _methods(cls: cst.ClassDef, name: str) -> list[cst.FunctionDef]:
    """The methods `name` defined in the class's own body."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return [s for s in body if type(s) is cst.FunctionDef and s.name.value == name]


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Every node under `node` but whitespace and punctuation (the fast field walk)."""
    found: list[cst.CSTNode] = []
    stack = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(reversed(children(current, tokens=False)))
    return found


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    """Every call under `node`, in LibCST's visiting order (the fast field walk: a LibCST visitor over every
    function of the file cost a tenth of a rewrite)."""
    return [n for n in _walk(node) if type(n) is cst.Call]


class Collectives(Rule):
    """NM204 all_reduce / all_gather, NM205 rendezvous, NM206 mesh_reduce, NM207 REDUCE_* constants,
    NM208 replica groups (manual)."""

    codes = ("NM204", "NM205", "NM206", "NM207", "NM208")
    triggers = (b"torch_xla",)
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A call of a collective, or a reduction constant (`xm.REDUCE_SUM`) read where the file passes it on."""
        return scan.any_qual(GUARDED_COLLECTIVES) or scan.any_qual(REDUCE_CONSTANTS)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.consumed: set[cst.CSTNode] = set()  # REDUCE_* nodes a rewritten call already translated
        self.calls: dict[int, cst.Call] = {}  # id of an argument -> its call
        self.held: list[tuple[object, cst.CSTNode, str, str]] = []  # `op = xm.REDUCE_SUM`: (occ, node, op, name)
        self.native_reads: list[tuple[object, str]] = []  # (scope, name) of names passed to torch.distributed

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
        elif qual in BROADCAST_MASTER_PARAM:
            self._broadcast_master_param(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._constant(node)

    def visit_Name(self, node: cst.Name) -> None:
        if type(self.ctx.current.parent) is not cst.Attribute:
            self._constant(node)

    # -- helpers ---------------------------------------------------------------------------------------
    def _groups(self, node: cst.Call, groups: cst.Arg | None, native: bool = False) -> bool:
        """Replica groups have no one-line equivalent: mark the call and leave it (True). With `native`, the
        replica groups of a process group (`group._mesh`, NxD's `get_*_group(as_list=True)`) are not marked: the
        caller passes the process group itself (`process_group_of`)."""
        if groups is None or (isinstance(groups.value, cst.Name) and groups.value.value == "None"):
            return False
        if native and process_group_of(self.ctx, groups.value) is not None:
            return False
        self.ctx.report("NM208", node, call=short(node))
        self.ctx.handled.add(node.args[0].value)
        return True

    def _holds_list(self, value: cst.BaseExpression) -> bool:
        """`value` is a name every binding of which, in its scope, assigns a list display (`bucket = []`) or
        `xm._fetch_gradients(optimizer)` (a list of the gradients)."""
        ctx = self.ctx
        if not isinstance(value, cst.Name):
            return False
        scope = ctx.analysis.lookup(value.value, ctx.current.scope)
        bindings = scope.bindings.get(value.value, []) if scope is not None else []
        parents = ctx.analysis.parents
        for binding in bindings:
            target = parents.get(binding.node) if binding.kind == "assign" else None
            assign = parents.get(target)
            if not isinstance(target, cst.AssignTarget) or target.target is not binding.node \
                    or not isinstance(assign, cst.Assign) or not self._a_list(assign.value):
                return False
        return bool(bindings)

    def _may_be_list(self, value: cst.BaseExpression) -> bool:
        """`value` is a name that may hold a list of tensors: a parameter annotated as a list, tuple or sequence, a
        binding of a list or tuple display, or a name a `for` loop of its function iterates over."""
        ctx = self.ctx
        if not isinstance(value, cst.Name):
            return False
        scope = ctx.analysis.lookup(value.value, ctx.current.scope)
        parents = ctx.analysis.parents
        for binding in scope.bindings.get(value.value, []) if scope is not None else []:
            if binding.kind == "param" and isinstance(binding.node, cst.Param) and binding.node.annotation is not None \
                    and LIST_ANNOTATION.search(code(binding.node.annotation.annotation)):
                return True
        if any(isinstance(bound, (cst.List, cst.ListComp, cst.Tuple))
               for bound in assigned_values(ctx, value.value, ctx.current.scope)):
            return True
        function = ctx.current.statement
        while function is not None and not isinstance(function, (cst.FunctionDef, cst.Module)):
            function = parents.get(function)
        stack = [function] if function is not None else []
        while stack:
            node = stack.pop()
            if isinstance(node, cst.For) and isinstance(node.iter, cst.Name) and node.iter.value == value.value:
                return True
            stack.extend(children(node))
        return False

    def _assigned_back(self, node: cst.Call, value: cst.BaseExpression) -> bool:
        """`arr = xm.all_reduce(..., arr)`: the statement only binds the result to the name it reduced."""
        small = self.ctx.current.small
        return isinstance(small, cst.Assign) and small.value is node and len(small.targets) == 1 \
            and isinstance(value, cst.Name) and isinstance(small.targets[0].target, cst.Name) \
            and small.targets[0].target.value == value.value \
            and isinstance(self.ctx.current.statement, cst.SimpleStatementLine) \
            and len(self.ctx.current.statement.body) == 1

    def _a_list(self, value: cst.BaseExpression) -> bool:
        return isinstance(value, (cst.List, cst.ListComp)) \
            or (isinstance(value, cst.Call) and self.ctx.qualname(value.func) in FETCH_GRADIENTS)

    def _group(self, groups: cst.Arg | None) -> str:
        """`, group=<process group>` for a `groups=` argument `_groups(..., native=True)` let through, or nothing."""
        if groups is None or (isinstance(groups.value, cst.Name) and groups.value.value == "None"):
            return ""
        return f", group={process_group_of(self.ctx, groups.value)}"

    def _op(self, reduce_type: cst.BaseExpression) -> str | None:
        value = string_value(reduce_type)
        name = REDUCE_OPS.get(value) if value is not None else REDUCE_CONSTANTS.get(self.ctx.qualname(reduce_type))
        if name is None:
            return None
        self.ctx.handled.add(reduce_type)
        return f"{dist(self.ctx)}.ReduceOp.{name}"

    def _constant(self, node: cst.CSTNode) -> None:
        """A REDUCE_* constant no rewritten call took: rewritten only where its consumer is native, an argument of
        a torch.distributed call, or a name that only torch.distributed calls read (decided in finish)."""
        ctx = self.ctx
        if node in self.consumed:
            return
        name = REDUCE_CONSTANTS.get(ctx.qualname(node))
        occ = ctx.current
        if name is None or isinstance(occ.small, (cst.Import, cst.ImportFrom)) or not_a_read(node, occ.parent):
            return
        parent = occ.parent
        if isinstance(parent, cst.Arg) and parent.value is node:
            call = self.calls.get(id(parent))
            if call is not None and (ctx.qualname(call.func) or "").startswith(NATIVE):
                self._rewrite_constant(node, name)
            return
        small = occ.small
        if isinstance(small, cst.Assign) and small.value is node and len(small.targets) == 1 \
                and isinstance(small.targets[0].target, cst.Name):
            self.held.append((occ, node, name, small.targets[0].target.value))

    def visit_Arg(self, node: cst.Arg) -> None:
        call = self.ctx.current.parent
        if isinstance(call, cst.Call):
            self.calls[id(node)] = call
            if isinstance(node.value, cst.Name) and (self.ctx.qualname(call.func) or "").startswith(NATIVE):
                self.native_reads.append((self.ctx.current.scope, node.value.value))

    def finish(self) -> None:
        ctx = self.ctx
        for occ, node, name, held in self.held:
            scope = ctx.analysis.lookup(held, occ.scope)
            if scope is None or len(scope.bindings.get(held, [])) != 1:
                continue
            reads = sum(s.reads.get(held, 0) for s in ctx.analysis.scopes if ctx.analysis.lookup(held, s) is scope)
            native = sum(1 for s, n in self.native_reads if n == held and ctx.analysis.lookup(held, s) is scope)
            if reads and reads == native:
                ctx.current = occ
                self._rewrite_constant(node, name)
        ctx.current = None

    def _rewrite_constant(self, node: cst.CSTNode, name: str) -> None:
        ctx = self.ctx
        fixed = f"{dist(ctx)}.ReduceOp.{name}"
        if ctx.report("NM207", node, text=code(node), fixed=fixed):
            ctx.replace(node, expression(fixed))

    # -- the calls -------------------------------------------------------------------------------------
    # Each native form runs the collective only where torchrun started several processes: in a plain
    # `python train.py`, as in a one-process torchrun run, it returns the local value as torch_xla did there.
    def _all_reduce(self, node: cst.Call) -> None:
        ctx = self.ctx
        reduce_type = arg(node, 0, "reduce_type")
        inputs = arg(node, 1, "inputs")
        scale = arg(node, 2, "scale")
        groups = arg(node, 3, "groups")
        pin = arg(node, 4, "pin_layout")
        if reduce_type is None or inputs is None or not only_args(node, reduce_type, inputs, scale, groups, pin):
            return
        if self._groups(node, groups, native=True):
            return
        op = self._op(reduce_type.value)
        if op is None:
            return
        group = self._group(groups)
        factor = None if scale is None or code(scale.value) in ("1", "1.0") else code(scale.value)
        guard = several_processes(ctx)
        if is_statement(ctx, node) and isinstance(inputs.value, (cst.List, cst.Tuple)):
            # the list form reduces every tensor in place
            d = dist(ctx)

            def in_place(call: cst.Call) -> list[str]:
                tensors = [code(element.value) for element in arg(call, 1, "inputs").value.elements]
                lines = [f"if {guard}:", *(f"    {d}.all_reduce({tensor}, op={op}{group})"
                                           for tensor in tensors)]
                if factor is not None:
                    lines += [f"{tensor}.mul_({code(arg(call, 2, 'scale').value)})" for tensor in tensors]
                return ["\n".join(lines)]

            if ctx.report("NM204", node, call=short(node), fixed="; ".join(in_place(node)).replace("\n", " ")):
                replace_statement(ctx, ctx.current.statement, in_place)
            return
        listed = self._holds_list(inputs.value) or self._may_be_list(inputs.value)
        if listed and (is_statement(ctx, node) or self._assigned_back(node, inputs.value)):
            # `xm.all_reduce("sum", bucket)` with `bucket = []` (appended to), or `arr = xm.all_reduce("sum", arr)`
            # of a `List[torch.Tensor]`: every tensor of it, in place (what torch_xla did with a list)
            d, t = dist(ctx), free_name(ctx, "tensor")

            def in_loop(call: cst.Call) -> list[str]:
                tensors = code(arg(call, 1, "inputs").value)
                lines = [f"if {guard}:", f"    for {t} in {tensors}:", f"        {d}.all_reduce({t}, op={op}{group})"]
                if factor is not None:
                    lines += [f"for {t} in {tensors}:", f"    {t}.mul_({code(arg(call, 2, 'scale').value)})"]
                return ["\n".join(lines)]

            if ctx.report("NM204", node, call=short(node), fixed="; ".join(in_loop(node)).replace("\n", " ")):
                replace_statement(ctx, ctx.current.statement, in_loop)
            return
        if is_statement(ctx, node) or listed or isinstance(inputs.value, (cst.List, cst.Tuple)):
            return  # a list from elsewhere, or a list result used: left to NM199
        functional = ctx.module_ref("torch.distributed.nn.functional", "dist_fn")
        loose = isinstance(ctx.current.parent, LOOSE_PARENTS)

        def build(call: cst.Call) -> str:
            tensor = code(arg(call, 1, "inputs").value)
            text = f"{functional}.all_reduce({tensor}, op={op}{group}) if {guard} else {paren(tensor)}.clone()"
            if factor is None:
                return text if loose else f"({text})"
            text = f"({text}) * {paren(code(arg(call, 2, 'scale').value))}"
            return text if loose else f"({text})"

        if ctx.report("NM204", node, call=short(node), fixed=build(node)):
            ctx.replace(node, lambda new: keep_parens(new, build(new)))

    def _all_gather(self, node: cst.Call) -> None:
        ctx = self.ctx
        value = arg(node, 0, "value")
        dim = arg(node, 1, "dim")
        groups = arg(node, 2, "groups")
        pin = arg(node, 4, "pin_layout")
        if value is None or not only_args(node, value, dim, groups, pin) or self._groups(node, groups, native=True):
            return
        torch = ctx.module_ref("torch")
        functional = ctx.module_ref("torch.distributed.nn.functional", "dist_fn")
        loose = isinstance(ctx.current.parent, LOOSE_PARENTS)
        guard = several_processes(ctx)
        group = self._group(groups)

        def build(call: cst.Call) -> str:
            tensor = code(arg(call, 0, "value").value)
            text = (f"{torch}.cat({functional}.all_gather({tensor}{group}), "
                    f"dim={code(dim.value) if dim else 0}) if {guard} else {paren(tensor)}.clone()")
            return text if loose else f"({text})"

        if ctx.report("NM204", node, call=short(node), fixed=build(node)):
            ctx.replace(node, lambda new: keep_parens(new, build(new)))

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
        guard = several_processes(ctx)

        def scatter(call: cst.Call) -> list[str]:
            x, n = code(arg(call, 1, "input").value), code(arg(call, 4, "shard_count").value)
            lines = [f"if {guard}:\n"
                     f"    {target} = {x}.new_empty({x}.shape[0] // {paren(n)}, *{x}.shape[1:])\n"
                     f"    {d}.reduce_scatter_tensor({target}, {x}, op={op})\n"
                     f"else:\n"
                     f"    {target} = {x}.clone()"]
            factor = code(arg(call, 2, "scale").value)
            return lines + ([f"{target}.mul_({factor})"] if factor not in ("1", "1.0") else [])

        if ctx.report("NM204", node, call=short(node), fixed=_one_line(scatter(node))):
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
        guard = several_processes(ctx)

        def exchange(call: cst.Call) -> list[str]:
            x = code(arg(call, 0, "value").value)
            return [f"if {guard}:\n"
                    f"    {target} = {torch}.empty_like({x})\n"
                    f"    {d}.all_to_all_single({target}, {x})\n"
                    f"else:\n"
                    f"    {target} = {x}.clone()"]

        if ctx.report("NM204", node, call=short(node), fixed=_one_line(exchange(node))):
            replace_statement(ctx, ctx.current.statement, exchange)

    def _broadcast_master_param(self, node: cst.Call) -> None:
        """`xm.broadcast_master_param(model)`: rank 0's parameters and buffers, copied to every rank."""
        ctx = self.ctx
        model = arg(node, 0, "model")
        if model is None or not only_args(node, model) or not is_statement(ctx, node):
            return
        d = dist(ctx)
        guard = several_processes(ctx)
        name = "tensor" if not _taken(ctx, "tensor") else "_tensor"

        def broadcast(call: cst.Call) -> list[str]:
            m = paren(code(arg(call, 0, "model").value))
            return [f"if {guard}:\n"
                    f"    for {name} in [*{m}.parameters(), *{m}.buffers()]:\n"
                    f"        {d}.broadcast({name}.data, src=0)"]

        if ctx.report("NM204", node, call=short(node), fixed=_one_line(broadcast(node))):
            replace_statement(ctx, ctx.current.statement, broadcast)

    def _rendezvous(self, node: cst.Call) -> None:
        ctx = self.ctx
        tag = arg(node, 0, "tag")
        if not only_args(node, tag):
            return  # a payload to exchange: left to NM199 (all_gather_object)
        guard = several_processes(ctx)
        fixed = f"{dist(ctx)}.barrier()"
        branch = sole_body_if(ctx, node)
        if branch is not None:  # `if not xm.is_master_ordinal(): xm.rendezvous("download")`: one test
            if ctx.report("NM205", node, call=short(node), fixed=f"if <its test> and {guard}: {fixed}"):
                ctx.replace(node, expression(fixed))
                ctx.replace(branch, lambda new: new.with_changes(test=expression(f"{loose(new.test)} and {guard}")))
            return
        suite = one_line_body(ctx, node)
        if suite is not None:  # `else: xm.rendezvous("x")`: the body becomes a block, to hold the guard
            if ctx.report("NM205", node, call=short(node), fixed=f"if {guard}: {fixed}"):
                ctx.replace(suite, lambda new: cst.IndentedBlock(header=new.trailing_whitespace, body=[
                    cst.If(test=expression(guard), body=cst.IndentedBlock(body=[
                        cst.SimpleStatementLine(body=[cst.Expr(expression(fixed))])]))]))
            return
        if not is_statement(ctx, node) or not alone_on_line(ctx, node):
            return
        if ctx.report("NM205", node, call=short(node), fixed=f"if {guard}: {fixed}"):
            ctx.replace(node, expression(fixed))
            # the guard tests for several processes, not for rank 0: a barrier under a rank-0 test needs it too
            guard_statement(ctx, ctx.current.statement, guard, rank_zero=False)

    def _mesh_reduce(self, node: cst.Call) -> None:
        ctx = self.ctx
        tag = arg(node, 0, "tag")
        data = arg(node, 1, "data")
        fn = arg(node, 2, "reduce_fn")
        target = assigned_name(ctx, node)
        returned = target is None and _returned(ctx, node)  # `return xm.mesh_reduce(...)`
        if data is None or fn is None or (target is None and not returned) or not only_args(node, tag, data, fn):
            return
        gathered = f"{target}_per_rank" if target else next(
            (n for n in ("values_per_rank", "_values_per_rank") if not _taken(ctx, n)), None)
        if gathered is None or _taken(ctx, gathered):
            return
        result = "return" if returned else f"{target} ="
        d = dist(ctx)
        guard = several_processes(ctx)
        # torch_xla gathered (and reduced) CPU copies of the tensors in `data` (the names are resolved now)
        before, _, after = ("", "", "") if holds_no_tensor(ctx, data.value) else cpu_copy(ctx, "\0").partition("\0")

        def copy(value: str) -> str:
            return f"{before}{value}{after}"

        size = world_size(ctx)

        def gather(call: cst.Call) -> list[str]:
            # every rank's slot holds this rank's value until the gather fills it in (one process: the list is done)
            value = copy(code(arg(call, 1, "data").value))
            return [f"{gathered} = [{value}] * {paren(size)}",
                    f"if {guard}:\n"
                    f"    {d}.all_gather_object({gathered}, {gathered}[0])",
                    f"{result} {paren(code(arg(call, 2, 'reduce_fn').value))}({gathered})"]

        if ctx.report("NM206", node, call=short(node), fixed=_one_line(gather(node))):
            replace_statement(ctx, ctx.current.statement, gather)


def _returned(ctx, node: cst.CSTNode) -> bool:
    """`return <node>` alone on its line."""
    occ = ctx.current
    return (isinstance(occ.small, cst.Return) and occ.small.value is node
            and isinstance(occ.statement, cst.SimpleStatementLine) and len(occ.statement.body) == 1)


def _taken(ctx, name: str) -> bool:
    return any(name in s.bindings or name in s.reads for s in ctx.analysis.scopes)


def _one_line(lines: list[str]) -> str:
    """The new lines of a fix, as the one line a message shows."""
    return "; ".join(" ".join(part.strip() for part in line.split("\n")) for line in lines)


def _same_name_free(tensor: cst.Arg, target: str | None) -> bool:
    """The input is a plain name other than the assignment target (the new lines read it more than once)."""
    return target is not None and isinstance(tensor.value, cst.Name) and tensor.value.value != target
