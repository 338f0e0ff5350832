"""Benchmark on real code: the Python sources of the libraries Neuron training code is built from.

    python -m bench.real                          # the real configuration (about 1,000 files, 390 k lines)
    python -m bench.real --packages accelerate,torch.distributed --share 0.2 --baseline-share 0.25
                                                  # the small slice tests/test_bench.py runs

The corpus, built offline once the packages are in the cache folder (`--cache`, default
`~/.cache/neuron-migrate/bench`; each is fetched with `pip download --no-deps` when absent, or copied from
`--sources` where a folder of downloads is given):

- the sdists of accelerate, Lightning, optimum-neuron and transformers (of transformers, the modules that mention
  XLA; `--transformers all` takes every module, 1.2 M lines);
- the Python files of the torch_xla 2.9 wheel;
- torch's `distributed` package, from the installed torch.

torch_xla and optimum-neuron are XLA-stack libraries, accelerate, Lightning and transformers multi-backend ones:
`check` sets their files aside as dependencies (engine/stack.py) and reads none of them. Measured that way they
would cost nothing, and the figures would not describe analysis. So the benchmark measures them as plain code: the
`__init__.py` of their top-level package (`torch_xla/`, `optimum/neuron/`, `accelerate/`, ...) is renamed to
`__init___as_code.py`, which makes the folder no package the library table knows, while every file is still there (the renamed one included) and every import in it still names
torch_xla. The run fails if `check` still reports a library set aside.

With `--user-code DIR` the corpus is a folder of user code instead (`--user-code ../shared/ecosystem`: public
training scripts, tutorials and their notebooks), as it is: its Python files that Python parses, its notebooks, and
every other file the tool reads (launch scripts, requirements); the floor and the baselines read the Python files
and the notebooks' code cells (IPython's `%` and `!` lines left out), and `ruff check --select ALL` runs on the same
files, a row of its own.

One run prints, with the same number of processes for everything, wall and CPU time of:
the `ast.parse` floor, the LibCST parse + qualified-names baseline (measured on a share of the files and scaled
by lines), bare LibCST parse + codegen (of every file and of the legacy files: those that mention torch_xla),
`check` cold, warm and once more in one process without the cache (the three must agree), `rewrite` of the legacy
files, one real ~500-line legacy file checked from a fresh process (start-up included, best of three), and the
peak memory (max RSS) of the largest process of the `check` and `rewrite` runs.

One more row says how much of the floor goal (`check` within 4x of `ast.parse`) a check that decides on Python's
tree has left for its rules: `ast.parse` and then what issue 33's design builds before any rule decides, the names
resolved (engine/treenames.py) and the code paths (engine/treepaths.py), for every file, in a worker pool with no
start-up, project model, notebook reading or output. Every file counts, where `check` builds them only for the
files the pre-filters keep: it is the cost of that step at its largest, not a bound below the tool.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bench.run import (Time, _ast_parse, _libcst_parse_codegen, _libcst_qualified_names, _lines, _pool_time, _timed,
                       compiled_tool)

SDISTS = {  # name as given to --packages -> (pip name, version, the folder inside the sdist that holds the sources)
    "accelerate": ("accelerate", "1.15.0", "src/accelerate"),
    "lightning": ("lightning", "2.6.6", "src/lightning"),
    "optimum-neuron": ("optimum-neuron", "0.4.5", "optimum"),
    "transformers": ("transformers", "5.24.0", "src/transformers"),
}
TORCH_XLA = ("torch_xla", "2.9.0")
PACKAGES = (*SDISTS, "torch_xla", "torch.distributed")
# The top-level package markers of the XLA-stack libraries, renamed so their files are measured as plain code.
RENAMED = "__init___as_code.py"
_FINDING_LINE = re.compile(r"^\S.*:\d+:\d+: NM\d{3} ", re.M)  # a finding's first line in the default output
DEFAULT_CACHE = Path(os.environ.get("NEURON_MIGRATE_BENCH_CACHE", Path.home() / ".cache" / "neuron-migrate" / "bench"))


# -- the corpus ------------------------------------------------------------------------------------------------

def _download(args: list[str], cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), *args],
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"pip download {' '.join(args)} failed; put the file in {cache} by hand:\n{proc.stderr[-2000:]}")


def _archive(cache: Path, stem: str, suffix: str, sources: Path | None) -> Path | None:
    for folder in (cache, sources):
        if folder is not None:
            found = sorted(folder.glob(f"{stem}*{suffix}"))
            if found:
                if folder != cache:
                    cache.mkdir(parents=True, exist_ok=True)
                    shutil.copy(found[0], cache / found[0].name)
                    return cache / found[0].name
                return found[0]
    return None


def fetch(name: str, cache: Path, sources: Path | None) -> Path:
    """The sdist or wheel of `name` in the cache, fetched with pip when absent."""
    if name == "torch_xla":
        dist, version = TORCH_XLA
        stem, suffix = f"{dist}-{version}-", ".whl"
        args = ["--only-binary", ":all:", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                f"{dist}=={version}"]
    else:
        dist, version, _ = SDISTS[name]
        stem, suffix = f"{dist.replace('-', '_')}-{version}", ".tar.gz"
        args = ["--no-binary", ":all:", f"{dist}=={version}"]
    found = _archive(cache, stem, suffix, sources) or _archive(cache, f"{dist}-{version}", suffix, sources)
    if found is None:
        _download(args, cache)
        found = _archive(cache, stem, suffix, None) or _archive(cache, f"{dist}-{version}", suffix, None)
    if found is None:
        raise SystemExit(f"{name}: pip download left no {stem}*{suffix} in {cache}")
    return found


def _mentions_xla(data: bytes) -> bool:
    return b"xla" in data.lower()


def build(root: Path, packages: list[str], cache: Path, sources: Path | None, transformers_all: bool) -> None:
    """Write the corpus's Python files under root/<package>/..."""
    for name in packages:
        target = root / name
        if name == "torch.distributed":
            spec = importlib.util.find_spec("torch")  # located, not imported
            if spec is None or spec.origin is None:
                raise SystemExit("torch.distributed: torch is not installed in this interpreter")
            base = Path(spec.origin).parent
            for path in sorted((base / "distributed").rglob("*.py")):
                _write(target / "torch" / path.relative_to(base), path.read_bytes())
        elif name == "torch_xla":
            with zipfile.ZipFile(fetch(name, cache, sources)) as whl:
                for info in whl.infolist():
                    if info.filename.startswith("torch_xla/") and info.filename.endswith(".py"):
                        _write(target / info.filename, whl.read(info))
        else:
            _, _, inner = SDISTS[name]
            with tarfile.open(fetch(name, cache, sources)) as sdist:
                for member in sdist.getmembers():
                    parts = member.name.split("/", 1)
                    if not member.isfile() or len(parts) < 2 or not parts[1].startswith(inner + "/") \
                            or not member.name.endswith(".py"):
                        continue
                    data = sdist.extractfile(member).read()
                    if name == "transformers" and not transformers_all and not _mentions_xla(data):
                        continue
                    _write(target / parts[1], data)
    as_plain_code(root)


def as_plain_code(root: Path) -> None:
    """Rename the `__init__.py` that makes a folder a package of the library table (the XLA-stack and the
    multi-backend libraries), until no file under root belongs to one: `check` reads them then as plain code."""
    from neuron_migrate.engine.stack import Finder

    while True:
        roots = set()
        finder = Finder()
        for path in root.rglob("*.py"):
            found = finder.library_of(str(path))
            if found is not None:
                roots.add(Path(found.root))
        marked = [r / "__init__.py" for r in roots if (r / "__init__.py").exists()]
        if not marked:
            return
        for init in marked:
            init.rename(init.with_name(RENAMED))


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _share(paths: list[Path], share: float) -> list[Path]:
    step = max(1, round(1 / share))
    return paths[::step]


# -- the run ---------------------------------------------------------------------------------------------------

@dataclass
class RealFigures:
    packages: list[str]
    files: int
    lines: int
    legacy_files: int
    legacy_lines: int
    jobs: int
    floor: Time
    baseline: Time
    baseline_measured_share: float
    parse_codegen: Time
    check_cold: Time
    check_warm: Time
    check_json: Time
    legacy_parse_codegen: Time
    rewrite: Time
    single_file: Time
    single_lines: int
    check_peak_mb: float
    rewrite_peak_mb: float
    findings: int
    ruff: Time | None = None  # `ruff check --select ALL` of the same files (user code only)
    notebooks: int = 0
    names_and_paths: Time | None = None  # ast.parse, the names and the code paths on Python's tree, every file

    def ratios(self) -> dict[str, tuple[Time, str]]:
        ruff = {"check cold / ruff check --select ALL": (self.check_cold / self.ruff, "goal <= 3")} \
            if self.ruff is not None else {}
        return {**ruff,
            "baseline / check cold": (self.baseline / self.check_cold, "goal >= 30"),
            "check cold / ast.parse floor": (self.check_cold / self.floor, "goal <= 4"),
            **({"names + code paths on Python's tree / floor": (self.names_and_paths / self.floor,
                                                                "of the 4 the floor goal allows")}
               if self.names_and_paths is not None else {}),
            "check cold / LibCST parse+codegen": (self.check_cold / self.parse_codegen, ""),
            "baseline / check warm": (self.baseline / self.check_warm, "goal >= 300"),
            "rewrite / LibCST parse+codegen (legacy)": (self.rewrite / self.legacy_parse_codegen, "goal <= 2"),
        }


def _cli(args: list[str], env: dict[str, str], rss: Path) -> tuple[Time, str, float]:
    """(time, stdout, peak RSS in MB of the CLI process and its workers).

    The CLI's own peak is its VmHWM, which starts afresh at exec: `ru_maxrss` of a process keeps the peak of the
    process it was forked from (a test run of 370 MB made every CLI "337 MB"). Its workers are forked from the CLI
    itself, so `RUSAGE_CHILDREN` holds theirs."""
    code = ("import atexit, re, resource, sys, runpy\n"
            "def _peak():\n"
            "    status = open('/proc/self/status').read() if sys.platform == 'linux' else ''\n"
            "    found = re.search(r'VmHWM:\\s+(\\d+)', status)\n"
            "    own = int(found.group(1)) if found else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "    kb = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
            f"    open({str(rss)!r}, 'w').write(str(kb))\n"
            "atexit.register(_peak)\n"
            "sys.argv = ['neuron-migrate', *sys.argv[1:]]\n"
            "runpy.run_module('neuron_migrate', run_name='__main__')\n")

    def run():
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                              env={**os.environ, **env})
        if proc.returncode not in (0, 1):
            raise SystemExit(f"neuron-migrate {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return proc.stdout

    took, out = _timed(run)
    return took, out, int(rss.read_text()) / 1024


def _parses(path: Path) -> bool:
    try:
        compile(path.read_bytes(), str(path), "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def user_code(source: Path, root: Path, cells: Path) -> int:
    """Copy the user code of `source` to `root`: every file but the Python files Python does not parse (Python 2
    scripts, templates) and the tool's cache; each notebook's code cells, as one Python file, to `cells` (for the
    floor and the baselines). Returns the number of notebooks."""
    notebooks = 0
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.is_symlink() or ".neuron_migrate_cache" in path.parts:
            continue
        if path.suffix == ".py" and not _parses(path):
            continue
        _write(root / path.relative_to(source), path.read_bytes())
        if path.suffix == ".ipynb":
            try:
                cells_of = json.loads(path.read_bytes()).get("cells", [])
            except (ValueError, AttributeError):
                continue
            code = []
            for cell in cells_of if isinstance(cells_of, list) else []:
                text = cell.get("source", "") if isinstance(cell, dict) and cell.get("cell_type") == "code" else ""
                text = "".join(text) if isinstance(text, list) else str(text)
                code += [line for line in text.splitlines() if not line.lstrip().startswith(("%", "!"))]
            target = cells / path.relative_to(source).with_suffix(".py")
            _write(target, ("\n".join(code) + "\n").encode())
            if _parses(target):
                notebooks += 1
            else:
                target.unlink()
    return notebooks


def _names_and_paths(path: str) -> int:
    """Python's parse of the file, its names resolved and its code paths walked, as a check deciding on Python's
    tree builds them before any rule decides (engine/treenames.py, engine/treepaths.py)."""
    from neuron_migrate.engine.sources import decode
    from neuron_migrate.engine.treenames import TreeNames
    from neuron_migrate.engine.treepaths import TreePaths

    with open(path, "rb") as fh:
        text = decode(fh.read()).text
    TreePaths(TreeNames(ast.parse(text), text), program=True)
    return 1


def _ruff_time(root: Path) -> Time:
    """`ruff check --select ALL` of the tree (its Python files and notebooks), without its cache."""
    def run():
        proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "ALL", "--no-cache", "--isolated",
                               "--exit-zero", "-q", str(root)], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"ruff failed: {proc.stderr[-2000:]}")
    return _timed(run)[0]


def measure(root: Path, workdir: Path, jobs: int, baseline_share: float, packages: list[str],
            cells: Path | None = None) -> RealFigures:
    compiled_tool()
    every = sorted(root.rglob("*.py"))
    legacy = [p for p in every if b"torch_xla" in p.read_bytes()]
    # the floor and the baselines also read the notebooks' code (user code), the tool's runs the tree
    every_code = every + (sorted(cells.rglob("*.py")) if cells is not None else [])
    total_lines = _lines(every_code)
    env = {"NEURON_MIGRATE_CACHE_DIR": str(workdir / "cache")}
    rss = workdir / "rss"
    j = str(jobs)

    floor = _pool_time(_ast_parse, [str(p) for p in every_code], jobs)
    on_python_tree = _pool_time(_names_and_paths, [str(p) for p in every_code], jobs)
    sample = _share(every_code, baseline_share)
    baseline = _pool_time(_libcst_qualified_names, [str(p) for p in sample], jobs).scaled(total_lines / _lines(sample))
    parse_codegen = _pool_time(_libcst_parse_codegen, [str(p) for p in every_code], jobs)
    ruff = _ruff_time(root) if cells is not None else None

    # `check` as a developer, a pre-commit hook or CI runs it (the default output); JSON and SARIF also carry each
    # finding's fix, which takes a rewrite pass of the files with fixable findings: measured on its own row.
    check_cold, cold_out, check_peak = _cli(["check", "-j", j, str(root)], env, rss)
    check_warm, warm_out, _ = _cli(["check", "-j", j, str(root)], env, rss)
    _, uncached_out, _ = _cli(["check", "--no-cache", "-j", "1", str(root)], env, rss)
    if not (cold_out == warm_out == uncached_out):
        raise SystemExit("check printed different findings cold, warm and in one process: a cache or "
                         "parallelism bug")
    check_json, json_out, json_peak = _cli(["check", "--no-cache", "-j", j, "--format", "json", str(root)], env, rss)
    check_peak = max(check_peak, json_peak)
    report = json.loads(json_out)
    if len(report["findings"]) != len(_FINDING_LINE.findall(cold_out)):
        raise SystemExit("check printed another number of findings in JSON than in its default output")
    if report.get("libraries") and cells is None:
        raise SystemExit(f"files were set aside as XLA-stack libraries, not measured: {report['libraries']}")

    copy = workdir / "legacy"
    for p in legacy:
        _write(copy / p.relative_to(root), p.read_bytes())
    legacy_parse_codegen = _pool_time(_libcst_parse_codegen, [str(p) for p in legacy], jobs)
    rewrite, _, rewrite_peak = _cli(["rewrite", "--no-cache", "-j", j, str(copy)], env, rss)

    sizes = sorted((abs(p.read_bytes().count(b"\n") - 500), str(p)) for p in legacy) or \
        sorted((abs(p.read_bytes().count(b"\n") - 500), str(p)) for p in every)
    single = Path(sizes[0][1])
    single_file = min((_cli(["check", "--no-cache", str(single)], env, rss)[0] for _ in range(3)),
                      key=lambda t: t.wall)

    return RealFigures(packages, len(every), total_lines, len(legacy), _lines(legacy), jobs, floor, baseline,
                       len(sample) / len(every_code), parse_codegen, check_cold, check_warm, check_json,
                       legacy_parse_codegen,
                       rewrite, single_file, single.read_bytes().count(b"\n"), check_peak, rewrite_peak,
                       len(report.get("findings", [])), ruff, len(every_code) - len(every), on_python_tree)


def render(f: RealFigures) -> str:
    rows = [
        ("ast.parse floor (every file)", f.floor, ""),
        *([("ast.parse + names + code paths (every file)", f.names_and_paths,
            "Python's tree as a check builds it, no rule")] if f.names_and_paths is not None else []),
        ("LibCST parse + qualified names (baseline)", f.baseline, "" if f.baseline_measured_share >= 1 else
         f"measured on {f.baseline_measured_share:.0%} of the files, scaled by lines"),
        ("LibCST parse + codegen (every file)", f.parse_codegen, ""),
        ("neuron-migrate check, cold", f.check_cold, f"{f.findings} findings"),
        ("neuron-migrate check, warm cache", f.check_warm, ""),
        ("neuron-migrate check --format json, cold", f.check_json, "with each finding's fix: a rewrite pass"),
        ("LibCST parse + codegen of legacy files", f.legacy_parse_codegen, ""),
        ("neuron-migrate rewrite of legacy files", f.rewrite, ""),
        (f"one {f.single_lines}-line file, check with start-up", f.single_file, "goal: under 0.25 s wall"),
    ]
    if f.ruff is not None:
        after = next(i for i, row in enumerate(rows) if row[0] == "LibCST parse + codegen (every file)") + 1
        rows.insert(after, ("ruff check --select ALL", f.ruff, "the same files, without its cache"))
    notebooks = f" and the code of {f.notebooks} notebooks" if f.notebooks else ""
    out = [f"real code ({', '.join(f.packages)}): {f.files} files{notebooks}, {f.lines} lines; {f.legacy_files} legacy files "
           f"(mention torch_xla), {f.legacy_lines} lines; {f.jobs} processes",
           f"  {'':<46} {'wall s':>8} {'CPU s':>8}"]
    out += [f"  {name:<46} {t.wall:8.2f} {t.cpu:8.2f}" + (f"   ({note})" if note else "") for name, t, note in rows]
    out.append(f"  {'ratios':<46} {'wall':>8} {'CPU':>8}")
    for name, (value, goal) in f.ratios().items():
        out.append(f"  {name:<46} {value.wall:7.1f}x {value.cpu:7.1f}x" + (f"   ({goal})" if goal else ""))
    out.append(f"  {'peak memory (max RSS), largest process':<46} check {f.check_peak_mb:.0f} MB, rewrite "
               f"{f.rewrite_peak_mb:.0f} MB   (goal: under 150 MB per worker)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> RealFigures:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--packages", default=",".join(PACKAGES),
                        help=f"comma-separated, among {', '.join(PACKAGES)} (default: all)")
    parser.add_argument("--share", type=float, default=1.0,
                        help="measure a deterministic share of the corpus's files (default 1: all)")
    parser.add_argument("--transformers", choices=("xla", "all"), default="xla",
                        help="transformers modules taken: those that mention XLA (default) or all")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--baseline-share", type=float, default=0.1,
                        help="share of the files the LibCST baseline is measured on (default 0.1)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder of the downloaded packages")
    parser.add_argument("--sources", type=Path, default=None,
                        help="a folder of already downloaded sdists and wheels, copied into the cache")
    parser.add_argument("--keep", type=Path, default=None, help="build the corpus here and keep it")
    parser.add_argument("--user-code", type=Path, default=None,
                        help="measure this folder of user code (../shared/ecosystem) instead of the libraries")
    args = parser.parse_args(argv)
    packages = [p.strip() for p in args.packages.split(",") if p.strip()]
    unknown = sorted(set(packages) - set(PACKAGES))
    if unknown:
        parser.error(f"unknown packages: {', '.join(unknown)}")
    workdir = Path(tempfile.mkdtemp(prefix="nm-bench-real-"))
    if args.user_code is not None:
        try:
            root, cells = workdir / "corpus", workdir / "cells"
            user_code(args.user_code, root, cells)
            figures = measure(root, workdir, args.jobs, min(1.0, args.baseline_share),
                              [f"user code of {args.user_code.name}"], cells)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(render(figures))
        return figures
    try:
        root = args.keep or workdir / "corpus"
        if not root.exists() or not any(root.rglob("*.py")):
            build(root, packages, args.cache, args.sources, args.transformers == "all")
        if args.share < 1:
            keep = set(_share(sorted(root.rglob("*.py")), args.share))
            sliced = workdir / "slice"
            for p in keep:
                _write(sliced / p.relative_to(root), p.read_bytes())
            root = sliced
        figures = measure(root, workdir, args.jobs, min(1.0, args.baseline_share), packages)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(render(figures))
    return figures


if __name__ == "__main__":
    main()
