"""Batch inference on an XLA device: a small encoder scores every batch of a synthetic data set."""

import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm


class Encoder(nn.Module):
    def __init__(self, features=10, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, 2))

    def forward(self, x):
        return {"logits": self.net(x), "norm": x.norm(dim=-1)}


def main():
    torch.manual_seed(3)
    device = torch_xla.device()
    model = Encoder().to(device).eval()
    batches = torch.randn(12, 4, 10)
    scores = []
    with torch.no_grad():
        for batch in batches:
            out = model(batch.to(device))
            scores.append(out["logits"].softmax(-1)[:, 1].cpu())
            xm.mark_step()
    print("mean score", torch.cat(scores).mean().item())


if __name__ == "__main__":
    main()
