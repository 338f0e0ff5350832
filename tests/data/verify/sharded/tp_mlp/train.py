"""A legacy neuronx-distributed tensor-parallel trainer in the style of NxD's tensor-parallel MLP examples: a
2-layer MLP whose first layer is split by columns (its output gathered) and its second by rows, on a
tensor-parallel group as wide as the launch. Every rank sees the whole batch; the printed loss is rank 0's and
the last line the trained model's output on a held-out batch."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from neuronx_distributed.parallel_layers import ColumnParallelLinear, RowParallelLinear, parallel_state


class MLP(nn.Module):
    def __init__(self, hidden=8, ffn=32, classes=4):
        super().__init__()
        self.fc1 = ColumnParallelLinear(hidden, ffn, gather_output=True)
        self.fc2 = RowParallelLinear(ffn, classes, input_is_parallel=False)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def batches(steps, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(steps * batch_size, 8, generator=generator)
    return x, x[:, :4].argmax(dim=1)


def main(args):
    dist.init_process_group("xla", init_method="xla://")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=xr.world_size())
    torch.manual_seed(args.seed)
    device = xm.xla_device()
    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batches(args.steps, args.batch_size, args.seed)
    for step in range(args.steps):
        inputs = x[step * args.batch_size:(step + 1) * args.batch_size].to(device)
        labels = y[step * args.batch_size:(step + 1) * args.batch_size].to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        xm.mark_step()
        xm.master_print(f"step {step} loss {loss.item():.6f}")
    model.eval()
    with torch.no_grad():  # a held-out batch: the trained parameters, however they are laid out
        held_out = x[:args.batch_size].flip(0).to(device) * 0.5
        score = model(held_out).square().mean()
    xm.master_print(f"held-out {score.item():.6f}")

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    main(parser.parse_args())
