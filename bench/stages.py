"""Where one `check` (or `rewrite`) spends its time, stage by stage, in one process.

    python -m bench.stages ../shared/ecosystem                   # check --no-cache -j 1 over a copy of the folder
    python -m bench.stages ../shared/ecosystem --command rewrite

The tool runs in this process with one worker, so that every stage runs here, and a timer around each stage's
function: the wall time spent inside it, and its calls. A stage inside another (the LibCST parse of a set-aside
file's passes, inside "programs set aside") is counted in both, and the indentation says which holds which; a
function reached again from inside itself (a notebook's `%%writefile` cell goes through the handlers again) is
counted once, at its outermost call. The folder is copied first (a rewrite writes; the copy is made writable).

The tables of stages in docs/performance.md come from this command. It imports the tool before the run, so the
start-up's own shortcuts (engine/deferred.py) are not in place: the stages are measured, not the start-up.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from bench.ecosystem import writable_copy

# (module, function, what it is, depth under the stage listed above it)
STAGES = (
    ("neuron_migrate.engine.runner", "_project_facts", "the project model", 0),
    ("neuron_migrate.engine.project", "read_modules", "its reads of the Python files and notebooks", 1),
    ("neuron_migrate.engine.handlers", "process", "the files", 0),
    ("neuron_migrate.engine.python", "_read", "Python's parse", 1),
    ("neuron_migrate.engine.python", "Scan", "the tree pre-filter's scan", 1),
    ("neuron_migrate.engine.python", "_python_accepts", "compiling the files no rule reads", 1),
    ("neuron_migrate.engine.python", "decide_notes", "set-aside notes decided on Python's tree", 1),
    ("neuron_migrate.engine.python", "decide_on_tree", "rules decided on Python's tree (treecheck)", 1),
    ("neuron_migrate.engine.python", "lean_text", "the lean pass", 1),
    ("neuron_migrate.engine.python", "parse_module", "LibCST's parse", 1),
    ("neuron_migrate.engine.python", "Analysis", "the scope analysis (of fixed trees too)", 1),
    ("neuron_migrate.engine.python", "decide", "the rules' decisions", 1),
    ("neuron_migrate.engine.python", "fix", "the fixes (check: the imports they orphan)", 1),
    ("neuron_migrate.engine.python", "_place", "placing the findings", 1),
    ("neuron_migrate.files.notebook", "process_notebook", "notebooks (their cells' stages above too)", 1),
    ("neuron_migrate.engine.handlers", "_held", "programs set aside (both passes)", 1),
    ("neuron_migrate.engine.handlers", "_would_change", "whether each would report more", 2),
)


@dataclass
class Stage:
    label: str
    depth: int
    seconds: float = 0.0
    calls: int = 0
    active: int = 0  # calls open now: only the outermost one is timed


def _timed(stage: Stage, function):
    def timed(*args, **kwargs):
        stage.active += 1
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            stage.active -= 1
            if not stage.active:
                stage.seconds += time.perf_counter() - start
                stage.calls += 1
    return timed


def measure(folder: Path, command: str = "check") -> tuple[list[Stage], float, int]:
    """(the stages, the whole run's wall seconds, the tool's exit code) of `neuron-migrate COMMAND --no-cache -j 1 .`
    run in `folder`."""
    stages = []
    with contextlib.ExitStack() as undo:
        for module_name, name, label, depth in STAGES:
            module = import_module(module_name)
            stage = Stage(label, depth)
            stages.append(stage)
            original = getattr(module, name)
            setattr(module, name, _timed(stage, original))
            undo.callback(setattr, module, name, original)
        handlers = import_module("neuron_migrate.engine.handlers")
        handlers.handlers_for.cache_clear()  # it holds the handler functions it found: the timed ones from now on
        undo.callback(handlers.handlers_for.cache_clear)
        from neuron_migrate.cli import entry

        here = os.getcwd()
        argv = sys.argv
        os.chdir(folder)
        sys.argv = ["neuron-migrate", command, "--no-cache", "-j", "1", "."]
        start = time.perf_counter()
        code = 0
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                entry()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        finally:
            took = time.perf_counter() - start
            sys.argv = argv
            os.chdir(here)
    return stages, took, code


def table(stages: list[Stage], took: float, command: str, folder: Path) -> str:
    out = [f"neuron-migrate {command} --no-cache -j 1 over {folder}: {took:.2f} s",
           f"  {'stage':<66} {'s':>6} {'calls':>6}"]
    for stage in stages:
        label = "  " * stage.depth + stage.label
        out.append(f"  {label:<66} {stage.seconds:6.2f} {stage.calls:6d}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> list[Stage]:
    parser = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the code to run the tool over (copied first)")
    parser.add_argument("--command", choices=("check", "rewrite"), default="check")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        raise SystemExit(f"error: no folder at {args.folder}")
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-stages-") as tmp:
        copy = Path(tmp) / args.folder.resolve().name
        writable_copy(args.folder.resolve(), copy)
        stages, took, code = measure(copy, args.command)
    if code not in (0, 1):
        raise SystemExit(f"neuron-migrate {args.command} failed (exit {code})")
    print(table(stages, took, args.command, args.folder))
    return stages


if __name__ == "__main__":
    main()
