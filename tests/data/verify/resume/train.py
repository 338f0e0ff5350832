"""A legacy trainer that resumes from the xser checkpoint its previous run wrote (`--resume ckpt/model.xser`)."""

import argparse

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser
from torch import nn


class Net(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width + 1)
        self.norm = nn.BatchNorm1d(2 * width + 1)
        self.fc2 = nn.Linear(2 * width + 1, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.norm(self.fc1(x))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resume", default=None, help="an xser checkpoint: model, optimizer, epoch")
    parser.add_argument("--data", default=None, help="a folder of samples (not read here)")
    parser.add_argument("--notes", default=None, help="a text file printed before training")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    device = xm.xla_device()
    model = Net().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    start = 0
    if args.resume:
        state = xser.load(args.resume)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
        print(f"resumed at epoch {start}")
    if args.notes:
        with open(args.notes) as f:
            print(f.read().strip())
    g = torch.Generator().manual_seed(start)
    for step in range(args.steps):
        x = torch.randn(6, 8, generator=g).to(device)
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        xm.optimizer_step(optimizer, barrier=True)
        print(f"epoch {start} step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
