"""NM320-NM323: CUDA leftovers in code moved to the `neuron` device.

Only in files of a program moving to neuron (see `moving_to_neuron`): elsewhere CUDA code is a GPU path. Within
such a file only where the code paths (engine/paths.py) put the code on the XLA path, or on common code of a file
that does not keep XLA optional: never in a branch or condition that tests for CUDA, never on the fallback path.
"""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.engine.paths import CUDA_LEFTOVER
from neuron_migrate.rules.target import portable, target
from neuron_migrate.engine.names import dotted_str
from neuron_migrate.rules.patterns import arg, code, respell_literal, short, string_value
from neuron_migrate.rules import Rule
from neuron_migrate.rules.device import DEVICE, XlaDeviceString
from neuron_migrate.rules.device_names import CUDA, NEURON, XLA, Group, bound_value
from neuron_migrate.rules.rewrites import LOCAL, RANKISH, local_rank
from neuron_migrate.rules.unsupported import (MOVING_TO_NEURON, may_move_to_neuron, moving_to_neuron, reference,
                                              spelled_as)
from neuron_migrate.syntax.parse import expression
from neuron_migrate.syntax.walk import children

CUDA_STRING = re.compile(r"^cuda(:\d+)?$")
# torch.cuda functions with a namesake in torch.neuron (the TorchNeuron device module).
NEURON_NAMESAKES = frozenset({
    "is_available", "device_count", "current_device", "set_device", "get_device_name", "get_device_properties",
    "synchronize", "manual_seed", "manual_seed_all", "seed", "initial_seed", "get_rng_state", "set_rng_state",
    "Stream", "stream", "current_stream", "default_stream", "set_stream", "Event", "device", "memory_stats",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "memory_summary", "empty_cache", "is_bf16_supported"})
CUDA_AUTOCAST = frozenset({"torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast"})  # NM402


def is_cuda_string(node: cst.CSTNode | None) -> bool:
    value = string_value(node)
    return value is not None and bool(CUDA_STRING.match(value))


def respell_cuda(node: cst.BaseExpression) -> cst.BaseExpression:
    assert isinstance(node, cst.SimpleString)
    return respell_literal(node, "cuda", "neuron")


def _portable(ctx, literal: cst.SimpleString, kind: str) -> cst.BaseExpression:
    """`"cuda"` -> `DEVICE` / `DEVICE.type`; `"cuda:1"` -> `torch.device(DEVICE.type, 1)` or `f"{DEVICE.type}:1"`."""
    index = string_value(literal)[len("cuda:"):]
    if not index:
        return expression(target(ctx).module_device() if kind == DEVICE else target(ctx).device_type())
    if kind == DEVICE:
        return expression(target(ctx).device(index))
    return expression(f"f{literal.quote}{{{target(ctx).device_type()}}}:{index}{literal.quote}")


class CudaDeviceString(XlaDeviceString):
    """`"cuda"` in the places where NM102 respells `"xla"`: device arguments, comparisons, device variables, and
    device names held as data, group by group. A group that also holds `"xla"` is a switch between backends: its
    `"cuda"` selects the GPU path and stays (NM102 decides the group)."""

    codes = ("NM321", "NM117")
    acts_on = CUDA_LEFTOVER
    triggers = (b"cuda",)
    context = MOVING_TO_NEURON
    pattern = None
    is_device = staticmethod(is_cuda_string)
    rule_code = "NM321"
    family = CUDA
    tree_predicate_any_selection = True  # its own predicate (which reads the project, not the selection)

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A CUDA device name (`"cuda"`, `"cuda:1"`) as a str constant, in a file that may be moving to neuron. Every
        literal the rule reports stands where an expression does (an argument, an operand, an element, a value),
        never as a part of implicitly joined literals, so Python's tree holds its value as one constant."""
        return any(CUDA_STRING.match(s) for s in scan.strings) and may_move_to_neuron(scan, settings)

    def _new(self, literal: cst.BaseExpression, kind: str, test: bool | None = None) -> cst.BaseExpression:
        # `test` does not matter here: NM321 respells CUDA names only where XLA is not optional
        return respell_cuda(literal) if not portable(self.ctx) else _portable(self.ctx, literal, kind)

    def _allowed(self) -> bool:
        return super()._allowed() and moving_to_neuron(self.ctx)

    def _device_equality(self, node: cst.Comparison) -> bool:
        return moving_to_neuron(self.ctx) and super()._device_equality(node)  # a GPU program's test stays

    def _owns(self, group: Group) -> bool:
        return not group.families() & {XLA, NEURON}  # a switch with the XLA (or migrated) branch keeps its GPU one

    def _flag(self, literal: cst.BaseExpression, kind: str, autocast: cst.Call | None = None) -> None:
        if moving_to_neuron(self.ctx):
            super()._flag(literal, kind)  # CUDA's autocast default (float16) is the native one


class CudaMethod(Rule):
    """`x.cuda()` -> `x.to("neuron")`; `x.cuda(1)` -> `x.to("neuron:1")`; `non_blocking=` is kept."""

    codes = ("NM320",)
    acts_on = CUDA_LEFTOVER
    triggers = (b".cuda(", b".cuda (")
    context = MOVING_TO_NEURON
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return "cuda" in scan.called and may_move_to_neuron(scan, settings)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "cuda"):
            return
        ctx = self.ctx
        if ctx.qualname(func.value) is not None or not moving_to_neuron(ctx):
            return  # `torch.cuda(...)` or a module attribute; or a GPU program, not one moving to neuron
        index = arg(node, 0, "device")
        blocking = arg(node, None, "non_blocking")
        if any(a not in (index, blocking) for a in node.args):
            return
        target = self._target(index)
        if target is None:
            return
        extra = f", non_blocking={code(blocking.value)}" if blocking is not None else ""
        fixed = f"{code(func.value)}.to({target}{extra})"
        if ctx.report("NM320", node, call=short(node), fixed=fixed):
            ctx.replace(node, lambda old: old.with_changes(
                func=old.func.with_changes(attr=cst.Name("to")), args=expression(f"f({target}{extra})").args))

    def _target(self, index: cst.Arg | None) -> str | None:
        ctx = self.ctx
        if index is None:
            return target(ctx).module_device() if portable(ctx) else ctx.string("neuron")
        if isinstance(index.value, cst.Integer) and not portable(ctx):
            return ctx.string(f"neuron:{index.value.value}")
        if isinstance(index.value, (cst.Integer, cst.Name)):
            return target(ctx).device(index.value.value)
        return None


class TorchCudaApi(Rule):
    """`torch.cuda.<f>` -> `torch.neuron.<f>` where TorchNeuron has the namesake; a finding otherwise."""

    codes = ("NM322", "NM323")
    acts_on = CUDA_LEFTOVER
    triggers = (b"cuda",)
    context = MOVING_TO_NEURON
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A torch.cuda name that the program does not patch itself, in a file that may be moving to neuron
        (`facts.moving_to_neuron`)."""
        project = settings.project
        patched = project.cuda_patched if project is not None else ()
        return any(q.startswith("torch.cuda.") and q not in CUDA_AUTOCAST and q.split(".")[2] not in patched
                   for q in scan.quals) and may_move_to_neuron(scan, settings)

    def _reference(self, node: cst.CSTNode) -> None:
        ctx = self.ctx
        if node in ctx.handled:
            return
        qual = reference(ctx, node)
        if qual is None or not qual.startswith("torch.cuda.") or qual in CUDA_AUTOCAST or not moving_to_neuron(ctx):
            return
        name = qual[len("torch.cuda."):]
        project = ctx.settings.project
        if project is not None and name.split(".")[0] in project.cuda_patched:
            return  # the program redefines it (`torch.cuda.set_device = lambda x: None`): its own function stays
        spelled = dotted_str(node) or qual
        if name in NEURON_NAMESAKES:
            fixed = target(ctx).device_module(name)
            index = self._global_rank_index(node) if name == "set_device" else None
            shown = fixed if index is None else f"{fixed}({local_rank(ctx)})" if index[0] is None \
                else f"{fixed}({index[0]}) with {index[0]} = {local_rank(ctx)}"
            if ctx.report("NM322", node, name=spelled, fixed=shown):
                ctx.replace(node, expression(fixed))
                if index is not None:
                    inner = [index[1]]
                    for n in inner:  # the expression goes whole: no rule edits the CUDA names inside it
                        inner += children(n, tokens=False)
                    ctx.handled.update(inner)
                    ctx.replace(index[1], expression(local_rank(ctx)))
        else:
            ctx.report("NM323", node, **spelled_as(node, qual))

    def _global_rank_index(self, node: cst.CSTNode) -> tuple[str | None, cst.BaseExpression] | None:
        """`torch.cuda.set_device(args.rank % args.gpus_per_node)`, or of a name bound once to that (its name, and
        the expression): on GPUs the global rank modulo the GPUs of a node. A process binds the NeuronCore of its
        local rank, which exists on every node whatever the program counts (a patched `device_count`)."""
        ctx = self.ctx
        call = ctx.current.parent
        if type(call) is not cst.Call or call.func is not node or len(call.args) != 1 or call.args[0].keyword \
                or call.args[0].star:
            return None
        value = call.args[0].value
        held = bound_value(ctx, value) if isinstance(value, cst.Name) else value
        if not (isinstance(held, cst.BinaryOperation) and isinstance(held.operator, cst.Modulo)):
            return None
        read = code(held.left)
        if not RANKISH.search(read) or LOCAL.search(read):
            return None
        inner = [held]
        for n in inner:
            inner += children(n, tokens=False)
        if any((ctx.qualname(n) or "").startswith("torch.cuda.") for n in inner if type(n) is cst.Attribute):
            return None  # `% torch.cuda.device_count()`: a CUDA query, whose line the code paths leave to the GPU
        return (value.value if held is not value else None), held

    visit_Attribute = visit_Name = _reference
