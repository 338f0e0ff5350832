"""What needs real storage on the emulated `neuron` device (the C++ backend); every check asserts.

Run under torchrun (one or more processes; each rank uses `neuron:{LOCAL_RANK}`):
    torchrun --nproc-per-node 2 storage_checks.py
"""

import os
import time

import torch
import torch.distributed as dist

from neuron_migrate.verify import emulator

emulator.install()
assert emulator.backend() == "cpp", emulator._state.get("build_error")
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))


def check_device_per_rank():
    torch.neuron.set_device(LOCAL_RANK)
    assert torch.neuron.device_count() == int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    x = torch.ones(3, device="neuron")
    assert x.device == torch.device("neuron", LOCAL_RANK), x.device
    with torch.neuron.device(0):
        assert torch.zeros(1, device="neuron").device.index == 0
    assert torch.neuron.current_device() == LOCAL_RANK


def check_storage():
    x = torch.arange(6.0, device="neuron")
    view = x.view(2, 3)[:, 1]  # a view shares the storage
    view.mul_(10)
    assert x.cpu().tolist() == [0.0, 10.0, 2.0, 3.0, 40.0, 5.0]
    storage = x.untyped_storage()
    assert storage.device.type == "neuron" and storage.nbytes() == 24
    storage.resize_(0)  # what FSDP2 does to free an unsharded parameter
    assert x.untyped_storage().nbytes() == 0
    storage.resize_(24)
    x.copy_(torch.arange(6.0))
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    y = torch.empty(0, device="neuron")
    y.resize_(2, 2).fill_(1.5)
    assert y.shape == (2, 2) and y.sum().item() == 6.0
    z = torch.empty(0, device="neuron").set_(x.untyped_storage(), 2, (2,), (1,))
    assert z.cpu().tolist() == [2.0, 3.0]


def check_generator():
    generator = torch.Generator(device="neuron")
    assert generator.device.type == "neuron"
    first = torch.randn(4, device="neuron", generator=generator.manual_seed(5)).cpu()
    again = torch.randn(4, device="neuron", generator=generator.manual_seed(5)).cpu()
    other = torch.randn(4, device="neuron", generator=generator.manual_seed(6)).cpu()
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert torch.equal(first, torch.randn(4, generator=torch.Generator().manual_seed(5)))  # the CPU's numbers
    state = generator.get_state()
    a = torch.rand(3, device="neuron", generator=generator).cpu()
    generator.set_state(state)
    assert torch.equal(a, torch.rand(3, device="neuron", generator=generator).cpu())


def check_pinned_memory():
    host = torch.arange(8.0).pin_memory()
    assert host.is_pinned() and not torch.arange(8.0).is_pinned()
    on_device = host.to("neuron", non_blocking=True)
    torch.neuron.synchronize()
    assert on_device.device.type == "neuron" and torch.equal(on_device.cpu(), host)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2,
                                         pin_memory=True)  # pins for the current accelerator: neuron
    assert all(batch.is_pinned() for (batch,) in loader)


def check_dtensor():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    world = dist.get_world_size()
    mesh = init_device_mesh("neuron", (world,))
    full = torch.arange(4.0 * world * 3).reshape(4 * world, 3)
    sharded = distribute_tensor(full.to("neuron"), mesh, [Shard(0)])
    local = sharded.to_local()
    assert local.device.type == "neuron" and local.shape == (4, 3)
    assert torch.equal(local.cpu(), full[4 * dist.get_rank():4 * (dist.get_rank() + 1)])
    assert torch.equal((sharded * 2).full_tensor().cpu(), full * 2)
    total = sharded.sum()  # a partial sum on each rank, reduced on redistribution
    assert total.redistribute(mesh, [Replicate()]).to_local().item() == full.sum().item()


def check_a_collective_outlives_its_dropped_input():
    """gloo runs a collective on threads of its own after the call returns; a compiled graph drops the input of
    `all_gather_into_tensor` as soon as it is issued, and its memory must stay until the collective has read it."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if rank:
        time.sleep(1.0)  # rank 0 issues everything while its peers are away
    busy = [dist.all_reduce(torch.ones(1), async_op=True) for _ in range(4)]  # gloo's 2 threads wait for the peers
    local = torch.full((64,), float(rank + 1), device="neuron")
    gathered = torch.ops._c10d_functional.all_gather_into_tensor(local, world, dist.group.WORLD.group_name)
    del local
    litter = [torch.full((64,), -7.0, device="neuron") for _ in range(8)]  # new memory, likely where `local` was
    gathered = torch.ops._c10d_functional.wait_tensor(gathered)
    for work in busy:
        work.wait()
    expected = torch.arange(1.0, world + 1).repeat_interleave(64)
    assert torch.equal(gathered.cpu(), expected), gathered.cpu()[::16].tolist()
    assert all(torch.equal(t.cpu(), torch.full((64,), -7.0)) for t in litter)


dist.init_process_group("neuron")
check_device_per_rank()
check_storage()
check_generator()
check_pinned_memory()
check_dtensor()
check_a_collective_outlives_its_dropped_input()
dist.barrier()
dist.destroy_process_group()
print(f"rank {LOCAL_RANK}: storage checks passed")
