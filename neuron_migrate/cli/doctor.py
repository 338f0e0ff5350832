"""`neuron-migrate doctor`: what the environment it runs in lacks for the native `neuron` backend.

The target is a row of the release matrix (rules/versions.toml): the one `--neuron-sdk` / `--torch` or the
project's `[tool.neuron-migrate]` (`neuron-sdk`, `torch`) choose; without a choice, the family of the installed
torch-neuronx, else of the installed torch, else the newest release. The report names the Neuron releases the
installed packages match.

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

from neuron_migrate.pin.matrix import Family, Matrix, Release, matrix


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
    names = (*mx.companion_packages, *mx.required_packages)
    packages = " ".join(f'"{name}{family.pins[name]}"' if family.pins[name] else name for name in names)
    return f"pip install --upgrade {packages} --extra-index-url {mx.index_url}"


def _minor(version: str) -> str | None:
    try:
        return ".".join(str(p) for p in Version(version).release[:2])
    except InvalidVersion:
        return None


def choose_target(packages: dict[str, str], mx: Matrix, sdk: str | None = None,
                  torch: str | None = None) -> tuple[Family, bool]:
    """The family to check against, and whether the user chose it (flags or configuration).

    Without a choice: the family of the installed native torch-neuronx, else the newest release with a family
    for the installed torch, else the newest release's default family.
    """
    if sdk is not None or torch is not None:
        return mx.select(sdk, torch), True
    neuronx = packages.get("torch-neuronx")
    if neuronx and mx.is_native_neuronx(neuronx) and (family := mx.family_of_neuronx(neuronx)) is not None:
        return family, False
    installed_torch = _minor(packages.get("torch", ""))
    if installed_torch in mx.torch_versions:
        return mx.select(None, installed_torch), False
    return mx.select(), False


def matching_releases(packages: dict[str, str], mx: Matrix) -> list[tuple[Release, Family]]:
    """The (release, family) rows every installed Neuron-family package fits (torch, torch-neuronx, torchvision)."""
    out = []
    neuronx = packages.get("torch-neuronx")
    neuronx_releases = {r.sdk for r in mx.releases_of_neuronx(neuronx)} if neuronx else None
    for release in mx.releases:
        for family in release.families:
            if neuronx_releases is not None and release.sdk not in neuronx_releases:
                continue
            if neuronx_releases is not None and mx.family_of_neuronx(neuronx).torch != family.torch:
                continue
            if any(packages.get(n) and family.pins.get(n) and not _admits(family.pins[n], packages[n])
                   for n in ("torch", "torchvision")):
                continue
            if neuronx_releases is None and "torch" not in packages:
                continue
            out.append((release, family))
    return out


def release_check(packages: dict[str, str], mx: Matrix, target: Family) -> Check:
    """Which Neuron release the installed packages match."""
    matches = matching_releases(packages, mx)
    if not matches:
        return Check(Status.WARN, "the installed packages match no Neuron release of the matrix "
                                  f"({', '.join(r.sdk for r in mx.releases)}); {target.label} is checked")
    rows = ", ".join(f"{r.sdk} (torch {f.torch})" for r, f in matches)
    basis = "torch-neuronx" if "torch-neuronx" in packages else "torch"
    if any(f is target for _, f in matches):
        return Check(Status.OK, f"the installed {basis} matches Neuron {rows}; checked against {target.label}")
    return Check(Status.WARN, f"the installed {basis} matches Neuron {rows}, not the chosen {target.label}")


def _admits(pin: str, version: str) -> bool:
    try:
        return SpecifierSet(pin).contains(Version(version).public, prereleases=True)
    except InvalidVersion:
        return False


def package_checks(packages: dict[str, str], mx: Matrix, default: Family,
                   chosen: bool = False) -> tuple[list[Check], Family | None]:
    """Checks of the installed packages, and the native family found (None when there is none).

    `default`: the target family; `chosen`: the user chose it, so the packages are judged against it even when
    the installed torch-neuronx belongs to another family.
    """
    checks = []
    neuronx = packages.get("torch-neuronx")
    family = mx.family_of_neuronx(neuronx) if neuronx and mx.is_native_neuronx(neuronx) else None
    target = default if chosen or family is None else family
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
        releases = [r.sdk for r in mx.releases_of_neuronx(neuronx)]
        if default.sdk not in releases and releases and family.torch == default.torch and chosen:
            checks.append(Check(Status.FAIL, f"torch-neuronx {neuronx} is the build of Neuron {', '.join(releases)}, "
                                             f"not of the chosen {default.label} (torch-neuronx "
                                             f"{default.releases['torch-neuronx']}); {install_command(default, mx)}"))
        else:
            checks.append(Check(Status.OK, f"torch-neuronx {neuronx}: the native backend, torch {family.torch} "
                                           f"family"))
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
                checks.append(Check(Status.FAIL, f"{name} is not installed; the torch {family.torch} family of "
                                                 f"Neuron {family.sdk} needs `{wanted}`"))
        elif pin and not _admits(pin, version):
            checks.append(Check(Status.FAIL, f"{name} {version} does not match the torch {family.torch} family of "
                                             f"Neuron {family.sdk}, which needs `{wanted}`: pip install \"{wanted}\""))
        else:
            checks.append(Check(Status.OK, f"{name} {version}"))
    return checks


def python_check(version: tuple[int, int, int], mx: Matrix, release: Release | None = None) -> Check:
    text = ".".join(map(str, version))
    python = (release or mx.newest).python
    supported = ", ".join(python)
    if ".".join(text.split(".")[:2]) in python:
        return Check(Status.OK, f"Python {text} (TorchNeuron supports {supported})")
    return Check(Status.FAIL, f"Python {text} has no TorchNeuron wheels; use Python {supported}")


def platform_check(system: str, machine: str, mx: Matrix) -> Check:
    if system == mx.system and machine in (mx.machine, "AMD64"):
        return Check(Status.OK, f"{system} {machine}")
    return Check(Status.FAIL, f"{system} {machine}: TorchNeuron runs on {mx.system} {mx.machine} only "
                              f"({' / '.join(i.capitalize() for i in mx.native_instances)} instances)")


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
             system: str | None = None, machine: str | None = None, device: bool = True,
             neuron_sdk: str | None = None, torch: str | None = None) -> Report:
    """Check the environment. `neuron_sdk` / `torch` choose the row of the release matrix (ValueError when the
    matrix has no such row)."""
    mx = matrix()
    python = python or sys.version_info[:3]
    packages = installed(search_path)
    target, chosen = choose_target(packages, mx, neuron_sdk, torch)
    release = mx.release_of(target)
    checks = [python_check(python, mx, release),
              platform_check(system or platform.system(), machine or platform.machine(), mx)]
    found, family = package_checks(packages, mx, target, chosen)
    checks += found
    checks.append(release_check(packages, mx, target))
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
@click.option("--torch", "torch", type=click.Choice(matrix().torch_versions), default=None,
              help="PyTorch version of the family to check against (default: the project's `torch` setting, "
              "else the installed family).")
@click.option("--neuron-sdk", "neuron_sdk", type=click.Choice(matrix().sdk_names), default=None,
              help="Neuron release to check against (default: the project's `neuron-sdk` setting, else the newest "
              "release with the installed family).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour the status column: auto colours a terminal (not a pipe, not with NO_COLOR set).")
def doctor(require_device: bool, no_device: bool, torch: str | None, neuron_sdk: str | None, color: str) -> None:
    """Check this environment for the native `neuron` backend: Python, packages, families, device.

    Reads `[tool.neuron-migrate]` from the nearest pyproject.toml above the current folder.
    Exit 0 when nothing failed, 1 otherwise (and with --require-device when no device is visible), 2 when the
    configuration or the options name no row of the release matrix.
    """
    from neuron_migrate import config

    try:
        settings = config.resolve(["."], torch=torch, neuron_sdk=neuron_sdk).settings
        report = diagnose(device=not no_device, neuron_sdk=settings.neuron_sdk, torch=settings.torch)
    except (config.ConfigError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    from neuron_migrate.cli.terminal import style_for

    colored = style_for(color, sys.stdout).color
    hue = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "red"}
    for check in report.checks:
        status = f"{check.status.value:<5}"
        if colored:
            status = click.style(status, fg=hue[check.status], bold=check.status is Status.FAIL)
        click.echo(f"{status} {check.message}", color=colored or None)
    from neuron_migrate.syntax import installation  # the tool's own LibCST: LibCST loads only here

    click.echo(f"info  neuron-migrate itself: {installation().reason}")
    if report.failed:
        click.echo("Some checks failed: fix the FAIL lines above, then run `neuron-migrate doctor` again.")
    elif not report.device:
        click.echo("The packages are right; no device was checked or found.")
    else:
        click.echo("Ready: the native backend works on this machine.")
    sys.exit(1 if report.failed or (require_device and not report.device) else 0)
