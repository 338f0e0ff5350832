"""A legacy PyTorch/XLA program with two launch paths (torchrun, or xmp.spawn in the `else`), its optimizer
stepped in a helper class that names no world size, metrics reduced across replicas (also in a single
process), and a tensor moved to the device next to the model. Each rank trains on its slice of a global batch,
so every launch computes the same losses."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Stepper:
    """Steps the optimizer; the legacy step averaged the replicas' gradients here."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def step(self):
        xm.optimizer_step(self.optimizer)


def batches(steps, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(steps * batch_size, 8, generator=generator)
    return x, x[:, :4].argmax(dim=1)


def total(values):
    assert all(v.device.type == "cpu" for v in values), "mesh_reduce hands CPU copies to its reducer"
    return int(sum(values))


def evaluate(model, x, y, device, rank, world):
    model.eval()
    with torch.no_grad():
        correct = (model(x[rank::world].to(device)).argmax(dim=1) == y[rank::world].to(device)).sum()
    model.train()
    correct = xm.mesh_reduce("correct", correct, total)
    xm.rendezvous("evaluated")
    return correct


def _mp_fn(index, args):
    torch.manual_seed(args.seed)
    device = xm.xla_device()
    rank, world = xr.global_ordinal(), xr.world_size()
    model = Net().to(device)
    xm.broadcast_master_param(model)
    offset = torch.linspace(-0.5, 0.5, 8)
    offset_dev = offset.to(device)  # a tensor: it has no .compile()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    stepper = Stepper(optimizer)
    x, y = batches(args.steps, args.batch_size, args.seed)
    share = args.batch_size // world
    for step in range(args.steps):
        start = step * args.batch_size + rank * share
        inputs = x[start:start + share].to(device) + offset_dev
        labels = y[start:start + share].to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        stepper.step()
        xm.mark_step()
        mean = xm.all_reduce(xm.REDUCE_SUM, loss.detach(), scale=1.0 / world)
        print(f"step {step} loss {mean.item():.6f}")
    steps_seen = xm.all_gather(torch.tensor([args.steps], device=device), dim=0)
    correct = evaluate(model, x, y, device, rank, world)
    print(f"rank {rank} of {world}: correct {correct} steps {steps_seen.sum().item()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spawn", action="store_true", help="take the xmp.spawn path under torchrun too")
    args = parser.parse_args()
    if os.environ.get("WORLD_SIZE") and not args.spawn:
        dist.init_process_group("xla", init_method="pjrt://")
        _mp_fn(int(os.environ["LOCAL_RANK"]), args)
    else:
        xmp.spawn(_mp_fn, args=(args,))
