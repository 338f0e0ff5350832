"""A legacy job that computes on the XLA device and writes its result to a file, printing nothing."""

import sys

import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
scores = torch.randn(64, 8, device=device).softmax(dim=-1)
xm.mark_step()
torch.save(scores.cpu(), sys.argv[1] if len(sys.argv) > 1 else "scores.pt")
