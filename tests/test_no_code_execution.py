"""check, rewrite and pin read the user's code; they never import or run it, and never import torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TRAP = "import pathlib; pathlib.Path({marker!r}).write_text('executed')\n"

PROBE = """
import json, sys
from neuron_migrate.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(code, json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_xla', 'train', 'setup',
                                                                     'conftest', 'local_pkg'))))
"""


@pytest.fixture
def trapped_project(tmp_path) -> tuple[Path, Path]:
    """A project whose every Python file, when imported or run, leaves a marker file behind."""
    marker = tmp_path / "EXECUTED"
    project = tmp_path / "project"
    (project / "local_pkg").mkdir(parents=True)
    (project / "torch_xla" / "core").mkdir(parents=True)
    trap = TRAP.format(marker=str(marker))
    (project / "train.py").write_text(trap + "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\n")
    (project / "setup.py").write_text(trap + "from setuptools import setup\nsetup(install_requires=['torch-xla'])\n")
    (project / "conftest.py").write_text(trap)
    (project / "local_pkg" / "__init__.py").write_text(trap)
    # a fake torch_xla beside the code: resolving names through imports must not import it
    for init in ("torch_xla/__init__.py", "torch_xla/core/__init__.py", "torch_xla/core/xla_model.py"):
        (project / init).write_text(trap)
    (project / "requirements.txt").write_text("torch-xla==2.1.0\ntorch==2.1.0\n")
    (project / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "0"\ndependencies = ["torch-xla"]\n')
    return project, marker


@pytest.mark.parametrize("command", [["check"], ["rewrite", "--diff"], ["rewrite"], ["pin"], ["pin", "--diff"]])
def test_commands_never_run_user_code_nor_import_torch(trapped_project, command):
    project, marker = trapped_project
    proc = subprocess.run([sys.executable, "-c", PROBE, *command, "."], cwd=project, capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(project)})
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not marker.exists(), f"`neuron-migrate {' '.join(command)}` executed the project's code"
    code, modules = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert code in ("0", "1"), proc.stderr  # ran (clean or with findings), not a usage error
    assert json.loads(modules) == []
