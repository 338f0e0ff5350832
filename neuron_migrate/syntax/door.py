"""The door to LibCST's internals: which LibCST the speed-ups are tested with, and when they are active.

The tool reaches into LibCST in two ways, both only from this package:

- it reads internals (private modules, `_codegen`, the field order of `_visit_and_replace_children`), which is
  safe only for the LibCST releases the suite ran against: `install()` checks the installed release against
  `TESTED` and, outside it, makes every part of this package take LibCST's public way instead (slower, same
  results); `installation()` says which (`neuron-migrate doctor` prints it);
- it replaces a few methods of LibCST's classes (code generation for its own states, identity hashing, the
  node checks while its own parser runs). Those replacements are in place only inside the tool's own calls:
  `session()` puts them in on entry and takes them out on exit, so other code in the process (an editor
  server, a pre-commit host, Fixit) sees LibCST exactly as released whenever the tool is not running. A lock
  keeps two threads of the tool from interleaving; nested sessions of one thread share the replacements.

A session is also the state of one file (`Session`): the copies of replacement texts it handed out (parse.py)
and the positions it located (positions.py). Nothing that changes per file is kept in a module global.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterator

# The LibCST releases the suite ran against (keep equal to `libcst` in pyproject.toml; CI runs the floor too).
# 1.0.1 is below: its parser rejects a file mixing \r and \r\n line ends (tests/test_positions.py).
TESTED_FROM, TESTED_BELOW = (1, 1, 0), (1, 10)
TESTED = f">={'.'.join(map(str, TESTED_FROM))},<{'.'.join(map(str, TESTED_BELOW))}"  # ">=1.1.0,<1.10"
STOCK_ENV = "NEURON_MIGRATE_STOCK_LIBCST"  # set to 1: run LibCST unpatched even where the release is tested


@dataclass(frozen=True)
class Installation:
    version: str
    fast: bool  # the speed-ups are used (inside sessions)
    reason: str  # why or why not, for `doctor`


_ABSENT = object()
_PATCHES: list[tuple[type, str, Any, Any]] = []  # (class, attribute, replacement, what the class held: stock)
_installed: Installation | None = None
_lock = threading.RLock()
_depth = 0  # sessions open in the thread holding the lock
_current: contextvars.ContextVar[Session | None] = contextvars.ContextVar("neuron_migrate_syntax", default=None)


def _libcst_version() -> str:
    try:
        from libcst._version import __version__  # what LibCST's packaging writes; metadata costs 30 ms

        return str(__version__)
    except ImportError:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("libcst")
        except PackageNotFoundError:  # an unpacked LibCST without metadata: nothing to check against
            return "unknown"


def _tested(version: str) -> bool:
    """Whether LibCST `version` is in TESTED, as packaging's `Version in SpecifierSet` says. A final release in
    numbers only ("1.8.2") is compared with the bounds here, its numbers padded with zeros (1.10 is 1.10.0); any
    other spelling (a pre-release, a local build) is left to packaging, imported for it (5 ms of start-up)."""
    parts = version.split(".")
    if all(p.isascii() and p.isdigit() for p in parts):
        numbers = tuple(map(int, parts))
        width = max(len(numbers), len(TESTED_FROM), len(TESTED_BELOW))

        def padded(release: tuple[int, ...]) -> tuple[int, ...]:
            return release + (0,) * (width - len(release))

        return padded(TESTED_FROM) <= padded(numbers) < padded(TESTED_BELOW)
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) in SpecifierSet(TESTED)
    except InvalidVersion:
        return False


def install(patched: bool = True) -> Installation:
    """Decide whether the tool's calls use the speed-ups: only for a LibCST release in `TESTED`, and not when
    `patched` is False or NEURON_MIGRATE_STOCK_LIBCST=1. Called once by the engine; call again to change it
    (tests compare both ways). Nothing is replaced here: sessions do that."""
    global _installed
    with _lock:
        if _depth:
            raise RuntimeError("syntax.install() inside a session of the tool")
        found = _libcst_version()
        tested = _tested(found)
        if not patched:
            _installed = Installation(found, False, "LibCST unpatched (asked for)")
        elif os.environ.get(STOCK_ENV, "") not in ("", "0"):
            _installed = Installation(found, False, f"LibCST unpatched ({STOCK_ENV} is set)")
        elif not tested:
            _installed = Installation(found, False, f"LibCST {found} is outside the tested range {TESTED}: "
                                                    "running it unpatched (slower, same results)")
        else:
            _installed = Installation(found, True, f"LibCST {found}, tested ({TESTED}): speed-ups on")
        return _installed


def installation() -> Installation:
    return _installed if _installed is not None else install()


def fast() -> bool:
    """The LibCST internals may be used: the release is tested and the speed-ups are not turned off."""
    installed = _installed if _installed is not None else install()
    return installed.fast


def register(owner: type, name: str, replacement: Any) -> None:
    """A method of LibCST's to replace inside sessions (modules of this package register theirs on import)."""
    _PATCHES.append((owner, name, replacement, owner.__dict__.get(name, _ABSENT)))


def register_now(owner: type, name: str, replacement: Any) -> None:
    """`register`, from inside a session of this thread: the replacement is in place at once, and taken out with
    the others when the outermost session ends."""
    with _lock:
        register(owner, name, replacement)
        if patched():
            setattr(owner, name, replacement)


def _put_in() -> None:
    for owner, name, replacement, _ in _PATCHES:
        setattr(owner, name, replacement)


def _take_out() -> None:
    for owner, name, _, stock in reversed(_PATCHES):
        if stock is _ABSENT:
            if name in owner.__dict__:
                delattr(owner, name)
        else:
            setattr(owner, name, stock)


def patched() -> bool:
    """LibCST's methods are replaced right now (a session of the tool is open and the speed-ups are on)."""
    return _depth > 0 and fast()


class Session:
    """The state of one file, while the tool works on it; `current()` gives the open one."""

    def __init__(self) -> None:
        self.handed_out: dict[tuple[str, str], int] = {}  # parse.py: copies of a replacement text used here
        self.located: Any = None  # positions.py: the statements of the file, located on demand


def current() -> Session | None:
    return _current.get()


@contextlib.contextmanager
def session() -> Iterator[Session]:
    """One file's work: a new `Session`, and LibCST's methods replaced (when `fast()`) until the block ends,
    whether it ends by a return or an exception. Usable as a decorator too."""
    global _depth
    state = Session()
    with _lock:
        fast_now = fast()
        if _depth == 0 and fast_now:
            _put_in()
        _depth += 1
        token = _current.set(state)
        try:
            yield state
        finally:
            _current.reset(token)
            _depth -= 1
            if _depth == 0 and fast_now:
                _take_out()
