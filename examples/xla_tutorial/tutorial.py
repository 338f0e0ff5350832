"""PyTorch/XLA basics: tensors on an XLA device, lazy execution, and moving results back to the CPU.

A tutorial script: it prints what it computes and trains nothing.

    python tutorial.py
"""

import torch
import torch_xla.core.xla_model as xm


def main():
    device = xm.xla_device()
    print(f"running on {device}")

    torch.manual_seed(42)
    # random data drawn on the CPU, then moved: XLA's own generator draws other numbers than the CPU's
    a = torch.randn(3, 4).to(device)
    b = torch.randn(4, 2).to(device)
    c = a @ b  # recorded lazily, run at mark_step or when a value is needed
    xm.mark_step()
    print("a @ b =", [[round(v, 4) for v in row] for row in c.cpu().tolist()])

    steps = torch.arange(0, 10, device=device)
    print(f"arange: shape {tuple(steps.shape)}, sum {steps.sum().item()}")

    x = torch.linspace(-2, 2, 9, device=device)
    print(f"softplus mean {torch.nn.functional.softplus(x).mean().item():.6f}")
    print(f"cumsum {x.cumsum(0)[-1].item():.4f}, norm {x.norm().item():.6f}")

    w = torch.zeros(4, device=device, requires_grad=True)
    loss = ((a @ w.unsqueeze(1)).squeeze(1) - 1.0).pow(2).mean()
    grad, = torch.autograd.grad(loss, w)
    print("gradient at zero:", [f"{g:.5f}" for g in grad.cpu().tolist()])


if __name__ == "__main__":
    main()
