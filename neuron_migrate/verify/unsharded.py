"""The reference of a sharded program: one process on the CPU, computing the unsharded model.

A migrated FSDP / tensor-parallel program shards with FSDP2 `fully_shard`, `parallelize_module` and
`distribute_tensor`. Its reference run (`NEURON_MIGRATE_UNSHARDED=1`, set by the session for `--nproc N` when
the migration shards) makes those the identity, so one process trains the whole model; the N-process run on the
emulated device is compared with it, its sharded parameters gathered whole (`full_tensor()`, harness.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ENV = "NEURON_MIGRATE_UNSHARDED"
# What a migrated program shards with (the rewrites write these names; hand-written programs use them too).
SHARDING = re.compile(rb"\b(fully_shard|parallelize_module|distribute_tensor|distribute_module)\b")


def shards(files: list[Path]) -> bool:
    """Whether the program's files name a sharding API (then its reference is one unsharded process)."""
    for path in files:
        try:
            if SHARDING.search(path.read_bytes()):
                return True
        except OSError:
            continue
    return False


def _identity(module, *args, **kwargs):
    return module


def _unsharded_tensor(tensor, device_mesh=None, placements=None, **kwargs):
    return tensor


def install() -> None:
    """Make the sharding APIs the identity in this process (the reference run of a sharded program)."""
    if os.environ.get(ENV) != "1":
        return
    import torch.distributed as dist

    if not dist.is_available():
        return
    import torch.distributed.tensor as dtensor
    from torch.distributed import fsdp
    from torch.distributed.tensor import parallel

    fsdp.fully_shard = _identity
    try:
        import torch.distributed._composable.fsdp as composable  # the name's older home
    except ImportError:
        pass
    else:
        composable.fully_shard = _identity
    parallel.parallelize_module = _identity
    dtensor.distribute_module = _identity
    dtensor.distribute_tensor = _unsharded_tensor
