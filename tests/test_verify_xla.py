"""Every bundled legacy example against the original under torch_xla (optional: NEURON_MIGRATE_XLA_PYTHON names an
interpreter with torch==2.9.0 torch_xla==2.9.0; PJRT_DEVICE=CPU, single process).

Each example is verified the three ways at once: the original under torch_xla (one process), the migration on
the plain CPU (the three-way comparison), the migration on the emulated device as one process and as two
(`--nproc 2`: rank 0 against the reference, and both ranks agree). They run with the exact commands of
docs/verify.md, through a regular (non-editable) install of the tool.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest

from tests.helpers import ROOT
from tests.test_verify import DATA, XLA_PYTHON, failed, migration, verify
from tests.test_verify_install import installed, run_installed  # noqa: F401 (a fixture)

needs_xla = pytest.mark.skipif(not XLA_PYTHON, reason="set NEURON_MIGRATE_XLA_PYTHON to an interpreter with "
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
    "neuronx_trace_infer": ("infer.py",),  # the reference gets the stand-in torch_neuronx (see below)
}
DOCS = ROOT / "docs" / "verify.md"
REFERENCE = ("--reference-python", "$X", "--nproc", "2")
STANDIN_ENV = ("--reference-env", "PYTHONPATH=$PWD/../../tests/data/verify/neuronx_standin")


def documented_commands() -> dict[str, list[str]]:
    """docs/verify.md's commands for the bundled examples: example -> verify's arguments (`$X`: the torch_xla
    interpreter, `$PWD`: the example's folder, left as written)."""
    section = DOCS.read_text().split("## The bundled examples against torch_xla", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    found = {}
    for line in block.splitlines():
        match = re.fullmatch(r"\(cd examples/(\w+) && neuron-migrate verify (.+)\)", line.strip())
        if match:
            found[match.group(1)] = shlex.split(match.group(2))
    return found


def has_torch_neuronx(python: str) -> bool:
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch_neuronx') is None)"
    return subprocess.run([python, "-c", probe], capture_output=True, timeout=120, check=False).returncode == 0


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["comparison"]["checks"]}


def test_the_documented_commands_are_the_tested_ones():
    documented = documented_commands()
    assert sorted(documented) == sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()) == sorted(CASES)
    for example, args in documented.items():
        script, *rest = args
        assert tuple(rest[:len(REFERENCE)]) == REFERENCE, (example, args)
        rest = rest[len(REFERENCE):]
        if example == "neuronx_trace_infer":
            assert tuple(rest[:2]) == STANDIN_ENV
            rest = rest[2:]
        assert (script, *rest) == CASES[example]


@needs_xla
@pytest.mark.parametrize("example", sorted(CASES))
def test_example_verifies_against_torch_xla_single_and_two_processes(example, installed):  # noqa: F811
    folder = EXAMPLES / example
    args = [a.replace("$X", XLA_PYTHON).replace("$PWD", str(folder)) for a in documented_commands()[example]]
    if example == "neuronx_trace_infer" and has_torch_neuronx(XLA_PYTHON):
        del args[args.index("--reference-env"):args.index("--reference-env") + 2]  # the real one traces
    proc, report = run_installed(installed, *args, cwd=folder)
    assert proc.returncode == 0, proc.stdout
    assert [(r["name"], r["device"], r["processes"]) for r in report["runs"]] == [
        ("reference", "xla", 1), ("cpu", "cpu", 1), ("target", "emulated", 1), ("target x2", "emulated", 2)]
    found = checks(report)
    if example == "neuronx_trace_infer":  # the model and its inputs reached the device; the printed numbers agree
        assert found["device residency"]["ok"] and found["printed numbers (4 lines)"]["ok"]
    if found.get("final parameters", {}).get("count"):  # the reference moved a model: it is compared rank by rank
        assert found["2 processes, rank 0: final parameters"]["count"] == found["final parameters"]["count"]
    if "final parameters" in found:  # the two-process run holds one model
        assert found["2 processes: ranks agree on the final parameters"]["ok"]


@needs_xla
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


@needs_xla
def test_max_steps_reached_inside_torch_xla_compile_stops_once_the_step_has_run():
    """The step hook fires inside the function torch_xla.compile(full_graph=True) traces, where reading a loss
    fails ("Unexpected execution happens inside the compiled function"): the reference stops once it returns, after
    the same number of steps as the migration."""
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--max-steps", "3", "--skip-no-neuron",
                          "--", "--steps", "10", cwd=EXAMPLES / "xla_compile_step")
    assert proc.returncode == 0, proc.stdout
    assert checks(report)["loss curve"]["ok"] and checks(report)["loss curve"]["count"] == 3, checks(report)


@needs_xla
def test_traced_inference_left_on_the_cpu_is_caught(tmp_path):
    """The migration NM501 made before it moved the model and its inputs: the printed numbers agree with torch_xla,
    but the device never ran the model, and verify says so."""
    folder = EXAMPLES / "neuronx_trace_infer"
    reference = ["--reference-python", XLA_PYTHON]
    if not has_torch_neuronx(XLA_PYTHON):
        reference += ["--reference-env", f"PYTHONPATH={STANDIN}"]
    left = migration(folder / "infer.py", tmp_path, replace={
        'model.to(torch.device("neuron"))': "model", 'traced(tokens.to(torch.device("neuron")))': "traced(tokens)"})
    proc, report = verify("infer.py", *reference, "--migrated", str(left), cwd=folder)
    assert proc.returncode == 1, proc.stdout
    assert set(failed(report)) == {"device residency"}
    assert checks(report)["printed numbers (4 lines)"]["ok"]


@needs_xla
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


@needs_xla
def test_three_way_names_the_bfloat16_accumulation_difference(tmp_path):
    """bfloat16 parameters and a mean squared error over 64 x 128 values: torch_xla 2.9 on the CPU reduces in
    bfloat16 (every loss comes out about a fifth lower), torch in float32; the target equals the plain CPU run
    and the two curves take the same course, so the verdict is equivalent with the difference named. Migrations
    that train differently (another learning rate, no optimizer step) are not excused by it."""
    folder = DATA / "bf16_mse"
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--skip-no-neuron", cwd=folder)
    assert proc.returncode == 0, proc.stdout
    found = checks(report)
    curve = found["loss curve"]
    assert not curve["ok"] and curve["explained"] == "bfloat16 accumulation", curve
    reference, cpu, target = report["runs"][:3]
    assert cpu["losses"] == target["losses"]  # the emulated device computes what torch eager does on the CPU
    assert abs(reference["losses"][0] - cpu["losses"][0]) > 0.1 * abs(cpu["losses"][0])
    assert cpu["losses"][-1] < 0.95 * cpu["losses"][0]  # it trains
    assert any("bfloat16 accumulation" in note for note in report["notes"])
    assert found["dtypes"]["ok"] and found["device residency"]["ok"]
    for change, failing in (({"lr=0.5": "lr=2.0"}, "loss curve"),
                            ({"        optimizer.step()\n": "        pass\n"}, "parameters updated")):
        wrong = migration(folder / "train.py", tmp_path / failing.replace(" ", "_"), replace=change)
        proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--migrated", str(wrong),
                              "--skip-no-neuron", cwd=folder)
        assert proc.returncode == 1, proc.stdout
        assert not checks(report)[failing]["ok"] and not checks(report)[failing].get("explained"), failing


TORCHRUN_PROGRAM = '''\
import torch
import torch.distributed
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401

torch.distributed.init_process_group("xla")  # launched with torchrun: RANK, WORLD_SIZE, MASTER_ADDR from it


def main():
    torch.manual_seed(0)
    device = xm.xla_device()
    model = torch.nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(8, 4).to(device)
        loss = model(x).pow(2).mean()
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        xm.master_print(f"step {step} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
'''


def test_the_torch_xla_reference_runs_as_one_torchrun_worker(tmp_path):
    """The reference of a program torchrun launches gets the variables of one worker, as the migrated runs do, and
    not TORCHELASTIC_RUN_ID (torch_xla would take itself for a torchrun launch and skip xmp.spawn's set-up)."""
    pytest.importorskip("torch", reason="verify's runs need PyTorch (the [verify] extra)")
    from neuron_migrate.verify.runs import Program, environment

    program = Program("reference", "original", "python", tmp_path / "train.py", "xla")
    env = environment(program, tmp_path, {})
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} == dict.fromkeys(
        ("RANK", "LOCAL_RANK"), "0") | dict.fromkeys(("WORLD_SIZE", "LOCAL_WORLD_SIZE"), "1")
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"].isdigit()
    assert "TORCHELASTIC_RUN_ID" not in env and env["PJRT_DEVICE"]
    # the run's own variables win, and its PYTHONPATH (torch_xla's torchvision) comes after the harness's folder
    own = Program("reference", "original", "python", tmp_path / "train.py", "xla",
                  env={"PYTHONPATH": "/opt/xla-extras", "LOCAL_RANK": "3"})
    env = environment(own, tmp_path / "harness", {})
    assert env["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "harness"), "/opt/xla-extras"])
    assert (env["LOCAL_RANK"], env["RANK"]) == ("3", "0")


@needs_xla
def test_a_program_torchrun_launches_verifies_against_torch_xla(tmp_path):
    (tmp_path / "train.py").write_text(TORCHRUN_PROGRAM)
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--skip-no-neuron", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert report["runs"][0]["returncode"] == 0 and checks(report)["loss curve"]["count"] == 3


@needs_xla
def test_ranks_that_draw_their_own_batches_are_compared_with_each_other_not_with_one_process(tmp_path):
    """A shuffling DistributedSampler gives each rank other batches than the single torch_xla process had: rank 0's
    parameters cannot equal the reference's, so they are not compared (a note says why); the single process is,
    and the ranks must still agree, which catches a migration that lost the gradient all-reduce."""
    folder = DATA / "shuffled_shards"
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--nproc", "2", "--max-steps", "4",
                          "--skip-no-neuron", cwd=folder)
    assert proc.returncode == 0, proc.stdout
    names = {c["name"] for c in report["comparison"]["checks"]}
    assert "final parameters" in names and "2 processes: ranks agree on the final parameters" in names, names
    assert not any(n.startswith("2 processes, rank 0") for n in names), names
    assert any("trained on other batches" in n for n in report["notes"]), report["notes"]
    wrong = migration(folder / "train.py", tmp_path, replace={
        "ddp_model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)": "ddp_model = model"})
    proc, report = verify("train.py", "--reference-python", XLA_PYTHON, "--nproc", "2", "--max-steps", "4",
                          "--skip-no-neuron", "--migrated", str(wrong), cwd=folder)
    assert proc.returncode == 1, proc.stdout
    assert not failed(report)["2 processes: ranks agree on the final parameters"]["ok"]
