"""A spawn program's module-level download ran once, in the parent, before `xmp.spawn`; migrated to torchrun it
runs in every process: local rank 0 downloads first, the others wait (2 gloo processes under torchrun)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import rewrite_text
from tests.test_distributed_example import free_port

pytest.importorskip("torch")

LEGACY = '''
import json
import os
import sys
import time

import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp

ROOT = sys.argv[1]


def download_dataset(root):
    """Fetch the data unless a finished copy is there (slowly, as over a network)."""
    if not os.path.exists(os.path.join(root, "done")):
        with open(os.path.join(root, "fetches"), "a") as fh:
            fh.write("fetch\\n")
        time.sleep(1.0)
        open(os.path.join(root, "done"), "w").close()


download_dataset(ROOT)


def main(index):
    print(json.dumps({"ordinal": xm.get_ordinal(), "ready": os.path.exists(os.path.join(ROOT, "done"))}), flush=True)


if __name__ == "__main__":
    xmp.spawn(main)
'''


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spawn_download")
    migrated = rewrite_text(LEGACY)
    assert "torch_xla" not in migrated and "TODO(neuron-migrate" not in migrated
    assert "barrier()\ndownload_dataset(ROOT)\nif LOCAL_RANK == 0 and WORLD_SIZE > 1:\n    dist.barrier()" in migrated
    # on the CPU: gloo for the `neuron` process group, and no device to bind each rank to
    migrated = migrated.replace('"neuron"', '"gloo"').replace("torch.neuron.set_device(", "int(")
    (folder / "train.py").write_text(migrated)
    return folder


def run(folder, nproc: int) -> tuple[list[dict], int]:
    data = folder / f"data{nproc}"
    data.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                           f"--master_port={free_port()}", str(folder / "train.py"), str(data)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # two processes share one pipe, and print writes its text and its newline apart: two records can meet on one line
    lines = [json.loads(record) for record in re.findall(r"\{[^{}\n]*\}", done.stdout)]
    return lines, (data / "fetches").read_text().count("fetch")


@pytest.mark.slow
def test_two_processes_download_once(program):
    ranks, fetches = run(program, 2)
    assert fetches == 1  # without the barrier pair both ranks find no finished copy and fetch it
    assert sorted(r["ordinal"] for r in ranks) == [0, 1] and all(r["ready"] for r in ranks)


@pytest.mark.slow
def test_one_process_needs_no_process_group(program):
    ranks, fetches = run(program, 1)
    assert fetches == 1 and ranks == [{"ordinal": 0, "ready": True}]
