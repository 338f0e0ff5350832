"""A tiny legacy torch_xla training script: an MLP on synthetic data, the way XLA scripts are written."""

import argparse

import torch
import torch.nn as nn
import torch_xla.core.xla_model as xm


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.body(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = xm.xla_device()
    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    data = torch.randn(args.steps, 8, 16)
    labels = torch.randint(0, 4, (args.steps, 8))
    for step in range(args.steps):
        x, y = data[step].to(device), labels[step].to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.mark_step()
        if step % 10 == 0:  # the largest singular value of the first layer, to watch for blow-ups
            top = torch.linalg.svdvals(model.body[0].weight.detach())[0]
            print(f"step {step} loss {loss.item():.4f} sigma_max {top.item():.3f}")
    model.eval()
    with torch.no_grad():
        print("eval", model(data[0].to(device)).sum().item())


if __name__ == "__main__":
    main()
