"""`verify` checks the other path: where no Neuron device exists (plain CPU PyTorch, no emulator, no
`torch.neuron`), the migration must do what the original does without torch_xla: run the same fallback and
compute the same thing, or stop for want of its device before computing anything. A migration that crashes
there, or takes another path, fails verification.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.test_verify import DATA, failed, migration, verify

pytestmark = pytest.mark.needs_torch  # verify runs programs with PyTorch

EXAMPLES = ROOT / "examples"
FALLBACK = DATA / "fallback"  # a program that runs on XLA, else on CUDA, else on the CPU
FALLBACK_MIGRATED = DATA / "fallback_migrated" / "train.py"  # its migration by hand, the fallback kept
# every bundled example, as short as it runs
EXAMPLE_RUNS = {
    "xla_mnist": ("train.py", "--max-steps", "2", "--", "--steps", "2"),
    "xla_mnist_dp": ("train.py", "--max-steps", "2", "--", "--epochs", "1", "--batch-size", "32"),
    "xla_bn_cnn": ("train.py", "--max-steps", "2", "--", "--steps", "2"),
    "xla_bf16_autocast": ("train.py", "--max-steps", "2", "--", "--steps", "2"),
    "xla_compile_step": ("train.py", "--max-steps", "2", "--", "--steps", "2"),
    "xla_tutorial": ("tutorial.py",),
    "neuronx_trace_infer": ("infer.py", "--", "--batches", "2"),
}


def no_neuron(report: dict) -> dict:
    path = report["no_neuron"]
    assert [r["device"] for r in path["runs"]] == ["plain", "plain"]
    return path


def test_every_bundled_example_is_in_the_table():
    assert sorted(EXAMPLE_RUNS) == sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("example", sorted(EXAMPLE_RUNS))
@pytest.mark.slow
def test_bundled_example_on_both_paths(example, tmp_path):
    script, *args = EXAMPLE_RUNS[example]
    proc, report = verify(script, *args, cwd=EXAMPLES / example)
    assert not failed(report) and proc.returncode == 0, proc.stdout
    path = no_neuron(report)
    assert path["ok"] and path["same_path"], proc.stdout
    # each example needs its device: the original stops at its torch_xla / torch_neuronx import, the migration
    # where it first needs Neuron, and neither computed anything
    original, migrated = path["runs"]
    assert original["stopped_on"]["type"] == "ModuleNotFoundError"
    assert original["stopped_on"]["module"].split(".")[0] in ("torch_xla", "torch_neuronx")
    assert "neuron" in migrated["stopped_on"]["message"] + (migrated["stopped_on"]["module"] or "")
    assert original["progress"] == migrated["progress"] == {"step_times": 0, "losses": 0, "call_times": 0}
    assert path["summary"] == "same path: neither runs without its device"


@pytest.mark.slow
def test_a_kept_fallback_runs_the_same_path_and_computes_the_same():
    proc, report = verify("train.py", "--migrated", str(FALLBACK_MIGRATED), "--max-steps", "4", cwd=FALLBACK)
    assert proc.returncode == 0, proc.stdout
    path = no_neuron(report)
    assert path["ok"] and path["summary"].startswith("same path, same results")
    for run in path["runs"]:  # both took the CPU branch and trained there
        assert run["ran"] and run["stopped_on"] is None
        assert run["devices"] == {"moved_to": ["cpu"], "param_devices": ["cpu"], "loss_devices": ["cpu"],
                                  "call_devices": ["cpu"]}
        assert run["progress"]["step_times"] == 4
    checks = {c["name"]: c for c in path["checks"]}
    assert checks["loss curve"]["ok"] and checks["loss curve"]["count"] == 4
    assert checks["final parameters"]["ok"] and checks["final parameters"]["max_abs"] == 0


@pytest.mark.slow
def test_a_lost_fallback_fails_although_the_neuron_path_is_equivalent(tmp_path):
    # issue 14's rewrite: the CUDA branch's availability test turned into an unguarded `torch.neuron` call
    source = FALLBACK_MIGRATED.read_text()
    wrong = tmp_path / "train.py"
    wrong.write_text(source.replace('hasattr(torch, "neuron") and torch.neuron.is_available()',
                                    "torch.neuron.is_available()"))
    proc, report = verify("train.py", "--migrated", str(wrong), "--max-steps", "2", cwd=FALLBACK)
    assert all(c["ok"] for c in report["comparison"]["checks"])  # on the (emulated) device it is right
    assert proc.returncode == 1 and report["verdict"] == "NOT equivalent", proc.stdout
    path = no_neuron(report)
    assert not path["ok"] and path["summary"].startswith("another path: the migration stops where the original runs")
    original, migrated = path["runs"]
    assert original["ran"] and original["progress"]["step_times"] == 2
    assert migrated["stopped_on"]["type"] == "AttributeError" and migrated["stopped_on"]["where"] == "train.py:10"


@pytest.mark.slow
def test_a_migration_that_computes_where_the_original_stops_and_then_stops_fails(tmp_path):
    # the original needs torch_xla; a migration that falls back to the CPU, trains there and then stops at its
    # first `neuron` call (the compile backend) takes another path
    wrong = migration(DATA / "mlp" / "train.py", tmp_path,
                      replace={'torch.device("neuron")': 'torch.device("neuron" if hasattr(torch, "neuron") else "cpu")'})
    proc, report = verify("train.py", "--migrated", str(wrong), "--max-steps", "2", cwd=DATA / "mlp")
    assert all(c["ok"] for c in report["comparison"]["checks"])
    assert proc.returncode == 1, proc.stdout
    path = no_neuron(report)
    # the migration trains on the CPU (and stops later, at the first call that needs Neuron)
    assert path["summary"].startswith("another path:"), path["summary"]
    assert "moved tensors to: original none, migration cpu" in path["summary"]
    assert path["runs"][1]["devices"]["param_devices"] == ["cpu"]


# -- the comparison itself, on records ---------------------------------------------------------------------------
def _run(role: str, returncode: int = 0, error: dict | None = None, stdout: str = "", device: str = "plain",
         **record):
    from neuron_migrate.verify.runs import Program, RunResult

    base = {"meta": {"rank": 0, "torch": "2.13.0"}, "losses": [], "step_times": [], "call_times": [], "modules": [], "params": [],
            "outputs": [], "error": error}
    base.update(record)
    program = Program(role, role, "python", Path("train.py"), device)
    return RunResult(program, returncode, 1.0, "", [base], stdout=stdout)


def test_the_same_values_on_another_device_are_another_path():
    from neuron_migrate.verify.paths import compare_no_neuron

    original = _run("plain original", param_devices=["cpu"], moved_to=["cpu"], losses=[1.0], step_times=[0.1])
    migrated = _run("plain migration", param_devices=["cuda"], moved_to=["cuda"], losses=[1.0], step_times=[0.1])
    check = compare_no_neuron(original, migrated)
    assert not check.ok and not check.same_path
    assert "moved tensors to: original cpu, migration cuda" in check.detail
    assert compare_no_neuron(original, _run("plain migration", param_devices=["cpu"], moved_to=["cpu"],
                                            losses=[1.0], step_times=[0.1])).ok


def test_a_migration_that_trains_before_it_stops_is_another_path():
    from neuron_migrate.verify.paths import compare_no_neuron

    xla = {"type": "ModuleNotFoundError", "message": "No module named 'torch_xla'", "module": "torch_xla",
           "where": "train.py:3", "line": "import torch_xla"}
    late = {"type": "RuntimeError", "message": "Expected one of cpu, ... device string: neuron", "module": None,
            "where": "train.py:40", "line": "torch.neuron.synchronize()"}
    check = compare_no_neuron(_run("plain original", 1, xla),
                              _run("plain migration", 1, late, losses=[1.0, 0.9], step_times=[0.1, 0.1]))
    assert not check.ok and "optimizer steps: original 0, migration 2" in check.detail
    same = compare_no_neuron(_run("plain original", 1, xla), _run("plain migration", 1, late))
    assert same.ok and same.notes == []
    # a stop that does not name Neuron is the same path, with a note to read it
    other = dict(late, message="list index out of range", type="IndexError")
    assert compare_no_neuron(_run("plain original", 1, xla), _run("plain migration", 1, other)).notes


def test_lines_the_migration_prints_past_the_originals_missing_import_are_no_difference():
    from neuron_migrate.verify.paths import compare_no_neuron

    xla = {"type": "ModuleNotFoundError", "message": "No module named 'torch_xla'", "module": "torch_xla",
           "where": "train.py:1", "line": "from torch_xla import runtime as xr"}
    late = {"type": "RuntimeError", "message": "Expected one of cpu, ... device string: neuron", "module": None,
            "where": "train.py:40", "line": "device = torch.device('neuron')"}
    # the original stopped at its first line; the migration printed its flags before it needed the device
    check = compare_no_neuron(_run("plain original", 1, xla),
                              _run("plain migration", 1, late, stdout="Namespace(batch_size=2, lr=0.1)\n"))
    assert check.ok, check.summary()
    # the lines both printed still compare
    printed = "epoch 1 lr 0.1\n"
    check = compare_no_neuron(_run("plain original", 1, xla, stdout=printed),
                              _run("plain migration", 1, late, stdout="epoch 1 lr 0.5\nNamespace()\n"))
    assert not check.ok and "line 1" in check.failed_checks[0].detail
    # an original that stopped elsewhere (not for want of torch_xla) prints what the migration prints
    other = dict(xla, type="IndexError", message="list index out of range", module=None)
    check = compare_no_neuron(_run("plain original", 1, other),
                              _run("plain migration", 1, late, stdout="Namespace(batch_size=2, lr=0.1)\n"))
    assert not check.ok and "the reference printed 0 lines, the target 1" in check.failed_checks[0].detail


def test_the_report_says_which_path_each_program_took():
    from neuron_migrate.verify.compare import Comparison
    from neuron_migrate.verify.paths import compare_no_neuron
    from neuron_migrate.verify.report import Report, render_markdown, render_text

    xla = {"type": "ModuleNotFoundError", "message": "No module named 'torch_xla'", "module": "torch_xla",
           "where": "train.py:8", "line": "import torch_xla.core.xla_model as xm"}
    lost = {"type": "AttributeError", "message": "module 'torch' has no attribute 'neuron'", "module": None,
            "where": "train.py:18", "line": "if torch.neuron.is_available():"}
    runs = [_run("reference", device="cpu", losses=[1.0]), _run("target", device="emulated", losses=[1.0])]
    report = Report("train.py", [], runs, None, comparison=Comparison(1e-4, 1e-5, "fp32"))
    report.no_neuron = compare_no_neuron(_run("plain original", 1, xla), _run("plain migration", 1, xla))
    text = render_text(report)
    assert "  ok   no Neuron (plain CPU PyTorch): same path: neither runs without its device" in text
    assert ("    original without torch_xla: stops at train.py:8 `import torch_xla.core.xla_model as xm` "
            "(ModuleNotFoundError: No module named 'torch_xla') (exit 1, 1.00 s)") in text
    report.no_neuron = compare_no_neuron(_run("plain original", param_devices=["cpu"], step_times=[0.1]),
                                         _run("plain migration", 1, lost))
    text = render_text(report)
    assert report.exit_code == 1 and text.startswith("neuron-migrate verify train.py: NOT equivalent")
    assert "  FAIL no Neuron (plain CPU PyTorch): another path: the migration stops where the original runs" in text
    assert ("    migration without Neuron:   stops at train.py:18 `if torch.neuron.is_available():` "
            "(AttributeError: module 'torch' has no attribute 'neuron')") in text
    assert "| no Neuron (plain CPU PyTorch) | **FAIL**: another path" in render_markdown(report)


def test_a_fallback_the_migration_adds_and_runs_to_the_end_is_reported_not_failed():
    from neuron_migrate.verify.paths import compare_no_neuron

    xla = {"type": "ModuleNotFoundError", "message": "No module named 'torch_xla'", "module": "torch_xla",
           "where": "train.py:3", "line": "import torch_xla"}
    check = compare_no_neuron(_run("plain original", 1, xla),
                              _run("plain migration", param_devices=["cpu"], losses=[1.0], step_times=[0.1]))
    assert check.ok and check.added and not check.same_path
    assert check.summary().startswith("a path added: the original stops for want of torch_xla")
    assert any("make it stop there" in note for note in check.notes)
