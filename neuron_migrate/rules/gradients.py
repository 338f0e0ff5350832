"""NM106: the gradient averaging `xm.optimizer_step` / `xm.reduce_gradients` did in every program that runs
as several processes (torch_xla averaged wherever it found replicas, even without a spawn in the file: under
torchrun, or in a helper the training loop calls). The migration keeps it wherever the program can run as several
processes, as a no-op in one process; a program that cannot (rules/processes.py) had nothing to average.

Where the model's placement, its optimizer and every use of its name are found, the model is wrapped in
DistributedDataParallel under a second name right after it is placed (and compiled), and only its forward
calls go through the wrapper: the model's own name stays bound to the bare module, so `state_dict()` keys
keep no `module.` prefix and existing checkpoints keep loading. Anywhere else the gradients are averaged
explicitly before the step, exactly as the legacy call did.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from neuron_migrate.engine.names import Occurrence, Scope
from neuron_migrate.rules.patterns import XM, arg, code, short
from neuron_migrate.rules.rewrites import (dist, local_rank, neuron_path_test, only_args, paren, replace_statement,
                                           world_size)
from neuron_migrate.rules.target import target
from neuron_migrate.rules import Rule
from neuron_migrate.rules.compile import placed_object
from neuron_migrate.rules.distributed import INIT_PROCESS_GROUP, LAUNCH, SPAWN, process_group_of
from neuron_migrate.rules.optimizer import OPTIMIZER_STEP, step_arguments
from neuron_migrate.rules import sharding  # noqa: F401  (registers the fully_sharded fact read below)
from neuron_migrate.syntax.parse import expression

REDUCE_GRADIENTS = frozenset({f"{XM}.reduce_gradients"})
DDP = "torch.nn.parallel.DistributedDataParallel"

# Uses of the model's name that neither run its forward nor let it escape.
MODULE_ATTRIBUTES = frozenset({
    "parameters", "named_parameters", "buffers", "named_buffers", "state_dict", "load_state_dict", "train",
    "eval", "to", "cpu", "compile", "zero_grad", "children", "named_children", "modules", "named_modules",
    "requires_grad_", "float", "half", "bfloat16", "double", "training", "config", "device", "dtype",
})


@dataclass
class Step:
    occ: Occurrence
    node: cst.Call
    optimizer: cst.BaseExpression
    replaces_statement: bool  # xm.reduce_gradients(opt): the statement itself goes
    group: str | None = None  # xm.reduce_gradients(opt, groups=g._mesh): the process group `g`


@dataclass
class Placement:
    occ: Occurrence
    node: cst.Name  # the placed name: the target of `model = ....to(device)`, or `model` of `model.to(device)`

    @property
    def name(self) -> str:
        return self.node.value


class GradientAveraging(Rule):
    codes = ("NM106", "NM209")
    triggers = (b"torch_xla",)
    torch_xla_names_only = True  # every report is on a step of xm.optimizer_step / xm.reduce_gradients
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(OPTIMIZER_STEP) or scan.any_qual(REDUCE_GRADIENTS)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.steps: list[Step] = []
        self.placements: list[Placement] = []
        self.optimizers: dict[tuple[int, str], str] = {}  # (scope, optimizer name) -> model name
        self.names: list[tuple[Occurrence, cst.Name]] = []
        self.inits: list[tuple[Scope, cst.Name]] = []  # scope and first name of each `init_process_group(...)`
        self.spawns = 0  # `xmp.spawn(...)` / `torch_xla.launch(...)` calls: that path gets its process group from NM202
        self.joined = False

    # -- what the file holds ---------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual in OPTIMIZER_STEP:  # any program may run as several processes under torchrun
            found = step_arguments(node)  # a call NM105 leaves alone keeps averaging: nothing to add
            if found is not None:
                self.steps.append(Step(ctx.current, node, found[0].value, False))
        elif qual in INIT_PROCESS_GROUP:
            self.inits.append((ctx.current.scope, _head(node.func)))
        elif qual in SPAWN or qual in LAUNCH:
            self.spawns += 1
        elif qual in REDUCE_GRADIENTS:
            opt = arg(node, 0, "optimizer")
            groups = arg(node, 1, "groups")
            group = process_group_of(ctx, groups.value) if groups is not None else None
            if opt is not None and only_args(node, opt, groups, arg(node, 2, "pin_layout")) \
                    and (groups is None or group is not None):
                occ = ctx.current
                if isinstance(occ.small, cst.Expr) and occ.small.value is node and len(occ.statement.body) == 1:
                    self.steps.append(Step(occ, node, opt.value, True, group))

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        target = node.targets[0].target
        if placed_object(node.value) is not None:
            self.placements.append(Placement(self.ctx.current, target))
        model = _parameters_of(node.value)
        if model is not None:
            self.optimizers[(id(self.ctx.current.scope), target.value)] = model

    def visit_Expr(self, node: cst.Expr) -> None:
        moved = placed_object(node.value)
        if isinstance(moved, cst.Name):
            self.placements.append(Placement(self.ctx.current, moved))

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append((self.ctx.current, node))

    # -- the decision ----------------------------------------------------------------------------------
    def finish(self) -> None:
        ctx = self.ctx
        wrapped: set[int] = set()
        if ctx.facts.single_process:
            return  # one replica: nothing to average (rules/processes.py), `opt.step()` is exact (NM105)
        for step in self.steps:
            ctx.current = step.occ
            if self._sharded(step):
                continue  # FSDP2 reduces the gradients of the model it shards (rules/sharding.py)
            # over a process group, the legacy call still divided by the whole world size: no DDP does that
            placement = self._wrappable(step) if step.group is None else None
            if placement is None:
                self._explicit(step)
                continue
            if not self._report(step, f"route {placement.name}(...) through DistributedDataParallel"):
                continue
            self._join(step)
            if id(placement) not in wrapped:
                wrapped.add(id(placement))
                self._wrap(placement)
            if step.replaces_statement:
                ctx.remove(step.occ.statement)
        ctx.current = None

    def _sharded(self, step: Step) -> bool:
        """The step's optimizer holds the parameters of a model `fully_shard` now shards."""
        model, _ = self._model_of(step)
        return model is not None and model in self.ctx.facts.fully_sharded

    def _model_of(self, step: Step) -> tuple[str | None, Scope | None]:
        """The name of the model whose parameters the step's optimizer holds, and the optimizer's scope."""
        if not isinstance(step.optimizer, cst.Name):
            return None, None
        opt_scope = self.ctx.analysis.lookup(step.optimizer.value, step.occ.scope)
        return (self.optimizers.get((id(opt_scope), step.optimizer.value)) if opt_scope else None), opt_scope

    def _wrappable(self, step: Step) -> Placement | None:
        """The placement of the model this step's optimizer holds, when wrapping it is known to be safe."""
        ctx = self.ctx
        model, opt_scope = self._model_of(step)
        if model is None:
            return None
        model_scope = ctx.analysis.lookup(model, opt_scope)
        found = [p for p in self.placements if p.name == model and p.occ.scope is model_scope]
        if len(found) != 1 or found[0].occ.in_loop or not self._only_module_uses(found[0], model_scope):
            return None
        placement = found[0]
        statement = placement.occ.statement
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        if placement.occ.block is not _body(model_scope):
            return None  # placed inside an `if` / `try` / `with`: the wrapper would not exist on every path
        if self._taken(f"ddp_{model}"):
            return None
        return placement

    def _only_module_uses(self, placement: Placement, scope: Scope) -> bool:
        """No binding of the name follows the placement, and every read calls its forward (at least one, none
        before the placement in its own scope) or uses a plain module attribute."""
        model = placement.name
        bindings = scope.bindings.get(model, [])
        if not bindings or any(b.kind != "assign" for b in bindings):
            return False
        order = {id(node): i for i, (_, node) in enumerate(self.names)}
        targets = {id(b.node) for b in bindings}
        placed_at = order[id(placement.node)]
        late_init = any(sc is scope and order[id(n)] > placed_at for sc, n in self.inits)
        if late_init or any(order[t] > placed_at for t in targets):
            return False  # the process group is created after the placement, or the model is rebound
        calls = 0
        for occ, node in self.names:
            if node.value != model or id(node) in targets or self.ctx.analysis.lookup(model, occ.scope) is not scope:
                continue
            parent = occ.parent
            if isinstance(parent, cst.Call) and parent.func is node:
                if occ.scope is scope and order[id(node)] < placed_at:
                    return False
                calls += 1
            elif not (isinstance(parent, cst.Attribute) and parent.value is node
                      and parent.attr.value in MODULE_ATTRIBUTES):
                return False
        return calls > 0

    def _taken(self, name: str) -> bool:
        return any(name in s.bindings or name in s.reads for s in self.ctx.analysis.scopes)

    def _wrap(self, placement: Placement) -> None:
        ctx = self.ctx
        ctx.current = placement.occ
        model = placement.name
        ddp = f"ddp_{model}"
        # the file's own name for DDP or torch.nn, else through torch (`import torch.nn as nn`: ruff's PLR0402)
        scope = placement.occ.scope
        nn = ctx.analysis.local_name_for("torch.nn", scope) or f"{ctx.module_ref('torch')}.nn"
        wrapper = ctx.analysis.local_name_for(DDP, scope) or f"{nn}.parallel.DistributedDataParallel"
        on_neuron = _on_neuron(ctx, placement)
        ctx.insert_after(placement.occ.statement, (
            f"{ddp} = {model}\n"
            f"if {world_size(ctx)} > 1{on_neuron}:\n"
            f"    {ddp} = {wrapper}({model}, broadcast_buffers=False)\n"))
        for occ, node in self.names:
            parent = occ.parent
            if node.value == model and isinstance(parent, cst.Call) and parent.func is node \
                    and ctx.analysis.lookup(model, occ.scope) is scope:
                ctx.replace(node, cst.Name(ddp))

    def _join(self, step: Step) -> None:
        """A program that never creates a process group averaged its gradients through torch_xla's runtime, which
        torchrun's variables set up by themselves; natively, each rank joins torchrun's group and takes its own
        device, before the model is placed. Where that place is not in the file (a helper that only steps an
        optimizer), the program that calls it owns its process group: nothing is added."""
        ctx = self.ctx
        if self.joined or self.inits or self.spawns:
            return
        placement = self._placement_of(step)
        if placement is None:
            return
        self.joined = True
        anchor = placement.occ
        ctx.current = anchor
        d, device = dist(ctx), target(ctx)
        bind = "".join(f"    {line}\n" for line in device.select_device_statement(local_rank(ctx)).splitlines())
        ctx.insert_before(anchor.statement, (
            f"if {world_size(ctx)} > 1 and not {d}.is_initialized(){_on_neuron(ctx, placement)}:"
            f"  # torchrun: a device per rank\n"
            f"{bind}"
            f"    {d}.init_process_group({device.process_group_backend()})\n"))
        ctx.current = step.occ

    def _placement_of(self, step: Step) -> Placement | None:
        """Where the model that the step's optimizer holds is put on its device, where that is one place."""
        model, _ = self._model_of(step)
        found = [p for p in self.placements if p.name == model and isinstance(p.occ.statement, cst.SimpleStatementLine)]
        return found[0] if len(found) == 1 else None

    def _report(self, step: Step, fixed: str) -> bool:
        """Report NM106; when its fix is not made (no `--unsafe-fixes`, or ignored), mark the step so it is not
        lost."""
        ctx = self.ctx
        if ctx.report("NM106", step.node, call=short(step.node), fixed=fixed):
            return True
        ctx.report("NM209", step.node, call=short(step.node))
        return False

    def _explicit(self, step: Step) -> None:
        ctx = self.ctx
        opt = code(step.optimizer)
        statement = step.occ.statement
        named = isinstance(step.optimizer, (cst.Name, cst.Attribute))
        if not isinstance(statement, cst.SimpleStatementLine) or not named or not _runs_once_here(step):
            # a lambda, a callback, a comprehension, a condition: an average in front of the statement would not
            # run when (nor as often as) the step does
            ctx.report("NM209", step.node, call=short(step.node))
            return
        if not self._report(step, f"all-reduce the gradients of {opt} and divide them by the world size"):
            return
        self._join(step)
        param = "param" if not self._taken("param") else "_param"
        d = dist(ctx)
        world = world_size(ctx) if "WORLD_SIZE" in ctx.facts.rank_names else f"{d}.get_world_size()"
        block = (f"if {world_size(ctx)} > 1:\n"
                 f"    for {param} in {_with_gradients(ctx, opt, 'p')}:\n"
                 f"        {d}.all_reduce({param}.grad{f', group={step.group}' if step.group else ''})\n"
                 f"        {param}.grad /= {world}\n")
        if step.replaces_statement:
            replace_statement(ctx, statement, lambda _call: [block.rstrip()])
        else:
            ctx.insert_before(statement, block)


def _runs_once_here(step: Step) -> bool:
    """The step is the whole of its small statement (`xm.optimizer_step(opt)`, `result = ...`, `return ...`)."""
    small = step.occ.small
    return isinstance(small, (cst.Expr, cst.Assign, cst.Return)) and small.value is step.node


def _parameters_of(value: cst.BaseExpression) -> str | None:
    """`SGD(model.parameters(), lr=...)`: "model"."""
    if not isinstance(value, cst.Call):
        return None
    first = arg(value, 0, "params")
    inner = first.value if first is not None else None
    if (isinstance(inner, cst.Call) and not inner.args and isinstance(inner.func, cst.Attribute)
            and inner.func.attr.value == "parameters" and isinstance(inner.func.value, cst.Name)):
        return inner.func.value.value
    return None


def _body(scope: Scope) -> cst.CSTNode:
    """The block whose statements run unconditionally in the scope."""
    node = scope.node
    return node.body if isinstance(node, cst.FunctionDef) else node


def _head(expr: cst.BaseExpression) -> cst.Name:
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return expr


def _on_neuron(ctx, placement: Placement) -> str:
    """` and torch.device(device).type == "neuron"` where the model is placed in common code of a file whose XLA is
    optional: CUDA's and the CPU's paths there never joined a process group nor averaged through torch_xla, and
    `torch.neuron` / the "neuron" process group do not exist without torch-neuronx."""
    small = placement.occ.statement.body[0]
    call = getattr(small, "value", None)
    if not isinstance(call, cst.Call) or not call.args:
        return ""
    test = neuron_path_test(ctx, call.args[0].value, call)
    return f" and {test}" if test else ""


FETCH_GRADIENTS = frozenset({f"{XM}._fetch_gradients"})


class FetchGradients(Rule):
    """NM238: `xm._fetch_gradients(optimizer)`, the list of the gradients its parameters hold."""

    codes = ("NM238",)
    triggers = (b"_fetch_gradients",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in FETCH_GRADIENTS:
            return
        opt = arg(node, 0, "optimizer")
        if opt is None or not only_args(node, opt):
            return

        def build(call: cst.Call) -> cst.BaseExpression:
            optimizer = paren(code(arg(call, 0, "optimizer").value))
            return expression(_with_gradients(ctx, optimizer, "p.grad"))

        if ctx.report("NM238", node, call=short(node), fixed=code(build(node))):
            ctx.replace(node, build)


def _with_gradients(ctx, optimizer: str, item: str) -> str:
    """`[<item> for ...]` over the parameters of `optimizer` that hold a gradient (`item`: `p`, or `p.grad`)."""
    return (f"[{item} for group in {optimizer}.param_groups for p in group[{ctx.string('params')}]"
            f" if p.grad is not None]")
