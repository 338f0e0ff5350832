"""Every launch path of a migrated data-parallel program runs and computes what one device computes.

tests/data/verify/launch_paths/train.py is a legacy torch_xla program with a torchrun path and an xmp.spawn
path, its optimizer stepped in a helper class (no world size in sight), metrics reduced with mesh_reduce,
rendezvous, all_reduce and all_gather, broadcast_master_param, and a tensor moved to the device beside the
model. Each rank trains on its slice of a global batch, so the averaged losses are the same for any number of
processes: `verify` runs it with --nproc 1 and --nproc 2 on the emulated device (on both paths), and a plain
`python train.py` (no torchrun, no process group) runs it as one process.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT, cli
from tests.test_distributed_example import LAUNCHER
from tests.test_verify import verify

pytest.importorskip("torch")

PROGRAM = ROOT / "tests" / "data" / "verify" / "launch_paths"
STEP = re.compile(r"^step (\d+) loss ([\d.]+)$", re.M)
RANK = re.compile(r"^rank (\d+) of (\d+): correct (\d+) steps (\d+)$", re.M)
ARGS = ("--steps", "3")
NUMPY = importlib.util.find_spec("numpy") is not None  # dist.all_gather_object (mesh_reduce's form) needs it


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The migration run as `python train.py` on the emulated device: none of torchrun's variables."""
    folder = tmp_path_factory.mktemp("launch_paths")
    shutil.copytree(PROGRAM, folder, dirs_exist_ok=True)
    assert cli("rewrite", "--unsafe-fixes", str(folder)).returncode == 0  # every fix: the program as it moves
    program = (folder / "train.py").read_text()
    assert "torch_xla" not in program and "TODO(neuron-migrate" not in program
    assert ".compile(" in program and "offset_dev.compile" not in program  # the model only, not the tensor
    (folder / "emulated.py").write_text(LAUNCHER)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    done = subprocess.run([sys.executable, "emulated.py", "train.py", *ARGS], cwd=folder, capture_output=True,
                          text=True, timeout=600, env={**env, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_plain_python_runs_as_one_process_without_a_process_group(plain):
    losses = [float(loss) for _, loss in STEP.findall(plain)]
    assert len(losses) == 3 and len(set(losses)) > 1
    (rank, world, correct, steps), = RANK.findall(plain)
    assert (rank, world, steps) == ("0", "1", "3") and int(correct) > 0


@pytest.mark.parametrize("nproc, path", [(1, ()), (1, ("--spawn",)), (2, ())],
                         ids=["1 process", "1 process, spawn path", "2 processes"])
@pytest.mark.slow
def test_every_launch_path_verifies_and_averages_like_one_device(plain, nproc, path):
    if nproc > 1 and not NUMPY:
        pytest.skip("mesh_reduce's native form (dist.all_gather_object) needs NumPy")
    proc, report = verify("train.py", "--nproc", str(nproc), "--", *ARGS, *path, cwd=PROGRAM)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["verdict"] == "equivalent"
    assert [r["processes"] for r in report["runs"]] == [nproc, nproc]
    if nproc == 1:  # the harness records rank 0's own loss: with one process, the one-device loss
        one = [float(loss) for _, loss in STEP.findall(plain)]
        assert all(run["losses"] == pytest.approx(one, rel=1e-5) for run in report["runs"])


@pytest.mark.skipif(not NUMPY, reason="mesh_reduce's native form (dist.all_gather_object) needs NumPy")
@pytest.mark.parametrize("path", [(), ("--spawn",)], ids=["torchrun path", "spawn path"])
@pytest.mark.slow
def test_two_processes_average_like_one_device(plain, tmp_path, path):
    """Each rank trains on half of every batch: with the gradients averaged, the mean loss of every step and the
    evaluation are those of one device; each rank is on its own device."""
    folder = tmp_path / "run"
    shutil.copytree(PROGRAM, folder)
    assert cli("rewrite", "--unsafe-fixes", str(folder)).returncode == 0  # every fix: the program as it moves
    (folder / "emulated.py").write_text(LAUNCHER)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               f"--log-dir={folder / 'logs'}", "--redirects=3", "emulated.py", "train.py", *ARGS, *path]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    logs = {log.parent.name: log.read_text() for log in (folder / "logs").glob("*/attempt_0/*/stdout.log")}
    assert done.returncode == 0, done.stderr[-3000:] + "".join(logs.values())
    assert sorted(logs) == ["0", "1"]
    one = [float(loss) for _, loss in STEP.findall(plain)]
    (_, _, correct, _), = RANK.findall(plain)
    for rank, out in logs.items():
        assert [float(loss) for _, loss in STEP.findall(out)] == pytest.approx(one, rel=1e-5)
        assert RANK.findall(out) == [(rank, "2", correct, "6")]
