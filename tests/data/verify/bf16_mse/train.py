"""A bfloat16 regression trained on an XLA device: the model's parameters are bfloat16 and the loss is the mean
squared error over a 64 x 128 batch (a bfloat16 reduction of 8192 values)."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = nn.Sequential(nn.Linear(128, 256), nn.Tanh(), nn.Linear(256, 128)).to(torch.bfloat16).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    inputs, targets = torch.randn(64, 128), torch.randn(64, 128)
    for step in range(args.steps):
        x = inputs.to(torch.bfloat16).to(device)
        y = targets.to(torch.bfloat16).to(device)
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.mark_step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
