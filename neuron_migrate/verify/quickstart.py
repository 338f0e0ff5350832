"""`verify --quickstart`: the quickstart device check, a small matmul on `neuron` compared with the CPU.

On the real device this is `doctor`'s check; on the emulated device the same product runs on the emulator
(in strict mode), which shows that the emulated device computes what the CPU computes.
"""

from __future__ import annotations

import click

from neuron_migrate.verify.runs import target_device


def emulated_check() -> tuple[bool, str]:
    import torch

    from neuron_migrate.verify import emulator

    emulator.install(strict=True)
    a, b = torch.randn(128, 64), torch.randn(64, 32)
    product = a.to("neuron") @ b.to("neuron")
    error = float((product.cpu() - a @ b).abs().max())
    ok = product.device.type == "neuron" and error <= 1e-5
    return ok, f"a matrix product on `neuron` {'matches' if ok else 'differs from'} the CPU (max error {error:.3g})"


def quickstart_check(requested: str) -> int:
    if target_device(requested) == "emulated":
        ok, message = emulated_check()
        click.echo(f"emulated `neuron` device: {message}")
        return 0 if ok else 1
    from neuron_migrate.cli.doctor import Status, device_check

    check, _ = device_check()
    click.echo(f"`neuron` device: {check.message}")
    return 0 if check.status is Status.OK else 1
