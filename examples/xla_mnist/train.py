"""Train MNISTNet on a Trainium NeuronCore with PyTorch/XLA (torch-neuronx 2.x, legacy XLA path)."""

import argparse
import time

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm

from data import make_loader
from model import MNISTNet


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps to run")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default="", help="where to save the final weights (optional)")
    return parser.parse_args()


def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            correct += (model(images).argmax(dim=-1) == labels).sum()
            total += labels.numel()
            xm.mark_step()
    model.train()
    return correct.item() / max(total, 1)


def train(args):
    torch.manual_seed(args.seed)
    device = xm.xla_device()
    model = MNISTNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = make_loader(samples=args.steps * args.batch_size, batch_size=args.batch_size, seed=args.seed)

    start = time.time()
    for step, (images, labels) in enumerate(loader, start=1):
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.mark_step()  # run the step's graph on the device
        if step % 10 == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    xm.wait_device_ops()
    print(f"trained {args.steps} steps in {time.time() - start:.1f}s")

    accuracy = evaluate(model, make_loader(512, args.batch_size, seed=args.seed + 1), device)
    print(f"accuracy {accuracy:.3f}")
    if args.save:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, args.save)


if __name__ == "__main__":
    train(parse_args())
