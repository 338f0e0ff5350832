"""NM107 / NM108 / NM110: keep graph-mode performance with torch.compile on the `neuron` backend."""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.engine.names import dotted, dotted_str
from neuron_migrate.engine.paths import XLA
from neuron_migrate.rules.patterns import XM, arg, code, is_device_string, short, spells_device_string, string_value
from neuron_migrate.rules.rewrites import assigned_values, neuron_path_test
from neuron_migrate.rules.target import portable, target
from neuron_migrate.rules import Rule
from neuron_migrate.rules.device import XLA_IN_DEVICE_POSITION
from neuron_migrate.rules import sharding  # noqa: F401  (registers the fully_sharded fact read below)
from neuron_migrate.syntax.parse import expression

XLA_DEVICE = frozenset({f"{XM}.xla_device", "torch_xla.device", "torch_xla.torch_xla.device"})
XLA_BACKENDS = frozenset({"openxla", "openxla_eval", "aot_torchxla_trace_once", "torchxla_trace_once"})
TORCH_COMPILE = frozenset({"torch.compile"})
TORCH_XLA_COMPILE = frozenset({"torch_xla.compile", "torch_xla.torch_xla.compile"})

MODULE_NAME = re.compile(
    r"(model|net|module|encoder|decoder|classifier|transformer|network|backbone|policy|critic|actor|generator"
    r"|discriminator|llm|lm|unet|vae|bert|gpt|resnet|vit)$", re.I)
TRAINING_CALL = re.compile(r"\.(backward|zero_grad|step)\s*\(|\boptimizer_step\s*\(")
CALLED_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)\s*\(")


def _last(expr: cst.BaseExpression) -> str:
    parts = dotted(expr)
    return parts[-1] if parts else ""


def placed_object(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """For `<obj>.to(<dev>)` (also `.to(device=...)`), the moved object; the device is checked by the caller."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to":
        if len(value.args) == 1 and (value.args[0].keyword is None or value.args[0].keyword.value == "device"):
            return value.func.value
    return None


def step_function(ctx, fn: cst.BaseExpression, scope) -> cst.FunctionDef | None:
    """The `def` of this file that `fn` names, when there is exactly one: a function (`step`) or a method of the
    class the code runs in (`self.step_fn`, `self` the method's first parameter)."""
    if isinstance(fn, cst.Name):
        owner = ctx.analysis.lookup(fn.value, scope)
        bindings = owner.bindings[fn.value] if owner is not None else []
    elif isinstance(fn, cst.Attribute) and isinstance(fn.value, cst.Name) and _is_self(fn.value.value, scope):
        bindings = scope.parent.bindings.get(fn.attr.value, [])
    else:
        return None
    defs = [b.node for b in bindings if b.kind == "def"]
    if len(defs) != 1 or len(bindings) != 1 or not isinstance(defs[0], cst.FunctionDef):
        return None
    return defs[0]


def _is_self(name: str, scope) -> bool:
    """`name` is the first parameter of the method `scope` is the body of."""
    node = scope.node
    if scope.kind != "function" or scope.parent is None or scope.parent.kind != "class" \
            or not isinstance(node, cst.FunctionDef) or not node.params.params:
        return False
    return node.params.params[0].name.value == name and not node.decorators


def training_step(ctx, fn: cst.BaseExpression, scope) -> cst.FunctionDef | None:
    """The function `fn` names when it runs backward() or steps an optimizer (a training step, or a whole epoch
    loop): Dynamo cannot make one graph of it."""
    function = step_function(ctx, fn, scope)
    return function if function is not None and TRAINING_CALL.search(code(function)) else None


def step_models(function: cst.FunctionDef, method: bool) -> list[str]:
    """The models a training step calls, named like a module: names (`model(x)`), and for a method attributes of
    its object (`self.model(x)`)."""
    params = function.params.params
    owner = params[0].name.value if method and params else None
    called = {m.group(1) for m in CALLED_NAME.finditer(code(function.body))}
    found = {name for name in called if MODULE_NAME.search(name.rsplit(".", 1)[-1])
             and ("." not in name or name.split(".")[0] == owner)}
    return sorted(found)


# Classes (qualified) whose instances are modules, besides the torch.nn classes; subclasses defined in the file
# count too.
MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module", "lightning.LightningModule",
                          "lightning.pytorch.LightningModule", "pytorch_lightning.LightningModule",
                          "transformers.PreTrainedModel", "transformers.modeling_utils.PreTrainedModel",
                          "diffusers.ModelMixin", "diffusers.models.modeling_utils.ModelMixin"})
NOT_MODULES = frozenset({"Parameter", "ParameterList", "ParameterDict", "Buffer", "UninitializedParameter",
                         "UninitializedBuffer"})
FACTORIES = frozenset({"timm.create_model", "peft.get_peft_model", "torch.hub.load"})
# Where every name that gives a module lies (CompilePlacedModel's predicate): MODULE_BASES and FACTORIES
# themselves, torch.nn's classes (`_nn_class`), torchvision's models and transformers' and diffusers' model classes
# (`_builds_module`)
MODULE_ROOTS = ("torch.nn", "torchvision.models", "transformers", "diffusers", *sorted(MODULE_BASES),
                *sorted(FACTORIES))
# transformers / diffusers classes whose `from_pretrained` / `from_config` return a model (not a tokenizer, a
# processor, a config or a pipeline)
PRETRAINED_MODEL = re.compile(r"(Model|For[A-Z]\w*|LMHead\w*|Autoencoder\w*|UNet\w*|Transformer\w*Model)$")
LOADERS = frozenset({"from_pretrained", "from_config", "from_single_file"})
# What a module answers and a tensor, a pipeline or a tokenizer does not: a name used so is a module.
MODULE_ONLY = frozenset({"parameters", "named_parameters", "buffers", "named_buffers", "modules", "named_modules",
                         "children", "named_children", "eval", "train", "state_dict", "load_state_dict", "zero_grad",
                         "register_forward_hook", "register_forward_pre_hook"})
# Module methods that return the module itself.
RETURNS_SELF = frozenset({"eval", "train", "float", "half", "bfloat16", "double", "requires_grad_", "cpu", "to"})
COMPILERS = frozenset({"torch.compile", "torch_neuronx.trace"})


class CompilePlacedModel(Rule):
    """Insert `model.compile(backend="neuron", dynamic=False)` after a model is moved to the neuron device: only a
    value known to be an `nn.Module` (built from a module class of the file or a known model factory, annotated
    as one, or used as one: `model.parameters()`), and only one the file does not compile otherwise."""

    codes = ("NM107",)
    triggers = (b"xla",)
    pattern = XLA_IN_DEVICE_POSITION  # a placement needs a device: the XLA device or an "xla" device literal
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A placement (`model.to(device)`) on the XLA device, of a module: a call of the device, or an XLA device
        literal, is where every device the rule follows comes from; a module method called (`.parameters()`), a
        step `torch_xla.compile` compiles, or a name of torch.nn, a model library or a model factory, is where
        every module. (`settings.compile` off, it reports nothing, but that is an option the selection keeps.)"""
        return "to" in scan.called and (scan.any_qual(XLA_DEVICE) or spells_device_string(scan.strings)) and (
            not MODULE_ONLY.isdisjoint(scan.called) or scan.any_qual(TORCH_XLA_COMPILE)
            or scan.any_qual_under(MODULE_ROOTS))

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.device_names: set[str] = set()  # last components of dotted names assigned a device (`self.device`)
        self.device_scopes: set[tuple[int, str]] = set()  # (scope, name) of plain names assigned a device there
        self.assigned: list[tuple[object, str, cst.BaseExpression]] = []  # (occurrence, dotted name, value)
        self.annotated: list[tuple[object, str, cst.BaseExpression]] = []  # (occurrence, dotted name, annotation)
        self.used_as_module: set[str] = set()  # dotted names of which a module-only method is called
        self.compiled: set[str] = set()  # dotted names compiled by the file (torch.compile, trace, .compile())
        self.classes: list[tuple[object, cst.ClassDef]] = []
        self.placements: list[tuple[object, cst.CSTNode, str, cst.BaseExpression]] = []

    # -- what holds a device, what holds a module ----------------------------------------------------------
    def _is_device(self, expr: cst.BaseExpression, scope=None) -> bool:
        """The XLA device: its call, an `"xla"` string, or a name assigned one (a plain name: in the scope it is
        read from, so that a `device = "cpu"` of another function is not it)."""
        if is_device_string(expr):
            return True
        if isinstance(expr, cst.Call):
            qual = self.ctx.qualname(expr.func)
            if qual in XLA_DEVICE:
                return True
            if qual == "torch.device" and expr.args and is_device_string(expr.args[0].value):
                return True
            return False
        if isinstance(expr, cst.IfExp):  # `xm.xla_device() if HAS_XLA else "cpu"`: the XLA device on one path
            return self._is_device(expr.body, scope) or self._is_device(expr.orelse, scope)
        if isinstance(expr, cst.Name) and scope is not None:
            owner = self.ctx.analysis.lookup(expr.value, scope)
            return owner is not None and (id(owner), expr.value) in self.device_scopes
        parts = dotted(expr)
        return bool(parts) and parts[-1] in self.device_names

    def _either_device(self, expr: cst.BaseExpression, scope) -> bool:
        """A name bound to `<XLA device> if <test> else <another device>` (or the other way round) in `scope`: the
        model may be placed on the CPU, where a neuron compile fails."""
        return isinstance(expr, cst.Name) and any(
            isinstance(value, cst.IfExp) and self._is_device(value.body, scope) != self._is_device(value.orelse, scope)
            for value in assigned_values(self.ctx, expr.value, scope))

    def _module_classes(self) -> set[str]:
        """Names of the file's classes that derive (through each other) from a module class."""
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for occ, node in self.classes:
                if node.name.value in found:
                    continue
                for base in node.bases:
                    qual = self.ctx.qualname(base.value, occ.scope) or ""
                    if qual in MODULE_BASES or _nn_class(qual) or dotted_str(base.value) in found:
                        found.add(node.name.value)
                        changed = True
                        break
        return found

    def _builds_module(self, expr: cst.BaseExpression, scope, classes: set[str], modules: set[str]) -> bool:
        """`Net()`, `nn.Linear(...)`, `models.resnet18()`, `AutoModelForX.from_pretrained(...)`, a module name, and
        those followed by `.eval()`, `.float()`, ... (which return the module)."""
        while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
                and expr.func.attr.value in RETURNS_SELF:
            expr = expr.func.value
        if not isinstance(expr, cst.Call):
            return dotted_str(expr) in modules
        func = expr.func
        if isinstance(func, cst.Name) and func.value in classes:
            return True
        qual = self.ctx.qualname(func, scope) or ""
        if _nn_class(qual) or qual in FACTORIES or qual.startswith("torchvision.models."):
            return not qual.split(".")[-1] in NOT_MODULES
        if isinstance(func, cst.Attribute) and func.attr.value in LOADERS:
            owner = self.ctx.qualname(func.value, scope) or ""
            return owner.startswith(("transformers.", "diffusers.")) and bool(PRETRAINED_MODEL.search(owner))
        return False

    def _modules(self) -> set[str]:
        """Dotted names known to hold a module."""
        classes = self._module_classes()
        modules = set(self.used_as_module)
        for occ, name, annotation in self.annotated:
            qual = self.ctx.qualname(annotation, occ.scope) or ""
            if qual in MODULE_BASES or _nn_class(qual) or dotted_str(annotation) in classes:
                modules.add(name)
        changed = True
        while changed:
            changed = False
            for occ, name, value in self.assigned:
                if name not in modules and self._builds_module(value, occ.scope, classes, modules):
                    modules.add(name)
                    changed = True
        return modules

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append((self.ctx.current, node))

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1:
            return
        target = node.targets[0].target
        name = dotted_str(target)
        if name is None:
            return
        if self._is_device(node.value, self.ctx.current.scope):
            self.device_names.add(name.split(".")[-1])
            if isinstance(target, cst.Name):
                owner = self.ctx.analysis.lookup(target.value, self.ctx.current.scope)
                if owner is not None:
                    self.device_scopes.add((id(owner), target.value))
        self.assigned.append((self.ctx.current, name, node.value))
        placed = placed_object(node.value)
        if placed is not None:
            self.placements.append((self.ctx.current, node, name, placed))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        name = dotted_str(node.target)
        if name is not None:
            self.annotated.append((self.ctx.current, name, node.annotation.annotation))
            if node.value is not None:
                self.assigned.append((self.ctx.current, name, node.value))

    def visit_Param(self, node: cst.Param) -> None:
        if node.annotation is not None:
            self.annotated.append((self.ctx.current, node.name.value, node.annotation.annotation))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute):
            owner = dotted_str(func.value)
            if owner is not None and func.attr.value in MODULE_ONLY:
                self.used_as_module.add(owner)
            if owner is not None and func.attr.value == "compile":
                self.compiled.add(owner)
        qual = self.ctx.qualname(func) if node.args else None
        if qual in COMPILERS:
            name = dotted_str(node.args[0].value)
            if name is not None:
                self.compiled.add(name)
        elif qual in TORCH_XLA_COMPILE:
            self._eager_step_model(node.args[0].value)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        function = self.ctx.current.statement
        if self.ctx.qualname(node.decorator) in TORCH_XLA_COMPILE and isinstance(function, cst.FunctionDef):
            self._eager_step_model(function.name)

    def _eager_step_model(self, fn: cst.BaseExpression) -> None:
        """The model a compiled training step calls is a module (NM110 leaves the step eager and counts on this
        rule to compile the model where the file places it)."""
        step = training_step(self.ctx, fn, self.ctx.scope)
        models = step_models(step, method=isinstance(fn, cst.Attribute)) if step is not None else []
        if len(models) == 1:
            self.used_as_module.add(models[0])

    def visit_Expr(self, node: cst.Expr) -> None:
        placed = placed_object(node.value)
        if placed is not None:
            name = dotted_str(placed)
            if name is not None:
                self.placements.append((self.ctx.current, node, name, placed))

    def finish(self) -> None:
        ctx = self.ctx
        if not ctx.settings.compile or not self.placements:
            return
        modules = self._modules()
        classes = self._module_classes()
        done: set[tuple[int, str]] = set()
        text = ctx.source.text
        for occ, node, name, moved in self.placements:
            ctx.current = occ
            call = node.value
            if not self._is_device(call.args[0].value, occ.scope) or occ.in_loop:
                continue
            if name not in modules and not self._builds_module(moved, occ.scope, classes, modules):
                continue
            if not isinstance(occ.statement, cst.SimpleStatementLine) or len(occ.statement.body) != 1:
                continue
            key = (id(occ.scope), name)
            if key in done or name in self.compiled or _already_compiled(text, name):
                continue
            if name in ctx.facts.fully_sharded:
                continue  # FSDP2 shards it: TorchNeuron compiles SimpleFSDP, not fully_shard's hooks
            done.add(key)
            fixed = f"{name}.compile(backend={target(ctx).compile_backend()}, dynamic=False)"
            guard = neuron_path_test(ctx, call.args[0].value, node)
            if guard is None and not portable(ctx) and ctx.facts.paths.path_of(node) != XLA \
                    and self._either_device(call.args[0].value, occ.scope):
                guard = f"{ctx.module_ref('torch')}.device({code(call.args[0].value)}).type == {ctx.string('neuron')}"
            if ctx.report("NM107", call, statement=occ.statement, target=name, fixed=fixed):
                ctx.insert_after(occ.statement, f"if {guard}:\n    {fixed}\n" if guard else fixed + "\n")
        ctx.current = None


def _nn_class(qual: str) -> bool:
    """A module class of torch.nn (`torch.nn.Linear`, `torch.nn.modules.conv.Conv2d`), not a function."""
    if not qual.startswith("torch.nn.") or qual.startswith(("torch.nn.functional.", "torch.nn.init.",
                                                              "torch.nn.utils.", "torch.nn.parameter.")):
        return False
    last = qual.split(".")[-1]
    return last[:1].isupper() and last not in NOT_MODULES


def _requote(literal: cst.SimpleString, value: str) -> str:
    """`'openxla'` -> `'neuron'`: the same prefix and quotes around a new value."""
    return literal.value[: len(literal.prefix) + len(literal.quote)] + value + literal.value[-len(literal.quote):]


def _already_compiled(text: str, name: str) -> bool:
    n = re.escape(name)
    return bool(re.search(rf"{n}\.compile\(|torch\.compile\(\s*{n}\b|{n}\s*=\s*torch\.compile\(", text))


class CompileBackend(Rule):
    """NM108 torch.compile(backend="openxla", dynamic=True); NM110 torch_xla.compile(fn)."""

    codes = ("NM108", "NM110")
    # Every edit needs one of these: an XLA (or neuron) backend literal, or an import of torch_xla.
    triggers = (b"torch_xla", b"openxla", b"torchxla", b"neuron")
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """torch_xla.compile, or torch.compile with an XLA (or neuron) backend string."""
        return scan.any_qual(TORCH_XLA_COMPILE) or (
            scan.any_qual(TORCH_COMPILE) and not (XLA_BACKENDS | {"neuron"}).isdisjoint(scan.strings))

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual in TORCH_COMPILE:
            self._torch_compile(node)
        elif qual in TORCH_XLA_COMPILE:
            self._torch_xla_compile(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        ctx = self.ctx
        if ctx.qualname(node.decorator) in TORCH_XLA_COMPILE:
            function = ctx.current.statement
            if isinstance(function, cst.FunctionDef) and TRAINING_CALL.search(code(function.body)):
                self._eager_step(node, function.name, function)
                return
            torch = ctx.module_ref("torch")
            fixed = f"{torch}.compile(backend={target(ctx).compile_backend()}, dynamic=False)"
            if ctx.report("NM110", node.decorator, statement=ctx.current.statement, call=code(node.decorator),
                          fixed=fixed):
                ctx.replace(node.decorator, expression(fixed))

    def _torch_compile(self, node: cst.Call) -> None:
        ctx = self.ctx
        backend = arg(node, 1, "backend")
        dynamic = arg(node, None, "dynamic")
        if backend is not None and string_value(backend.value) in XLA_BACKENDS:
            if portable(ctx):
                new_backend = expression(target(ctx).compile_backend())
            else:
                new_backend = backend.value.with_changes(value=_requote(backend.value, "neuron"))
            if ctx.report("NM108", backend.value, text=code(backend).strip(" ,"), fixed=f"backend={code(new_backend)}"):
                ctx.replace(backend.value, new_backend)
        if dynamic is not None and isinstance(dynamic.value, cst.Name) and dynamic.value.value == "True":
            if backend is not None and string_value(backend.value) in XLA_BACKENDS | {"neuron"}:
                if ctx.report("NM108", dynamic.value, text="dynamic=True", fixed="dynamic=False"):
                    ctx.replace(dynamic.value, cst.Name("False"))

    def _torch_xla_compile(self, node: cst.Call) -> None:
        ctx = self.ctx
        fn = arg(node, 0, "f")
        full = arg(node, 1, "full_graph")
        name = arg(node, 2, "name")
        if any(a not in (fn, full, name) for a in node.args):
            return
        torch = ctx.module_ref("torch")
        step = training_step(ctx, fn.value, ctx.scope) if fn is not None else None
        if step is not None:
            self._eager_step(node, fn.value, step)
            return
        parts = [code(fn.value)] if fn is not None else []
        parts += [f"backend={target(ctx).compile_backend()}", "dynamic=False"]
        if full is not None:
            parts.append(f"fullgraph={code(full.value)}")
        fixed = f"{torch}.compile({', '.join(parts)})"
        if ctx.report("NM110", node, call=short(node), fixed=f"`{fixed}`"):
            ctx.replace(node, expression(fixed))

    def _eager_step(self, node: cst.Call | cst.Decorator, fn: cst.BaseExpression, step: cst.FunctionDef) -> None:
        """`torch_xla.compile(step)` of a training step (or of a whole epoch loop; `@torch_xla.compile` on one): the
        step runs eagerly and the model it calls is compiled (its forward and backward graphs; the optimizer step
        stays eager), where the file places it on the device (NM107 compiles it there) or, for a call, just before
        the call's statement when the model is bound there. Without one model to name: a marker."""
        ctx = self.ctx
        decorated = isinstance(node, cst.Decorator)
        models = step_models(step, method=isinstance(fn, cst.Attribute))
        statement = ctx.current.statement if ctx.current else None
        compile_call = f"compile(backend={target(ctx).compile_backend()}, dynamic=False)"
        what = code(fn)
        if len(models) == 1 and statement is not None:
            model = models[0]
            text = ctx.source.text
            where = self._home(step, model)
            compiled = _already_compiled(text, model) or (
                where is not None and placed(code(where), model) and ctx.settings.compile)
            bound = ctx.analysis.lookup(model.split(".")[0], ctx.scope) is not None
            if compiled or (bound and not decorated):
                fixed = (f"`{what}` eagerly" + ("" if compiled else f" and `{model}.{compile_call}`")
                         + " (Dynamo cannot compile backward() and optimizer.step() into one graph: compile the "
                           "model, keep the step eager)")
                if ctx.report("NM110", node.decorator if decorated else node, call=self._said(node), fixed=fixed):
                    self._uncompile(node, fn)
                    if not compiled:
                        ctx.insert_before(statement, f"{model}.{compile_call}\n")
                return
        fixed = (f"`{what}` eagerly and compile the model it calls with `model.{compile_call}` (Dynamo cannot "
                 "compile backward() and optimizer.step() into one graph)")
        if ctx.report("NM110", node.decorator if decorated else node, call=self._said(node), fixed=fixed,
                      marker=False) and statement is not None:
            from neuron_migrate.catalogue import rule
            from neuron_migrate.engine.edits import marker_room, marker_text

            self._uncompile(node, fn)
            what = f"compile the model `{what}` calls"
            if len(what) > marker_room("NM110"):
                what = "compile the model the step calls"
            ctx.mark(statement, marker_text("NM110", what, rule("NM110").link))

    def _home(self, step: cst.FunctionDef, model: str) -> cst.CSTNode | None:
        """The code that binds the name the step reads its model through: the scope it is bound in, seen from the
        step (for `self.model`, the class's)."""
        analysis = self.ctx.analysis
        scope = next((s for s in analysis.scopes if s.node is step), None)
        if scope is None:
            return None
        if "." in model:
            return scope.parent.node if scope.parent is not None else None
        owner = analysis.lookup(model, scope)
        return owner.node if owner is not None and owner is not scope else None

    @staticmethod
    def _said(node: cst.Call | cst.Decorator) -> str:
        return f"@{code(node.decorator)}" if isinstance(node, cst.Decorator) else short(node)

    def _uncompile(self, node: cst.Call | cst.Decorator, fn: cst.BaseExpression) -> None:
        """The call becomes the function it compiled; the decorator goes."""
        if isinstance(node, cst.Call):
            self.ctx.replace(node, fn)
            return
        index = list(self.ctx.current.statement.decorators).index(node)

        def drop(function: cst.FunctionDef) -> cst.FunctionDef:
            decorators = list(function.decorators)
            del decorators[index]
            return function.with_changes(decorators=decorators)

        self.ctx.replace(self.ctx.current.statement, drop)


def placed(text: str, model: str) -> bool:
    """`model = ....to(...)` or `model.to(...)` somewhere in the file (NM107 compiles a model where it is placed)."""
    name = re.escape(model)
    return re.search(rf"(?<![\w.]){name}\s*=\s*[^\n]*\.to\(|(?<![\w.]){name}\.to\(", text) is not None
