"""Shared test helpers: run the engine on text, run the CLI in a subprocess."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_migrate.engine.python import process_python
from neuron_migrate.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def for_this_python(cases: dict[str, str]) -> dict[str, str]:
    """The written cases this Python parses: `except*` needs 3.11 (on 3.10, which the tool runs on too, no file
    holds it)."""
    if sys.version_info >= (3, 11):
        return cases
    return {name: text for name, text in cases.items() if "except*" not in text}


def rewrite_bytes(data: bytes, path: str = "case.py", **settings) -> bytes | None:
    """The rewritten bytes, or None when the file would not change: as `rewrite --unsafe-fixes` writes them
    (every rule's edit); `unsafe_fixes=False` gives plain `rewrite`'s output."""
    settings.setdefault("unsafe_fixes", True)
    result = process_python(path, data, Settings(**settings), True)
    return result.new_bytes if result.changed else None


def rewrite_text(text: str, **settings) -> str:
    out = rewrite_bytes(text.encode(), **settings)
    return text if out is None else out.decode()


def check_codes(text: str, **settings) -> list[str]:
    result = process_python("case.py", text.encode(), Settings(**settings), False)
    return [f.code for f in result.findings]


def cli(*args: str, cwd: str | os.PathLike | None = None, env: dict | None = None,
        input: str | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "neuron_migrate", *args], cwd=cwd, env=full_env, input=input,
                          capture_output=True, text=True, timeout=600)


SWEEP_REPORT = pytest.StashKey[list]()  # lines printed at the end of the run (sweep sizes)


def assert_other_lines_kept(data: bytes, is_idiom: list[bool], out: bytes) -> None:
    """Every line of `data` not flagged as an idiom comes back byte for byte (newline included) and in order;
    the rewrite may only change idiom lines and insert lines around them. A BOM belongs to the file, not to its
    first line (a new import may come before that line): it is compared apart."""
    bom = b"\xef\xbb\xbf"
    assert data.startswith(bom) == out.startswith(bom), "the BOM was not kept"
    data, out = data.removeprefix(bom), out.removeprefix(bom)
    lines = data.splitlines(keepends=True)
    assert len(lines) == len(is_idiom)
    kept = [line for line, idiom in zip(lines, is_idiom) if not idiom]
    out_lines = out.splitlines(keepends=True)
    missing = [line for line in kept if line not in out_lines]
    assert not missing, f"lines without an idiom changed: {missing}"
    remaining = iter(out_lines)
    assert all(any(line == o for o in remaining) for line in kept), "lines without an idiom changed order"


@contextlib.contextmanager
def deadline(seconds: float, what: str = ""):
    """TimeoutError after `seconds` (the regex engine and the rewrite check for signals): a pattern that backtracks
    without end, or a file that takes too long, fails its test instead of hanging the run."""
    def expire(signum, frame):
        raise TimeoutError(f"{what + ': ' if what else ''}more than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
