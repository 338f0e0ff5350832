"""`torch.compile(backend="neuron")` on the emulated device, and a record of every compilation.

Dynamo traces the program at the torch level; AOTAutograd unwraps the emulated tensors (a traceable wrapper
subclass) so the forward and backward graphs work on the CPU tensors inside. The graphs run eagerly on the
CPU with device constants mapped to the CPU; their operators are counted per run like eager ones.
Like the native backend, shapes are static: a new input shape is a new compilation.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from neuron_migrate.verify import emulator


@dataclass
class Compilation:
    frame: str  # dynamo's frame id: the same id compiled again is a recompilation
    name: str
    shapes: list[list[int]]
    seconds: float = 0.0
    reason: str = ""  # why dynamo compiled the frame again (its first failed guard)


@dataclass
class CompileLog:
    compilations: list[Compilation] = field(default_factory=list)
    reason: str = ""


LOG = CompileLog()


def _graph_compiler(gm: torch.fx.GraphModule, example_inputs, on_device: bool = True):
    if emulator.backend() == "cpp":  # real device tensors: the graph runs (and is counted) on the device
        return make_boxed_func(gm)
    ops: Counter[str] = Counter()
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if "device" in node.kwargs:
            node.kwargs = {**node.kwargs, "device": emulator.to_cpu(node.kwargs["device"])}
        ops[emulator.op_name(node.target)] += 1
    gm.recompile()

    def run(*args):
        if on_device:  # a graph of CPU tensors (a model left on the CPU) runs nothing on the device
            emulator.STATS.ops.update(ops)
            emulator.STATS.tracked.update(ops)
        return gm(*args)

    return make_boxed_func(run)


def _aot(gm: torch.fx.GraphModule, example_inputs):
    on_device = any(isinstance(t, torch.Tensor) and t.device.type == emulator.NAME for t in example_inputs)

    def compiler(graph, inputs):
        return _graph_compiler(graph, inputs, on_device)

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)(gm, example_inputs)


OWN_FILES = (os.path.dirname(os.path.abspath(__file__)) + os.sep, "neuron_migrate_verify_harness.py")


def _frame() -> tuple[str, str, bool]:
    """(dynamo's frame id, the function's name, whether it is verify's own code) of the frame being compiled."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    try:
        code = torch._dynamo.symbolic_convert.InstructionTranslator.current_tx().f_code
        name = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
        own = os.path.abspath(code.co_filename).startswith(OWN_FILES[0]) or code.co_filename.endswith(OWN_FILES[1])
    except Exception:  # private API: the name is a nicety
        name, own = "?", False
    return str(getattr(compile_id, "frame_id", "?")), name, own


def neuron_backend(gm: torch.fx.GraphModule, example_inputs):
    start = time.perf_counter()
    shapes = [list(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)]
    frame, name, own = _frame()
    entry = Compilation(frame, name, shapes, reason=LOG.reason)
    LOG.reason = ""
    compiled = _aot(gm, example_inputs)
    entry.seconds = time.perf_counter() - start
    if not own:  # verify's own wrappers (around backward, around a compiled module) are not the program's
        LOG.compilations.append(entry)
    return compiled


def _capture_recompile_reasons() -> None:
    module = torch._dynamo.convert_frame
    original = getattr(module, "get_and_maybe_log_recompilation_reasons", None)
    if original is None:  # a private API: without it the report shows the shapes only
        return

    def capture(*args, **kwargs):
        reasons = original(*args, **kwargs)
        LOG.reason = reasons[0] if reasons else ""
        return reasons

    module.get_and_maybe_log_recompilation_reasons = capture


def install() -> None:
    torch._dynamo.register_backend(name=emulator.NAME)(neuron_backend)
    torch._dynamo.config.automatic_dynamic_shapes = False
    _capture_recompile_reasons()
