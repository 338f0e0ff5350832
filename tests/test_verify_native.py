"""The emulated device with real storage (the C++ backend of verify/native/) and its Python fallback.

The C++ backend is built once into the cache folder (`~/.cache/neuron-migrate/emulator-<torch>-<hash>`) and
reused by every later test and run; the first test to need it pays the build (about 30 s on 2 shared cores).
Both backends must pass the operator table and the device checks; what needs storage (FSDP2, DTensor, device
generators, pinned memory, storage resizes) is checked on the C++ one, at 2 processes; a sharded program is
verified at 2 processes against the single-process reference of its unsharded model.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from tests.test_verify import DATA, failed, verify

pytestmark = pytest.mark.needs_torch
FSDP2 = DATA / "fsdp2"
HAS_COMPILER = bool(shutil.which("c++") or shutil.which("g++"))
needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason="the C++ emulated device needs g++ (apt-get install g++)")


def run(*command: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), check=False, capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def backends() -> list:
    return [pytest.param("cpp", marks=needs_compiler), "python"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", backends())
def test_both_emulators_match_the_cpu_over_the_operator_table(backend):
    proc = run(sys.executable, str(DATA / "op_table.py"), env={"NEURON_MIGRATE_EMULATOR": backend})
    lines = [line for line in proc.stdout.splitlines() if line]
    assert proc.returncode == 0, "\n".join(lines) + proc.stderr[-2000:]
    assert lines[-1] == "69 operators compared"


@pytest.mark.slow
@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("mode", ["", "strict"])
def test_both_emulators_run_like_a_device(backend, mode):
    proc = run(sys.executable, str(DATA / "device_checks.py"), mode, env={"NEURON_MIGRATE_EMULATOR": backend})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "device checks passed" in proc.stdout


@needs_compiler
@pytest.mark.slow
def test_storage_generators_pinned_memory_and_dtensor_at_two_processes():
    proc = run(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               str(DATA / "storage_checks.py"), env={"NEURON_MIGRATE_EMULATOR": "cpp"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    # the two ranks share one pipe: a rank's text and its newline are two writes, so lines can interleave
    assert sorted(re.findall(r"rank (\d+): storage checks passed", proc.stdout)) == ["0", "1"]


@pytest.mark.slow
def test_without_a_compiler_the_python_emulator_runs_and_says_why(tmp_path):
    probe = ("from neuron_migrate.verify import emulator\n"
             "emulator.install()\n"
             "import torch\n"
             "x = torch.ones(2, device='neuron') * 3\n"
             "print(emulator.backend(), x.sum().item(), emulator._state.get('build_error'))\n")
    env = {"CXX": str(tmp_path / "no-such-compiler"), "NEURON_MIGRATE_CACHE_DIR": str(tmp_path / "cache")}
    proc = run(sys.executable, "-c", probe, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split(maxsplit=2)[:2] == ["python", "6.0"] and "no C++ compiler: CXX=" in proc.stdout
    # asked for by name, the C++ backend does not fall back silently
    proc = run(sys.executable, "-c", probe, env={**env, "NEURON_MIGRATE_EMULATOR": "cpp"})
    assert proc.returncode != 0 and "BuildError: no C++ compiler: CXX=" in proc.stderr
    proc = run(sys.executable, "-c", probe, env={**env, "NEURON_MIGRATE_EMULATOR": "rust"})
    assert proc.returncode != 0 and "NEURON_MIGRATE_EMULATOR='rust': expected cpp, python or auto" in proc.stderr


@needs_compiler
@pytest.mark.slow
def test_fsdp2_program_verifies_against_its_unsharded_reference_at_two_processes():
    proc, report = verify("train.py", "--nproc", "2", "--skip-no-neuron", cwd=FSDP2)
    assert proc.returncode == 0, proc.stdout
    reference, target = report["runs"]
    assert (reference["nproc"], reference["processes"], reference["device"]) == (1, 1, "cpu")
    assert reference["env"] == {"NEURON_MIGRATE_UNSHARDED": "1"}
    assert (target["nproc"], target["processes"], target["emulator"]) == (2, 2, "cpp")
    checks = {c["name"]: c for c in report["comparison"]["checks"]}
    prefix = "2 processes, rank 0 against the unsharded reference: "
    assert checks[prefix + "loss curve"]["ok"] and checks[prefix + "loss curve"]["count"] == 4
    # the gathered parameters are the whole model's: 2 blocks of LayerNorm(16) + Linear(16, 16), a Linear(16, 4) head
    assert checks[prefix + "final parameters"]["ok"] and checks[prefix + "final parameters"]["count"] == 676
    assert checks["2 processes: ranks agree on the gathered parameters"]["ok"]


@needs_compiler
@pytest.mark.slow
def test_tensor_parallel_program_verifies_on_the_cpp_backend_at_two_processes(monkeypatch):
    # the migration compiles the model: its graphs drop a collective's input as soon as the collective is issued,
    # while gloo still reads it (the backend once trained on freed memory here: loss 1e20 at step 3)
    monkeypatch.setenv("NEURON_MIGRATE_EMULATOR", "cpp")
    proc, report = verify("train.py", "--nproc", "2", "--skip-no-neuron", cwd=DATA / "sharded" / "tp_mlp")
    assert proc.returncode == 0, proc.stdout
    target = report["runs"][1]
    assert (target["nproc"], target["processes"], target["emulator"]) == (2, 2, "cpp")
    checks = {c["name"]: c for c in report["comparison"]["checks"]}
    prefix = "2 processes, rank 0 against the unsharded reference: "
    assert checks[prefix + "loss curve"]["ok"] and checks[prefix + "loss curve"]["count"] == 5
    # Linear(8, 32) split by columns, Linear(32, 4) by rows, gathered whole
    assert checks[prefix + "final parameters"]["ok"] and checks[prefix + "final parameters"]["count"] == 420
    assert checks["2 processes: ranks agree on the gathered parameters"]["ok"]


@needs_compiler
@pytest.mark.slow
def test_a_sharded_migration_that_trains_differently_is_caught(tmp_path):
    wrong = tmp_path / "train.py"
    wrong.write_text((FSDP2 / "train.py").read_text().replace("lr=1e-2", "lr=3e-2"))
    proc, report = verify("train.py", "--nproc", "2", "--migrated", str(wrong), "--skip-no-neuron", cwd=FSDP2)
    assert proc.returncode == 1, proc.stdout
    bad = failed(report)
    assert "2 processes, rank 0 against the unsharded reference: final parameters" in bad
    assert "2 processes: ranks agree on the gathered parameters" not in bad  # the ranks still agree with each other


def test_sharded_programs_are_recognised_by_their_sharding_calls(tmp_path):
    from neuron_migrate.verify.unsharded import shards

    cases = {"fsdp2.py": ("from torch.distributed.fsdp import fully_shard\nfully_shard(model)\n", True),
             "tp.py": ("parallelize_module(model, mesh['tp'], plan)\n", True),
             "ddp.py": ("model = DistributedDataParallel(model)\n", False),
             "named.py": ("fully_sharded = True  # a flag, not the API\n", False)}
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        assert shards([tmp_path / name]) is expected, name
    assert not shards([tmp_path / "missing.py"])


def test_the_cpp_source_ships_with_the_package():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"neuron_migrate.verify.native" = ["*.cpp"]' in text
    assert (ROOT / "neuron_migrate" / "verify" / "native" / "neuron_emulator.cpp").is_file()


def test_the_torch_neuronx_stand_in_answers_a_feature_detection():
    """A migrated `find_spec("torch_xla")` asks for torch_neuronx: on the emulated device the stand-in in sys.modules
    answers like the installed package (a module without a spec made find_spec raise ValueError)."""
    code = ("import importlib.util, sys\n"
            "from neuron_migrate.verify import emulator\n"
            "emulator.install()\n"
            "spec = importlib.util.find_spec('torch_neuronx')\n"
            "assert spec is not None and spec.name == 'torch_neuronx', spec\n"
            "import torch_neuronx\n"
            "assert torch_neuronx is sys.modules['torch_neuronx']\n"
            "print('found')\n")
    proc = run(sys.executable, "-c", code, env={"NEURON_MIGRATE_EMULATOR": "python"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "found"
