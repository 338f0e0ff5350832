"""A bfloat16 mixed-precision training loop with PyTorch/XLA autocast (the legacy XLA path).

A small transformer-style MLP block on synthetic regression data; the forward pass and the loss run under
`torch.autocast("xla", dtype=torch.bfloat16)`, the optimizer keeps float32 weights.

    PJRT_DEVICE=NEURON python train.py --steps 200
"""

import argparse

import torch
import torch.nn as nn
import torch_xla.core.xla_model as xm


class Block(nn.Module):
    def __init__(self, width=64, hidden=256):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        x = x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        return self.out(x).squeeze(-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = xm.xla_device()
    model = Block().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    data = torch.randn(args.steps, args.batch_size, 64)
    target = data.sum(dim=-1).tanh()

    for step in range(args.steps):
        x, y = data[step].to(device), target[step].to(device)
        optimizer.zero_grad()
        with torch.autocast("xla", dtype=torch.bfloat16):
            prediction = model(x)
            loss = nn.functional.mse_loss(prediction.float(), y)
        loss.backward()
        optimizer.step()
        xm.mark_step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
