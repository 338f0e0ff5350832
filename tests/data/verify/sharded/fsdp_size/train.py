"""A legacy PyTorch/XLA FSDP trainer in the style of torch_xla's `train_resnet_fsdp_auto_wrap.py`: the wrap policy
is chosen from a flag (torch_xla's size-based policy by default, its transformer policy otherwise), the blocks are
checkpointed with `checkpoint_module`, float32 compute is asked for explicitly. Each rank trains on its slice of a
global batch; the printed loss is the mean over the ranks and the last line is the sum of the parameters (the sum
of every rank's shards)."""

import argparse
import os
from functools import partial

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr
from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP, checkpoint_module
from torch_xla.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.fc(self.norm(x)))


class Net(nn.Module):
    def __init__(self, width=16, depth=3, classes=4):
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.blocks = nn.ModuleList(checkpoint_module(Block(width)) for _ in range(depth))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def batches(steps, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(steps * batch_size, 8, generator=generator)
    return x, x[:, :4].argmax(dim=1)


def train(index, args):
    torch.manual_seed(args.seed)
    device = xm.xla_device()
    rank, world = xr.global_ordinal(), xr.world_size()
    model = Net().to(device)
    auto_wrap_policy = None
    if args.policy == "size_based":
        auto_wrap_policy = partial(size_based_auto_wrap_policy, min_num_params=200)
    elif args.policy == "type_based":
        auto_wrap_policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    model = FSDP(model, compute_dtype=torch.float32, pin_layout_in_collective_ops=True,
                 auto_wrap_policy=auto_wrap_policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    x, y = batches(args.steps, args.batch_size, args.seed)
    share = args.batch_size // world
    for step in range(args.steps):
        start = step * args.batch_size + rank * share
        inputs = x[start:start + share].to(device)
        labels = y[start:start + share].to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()  # FSDP reduced the gradients: no xm.optimizer_step
        xm.mark_step()
        mean = xm.all_reduce(xm.REDUCE_SUM, loss.detach(), scale=1.0 / world)
        xm.master_print(f"step {step} loss {mean.item():.6f}")
    local = torch.stack([p.detach().float().sum() for p in model.parameters()]).sum()
    total = xm.all_reduce(xm.REDUCE_SUM, local)  # each rank holds its shards of the parameters
    xm.master_print(f"parameters {total.item():.6f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy", default="size_based")
    args = parser.parse_args()
    if os.environ.get("WORLD_SIZE"):
        dist.init_process_group("xla", init_method="xla://")
        train(int(os.environ["LOCAL_RANK"]), args)
    else:
        xmp.spawn(train, args=(args,))
