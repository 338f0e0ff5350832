"""Train a small regressor on the `neuron` device when torch-neuronx is installed, else on CUDA or the CPU.

The migration of ../fallback/train.py by hand: the device test fails where Neuron is not installed."""

import argparse

import torch
import torch.nn as nn

NEURON = hasattr(torch, "neuron") and torch.neuron.is_available()


def get_device():
    if NEURON:
        return torch.device("neuron")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = get_device()
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    inputs = torch.randn(args.steps, 16, 8)
    labels = inputs.sum(dim=-1, keepdim=True).sin()
    for step in range(args.steps):
        x, y = inputs[step].to(device), labels[step].to(device)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.5f} on {device.type}")


if __name__ == "__main__":
    main()
