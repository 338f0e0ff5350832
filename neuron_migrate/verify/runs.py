"""Prepare the two programs (migrating a copy when needed) and run each in a subprocess with the harness."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import neuron_migrate
from neuron_migrate.findings import Finding
from neuron_migrate.engine.runner import run as run_engine, write_results
from neuron_migrate.settings import Settings
from neuron_migrate.verify.harness import CONFIG_ENV

PACKAGE_PARENT = str(Path(neuron_migrate.__file__).resolve().parent.parent)
SKIP_DIRS = (".git", "__pycache__", ".venv", "venv", ".tox", "node_modules", "*.egg-info", ".mypy_cache")

SITECUSTOMIZE = '''\
"""neuron-migrate verify: start the recorder, then hand over to any sitecustomize that was shadowed."""
import importlib.util, os, sys, traceback

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, {package_parent!r})
try:
    from neuron_migrate.verify import harness
    harness.start()
except BaseException:
    traceback.print_exc()
    sys.stderr.write("neuron-migrate verify: the recording harness could not start in this process\\n")
    os._exit(3)
finally:
    sys.path.remove({package_parent!r})
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules["sitecustomize"]
_spec = importlib.util.find_spec("sitecustomize")
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["sitecustomize"] = _module
    _spec.loader.exec_module(_module)
'''


class VerifyError(Exception):
    """A problem with the command's input (exit 2, nothing run)."""


@dataclass
class Migration:
    """The engine's migration of a temporary copy of the script's folder."""

    folder: Path
    script: Path
    changed: list[str] = field(default_factory=list)
    manual: list[Finding] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Program:
    role: str  # "reference" or "target"
    label: str  # what is run, for the report
    python: str
    script: Path
    device: str  # "cpu", "emulated", "neuron", "xla"


@dataclass
class RunResult:
    program: Program
    returncode: int
    seconds: float
    stderr: str
    records: list[dict] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.returncode != 0 or not self.records


def _link_or_copy(src: str, dst: str) -> None:
    if src.endswith(".py"):
        shutil.copy2(src, dst)
    else:
        os.symlink(os.path.abspath(src), dst)


def migrate_copy(script: Path, workdir: Path) -> Migration:
    """Copy the script's folder (Python files copied, everything else linked) and migrate its Python files."""
    folder = workdir / "migrated"
    shutil.copytree(script.parent, folder, ignore=shutil.ignore_patterns(*SKIP_DIRS), copy_function=_link_or_copy,
                    symlinks=True)
    result = run_engine([str(folder)], Settings(), rewrite=True, kinds=frozenset({"python"}), jobs=1)
    write_results(result)
    migration = Migration(folder, folder / script.name, errors=result.errors)
    migration.changed = [os.path.relpath(r.path, folder) for r in result.changed]
    migration.manual = [f for r in result.results for f in r.manual]
    return migration


def target_device(requested: str) -> str:
    """auto: the real `neuron` device when the native torch-neuronx is installed, else the emulated one."""
    if requested != "auto":
        return requested
    return "neuron" if native_torch_neuronx() else "emulated"


def native_torch_neuronx() -> bool:
    """torch-neuronx 2.13 and later is the native backend; earlier versions are the legacy XLA library."""
    if importlib.util.find_spec("torch_neuronx") is None:
        return False
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        return Version(version("torch-neuronx")) >= Version("2.13")
    except PackageNotFoundError:
        return False


def _sitecustomize_dir(workdir: Path) -> Path:
    folder = workdir / "harness"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE.format(package_parent=PACKAGE_PARENT))
    return folder


def command(program: Program, args: list[str], nproc: int) -> list[str]:
    if nproc > 1:
        return [program.python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                str(program.script), *args]
    return [program.python, str(program.script), *args]


def run_program(program: Program, args: list[str], workdir: Path, *, nproc: int, max_steps: int | None,
                seed: int, strict: bool, timeout: float | None) -> RunResult:
    out = Path(tempfile.mkdtemp(prefix=f"{program.role}-", dir=workdir))
    config = {"out": str(out), "device": program.device, "max_steps": max_steps, "seed": seed, "strict": strict,
              "nproc": nproc}
    env = {**os.environ, CONFIG_ENV: json.dumps(config)}
    harness = str(_sitecustomize_dir(workdir))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (harness, os.environ.get("PYTHONPATH")) if p)
    if program.device == "xla":
        env.setdefault("PJRT_DEVICE", "CPU")
    start = time.perf_counter()
    try:
        proc = subprocess.run(command(program, args, nproc), env=env, capture_output=True, text=True,
                              timeout=timeout)
        returncode, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode = -1
        stderr = (exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or "")
        stderr += f"\nneuron-migrate verify: the run did not finish within {timeout:.0f} s"
    result = RunResult(program, returncode, time.perf_counter() - start, stderr)
    result.records = _load_records(out)
    return result


def _load_records(out: Path) -> list[dict]:
    import torch

    records = [torch.load(p, weights_only=True) for p in sorted(out.glob("record-*.pt"))]
    records = [r for r in records if r["losses"] or r["modules"] or r["step_times"]] or records
    return sorted(records, key=lambda r: r["meta"]["rank"])


def check_reference_python(python: str) -> None:
    probe = subprocess.run([python, "-c", "import torch, torch_xla; print(torch.__version__, torch_xla.__version__)"],
                           capture_output=True, text=True, env={**os.environ, "PJRT_DEVICE": "CPU"})
    if probe.returncode != 0:
        tail = probe.stderr.strip().splitlines()[-1:] or ["no output"]
        raise VerifyError(f"--reference-python {python}: cannot import torch and torch_xla there ({tail[0]}); "
                          "name an interpreter with torch_xla installed, e.g. a venv with "
                          "`pip install torch==2.9.0 torch_xla==2.9.0`")
