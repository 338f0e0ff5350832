"""Data-parallel training launched with torchrun: gradients are averaged by hand with torch.distributed.

    torchrun --nproc_per_node=2 train.py --steps 8
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch_xla.core.xla_model as xm


def average_gradients(model, world_size):
    for param in model.parameters():
        dist.all_reduce(param.grad)
        param.grad /= world_size


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    dist.init_process_group(backend="gloo", init_method="env://")  # host-side collectives
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    device = xm.xla_device()
    model = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 3)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(100 + rank)  # every rank sees its own shard
    for step in range(args.steps):
        x = torch.randn(16, 12, generator=generator).to(device)
        y = torch.randint(0, 3, (16,), generator=generator).to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        average_gradients(model, world_size)
        optimizer.step()
        xm.mark_step()
    if int(os.environ.get("RANK", 0)) == 0:
        print("final loss", loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
