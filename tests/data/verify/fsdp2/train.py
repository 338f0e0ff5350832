"""A small MLP trained with FSDP2 on the `neuron` device: what a migrated XLA FSDP trainer looks like.

Launched with `torchrun --nproc-per-node N train.py`; every rank draws the same batches (the data loader of a
real trainer would shard them), so the N-process run computes what one process computes on the whole model.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.fc(self.norm(x)))


class MLP(nn.Module):
    def __init__(self, width=16, depth=2, classes=4):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()

    dist.init_process_group("neuron")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.neuron.set_device(local_rank)
    device = torch.device("neuron", local_rank)
    mesh = init_device_mesh("neuron", (dist.get_world_size(),))

    torch.manual_seed(0)
    model = MLP().to(device)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    generator = torch.Generator(device=device)
    generator.manual_seed(1234)
    for step in range(args.steps):
        x = torch.randn(8, 16, device=device, generator=generator)
        y = torch.randint(0, 4, (8,), device=device, generator=generator)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
