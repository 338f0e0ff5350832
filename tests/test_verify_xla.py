"""Every bundled legacy example against the original under torch_xla (optional: NEURON_MIGRATE_XLA_PYTHON names an
interpreter with torch==2.9.0 torch_xla==2.9.0; PJRT_DEVICE=CPU, single process).

Each example is verified the three ways at once: the original under torch_xla (one process), the migration on
the plain CPU (the three-way comparison), the migration on the emulated device as one process and as two
(`--nproc 2`: rank 0 against the reference, and both ranks agree).
"""

from __future__ import annotations

import pytest

from tests.helpers import ROOT
from tests.test_verify import DATA, XLA_PYTHON, failed, migration, verify

pytestmark = pytest.mark.skipif(not XLA_PYTHON, reason="set NEURON_MIGRATE_XLA_PYTHON to an interpreter with "
                                                       "torch_xla (pip install torch==2.9.0 torch_xla==2.9.0)")
EXAMPLES = ROOT / "examples"
STANDIN = DATA / "neuronx_standin"  # torch_neuronx.trace for a torch_xla environment without Neuron
CASES = {
    "xla_mnist": ("train.py", "--max-steps", "5"),
    "xla_mnist_dp": ("train.py", "--max-steps", "3", "--", "--epochs", "1", "--batch-size", "32"),
    "xla_bn_cnn": ("train.py", "--", "--steps", "10"),
    "xla_bf16_autocast": ("train.py", "--", "--steps", "10"),
    "xla_compile_step": ("train.py", "--", "--steps", "10"),
    "xla_tutorial": ("tutorial.py",),
}


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["comparison"]["checks"]}


@pytest.mark.parametrize("example", sorted(CASES))
def test_example_verifies_against_torch_xla_single_and_two_processes(example):
    script, *args = CASES[example]
    proc, report = verify(script, "--reference-python", XLA_PYTHON, "--nproc", "2", *args, cwd=EXAMPLES / example)
    assert proc.returncode == 0, proc.stdout
    assert [(r["name"], r["device"], r["processes"]) for r in report["runs"]] == [
        ("reference", "xla", 1), ("cpu", "cpu", 1), ("target", "emulated", 1), ("target x2", "emulated", 2)]
    found = checks(report)
    if "final parameters" in found:  # a training example: the two-process run holds one model
        assert found["2 processes, rank 0: final parameters"]["count"] == found["final parameters"]["count"]
        assert found["2 processes: ranks agree on the final parameters"]["ok"]


def test_batchnorm_with_a_small_batch_verifies_and_a_wrong_migration_does_not(tmp_path):
    folder = EXAMPLES / "xla_bn_cnn"
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--", "--steps", "6", "--batch-size", "2",
                          cwd=folder)
    assert proc.returncode == 0, proc.stdout
    # whatever differs from torch_xla here must be the known BatchNorm difference (at the default tolerances
    # this example has shown none: the three-way verdict itself is tested on records in test_verify_compare.py)
    for check in report["comparison"]["checks"]:
        assert check["ok"] or check.get("explained") == "BatchNorm running variance", check
    # a migration that differs from the plain CPU run too is not excused by it
    wrong = migration(folder / "train.py", tmp_path, replace={"momentum=0.9,": "momentum=0.8,"})
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--migrated", str(wrong), "--", "--steps",
                          "6", "--batch-size", "2", cwd=folder)
    assert proc.returncode == 1, proc.stdout


def test_traced_inference_left_on_the_cpu_is_caught_and_its_fix_verifies(tmp_path):
    folder = EXAMPLES / "neuronx_trace_infer"
    reference = ("--reference-python", XLA_PYTHON, "--reference-env", f"PYTHONPATH={STANDIN}")
    proc, report = verify("infer.py", *reference, cwd=folder)
    # the tool's migration compiles the model where torch_neuronx.trace was, but leaves it and its inputs on
    # the CPU: the printed numbers agree, the device never ran anything
    assert proc.returncode == 1, proc.stdout
    assert set(failed(report)) == {"device residency"}
    fixed = migration(folder / "infer.py", tmp_path, replace={
        "torch.compile(model, ": 'torch.compile(model.to("neuron"), ',
        "logits = traced(tokens)": 'logits = traced(tokens.to("neuron"))'})
    proc, report = verify("infer.py", *reference, "--migrated", str(fixed), "--nproc", "2", cwd=folder)
    assert proc.returncode == 0, proc.stdout
    assert checks(report)["printed numbers (4 lines)"]["ok"]


def test_three_way_names_the_batchnorm_difference_and_does_not_excuse_a_wrong_migration(tmp_path):
    """4 samples a batch: torch_xla's running variance (biased) is 3/4 of torch's; the target equals the plain
    CPU run, so the verdict is equivalent with the difference named; a wrong migration stays NOT equivalent."""
    folder = DATA / "bn1d"
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, cwd=folder)
    assert proc.returncode == 0, proc.stdout
    found = checks(report)
    assert not found["final parameters"]["ok"] and found["final parameters"]["explained"] == "BatchNorm running variance"
    assert found["final parameters"]["differing"] == ["norm.running_var"]
    assert found["module outputs (1 call)"]["explained"] == "BatchNorm running variance"
    assert found["loss curve"]["ok"] and report["no_neuron"]["ok"]
    wrong = migration(folder / "train.py", tmp_path, replace={"nn.BatchNorm1d(hidden)": "nn.BatchNorm1d(hidden, momentum=0.2)"})
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--migrated", str(wrong), "--skip-no-neuron",
                          cwd=folder)
    assert proc.returncode == 1, proc.stdout
    params = checks(report)["final parameters"]  # the running mean differs too: not the known difference
    assert not params["ok"] and "explained" not in params and "norm.running_mean" in params["differing"]
