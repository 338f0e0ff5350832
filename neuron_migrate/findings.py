"""What every stage reports: findings (something to tell the user) and per-file results."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum


class FixSafety(str, Enum):
    """How far a rule's fix can be trusted.

    safe: behaviour-preserving, applied by `rewrite`.
    unsafe: applied by `rewrite --unsafe-fixes` (or `unsafe-fixes = true`), as ruff applies its unsafe fixes; the
        result deserves a look and is listed for review. Without it the fix is held back and the finding stays.
    manual: no automatic fix; `rewrite` leaves a TODO marker for a person.
    """

    SAFE = "safe"
    UNSAFE = "unsafe"
    MANUAL = "manual"


@dataclass(frozen=True)
class Finding:
    """One thing to tell the user about one place in one file."""

    path: str
    line: int
    col: int
    code: str
    message: str
    fixable: bool = False
    # Where the finding sits inside a container file (a notebook cell), when it does.
    cell: int | None = None
    end_line: int | None = None
    end_col: int | None = None
    # What `rewrite` did about it: "fixed", "marked" (a TODO marker stands above it) or "left"; None from `check`.
    status: str | None = None
    # True: the rule has an unsafe fix this run holds back (`--unsafe-fixes` applies it); None otherwise.
    held_back: bool | None = None

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.col, self.code, self.message)

    def to_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass
class FileResult:
    """The outcome of processing one file.

    `new_bytes` is set only when the file would change; `error` only when the file could not be processed
    (the file is then left alone).
    """

    path: str
    findings: list[Finding] = field(default_factory=list)
    old_bytes: bytes | None = None
    new_bytes: bytes | None = None
    # Rewrites applied, per rule code, and manual items (markers) left for a person.
    applied: dict[str, int] = field(default_factory=dict)
    manual: list[Finding] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None
    # Other files the result depends on (the program a launch script starts, included requirements files): path
    # -> digest of the bytes read, None for a file looked for and not found. The result cache checks them too.
    files_read: dict[str, str | None] = field(default_factory=dict)
    # The suppression comments a handler used, (line, code or "*"); the others are reported as NM901.
    used_suppressions: set[tuple[int, str]] = field(default_factory=set)
    # What the handler went past in a file it processed (a notebook cell that is not Python): told, not a failure.
    warnings: list[str] = field(default_factory=list)
    # a file the run creates (the module of helpers the scripts of a folder share: engine/shared.py)
    created: bool = False

    @property
    def changed(self) -> bool:
        return self.new_bytes is not None and self.new_bytes != self.old_bytes
