"""A legacy script that resumes from the checkpoint it finds in the working folder (as training jobs do)."""

import os

import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
start = torch.load("state.pt")["step"] if os.path.exists("state.pt") else 0
torch.manual_seed(start)
weights = torch.randn(4, device=device)
print(f"resumed at step {start}, weights sum {weights.sum().item():.6f}")
xm.save({"step": start + 1}, "state.pt")
