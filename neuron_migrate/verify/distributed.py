"""`torch.distributed` with backend `neuron`, for the emulated device and the CPU reference: gloo underneath.

Collectives are dispatcher operators (`c10d::allreduce_`, ...): on an emulated tensor they reach the emulator,
which runs them on the CPU tensors inside, so the process group serves both the `neuron` and the `cpu` device
with one gloo backend.
"""

from __future__ import annotations

import torch.distributed as dist

NAME = "neuron"


def _create(store, rank: int, world_size: int, timeout):
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


def install() -> None:
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create, devices=[NAME, "cpu"])
