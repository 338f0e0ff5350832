"""The result cache, parallel runs and the progress bar."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from neuron_migrate.engine import handlers
from neuron_migrate.cli import progress
from neuron_migrate.engine.runner import run
from neuron_migrate.settings import Settings
from tests.helpers import cli

LEGACY = "import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nxm.mark_step()\n"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("NEURON_MIGRATE_CACHE_DIR", str(folder))
    return folder


def _repo(root, n=3):
    root.mkdir()
    for i in range(n):
        (root / f"train{i}.py").write_text(LEGACY + f"STEP = {i}\n", encoding="utf-8")
    (root / "plain.py").write_text("import os\n", encoding="utf-8")
    return root


def _summary(result):
    return [(r.path, [f.to_json() for f in r.findings], r.new_bytes, r.applied, r.error) for r in result.results]


def _no_processing(monkeypatch):
    def fail(*args):
        raise AssertionError("a cached file was processed again")
    monkeypatch.setattr(handlers, "process", fail)


@pytest.mark.parametrize("rewrite", [False, True])
def test_second_run_over_an_unchanged_tree_processes_nothing(tmp_path, cache_dir, monkeypatch, rewrite):
    repo = _repo(tmp_path / "repo")
    first = run([str(repo)], Settings(), rewrite=rewrite, jobs=1, use_cache=True)
    assert any(r.findings or r.changed for r in first.results)
    with monkeypatch.context() as m:
        _no_processing(m)
        second = run([str(repo)], Settings(), rewrite=rewrite, jobs=1, use_cache=True)
    assert _summary(second) == _summary(first)
    assert {p.name for p in cache_dir.iterdir()} >= {".gitignore", "CACHEDIR.TAG"}


def test_changed_bytes_settings_or_a_broken_cache_mean_processing_again(tmp_path, cache_dir, monkeypatch):
    repo = _repo(tmp_path / "repo", n=1)
    run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True)
    (repo / "train0.py").write_text(LEGACY.replace("xm.mark_step()\n", ""), encoding="utf-8")
    codes = [f.code for f in run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True).findings]
    assert "NM103" not in codes and "NM101" in codes
    ignored = run([str(repo)], Settings(ignore=frozenset({"NM101"})), rewrite=False, jobs=1, use_cache=True)
    assert "NM101" not in [f.code for f in ignored.findings]
    for entry in cache_dir.glob("*.json"):
        entry.write_text("{not json", encoding="utf-8")
    again = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert [f.code for f in again.findings] == codes


def test_concurrent_runs_share_the_cache_safely(tmp_path, cache_dir):
    repo = _repo(tmp_path / "repo", n=20)
    procs = [subprocess.Popen([sys.executable, "-m", "neuron_migrate", "check", "-j", "2", str(repo)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [1, 1, 1]
    assert len({out for out, _ in outputs}) == 1
    for entry in cache_dir.glob("*.json"):
        assert len(json.loads(entry.read_text(encoding="utf-8"))) == 21


def test_parallel_output_is_in_discovery_order_and_no_cache_writes_no_cache(tmp_path, cache_dir):
    repo = _repo(tmp_path / "repo", n=24)
    one = cli("check", "--no-cache", "-j", "1", "--output-format", "concise", str(repo))
    two = cli("check", "--no-cache", "-j", "2", "--format", "json", str(repo))
    assert one.returncode == two.returncode == 1
    assert one.stdout == cli("check", "--no-cache", "-j", "2", "--output-format", "concise", str(repo)).stdout
    assert len(json.loads(two.stdout)["findings"]) == one.stdout.count("\n") - 1  # and the summary
    assert not cache_dir.exists()
    assert "\r" not in one.stderr  # piped: no progress bar


def test_progress_bar_draws_on_a_terminal_and_clears_itself(monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "INTERVAL", 0.0)
    stream = io.StringIO()
    assert not progress.wanted(stream)
    with progress.Progress(4, stream=stream, enabled=True) as bar:
        bar.advance(2)
        assert stream.getvalue().endswith("] 2/4 files")
    assert stream.getvalue().endswith("\r\033[K")
    quiet = io.StringIO()
    with progress.Progress(4, stream=quiet) as bar:
        bar.advance(4)
    assert quiet.getvalue() == ""
