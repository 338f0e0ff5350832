"""doctor against fake installed distributions: a temporary site folder with dist-info metadata."""

from __future__ import annotations

import os
import sys
import types

import pytest

from neuron_migrate.cli import doctor
from neuron_migrate.cli.doctor import Status, diagnose
from tests.helpers import cli

NATIVE_214 = {"torch": "2.14.0", "torch-neuronx": "2.14.3.0.4021", "neuronx-cc": "2.28.7631.0", "nki": "0.7.0",
              "torchvision": "0.29.0", "numpy": "2.3.1"}


def fake_site(tmp_path, packages: dict[str, str]) -> str:
    site = tmp_path / "site-packages"
    for name, version in packages.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(site)


def run(tmp_path, packages, python=(3, 12, 4), **kw):
    return diagnose([fake_site(tmp_path, packages)], python=python, system="Linux", machine="x86_64",
                    device=False, **kw)


def failures(report) -> list[str]:
    return [c.message for c in report.checks if c.status is Status.FAIL]


def test_native_match_passes(tmp_path):
    report = run(tmp_path, NATIVE_214)
    assert failures(report) == []
    assert any("torch-neuronx 2.14.3.0.4021: the native backend, torch 2.14 family" in c.message
               for c in report.checks)


def test_native_213_family_is_recognised_without_settings(tmp_path):
    packages = {**NATIVE_214, "torch": "2.13.0+cpu", "torch-neuronx": "2.13.3.0.17", "torchvision": "0.28.0"}
    assert failures(run(tmp_path, packages)) == []


def test_family_mismatch_names_the_torch_to_install(tmp_path):
    report = run(tmp_path, {**NATIVE_214, "torch": "2.13.0", "torchvision": "0.28.0"})
    assert failures(report) == [
        "torch 2.13.0 does not match the torch 2.14 family of Neuron 2.33.1, which needs `torch==2.14.0`: "
        "pip install \"torch==2.14.0\"",
        "torchvision 0.28.0 does not match the torch 2.14 family of Neuron 2.33.1, which needs `torchvision==0.29.0`: "
        "pip install \"torchvision==0.29.0\"",
    ]


def test_legacy_xla_build_and_stray_xla_packages(tmp_path):
    report = run(tmp_path, {"torch": "2.9.0", "torch-neuronx": "2.9.0.2.15.32035", "torch-xla": "2.9.0",
                            "libneuronxla": "2.2.12677.0", "neuronx-cc": "2.21.18209.0"})
    failed = failures(report)
    assert failed[0].startswith("torch-neuronx 2.9.0.2.15.32035 is the legacy XLA build")
    assert "pip install --upgrade \"torch==2.14.0\" \"torch-neuronx==2.14.*\" \"neuronx-cc==2.*\" nki --extra-index-url " \
           "https://pip.repos.neuron.amazonaws.com" in failed[0]
    assert any(m.startswith("torch-xla 2.9.0 is installed") and "pip uninstall torch-xla" in m for m in failed)
    assert any(m.startswith("libneuronxla 2.2.12677.0 is installed") for m in failed)
    assert any(m.startswith("torch 2.9.0 does not match") for m in failed)
    assert "nki is not installed; the torch 2.14 family of Neuron 2.34.0 needs `nki`" in failed


def checks_with(report, status) -> list[str]:
    return [c.message for c in report.checks if c.status is status]


def test_the_report_names_the_neuron_releases_the_environment_matches(tmp_path):
    report = run(tmp_path, NATIVE_214)  # torch-neuronx 2.14.3.0.x: the build of Neuron 2.33.0 and 2.33.1
    assert ("the installed torch-neuronx matches Neuron 2.33.1 (torch 2.14), 2.33.0 (torch 2.14); checked against "
            "Neuron 2.33.1, torch 2.14") in checks_with(report, Status.OK)
    current = run(tmp_path / "234", {**NATIVE_214, "torch-neuronx": "2.14.3.1"})
    assert failures(current) == []
    assert any(m.startswith("the installed torch-neuronx matches Neuron 2.34.0 (torch 2.14)")
               for m in checks_with(current, Status.OK))


def test_a_chosen_release_judges_the_installed_build(tmp_path):
    report = run(tmp_path, NATIVE_214, neuron_sdk="2.34")
    assert failures(report) == [
        "torch-neuronx 2.14.3.0.4021 is the build of Neuron 2.33.1, 2.33.0, not of the chosen Neuron 2.34.0, torch "
        "2.14 (torch-neuronx 2.14.3.1); pip install --upgrade \"torch==2.14.0\" \"torch-neuronx==2.14.*\" "
        "\"neuronx-cc==2.*\" nki --extra-index-url https://pip.repos.neuron.amazonaws.com"]
    assert "matches Neuron 2.33.1 (torch 2.14), 2.33.0 (torch 2.14), not the chosen Neuron 2.34.0, torch 2.14" in \
        " ".join(checks_with(report, Status.WARN))
    assert failures(run(tmp_path / "233", NATIVE_214, neuron_sdk="2.33")) == []
    with pytest.raises(ValueError, match="Neuron 2.34.0 has no torch-neuronx family for torch 2.13"):
        run(tmp_path / "bad", NATIVE_214, neuron_sdk="2.34", torch="2.13")


def test_the_readme_test_setup_is_judged_by_its_torch(tmp_path):
    """The README's test set-up installs torch 2.13.0 (no torch-neuronx): doctor checks the torch 2.13 family of
    the newest release that has one, and only torch-neuronx and its companions are missing."""
    report = run(tmp_path, {"torch": "2.13.0", "numpy": "2.3.1"})
    assert not any(m.startswith("torch 2.13.0") for m in failures(report))
    assert "torch 2.13.0" in checks_with(report, Status.OK)
    assert failures(report)[0].startswith("torch-neuronx is not installed; install the native backend: "
                                          "pip install --upgrade \"torch==2.13.0\" \"torch-neuronx==2.13.3.0.*\"")
    assert any("matches Neuron 2.33.1 (torch 2.13), 2.33.0 (torch 2.13)" in m for m in checks_with(report, Status.OK))


def test_cli_reads_the_project_configuration(tmp_path):
    """Issue 17: `torch = "2.13"` in the project and torch 2.13 installed is no mismatch."""
    site = fake_site(tmp_path, {**NATIVE_214, "torch": "2.13.0", "torch-neuronx": "2.13.3.0.17",
                                "torchvision": "0.28.0"})
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.neuron-migrate]\ntorch = "2.13"\n')
    env = {"PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = cli("doctor", "--no-device", cwd=project, env=env)
    assert "does not match" not in proc.stdout, proc.stdout
    assert "ok    torch-neuronx 2.13.3.0.17: the native backend, torch 2.13 family" in proc.stdout
    assert "checked against Neuron 2.33.1, torch 2.13" in proc.stdout
    flagged = cli("doctor", "--no-device", "--torch", "2.14", cwd=project, env=env)
    assert "torch 2.13.0 does not match the torch 2.14 family of Neuron 2.34.0" in flagged.stdout
    assert flagged.returncode == 1
    bad = cli("doctor", "--no-device", "--neuron-sdk", "2.34", cwd=project, env=env)
    assert bad.returncode == 2 and "Neuron 2.34.0 has no torch-neuronx family for torch 2.13" in bad.stderr


def test_wrong_python(tmp_path):
    report = run(tmp_path, NATIVE_214, python=(3, 10, 14))
    assert failures(report) == ["Python 3.10.14 has no TorchNeuron wheels; use Python 3.12, 3.13, 3.14"]


def test_wrong_platform(tmp_path):
    report = diagnose([fake_site(tmp_path, NATIVE_214)], python=(3, 13, 1), system="Darwin", machine="arm64",
                      device=False)
    assert failures(report) == ["Darwin arm64: TorchNeuron runs on Linux x86_64 only (Trn2 / Trn3 instances)"]


def test_device_check_skipped_without_native_backend(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor, "neuron_ls", lambda: None)
    imported = []
    monkeypatch.setattr(doctor, "device_check", lambda: imported.append(True))
    report = diagnose([fake_site(tmp_path, {"torch": "2.9.0"})], python=(3, 12, 0), device=True)
    assert imported == []
    assert report.checks[-1].status is Status.WARN and "device check skipped" in report.checks[-1].message


def test_no_visible_device(monkeypatch):
    fake_torch = types.ModuleType("torch")
    fake_torch.neuron = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "torch_neuronx", types.ModuleType("torch_neuronx"))
    check, seen = doctor.device_check()
    assert not seen
    assert check.status is Status.WARN and "no `neuron` device is visible" in check.message


class FakeTensor:
    """Just enough of a tensor for the quickstart check; `error` is what the fake device adds to every result."""

    def __init__(self, rows, error=0.0):
        self.rows, self.error = rows, error

    def to(self, device):
        assert device == "neuron"
        return self

    def cpu(self):
        return FakeTensor([[v + self.error for v in row] for row in self.rows])

    def __matmul__(self, other):
        cols = list(zip(*other.rows))
        return FakeTensor([[sum(a * b for a, b in zip(row, col)) for col in cols] for row in self.rows],
                          self.error or other.error)

    def __sub__(self, other):
        return FakeTensor([[a - b for a, b in zip(r, s)] for r, s in zip(self.rows, other.rows)])

    def abs(self):
        return FakeTensor([[abs(v) for v in row] for row in self.rows])

    def max(self):
        return types.SimpleNamespace(item=lambda: max(max(row) for row in self.rows))


def fake_torch_with_device(error: float) -> types.ModuleType:
    import random

    torch = types.ModuleType("torch")
    torch.neuron = types.SimpleNamespace(is_available=lambda: True)
    torch.randn = lambda n, m: FakeTensor([[random.gauss(0, 1) for _ in range(m)] for _ in range(n)], error)
    torch.allclose = lambda a, b, rtol, atol: all(abs(x - y) <= atol + rtol * abs(y)
                                                  for r, s in zip(a.rows, b.rows) for x, y in zip(r, s))
    return torch


@pytest.mark.parametrize("error, status", [(0.0, Status.OK), (0.5, Status.FAIL)])
def test_quickstart_matrix_product_compared_with_cpu(monkeypatch, error, status):
    monkeypatch.setitem(sys.modules, "torch", fake_torch_with_device(error))
    monkeypatch.setitem(sys.modules, "torch_neuronx", types.ModuleType("torch_neuronx"))
    check, seen = doctor.device_check()
    assert seen and check.status is status
    assert ("matches the CPU" in check.message) == (status is Status.OK)


def test_broken_backend_import_is_a_failure(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "torch_neuronx", None)  # import raises ImportError
    check, seen = doctor.device_check()
    assert check.status is Status.FAIL and "import failed (ModuleNotFoundError" in check.message


@pytest.mark.parametrize("args, code", [((), 0), (("--require-device",), 1)])
def test_cli_exit_codes(tmp_path, args, code):
    site = fake_site(tmp_path, NATIVE_214)
    proc = cli("doctor", "--no-device", *args, env={"PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")})
    python_ok = f"{sys.version_info[0]}.{sys.version_info[1]}" in ("3.12", "3.13", "3.14")
    assert "ok    torch-neuronx 2.14.3.0.4021: the native backend, torch 2.14 family" in proc.stdout
    assert proc.returncode == (code if python_ok else 1)
