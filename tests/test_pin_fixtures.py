"""Every case folder in fixtures/pin/: `pin` gives the files in its `expected/` folder; a second run changes nothing.

Layout: fixtures/pin/<case>/<files as a project has them>; fixtures/pin/<case>/expected/<file> for each file that
changes; a file without an expected copy must stay byte-identical (a case without `expected/` is a no-op case).
An optional `pin-settings.toml` holds settings (`torch = "2.13"`).
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from neuron_migrate.engine.discover import kind_of
from neuron_migrate.pin.command import PIN_CODES
from neuron_migrate.engine.runner import run, write_results
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

UPDATE = os.environ.get("NEURON_MIGRATE_UPDATE_SNAPSHOTS") == "1"  # rewrite the expected copies that exist
CASES = sorted(p for p in (FIXTURES / "pin").iterdir() if p.is_dir())
SETTINGS_FILE = "pin-settings.toml"


def inputs(case):
    return sorted(p for p in case.rglob("*") if p.is_file() and "expected" not in p.relative_to(case).parts
                  and p.name != SETTINGS_FILE)


def settings_of(case, **overrides) -> Settings:
    path = case / SETTINGS_FILE
    values = tomllib.loads(path.read_text()) if path.exists() else {}
    return Settings(select=PIN_CODES, **{"unsafe_fixes": True, **values, **overrides})  # as `pin --unsafe-fixes`


def copy_case(case, tmp_path):
    work = tmp_path / case.name
    shutil.copytree(case, work, ignore=shutil.ignore_patterns("expected", SETTINGS_FILE))
    return work


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pin_gives_expected_files_and_is_a_fixed_point(case, tmp_path):
    work = copy_case(case, tmp_path)
    settings = settings_of(case)
    first = run([str(work)], settings, rewrite=True, jobs=1)
    assert not first.errors
    write_results(first)
    for source in inputs(case):
        relative = source.relative_to(case)
        expected = case / "expected" / relative
        want = expected.read_bytes() if expected.exists() else source.read_bytes()
        got = (work / relative).read_bytes()
        if UPDATE and expected.exists():
            expected.write_bytes(got)
            want = got
        assert got.decode() == want.decode(), f"{case.name}/{relative}"
        assert got == want
    second = run([str(work)], settings, rewrite=True, jobs=1)
    assert [r.path for r in second.changed] == []


@pytest.mark.parametrize("case", [c for c in CASES if (c / "expected").is_dir()], ids=lambda c: c.name)
def test_check_reports_what_pin_changes_and_nothing_after(case, tmp_path):
    settings = settings_of(case)
    before = run([str(copy_case(case, tmp_path))], settings, rewrite=False, jobs=1)
    assert any(f.code != "NM900" for f in before.findings)
    after_dir = tmp_path / "after"
    shutil.copytree(case / "expected", after_dir)
    after = run([str(after_dir)], settings, rewrite=False, jobs=1)
    assert [f for f in after.findings if f.code != "NM900"] == []


def test_every_file_kind_has_a_rewrite_and_a_no_op_case():
    changed, unchanged = set(), set()
    for case in CASES:
        for source in inputs(case):
            kind = kind_of(source.name)
            (changed if (case / "expected" / source.relative_to(case)).exists() else unchanged).add(kind)
    kinds = {"requirements", "pyproject", "setup-cfg", "conda-env", "dockerfile", "shell", "python", "lockfile"}
    assert kinds <= changed
    assert kinds <= unchanged
