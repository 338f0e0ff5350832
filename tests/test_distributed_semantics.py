"""The rewritten ranks, collectives and gradient averaging compute what torch_xla computed (2 gloo processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import rewrite_text
from tests.test_distributed_example import free_port

pytest.importorskip("torch")

LEGACY = '''
import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def run():
    rank, world = xr.global_ordinal(), xr.world_size()
    out = {"rank": rank, "world": world, "master": xm.is_master_ordinal()}
    if world > 1:
        dist.init_process_group("xla", init_method="xla://")
        a = torch.tensor([float(rank + 1)])
        b = torch.tensor([10.0 * (rank + 1)])
        xm.all_reduce(xm.REDUCE_SUM, [a, b], scale=0.5)
        mean = xm.all_reduce(xm.REDUCE_SUM, torch.tensor([float(rank)]), scale=1.0 / world)
        largest = xm.all_reduce(xm.REDUCE_MAX, torch.tensor([float(rank)]))
        gathered = xm.all_gather(torch.tensor([[float(rank)]]), dim=1)
        x = torch.arange(8.0).reshape(4, 2) * (rank + 1)
        shard = xm.reduce_scatter(xm.REDUCE_SUM, x, 0.5, 0, world)
        swapped = xm.all_to_all(x, 0, 0, world)
        xm.rendezvous("collectives")
        out.update(a=a.item(), b=b.item(), mean=mean.item(), max=largest.item(), gathered=gathered.tolist(),
                   shard=shard.tolist(), swapped=swapped.tolist())
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model(torch.ones(2, 3) * (rank + 1)).sum().backward()
    xm.reduce_gradients(optimizer)
    return {**out, "grad": model.weight.grad.tolist(), "bias": model.bias.grad.item()}
'''

RUNNER = '''
import json, os, sys

rank, world = int(sys.argv[1]), int(sys.argv[2])
if world > 1:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=sys.argv[3])
sys.path.insert(0, os.path.dirname(__file__))
import migrated

print(json.dumps(migrated.run()), flush=True)
import torch.distributed as dist
if dist.is_initialized():  # no rank leaves while another is still in a collective
    dist.barrier()
    dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    folder = tmp_path_factory.mktemp("semantics")
    # on the CPU: gloo for the `neuron` process group, and no device to bind each rank to
    migrated = rewrite_text(LEGACY).replace('"neuron"', '"gloo"').replace("torch.neuron.set_device(", "int(")
    assert "torch_xla" not in migrated and "TODO(neuron-migrate" not in migrated
    (folder / "migrated.py").write_text(migrated)
    (folder / "runner.py").write_text(RUNNER)
    return folder


def results(folder, world: int) -> list[dict]:
    env = {"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    port = str(free_port())
    runs = [subprocess.Popen([sys.executable, str(folder / "runner.py"), str(rank), str(world), port], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(world)]
    out = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr
        out.append(json.loads(stdout.splitlines()[-1]))
    return out


@pytest.mark.slow
def test_two_processes(program):
    first, second = results(program, 2)
    for r in (first, second):
        assert (r["a"], r["b"], r["mean"], r["max"]) == (1.5, 15.0, 0.5, 1.0)
        assert r["gathered"] == [[0.0, 1.0]] and r["world"] == 2
        # averaged gradients: inputs scaled by 1 and 2 average to 1.5 per sample, 2 samples
        assert r["grad"] == [[3.0, 3.0, 3.0]] and r["bias"] == 2.0
    assert (first["master"], second["master"]) == (True, False)
    # x is [[0, 1], [2, 3], [4, 5], [6, 7]] on rank 0 and twice that on rank 1
    assert first["shard"] == [[0.0, 1.5], [3.0, 4.5]] and second["shard"] == [[6.0, 7.5], [9.0, 10.5]]
    assert first["swapped"] == [[0.0, 1.0], [2.0, 3.0], [0.0, 2.0], [4.0, 6.0]]
    assert second["swapped"] == [[4.0, 5.0], [6.0, 7.0], [8.0, 10.0], [12.0, 14.0]]


def test_one_process_needs_no_process_group(program):
    """The legacy calls answered 0 / 1 and skipped the averaging without a process group; the migrated code too."""
    (single,) = results(program, 1)
    assert (single["rank"], single["world"], single["master"]) == (0, 1, True)
    assert single["grad"] == [[2.0, 2.0, 2.0]] and single["bias"] == 2.0
