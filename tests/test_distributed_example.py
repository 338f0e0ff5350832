"""The data-parallel example, migrated, trains the same model on 2 processes as on 1 (torchrun).

The migrated program runs unmodified on the emulated `neuron` device (neuron_migrate.verify.emulator): its
`neuron` process group, device and compile backend are the emulator's.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from tests.helpers import ROOT, cli

torch = pytest.importorskip("torch")

EXAMPLE = ROOT / "examples" / "xla_mnist_dp"
STEP = re.compile(r"^epoch (\d+) step (\d+) loss ([\d.]+)$", re.M)
RANK = re.compile(r"^rank (\d+) of (\d+): last loss ([\d.]+) accuracy ([\d.]+) checksum (-?[\d.]+)$", re.M)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mnist_dp")
    shutil.copytree(EXAMPLE, folder, dirs_exist_ok=True)
    done = cli("rewrite", "--unsafe-fixes", str(folder))
    assert done.returncode == 1 and "reported without a marker" in done.stdout, done.stderr  # notes (NM401) left
    return folder


# Installs the emulated `neuron` device, then runs the program named on the command line as __main__.
LAUNCHER = """import runpy, sys
from neuron_migrate.verify.emulator import install
install()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def start(folder, processes: int, batch_size: int, plain: bool = False) -> subprocess.Popen:
    """torchrun for several processes; one process runs as `python train.py` with the variables torchrun sets
    (`plain`: without them)."""
    launcher = folder / "emulated.py"
    launcher.write_text(LAUNCHER)
    args = [str(launcher), str(folder / "train.py"), "--epochs", "1", "--max-steps", "6", "--log-steps", "1", "--batch-size", str(batch_size),
            "--train-size", "256", "--test-size", "128", "--checkpoint", str(folder / f"ckpt{processes}{'-plain' if plain else ''}.pt")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for variable in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(variable, None)
    if plain:
        command = [sys.executable, *args]
    elif processes == 1:
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        command = [sys.executable, *args]
    else:
        # every rank writes its own log file, so that lines of two ranks cannot interleave
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                   f"--log-dir={folder / f'logs{processes}'}", "--redirects=3", *args]
    return subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def output(process: subprocess.Popen, logs_dir) -> str:
    stdout, stderr = process.communicate(timeout=240)
    logs = sorted(logs_dir.glob("*/attempt_0/*/std*.log"))
    ranks = "".join(log.read_text() for log in logs if log.name == "stdout.log")
    assert process.returncode == 0, stdout + stderr + "".join(log.read_text() for log in logs)
    return stdout + ranks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_migration_leaves_no_torch_xla_and_no_marker(migrated):
    program = (migrated / "train.py").read_text()
    assert "torch_xla" not in program and "TODO(neuron-migrate" not in program
    assert "DistributedDataParallel(model" in program
    assert "torchrun --nproc_per_node=8 train.py" in (migrated / "run.sh").read_text()
    assert "torch-xla" not in (migrated / "requirements.txt").read_text()
    assert cli("rewrite", "--diff", str(migrated)).returncode == 0  # a second run changes nothing


@pytest.mark.slow
def test_two_processes_train_like_one(migrated):
    runs = [start(migrated, processes=1, batch_size=32), start(migrated, processes=2, batch_size=32)]  # global batch
    single, double = (output(run, migrated / f"logs{n}") for run, n in zip(runs, (1, 2)))
    single_steps = [float(loss) for *_, loss in STEP.findall(single)]
    double_steps = [float(loss) for *_, loss in STEP.findall(double)]
    assert len(single_steps) == len(double_steps) == 6
    assert double_steps == pytest.approx(single_steps, rel=1e-4)
    assert len(set(single_steps)) > 1, "the model did not train"

    ranks = {int(r): (loss, accuracy, float(checksum)) for r, n, loss, accuracy, checksum in RANK.findall(double)}
    assert sorted(ranks) == [0, 1]
    assert ranks[0][2] == ranks[1][2], "the replicas' weights differ"
    assert ranks[0][1] == ranks[1][1]
    (_, _, _, accuracy, checksum), = RANK.findall(single)
    assert ranks[0][1] == accuracy
    assert ranks[0][2] == pytest.approx(float(checksum), rel=1e-5)


@pytest.mark.slow
def test_plain_python_trains_like_torchrun_with_one_process(migrated):
    """`python train.py` with none of torchrun's variables: one process, its own process group, no launcher."""
    runs = [start(migrated, processes=1, batch_size=32), start(migrated, processes=1, batch_size=32, plain=True)]
    one, plain = (output(run, migrated) for run in runs)
    assert [float(loss) for *_, loss in STEP.findall(plain)] == [float(loss) for *_, loss in STEP.findall(one)]
    assert [r[:2] for r in RANK.findall(plain)] == [("0", "1")]
    assert RANK.findall(plain) == RANK.findall(one)


@pytest.mark.slow  # reads the checkpoint the two-process run above writes
def test_checkpoint_loads_into_the_bare_model(migrated):
    sys.path.insert(0, str(migrated))
    try:
        import train
    finally:
        sys.path.remove(str(migrated))
    state = torch.load(migrated / "ckpt2.pt")
    assert all(t.device.type == "cpu" for t in state.values())
    train.MNIST().load_state_dict(state)  # strict: no `module.` / `_orig_mod.` prefixes
