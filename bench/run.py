"""Benchmark: `neuron-migrate check` and `rewrite` against baselines measured in the same run.

    python -m bench.run                     # full configuration: 5,000 files
    python -m bench.run --files 300 --baseline-share 0.3   # the small configuration CI runs

Prints wall times and the ratios the issue sets goals for:
- cold `check` vs a plain LibCST linter (parse + QualifiedNameProvider over every file), and vs the floor,
  `ast.parse` of every file; all with the same number of processes;
- warm `check` (second run, unchanged tree, cache filled) vs the same baseline;
- `rewrite` of the torch_xla files vs bare LibCST parse + codegen of the same files;
- one 500-line legacy file checked from a fresh process (start-up included).

The LibCST baseline is slow (about 1,000 lines per second per core), so by default it is measured on a
deterministic share of the files and scaled by their line count; `--baseline-share 1` measures all of them.
Every `check` run here must print the same findings: a cache or parallelism bug fails the benchmark.
"""

from __future__ import annotations

import argparse
import ast
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from bench.generate import generate, sized_module


class Time(NamedTuple):
    """Wall seconds, and CPU seconds of this process and its children (less sensitive to a busy machine)."""

    wall: float
    cpu: float

    def __truediv__(self, other: Time) -> Time:  # type: ignore[override]
        return Time(self.wall / other.wall, self.cpu / other.cpu)

    def scaled(self, factor: float) -> Time:
        return Time(self.wall * factor, self.cpu * factor)


@dataclass
class Figures:
    files: int
    lines: int
    legacy_files: int
    jobs: int
    floor: Time
    baseline: Time
    baseline_measured_share: float
    check_cold: Time
    check_warm: Time
    rewrite: Time
    parse_codegen: Time
    single_file: Time

    def ratios(self) -> dict[str, Time]:
        return {
            "baseline / check cold": self.baseline / self.check_cold,
            "check cold / ast.parse floor": self.check_cold / self.floor,
            "baseline / check warm": self.baseline / self.check_warm,
            "rewrite / LibCST parse+codegen": self.rewrite / self.parse_codegen,
        }


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def compiled_tool() -> None:
    """The tool's modules compiled to bytecode, as pip leaves an installed package. From an editable checkout
    where PYTHONDONTWRITEBYTECODE is set (as on the project's machines), every process the benchmark starts would
    compile each module edited since its last compile again: 0.06 s more on a start-up row, measuring the
    checkout rather than the tool. (A read-only installed package is compiled already.)"""
    import compileall

    import neuron_migrate

    try:
        compileall.compile_dir(os.path.dirname(neuron_migrate.__file__), quiet=2)
    except OSError:
        pass


def _timed(fn, *args):
    """(Time, result) of fn(*args); worker processes count once they have exited."""
    wall, cpu = time.perf_counter(), _cpu()
    result = fn(*args)
    return Time(time.perf_counter() - wall, _cpu() - cpu), result


# -- baselines, each run over a list of files in a process pool ----------------------------------------------

def _ast_parse(path: str) -> int:
    with open(path, "rb") as fh:
        ast.parse(fh.read())
    return 1


def _libcst_qualified_names(path: str) -> int:
    """What a plain LibCST linter does per file: parse, then resolve the qualified name of every name node."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, QualifiedNameProvider

    with open(path, "rb") as fh:
        module = cst.parse_module(fh.read())
    names = MetadataWrapper(module).resolve(QualifiedNameProvider)
    return sum(len(q() if callable(q) else q) for q in names.values())  # some are computed on first use


def _libcst_parse_codegen(path: str) -> int:
    import libcst as cst

    with open(path, "rb") as fh:
        data = fh.read()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return len(cst.parse_module(data).bytes)


def _in_pool(fn, paths: list[str], jobs: int) -> None:
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(fn, paths, chunksize=max(1, len(paths) // (jobs * 8))))


def _pool_time(fn, paths: list[str], jobs: int) -> Time:
    return _timed(_in_pool, fn, paths, jobs)[0]


def _run_cli(args: tuple[str, ...], env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "neuron_migrate", *args], capture_output=True, text=True,
                          env={**os.environ, **env})
    if proc.returncode not in (0, 1):
        raise SystemExit(f"neuron-migrate {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def _cli(*args: str, env: dict[str, str]) -> tuple[Time, str]:
    return _timed(_run_cli, args, env)


def _lines(paths: list[Path]) -> int:
    return sum(p.read_bytes().count(b"\n") for p in paths)


def measure(files: int, jobs: int, baseline_share: float, seed: int, workdir: Path) -> Figures:
    compiled_tool()
    repo = workdir / "repo"
    by_kind = generate(repo, files, seed)
    every = sorted(p for paths in by_kind.values() for p in paths)
    legacy = sorted(by_kind["xla"])
    total_lines = _lines(every)
    env = {"NEURON_MIGRATE_CACHE_DIR": str(workdir / "cache")}
    j = str(jobs)

    floor = _pool_time(_ast_parse, [str(p) for p in every], jobs)
    step = max(1, round(1 / baseline_share))
    sample = every[::step]
    baseline = _pool_time(_libcst_qualified_names, [str(p) for p in sample], jobs).scaled(total_lines / _lines(sample))

    check_cold, cold_out = _cli("check", "-j", j, str(repo), env=env)
    check_warm, warm_out = _cli("check", "-j", j, str(repo), env=env)
    _, uncached_out = _cli("check", "--no-cache", "-j", "1", str(repo), env=env)
    if not (cold_out == warm_out == uncached_out):
        raise SystemExit("check printed different findings cold, warm and in one process: a cache or "
                         "parallelism bug")

    copy = workdir / "legacy"
    for p in legacy:
        target = copy / p.relative_to(repo)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, target)
    parse_codegen = _pool_time(_libcst_parse_codegen, [str(p) for p in legacy], jobs)
    rewrite, _ = _cli("rewrite", "--no-cache", "-j", j, str(copy), env=env)

    single = workdir / "single.py"
    single.write_text(sized_module(500, seed), encoding="utf-8")
    single_file = min((_cli("check", "--no-cache", str(single), env=env)[0] for _ in range(3)), key=lambda t: t.wall)

    return Figures(files, total_lines, len(legacy), jobs, floor, baseline, len(sample) / len(every),
                   check_cold, check_warm, rewrite, parse_codegen, single_file)


def render(f: Figures) -> str:
    rows = [
        ("ast.parse floor (every file)", f.floor, ""),
        ("LibCST parse + qualified names (baseline)", f.baseline, "" if f.baseline_measured_share >= 1 else
         f"measured on {f.baseline_measured_share:.0%} of the files, scaled by lines"),
        ("neuron-migrate check, cold", f.check_cold, ""),
        ("neuron-migrate check, warm cache", f.check_warm, ""),
        ("LibCST parse + codegen of torch_xla files", f.parse_codegen, ""),
        ("neuron-migrate rewrite of torch_xla files", f.rewrite, ""),
        ("one 500-line file, check with start-up", f.single_file, "goal: under 0.5 s wall"),
    ]
    out = [f"synthetic repository: {f.files} files, {f.lines} lines, {f.legacy_files} using torch_xla; "
           f"{f.jobs} processes",
           f"  {'':<44} {'wall s':>8} {'CPU s':>8}"]
    out += [f"  {name:<44} {t.wall:8.2f} {t.cpu:8.2f}" + (f"   ({note})" if note else "") for name, t, note in rows]
    goals = {"baseline / check cold": "goal >= 30", "check cold / ast.parse floor": "goal <= about 4",
             "baseline / check warm": "goal >= 100", "rewrite / LibCST parse+codegen": "goal <= 2"}
    out.append(f"  {'ratios':<44} {'wall':>8} {'CPU':>8}")
    for name, value in f.ratios().items():
        out.append(f"  {name:<44} {value.wall:7.1f}x {value.cpu:7.1f}x   ({goals[name]})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> Figures:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--baseline-share", type=float, default=0.1,
                        help="share of the files the LibCST baseline is measured on (default 0.1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="nm-bench-"))
    try:
        figures = measure(args.files, args.jobs, min(1.0, args.baseline_share), args.seed, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(render(figures))
    return figures


if __name__ == "__main__":
    main()
