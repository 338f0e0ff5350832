"""The pre-commit hooks, run by the real `pre-commit try-repo` against a temporary git repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT, cli

LEGACY = "import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nxm.mark_step()\n"
MIGRATED = 'import torch\n\ndevice = torch.device("neuron")\n'


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _try_repo(repo: Path) -> subprocess.CompletedProcess:
    """Both hooks of this repository, as `pre-commit try-repo` runs them (it installs them anew every time)."""
    env = {**os.environ, "PRE_COMMIT_HOME": str(repo.parent / "pre-commit-home"),
           "NEURON_MIGRATE_CACHE_DIR": str(repo.parent / "cache")}
    return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT)], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)


def test_hooks_on_a_staged_legacy_file(tmp_path):
    assert shutil.which("git")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "train.py").write_text(LEGACY, encoding="utf-8")
    (repo / "notes.txt").write_text("xm.mark_step()\n", encoding="utf-8")
    _git(repo, "add", "train.py", "notes.txt")

    first = _try_repo(repo)
    assert first.returncode == 1, first.stdout + first.stderr
    check, fix = first.stdout.split("neuron-migrate fix")
    assert "neuron-migrate check" in check and "Failed" in check
    assert "train.py:3:10: NM101" in check and "notes.txt" not in check
    assert "Failed" in fix and "files were modified by this hook" in fix
    assert (repo / "train.py").read_text(encoding="utf-8") == MIGRATED

    _git(repo, "add", "train.py")
    second = _try_repo(repo)
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.count("Passed") == 2


def test_hook_mode_with_no_files_deleted_files_and_excluded_files(tmp_path):
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "old.py").write_text(LEGACY, encoding="utf-8")
    for command in ("check", "rewrite"):
        nothing = cli(command, "--hook", "--no-cache", cwd=tmp_path)
        assert nothing.returncode == 0, nothing.stderr
        assert "0 files" in nothing.stdout + nothing.stderr
        gone = cli(command, "--hook", "--no-cache", "deleted.py", cwd=tmp_path)
        assert gone.returncode == 0 and "error" not in gone.stderr
        excluded = cli(command, "--hook", "--no-cache", "--exclude", "vendor/", "vendor/old.py", cwd=tmp_path)
        assert excluded.returncode == 0, excluded.stdout
    assert (vendor / "old.py").read_text(encoding="utf-8") == LEGACY
    assert cli("check", "--hook", "--no-cache", "vendor/old.py", cwd=tmp_path).returncode == 1
