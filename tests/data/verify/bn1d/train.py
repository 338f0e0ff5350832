"""A tabular classifier with BatchNorm1d trained on small batches with PyTorch/XLA (the legacy XLA path).

With 4 samples a batch, the running variance torch_xla keeps on the CPU (the biased batch variance) differs
from torch's (the unbiased one) by 4/3: the known torch_xla CPU difference of verify's three-way comparison.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla.core.xla_model as xm


class Tabular(nn.Module):
    def __init__(self, features=12, hidden=16, classes=3):
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.norm = nn.BatchNorm1d(hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.out(F.relu(self.norm(self.inp(x))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = xm.xla_device()
    model = Tabular().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(args.steps + 1, args.batch_size, 12)
    labels = torch.randint(0, 3, (args.steps + 1, args.batch_size))
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data[step].to(device)), labels[step].to(device))
        loss.backward()
        optimizer.step()
        xm.mark_step()
    model.eval()
    with torch.no_grad():
        logits = model(data[-1].to(device))
    print(f"running_var mean {model.norm.running_var.mean().item():.5f}")
    print(f"eval logits sum {logits.sum().item():.5f}")


if __name__ == "__main__":
    main()
