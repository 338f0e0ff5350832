"""Find the files to process: walk folders, honour .gitignore, skip environments, build output and hidden folders.

Each file gets a kind that decides which handler processes it. Files named on the command line are always
taken (when their kind is known); folders are walked. A `.txt` / `.in` file that a requirements file beside it
or in the folder above includes (`-r requirements/base.txt`, `-c pins.txt`) is a requirements file whatever its
name. A file reached twice (through two arguments or a
symlink) is yielded once; symlinks that leave the tree being walked are not followed; folder loops end.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from neuron_migrate.engine.sources import SourceError, read_bytes, read_regular, size_limit

if TYPE_CHECKING:
    import pathspec

SKIP_DIRS = frozenset({
    "__pycache__", "node_modules", "site-packages", "build", "dist", "venv", "env", "_build",
    "__pypackages__", "htmlcov", ".neuron_migrate_cache",
})

# File kind by name pattern; the first match wins. Handlers register for kinds (see handlers.py).
KINDS: tuple[tuple[str, str], ...] = (
    ("*.py", "python"),
    ("*.ipynb", "notebook"),
    ("requirements*.txt", "requirements"),
    ("constraints*.txt", "requirements"),
    ("requirements*.in", "requirements"),
    ("*requirements.txt", "requirements"),
    ("*.requirements.txt", "requirements"),
    ("pyproject.toml", "pyproject"),
    ("uv.lock", "lockfile"),
    ("poetry.lock", "lockfile"),
    ("pylock.toml", "lockfile"),
    ("pylock.*.toml", "lockfile"),
    ("setup.cfg", "setup-cfg"),
    ("environment.yml", "conda-env"),
    ("environment.yaml", "conda-env"),
    ("Dockerfile", "dockerfile"),
    ("Dockerfile.*", "dockerfile"),
    ("*.Dockerfile", "dockerfile"),
    ("Containerfile", "dockerfile"),
    ("*.sh", "shell"),
    ("*.bash", "shell"),
    ("*accelerate*.yaml", "accelerate-config"),
    ("*accelerate*.yml", "accelerate-config"),
    ("default_config.yaml", "accelerate-config"),
)


def kind_of(path: str | Path) -> str | None:
    name = os.path.basename(str(path))
    for pattern, kind in KINDS:
        if fnmatch.fnmatchcase(name, pattern):
            return kind
    return None


@dataclass(frozen=True)
class Target:
    path: str  # as shown to the user (relative when given relative)
    kind: str
    explicit: bool = False  # named on the command line
    real: str | None = None  # the real path found at discovery: a write checks the file is still there (no link)


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    warning: bool = False  # told, but the run still succeeds (a folder loop skipped)


def _is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir()


def _ignore_spec(directory: Path) -> pathspec.PathSpec | None:
    # a regular file under the size limit (a FIFO would block the run, a link to /dev/zero never ends); a
    # larger one is not read, like one that cannot be read
    data = read_regular(str(directory / ".gitignore"), size_limit(None), whole=True)
    if data is None:
        return None
    return _spec(data.decode("utf-8", "replace").splitlines())


def _spec(lines: list[str]) -> pathspec.PathSpec:
    import pathspec  # here: a check of named files without a .gitignore or an exclude never needs it (start-up)

    return pathspec.PathSpec.from_lines("gitwildmatch", lines)


def discover(paths: Iterable[str], kinds: frozenset[str] | None = None,
             exclude: Iterable[str] = ()) -> tuple[list[Target], list[Problem]]:
    """Targets in a deterministic order (sorted per folder), and the problems met on the way."""
    targets: list[Target] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    exclude_spec = _spec(list(exclude)) if exclude else None

    def accept(shown: str, real: str, kind: str | None, explicit: bool) -> None:
        if kind is None or (kinds is not None and kind not in kinds) or real in seen:
            return
        seen.add(real)
        targets.append(Target(shown, kind, explicit, real))

    for arg in paths:
        p = Path(arg)
        if not os.path.lexists(arg):
            problems.append(Problem(arg, "no such file or directory"))
            continue
        if p.is_dir():
            root_real = os.path.realpath(arg)
            for shown, real, kind in _walk(p, root_real, exclude_spec, problems):
                accept(shown, real, kind, False)
        elif p.is_file():
            accept(arg, os.path.realpath(arg), kind_of(arg), True)
        elif p.is_symlink():
            problems.append(Problem(arg, "broken symbolic link"))
        else:
            problems.append(Problem(arg, "not a regular file"))
    return targets, problems


def _walk(root: Path, root_real: str, exclude_spec, problems: list[Problem]) -> Iterator[tuple[str, str, str | None]]:
    visited: set[str] = set()
    includes = _IncludedRequirements()
    # Stack of (folder, [(spec base, spec), ...]) so nested .gitignore files apply below their folder.
    stack: list[tuple[Path, list[tuple[Path, pathspec.PathSpec]]]] = [(root, [])]
    linked: list[tuple[Path, list[tuple[Path, pathspec.PathSpec]]]] = []  # walked after the real folders
    while stack or linked:
        folder, specs = stack.pop() if stack else linked.pop(0)
        real = os.path.realpath(folder)
        if real in visited:
            if _is_loop(folder, real):
                problems.append(Problem(str(folder), "symbolic link back to a folder that contains it (a loop); "
                                                     "skipped", warning=True))
            continue
        visited.add(real)
        spec = _ignore_spec(folder)
        if spec is not None:
            specs = specs + [(folder, spec)]
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except PermissionError:
            problems.append(Problem(str(folder), "permission denied: cannot list the folder"))
            continue
        except OSError as exc:
            problems.append(Problem(str(folder), f"cannot list the folder: {exc.strerror or exc}"))
            continue
        subdirs = []
        for entry in entries:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()
                is_link = entry.is_symlink()
                is_file = entry.is_file()  # not a pipe, socket or device: reading those blocks or never ends
            except OSError:
                continue
            if _ignored(path, is_dir, specs, root, exclude_spec):
                continue
            if is_link:
                target = os.path.realpath(entry.path)
                if not (target == root_real or target.startswith(root_real + os.sep)):
                    continue  # never follow a link out of the tree
            if is_dir:
                if entry.name.startswith(".") or entry.name in SKIP_DIRS or entry.name.endswith(".egg-info"):
                    continue
                if _is_venv(path):
                    continue
                (linked if is_link else subdirs).append((path, specs))
            elif is_file:
                real_path = os.path.realpath(entry.path)
                kind = kind_of(entry.name)
                if kind is None and entry.name.endswith(INCLUDED_SUFFIXES) and real_path in includes(folder):
                    kind = "requirements"
                yield str(path), real_path, kind
        stack.extend(reversed(subdirs))


INCLUDED_SUFFIXES = (".txt", ".in")
MAX_INCLUDE_DEPTH = 8


class _IncludedRequirements:
    """The real paths of the files that the requirements files of a folder, or of the folder above it, include
    (followed through the included files), computed once per folder."""

    def __init__(self) -> None:
        self._own: dict[str, frozenset[str]] = {}

    def __call__(self, folder: Path) -> frozenset[str]:
        return self._of(str(folder)) | self._of(str(folder.parent))

    def _of(self, folder: str) -> frozenset[str]:
        key = os.path.realpath(folder)
        if key not in self._own:
            try:
                roots = [e.path for e in os.scandir(folder) if kind_of(e.name) == "requirements" and e.is_file()]
            except OSError:
                roots = []
            self._own[key] = frozenset(_follow(roots))
        return self._own[key]


def _follow(roots: list[str]) -> set[str]:
    from neuron_migrate.pin.requirements import included_files

    found: set[str] = set()
    todo, depth = [os.path.realpath(r) for r in roots], 0
    done = set(todo)
    while todo and depth < MAX_INCLUDE_DEPTH:
        nxt = []
        for path in todo:
            try:  # a regular file under the size limit: a FIFO or /dev/zero named by `-r` is not read
                text = read_bytes(path, size_limit("requirements")).decode("utf-8", "replace")
            except SourceError:
                continue
            for target in included_files(path, text):
                found.add(target)
                if target not in done and os.path.isfile(target):
                    done.add(target)
                    nxt.append(target)
        todo, depth = nxt, depth + 1
    return found


def _is_loop(folder: Path, real: str) -> bool:
    """A folder whose real path contains the folder it was reached from."""
    parent = os.path.realpath(folder.parent)
    return parent == real or parent.startswith(real + os.sep)


def _ignored(path: Path, is_dir: bool, specs, root: Path, exclude_spec) -> bool:
    for base, spec in specs:
        rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        if spec.match_file(rel):
            return True
    if exclude_spec is not None:
        rel = path.relative_to(root).as_posix() + ("/" if is_dir else "")
        if exclude_spec.match_file(rel):
            return True
    return False
