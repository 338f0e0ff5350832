"""`rewrite --output-dir DIR`: a migrated copy of the tree beside the untouched source.

The copy holds every file of the source folders (version-control folders, caches and virtual environments
left out) with the migrated files written over it. DIR may not lie inside a source folder (nor a source
inside DIR), and nothing is written through a symbolic link that leads out of DIR.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from neuron_migrate.engine.cache import CACHE_DIR_NAME
from neuron_migrate.engine import shared
from neuron_migrate.engine.discover import Problem
from neuron_migrate.engine.runner import Run
from neuron_migrate.engine.sources import write_atomic

NOT_COPIED = (".git", ".hg", ".svn", "__pycache__", CACHE_DIR_NAME, ".venv", ".tox", ".nox", ".mypy_cache",
              ".pytest_cache", ".ruff_cache")


class OutputDirError(Exception):
    """The output folder cannot be used; the message says why. Nothing was written."""


@dataclass(frozen=True)
class Tree:
    root: Path  # the folder the source paths are taken relative to (resolved)
    out: Path  # the output folder (resolved)
    paths: tuple[str, ...]

    def destination(self, path: str) -> Path:
        return self.out / Path(os.path.realpath(path)).relative_to(self.root)


def plan(paths: tuple[str, ...], output_dir: str) -> Tree:
    """Check that `output_dir` can receive a copy of `paths`; raise OutputDirError when it cannot."""
    real = [Path(os.path.realpath(p)) for p in paths if os.path.exists(p)]
    if not real:
        raise OutputDirError("none of the paths to rewrite exists")
    out = Path(os.path.realpath(output_dir))
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"{output_dir} exists and is not a folder")
    roots = [p if p.is_dir() else p.parent for p in real]
    root = Path(os.path.commonpath([str(r) for r in roots]))
    for source in [root, *real]:
        if out == source or source in out.parents:
            raise OutputDirError(f"{output_dir} is inside the source tree {source}; choose a folder outside it")
        if out in source.parents:
            raise OutputDirError(f"the source {source} is inside {output_dir}; choose a folder that does not "
                                 "contain the code being migrated")
    return Tree(root, out, paths)


def write_tree(tree: Tree, run: Run) -> None:
    """Copy the source tree to the output folder, then write the migrated files there.

    Files that cannot be copied or written become errors of the run; the source is never touched.
    """
    tree.out.mkdir(parents=True, exist_ok=True)
    for path in tree.paths:
        real = Path(os.path.realpath(path))
        target = tree.destination(path)
        if real.is_dir():
            _copy_folder(tree, real, target, run)
        elif real.is_file():
            _copy_reporting(tree, real, target, run)
    failed: set[str] = set()  # the folders whose module of shared helpers could not be written (engine/shared.py)
    for result in shared.written_first(run.changed):
        assert result.new_bytes is not None
        if shared.without_module(result, failed):
            result.error = shared.NOT_WRITTEN
            continue
        target = tree.destination(result.path)
        try:
            _check_inside(tree, target)
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(str(target), result.new_bytes)
        except (OutputDirError, OSError) as exc:
            result.error = f"could not write the migrated copy: {_reason(exc)}"
            if result.created:
                failed.add(os.path.dirname(result.path))


def _check_inside(tree: Tree, target: Path) -> None:
    resolved = Path(os.path.realpath(target))
    if resolved != tree.out and tree.out not in resolved.parents:
        raise OutputDirError(f"{target} leads out of the output folder through a symbolic link; not written")


def _reason(exc: Exception) -> str:
    return str(getattr(exc, "strerror", None) or exc)


def _copy_reporting(tree: Tree, source: Path, target: Path, run: Run) -> None:
    try:
        _copy(tree, source, target)
    except (OutputDirError, OSError) as exc:
        run.problems.append(Problem(str(source), f"not copied to the output folder: {_reason(exc)}"))


def _copy_folder(tree: Tree, source: Path, target: Path, run: Run) -> None:
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in NOT_COPIED and not (Path(folder, d) / "pyvenv.cfg").is_file()]
        here = target / Path(folder).relative_to(source)
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = [d for d in dirs if d not in links]
        for name in sorted(files + links):
            _copy_reporting(tree, Path(folder, name), here / name, run)


def _copy(tree: Tree, source: Path, target: Path) -> None:
    """Copy one file (a symbolic link as a link) after checking that the folder it goes to is inside DIR."""
    _check_inside(tree, target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or (source.is_symlink() and target.exists()):
        target.unlink()
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    else:
        shutil.copy2(source, target)
