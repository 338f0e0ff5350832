"""The CPU reference: the migrated program on the plain CPU, with the `neuron` device standing for the CPU.

`torch.device("neuron")` parses, and every tensor placed on it (`.to("neuron")`, `device="neuron"`) is created
as a CPU tensor, so the program computes exactly what it computes on the CPU. `torch.autocast("neuron")`
is CPU autocast; `torch.compile(backend="neuron")` and the `neuron` process group are those of the emulator.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_map
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from neuron_migrate.verify import distributed, dynamo, emulator, unsharded

NAME = emulator.NAME


@torch._dynamo.disable
def _run_on_cpu(op, *args, **kwargs):
    return op(*tree_map(emulator.to_cpu, args), **tree_map(emulator.to_cpu, kwargs))


class _CpuAutocast(torch.amp.autocast_mode.autocast):
    def __init__(self, device_type: str, *args, **kwargs) -> None:
        super().__init__("cpu" if device_type == NAME else device_type, *args, **kwargs)


class _CpuGenerator(torch.Generator):
    """`torch.Generator(device="neuron")` is a CPU generator, as the `neuron` device is the CPU here."""

    def __new__(cls, device="cpu"):
        return super().__new__(cls, "cpu" if str(device).split(":")[0] == NAME else device)

    def __init__(self, device="cpu") -> None:
        pass


def install() -> None:
    _setup_privateuseone_for_python_backend(NAME, backend_module=emulator.Module())
    emulator._state["libraries"] = emulator.register_device_kernels(_run_on_cpu)
    torch.autocast = torch.amp.autocast = _CpuAutocast
    torch.Generator = _CpuGenerator
    dynamo.install()
    distributed.install()
    unsharded.install()
    import importlib.util
    import sys

    if "torch_neuronx" not in sys.modules and importlib.util.find_spec("torch_neuronx") is None:
        sys.modules["torch_neuronx"] = emulator._torch_neuronx_stub()
