"""What an operator costs on the emulated `neuron` device against the same operator on the CPU, same run.

    python benchmarks/emulator_overhead.py
"""

import time

import torch

from neuron_migrate.verify import emulator

CASES = {"add_ (4 elements)": ((4,), lambda x: x.add_(1)), "mm (256x256)": ((256, 256), lambda x: x @ x)}


def per_op(device: str, shape: tuple[int, ...], op, repeat: int = 2000) -> float:
    x = torch.ones(shape, device=device)
    for _ in range(100):
        op(x)
    start = time.perf_counter()
    for _ in range(repeat):
        op(x)
    return (time.perf_counter() - start) / repeat * 1e6


def main() -> None:
    emulator.install()
    for name, (shape, op) in CASES.items():
        cpu, neuron = per_op("cpu", shape, op), per_op("neuron", shape, op)
        print(f"{name:<18} cpu {cpu:8.1f} us   emulated neuron {neuron:8.1f} us   "
              f"overhead {neuron - cpu:6.1f} us/op   ratio {neuron / cpu:5.2f}x")


if __name__ == "__main__":
    main()
