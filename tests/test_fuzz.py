"""Fuzzed input never costs a traceback, a hang or a damaged file (docs/reliability.md).

A seeded mutator takes files of the fixtures and, when it is there, of the real code under ../shared/ecosystem (the
repository's sibling folder), and makes of each: a truncation, byte flips, UTF-16, Latin-1 and BOM encodings, CRLF
and CR line ends, deep nesting. Every mutant is migrated in a tree of its own (its name kept, so its kind too), and:
no internal error; no file takes more than PER_FILE seconds; every file written parses as its kind; a second run
changes nothing. The counts (files, mutants, what became of them, problems) go to the end of the test run's
output.
"""

from __future__ import annotations

import codecs
import json
import os
import random
import time
from pathlib import Path

import pytest

from neuron_migrate.engine.runner import run, write_results
from neuron_migrate.engine.sources import decode
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, ROOT, SWEEP_REPORT, deadline

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

SEED = 32
PER_FILE = 60.0  # seconds for the two runs over one mutant (a loaded shared machine included)
# files taken from each source, then every mutation of each (NEURON_MIGRATE_FUZZ_SAMPLE: another number of files)
SAMPLE = {"fixtures": 40, "ecosystem": 40}
KINDS = (".py", ".ipynb", ".txt", ".toml", ".sh", ".cfg", ".yml", ".yaml")


def _ecosystem() -> Path | None:
    for base in (ROOT.parent, ROOT.parent.parent):  # a clone beside shared/, or a work tree one level deeper
        folder = base / "shared" / "ecosystem"
        if folder.is_dir():
            return folder
    return None


def _files(folder: Path, n: int, rng: random.Random) -> list[Path]:
    found = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in KINDS and p.stat().st_size < 400_000
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    return rng.sample(found, min(n, len(found)))


def _truncated(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def _flipped(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(3):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _recoded(codec: str):
    def mutate(data: bytes, rng: random.Random) -> bytes:
        text = data.decode("utf-8", "replace")
        return (codecs.BOM_UTF16_LE if codec == "utf-16-le" else b"") + text.encode(codec, "replace")
    return mutate


def _bom(data: bytes, rng: random.Random) -> bytes:
    return codecs.BOM_UTF8 + data


def _line_ends(end: bytes):
    def mutate(data: bytes, rng: random.Random) -> bytes:
        return data.replace(b"\r\n", b"\n").replace(b"\n", end)
    return mutate


def _nested(data: bytes, rng: random.Random) -> bytes:
    depth = rng.choice([100, 400, 2000])
    opener, closer = rng.choice([(b"(", b")"), (b"[", b"]"), (b"{", b"}")])
    lines = data.splitlines(keepends=True)
    at = rng.randrange(len(lines) + 1)
    return b"".join(lines[:at] + [b"x = " + opener * depth + b"1" + closer * depth + b"\n"] + lines[at:])


MUTATIONS = {"truncated": _truncated, "flipped": _flipped, "utf-16": _recoded("utf-16-le"),
             "latin-1": _recoded("latin-1"), "bom": _bom, "crlf": _line_ends(b"\r\n"), "cr": _line_ends(b"\r"),
             "nested": _nested}




def _parses(path: Path, data: bytes) -> bool:
    if path.suffix == ".py":
        compile(decode(data).text, str(path), "exec", dont_inherit=True)
    elif path.suffix == ".ipynb":
        json.loads(data.decode("utf-8-sig"))
    elif path.suffix == ".toml":
        # a byte order mark the file had is written back as it was (every untouched byte kept): what the rewrite
        # wrote after it must parse
        tomllib.loads(data.decode("utf-8-sig"))
    return True


def _second_run_changes(tree: Path, name: str, data: bytes) -> list[str]:
    tree.mkdir()
    (tree / name).write_bytes(data)
    with deadline(PER_FILE, name):
        write_results(run([str(tree)], Settings(), rewrite=True, jobs=1))
        return [r.path for r in run([str(tree)], Settings(), rewrite=True, jobs=1).changed]


@pytest.mark.slow
def test_fuzzed_files_never_cost_a_traceback_a_hang_or_a_damaged_file(tmp_path, request):
    rng = random.Random(SEED)
    per_source = int(os.environ.get("NEURON_MIGRATE_FUZZ_SAMPLE", "0")) or None
    sources = [("fixtures", FIXTURES)]
    ecosystem = _ecosystem()
    if ecosystem is not None:
        sources.append(("ecosystem", ecosystem))
    counts = {"mutants": 0, "rewritten": 0, "refused with a message": 0, "unchanged": 0}
    problems: list[str] = []
    unstable: list[str] = []
    checked_originals: list[Path] = []
    slowest = 0.0
    for name, folder in sources:
        for original in _files(folder, per_source or SAMPLE[name], rng):
            data = original.read_bytes()
            # the original first: one whose own migration is not stable (a rule's business, found by the sweeps
            # and tests of the rules) is told, and its mutants are held to everything but the second run
            idempotent = _second_run_changes(tmp_path / f"o{len(checked_originals)}", original.name, data) == []
            checked_originals.append(original)
            if not idempotent:
                unstable.append(str(original))
            for mutation, mutate in MUTATIONS.items():
                mutant = mutate(data, rng)
                tree = tmp_path / f"m{counts['mutants']}"
                tree.mkdir()
                path = tree / original.name
                path.write_bytes(mutant)
                counts["mutants"] += 1
                what = f"{original} ({mutation})"
                start = time.perf_counter()
                try:
                    with deadline(PER_FILE, what):
                        first = run([str(tree)], Settings(), rewrite=True, jobs=1)
                        failures = write_results(first)
                        second = run([str(tree)], Settings(), rewrite=True, jobs=1)
                except TimeoutError as exc:
                    problems.append(str(exc))
                    continue
                slowest = max(slowest, time.perf_counter() - start)
                errors = [r.error for r in first.results if r.error] + [m for _, m in failures]
                if any("internal error" in e for e in errors):
                    problems.append(f"{what}: {errors}")
                if idempotent and [r.path for r in second.changed]:
                    problems.append(f"{what}: the second run changes {[r.path for r in second.changed]}")
                written = path.read_bytes()
                if written != mutant:
                    counts["rewritten"] += 1
                    try:
                        _parses(path, written)
                    except (SyntaxError, ValueError) as exc:
                        problems.append(f"{what}: written but does not parse ({exc})")
                elif errors:
                    counts["refused with a message"] += 1
                else:
                    counts["unchanged"] += 1
    request.config.stash[SWEEP_REPORT].append(
        f"fuzz: {len(checked_originals)} files, " + ", ".join(f"{v} {k}" for k, v in counts.items())
        + f", {len(problems)} problems; slowest file {slowest:.1f} s; sources: "
        + ", ".join(name for name, _ in sources) + ("" if ecosystem else " (../shared/ecosystem not found)")
        + (f"; originals whose own second run changes them: {unstable}" if unstable else ""))
    assert counts["mutants"] >= len(MUTATIONS) * (per_source or SAMPLE["fixtures"])
    assert problems == [], "\n".join(problems)
