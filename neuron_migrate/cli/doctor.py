"""`neuron-migrate doctor`: what the environment it runs in lacks for the native `neuron` backend.

Package facts come from installed metadata (importlib.metadata), so the checks are fast and never import
torch; only the device check imports torch (and torch_neuronx), and only when a native torch-neuronx is
installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Iterable

import click
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from neuron_migrate.pin.matrix import Family, Matrix, matrix


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Check:
    status: Status
    message: str


def installed(search_path: Iterable[str] | None = None) -> dict[str, str]:
    """Canonical name -> version of the distributions on the path; the first one found wins, as for imports."""
    out: dict[str, str] = {}
    dists = importlib.metadata.distributions(path=list(search_path)) if search_path is not None else \
        importlib.metadata.distributions()
    for dist in dists:
        name = dist.metadata["Name"]
        if name:
            out.setdefault(canonicalize_name(name), dist.version)
    return out


def install_command(family: Family, mx: Matrix) -> str:
    packages = " ".join(f'"{name}{family.pins[name]}"' if family.pins[name] else name
                        for name in mx.required_packages)
    return f"pip install --upgrade {packages} --extra-index-url {mx.index_url}"


def _admits(pin: str, version: str) -> bool:
    try:
        return SpecifierSet(pin).contains(Version(version).public, prereleases=True)
    except InvalidVersion:
        return False


def package_checks(packages: dict[str, str], mx: Matrix, default: Family) -> tuple[list[Check], Family | None]:
    """Checks of the installed packages, and the native family found (None when there is none)."""
    checks = []
    neuronx = packages.get("torch-neuronx")
    family = mx.family_of_neuronx(neuronx) if neuronx and mx.is_native_neuronx(neuronx) else None
    target = family or default
    fix = install_command(target, mx)
    if neuronx is None:
        checks.append(Check(Status.FAIL, f"torch-neuronx is not installed; install the native backend: {fix}"))
    elif family is None and not mx.is_native_neuronx(neuronx):
        checks.append(Check(Status.FAIL, f"torch-neuronx {neuronx} is the legacy XLA build (the native backend "
                                         f"starts at {mx.native_since}); install the native one: {fix}"))
    elif family is None:
        checks.append(Check(Status.FAIL, f"torch-neuronx {neuronx} belongs to no supported family "
                                         f"({', '.join(f.pins['torch-neuronx'] for f in mx.families)}); {fix}"))
    else:
        checks.append(Check(Status.OK, f"torch-neuronx {neuronx}: the native backend, torch {family.torch} family"))
    checks += _family_checks(packages, target, mx)
    for name in sorted(mx.legacy_packages & packages.keys()):
        checks.append(Check(Status.FAIL, f"{name} {packages[name]} is installed: the native backend does not use "
                                         f"it and it brings its own torch; run `pip uninstall {name}`"))
    return checks, family


def _family_checks(packages: dict[str, str], family: Family, mx: Matrix) -> list[Check]:
    checks = []
    for name in ("torch", "neuronx-cc", "nki", "torchvision", "torchaudio"):
        version = packages.get(name)
        pin = family.pins[name]
        wanted = f"{name}{pin}" if pin else name
        if version is None:
            if name in ("torch", *mx.required_packages):
                checks.append(Check(Status.FAIL, f"{name} is not installed; the torch {family.torch} family needs "
                                                 f"`{wanted}`"))
        elif pin and not _admits(pin, version):
            checks.append(Check(Status.FAIL, f"{name} {version} does not match the torch {family.torch} family, "
                                             f"which needs `{wanted}`: pip install \"{wanted}\""))
        else:
            checks.append(Check(Status.OK, f"{name} {version}"))
    return checks


def python_check(version: tuple[int, int, int], mx: Matrix) -> Check:
    text = ".".join(map(str, version))
    supported = ", ".join(mx.python)
    if mx.python_supported(text):
        return Check(Status.OK, f"Python {text} (TorchNeuron supports {supported})")
    return Check(Status.FAIL, f"Python {text} has no TorchNeuron wheels; use Python {supported}")


def platform_check(system: str, machine: str, mx: Matrix) -> Check:
    if system == mx.system and machine in (mx.machine, "AMD64"):
        return Check(Status.OK, f"{system} {machine}")
    return Check(Status.FAIL, f"{system} {machine}: TorchNeuron runs on {mx.system} {mx.machine} only "
                              f"({' / '.join(i.capitalize() for i in mx.instances)} instances)")


def neuron_ls() -> Check | None:
    exe = shutil.which("neuron-ls")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(Status.WARN, f"neuron-ls did not run ({exc})")
    if out.returncode != 0:
        return Check(Status.WARN, f"neuron-ls failed: {(out.stderr or out.stdout).strip()[:200]}")
    instance = next((line.split(":", 1)[1].strip() for line in out.stdout.splitlines()
                     if line.strip().startswith("instance-type")), "unknown instance")
    return Check(Status.OK, f"neuron-ls sees Neuron devices ({instance})")


def device_check() -> tuple[Check, bool]:
    """Whether torch sees a `neuron` device, and the quickstart check: a matrix product on it against the CPU."""
    try:
        torch = importlib.import_module("torch")
        importlib.import_module("torch_neuronx")
    except Exception as exc:  # a broken install raises more than ImportError
        return Check(Status.FAIL, f"import failed ({type(exc).__name__}: {exc}); reinstall the packages above"), False
    available = _neuron_available(torch)
    if not available:
        return Check(Status.WARN, "no `neuron` device is visible (torch.neuron.is_available() is False): run on a "
                                  "Trn2 or Trn3 instance with the Neuron driver"), False
    a, b = torch.randn(128, 64), torch.randn(64, 32)
    on_device = (a.to("neuron") @ b.to("neuron")).cpu()
    expected = a @ b
    if torch.allclose(on_device, expected, rtol=1e-2, atol=1e-2):
        return Check(Status.OK, "a matrix product on `neuron` matches the CPU"), True
    error = (on_device - expected).abs().max().item()
    return Check(Status.FAIL, f"a matrix product on `neuron` differs from the CPU (max error {error:.3g})"), True


def _neuron_available(torch) -> bool:
    neuron = getattr(torch, "neuron", None)
    if neuron is not None and hasattr(neuron, "is_available"):
        return bool(neuron.is_available())
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return getattr(accelerator.current_accelerator(), "type", None) == "neuron"
    return False


@dataclass
class Report:
    checks: list[Check]
    device: bool  # a neuron device was found

    @property
    def failed(self) -> bool:
        return any(c.status is Status.FAIL for c in self.checks)


def diagnose(search_path: Iterable[str] | None = None, python: tuple[int, int, int] | None = None,
             system: str | None = None, machine: str | None = None, device: bool = True) -> Report:
    mx = matrix()
    python = python or sys.version_info[:3]
    checks = [python_check(python, mx), platform_check(system or platform.system(), machine or platform.machine(), mx)]
    packages = installed(search_path)
    found, family = package_checks(packages, mx, mx.family(None))
    checks += found
    seen = False
    if not device:
        return Report(checks, False)
    if ls := neuron_ls():
        checks.append(ls)
    if family is None or "torch" not in packages:
        checks.append(Check(Status.WARN, "device check skipped: it needs the native torch-neuronx installed"))
    else:
        check, seen = device_check()
        checks.append(check)
    return Report(checks, seen)


@click.command()
@click.option("--require-device", is_flag=True, help="Exit 1 when no `neuron` device is visible.")
@click.option("--no-device", is_flag=True, help="Skip the device check (never imports torch).")
def doctor(require_device: bool, no_device: bool) -> None:
    """Check this environment for the native `neuron` backend: Python, packages, families, device.

    Exit 0 when nothing failed, 1 otherwise (and with --require-device when no device is visible).
    """
    report = diagnose(device=not no_device)
    for check in report.checks:
        click.echo(f"{check.status.value:<5} {check.message}")
    from neuron_migrate.syntax import installation  # the tool's own LibCST: LibCST loads only here

    click.echo(f"info  neuron-migrate itself: {installation().reason}")
    if report.failed:
        click.echo("Some checks failed: fix the FAIL lines above, then run `neuron-migrate doctor` again.")
    elif not report.device:
        click.echo("The packages are right; no device was checked or found.")
    else:
        click.echo("Ready: the native backend works on this machine.")
    sys.exit(1 if report.failed or (require_device and not report.device) else 0)
