"""The result cache, parallel runs and the progress bar."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from neuron_migrate.engine import handlers
from neuron_migrate.cli import progress
from neuron_migrate.engine.cache import PROJECT_ENTRY
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
        kept = json.loads(entry.read_text(encoding="utf-8"))
        assert len(kept) == 22 and PROJECT_ENTRY in kept  # the 21 files and the project model's facts


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


MAIN = "import torch_xla.core.xla_model as xm\n\n\ndef main():\n    xm.mark_step()\n\n\nif __name__ == '__main__':\n    main()\n"


def _no_model(monkeypatch):
    from neuron_migrate.engine import project

    def fail(*args):
        raise AssertionError("the project model was built again")
    monkeypatch.setattr(project, "Project", fail)


def _codes(result):
    return sorted({f.code for f in result.findings})


def test_a_warm_run_reuses_the_project_facts_without_building_the_model(tmp_path, cache_dir, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "pod").mkdir(parents=True)
    (repo / "pod" / "main.py").write_text(MAIN, encoding="utf-8")
    (repo / "pod" / "README.md").write_text("Runs on a TPU v4 pod slice.\n", encoding="utf-8")
    (repo / "gpu.py").write_text(MAIN, encoding="utf-8")
    first = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert "NM521" in _codes(first) and first.project is not None  # the README sets the TPU program aside
    with monkeypatch.context() as m:
        _no_model(m)
        _no_processing(m)
        second = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert _summary(second) == _summary(first) and second.project is None
    shown = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True, model=True)  # --show-project
    assert shown.project is not None and "pod/main.py: target TPU" in shown.project.report()


@pytest.mark.parametrize("change", ["readme text", "readme removed", "root marker", "readme added"])
def test_the_model_is_built_again_when_a_file_it_read_changes(tmp_path, cache_dir, change):
    """What the model reads beyond the files processed (a README, a folder's root marker) is checked as their
    bytes are: the facts of a file whose own bytes did not change follow it."""
    repo = tmp_path / "repo"
    work = repo / ("tpu_work" if change == "root marker" else "pod")  # a path naming TPU below the root
    work.mkdir(parents=True)
    (work / "main.py").write_text(MAIN, encoding="utf-8")
    readme = work / "README.md"
    if change in ("readme text", "readme removed"):
        readme.write_text("Runs on a TPU v4 pod slice.\n", encoding="utf-8")
    first = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert ("NM521" in _codes(first)) == (change != "readme added")
    if change == "readme text":
        readme.write_text("Runs on Trn2.\n", encoding="utf-8")
    elif change == "readme removed":
        readme.unlink()
    elif change == "root marker":
        (work / ".git").mkdir()  # the root is now tpu_work: the path below it no longer names TPU
    else:
        readme.write_text("Runs on a TPU v4 pod slice.\n", encoding="utf-8")
    again = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True)
    fresh = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=False)
    assert _summary(again) == _summary(fresh) and again.project is not None  # built again, not read from the cache
    assert ("NM521" in _codes(again)) == (change == "readme added")


def test_a_project_entry_the_tool_did_not_write_is_not_used(tmp_path, cache_dir):
    repo = tmp_path / "repo"
    (repo / "pod").mkdir(parents=True)
    (repo / "pod" / "main.py").write_text(MAIN, encoding="utf-8")
    (repo / "pod" / "README.md").write_text("Runs on a TPU v4 pod slice.\n", encoding="utf-8")
    first = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert "NM521" in _codes(first)
    for entry in cache_dir.glob("*.json"):
        kept = json.loads(entry.read_text(encoding="utf-8"))
        for facts in kept[PROJECT_ENTRY][1]["facts"].values():
            facts.update(target=None, evidence=[])  # forged: the program would move
        entry.write_text(json.dumps(kept), encoding="utf-8")
    again = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert again.project is not None and _summary(again) == _summary(first)


def test_a_warm_check_imports_neither_libcst_nor_the_rules_nor_the_model(tmp_path, cache_dir):
    """A cache hit costs a read and a hash: the parser, the rule modules, the project model and packaging's
    platform tags (`packaging.tags`, loaded by `packaging.utils`) stay unloaded when every file hits."""
    repo = _repo(tmp_path / "repo")
    (repo / "requirements.txt").write_text("torch-xla==2.9.0\ntorch_neuronx\n", encoding="utf-8")
    code = (
        "import json, sys\n"
        "from neuron_migrate.cli import main\n"
        "try:\n"
        f"    main(['check', {str(repo)!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('libcst', 'neuron_migrate.rules', 'neuron_migrate.engine.project', 'neuron_migrate.engine.python',"
        " 'packaging.tags')\n"
        "print(json.dumps(sorted({h for h in heavy for m in sys.modules if m == h or m.startswith(h + '.')})))\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True) for _ in range(2)]
    cold, warm = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert "libcst" in cold and "neuron_migrate.engine.project" in cold  # the same probe sees them when they load
    assert warm == [], runs[1].stdout + runs[1].stderr


HELD_ONLY = "import torch_xla.debug.metrics as met\n\n\ndef report():\n    print(met.metrics_report())\n"


def _held_back(result) -> int:
    return sum(1 for f in result.findings if f.held_back)


@pytest.mark.parametrize("use_cache", [False, True])
def test_a_run_after_a_rewrite_reuses_the_results_of_the_files_it_left_as_they_were(tmp_path, cache_dir, monkeypatch,
                                                                                    use_cache):
    """rewrite's count of the unsafe fixes left (`recheck`) runs check again after the writes: a file the rewrite
    did not change, with the same project facts, keeps its result; a written file is read and decided again."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "held.py").write_text(HELD_ONLY, encoding="utf-8")  # an unsafe fix held back, nothing else: unchanged
    (repo / "train.py").write_text(LEGACY, encoding="utf-8")
    first = run([str(repo)], Settings(), rewrite=True, jobs=1, use_cache=use_cache)
    by_path = {r.path: r for r in first.results}
    held = str(repo / "held.py")
    assert not by_path[held].changed and _held_back(by_path[held]) == 1
    assert set(first.keys) == set(by_path)
    for r in first.results:
        if r.changed:
            with open(r.path, "wb") as fh:
                fh.write(r.new_bytes)
    processed = []
    original = handlers.process

    def counting(path, *args, **kwargs):
        processed.append(path)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(handlers, "process", counting)
    again = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=False, earlier=first)
    fresh = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=False)
    assert processed.count(held) == 1  # the fresh run only
    assert processed.count(str(repo / "train.py")) == 2  # written: decided again by both
    assert {r.path: r for r in again.results}[held] is by_path[held]
    assert [_held_back(r) for r in again.results] == [_held_back(r) for r in fresh.results] == [1, 0]
    assert [(f.code, f.line, f.col, f.message) for r in again.results for f in r.findings] == \
        [(f.code, f.line, f.col, f.message) for r in fresh.results for f in r.findings]


def test_a_file_whose_bytes_changed_since_the_earlier_run_is_decided_again(tmp_path, cache_dir, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "held.py").write_text(HELD_ONLY, encoding="utf-8")
    first = run([str(repo)], Settings(), rewrite=True, jobs=1, use_cache=False)
    (repo / "held.py").write_text(HELD_ONLY + "\nprint(met.metrics_report())\n", encoding="utf-8")
    again = run([str(repo)], Settings(), rewrite=False, jobs=1, use_cache=False, earlier=first)
    assert again.results[0] is not first.results[0]
    assert _held_back(again.results[0]) == 2
