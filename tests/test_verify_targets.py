"""`verify` migrates a program as `rewrite` does, with the project's [tool.neuron-migrate] settings: a program its
files place on Trn1 is set aside (NM521) and verify says so, until the project states the Trn2 target it moves
to."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers import ROOT, cli

MLP = ROOT / "tests" / "data" / "verify" / "mlp"


def _trn1_program(tmp_path):
    folder = tmp_path / "mlp"
    shutil.copytree(MLP, folder)
    script = folder / "train.py"
    script.write_text("# Written for a Trn1 instance.\n" + script.read_text())
    return folder


@pytest.mark.needs_torch
def test_a_program_set_aside_is_named_with_the_way_to_move_it(tmp_path):
    folder = _trn1_program(tmp_path)
    proc = cli("verify", "train.py", "--max-steps", "2", cwd=folder)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the program was not migrated: train.py:1: " in proc.stderr
    assert "Trn1" in proc.stderr and "targets = " in proc.stderr and "then verify again" in proc.stderr
    assert "TODO(neuron-migrate) marker" not in proc.stderr  # there is none to read
    assert "(train.py: names `Trn1`)" in proc.stderr and "migrated" not in proc.stderr.replace("not migrated", "")


@pytest.mark.needs_torch
@pytest.mark.slow  # two runs of the program
def test_a_target_the_project_states_moves_the_program_verify_runs(tmp_path):
    folder = _trn1_program(tmp_path)
    (folder / "pyproject.toml").write_text('[tool.neuron-migrate]\ntargets = { "./" = "trn2" }\n')
    before = (folder / "train.py").read_bytes()
    proc = cli("verify", "--format", "json", "train.py", "--max-steps", "2", cwd=folder)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["verdict"] == "equivalent"
    assert report["migration"]["changed"] == ["train.py"]
    assert (folder / "train.py").read_bytes() == before  # the copy moved, not the user's file
