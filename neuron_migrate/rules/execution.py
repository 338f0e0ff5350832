"""NM103 / NM104 / NM109: lazy-graph execution control goes; real waits become synchronize(); NM113: a graph cut
in a model's forward stays a graph cut."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.engine.names import not_a_read
from neuron_migrate.rules.patterns import XM, arg, code, short
from neuron_migrate.rules.rewrites import LOOSE_PARENTS
from neuron_migrate.rules.target import portable, target
from neuron_migrate.rules import Rule
from neuron_migrate.rules.compile import TORCH_XLA_COMPILE, _is_self, training_step
from neuron_migrate.syntax.parse import expression


def short_statement(small: cst.CSTNode) -> str:
    return " ".join(code(small).split())

MARK_STEP = frozenset({f"{XM}.mark_step", "torch_xla.sync", "torch_xla.torch_xla.sync"})
WAIT = frozenset({f"{XM}.wait_device_ops"})
STEP_CONTEXT = frozenset({"torch_xla.step", "torch_xla.torch_xla.step"})
EAGER_MODE = frozenset({"torch_xla.experimental.eager_mode", "torch_xla.experimental.eager.eager_mode"})
EAGER_CONTEXT = frozenset({"torch_xla.experimental.eager_mode_context",
                           "torch_xla.experimental.eager.eager_mode_context"})


def wait_for_device(ctx, node: cst.Call, code: str, **fields) -> None:
    """Replace a waiting call with the style's synchronize: a statement where it stands alone."""
    occ = ctx.current
    alone = isinstance(occ.small, cst.Expr) and occ.small.value is node
    if portable(ctx) and alone:
        statement = target(ctx).synchronize_statement()
        if ctx.report(code, node, fixed=" ".join(statement.split()), **fields):
            ctx.replace_small_statement(statement) or ctx.replace(node, expression(target(ctx).synchronize_call()))
    else:
        fixed = target(ctx).synchronize_call()
        if ctx.report(code, node, fixed=fixed, **fields):
            ctx.replace(node, expression(fixed))


def _in_forward(ctx, scope) -> bool:
    """The code runs in a model's forward: a method `forward`, or any method of a class derived from a module
    class (a block its forward calls). A graph cut there was put in on purpose (to keep each part under the
    compiler's limits, or to compile the parts apart)."""
    while scope is not None and scope.kind != "function":
        scope = scope.parent
    while scope is not None and scope.parent is not None and scope.parent.kind == "function":
        scope = scope.parent  # a function nested in the method
    if scope is None or scope.parent is None or scope.parent.kind != "class":
        return False
    if getattr(scope.node.name, "value", None) == "forward":
        return True
    from neuron_migrate.rules.compile import MODULE_BASES, _nn_class

    return any((q := ctx.qualname(base.value, scope.parent.parent)) in MODULE_BASES or _nn_class(q or "")
               for base in scope.parent.node.bases)


def _switch(node: cst.Call) -> bool:
    """The call's one argument is the literal True or False (eager_mode's `enable`)."""
    switch = arg(node, 0, "enable")
    return len(node.args) == 1 and switch is not None and isinstance(switch.value, cst.Name) \
        and switch.value.value in ("True", "False")


class MarkStep(Rule):
    codes = ("NM103", "NM104", "NM109", "NM113")
    triggers = (b"torch_xla",)
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A call or `with` of these names, or `wait_device_ops` as a value: a name imported as it counts wherever
        LibCST's tree holds it (a keyword's name, `global`), which Python's tree reads nowhere."""
        return scan.any_qual(MARK_STEP | WAIT | EAGER_MODE | EAGER_CONTEXT | STEP_CONTEXT) \
            or not scan.imports.isdisjoint(WAIT)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual in MARK_STEP:
            self._mark_step(node)
        elif qual in EAGER_MODE:
            self._eager_mode(node)
        elif qual in WAIT:
            if node.args:
                return  # devices=[...]: left to NM199
            wait_for_device(ctx, node, "NM104", call=short(node))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._wait_function(node)

    def visit_Name(self, node: cst.Name) -> None:
        if type(self.ctx.current.parent) is not cst.Attribute:
            self._wait_function(node)

    def _wait_function(self, node: cst.BaseExpression) -> None:
        """`xm.wait_device_ops` passed as a function (a timer's `sync=`, `fn = xm.wait_device_ops`): the native
        synchronize function."""
        ctx = self.ctx
        occ = ctx.current
        parent = occ.parent
        if (type(parent) is cst.Call and parent.func is node) or type(occ.small) in (cst.Import, cst.ImportFrom) \
                or not_a_read(node, parent) or ctx.qualname(node) not in WAIT:
            return
        fixed = target(ctx).synchronize_function()
        if " " in fixed and not isinstance(parent, LOOSE_PARENTS):
            fixed = f"({fixed})"
        if ctx.report("NM104", node, call=short(node), fixed=fixed):
            ctx.replace(node, expression(fixed))

    def _mark_step(self, node: cst.Call) -> None:
        ctx = self.ctx
        occ = ctx.current
        wait = arg(node, 0, "wait")
        other = [a for a in node.args if a is not wait and not (a.keyword and a.keyword.value == "reset_scope")]
        if other or (wait is not None and not isinstance(wait.value, cst.Name)):
            return  # devices=, a computed wait=: left to NM199
        waits = wait is not None and wait.value.value == "True"
        is_statement = isinstance(occ.small, cst.Expr) and occ.small.value is node
        if waits:
            wait_for_device(ctx, node, "NM104", call=short(node))
        elif is_statement and _in_forward(ctx, occ.scope):
            fixed = f"{ctx.module_ref('torch')}._dynamo.graph_break()"
            if ctx.report("NM113", node, call=short(node), fixed=fixed):
                ctx.replace(node, expression(fixed))
        elif is_statement:
            if ctx.report("NM103", node, call=short(node)):
                ctx.remove(occ.small)

    def _eager_mode(self, node: cst.Call) -> None:
        """`torch_xla.experimental.eager_mode(True)` (or `False`) as a statement: the native backend has no lazy
        mode to switch from, each operation runs as it is issued. A computed switch is left to NM199."""
        ctx = self.ctx
        occ = ctx.current
        if _switch(node) and isinstance(occ.small, cst.Expr) and occ.small.value is node \
                and ctx.report("NM103", node, call=short(node)):
            ctx.remove(occ.small)

    def visit_With(self, node: cst.With) -> None:
        ctx = self.ctx
        if len(node.items) != 1 or node.items[0].asname is not None:
            return
        item = node.items[0].item
        if not isinstance(node.body, cst.IndentedBlock) or node.asynchronous is not None \
                or not isinstance(item, cst.Call):
            return
        if ctx.qualname(item.func) in EAGER_CONTEXT and _switch(item):
            if ctx.report("NM103", item, call=short(item)):
                ctx.unwrap(node)
            return
        if item.args or ctx.qualname(item.func) not in STEP_CONTEXT:
            return
        if ctx.report("NM109", item, statement=node, text=f"with {short(item)}:"):
            ctx.unwrap(node)


class EagerStepOfCompiledBase(Rule):
    """NM259: under `eager_mode(True)`, a subclass assigns the uncompiled step (`self.compiled_step_fn =
    self.step_fn`) to an attribute its base class assigns a compiled training step: NM110 compiles the base's
    model instead, so the step runs under `torch.compiler.set_stance("force_eager")` to stay eager."""

    codes = ("NM259",)
    triggers = (b"eager_mode",)

    @classmethod
    def project_words(cls, project) -> tuple[str, ...]:
        """The attributes a base class in another module assigns a compiled step: a subclass that assigns one
        (`self.compiled_step_fn = self.step_fn`) holds no trigger."""
        return project.base_compiled

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.eager = False
        self.compiled: set[str] = set()  # attributes this file's classes assign a compiled training step
        self.overrides: list = []  # (occurrence, value, attribute) of `self.<attr> = self.<method>` in a subclass

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual in EAGER_MODE and _switch(node) and arg(node, 0, "enable").value.value == "True":
            self.eager = True
        elif qual in TORCH_XLA_COMPILE and node.args:
            attr = self._self_attribute_assigned(node)
            if attr is not None and training_step(ctx, node.args[0].value, ctx.scope) is not None:
                self.compiled.add(attr)

    def visit_Assign(self, node: cst.Assign) -> None:
        attr = self._self_attribute_assigned(node.value)
        value = node.value
        if attr is None or not isinstance(value, cst.Attribute) or not isinstance(value.value, cst.Name) \
                or not _is_self(value.value.value, self.ctx.scope):
            return
        scope = self.ctx.scope
        while scope is not None and scope.kind != "function":
            scope = scope.parent
        if scope is not None and scope.parent is not None and scope.parent.kind == "class" \
                and scope.parent.node.bases:
            self.overrides.append((self.ctx.current, value, attr, scope.parent.node))

    def _self_attribute_assigned(self, value: cst.CSTNode) -> str | None:
        """`x` where `value` is the value of `self.x = value`, a statement of its own in a method."""
        small = self.ctx.current.small
        if type(small) is not cst.Assign or small.value is not value or len(small.targets) != 1:
            return None
        target = small.targets[0].target
        if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) \
                and _is_self(target.value.value, self.ctx.scope):
            return target.attr.value
        return None

    def finish(self) -> None:
        ctx = self.ctx
        if not self.eager or not self.overrides:
            return
        project = ctx.settings.project
        elsewhere = set(project.base_compiled) if project is not None else set()
        for occ, value, attr, cls in self.overrides:
            here = attr in self.compiled  # a class of this file compiles that step
            if attr not in elsewhere and not here:
                continue
            ctx.current = occ
            fixed = f"{ctx.module_ref('torch')}.compiler.set_stance({ctx.string('force_eager')})({code(value)})"
            base = "NM110 in this file" if here else "NM110 in the module it comes from"
            if ctx.report("NM259", value, statement=occ.statement, assignment=short_statement(occ.small),
                          fixed=fixed, base=base):
                ctx.replace(value, expression(fixed))
        ctx.current = None
