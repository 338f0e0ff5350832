"""Training with `torch_xla.compile`: the whole step (forward, backward, optimizer) traced as one XLA graph.

    PJRT_DEVICE=NEURON python train.py --steps 50
"""

import argparse

import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, x):
        return self.net(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = Regressor().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    def train_step(inputs, labels):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        return loss

    step_fn = torch_xla.compile(train_step, full_graph=True)
    inputs = torch.randn(args.steps, 16, 20)
    labels = inputs.pow(2).sum(dim=-1, keepdim=True) / 20
    for step in range(args.steps):
        loss = step_fn(inputs[step].to(device), labels[step].to(device))
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
