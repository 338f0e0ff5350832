"""A torchrun data-parallel trainer whose ranks draw their own batches: a shuffling DistributedSampler deals each
rank a shard of the data, and the learning rate grows with the world size, as such scripts do."""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_backend  # noqa: F401 (registers the "xla" backend)
import torch_xla.runtime as xr
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("xla")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(96, 12), torch.randint(0, 3, (96,)))
    sampler = None
    if xr.world_size() > 1:
        sampler = DistributedSampler(dataset, num_replicas=xr.world_size(), rank=xr.global_ordinal(), shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, shuffle=sampler is None)
    device = xm.xla_device()
    model = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * xr.world_size())
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in pl.MpDeviceLoader(loader, device):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            xm.optimizer_step(optimizer)
        xm.master_print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
