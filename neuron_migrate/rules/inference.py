"""NM501-NM507, NM510: torch_neuronx inference tracing, NKI entry points, the Neuron libraries and the NxD
inference APIs (Neuron 2.34 ended XLA and NxD inference on Trn2/Trn3; on Inf2/Trn1 the XLA path is maintained,
NM510 says so instead); NM520 trn1 instance types."""

from __future__ import annotations

import functools
import re

import libcst as cst

from neuron_migrate.catalogue import load_data, rule as catalogue_rule
from neuron_migrate.files.envfiles import TRN1
from neuron_migrate.engine.edits import marker_room, marker_text
from neuron_migrate.engine.names import Occurrence, Scope, dotted, dotted_str
from neuron_migrate.rules.patterns import arg, code, has_star, short, string_value
from neuron_migrate.engine.facts import fact, inf1_names
from neuron_migrate.rules import Rule, release
from neuron_migrate.rules import sharding  # noqa: F401  (registers the nxd_imports_taken fact read below)
from neuron_migrate.engine.imports import _native_import_line
from neuron_migrate.rules.data import tree_mover
from neuron_migrate.rules.rewrites import assigned_name, assigned_values, paren
from neuron_migrate.rules.target import target
from neuron_migrate.rules.unsupported import imports_any, lookup, reference, spelled_as_text
from neuron_migrate.syntax.parse import expression

TRACE = "torch_neuronx.trace"
TRACE_NOTE = "traces with the XLA-based torch-neuronx"  # NM510's words for a trace on a target that keeps it
JIT_SAVE, JIT_LOAD = "torch.jit.save", "torch.jit.load"
JIT_ARTIFACT = frozenset({JIT_SAVE, JIT_LOAD})
# NM502's three cases: (what the call does, what to do instead, the marker's few words)
TRACE_OPTIONS = ("relies on an ahead-of-time traced Neuron model",
                 "compile the model where it is used with `torch.compile(model, backend=\"neuron\", fullgraph=True, "
                 "dynamic=False)` (the on-disk compile cache makes later starts fast) and save or load its weights "
                 "(`state_dict`) instead; compiler options have no native counterpart",
                 "compile with torch.compile, not a trace")
LITERALS = (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
NEURONX_API = {
    "torch_neuronx.DataParallel": "NM503",
    "torch_neuronx.async_load": "NM504",
    "torch_neuronx.lazy_load": "NM504",
    "torch_neuronx.move_trace_to_device": "NM504",
    "torch_neuronx.nki_jit": "NM505",
    "torch_neuronx.xla_impl": "NM505",
    "neuronxcc.nki": "NM505",
}
NEURON_ROOTS = ("torch_neuronx", "torch_neuron")
NKI_BUNDLED = "neuronxcc.nki"  # the compiler's NKI namespace: one finding a file, at its import
XLA_ERA_NKI = ("is the XLA-era way to call an NKI kernel", "write the kernel with `@nki.jit` (the standalone `nki` "
               "package) and register it for PyTorch with `@nki_op(\"namespace::name\", mutates_args=...)`",
               "port to an `@nki.jit` kernel + nki_op")
XLA_IMPL = ("comes from `torch_neuronx.xla_impl`, the XLA-based implementation, which TorchNeuron does not have",
            "an NKI kernel becomes an `@nki.jit` function registered with `@nki_op(\"namespace::name\", "
            "mutates_args=...)`; an HLO custom call or other XLA operation becomes PyTorch operators or an NKI kernel",
            "port xla_impl use to PyTorch or nki_op")
# NxD Core inference APIs (end of support on Trn2/Trn3 in Neuron 2.34) -> what the finding calls them.
NXD_TRACE = {
    "neuronx_distributed.trace.parallel_model_trace": "NxD Core's `parallel_model_trace`",
    "neuronx_distributed.trace.trace.parallel_model_trace": "NxD Core's `parallel_model_trace`",
    "neuronx_distributed.parallel_model_trace": "NxD Core's `parallel_model_trace`",
    "neuronx_distributed.trace.parallel_model_load": "NxD Core's `parallel_model_load`",
    "neuronx_distributed.trace.ModelBuilder": "NxD Core's `ModelBuilder`",
    "neuronx_distributed.trace.model_builder.ModelBuilder": "NxD Core's `ModelBuilder`",
    "neuronx_distributed.ModelBuilder": "NxD Core's `ModelBuilder`",
    "neuronx_distributed.trace.ModelBuilderV2": "NxD Core's `ModelBuilderV2`",
    "neuronx_distributed.trace.model_builder_v2.ModelBuilderV2": "NxD Core's `ModelBuilderV2`",
    "neuronx_distributed.ModelBuilderV2": "NxD Core's `ModelBuilderV2`",
}
NXD_INFERENCE = "neuronx_distributed_inference"


@functools.lru_cache(maxsize=1)
def library_hints() -> dict[str, str]:
    return load_data("inference.toml")["libraries"]


HLO_SNAPSHOT = "libneuronxla.register_hlo_snapshot_callback"  # NM258
LIBRARY_ROOTS = ("neuronx_distributed", "transformers_neuronx", "optimum.neuron", "libneuronxla",
                 "neuronxcc")  # library_hints' top keys


@fact
def imports_neuron_libraries(ctx) -> bool:
    """The file imports one of the Neuron libraries (NEURON_ROOTS)."""
    return imports_any(ctx, NEURON_ROOTS)


def maintained_fields(settings) -> dict[str, str]:
    return {"instance": release.instance(settings), "release": release.release(settings).sdk}


@fact
def xla_inference_maintained(ctx) -> bool:
    """The target instance and release still maintain the XLA inference path (inf2, trn1)."""
    return release.xla_inference_maintained(ctx.settings)


def _uses(n: int, what: str = "use") -> str:
    return f"{n} {what}" + ("s" if n != 1 else "")


TENSOR_FACTORIES = frozenset({"rand", "randn", "randint", "zeros", "ones", "empty", "full", "tensor", "arange",
                              "rand_like", "randn_like", "zeros_like", "ones_like", "stack", "cat"})


class Traced:
    """A `torch_neuronx.trace(model, example_inputs)` call the rule rewrites, and where its result goes."""

    __slots__ = ("model", "name", "node", "occ", "scope")

    def __init__(self, occ: Occurrence, node: cst.Call, model: cst.BaseExpression, name: str | None,
                 scope: Scope | None) -> None:
        self.occ, self.node, self.model, self.name, self.scope = occ, node, model, name, scope


class NeuronxTrace(Rule):
    """NM501: `torch_neuronx.trace(model, example_inputs)` becomes `torch.compile(model.to(<neuron>), ...)`, and
    the calls of the traced model get their inputs on the device too (the traced model took CPU tensors). Where
    the traced model is called out of sight (returned, stored, bound twice as on a CPU fallback branch) a marker
    asks for the inputs instead. NM502: a trace with compiler options, and `torch.jit.save` / `torch.jit.load`
    of a traced model, which the native path has no equivalent for (marked)."""

    codes = ("NM501", "NM502", "NM503", "NM504", "NM505", "NM510")
    triggers = (b"torch_neuronx", b"neuronxcc")

    @classmethod
    def words(cls) -> tuple[str, ...]:
        return ("jit",)  # `torch.jit.save` / `torch.jit.load` of a traced model, anywhere in the file (NM502)

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """Anything while one of NM501-NM505 may be on; with NM510 alone (the notes of a program set aside for Inf2
        or Trn1), a read of `torch_neuronx.trace`, the call it notes."""
        return any(settings.enabled(code) for code in cls.codes if code != "NM510") or scan.any_qual((TRACE,))

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.nki_imports: list = []  # (occurrence, node) of the imports of neuronxcc.nki
        self.nki_uses: list = []  # (occurrence, node) of the names read through it
        self.traces: list[Traced] = []
        self.reads: list[tuple[Occurrence, cst.Name]] = []

    def visit_Import(self, node: cst.Import) -> None:
        if any(_bundled_nki(dotted_str(a.name)) for a in node.names):
            self.nki_imports.append((self.ctx.current, node))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = None if node.relative or node.module is None else dotted_str(node.module)
        if _bundled_nki(module) or (module == "neuronxcc" and _imports_nki(node)):
            self.nki_imports.append((self.ctx.current, node))

    def finish(self) -> None:
        rewritten = [traced for traced in self.traces if self._compile(traced)]
        self._drop_trace_imports({id(t.node.func) for t in rewritten})
        self.ctx.current = None
        self._nki_finding()

    def _drop_trace_imports(self, rewritten: set[int]) -> None:
        """`from torch_neuronx import trace`: the native torch_neuronx has no `trace`, so the name goes from the
        import once every read of it was a trace call the rule rewrote."""
        ctx = self.ctx
        for scope in ctx.analysis.scopes:
            for name, bindings in scope.bindings.items():
                if len(bindings) != 1 or bindings[0].kind != "import" or bindings[0].qualname != TRACE \
                        or not isinstance(bindings[0].node, cst.ImportFrom):
                    continue
                reads = [(occ, node) for occ, node in self.reads if node.value == name
                         and not _not_a_read(node, occ.parent) and ctx.analysis.lookup(name, occ.scope) is scope]
                if reads and all(id(node) in rewritten for _, node in reads):
                    self._drop_alias(bindings[0].node, bindings[0].alias)

    def _drop_alias(self, statement: cst.ImportFrom, alias: cst.ImportAlias) -> None:
        names = [a for a in statement.names if a is not alias]
        if not names:
            line = self.ctx.analysis.parents.get(statement)
            if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and not self._imports_module():
                # importing torch_neuronx registers the `neuron` device where torch's backend autoload is off:
                # the file's last import of it stays, as the module itself
                self.ctx.replace(line, _native_import_line)
            else:
                self.ctx.remove(statement)
            return

        def fn(new: cst.ImportFrom) -> cst.ImportFrom:
            kept = [a for a in new.names if dotted_str(a.name) != dotted_str(alias.name) or
                    (a.asname is not None) != (alias.asname is not None)]
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return new.with_changes(names=kept)
        self.ctx.replace(statement, fn)

    def _imports_module(self) -> bool:
        """Whether the file has an `import torch_neuronx` (any alias) of its own."""
        return any(b.kind == "import" and b.qualname == "torch_neuronx" and isinstance(b.node, cst.Import)
                   for scope in self.ctx.analysis.scopes for bindings in scope.bindings.values() for b in bindings)

    def _nki_finding(self) -> None:
        """The compiler's NKI namespace: one finding at its first import (or first use), with the count of uses."""
        ctx = self.ctx
        if self._maintained() or not (self.nki_imports or self.nki_uses):
            return
        occ, node = (self.nki_imports or self.nki_uses)[0]
        ctx.current = occ
        ctx.report("NM505", node, **nki_fields(len(self.nki_uses)))
        ctx.current = None

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if self._maintained():
            # Inf2 / Trn1: the XLA inference path is maintained and TorchNeuron does not run there, so the traced
            # artifacts, DataParallel and the loading helpers stay as they are; the trace call gets a note
            if qual == TRACE:
                ctx.report("NM510", node, call=short(node), what=TRACE_NOTE, **maintained_fields(ctx.settings))
            return
        if qual == TRACE:
            self._trace(node)
        elif qual in JIT_ARTIFACT and self._uses_neuronx():
            self._artifact(node, qual)

    def _trace(self, node: cst.Call) -> None:
        ctx = self.ctx
        fn, example = arg(node, 0, "func"), arg(node, 1, "example_inputs")
        if fn is None or example is None or has_star(node) or len(node.args) != 2:
            ctx.report("NM502", node, **trace_options_fields(short(node)))
            return
        name = assigned_name(ctx, node)
        scope = ctx.analysis.lookup(name, ctx.current.scope) if name is not None else None
        self.traces.append(Traced(ctx.current, node, fn.value, name, scope))
        ctx.handled.add(node)
        ctx.handled.add(node.func)

    def _compile(self, traced: Traced) -> bool:
        """Report and rewrite one trace: the model on the device, compiled; the inputs of its calls moved."""
        ctx = self.ctx
        ctx.current = traced.occ
        device = target(ctx).device()
        model = code(traced.model)
        cpu = self._cpu_device(traced)
        placed = model if self._function(traced.model, traced.occ.scope) \
            or (cpu is not None and self._moved_to(traced.model, cpu[0], traced.occ.scope)) \
            else f"{paren(model)}.to({device})"
        fixed = (f"{ctx.module_ref('torch')}.compile({placed}, backend={target(ctx).compile_backend()}, "
                 "fullgraph=True, dynamic=False)")
        if not ctx.report("NM501", traced.node, call=short(traced.node), fixed=fixed,
                          status=release.xla_inference_status(ctx.settings)):
            return False
        if self._for_its_compile(traced):
            self._compile_now(traced, fixed, device)
            return True
        ctx.replace(traced.node, expression(fixed))
        warm_up = self._warm_up(traced, device)
        if warm_up is not None:
            ctx.insert_after(traced.occ.statement, warm_up)
        self._mark_saves(traced)
        if cpu is not None and self._place_on_device(traced, cpu):
            return True
        calls = self._calls(traced)
        if calls is None:
            subject = f"`{traced.name}`'s" if traced.name else "the model's"
            where = device if isinstance(expression(device), cst.Name) else ctx.string("neuron").strip("\"'")
            what = f"move {subject} inputs to {where}"
            ctx.mark(traced.occ.statement, marker_text("NM501", what, catalogue_rule("NM501").link))
            return True
        for call, scope in calls:
            for argument in call.args:
                moved = self._moved(argument, device, scope)
                if moved is not None:
                    ctx.replace(argument.value, expression(moved))
        return True

    def _cpu_device(self, traced: Traced) -> tuple[str, cst.Assign, cst.SimpleString] | None:
        """The device name the program put the trace's example inputs on, where it names the CPU for the trace
        API: `device = "cpu"` (or `torch.device("cpu")`) bound once in the function, then `x = x.to(device)` and
        `trace(model, x)`. Returns the name, its assignment and the "cpu" string in it."""
        ctx = self.ctx
        example = arg(traced.node, 1, "example_inputs")
        scope = traced.occ.scope
        if example is None or type(example.value) is not cst.Name or scope.kind != "function":
            return None
        for value in self._assigned(example.value.value, scope):
            device = self._to_target(value)
            if device is None:
                continue
            owner = ctx.analysis.lookup(device, scope)
            values = self._assigned(device, scope) if owner is scope else []
            if len(values) != 1 or len(owner.bindings[device]) != 1 or owner.bindings[device][0].conditional:
                continue
            text = values[0]
            if type(text) is cst.Call and ctx.qualname(text.func) == "torch.device" and len(text.args) == 1:
                text = text.args[0].value  # torch.device("cpu")
            assign = ctx.analysis.parents.get(values[0])
            if string_value(text) == "cpu" and type(text) is cst.SimpleString and type(assign) is cst.Assign:
                return device, assign, text
        return None

    def _assigned(self, name: str, scope: Scope) -> list[cst.BaseExpression]:
        """The values `name = <value>` assigns in `scope` (plain single-target assignments only)."""
        values = []
        for binding in scope.bindings.get(name, []):
            if binding.kind != "assign":
                continue
            node = self.ctx.analysis.parents.get(binding.node)
            if type(node) is cst.AssignTarget:
                node = self.ctx.analysis.parents.get(node)
            if type(node) is cst.Assign and len(node.targets) == 1 and node.targets[0].target is binding.node:
                values.append(node.value)
        return values

    @staticmethod
    def _to_target(value: cst.BaseExpression) -> str | None:
        """`<x>.to(device)`: the device name."""
        if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "to" \
                and len(value.args) == 1 and value.args[0].keyword is None and type(value.args[0].value) is cst.Name:
            return value.args[0].value.value
        return None

    def _moved_to(self, expr: cst.BaseExpression, device: str, scope: Scope) -> bool:
        """`expr` is a name the function binds to `<x>.to(device)` (among its other bindings)."""
        return type(expr) is cst.Name and any(self._to_target(v) == device for v in self._assigned(expr.value, scope))

    def _place_on_device(self, traced: Traced, cpu: tuple[str, cst.Assign, cst.SimpleString]) -> bool:
        """The program put the model's inputs on the CPU for the trace API through one device name
        (`device = "cpu"`): on TorchNeuron that name becomes the `neuron` device, so the model, the example and
        the data of every call land there together, on every path (a CPU fallback branch included), and the
        calls stay as written. Only where every call of the traced name passes names moved to that device; the
        comment above the assignment that speaks of the CPU goes with it."""
        ctx = self.ctx
        device, assign, text = cpu
        scope = traced.occ.scope
        if traced.name is None:
            return False
        for occ, node in self.reads:
            if node.value != traced.name or ctx.analysis.lookup(traced.name, occ.scope) is not scope:
                continue
            parent = occ.parent
            if _not_a_read(node, parent) or node is traced.model \
                    or (type(parent) is cst.Attribute and parent.value is node):  # `model.eval()`: no data
                continue
            if not (type(parent) is cst.Call and parent.func is node and parent.args
                    and all(a.star == "" and self._moved_to(a.value, device, scope) for a in parent.args)):
                return False
        native = target(ctx).device_type()
        if string_value(expression(native)) is not None:
            native = f"{text.quote}{string_value(expression(native))}{text.quote}"  # in the program's quotes
        ctx.replace(text, expression(native))
        line = ctx.analysis.parents.get(assign)
        if type(line) is cst.SimpleStatementLine and any(
                e.comment is not None and "cpu" in e.comment.value.lower() for e in line.leading_lines):
            kept = [e for e in line.leading_lines if e.comment is None or "cpu" not in e.comment.value.lower()]
            ctx.replace(line, lambda new, kept=kept: new.with_changes(leading_lines=kept))
        return True

    def _for_its_compile(self, traced: Traced) -> bool:
        """The trace runs for its compile alone (a benchmark timing it, a step reporting compile time): its result
        is dropped, or bound to a name nothing reads."""
        occ = traced.occ
        if isinstance(occ.small, cst.Expr) and occ.small.value is traced.node:
            return True
        if traced.name is None or traced.scope is None or len(traced.scope.bindings.get(traced.name, [])) != 1:
            return False
        return not any(node.value == traced.name and not _not_a_read(node, o.parent)
                       and self.ctx.analysis.lookup(traced.name, o.scope) is traced.scope for o, node in self.reads)

    def _compile_now(self, traced: Traced, fixed: str, device: str) -> None:
        """`torch.compile` is lazy: the model compiles at its first call. So the statement calls the compiled model
        once on the example inputs (on the device), then waits for the device, and whatever times it still times
        the compile; where the inputs' shape is not plain to see (a tensor or a tuple of them), a marker."""
        ctx = self.ctx
        statement = traced.occ.statement
        inputs = self._example_inputs(traced, device)
        if inputs is None or len(statement.body) != 1:
            ctx.replace(traced.node, expression(fixed))
            example = code(arg(traced.node, 1, "example_inputs").value)
            what = f"run it once on `{example}` to compile"
            if len(what) > marker_room("NM501"):
                what = "run it once on its example to compile"
            ctx.mark(statement, marker_text("NM501", what, catalogue_rule("NM501").link))
            return
        if traced.name is None:
            ctx.replace(traced.node, expression(f"{fixed}({inputs})"))
            ctx.insert_after(statement, target(ctx).synchronize_statement())
        else:
            ctx.replace(traced.node, expression(fixed))
            ctx.insert_after(statement, f"{traced.name}({inputs})  # compiles here, as the trace did\n"
                             + target(ctx).synchronize_statement())

    def _example_inputs(self, traced: Traced, device: str) -> str | None:
        """The example inputs as call arguments, on the device: a tuple of them, or one tensor torch makes."""
        example = arg(traced.node, 1, "example_inputs")
        value = example.value if example is not None else None
        if isinstance(value, cst.Tuple):
            inputs = [e.value for e in value.elements if not isinstance(e, cst.StarredElement)]
            if len(inputs) != len(value.elements):
                return None
        elif isinstance(value, cst.Name) and self._made_tensor(value, traced.occ.scope):
            inputs = [value]
        else:
            return None
        return ", ".join(self._moved(cst.Arg(value=i), device, traced.occ.scope) or code(i) for i in inputs)

    def _mark_saves(self, traced: Traced) -> None:
        """`traced.save(path)`: a TorchScript method the compiled model does not have (AttributeError): marked
        like `torch.jit.save(traced, path)`."""
        ctx = self.ctx
        for occ, node in self.reads:
            if node.value != traced.name or ctx.analysis.lookup(traced.name, occ.scope) is not traced.scope:
                continue
            if self._method_save(occ, node):
                ctx.current = occ
                self._report_save(ctx.analysis.parents.get(occ.parent), self._traced_source(traced))
        ctx.current = traced.occ

    def _method_save(self, occ: Occurrence, node: cst.Name) -> bool:
        """The read is `<it>.save(...)`."""
        parent = occ.parent
        if not (isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "save"):
            return False
        call = self.ctx.analysis.parents.get(parent)
        return isinstance(call, cst.Call) and call.func is parent

    @staticmethod
    def _traced_source(traced: Traced) -> str | None:
        return code(traced.model) if isinstance(traced.model, (cst.Name, cst.Attribute)) else None

    def _warm_up(self, traced: Traced, device: str) -> str | None:
        """`traced(<example on the device>)` after the compiled model is bound: the trace compiled the model on
        its example inputs where it was called, and a server warms up there, not at its first request. Only where
        the inputs are plain to see: a tuple of them, or a name bound once to a tensor torch makes."""
        small = traced.occ.small
        if traced.name is None or not isinstance(small, cst.Assign) or small.value is not traced.node \
                or len(traced.occ.statement.body) != 1:
            return None
        inputs = self._example_inputs(traced, device)
        return None if inputs is None else f"{traced.name}({inputs})  # compiles here, as the trace did\n"

    def _made_tensor(self, name: cst.Name, scope: Scope) -> bool:
        """`name` is bound once in its scope, to `torch.<factory>(...)` (rand, randint, zeros, ...)."""
        ctx = self.ctx
        owner = ctx.analysis.lookup(name.value, scope)
        bindings = owner.bindings.get(name.value, []) if owner is not None else []
        if len(bindings) != 1 or bindings[0].kind != "assign":
            return False
        node = bindings[0].node
        while node is not None and not isinstance(node, cst.Assign):
            node = ctx.analysis.parents.get(node)
        if node is None or len(node.targets) != 1 or not isinstance(node.value, cst.Call):
            return False
        made = ctx.qualname(node.value.func, owner) or ""
        return made.startswith("torch.") and made.rsplit(".", 1)[-1] in TENSOR_FACTORIES

    def _calls(self, traced: Traced) -> list[tuple[cst.Call, Scope]] | None:
        """Every call of the traced model, with the scope it is made in, or None when it is used out of sight: not
        bound to one name, bound to it more than once (a CPU fallback branch binds it too), returned, stored or
        passed on (`torch.jit.save` of it excepted: NM502 marks that)."""
        ctx = self.ctx
        name, scope = traced.name, traced.scope
        if name is None or scope is None or len(scope.bindings.get(name, [])) != 1:
            return None
        calls = []
        for occ, node in self.reads:
            if node.value != name or ctx.analysis.lookup(name, occ.scope) is not scope:
                continue
            parent = occ.parent
            if isinstance(parent, cst.Call) and parent.func is node:
                calls.append((parent, occ.scope))
            elif _not_a_read(node, parent) or self._saved(occ, parent) or self._method_save(occ, node):
                continue
            else:
                return None
        return calls

    def _saved(self, occ: Occurrence, argument: cst.CSTNode | None) -> bool:
        """The read is the model `torch.jit.save(<it>, path)` saves."""
        if not isinstance(argument, cst.Arg) or argument.keyword is not None:
            return False
        call = self.ctx.analysis.parents.get(argument)
        return isinstance(call, cst.Call) and call.args[0] is argument \
            and self.ctx.qualname(call.func, occ.scope) == JIT_SAVE

    def _moved(self, argument: cst.Arg, device: str, scope: Scope | None = None) -> str | None:
        """The argument's value on the device (a tensor; with `*`, each tensor of a sequence; with `**`, each value
        of a mapping; a tuple, list or dict of tensors, written there or bound to the name in `scope`, each
        tensor of it), or None for a constant."""
        value = argument.value
        if isinstance(value, LITERALS) or (isinstance(value, cst.Name) and value.value in ("None", "True", "False")):
            return None
        text = code(value)
        if argument.star == "*":
            t = next(n for n in ("t", "tensor", "t_") if not re.search(rf"\b{n}\b", text + device))
            return f"({t}.to({device}) for {t} in {text})"
        if argument.star == "**":
            k, v = next((k, v) for k, v in (("k", "v"), ("key", "value")) if not re.search(rf"\b({k}|{v})\b", text + device))
            return f"{{{k}: {v}.to({device}) for {k}, {v} in {paren(text)}.items()}}"
        if isinstance(value, (cst.Tuple, cst.List, cst.Dict)) or self._bound_structure(value, scope):
            return tree_mover(self.ctx)(device, text, non_blocking=False)  # a structure of tensors: each one
        return f"{paren(text)}.to({device})"

    def _bound_structure(self, value: cst.BaseExpression, scope: Scope | None) -> bool:
        """`value` is a name one of whose bindings in `scope` assigns a tuple, list or dict (`inputs = (a, b)`)."""
        return isinstance(value, cst.Name) and any(
            isinstance(bound, (cst.Tuple, cst.List, cst.Dict, cst.ListComp, cst.DictComp))
            for bound in assigned_values(self.ctx, value.value, scope))
        owner = self.ctx.analysis.lookup(value.value, scope)
        parents = self.ctx.analysis.parents
        for binding in owner.bindings.get(value.value, []) if owner is not None else []:
            target = parents.get(binding.node) if binding.kind == "assign" else None
            assign = parents.get(target)
            if isinstance(target, cst.AssignTarget) and isinstance(assign, cst.Assign) and isinstance(
                    assign.value, (cst.Tuple, cst.List, cst.Dict, cst.ListComp, cst.DictComp)):
                return True
        return False

    def _function(self, model: cst.BaseExpression, scope: Scope) -> bool:
        """A traced function (a lambda, or a name bound only by `def`): it has no parameters to move."""
        if isinstance(model, cst.Lambda):
            return True
        if not isinstance(model, cst.Name):
            return False
        owner = self.ctx.analysis.lookup(model.value, scope)
        return owner is not None and all(b.kind == "def" for b in owner.bindings[model.value])

    def _artifact(self, node: cst.Call, qual: str) -> None:
        """`torch.jit.save` / `torch.jit.load` in a file of the Neuron libraries: the traced artifact."""
        if qual == JIT_SAVE:
            saved = arg(node, 0, "m")
            self._report_save(node, self._traced_model(saved.value) if saved is not None else None)
        else:
            self.ctx.report("NM502", node, **artifact_fields(short(node), None, load=True))

    def _report_save(self, node: cst.Call, model: str | None) -> None:
        self.ctx.report("NM502", node, **artifact_fields(short(node), model))

    def _traced_model(self, saved: cst.BaseExpression) -> str | None:
        """The model a saved name was traced from, when the name is bound once, by a trace of this file."""
        if not isinstance(saved, cst.Name):
            return None
        scope = self.ctx.analysis.lookup(saved.value, self.ctx.current.scope)
        found = [t for t in self.traces if t.name == saved.value and t.scope is scope]
        if len(found) != 1 or scope is None or len(scope.bindings.get(saved.value, [])) != 1:
            return None
        model = found[0].model
        return code(model) if isinstance(model, (cst.Name, cst.Attribute)) else None

    def _uses_neuronx(self) -> bool:
        return self.ctx.facts.imports_neuron_libraries and not self.ctx.facts.inferentia1

    def _maintained(self) -> bool:
        return self.ctx.facts.xla_inference_maintained

    def visit_Name(self, node: cst.Name) -> None:
        self.reads.append((self.ctx.current, node))
        self._reference(node)

    def _reference(self, node: cst.CSTNode) -> None:
        if node in self.ctx.handled or self._maintained():
            return
        qual = reference(self.ctx, node)
        found = lookup(NEURONX_API, qual)
        if found is None:
            return
        if _bundled_nki(qual):
            self.nki_uses.append((self.ctx.current, node))
            self.ctx.handled.add(node)
        else:
            self.ctx.report(found, node, **api_fields(found, qual, dotted_str(node)))

    visit_Attribute = _reference


def trace_options_fields(call: str) -> dict[str, str]:
    """NM502's fields for a trace with compiler options (or a star, or other arguments): `call` its code."""
    what, todo, marker = TRACE_OPTIONS
    return {"call": call, "what": what, "todo": todo, "short": marker}


def artifact_fields(call: str, model: str | None, load: bool = False) -> dict[str, str]:
    """NM502's fields for `torch.jit.load` (`load`) or `torch.jit.save` of a traced model (`model`: the model it
    was traced from, where the file says)."""
    if load:
        return {"call": call, "what": "loads a traced Neuron model",
                "todo": "build the model, load its weights (`model.load_state_dict(torch.load(path))`), move it to "
                        "the `neuron` device and compile it with `torch.compile(model, backend=\"neuron\", "
                        "fullgraph=True, dynamic=False)`",
                "short": "load weights into the model, compile it"}
    weights = f"{model}.state_dict()" if model else "model.state_dict()"
    return {"call": call, "what": "saves a traced Neuron model",
            "todo": f"save the weights instead (`torch.save({weights}, path)`) and, where they are loaded, build the "
                    "model, load them and compile it with `torch.compile(model, backend=\"neuron\", fullgraph=True, "
                    "dynamic=False)` (its compiled graphs are cached on disk)",
            "short": f"save {weights} instead"}


def api_fields(code: str, qual: str, spelled: str | None) -> dict[str, str]:
    """The fields of NM503-NM505 for a read of a torch_neuronx API (`NEURONX_API`) spelled `spelled` in the file."""
    fields = spelled_as_text(spelled, qual)
    if code == "NM505":
        what, todo, marker = XLA_ERA_NKI if qual.rsplit(".", 1)[-1] == "nki_jit" else XLA_IMPL
        fields.update(what=what, todo=todo, short=marker)
    return fields


def nki_fields(uses: int) -> dict[str, str]:
    """NM505's fields for the NKI namespace bundled with neuronx-cc, read `uses` times in the file."""
    count = f" ({_uses(uses)} in this file)" if uses else ""
    return {"name": NKI_BUNDLED, "what": f"is the NKI namespace bundled with neuronx-cc, removed in Neuron 2.34{count}",
            "todo": "import NKI from the standalone `nki` package TorchNeuron uses (`import nki.language as nl`, "
                    "`import nki.isa as nisa`), then port the kernels (the NKI migration guide)",
            "short": f"switch to `nki.language`{f' ({_uses(uses)})' if uses else ''}"}


def _not_a_read(node: cst.Name, parent: cst.CSTNode | None) -> bool:
    """The name is an attribute's, a keyword's, a definition's or an assignment's target, not a read of it."""
    if isinstance(parent, cst.Attribute):
        return parent.attr is node
    if isinstance(parent, cst.Arg):
        return parent.keyword is node
    return isinstance(parent, (cst.AssignTarget, cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias,
                               cst.AsName))


def _bundled_nki(module: str | None) -> bool:
    return module is not None and (module == NKI_BUNDLED or module.startswith(NKI_BUNDLED + "."))


def _imports_nki(node: cst.CSTNode) -> bool:
    """`from neuronxcc import nki` (the NKI namespace, imported by name from the compiler's package)."""
    return isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar) \
        and any(dotted_str(a.name) == "nki" for a in node.names)


def _in_try(node: cst.CSTNode | None, parents) -> bool:
    """`node` sits in a `try` statement of its function (or module)."""
    parent = parents.get(node) if node is not None else None
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(parent, cst.Try):
            return True
        parent = parents.get(parent)
    return False


class NeuronLibrary(Rule):
    """neuronx_distributed, transformers_neuronx, optimum.neuron, libneuronxla and the compiler's private modules
    (neuronxcc but its NKI namespace, NM505's): reported where they are imported, one finding per library and file
    (at its first import, with the count and the hints of the parts imported).

    libneuronxla's HLO snapshot hook, `libneuronxla.register_hlo_snapshot_callback(callback)` as a statement of its
    own, is NM258: the statement goes, with one marker in its place, and an import of libneuronxla that nothing
    else reads is not NM506's (the import tidy-up takes it)."""

    codes = ("NM506", "NM524", "NM510", "NM258")
    triggers = (b"neuron",)
    context = (b"neuronx_distributed", b"transformers_neuronx", b"optimum", b"libneuronxla", b"neuronxcc")

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """An import of one of the libraries; with NM506 and NM258 off (a set-aside program's notes), one from
        optimum-neuron, whose inference classes NM524 / NM510 report."""
        return scan.any_module_under(library_hints()) and (
            settings.enabled("NM506") or settings.enabled("NM258")
            or any(module.startswith("optimum.neuron") for module in scan.modules))

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.found: dict[str, list] = {}  # library -> [(occurrence, node, module, hint)]
        # imports of optimum-neuron's trainer classes only: NM508 / NM509 report them, NM506 counts them when they stay
        self.classes_only: set[cst.CSTNode] = set()
        # (id of the scope that binds a name, the name) -> the reads of it in the snapshot registrations removed
        self.unhooked: dict[tuple[int, str], int] = {}

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) != HLO_SNAPSHOT:
            return
        occ = ctx.current
        if not (isinstance(occ.small, cst.Expr) and occ.small.value is node):
            return  # a registration inside an expression: the import stays marked (NM506)
        head = (dotted(node.func) or [""])[0]
        owner = ctx.analysis.lookup(head, occ.scope)
        if owner is None or any(b.kind != "import" or _in_try(b.node, ctx.analysis.parents)
                                for b in owner.bindings.get(head, ())):
            return  # a guard's import (`except ImportError: libneuronxla = None`): it stays marked (NM506)
        if ctx.report("NM258", node, call=short(node), marker=False):
            info = catalogue_rule("NM258")
            ctx.remove(occ.small)
            ctx.mark(occ.statement, marker_text("NM258", info.format_marker(), info.link))
            key = (id(owner), head)
            self.unhooked[key] = self.unhooked.get(key, 0) + 1

    def _unhooked(self, occ: Occurrence, node: cst.CSTNode) -> bool:
        """An import of libneuronxla whose every name is read only by the snapshot registrations removed: the
        tidy-up takes it (not inside a `try`, where it is a guard's and stays)."""
        if not self.unhooked:
            return False
        if isinstance(node, cst.ImportAlias):  # `import libneuronxla as lnx`: one finding per alias
            aliases = [node]
        elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            aliases = list(node.names)
        else:
            return False
        analysis = self.ctx.analysis
        if _in_try(node, analysis.parents):
            return False
        for alias in aliases:
            name = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) \
                else (dotted(alias.name) or [""])[0]
            owner = analysis.lookup(name, occ.scope)
            if owner is None:
                return False
            reads = sum(scope.reads.get(name, 0) for scope in analysis.scopes
                        if name in scope.reads and analysis.lookup(name, scope) is owner)
            if reads != self.unhooked.get((id(owner), name), 0):
                return False
        return True

    def finish(self) -> None:
        ctx = self.ctx
        taken = ctx.facts.nxd_imports_taken  # removed by NM233 (rules/sharding.py): nothing of the library is left
        kept = ctx.facts.optimum_classes_kept  # optimum-neuron trainer classes NM509 keeps (rules/huggingface.py)
        for library, imports in self.found.items():
            imports = [found for found in imports if id(found[1]) not in taken
                       and (id(found[1]) in kept or found[1] not in self.classes_only)
                       and not (library == "libneuronxla" and self._unhooked(found[0], found[1]))]
            if not imports:
                continue  # every import goes with the registrations that read it (NM258)
            if all(found[1] in self.classes_only for found in imports):
                continue  # nothing but the trainer classes: NM509's markers say what to port
            occ, node, module, _ = imports[0]
            ctx.current = occ
            ctx.report("NM506", node, **library_fields(library, module, [hint for *_, hint in imports]))
        ctx.current = None

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            self._module(alias, dotted_str(alias.name))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not node.relative and node.module is not None:
            self._module(node, dotted_str(node.module))

    def _module(self, node: cst.CSTNode, module: str) -> None:
        names = [dotted_str(a.name) or "" for a in node.names] \
            if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar) else None
        served, library, hint, classes_only = library_import(module, names)
        if served:
            code, fields = optimum_finding(served, self.ctx.settings)
            self.ctx.report(code, node, **fields)
            self.ctx.handled.add(node)
        if library is not None:
            if classes_only:
                self.classes_only.add(node)
            else:
                self.ctx.handled.add(node)
            self.found.setdefault(library, []).append((self.ctx.current, node, module, hint))


def library_import(module: str, names: list[str] | None) -> tuple[list[str], str | None, str | None, bool]:
    """What NeuronLibrary makes of an import of `module` (`names`: what `from module import ...` imports; None for
    `import module` and a star import): (the optimum-neuron inference classes it imports, which NM524 / NM510
    report; the library NM506 counts it for, or None; that part's hint; whether it imports nothing else but
    optimum-neuron's trainer classes, which NM508 / NM509 report). An import that names an NxD Core inference API
    is NM507's, and the compiler's NKI namespace NM505's: neither is counted."""
    classes_only = names is not None and optimum_classes_only(module, names)
    if not classes_only and names is not None and any(f"{module}.{name}" in NXD_TRACE for name in names):
        return [], None, None, False  # NM507 (or NM510) reports it with the documented replacement
    if _bundled_nki(module) or (module == "neuronxcc" and names is not None and "nki" in names):
        return [], None, None, False  # NeuronxTrace reports the compiler's NKI namespace (NM505)
    hint = lookup(library_hints(), module)
    served: list[str] = []
    if hint is not None and module.startswith("optimum.neuron") and names is not None:
        served = [n for n in names if optimum_inference_class(n, module)]
        if served:
            rest = [n for n in names if n not in served]
            if not rest:
                return served, None, None, False  # NM524 (or NM510) says all there is to say about this import
            from neuron_migrate.rules.huggingface import classes

            # beside trainer classes only, the import is NM508 / NM509's as the trainer classes' own import is
            classes_only = all(f"{module}.{n}" in classes() for n in rest)
    if hint is None:
        return served, None, None, False
    library = next((root for root in LIBRARY_ROOTS if module == root or module.startswith(root + ".")), module)
    return served, library, hint, classes_only


def optimum_finding(served: list[str], settings) -> tuple[str, dict[str, str]]:
    """(code, message fields) of an import of optimum-neuron's inference classes `served`: NM524 with the native
    route of each, NM510 where the target still maintains the XLA inference path."""
    if release.xla_inference_maintained(settings):
        return "NM510", {**optimum_note(served), **maintained_fields(settings)}
    names = " and ".join(f"`{n}`" for n in served)
    verb = "exports and compiles" if len(served) == 1 else "export and compile"
    routes = [optimum_route(n) for n in served]
    route = routes[0][0] if len(served) == 1 else "; ".join(f"for `{n}`, {r}" for n, (r, _) in zip(served, routes))
    marks = list(dict.fromkeys(m for _, m in routes))
    return "NM524", {"subject": f"{names} {verb}", "route": route,
                     "mark": marks[0] if len(marks) == 1 else OPTIMUM_ROUTES, **maintained_fields(settings)}


def library_fields(library: str, module: str, hints: list[str]) -> dict[str, str]:
    """NM506's message fields for a library's imports in a file (`module`: the first one's; `hints`: each one's)."""
    n = len(hints)
    return {"module": module if n == 1 else library, "hint": "; ".join(dict.fromkeys(hints)), "library": library,
            "count": "" if n == 1 else f" ({n} imports in this file)", "uses": "" if n == 1 else f" ({n} imports)"}


def optimum_note(served: list[str]) -> dict[str, str]:
    """NM510's fields for an import of optimum-neuron's inference classes `served`."""
    verb = "exports and compiles" if len(served) == 1 else "export and compile"
    return {"call": "` and `".join(served), "what": f"{verb} models for the XLA-based stack with optimum-neuron"}


def nxd_trace_import(module: str, names: list[str]) -> tuple[str, str] | None:
    """(the import as NM507 / NM510 name it, what its NxD Core inference APIs are) for `from module import names`;
    None where it imports none of them."""
    found = [(name, NXD_TRACE[f"{module}.{name}"]) for name in names if f"{module}.{name}" in NXD_TRACE]
    if not found:
        return None
    return (f"from {module} import {', '.join(name for name, _ in found)}",
            " and ".join(dict.fromkeys(what for _, what in found)))


def _optimum_table() -> dict:
    return load_data("inference.toml")["optimum_inference"]


def optimum_inference_class(name: str, module: str = "optimum.neuron") -> bool:
    """Whether `name`, imported from `module`, is one of optimum-neuron's inference classes
    (`NeuronModelForCausalLM`, `NeuronFluxPipeline`); its training models (`optimum.neuron.models.training`'s
    `NeuronModelForCausalLM`, fine-tuned with its trainer) are not."""
    table = _optimum_table()
    training = any(module == m or module.startswith(m + ".") for m in table["training_modules"])
    return not training and name.startswith(tuple(table["prefixes"]))


def plain_class(name: str) -> str | None:
    """The plain Hugging Face class an optimum-neuron inference class stands for (`NeuronModelForMaskedLM`:
    `transformers.AutoModelForMaskedLM`), or None where its name does not tell."""
    table = _optimum_table()
    if name in table["plain"]:
        return table["plain"][name]
    if name.startswith("NeuronModelFor"):
        return "transformers.AutoModelFor" + name[len("NeuronModelFor"):]
    if name.endswith("Pipeline"):
        return "diffusers." + name[len("Neuron"):]
    return None


def export_task_class(task: str) -> str | None:
    """The optimum-neuron class of an `optimum-cli export neuron --task` (`text-generation`: NeuronModelForCausalLM)."""
    return _optimum_table()["tasks"].get(task)


OPTIMUM_ENDED = "XLA inference ended"
OPTIMUM_ROUTES = "ended on Trn2/3: vLLM or torch.compile"  # the marker of several routes


def optimum_route(name: str | None) -> tuple[str, str]:
    """The native route of an optimum-neuron inference class (None: a model whose kind is not known), and the words
    of its marker: vLLM Neuron for the language models generated from, the plain class compiled for the others."""
    table = _optimum_table()
    compiled = 'compile it with `torch.compile(model, backend="neuron")`'
    serve = (f"serve it with {table['vllm']}, or, to generate in the script, load it with "
             f"`transformers.AutoModelForCausalLM`, move it with `.to(\"neuron\")` and {compiled}")
    if name in table["serve"]:
        return serve, f"{OPTIMUM_ENDED}: use vLLM Neuron"
    plain = plain_class(name) if name is not None else None
    if plain is None:
        route = (f"serve a language model with {table['vllm']}; load another with its plain Hugging Face class "
                 f"(`transformers.AutoModel...`), move it with `.to(\"neuron\")` and {compiled}")
        return route, OPTIMUM_ROUTES
    short_name = plain.rpartition(".")[2]
    marks = (f"{OPTIMUM_ENDED}: use {short_name}", f"use {short_name} + torch.compile", f"use {short_name}")
    return (f"load it with the plain Hugging Face class `{plain}`, move it with `.to(\"neuron\")` and {compiled}",
            next((m for m in marks if len(m) <= marker_room("NM524")), marks[-1]))


def optimum_classes_only(module: str | None, names: list[str]) -> bool:
    """`from module import names` imports optimum-neuron's trainer classes only."""
    if module not in ("optimum.neuron", "optimum.neuron.trainers"):
        return False
    from neuron_migrate.rules.huggingface import classes

    return all(f"{module}.{name}" in classes() for name in names)


class NxdInference(Rule):
    """NM507: NxD Core inference tracing / model builders and NxD Inference, which Neuron 2.34 ended on Trn2/Trn3.

    Reported where they are imported by name (`from neuronx_distributed.trace import parallel_model_trace`,
    any import of neuronx_distributed_inference) and where they are called through a module
    (`nxd.trace.parallel_model_trace(...)`).
    """

    codes = ("NM507", "NM510")
    triggers = (b"neuronx_distributed",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """An import of NxD Inference, or an NxD Core inference API imported by name or read through a module."""
        return scan.any_module_under((NXD_INFERENCE,)) or any(name in NXD_TRACE for name in scan.imports) \
            or scan.any_qual(NXD_TRACE)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.nxdi: list = []  # (occurrence, node) of the imports of NxD Inference: one finding at the first

    def finish(self) -> None:
        if not self.nxdi:
            return
        occ, node = self.nxdi[0]
        self.ctx.current = occ
        n = len(self.nxdi)
        self._report(node, NXD_INFERENCE if n > 1 else self._module_of(node),
                     "NxD Inference" + (f" ({n} imports in this file)" if n > 1 else ""))
        self.ctx.current = None

    @staticmethod
    def _module_of(node: cst.CSTNode) -> str:
        if isinstance(node, cst.ImportFrom):
            return dotted_str(node.module)
        return next(m for a in node.names if (m := dotted_str(a.name) or "").split(".")[0] == NXD_INFERENCE)

    def _report(self, node: cst.CSTNode, name: str, what: str) -> None:
        code, fields = nxd_finding(name, what, self.ctx.settings)
        self.ctx.report(code, node, **fields)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None:
            return
        module = dotted_str(node.module)
        if module == NXD_INFERENCE or (module or "").startswith(NXD_INFERENCE + "."):
            self.nxdi.append((self.ctx.current, node))
            return
        if isinstance(node.names, cst.ImportStar):
            return
        found = nxd_trace_import(module, [dotted_str(alias.name) for alias in node.names])
        if found is not None:
            self._report(node, *found)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            module = dotted_str(alias.name) or ""
            if module == NXD_INFERENCE or module.startswith(NXD_INFERENCE + "."):
                self.nxdi.append((self.ctx.current, node))
                return

    def visit_Call(self, node: cst.Call) -> None:
        if not isinstance(node.func, cst.Attribute):
            return  # a name imported from the module was reported at its import
        what = NXD_TRACE.get(self.ctx.qualname(node.func) or "")
        if what is not None:
            self._report(node, short(node), what)


def nxd_finding(name: str, what: str, settings) -> tuple[str, dict[str, str]]:
    """(code, message fields) of NxdInference's finding on `name` (an import or a call) that uses `what`: NM507,
    NM510 where the target still maintains the XLA inference path."""
    if release.xla_inference_maintained(settings):
        return "NM510", {"call": name, "what": f"uses {what}", **maintained_fields(settings)}
    return "NM507", {"name": name, "what": what, **maintained_fields(settings)}


IMPORT_VERB = "imports torch-neuron, the PyTorch integration of"


class Inferentia1(Rule):
    """NM513: Inferentia 1 code (torch-neuron) is another product; reported once per file, where it first shows
    (an Inf1 API call, or an import of `torch_neuron`), and left as it is."""

    codes = ("NM513",)
    triggers = (b"trace", b"DataParallel", b"analyze_model", b"torch_neuron")
    context = (b"neuron",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """Only Inferentia 1 code: an Inf1 API read or a torch-neuron import (`facts.inferentia1`)."""
        apis, modules = inf1_names()
        return scan.any_qual(apis) or any(m.partition(".")[0] in modules for m in scan.modules)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._reported = False

    def _report(self, node: cst.CSTNode, subject: str, verb: str) -> None:
        if not self._reported and self.ctx.facts.inferentia1:
            self._reported = True
            self.ctx.report("NM513", node, subject=subject, verb=verb)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualname(node.func) in inf1_names()[0]:
            self._report(node, short(node), "is the torch-neuron API of")

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            if (dotted_str(alias.name) or "").split(".")[0] in inf1_names()[1]:
                self._report(node, f"import {dotted_str(alias.name)}", IMPORT_VERB)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted_str(node.module) if node.module is not None and not node.relative else None
        if module is not None and module.split(".")[0] in inf1_names()[1]:
            self._report(node, f"from {module} import ...", IMPORT_VERB)


# What names an instance type as a setting inside a longer string (the text before it, without the separators):
# `--instance-type trn1.2xlarge`, `InstanceType=ml.trn1.32xlarge`, `"instance_type": "trn1n.32xlarge"`
_INSTANCE_SETTING = re.compile(r"instance[-_ ]?type$", re.I)


class InstanceType(Rule):
    """NM520 where a program asks for a trn1 instance: a string that is the instance type (an estimator's
    `instance_type=`, a config value) or sets it in a command (`--instance-type trn1.2xlarge`). A mention is not a
    finding: a docstring or other bare string, a sentence that names trn1, a key of a table of instances (prices,
    core counts), anything in a test file. The finding is on the line of the text, inside a multi-line string."""

    codes = ("NM520",)
    triggers = (b"trn1",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A string literal that names trn1 (a comment or a name that does is no request)."""
        return any("trn1" in value for value in scan.strings)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._test_file = _test_file(ctx.path)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        match = TRN1.search(value or "")
        if match is None or self._test_file or not _requests(value, match):
            return
        parent = self.ctx.analysis.parents.get(node)
        if isinstance(parent, cst.Expr) or (isinstance(parent, cst.DictElement) and parent.key is node):
            return  # a docstring or a bare string; a table's key
        # below a multi-line string's first line: on the text (found in the source: the value has its escapes
        # resolved); else the whole string, as for any finding on a node
        raw = TRN1.search(node.value)
        below = raw is not None and "\n" in node.value[:raw.start()]
        self.ctx.report("NM520", node, offset=raw.span() if below else None, text=match.group(0))


def _requests(value: str, match: re.Match) -> bool:
    """The string is the instance type, or sets it (`--instance-type trn1.2xlarge`), rather than mentions it."""
    return value.strip() == match.group(0) or \
        _INSTANCE_SETTING.search(value[:match.start()].rstrip(" \t\r\n\"'=:")) is not None


def _test_file(path: str) -> bool:
    """A test (test_*.py, *_test.py, conftest.py, or under a tests/ folder): its instance types are data."""
    parts = path.replace("\\", "/").split("/")
    name = parts[-1]
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py" \
        or any(part in ("tests", "test") for part in parts[:-1])
