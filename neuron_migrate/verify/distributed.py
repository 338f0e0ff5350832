"""`torch.distributed` with backend `neuron`, for the emulated device and the CPU reference: gloo underneath.

Collectives are dispatcher operators (`c10d::allreduce_`, ...): on an emulated tensor they reach the emulator,
which runs them on the CPU tensors inside, so the process group serves both the `neuron` and the `cpu` device
with one gloo backend. A group made without a backend (`init_device_mesh("neuron", ...)`,
`init_process_group()`) has only the accelerator's, `neuron`; the collectives the emulated device and the CPU
reference run on CPU tensors ask it for the `cpu` one, so the `neuron` backend serves `cpu` there too.
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
    config = dist.distributed_c10d.BackendConfig
    init = config.__init__

    def init_serving_cpu(self, backend) -> None:
        init(self, backend)
        if NAME in self.device_backend_map and "cpu" not in self.device_backend_map:
            self.device_backend_map["cpu"] = self.device_backend_map[NAME]

    config.__init__ = init_serving_cpu
