"""NM310-NM312, NM314: `torch.compile` settings the neuron backend ignores, rejects, or that target CUDA.

Only for compilations that target neuron: `backend="neuron"`, or any backend in a file moving to neuron.
"""

from __future__ import annotations

import libcst as cst

from neuron_migrate.rules.patterns import arg, code, string_value
from neuron_migrate.rules import Rule
from neuron_migrate.rules.unsupported import MOVING_TO_NEURON, is_true, moving_to_neuron
from neuron_migrate.syntax.parse import expression

CUDA_BACKENDS = frozenset({"inductor", "cudagraphs"})
NM108_BACKENDS = frozenset({"neuron", "openxla", "openxla_eval", "aot_torchxla_trace_once", "torchxla_trace_once"})


def without_keyword(call: cst.Call, keyword: str) -> cst.Call:
    args = [a for a in call.args if not (a.keyword is not None and a.keyword.value == keyword)]
    if args and len(args) < len(call.args) and call.args[-1].keyword is not None \
            and call.args[-1].keyword.value == keyword:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


class CompileSettings(Rule):
    codes = ("NM310", "NM311", "NM312", "NM314")
    triggers = (b"compile",)
    context = MOVING_TO_NEURON  # backend="neuron" or a file moving to neuron
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A torch.compile (or `.compile` method) call with one of the settings it reports."""
        return ("torch.compile" in scan.quals or "compile" in scan.called) \
            and not scan.keywords.isdisjoint(("mode", "backend", "dynamic", "options"))

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        func = node.func
        qual = ctx.qualname(func)
        method = isinstance(func, cst.Attribute) and func.attr.value == "compile" and qual is None
        if qual != "torch.compile" and not method:
            return
        backend = arg(node, None, "backend")
        if not (string_value(getattr(backend, "value", None)) == "neuron" or moving_to_neuron(ctx)):
            return  # compiled for another device
        mode = arg(node, None, "mode")
        value = string_value(mode.value) if mode is not None else None
        if value is not None and value != "default":
            if ctx.report("NM310", mode, text=code(mode).strip(" ,")):
                ctx.replace(node, lambda old: without_keyword(old, "mode"))
        if backend is not None and string_value(backend.value) in CUDA_BACKENDS:
            if ctx.report("NM311", backend.value, text=code(backend).strip(" ,"),
                          fixed=f"backend={ctx.string('neuron')}"):
                ctx.replace(backend.value, expression(ctx.string("neuron")))
        dynamic = arg(node, None, "dynamic")
        already_nm108 = not method and string_value(getattr(backend, "value", None)) in NM108_BACKENDS
        if dynamic is not None and is_true(dynamic.value) and not already_nm108:
            if ctx.report("NM314", dynamic.value):
                ctx.replace(dynamic.value, cst.Name("False"))
        options = arg(node, None, "options")
        if options is not None and not (isinstance(options.value, cst.Name) and options.value.value == "None"):
            ctx.report("NM312", options, text=code(options).strip(" ,"))
