"""`--shard K/N`: the part of the discovered files that job K of an N-job CI matrix processes.

A file belongs to shard `1 + hash(path) mod N`, where the path is taken relative to the project root (the nearest
folder above the working folder with `.git`, `pyproject.toml`, `setup.py` or `setup.cfg`, as for the cache;
outside a project, the working folder itself) and written with `/`. So the N shards cover the files exactly once,
whatever folder or spelling (`src`, `./src/`) names them, and a file added to the tree changes no other file's
shard. What else a run reports goes with a path too: a problem met while finding the files (a missing path, a
folder loop) to the shard of its path, and an XLA-stack library's one note (`engine/stack.py`, counted over all
its files, every shard sees them) to the shard of the library's folder; so each is reported once over the N
shards, as an unsharded run reports it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from neuron_migrate.engine.cache import PROJECT_MARKERS

T = TypeVar("T")
SPELLING = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardError(ValueError):
    """A --shard value that is not K/N with 1 <= K <= N; the message says what is accepted."""


@dataclass(frozen=True)
class Shard:
    index: int  # K: 1 .. count
    count: int  # N

    @classmethod
    def parse(cls, text: str) -> "Shard":
        m = SPELLING.match(text)
        if m is None:
            raise ShardError(f"{text!r} is not K/N: give the shard's number and the number of shards, such as "
                             "`--shard 2/4` (the second of four)")
        index, count = int(m.group(1)), int(m.group(2))
        if count < 1:
            raise ShardError(f"{text!r}: the number of shards N must be 1 or more")
        if not 1 <= index <= count:
            raise ShardError(f"{text!r}: the shard number K must be between 1 and N ({count}), both included")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def slug(self) -> str:
        """`2-of-4`: for names (a SARIF category)."""
        return f"{self.index}-of-{self.count}"

    def owns(self, path: str, root: str) -> bool:
        return shard_of(path, root, self.count) == self.index

    def take(self, items: Iterable[T], path: Callable[[T], str], root: str) -> list[T]:
        """The items whose path falls in this shard, in their order."""
        return [item for item in items if self.owns(path(item), root)]


def key(path: str, root: str) -> str:
    """The path relative to `root`, with `/`: what the shard is computed from."""
    return Path(os.path.relpath(os.path.abspath(path), root)).as_posix()


def shard_of(path: str, root: str, count: int) -> int:
    """The shard (1 .. count) a path belongs to."""
    import hashlib  # here: it loads OpenSSL (7 ms), and only `--shard` needs it

    digest = hashlib.sha256(key(path, root).encode("utf-8", "surrogateescape")).digest()
    return 1 + int.from_bytes(digest[:8], "big") % count


def project_root(start: str | None = None) -> str:
    """The folder shard keys are relative to: the nearest project folder above `start` (the working folder)."""
    here = Path(os.path.abspath(start or os.getcwd()))
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return str(folder)
    return str(here)


def split(shard: Shard, targets: list, problems: list, libraries: list, root: str | None = None):
    """(targets, problems, libraries) of this shard: files and problems by their path, libraries by their folder."""
    root = root or project_root()
    return (shard.take(targets, lambda t: t.path, root), shard.take(problems, lambda p: p.path, root),
            shard.take(libraries, lambda lib: lib.root, root))
