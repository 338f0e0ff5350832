"""`verify --quickstart`: the quickstart device check, a small matmul on `neuron` compared with the CPU."""

from __future__ import annotations

import click

from neuron_migrate.verify.runs import target_device


def device_check(device: str) -> tuple[bool, str]:
    """Run the check on the real (`neuron`) or emulated device in this process; (passed, what happened)."""
    import torch

    if device == "emulated":
        from neuron_migrate.verify import emulator

        emulator.install(strict=True)
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 64, generator=generator), torch.randn(64, 64, generator=generator)
    expected = a @ b
    try:
        result = (a.to("neuron") @ b.to("neuron"))
        on_device = result.device.type == "neuron"
        result = result.cpu()
    except Exception as exc:  # what the device said is the finding
        return False, f"a matmul on `neuron` failed: {type(exc).__name__}: {exc}"
    error = float((result - expected).abs().max())
    ok = on_device and torch.allclose(result, expected, rtol=1e-3, atol=1e-3)
    return ok, (f"64x64 matmul on `{result.device.type if not on_device else 'neuron'}`: max abs difference from "
                f"the CPU {error:.3g} ({'ok' if ok else 'too large'})")


def quickstart_check(requested: str) -> int:
    device = target_device(requested)
    ok, message = device_check(device)
    where = "emulated `neuron` device" if device == "emulated" else "`neuron` device"
    click.echo(f"{where}: {message}")
    return 0 if ok else 1
