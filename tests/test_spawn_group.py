"""A spawned program whose process group the legacy code made only on some paths, or not at all, runs migrated:
at 2 processes under torchrun without the flag that made the group, and as one process (`python train.py`) where
it builds ZeRO-1, which needs a group on one process too (NM202; pytorch/xla's test_train_mp_mnist and
test_train_mp_mnist_zero1). The programs run on the emulated `neuron` device (neuron_migrate.verify.emulator)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import rewrite_text
from tests.test_distributed_example import LAUNCHER, free_port

torch = pytest.importorskip("torch")

# The group only for DDP; the parameter broadcast, the step's averaging and the metric gather are torch_xla's.
GROUP_UNDER_FLAG = '''
import sys

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


def train(use_ddp):
    if use_ddp:
        dist.init_process_group("xla", init_method="xla://")
    device = xm.xla_device()
    torch.manual_seed(xr.global_ordinal())  # a different start on each rank: the broadcast makes them equal
    model = torch.nn.Linear(4, 1).to(device)
    xm.broadcast_master_param(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 4, device=device) * (xr.global_ordinal() + 1)).sum().backward()
    xm.optimizer_step(optimizer)
    weight = round(model.weight.detach().cpu().sum().item(), 4)
    weights = xm.mesh_reduce("weights", weight, list)
    print("rank", xr.global_ordinal(), "weights", weights, flush=True)


def _mp_fn(index, use_ddp):
    train(use_ddp)


if __name__ == "__main__":
    xmp.spawn(_mp_fn, args=("--ddp" in sys.argv,))
'''

ZERO1 = '''
import torch
import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer


def _mp_fn(index):
    device = xm.xla_device()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    model(torch.ones(2, 4, device=device)).sum().backward()
    optimizer.step()
    print("weight", round(model.weight.detach().cpu().sum().item(), 4), flush=True)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn)
'''


def test_group_under_flag_is_made_for_torchruns_processes_too():
    migrated = rewrite_text(GROUP_UNDER_FLAG)
    assert "if use_ddp or WORLD_SIZE > 1:" in migrated
    assert "torch_xla" not in migrated


def test_zero1_worker_gets_a_group_on_one_process():
    migrated = rewrite_text(ZERO1)
    assert "store=dist.HashStore(), rank=0, world_size=1" in migrated
    assert "if WORLD_SIZE > 1:\n        dist.init_process_group" not in migrated


def _run(folder, name: str, source: str, processes: int, *flags: str) -> str:
    program = folder / name
    program.write_text(rewrite_text(source))
    launcher = folder / "emulated.py"
    launcher.write_text(LAUNCHER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for variable in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(variable, None)
    if processes == 1:  # `python train.py`: none of torchrun's variables
        command = [sys.executable, str(launcher), str(program), *flags]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={processes}",
                   f"--master_port={free_port()}", "--tee=3", str(launcher), str(program), *flags]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow  # torchrun at 2 processes, and one process
@pytest.mark.parametrize("flags", [(), ("--ddp",)], ids=["without-ddp", "with-ddp"])
def test_group_under_flag_runs_at_two_processes(tmp_path, flags):
    out = _run(tmp_path, "train.py", GROUP_UNDER_FLAG, 2, *flags)
    found = dict(re.findall(r"rank (\d) weights (\[.*\])", out))
    assert sorted(found) == ["0", "1"], out
    weights = ast.literal_eval(found["0"])
    assert len(weights) == 2 and weights[0] == weights[1], out  # broadcast start, averaged gradients
    assert found["1"] == found["0"], out
    alone = _run(tmp_path, "train.py", GROUP_UNDER_FLAG, 1)
    assert re.search(r"rank 0 weights \[-?[\d.]+\]", alone), alone


@pytest.mark.slow  # one process, and torchrun at 2
def test_zero1_runs_as_one_process_and_two(tmp_path):
    torch.manual_seed(0)
    # d(sum)/dw = 2 for each of the 4 weights and the bias, clipped to norm 1 as torch_xla's ZeRO-1 did by default
    expected = round(torch.nn.Linear(4, 1).weight.sum().item() - 4 * 0.1 * 2 / 20 ** 0.5, 4)
    assert _run(tmp_path, "zero1.py", ZERO1, 1).split() == ["weight", str(expected)]
    both = re.findall(r"weight (-?[\d.]+)", _run(tmp_path, "zero1.py", ZERO1, 2))
    assert both == [str(expected)] * 2
