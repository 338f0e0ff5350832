"""The emulated `neuron` device with real storage: the C++ PrivateUse1 backend of `neuron_emulator.cpp`.

Its tensors are plain device tensors on host memory, so what needs storage works (FSDP2 `fully_shard`, DTensor,
`torch.Generator(device="neuron")`, `untyped_storage().resize_()`, pinned memory). The rest of the emulated
device is the Python emulator's: the `torch.neuron` module (`emulator.Module`, with the current device and seeds
of the C++ backend here), autocast, `torch.compile(backend="neuron")`, the `neuron` process group and the
`torch_neuronx` stand-in. Operator counts come from the C++ backend.
"""

from __future__ import annotations

import functools
from collections import Counter

import torch

from neuron_migrate.verify import emulator
from neuron_migrate.verify.native.build import BuildError, load

__all__ = ["BuildError", "install", "load"]

# The c10d collectives have a PrivateUse1 kernel that asks the process group for a `neuron` backend; routed to
# the CPU fallback they run gloo on the CPU tensors that share the device memory.
COLLECTIVES = (
    "allreduce_", "allreduce_coalesced_", "allgather_", "_allgather_base_", "allgather_coalesced_",
    "allgather_into_tensor_coalesced_", "reduce_scatter_", "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_", "reduce_", "broadcast_", "gather_", "scatter_", "alltoall_",
    "alltoall_base_", "barrier", "send", "recv_", "recv_any_source_", "monitored_barrier_",
)


# Composites that pick a kernel by the tensors' device and would call an `*_overrideable` stub for a PrivateUse1
# device: run as on the CPU.
BY_DEVICE = ("convolution", "_convolution", "convolution_backward")


@functools.cache
def functional_name(name: str) -> str:
    """The operator a program called for the out= variant a device runs it as: on a device, `add.Tensor` runs as
    `add.out` (the composite of a structured operator); counted as the former, as the Python emulator sees it."""
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    op = getattr(packet, overload or "default", None)
    if op is None or not any(a.is_out for a in op._schema.arguments):
        return name
    inputs = [(a.name, str(a.type)) for a in op._schema.arguments if not a.is_out]
    for candidate in packet.overloads():
        schema = getattr(packet, candidate)._schema
        if not schema.is_mutable and [(a.name, str(a.type)) for a in schema.arguments] == inputs:
            return base if candidate == "default" else f"{base}.{candidate}"
    return name


def cpu_kernels_over_composites() -> list[str]:
    """Operators with a CPU kernel and a composite one for other devices (`native_layer_norm`): the device runs
    the CPU kernel, as the CPU reference does, so the two compute the same bits."""
    def registered(key: str) -> set[str]:
        return {name.split("::", 1)[1] for name in torch._C._dispatch_get_registrations_for_dispatch_key(key)
                if name.startswith("aten::")}

    composites = registered("CPU") & registered("CompositeExplicitAutograd") - registered("PrivateUse1")
    return sorted(composites | {name for name in BY_DEVICE if hasattr(torch.ops.aten, name)})


class NativeStats(emulator.Stats):
    """The counters of the C++ backend (0: operators, 1: mixed-device operators, 2: since the tracking was
    cleared)."""

    def __init__(self) -> None:
        pass

    @staticmethod
    def _read(which: int) -> Counter[str]:
        names, counts = torch.ops.neuron_emulator.stats(which)
        out: Counter[str] = Counter()
        for name, count in zip(names, counts):
            out[functional_name(name)] += count
        return out

    @property
    def ops(self) -> Counter[str]:
        return self._read(0)

    @property
    def mixed(self) -> Counter[str]:
        return self._read(1)

    @property
    def tracked(self) -> Counter[str]:
        return self._read(2)

    def clear_tracked(self) -> None:
        torch.ops.neuron_emulator.clear(2)


class NativeModule(emulator.Module):
    """`torch.neuron` over the C++ backend: devices are its device guard's; each rank sees its own index."""

    @staticmethod
    def current_device() -> int:
        return torch.ops.neuron_emulator.get_device()

    @staticmethod
    def set_device(device) -> None:
        index = device if isinstance(device, int) else (torch.device(device).index or 0)
        torch.ops.neuron_emulator.set_device(index)

    @staticmethod
    def device(device):
        return _DeviceContext(device)

    # The default generator of a device is the CPU's (kernels without a generator draw from it).
    @staticmethod
    def get_rng_state(device=None) -> torch.Tensor:
        return torch.get_rng_state()


class _DeviceContext:
    def __init__(self, device) -> None:
        self.index = device if isinstance(device, int) else (torch.device(device).index or 0)

    def __enter__(self):
        self.previous = NativeModule.current_device()
        NativeModule.set_device(self.index)

    def __exit__(self, *exc) -> None:
        NativeModule.set_device(self.previous)


def install(strict: bool = False) -> None:
    """Build (once, cached) and register the C++ emulated device in this process; BuildError when it cannot."""
    if emulator._state.get("installed"):
        torch.ops.neuron_emulator.configure(strict, emulator.Module.device_count())
        emulator._state["strict"] = strict
        return
    load()
    torch.ops.neuron_emulator.configure(strict, emulator.Module.device_count())
    torch.ops.neuron_emulator.route_to_cpu("c10d", [name for name in COLLECTIVES if hasattr(torch.ops.c10d, name)])
    torch.ops.neuron_emulator.route_to_cpu("aten", cpu_kernels_over_composites())
    torch.utils.rename_privateuse1_backend(emulator.NAME)
    torch.utils.generate_methods_for_privateuse1_backend()
    torch._register_device_module(emulator.NAME, NativeModule())
    emulator.STATS = NativeStats()
    emulator._state.update(strict=strict, native=True)
    emulator.install_common()
