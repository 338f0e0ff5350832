"""Prepare the programs (migrating a copy when needed) and run each in its own folder and environment.

Each run starts in its own copy of the project (small files copied, large ones linked), so no run reads what
another wrote (checkpoints, logs) and the program reaches what it reaches outside its folder (`sys.path.append
("..")`, a sibling `common/` package). The project is the folder given with `--root`, else the nearest folder at
or above the script's that holds pyproject.toml, setup.py, setup.cfg or .git, else the script's folder; the
working folder is copied instead where it holds the project, and each run starts in the copy of the working
folder. Each run's environment is the caller's, plus the run's own variables
(`--reference-env` / `--target-env`); the torch_xla reference does not get the caller's `PYTHONPATH` (it belongs
to this interpreter) and imports nothing from this tool's environment: the recording harness is a copy of one
module that needs only the standard library and torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import neuron_migrate
from neuron_migrate.engine.handlers import SET_ASIDE_CODE
from neuron_migrate.engine.runner import run as run_engine
from neuron_migrate.engine.runner import write_results
from neuron_migrate.findings import Finding
from neuron_migrate.settings import Settings
from neuron_migrate.verify import harness as harness_module
from neuron_migrate.verify.harness import CONFIG_ENV

PACKAGE_PARENT = str(Path(neuron_migrate.__file__).resolve().parent.parent)
HARNESS_MODULE = "neuron_migrate_verify_harness"
SKIP_DIRS = (".git", "__pycache__", ".venv", "venv", ".tox", "node_modules", "*.egg-info", ".mypy_cache")
COPY_LIMIT = 4 * 1024 * 1024  # files larger than this are linked into a run's folder, not copied
MAX_ENTRIES = 20000  # a project with more entries than this is not copied (give --root)
ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# Variables torchrun sets for each worker: with --nproc 1 the migrated program gets them as one worker.
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                 "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")

SITECUSTOMIZE = '''\
"""neuron-migrate verify: start the recorder, then hand over to any sitecustomize this one shadows."""
import importlib.machinery, importlib.util, os, sys, traceback

_here = os.path.dirname(os.path.abspath(__file__))
_extra = {package_parent!r}  # the tool's own package, only for runs in the tool's interpreter
# Only what this module adds is taken away again: from a regular install the tool's package lies in the
# interpreter's own site-packages, which the program needs as it is.
_added = [_here] + ([_extra] if _extra and _extra not in [os.path.abspath(p or ".") for p in sys.path] else [])
sys.path[0:0] = _added
try:
    import {harness}
    {harness}.start()
except BaseException:
    traceback.print_exc()
    sys.stderr.write("neuron-migrate verify: the recording harness could not start in this process\\n")
    os._exit(3)
finally:
    for _path in _added:
        sys.path.remove(_path)  # the first occurrence: the one inserted above
    # the harness's folder also came in through PYTHONPATH: it is not the program's
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
if _spec is not None and _spec.loader is not None and _spec.origin != os.path.abspath(__file__):
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)  # under this module's name in sys.modules: the import in site.py ends there
'''


class VerifyError(Exception):
    """A problem with the command's input or environment (exit 2, nothing compared)."""


@dataclass
class Migration:
    """The engine's migration of a temporary copy of the script's folder."""

    folder: Path
    script: Path
    source: Path  # the folder that was copied: the project root
    changed: list[str] = field(default_factory=list)
    manual: list[Finding] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    set_aside: list[Finding] = field(default_factory=list)  # NM521: a program for a target the backend lacks


@dataclass
class Program:
    role: str  # "reference", "cpu" (the migration on the plain CPU, three-way), "target", or for the no-Neuron
    # path "plain original" / "plain migration"
    label: str  # what is run, for the report
    python: str
    script: Path  # the script where it lies (the user's file, the migrated copy or the given migration)
    device: str  # "cpu", "emulated", "neuron", "xla", "plain" (no Neuron, no XLA: plain CPU PyTorch)
    nproc: int = 1
    env: dict[str, str] = field(default_factory=dict)  # the run's own variables
    overlay: Migration | None = None  # migrated files laid over the run's copy of the working folder

    @property
    def name(self) -> str:
        return self.role if self.nproc == 1 else f"{self.role} x{self.nproc}"

    @property
    def original(self) -> bool:
        """It runs the legacy program (under torch_xla, or without it on the no-Neuron path)."""
        return self.device == "xla" or self.role == "plain original"


@dataclass
class RunResult:
    program: Program
    returncode: int
    seconds: float
    stderr: str
    records: list[dict] = field(default_factory=list)
    stdout: str = ""
    folder: Path | None = None  # the run's copy of the working folder or of the project holding it
    root: Path | None = None  # the run's copy of the project root

    @property
    def failed(self) -> bool:
        return self.returncode != 0 or not self.records


def _link_or_copy(src: str, dst: str) -> None:
    if src.endswith(".py"):
        shutil.copy2(src, dst)
    else:
        os.symlink(os.path.abspath(src), dst)


def _copy_small(src: str, dst: str) -> None:
    """Copy a file a run may rewrite; link a large one (a data set) that it only reads."""
    if os.path.getsize(src) > COPY_LIMIT:
        os.symlink(os.path.abspath(src), dst)
    else:
        shutil.copy2(src, dst)


def project_root(script: Path, given: Path | None = None) -> Path:
    """The folder each run copies: the one given, else the nearest at or above the script's folder that holds a
    project marker (pyproject.toml, setup.py, setup.cfg, .git), else the script's folder."""
    if given is not None:
        root = given.resolve()
        if inside(script, root) is None:
            raise VerifyError(f"--root {given}: the script is not inside it")
        return root
    folder = script.resolve().parent
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    return folder


def _check_size(folder: Path) -> None:
    entries = 0
    for _root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        entries += len(files) + len(dirs)
        if entries > MAX_ENTRIES:
            raise VerifyError(f"{folder} has more than {MAX_ENTRIES} files and folders: each run gets its own copy "
                              "of the project, so name a smaller one with --root (the folder holding what the "
                              "program imports and reads)")


def migrate_copy(script: Path, workdir: Path, root: Path | None = None) -> Migration:
    """Copy the project (Python files copied, everything else linked) and migrate the program's Python files."""
    root = (root or script.parent).resolve()
    _check_size(root)
    folder = workdir / "migrated"
    shutil.copytree(root, folder, ignore=shutil.ignore_patterns(*SKIP_DIRS), copy_function=_link_or_copy,
                    symlinks=True)
    # the program's own files (its import closure in the project), not every file of the project: a script in a
    # large repository migrates what it runs, in seconds
    from neuron_migrate.verify.closure import closure

    own = closure(script, root).files or [script.resolve()]
    paths = [str(folder / p.relative_to(root)) for p in own]
    # every fix, as `rewrite --unsafe-fixes` makes it (the unsafe ones are those most worth proving), with the
    # project's [tool.neuron-migrate] settings: a target it states (`targets`, `instance`) moves a program its files
    # would set aside, as it does for `rewrite`
    settings = replace(_project_settings(script, root, folder), unsafe_fixes=True)
    result = run_engine(paths, settings, rewrite=True, kinds=frozenset({"python"}), jobs=1)
    write_results(result)
    migration = Migration(folder, folder / script.resolve().relative_to(root), root, errors=result.errors)
    migration.changed = [os.path.relpath(r.path, folder) for r in result.changed]
    migration.manual = [f for r in result.results for f in r.manual]
    migration.set_aside = [f for r in result.results for f in r.findings if f.code == SET_ASIDE_CODE]
    return migration


def _project_settings(script: Path, root: Path, folder: Path) -> Settings:
    """The settings `rewrite` would use for `script` (its pyproject.toml's [tool.neuron-migrate]), with the paths
    they name under `root` moved to the copy in `folder`."""
    from neuron_migrate.config import ConfigError, resolve

    try:
        settings = resolve([str(script)]).settings
    except ConfigError as exc:
        raise VerifyError(str(exc)) from None

    def moved(path: str) -> str:
        inner = inside(Path(path), root) if os.path.isabs(path) else None
        return path if inner is None else os.path.normpath(os.path.join(str(folder), str(inner)))

    return replace(settings, targets=tuple((moved(p), t) for p, t in settings.targets),
                   per_file_ignores=tuple((moved(p), c) for p, c in settings.per_file_ignores))


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


def _harness_dir(workdir: Path, own_interpreter: bool) -> Path:
    """A folder with the sitecustomize and a copy of the harness module (stdlib and torch only)."""
    folder = workdir / ("harness" if own_interpreter else "harness-reference")
    if not folder.is_dir():
        folder.mkdir()
        shutil.copy2(harness_module.__file__, folder / f"{HARNESS_MODULE}.py")
        (folder / "sitecustomize.py").write_text(SITECUSTOMIZE.format(
            package_parent=PACKAGE_PARENT if own_interpreter else None, harness=HARNESS_MODULE))
    return folder


def inside(path: Path, folder: Path) -> Path | None:
    try:
        return path.resolve().relative_to(folder.resolve())
    except ValueError:
        return None


@dataclass
class Staged:
    """Where a run runs: its copy of the project (or of the working folder holding it)."""

    folder: Path  # the copy
    cwd: Path  # the copy of the working folder: the run starts there
    script: Path  # the script to run
    root: Path | None  # the copy of the project root, when the copy holds it


def stage(program: Program, cwd: Path, workdir: Path, root: Path | None = None) -> Staged:
    """The run's own copy of the project (the migration laid over it), where it starts, and the script to run.

    The project root is copied when the working folder is inside it (the run starts in the copy of the working
    folder), else the working folder (a project inside it is copied with it)."""
    cwd = cwd.resolve()
    root = (root or cwd).resolve()
    top = root if inside(cwd, root) is not None else cwd
    _check_size(top)
    folder = workdir / "runs" / program.name.replace(" ", "-")
    shutil.copytree(top, folder, ignore=shutil.ignore_patterns(*SKIP_DIRS), copy_function=_copy_small,
                    symlinks=True)
    run_cwd = folder / cwd.relative_to(top)
    where_root = inside(root, top)
    root_copy = folder / where_root if where_root is not None else None
    overlay = program.overlay
    if overlay is not None:
        where = inside(overlay.source, top)
        if where is None:  # the project is outside the working folder: run the migrated copy there
            return Staged(folder, run_cwd, program.script, None)
        for changed in overlay.changed:
            shutil.copy2(overlay.folder / changed, folder / where / changed)
        return Staged(folder, run_cwd, folder / where / program.script.relative_to(overlay.folder), root_copy)
    where = inside(program.script, top)
    return Staged(folder, run_cwd, folder / where if where is not None else program.script, root_copy)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(program: Program, harness: Path, config: dict) -> dict[str, str]:
    """The caller's environment, without what belongs to this interpreter for another one, plus the run's own."""
    env = {k: v for k, v in os.environ.items() if k != CONFIG_ENV and k not in TORCHRUN_VARS}
    if program.device == "xla":
        env.pop("PYTHONPATH", None)
        env.setdefault("PJRT_DEVICE", "CPU")
    if program.device == "plain":  # a machine without Neuron: no backend loads itself when torch is imported
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    if program.nproc == 1:
        # torchrun's variables for one worker: a program that calls init_process_group("env://") runs as rank 0,
        # the torch_xla reference of a program torchrun launches (`init_process_group("xla")`) included; without
        # TORCHELASTIC_RUN_ID, torch_xla does not take itself for a torchrun launch (`xmp.spawn` runs as before)
        env.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
                    "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(_free_port())})
    env.update(program.env)  # the user's own choice wins
    env[CONFIG_ENV] = json.dumps(config)
    # the harness first, then the run's own PYTHONPATH (`--reference-env PYTHONPATH=...` adds to it, never drops it)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(harness), env.get("PYTHONPATH")) if p)
    return env


def command(program: Program, script: Path, args: list[str], logs: Path | None = None) -> list[str]:
    """How the run starts; with several processes, each rank's standard output goes to its own file under `logs`
    (the ranks would interleave their lines in one pipe, and the printed numbers are compared line by line)."""
    if program.nproc > 1:
        own_files = [f"--log-dir={logs}", "--redirects=1"] if logs is not None else []
        return [program.python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={program.nproc}",
                *own_files, str(script), *args]
    return [program.python, str(script), *args]


def _rank_output(stdout: str, logs: Path) -> str:
    """The launcher's own output, then each rank's in rank order."""
    files = sorted(logs.glob("*/attempt_*/*/stdout.log"), key=lambda f: (f.parent.parent.name, _number(f.parent.name)))
    return stdout + "".join(f.read_text(errors="replace") for f in files)


def _number(name: str) -> int:
    return int(name) if name.isdigit() else -1


def run_program(program: Program, args: list[str], workdir: Path, cwd: Path, *, max_steps: int | None, seed: int,
                strict: bool, timeout: float | None, root: Path | None = None,
                prepare: Callable[[Program, Staged], list[str]] | None = None) -> RunResult:
    """Run the program in its own copy; `prepare` readies the copy (the converted checkpoints) and gives the
    run's arguments."""
    staged = stage(program, cwd, workdir, root)
    if prepare is not None:
        args = prepare(program, staged)
    folder, script = staged.folder, staged.script
    out = workdir / "records" / program.name.replace(" ", "-")
    out.mkdir(parents=True)
    config = {"out": str(out), "device": program.device, "max_steps": max_steps, "seed": seed, "strict": strict,
              "nproc": program.nproc, "root": str(folder.resolve()),
              "script_root": str(script.resolve().parent),
              "project_root": str((staged.root or script.parent).resolve())}
    own = program.python == sys.executable
    env = environment(program, _harness_dir(workdir, own), config)
    start = time.perf_counter()
    logs = out / "logs"
    proc = subprocess.Popen(command(program, script, args, logs), env=env, cwd=staged.cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        returncode = proc.returncode
    except subprocess.TimeoutExpired:
        _kill(proc)
        stdout, stderr = proc.communicate()
        returncode = -1
        stderr += f"\nneuron-migrate verify: the run did not finish within {timeout:.0f} s"
    except BaseException:  # Ctrl-C, SIGTERM: no run outlives verify
        _kill(proc)
        proc.wait()
        raise
    if program.nproc > 1:
        stdout = _rank_output(stdout, logs)
    result = RunResult(program, returncode, time.perf_counter() - start, stderr, stdout=stdout, folder=folder,
                       root=staged.root)
    result.records = _load_records(out)
    return result


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers (torchrun starts a process group)
    except (ProcessLookupError, PermissionError):
        pass


def _load_records(out: Path) -> list[dict]:
    import torch

    records = [torch.load(p, weights_only=True) for p in sorted(out.glob("record-*.pt"))]
    records = [r for r in records if r["losses"] or r["modules"] or r["step_times"]] or records
    return sorted(records, key=lambda r: r["meta"]["rank"])


def check_reference_python(python: str, env: dict[str, str]) -> None:
    if shutil.which(python) is None and not Path(python).is_file():
        raise VerifyError(f"--reference-python {python}: no such interpreter; name the python of an environment "
                          "with torch_xla, e.g. a venv with `pip install torch==2.9.0 torch_xla==2.9.0`")
    probe_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe_env.setdefault("PJRT_DEVICE", "CPU")
    probe_env.update(env)
    probe = subprocess.run([python, "-c", "import torch, torch_xla; print(torch.__version__, torch_xla.__version__)"],
                           capture_output=True, text=True, env=probe_env)
    if probe.returncode != 0:
        tail = probe.stderr.strip().splitlines()[-1:] or ["no output"]
        raise VerifyError(f"--reference-python {python}: cannot import torch and torch_xla there ({tail[0]}); "
                          "name an interpreter with torch_xla installed, e.g. a venv with "
                          "`pip install torch==2.9.0 torch_xla==2.9.0`")
