"""NM501-NM506: torch_neuronx inference tracing, NKI entry points and the Neuron libraries; NM520 trn1 types."""

from __future__ import annotations

import functools

import libcst as cst

from neuron_migrate.catalogue import load_data
from neuron_migrate.files.envfiles import TRN1
from neuron_migrate.engine.names import dotted_str
from neuron_migrate.rules.patterns import arg, code, has_star, short, string_value
from neuron_migrate.engine.facts import fact
from neuron_migrate.rules import Rule
from neuron_migrate.rules.unsupported import imports_any, lookup, reference, spelled_as
from neuron_migrate.syntax.parse import expression

TRACE = "torch_neuronx.trace"
JIT_ARTIFACT = frozenset({"torch.jit.save", "torch.jit.load"})
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


@functools.lru_cache(maxsize=1)
def library_hints() -> dict[str, str]:
    return load_data("inference.toml")["libraries"]



@fact
def imports_neuron_libraries(ctx) -> bool:
    """The file imports one of the Neuron libraries (NEURON_ROOTS)."""
    return imports_any(ctx, NEURON_ROOTS)

class NeuronxTrace(Rule):
    codes = ("NM501", "NM502", "NM503", "NM504", "NM505")
    triggers = (b"torch_neuronx", b"neuronxcc")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual == TRACE:
            self._trace(node)
        elif qual in JIT_ARTIFACT and self._uses_neuronx():
            ctx.report("NM502", node, call=short(node))

    def _trace(self, node: cst.Call) -> None:
        ctx = self.ctx
        small = ctx.current.small
        fn, example = arg(node, 0, "func"), arg(node, 1, "example_inputs")
        simple = (isinstance(small, cst.Assign) and small.value is node and fn is not None and example is not None
                  and not has_star(node) and len(node.args) == 2)
        if not simple:
            ctx.report("NM502", node, call=short(node))
            return
        fixed = f"{ctx.module_ref('torch')}.compile({code(fn.value)}, backend={ctx.string('neuron')}, fullgraph=True)"
        if ctx.report("NM501", node, call=short(node), fixed=fixed):
            ctx.replace(node, expression(fixed))

    def _uses_neuronx(self) -> bool:
        return self.ctx.facts.imports_neuron_libraries

    def _reference(self, node: cst.CSTNode) -> None:
        if node in self.ctx.handled:
            return
        qual = reference(self.ctx, node)
        found = lookup(NEURONX_API, qual)
        if found is not None:
            self.ctx.report(found, node, **spelled_as(node, qual))

    visit_Attribute = visit_Name = _reference


class NeuronLibrary(Rule):
    """neuronx_distributed, transformers_neuronx, optimum.neuron: reported where they are imported."""

    codes = ("NM506",)
    triggers = (b"neuron",)
    context = (b"neuronx_distributed", b"transformers_neuronx", b"optimum")

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            self._module(alias, dotted_str(alias.name))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not node.relative and node.module is not None:
            self._module(node, dotted_str(node.module))

    def _module(self, node: cst.CSTNode, module: str | None) -> None:
        hint = lookup(library_hints(), module)
        if hint is not None:
            self.ctx.report("NM506", node, module=module, hint=hint)


class InstanceType(Rule):
    codes = ("NM520",)
    triggers = (b"trn1",)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        match = TRN1.search(string_value(node) or "")
        if match is not None:
            self.ctx.report("NM520", node, text=match.group(0))
