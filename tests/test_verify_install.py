"""The documented workflow from a regular (non-editable) install: `pip install "neuron-migrate[verify]"`, then
`neuron-migrate verify train.py [--reference-python PY]`, run outside the checkout.

The install is a venv whose site-packages links this interpreter's packages (torch, libcst, click, ...) and
holds a regular install of a copy of this checkout, so the tool's own site-packages has torch 2.13 in it: the
torch_xla reference must not see it (it once did, and imported the wrong torch).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.test_verify import EXAMPLE, XLA_PYTHON

pytestmark = pytest.mark.needs_torch  # verify runs programs with PyTorch


def _site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a venv with neuron-migrate installed the regular way (a wheel built from a copy)."""
    base = tmp_path_factory.mktemp("regular-install")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = _site_packages(venv)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(("neuron_migrate", "neuron-migrate", "__editable__", "_virtualenv")):
            continue  # the checkout's editable install stays out
        if not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    source = base / "source"
    source.mkdir()
    for name in ("neuron_migrate", "rules"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, source / name)
    python = venv / "bin" / "python"
    # built as pip builds it for a user: in its own environment with the build requirements pyproject.toml names
    # (setuptools>=77 for the SPDX license; a venv's own setuptools may be older)
    proc = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(source)], capture_output=True,
                          text=True, timeout=600, env=_clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    where = subprocess.run([str(python), "-c", "import neuron_migrate; print(neuron_migrate.__file__)"],
                           capture_output=True, text=True, cwd=base, env=_clean_env(), timeout=120)
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr  # not the checkout
    return python


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def run_installed(python: Path, *args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([str(python.parent / "neuron-migrate"), "verify", "--format", "json", *args],
                          capture_output=True, text=True, cwd=cwd, env=_clean_env(), timeout=900)
    assert proc.stdout, proc.stderr
    return proc, json.loads(proc.stdout)


@pytest.mark.slow
def test_verify_works_from_a_regular_install(installed, tmp_path):
    folder = tmp_path / "xla_mnist"
    shutil.copytree(EXAMPLE, folder)
    proc, report = run_installed(installed, "train.py", "--max-steps", "2", "--", "--steps", "2", cwd=folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["verdict"] == "equivalent"


@pytest.mark.skipif(not XLA_PYTHON, reason="set NEURON_MIGRATE_XLA_PYTHON to an interpreter with torch_xla "
                                           "(pip install torch==2.9.0 torch_xla==2.9.0) to run the torch_xla reference")
@pytest.mark.slow
def test_documented_workflow_against_torch_xla_from_a_regular_install(installed, tmp_path):
    folder = tmp_path / "xla_mnist"
    shutil.copytree(EXAMPLE, folder)
    proc, report = run_installed(installed, "train.py", "--reference-python", XLA_PYTHON, "--max-steps", "3",
                                 cwd=folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reference = report["runs"][0]
    assert reference["device"] == "xla" and reference["torch"].startswith("2.9")  # not the tool's torch 2.13
