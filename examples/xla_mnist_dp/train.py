"""Data-parallel MNIST training on XLA devices: one process per NeuronCore (8), started with xmp.spawn.

The data is synthetic (random images labelled by a fixed random teacher), so the example needs no download
and every run sees the same batches: the global batch is split across the processes (each takes every N-th
sample), so N processes train the model one process would, and the averaged loss printed by the master is
the loss of the whole batch.

    python train.py --epochs 2 --batch-size 256
"""

import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_backend  # registers the "xla" process group backend
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="global: split across the processes")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--test-size", type=int, default=512)
    parser.add_argument("--log-steps", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many steps (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--checkpoint", default="mnist_dp.pt")
    return parser.parse_args(argv)


class MNIST(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=5)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=5)
        self.fc1 = nn.Linear(16 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_mnist(size, seed):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(size, 1, 28, 28, generator=generator)
    teacher = torch.randn(28 * 28, 10, generator=generator)
    labels = (images.flatten(1) @ teacher).argmax(dim=1)
    return TensorDataset(images, labels)


def make_loader(dataset, batch_size):
    if batch_size % xr.world_size():
        raise SystemExit(f"--batch-size {batch_size} does not split across {xr.world_size()} processes")
    sampler = DistributedSampler(dataset, num_replicas=xr.world_size(), rank=xr.global_ordinal(), shuffle=False)
    return DataLoader(dataset, batch_size=batch_size // xr.world_size(), sampler=sampler, drop_last=True)


def log_step(epoch, step, loss):
    xm.master_print(f"epoch {epoch} step {step} loss {loss.item():.6f}")


def train_mnist(flags):
    dist.init_process_group("xla", init_method="xla://")
    torch.manual_seed(flags.seed)
    device = xm.xla_device()

    train_loader = make_loader(synthetic_mnist(flags.train_size, seed=0), flags.batch_size)
    test_loader = make_loader(synthetic_mnist(flags.test_size, seed=1), flags.batch_size)

    model = MNIST().to(device)
    optimizer = optim.SGD(model.parameters(), lr=flags.lr, momentum=flags.momentum)
    loss_fn = nn.NLLLoss()

    def train_loop_fn(loader, epoch):
        model.train()
        for step, (data, target) in enumerate(loader):
            if flags.max_steps and step >= flags.max_steps:
                break
            optimizer.zero_grad()
            output = model(data)
            loss = loss_fn(output, target)
            loss.backward()
            xm.optimizer_step(optimizer)
            if step % flags.log_steps == 0:
                # the mean loss over all replicas: a sum scaled by 1 / world size
                mean_loss = xm.all_reduce(xm.REDUCE_SUM, loss.detach(), scale=1.0 / xr.world_size())
                xm.add_step_closure(log_step, args=(epoch, step, mean_loss))
        return loss.detach()

    def test_loop_fn(loader):
        model.eval()
        correct = torch.zeros((), device=device)
        total = torch.zeros((), device=device)
        with torch.no_grad():
            for data, target in loader:
                prediction = model(data).argmax(dim=1)
                correct += prediction.eq(target).sum()
                total += target.numel()
        xm.all_reduce(xm.REDUCE_SUM, [correct, total])
        return 100.0 * correct.item() / total.item()

    train_device_loader = pl.MpDeviceLoader(train_loader, device)
    test_device_loader = pl.MpDeviceLoader(test_loader, device)
    for epoch in range(1, flags.epochs + 1):
        last_loss = train_loop_fn(train_device_loader, epoch)
        accuracy = test_loop_fn(test_device_loader)
        xm.master_print(f"epoch {epoch} test accuracy {accuracy:.2f}%", fd=sys.stderr)

    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"rank {xr.global_ordinal()} of {xr.world_size()}: last loss {last_loss.item():.6f} "
          f"accuracy {accuracy:.2f} checksum {checksum:.10f}", flush=True)
    xm.rendezvous("training_done")
    xm.save(model.state_dict(), flags.checkpoint)
    if xm.is_master_ordinal(local=False):
        print(f"saved {flags.checkpoint}", flush=True)


def _mp_fn(index, flags):
    train_mnist(flags)


if __name__ == "__main__":
    FLAGS = parse_args()
    xmp.spawn(_mp_fn, args=(FLAGS,), nprocs=8)
