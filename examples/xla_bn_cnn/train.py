"""A small CNN with BatchNorm trained on one NeuronCore with PyTorch/XLA (the legacy XLA path).

Synthetic CIFAR-sized data (random images, labels from a fixed random teacher), so no download is needed.

    PJRT_DEVICE=NEURON python train.py --steps 100 --batch-size 64
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla.core.xla_model as xm


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--log-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


class ConvNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def batches(steps, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(3 * 16 * 16, 10, generator=generator)
    for _ in range(steps):
        images = torch.randn(batch_size, 3, 16, 16, generator=generator)
        yield images, (images.flatten(1) @ teacher).argmax(dim=1)


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    device = xm.xla_device()
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)

    model.train()
    for step, (images, labels) in enumerate(batches(args.steps, args.batch_size, args.seed), start=1):
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.mark_step()
        if step % args.log_every == 0:
            print(f"step {step} loss {loss.item():.5f}")

    model.eval()
    correct = 0
    with torch.no_grad():
        for images, labels in batches(4, args.batch_size, args.seed + 1):
            images, labels = images.to(device), labels.to(device)
            correct += (model(images).argmax(dim=1) == labels).sum().item()
    print(f"eval accuracy {correct / (4 * args.batch_size):.4f}")
    print(f"bn1 running_var mean {model.features[1].running_var.mean().item():.6f}")


if __name__ == "__main__":
    main()
