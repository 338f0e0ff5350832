"""Two runs on one tree at once (an editor hook and a pre-commit hook) corrupt nothing, and an edit saved while a
run is going is never overwritten."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from neuron_migrate.engine.runner import run, write_results
from neuron_migrate.settings import Settings
from tests.test_no_damage import LEGACY, MIGRATED, legacy_tree, temp_files


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "neuron_migrate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_rewrites_and_a_check_at_once_leave_every_file_migrated(tmp_path):
    paths = legacy_tree(tmp_path, 120)
    procs = [_start("rewrite", str(tmp_path)), _start("rewrite", "-j", "1", str(tmp_path)),
             _start("check", str(tmp_path))]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outputs):
        assert "error:" not in err and "Traceback" not in err, err  # no run ever read a half-written file
    assert [p.returncode for p in procs[:2]] == [0, 0]
    assert procs[2].returncode in (0, 1)  # findings, or none when the rewrites were faster
    assert all(p.read_bytes() == MIGRATED for p in paths)
    assert temp_files(tmp_path) == []


def test_a_file_saved_during_the_run_is_not_overwritten(tmp_path):
    edited, other = tmp_path / "edited.py", tmp_path / "other.py"
    edited.write_bytes(LEGACY)
    other.write_bytes(LEGACY)
    result = run([str(tmp_path)], Settings(), rewrite=True, jobs=1)
    users_edit = LEGACY + b"# saved by the editor while the run was going\n"
    edited.write_bytes(users_edit)
    failures = write_results(result)
    assert failures == [(str(edited), "could not write (the file changed on disk during the run; run again); "
                                      "the file was left as it was")]
    assert edited.read_bytes() == users_edit
    assert other.read_bytes() == MIGRATED
    assert temp_files(Path(tmp_path)) == []
