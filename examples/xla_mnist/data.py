"""Synthetic MNIST-shaped data, so the example runs anywhere without downloads."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def synthetic_mnist(samples: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (samples,), generator=g)
    # each class gets its own mean image, so there is something to learn
    prototypes = torch.randn(10, 1, 28, 28, generator=g)
    images = prototypes[labels] + 0.5 * torch.randn(samples, 1, 28, 28, generator=g)
    return TensorDataset(images, labels)


def make_loader(samples: int, batch_size: int, seed: int) -> DataLoader:
    # drop_last keeps every batch the same shape: XLA compiles one graph per shape
    return DataLoader(synthetic_mnist(samples, seed), batch_size=batch_size, shuffle=False, drop_last=True)
