"""`neuron-migrate verify`: the emulated device, the comparison, and whole runs of legacy programs.

The end-to-end cases migrate a legacy torch_xla program and compare it with the CPU reference; the wrong
migrations (a changed learning rate, a dropped optimizer step, a dropped gradient all-reduce in a 2-process
program) must come out NOT equivalent with exit 1. The torch_xla reference runs when NEURON_MIGRATE_XLA_PYTHON
names an interpreter with torch_xla (for example a venv with torch==2.9.0 torch_xla==2.9.0).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli, rewrite_text

DATA = ROOT / "tests" / "data" / "verify"
EXAMPLE = ROOT / "examples" / "xla_mnist"  # the bundled legacy example
DP_EXAMPLE = ROOT / "examples" / "xla_mnist_dp"  # its data-parallel variant (xmp.spawn)
DDP_WRAP = "ddp_model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)"
XLA_PYTHON = os.environ.get("NEURON_MIGRATE_XLA_PYTHON")


def verify(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = cli("verify", "--format", "json", *args, cwd=cwd)
    assert proc.stdout, proc.stderr
    return proc, json.loads(proc.stdout)


def failed(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["comparison"]["checks"] if not c["ok"]}


def migration(source: Path, tmp_path: Path, **changes: str) -> Path:
    """The engine's migration of `source` with deliberate changes, beside copies of its sibling files."""
    migrated = rewrite_text(source.read_text())
    for old, new in changes.get("replace", {}).items():
        assert old in migrated, f"{old!r} not in the migration of {source.name}:\n{migrated}"
        migrated = migrated.replace(old, new)
    shutil.copytree(source.parent, tmp_path / "migrated")
    out = tmp_path / "migrated" / source.name
    out.write_text(migrated)
    return out


@pytest.mark.needs_torch
@pytest.mark.slow
def test_emulated_device_runs_like_a_device():
    for mode in ("", "strict"):
        proc = subprocess.run([sys.executable, str(DATA / "device_checks.py"), mode], capture_output=True, text=True,
                              cwd=ROOT, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "device checks passed" in proc.stdout


@pytest.mark.needs_torch
@pytest.mark.slow  # two runs of the example: CI runs it with the slow part
def test_bundled_example_is_equivalent_on_the_emulated_device():
    before = {p.name: p.read_bytes() for p in EXAMPLE.iterdir()}
    proc, report = verify("train.py", "--", "--steps", "3", cwd=EXAMPLE)
    assert {p.name: p.read_bytes() for p in EXAMPLE.iterdir()} == before  # a copy was migrated
    assert proc.returncode == 0, proc.stdout
    assert report["verdict"] == "equivalent"
    assert report["migration"]["changed"] == ["examples/xla_mnist/train.py"]  # only the program, of the whole project
    reference, target = report["runs"]
    assert (reference["device"], target["device"]) == ("cpu", "emulated")
    assert reference["steps"] == target["steps"] == 3
    assert len(target["losses"]) == 3 and target["losses"] == reference["losses"]
    # the migration compiles the model: once for training, once more for evaluation (no_grad, eval mode)
    assert [c["name"].split(" (")[0] for c in target["compilations"]] == ["forward", "forward"]
    assert target["first_step_seconds"] > target["compilations"][0]["seconds"]  # the first step compiles
    checks = {c["name"]: c for c in report["comparison"]["checks"]}
    assert set(checks) == {"loss curve", "final parameters", "module outputs (16 calls)",  # 512 / 32 batches
                           "dtypes", "parameters updated", "device residency"}
    assert all(c["ok"] and c.get("max_abs", 0) == 0 for c in checks.values())  # the emulated device computes like the CPU
    assert checks["device residency"]["detail"].startswith("parameters on neuron; losses on neuron")
    assert report["fallbacks"] == []


@pytest.mark.needs_torch
@pytest.mark.slow
def test_inference_program_compares_outputs_and_stops_after_n_calls():
    proc, report = verify("predict.py", "--max-steps", "3", cwd=DATA / "infer")
    assert proc.returncode == 0, proc.stdout
    checks = {c["name"]: c for c in report["comparison"]["checks"]}
    assert set(checks) == {"final parameters", "module outputs (3 calls)", "dtypes", "device residency"}
    assert checks["module outputs (3 calls)"]["count"] == 3 * (4 * 2 + 4)  # logits and norms of 3 batches
    assert [r["forward_calls"] for r in report["runs"]] == [3, 3]


@pytest.mark.needs_torch
@pytest.mark.slow
def test_changed_learning_rate_is_caught(tmp_path):
    wrong = migration(EXAMPLE / "train.py", tmp_path, replace={"lr=args.lr,": "lr=args.lr * 2,"})
    proc = cli("verify", "train.py", "--migrated", str(wrong), "--max-steps", "4", "--format", "markdown",
               cwd=EXAMPLE)
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.startswith("### ❌ neuron-migrate verify: `train.py` is NOT equivalent")
    loss_row = next(line for line in proc.stdout.splitlines() if line.startswith("| loss curve |"))
    assert "**FAIL**" in loss_row and "first differs at loss 2" in loss_row
    assert "| final parameters | **FAIL** |" in proc.stdout


@pytest.mark.needs_torch
@pytest.mark.slow
def test_dropped_optimizer_step_is_caught(tmp_path):
    wrong = migration(DATA / "mlp" / "train.py", tmp_path, replace={"        optimizer.step()\n": ""})
    proc = cli("verify", "train.py", "--migrated", str(wrong), "--max-steps", "3", "--", "--steps", "5",
               cwd=DATA / "mlp")
    assert proc.returncode == 1, proc.stdout
    assert "NOT equivalent" in proc.stdout.splitlines()[0]
    assert "FAIL optimizer steps" in proc.stdout and "reference took 3 optimizer steps, target 0" in proc.stdout
    # svdvals at step 0 is a known CPU fallback; the prediction counts it
    assert "CPU fallbacks (predicted" in proc.stdout and "aten::_linalg_svd x1" in proc.stdout


@pytest.mark.needs_torch
@pytest.mark.slow
def test_two_process_program_on_the_emulated_device(tmp_path):
    proc, report = verify("train.py", "--nproc", "2", "--max-steps", "3", "--", "--epochs", "1",
                          "--checkpoint", str(tmp_path / "mnist_dp.pt"), cwd=DP_EXAMPLE)
    assert proc.returncode == 0, proc.stdout
    assert [r["processes"] for r in report["runs"]] == [2, 2]  # torchrun started both ranks in each run
    checks = {c["name"]: c for c in report["comparison"]["checks"]}
    assert set(checks) == {f"rank {r}: {what}" for r in (0, 1) for what in (
        "loss curve", "final parameters", "dtypes", "parameters updated", "device residency")}
    assert all(c["ok"] and c.get("max_abs", 0) == 0 for c in checks.values())


@pytest.mark.needs_torch
@pytest.mark.slow
def test_dropped_gradient_all_reduce_is_caught(tmp_path):
    wrong = migration(DP_EXAMPLE / "train.py", tmp_path, replace={DDP_WRAP: "ddp_model = model"})
    proc, report = verify("train.py", "--nproc", "2", "--migrated", str(wrong), "--max-steps", "3", "--",
                          "--epochs", "1", "--checkpoint", str(tmp_path / "mnist_dp.pt"), cwd=DP_EXAMPLE)
    assert proc.returncode == 1, proc.stdout
    bad = failed(report)
    # the first step is the same everywhere; after it, each rank follows its own gradients
    assert {"rank 0: final parameters", "rank 1: final parameters"} <= set(bad)
    assert bad["rank 1: loss curve"]["detail"].startswith("first differs at loss 2")


@pytest.mark.needs_torch
@pytest.mark.slow
def test_failing_run_exits_2_with_its_traceback(tmp_path):
    broken = migration(DATA / "mlp" / "train.py", tmp_path, replace={"model = MLP()": "model = MLP(hidden=3)"})
    proc = cli("verify", "train.py", "--migrated", str(broken), "--max-steps", "1", cwd=DATA / "mlp")
    assert proc.returncode == 2
    assert "The target run failed" in proc.stdout and "TypeError" in proc.stdout
    assert "sitecustomize" not in proc.stdout + proc.stderr  # the harness's start-up leaves no noise


@pytest.mark.needs_torch
def test_quickstart_device_check():
    proc = cli("verify", "--quickstart", "--target", "emulated", cwd=DATA)
    assert proc.returncode == 0, proc.stderr
    assert "emulated `neuron` device: a matrix product on `neuron` matches the CPU (max error 0)" in proc.stdout


@pytest.mark.needs_torch
def test_bad_input_is_refused():
    proc = cli("verify", "no_such_script.py", cwd=DATA)
    assert proc.returncode == 2 and "no_such_script.py: error: no such script" in proc.stderr
    proc = cli("verify", "train.py", "--reference-python", sys.executable, cwd=DATA / "mlp")
    assert proc.returncode == 2 and "cannot import torch and torch_xla" in proc.stderr


@pytest.mark.skipif(not XLA_PYTHON, reason="set NEURON_MIGRATE_XLA_PYTHON to an interpreter with torch_xla "
                                           "(pip install torch==2.9.0 torch_xla==2.9.0) to run the torch_xla reference")
@pytest.mark.needs_torch
@pytest.mark.slow
def test_original_under_torch_xla_verifies_against_its_migration():
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--max-steps", "5", cwd=EXAMPLE)
    assert proc.returncode == 0, proc.stdout
    reference, cpu, target = report["runs"]
    assert (reference["device"], cpu["device"], target["device"]) == ("xla", "cpu", "emulated")
    loss = next(c for c in report["comparison"]["checks"] if c["name"] == "loss curve")
    assert loss["count"] == 5 and loss["max_abs"] < 1e-5


BLOCK_TORCH = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTorch())
from neuron_migrate.cli import main
sys.argv = ["neuron-migrate", *sys.argv[1:]]
main()
"""


def test_verify_without_torch_says_how_to_install():
    proc = subprocess.run([sys.executable, "-c", BLOCK_TORCH, "verify", "train.py"], capture_output=True, text=True,
                          cwd=DATA / "mlp", timeout=120)
    assert proc.returncode == 2  # an environment error, not "not equivalent"
    assert 'pip install "neuron-migrate[verify]"' in proc.stderr


def test_cli_and_verify_command_import_no_torch():
    code = ("import sys, neuron_migrate.cli, neuron_migrate.verify.command; "
            "from neuron_migrate.cli import main; assert 'torch' not in sys.modules, 'torch was imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
