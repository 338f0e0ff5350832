"""The ecosystem check: the tool on real public user code, with the goals a pull request is held to.

    python -m bench.ecosystem                         # ../shared/ecosystem beside the clone
    python -m bench.ecosystem --corpus PATH --json
    python -m bench.ecosystem --compare main          # what another commit of the tool does differently

The corpus (one folder per repository, `MANIFEST.tsv` naming each one's commit) is copied to a temporary folder
twice: the original, and the one `neuron-migrate rewrite --unsafe-fixes` migrates (through the installed package,
`python -m neuron_migrate`, never the source tree's path): what a user who opts into every fix gets. Then, per
repository:

- files changed, rewrites (the fixes the run's report counts), markers (the `TODO(neuron-migrate ...)` lines
  added), changed files that still import torch_xla, and lines added per rewrite;
- second-run changes: a second `rewrite` must change nothing;
- compile errors: every changed `.py` file, and every code cell of a changed notebook that compiled before
  (IPython magics and shell lines masked), must compile;
- lint errors introduced: ruff on the original and the migrated file, with the repository's own ruff settings
  where it has them (`ruff.toml`, `.ruff.toml`, `pyproject.toml` with `[tool.ruff]` at its top), `--select E9,F`
  elsewhere; a finding counts when the migrated file has it more often than the original (by code and message,
  line numbers left out, as lines move);
- findings: what `check` still reports after the rewrite;
- held back: the unsafe fixes plain `rewrite` (safe fixes only, the default) holds back, as `check` on the
  original counts them (`[~]`).

The exit code is 1 when a mechanical goal fails (second-run changes, compile errors or lint errors introduced),
0 otherwise, 2 when the corpus is missing or the tool fails to run.

`--compare REV` runs the same on a `git worktree` of REV (the tool imported from it through PYTHONPATH) and prints
only what differs: the table rows that changed, and for each file whose migrated text differs, the diff between
REV's output and this tree's output.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "TODO(neuron-migrate "
DEFAULT_LINT = ("--select", "E9,F")
# the mechanical goals: each must be 0
GOALS = ("second_run_changes", "compile_errors", "lint_introduced")
COLUMNS = (  # (field, header)
    ("files_changed", "changed"),
    ("rewrites", "rewrites"),
    ("markers", "markers"),
    ("still_import_torch_xla", "torch_xla"),
    ("second_run_changes", "2nd run"),
    ("compile_errors", "compile"),
    ("lint_introduced", "lint+"),
    ("findings_after", "check"),
    ("held_back", "held"),
    ("lines_per_rewrite", "lines/rw"),
)
_LINE_NUMBER = re.compile(r"\bline \d+")
_TORCH_XLA = re.compile(r"^\s*(?:import|from)\s+torch_xla\b", re.M)


@dataclass
class Repo:
    name: str
    files_changed: int = 0
    rewrites: int = 0
    markers: int = 0
    still_import_torch_xla: int = 0
    second_run_changes: int = 0
    compile_errors: int = 0
    lint_introduced: int = 0
    findings_after: int = 0
    held_back: int = 0  # unsafe fixes plain `rewrite` would not make
    lines_added: int = 0
    problems: list[str] = field(default_factory=list)  # "path: what" for every goal a file fails

    @property
    def lines_per_rewrite(self) -> float:
        return round(self.lines_added / self.rewrites, 2) if self.rewrites else 0.0


@dataclass
class Run:
    repos: dict[str, Repo]
    outputs: dict[str, bytes]  # the migrated bytes of every changed file, by path in the corpus

    def total(self) -> Repo:
        total = Repo("total")
        for repo in self.repos.values():
            for name, _ in COLUMNS:
                if name != "lines_per_rewrite":
                    setattr(total, name, getattr(total, name) + getattr(repo, name))
            total.lines_added += repo.lines_added
            total.problems += repo.problems
        return total

    def failed(self) -> bool:
        total = self.total()
        return any(getattr(total, goal) for goal in GOALS)


# -- the tool ----------------------------------------------------------------------------------------------------

def tool_command(python: str = sys.executable) -> list[str]:
    return [python, "-m", "neuron_migrate"]


def _tool(command: list[str], args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if "No module named neuron_migrate" in proc.stderr:  # exit 1, as for findings: the figures would all be 0
        raise SystemExit(f"the tool does not start with {command[0]}: {proc.stderr.strip()}")
    if proc.returncode not in (0, 1):
        # 2 is "a file could not be processed": the others still are, and the run is still measured
        print(f"note: `neuron-migrate {args[0]}` exited {proc.returncode}: {proc.stderr.strip()[-500:]}",
              file=sys.stderr)
    return proc


UNSAFE_FIXES = "--unsafe-fixes"


def _rewrite(command: list[str], args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`rewrite --unsafe-fixes ARGS`; a tool from before the option (`--compare` with an older commit) made the
    unsafe fixes without it."""
    proc = _tool(command, ["rewrite", UNSAFE_FIXES, *args], cwd, env)
    if proc.returncode == 2 and "No such option" in proc.stderr and UNSAFE_FIXES in proc.stderr:
        proc = _tool(command, ["rewrite", *args], cwd, env)
    return proc


def _findings(proc: subprocess.CompletedProcess) -> list[dict]:
    return json.loads(proc.stdout).get("findings", []) if proc.stdout.strip() else []


def _files(folder: Path) -> dict[str, bytes]:
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and ".neuron_migrate_cache" not in path.parts:
            out[path.relative_to(folder).as_posix()] = path.read_bytes()
    return out


def writable_copy(corpus: Path, to: Path) -> None:
    """`corpus` copied to `to` (the tool's cache folders left out), every file and folder writable."""
    shutil.copytree(corpus, to, ignore=shutil.ignore_patterns(".neuron_migrate_cache"))
    for path in [to, *to.rglob("*")]:  # the corpus is read-only
        path.chmod(path.stat().st_mode | 0o200)


# -- what is measured --------------------------------------------------------------------------------------------

_MAGIC = re.compile(r"^(\s*)[%!]")


def _cell_sources(data: bytes) -> list[str] | None:
    try:
        notebook = json.loads(data)
    except ValueError:
        return None
    out = []
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            out.append("".join(source) if isinstance(source, list) else source)
    return out


def _masked(cell: str) -> str | None:
    """The cell as Python: IPython's line magics and shell lines become `pass`; a cell magic is no Python."""
    if cell.lstrip().startswith("%%"):
        return None
    return "\n".join(_MAGIC.sub(r"\1pass #", line) for line in cell.splitlines())


def _compiles(source: str, name: str) -> bool:
    try:
        compile(source, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def compile_errors(path: str, before: bytes, after: bytes) -> list[str]:
    """What no longer compiles: the file, or each notebook code cell that compiled before."""
    if path.endswith(".py"):
        if _compiles(after.decode("utf-8", "replace"), path) or not _compiles(before.decode("utf-8", "replace"), path):
            return []
        return [path]
    if path.endswith(".ipynb"):
        old, new = _cell_sources(before), _cell_sources(after)
        if new is None:
            return [f"{path}: not JSON"]
        if old is None or len(old) != len(new):
            return [f"{path}: {len(old or [])} code cells before, {len(new)} after"]
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            ma, mb = _masked(a), _masked(b)
            if ma is not None and mb is not None and _compiles(ma, path) and not _compiles(mb, path):
                out.append(f"{path} (code cell {i + 1})")
        return out
    return []


def imports_torch_xla(path: str, data: bytes) -> bool:
    text = data.decode("utf-8", "replace")
    if path.endswith(".ipynb"):
        text = "\n".join(_cell_sources(data) or [])
    elif not path.endswith(".py"):
        return False
    return bool(_TORCH_XLA.search(text))


def markers(data: bytes) -> int:
    return data.decode("utf-8", "replace").count(MARKER)


def lines_added(before: bytes, after: bytes) -> int:
    a = before.decode("utf-8", "replace").splitlines()
    b = after.decode("utf-8", "replace").splitlines()
    return sum(1 for line in difflib.ndiff(a, b) if line.startswith("+ "))


def _ruff_config(repo: Path) -> Path | None:
    for name in ("ruff.toml", ".ruff.toml"):
        if (repo / name).is_file():
            return repo / name
    pyproject = repo / "pyproject.toml"
    if pyproject.is_file() and re.search(r"^\[tool\.ruff", pyproject.read_text(errors="replace"), re.M):
        return pyproject
    return None


def _ruff() -> list[str]:
    try:
        import ruff  # noqa: F401
    except ImportError:
        found = shutil.which("ruff")
        if found is None:
            raise SystemExit("ruff is not installed: pip install -e '.[test]'") from None
        return [found]
    return [sys.executable, "-m", "ruff"]


def _lint(root: Path, files: list[str], config: Path | None) -> dict[str, Counter]:
    out: dict[str, Counter] = {f: Counter() for f in files}
    if not files:
        return out
    settings = ["--config", str(config)] if config else ["--isolated", *DEFAULT_LINT]
    proc = subprocess.run([*_ruff(), "check", "--no-cache", "--exit-zero", "--output-format", "json", *settings,
                           *files], cwd=root, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise SystemExit(f"ruff failed in {root}: {proc.stderr[-2000:]}")
    for item in json.loads(proc.stdout or "[]"):
        name = Path(item["filename"]).resolve().relative_to(root.resolve()).as_posix()
        key = (item.get("code") or "syntax-error", _LINE_NUMBER.sub("line N", item.get("message", "")))
        out.setdefault(name, Counter())[key] += 1
    return out


def lint_introduced(original: Path, migrated: Path, files: list[str], config_root: Path) -> dict[str, list[str]]:
    """Per file, the ruff findings the migrated file has more often than the original (one entry each)."""
    config = _ruff_config(config_root)
    # a file the run created (a module of shared helpers) has nothing before: all its findings are introduced
    before = _lint(original, [f for f in files if (original / f).is_file()], config)
    after = _lint(migrated, files, config)
    out = {}
    for name in files:
        extra = after.get(name, Counter()) - before.get(name, Counter())
        if extra:
            out[name] = [f"{code} {message}" for (code, message), n in sorted(extra.items()) for _ in range(n)]
    return out


# -- one run -----------------------------------------------------------------------------------------------------

def _repository(path: str) -> str:
    return path.split("/", 1)[0]


def run(corpus: Path, command: list[str], env: dict[str, str] | None = None, jobs: int | None = None) -> Run:
    env = dict(os.environ if env is None else env)
    env.setdefault("NO_COLOR", "1")
    jobs_args = ["-j", str(jobs)] if jobs else []
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-ecosystem-") as tmp:
        original, migrated = Path(tmp) / "original", Path(tmp) / "migrated"
        writable_copy(corpus, original)
        writable_copy(corpus, migrated)
        names = sorted(p.name for p in original.iterdir() if p.is_dir())
        repos = {name: Repo(name) for name in names}
        before = _files(original)
        report = Path(tmp) / "report.json"
        held = _tool(command, ["check", "--no-cache", "-q", *jobs_args, "--output-format", "json", "."], original, env)
        _rewrite(command, ["--no-cache", "-q", *jobs_args, "--report", str(report), "."], migrated, env)
        first = _files(migrated)
        _rewrite(command, ["--no-cache", "-q", *jobs_args, "."], migrated, env)
        second = _files(migrated)
        checked = _tool(command, ["check", "--no-cache", "-q", *jobs_args, "--output-format", "json", "."],
                        migrated, env)
        for finding in _findings(held):
            if finding.get("held_back") and _repository(finding["path"]) in repos:
                repos[_repository(finding["path"])].held_back += 1

        changed = sorted(p for p, data in first.items() if before.get(p) != data)
        for path in changed:
            repo = repos.setdefault(_repository(path), Repo(_repository(path)))
            repo.files_changed += 1
            repo.markers += max(0, markers(first[path]) - markers(before.get(path, b"")))
            repo.lines_added += lines_added(before.get(path, b""), first[path])
            if imports_torch_xla(path, first[path]):
                repo.still_import_torch_xla += 1
            for what in compile_errors(path, before.get(path, b""), first[path]):
                repo.compile_errors += 1
                repo.problems.append(f"{what}: does not compile")
        for path in sorted(set(first) | set(second)):
            if first.get(path) != second.get(path):
                repo = repos.setdefault(_repository(path), Repo(_repository(path)))
                repo.second_run_changes += 1
                repo.problems.append(f"{path}: changed again by a second rewrite")
        if report.is_file():
            for item in json.loads(report.read_text()).get("changed", []):
                name = _repository(item["path"])
                if name in repos:
                    repos[name].rewrites += int(item.get("rewrites") or 0)
        for finding in _findings(checked):
            name = _repository(finding["path"])
            if name in repos:
                repos[name].findings_after += 1

        # the files of `first`: the second run's output must not be what is linted
        for path in changed:
            (migrated / path).write_bytes(first[path])
        for name in sorted({_repository(p) for p in changed}):
            files = [p for p in changed if _repository(p) == name and p.endswith((".py", ".ipynb"))]
            for path, found in lint_introduced(original, migrated, files, original / name).items():
                repos[name].lint_introduced += len(found)
                repos[name].problems += [f"{path}: ruff {what} (introduced)" for what in found]
        return Run(repos, {p: first[p] for p in changed})


# -- output ------------------------------------------------------------------------------------------------------

def _row(repo: Repo) -> list[str]:
    return [repo.name] + [str(getattr(repo, name)) for name, _ in COLUMNS]


def table(result: Run) -> str:
    rows = [["repository"] + [header for _, header in COLUMNS]]
    rows += [_row(repo) for repo in sorted(result.repos.values(), key=lambda r: r.name)]
    rows.append(_row(result.total()))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return "\n".join(lines)


def problems(result: Run) -> str:
    found = result.total().problems
    return "\n".join(["", "failing the mechanical goals:", *(f"  {p}" for p in found)]) if found else ""


def as_json(result: Run) -> dict:
    repos = {name: {**asdict(repo), "lines_per_rewrite": repo.lines_per_rewrite}
             for name, repo in sorted(result.repos.items())}
    total = result.total()
    return {"repositories": repos, "total": {**asdict(total), "lines_per_rewrite": total.lines_per_rewrite},
            "failed": result.failed(), "goals": list(GOALS)}


def compare(base: Run, head: Run, rev: str) -> str:
    out = []
    names = sorted(set(base.repos) | set(head.repos))
    rows = [["repository"] + [header for _, header in COLUMNS]]
    for name in names:
        a, b = base.repos.get(name, Repo(name)), head.repos.get(name, Repo(name))
        if _row(a)[1:] != _row(b)[1:]:
            rows.append([name] + [va if va == vb else f"{va} -> {vb}" for va, vb in zip(_row(a)[1:], _row(b)[1:])])
    if len(rows) > 1:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                for row in rows]
    for path in sorted(set(base.outputs) | set(head.outputs)):
        a, b = base.outputs.get(path), head.outputs.get(path)
        if a == b:
            continue
        old = (a.decode("utf-8", "replace") if a is not None else "").splitlines(keepends=True)
        new = (b.decode("utf-8", "replace") if b is not None else "").splitlines(keepends=True)
        label_a = f"{rev}/{path}" if a is not None else f"{rev}/{path} (unchanged by the tool)"
        label_b = f"head/{path}" if b is not None else f"head/{path} (unchanged by the tool)"
        out.append("".join(difflib.unified_diff(old, new, label_a, label_b)).rstrip("\n"))
    return "\n".join(out) if out else f"no change in the output against {rev}"


def _worktree(rev: str, where: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), rev], check=True)


def _remove_worktree(where: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False,
                   capture_output=True)


def default_corpus() -> Path:
    """`../shared/ecosystem` beside the clone; in a `git worktree`, beside the main checkout."""
    beside = ROOT.parent / "shared" / "ecosystem"
    if beside.is_dir():
        return beside
    proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--path-format=absolute", "--git-common-dir"],
                          capture_output=True, text=True)
    common = Path(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None
    if common is not None and (common.parent.parent / "shared" / "ecosystem").is_dir():
        return common.parent.parent / "shared" / "ecosystem"
    return beside


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ecosystem", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=None,
                        help="the folder of repositories (default: ../shared/ecosystem beside the clone)")
    parser.add_argument("--compare", metavar="REV", help="print only what differs from this commit's output")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs the tool")
    parser.add_argument("-j", "--jobs", type=int, help="the tool's worker processes")
    args = parser.parse_args(argv)
    args.corpus = args.corpus or default_corpus()
    if not args.corpus.is_dir():
        print(f"error: no ecosystem corpus at {args.corpus}: pass --corpus PATH", file=sys.stderr)
        return 2
    head = run(args.corpus, tool_command(args.python), jobs=args.jobs)
    if args.compare:
        with tempfile.TemporaryDirectory(prefix="neuron-migrate-rev-") as tmp:
            where = Path(tmp) / "tree"
            _worktree(args.compare, where)
            try:
                env = dict(os.environ, PYTHONPATH=str(where))
                base = run(args.corpus, tool_command(args.python), env=env, jobs=args.jobs)
            finally:
                _remove_worktree(where)
        if args.json:
            print(json.dumps({"base": as_json(base), "head": as_json(head)}, indent=2))
        else:
            print(compare(base, head, args.compare))
    elif args.json:
        print(json.dumps(as_json(head), indent=2))
    else:
        print(table(head) + problems(head))
    return 1 if head.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
