"""`verify` gives a verdict only on evidence: printed numbers when nothing else was recorded, dtypes, where the
model lived, whether it trained; each run in its own folder, a spawn program as one torchrun worker; the
emulated device against the CPU operator by operator. Every check has a sabotaged migration it must catch.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT, cli
from tests.test_verify import DATA, DP_EXAMPLE, failed, migration, verify

pytestmark = pytest.mark.needs_torch  # verify runs programs with PyTorch

EXAMPLES = ROOT / "examples"


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["comparison"]["checks"]}


def test_emulator_matches_the_cpu_over_a_table_of_operators():
    proc = subprocess.run([sys.executable, str(DATA / "op_table.py")], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line]
    assert proc.returncode == 0, "\n".join(lines) + proc.stderr[-2000:]
    assert lines[-1].endswith("operators compared") and int(lines[-1].split()[0]) >= 60


@pytest.mark.slow
def test_a_program_that_only_prints_is_compared_by_its_printed_numbers(tmp_path):
    folder = EXAMPLES / "xla_tutorial"
    proc, report = verify("tutorial.py", cwd=folder)
    assert proc.returncode == 0, proc.stdout
    printed = {k: v for k, v in checks(report).items() if k.startswith("printed")}
    assert list(printed) == ["printed numbers (6 lines)"]  # nothing else was recorded
    check = printed["printed numbers (6 lines)"]
    assert check["ok"] and check["count"] == 15  # every printed number but the time-free device name
    # a migration that computes something else prints other numbers
    wrong = migration(folder / "tutorial.py", tmp_path, replace={"torch.linspace(-2, 2, 9,": "torch.linspace(-2, 2, 7,"})
    proc, report = verify("tutorial.py", "--migrated", str(wrong), cwd=folder)
    assert proc.returncode == 1, proc.stdout
    bad = failed(report)["printed numbers (6 lines)"]
    assert bad["detail"].startswith("line 4: reference 'softplus mean")


@pytest.mark.slow
def test_nothing_comparable_is_its_own_outcome(tmp_path):
    proc = cli("verify", "job.py", "--", str(tmp_path / "scores.pt"), cwd=DATA / "silent")
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout.startswith("neuron-migrate verify job.py: nothing comparable")
    assert "print the values to compare" in proc.stdout


@pytest.mark.slow
def test_a_changed_autocast_dtype_is_caught(tmp_path):
    folder = EXAMPLES / "xla_bf16_autocast"
    wrong = migration(folder / "train.py", tmp_path, replace={"dtype=torch.bfloat16": "dtype=torch.float16"})
    proc, report = verify("train.py", "--migrated", str(wrong), "--max-steps", "3", cwd=folder)
    assert proc.returncode == 1, proc.stdout
    bad = failed(report)
    assert "module outputs: reference bfloat16, target float16" in bad["dtypes"]["detail"]


@pytest.mark.slow
def test_a_model_left_on_the_cpu_is_caught(tmp_path):
    wrong = migration(DATA / "mlp" / "train.py", tmp_path, replace={'torch.device("neuron")': 'torch.device("cpu")'})
    proc, report = verify("train.py", "--migrated", str(wrong), "--max-steps", "2", cwd=DATA / "mlp")
    assert proc.returncode == 1, proc.stdout
    bad = failed(report)
    assert "loss curve" not in bad  # the numbers agree: the CPU reference ran the same code
    assert "target 0" in bad["final parameters"]["detail"]  # no module moved to a device
    assert "the model never reached the `neuron` device" in bad["device residency"]["detail"]


@pytest.mark.slow
def test_an_optimizer_that_updates_nothing_is_caught(tmp_path):
    wrong = migration(DATA / "mlp" / "train.py", tmp_path,
                      replace={"torch.optim.SGD(model.parameters(),": "torch.optim.SGD(MLP().parameters(),"})
    proc, report = verify("train.py", "--migrated", str(wrong), "--max-steps", "3", cwd=DATA / "mlp")
    assert proc.returncode == 1, proc.stdout
    assert "did not change in the target while the reference's did" in failed(report)["parameters updated"]["detail"]


@pytest.mark.slow
def test_each_run_has_its_own_working_folder():
    folder = DATA / "stateful"
    before = sorted(p.name for p in folder.iterdir())
    proc, report = verify("resume.py", cwd=folder)
    assert proc.returncode == 0, proc.stdout  # both runs start fresh: neither resumes from the other's state.pt
    assert checks(report)["printed numbers (1 line)"]["ok"]
    assert sorted(p.name for p in folder.iterdir()) == before  # and the user's folder is untouched


@pytest.mark.slow
def test_a_spawn_program_runs_as_one_torchrun_worker(tmp_path):
    proc, report = verify("train.py", "--max-steps", "2", "--", "--epochs", "1", "--batch-size", "32",
                          "--checkpoint", str(tmp_path / "ckpt.pt"), cwd=DP_EXAMPLE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [(r["nproc"], r["processes"]) for r in report["runs"]] == [(1, 1), (1, 1)]
    assert checks(report)["loss curve"]["count"] == 2


def test_recompile_reasons_are_named_with_their_own_hint():
    from neuron_migrate.verify.report import Recompile, _kinds, _shape_change

    grad = Recompile("forward", [[[32, 784]], [[32, 784]]], ["1/0: GLOBAL_STATE changed: grad_mode"])
    assert _kinds(grad) == {"grad mode"} and _shape_change(grad) == "grad mode: 1/0: GLOBAL_STATE changed: grad_mode"
    shape = Recompile("forward", [[[32, 784]], [[17, 784]]], ["0/0: tensor 'x' size mismatch at index 0"])
    assert _kinds(shape) == {"shape"} and _shape_change(shape) == "(32, 784) -> (17, 784)"
    dtype = Recompile("forward", [[[4]], [[4]]], ["0/0: tensor 'x' dtype mismatch. expected Float, actual BFloat16"])
    assert _kinds(dtype) == {"dtype"}


@pytest.mark.slow
def test_ranks_printing_at_their_own_pace_are_compared_rank_by_rank():
    """Two ranks print into one launcher: in one pipe their lines interleave in no fixed order, and the same
    numbers read as a mismatch. Each rank's output is kept apart and compared in rank order."""
    for _ in range(2):  # the ranks sleep at random: an order-dependent comparison fails one run in two
        proc, report = verify("report.py", "--nproc", "2", cwd=DATA / "rank_prints")
        assert proc.returncode == 0, proc.stdout
        check = checks(report)["printed numbers (8 lines)"]
        assert check["ok"] and check["count"] == 24, check
