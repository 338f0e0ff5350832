"""`--hook`: the paths are file names handed over by a pre-commit hook.

Then no path means nothing to do (not "the current folder"), a file that no longer exists (deleted or
renamed in the commit) is skipped without an error, and `--exclude` patterns apply to the named files too,
so files outside the configured paths are left alone.
"""

from __future__ import annotations

import os
from pathlib import PurePath
from typing import Iterable

import pathspec


def hook_paths(paths: Iterable[str], exclude: Iterable[str]) -> tuple[str, ...]:
    spec = pathspec.PathSpec.from_lines("gitwildmatch", list(exclude))
    return tuple(p for p in paths if os.path.isfile(p) and not spec.match_file(_relative(p)))


def _relative(path: str) -> str:
    rel = os.path.relpath(os.path.abspath(path))
    return PurePath(rel).as_posix()
