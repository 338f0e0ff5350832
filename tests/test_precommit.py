"""The pre-commit hooks, run by the real `pre-commit try-repo` against a temporary git repository."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


@pytest.mark.slow
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
        # pre-commit passed no file: the run says there was nothing (check: "No files to check", rewrite: 0 files)
        assert ("No files to check" if command == "check" else "0 files") in nothing.stdout + nothing.stderr
        gone = cli(command, "--hook", "--no-cache", "deleted.py", cwd=tmp_path)
        assert gone.returncode == 0 and "error" not in gone.stderr
        excluded = cli(command, "--hook", "--no-cache", "--exclude", "vendor/", "vendor/old.py", cwd=tmp_path)
        assert excluded.returncode == 0, excluded.stdout
    assert (vendor / "old.py").read_text(encoding="utf-8") == LEGACY
    assert cli("check", "--hook", "--no-cache", "vendor/old.py", cwd=tmp_path).returncode == 1


# -- every file kind reaches the hooks; the README's snippets work ----------------------------------------------

KINDS_FILES = {
    "train.py": LEGACY,
    "setup.py": 'from setuptools import setup\nsetup(name="x", install_requires=["torch-xla==2.1.0"])\n',
    "requirements.txt": "torch-xla==2.1.0\n",
    "pyproject.toml": '[project]\nname = "x"\nversion = "1"\ndependencies = ["torch-neuronx==2.1.2"]\n',
    "setup.cfg": "[metadata]\nname = x\n[options]\ninstall_requires =\n    torch-xla==2.1.0\n",
    "Dockerfile": "FROM python:3.11\nENV PJRT_DEVICE=NEURON\n",
    "scripts/run.sh": "#!/bin/sh\nexport PJRT_DEVICE=NEURON\npython train.py\n",
    "environment.yml": "name: train\ndependencies:\n  - python=3.12\n  - pip:\n    - torch-xla==2.1.0\n",
    "configs/accelerate_config.yaml": "compute_environment: LOCAL_MACHINE\ndistributed_type: XLA\nnum_processes: 2\n"
                                      "# trn1, two neuron cores\n",
    "notebooks/train.ipynb": json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None,
                                                    "outputs": [], "source": LEGACY.splitlines(keepends=True)}],
                                         "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n",
    # a lock file is not re-pinned (its locking tool regenerates it): a marker says so
    "uv.lock": 'version = 1\nrequires-python = ">=3.12"\n\n[[package]]\nname = "torch-xla"\nversion = "2.1.0"\n',
}


def _hooks() -> list[dict]:
    import yaml

    return yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))


def _sample_names(pattern: str) -> list[str]:
    return [pattern.replace("*", fill) for fill in ("", "-dev", "x")]


def test_hook_file_patterns_take_exactly_the_kinds_the_tool_handles():
    from neuron_migrate.engine.discover import KINDS, kind_of

    for hook in _hooks():
        assert "types_or" not in hook and "types" not in hook, hook["id"]
        files = re.compile(hook["files"])
        names = [n for pattern, _kind in KINDS for n in _sample_names(pattern)]
        names += ["notes.txt", "README.md", "config.yaml", "setup.py.orig", "pyproject.toml.bak", "Makefile"]
        for name in names:
            for path in (name, f"sub/dir/{name}"):
                assert bool(files.search(path)) == (kind_of(path) is not None), (hook["id"], path)


def _shim(folder: Path) -> Path:
    """A `neuron-migrate` command on PATH that runs this checkout (what `pip install` puts there)."""
    folder.mkdir()
    script = folder / "neuron-migrate"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                      "from neuron_migrate.cli import main\nsys.exit(main())\n", encoding="utf-8")
    script.chmod(0o755)
    return folder


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRE_COMMIT_HOME": str(repo.parent / "pre-commit-home"),
           "NEURON_MIGRATE_CACHE_DIR": str(repo.parent / "cache"),
           "PATH": f"{_shim(repo.parent / 'bin') if not (repo.parent / 'bin').exists() else repo.parent / 'bin'}"
                   f"{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=600)


def _staged_repo(repo: Path, config: str) -> None:
    repo.mkdir()
    _git(repo, "init", "-q")
    for name, text in KINDS_FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    (repo / "notes.txt").write_text("torch-xla==2.1.0\n", encoding="utf-8")
    (repo / ".pre-commit-config.yaml").write_text(config, encoding="utf-8")
    _git(repo, "add", ".")


def test_the_hooks_check_and_fix_every_kind_with_the_real_pre_commit(tmp_path):
    """The hooks of .pre-commit-hooks.yaml, as a `repo: local` (offline: no clone, no install)."""
    import yaml

    hooks = [{**{k: h[k] for k in ("id", "name", "entry", "files")}, "language": "system"} for h in _hooks()]
    for hook in hooks:  # as the hooks' header says: the fix hook makes the unsafe fixes too with this argument
        if hook["id"] == "neuron-migrate-fix":
            hook["args"] = ["--unsafe-fixes"]
    repo = tmp_path / "repo"
    _staged_repo(repo, yaml.safe_dump({"repos": [{"repo": "local", "hooks": hooks}]}))
    check = _run(repo, "run", "neuron-migrate-check", "--all-files")
    assert check.returncode == 1, check.stdout + check.stderr
    for name in KINDS_FILES:
        assert re.search(rf"^{re.escape(name)}:(cell \d+:)?\d+:\d+: NM\d+", check.stdout, re.M), (name, check.stdout)
    assert "notes.txt" not in check.stdout
    fix = _run(repo, "run", "neuron-migrate-fix", "--all-files")
    assert fix.returncode == 1 and "files were modified by this hook" in fix.stdout, fix.stdout + fix.stderr
    for name, text in KINDS_FILES.items():
        assert (repo / name).read_text(encoding="utf-8") != text, name
    assert (repo / "notes.txt").read_text(encoding="utf-8") == "torch-xla==2.1.0\n"


def _readme_block(after: str, language: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(after)
    m = re.compile(rf"```{language}\n(.*?)```", re.S).search(text, start)
    return textwrap.dedent(m.group(1))


def test_readme_local_hook_snippet_runs(tmp_path):
    import yaml

    snippet = _readme_block("needs no `rev:`", "yaml")

    config = yaml.safe_load(snippet)
    assert config["repos"][0]["repo"] == "local"
    repo = tmp_path / "repo"
    _staged_repo(repo, snippet)
    out = _run(repo, "run", "--all-files")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "train.py:3:10: NM101" in out.stdout and "requirements.txt:1:1: NM601" in out.stdout


def test_readme_and_hooks_pin_a_commit_while_no_release_is_tagged():
    """No `rev: v...` that names a tag nobody made: the README and the hooks' header say a commit SHA."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    header = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert not re.search(r"rev: v\d", readme + header)
    assert "pre-commit try-repo https://github.com/neuron-migrate/neuron-migrate neuron-migrate-check --all-files" \
        in " ".join(readme.split())
    assert "rev: <commit SHA>" in header and "autoupdate --bleeding-edge" in header


@pytest.mark.slow  # clones the repository and installs the hook environment: CI runs it with the slow part
def test_readme_try_repo_and_a_commit_rev_run_against_a_clone(tmp_path):
    """The README's remote use, with its URL pointing to a clone of this repository: `pre-commit try-repo` runs
    the check hook from the newest commit, and a config whose `rev:` is that commit's SHA runs it too."""
    import yaml

    clone = tmp_path / "neuron-migrate"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, capture_output=True)
    sha = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.strip()
    repo = tmp_path / "repo"
    config = {"repos": [{"repo": str(clone), "rev": sha, "hooks": [{"id": "neuron-migrate-check"}]}]}
    _staged_repo(repo, yaml.safe_dump(config))
    tried = _run(repo, "try-repo", str(clone), "neuron-migrate-check", "--all-files")
    assert tried.returncode == 1 and "train.py:3:10: NM101" in tried.stdout, tried.stdout + tried.stderr
    out = _run(repo, "run", "--all-files")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "train.py:3:10: NM101" in out.stdout and "requirements.txt:1:1: NM601" in out.stdout
