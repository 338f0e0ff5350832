"""A legacy PyTorch/XLA ZeRO-1 trainer in the style of torch_xla's `test_zero1.py`: torch_xla's
ZeroRedundancyOptimizer shards the AdamW state over the ranks, averages the gradients and clips their norm
(its default, max_norm=1.0) inside `step()`. Each rank trains on its slice of a global batch; the printed loss
is the mean over the ranks and the last line the sum of the parameters, the same on every rank."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr
from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


def batches(steps, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(steps * batch_size, 8, generator=generator) * 4
    return x, x[:, :4].argmax(dim=1)


def train(index, args):
    torch.manual_seed(args.seed)
    device = xm.xla_device()
    rank, world = xr.global_ordinal(), xr.world_size()
    model = MLP().to(device)
    optimizer = ZeroRedundancyOptimizer(
        model.parameters(),
        torch.optim.AdamW,
        lr=args.lr,
        weight_decay=0.01,
        pin_layout=False,
    )
    x, y = batches(args.steps, args.batch_size, args.seed)
    share = args.batch_size // world
    for step in range(args.steps):
        start = step * args.batch_size + rank * share
        inputs = x[start:start + share].to(device)
        labels = y[start:start + share].to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        xm.mark_step()
        mean = xm.all_reduce(xm.REDUCE_SUM, loss.detach(), scale=1.0 / world)
        xm.master_print(f"step {step} loss {mean.item():.6f}")
    total = sum(float(p.detach().sum()) for p in model.parameters())
    xm.master_print(f"parameters {total:.6f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if os.environ.get("WORLD_SIZE"):
        dist.init_process_group("xla", init_method="xla://")
        train(int(os.environ["LOCAL_RANK"]), args)
    else:
        xmp.spawn(train, args=(args,))
