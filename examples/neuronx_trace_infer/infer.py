"""Inference with a model traced ahead of time for Inferentia2 / Trainium (torch-neuronx, XLA-based stack).

`torch_neuronx.trace` compiles the model for a NeuronCore; the traced model takes and returns CPU tensors.

    python infer.py --batches 8
"""

import argparse

import torch
import torch.nn as nn
import torch_neuronx


class Classifier(nn.Module):
    def __init__(self, vocab=1000, width=64, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.encoder = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width))
        self.head = nn.Linear(width, classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = Classifier().eval()
    example = torch.randint(0, 1000, (args.batch_size, 16))
    traced = torch_neuronx.trace(model, example)

    generator = torch.Generator().manual_seed(1)
    for batch in range(args.batches):
        tokens = torch.randint(0, 1000, (args.batch_size, 16), generator=generator)
        with torch.no_grad():
            logits = traced(tokens)
        print(f"batch {batch}: predictions {logits.argmax(dim=-1).tolist()} max logit {logits.max().item():.5f}")


if __name__ == "__main__":
    main()
