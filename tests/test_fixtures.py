"""Every fixture pair in fixtures/: the rewrite gives the expected file, which parses and is a fixed point.

Layout: fixtures/<topic>/<case>.py with <case>.expected.py beside it; a case without an expected file must
stay byte-identical. <case>.accelerator.expected.py, where present, is the output with
`--device-style accelerator`; look-alikes must stay byte-identical in that style too. A first line `# fixture-settings: compile=False, device_style="accelerator"` passes
settings to the engine.

The expected files are what `rewrite --unsafe-fixes` writes (every rule's edit: `rewrite_bytes` turns unsafe
fixes on unless `unsafe_fixes=False` is among the settings); `test_fixture_with_safe_fixes_only` holds plain
`rewrite` (the default) to the mechanical promises on the same cases.

After a deliberate change of what the rewrite writes (marker texts, say), regenerate the expected files that
exist with `NEURON_MIGRATE_UPDATE_SNAPSHOTS=1 python -m pytest -q tests/test_fixtures.py`, and read the diff.
"""

from __future__ import annotations

import ast
import os
import re

import libcst as cst
import pytest

from neuron_migrate import catalogue
from neuron_migrate.engine.python import process_python
from neuron_migrate.findings import FixSafety
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, rewrite_bytes

SETTINGS = re.compile(rb"^# fixture-settings: (.*)$", re.M)
UPDATE = os.environ.get("NEURON_MIGRATE_UPDATE_SNAPSHOTS") == "1"


def _cases():
    for path in sorted(FIXTURES.rglob("*.py")):
        if path.name.endswith(".expected.py") or "examples" in path.parts:
            continue
        if path.parent.parent != FIXTURES:
            continue
        expected = path.with_name(path.name[: -len(".py")] + ".expected.py")
        yield pytest.param(path, expected if expected.exists() else None,
                           id=f"{path.parent.name}/{path.stem}" + ("" if expected.exists() else " (unchanged)"))


def _accelerator(case):
    path = case.with_name(case.name[: -len(".py")] + ".accelerator.expected.py")
    return path if path.exists() else None


def _settings(data: bytes) -> dict:
    m = SETTINGS.search(data)
    if not m:
        return {}
    return eval(f"dict({m.group(1).decode()})", {})  # test-only, our own files


@pytest.mark.parametrize("case, expected", list(_cases()))
def test_fixture(case, expected):
    _check(case, expected, **_settings(case.read_bytes()))


@pytest.mark.parametrize("case, expected", [c for c in _cases() if _accelerator(c.values[0]) or c.values[1] is None])
def test_fixture_in_accelerator_style(case, expected):
    """`<case>.accelerator.expected.py` is the output with --device-style accelerator; look-alikes stay as they are."""
    if expected is not None:
        expected = _accelerator(case)
    _check(case, expected, **{**_settings(case.read_bytes()), "device_style": "accelerator"})


def _check(case, expected, **settings):
    data = case.read_bytes()
    out = rewrite_bytes(data, path=str(case), **settings)
    if expected is None:
        assert out is None, f"{case.name} must stay byte-identical, but the rewrite changed it:\n{out!r}"
        return
    assert out is not None, f"{case.name}: nothing was rewritten"
    if UPDATE:
        expected.write_bytes(out)
    want = expected.read_bytes()
    assert out.decode("utf-8", "replace") == want.decode("utf-8", "replace")  # a readable diff first
    assert out == want  # then the bytes: encodings, BOM, newlines
    ast.parse(out)
    cst.parse_module(out)
    again = rewrite_bytes(out, path=str(expected), **settings)
    assert again is None, f"a second run changed {expected.name} again:\n{again!r}"


@pytest.mark.parametrize("case, expected", list(_cases()))
def test_fixture_with_safe_fixes_only(case, expected):
    """Plain `rewrite`: no unsafe fix is made (each is reported held back), the output parses and a second run
    changes nothing; a look-alike stays byte-identical."""
    data = case.read_bytes()
    settings = Settings(**{**_settings(data), "unsafe_fixes": False})
    result = process_python(str(case), data, settings, True)
    assert result.error is None, result.error
    unsafe = {code for code in result.applied if catalogue.rule(code).fix is FixSafety.UNSAFE}
    assert not unsafe, f"{case.name}: unsafe fixes made without --unsafe-fixes: {unsafe}"
    assert all(f.status != "fixed" for f in result.findings if f.held_back)
    if expected is None:
        assert not result.changed, f"{case.name} must stay byte-identical"
        return
    if not result.changed:
        return  # every fix of the case is unsafe
    ast.parse(result.new_bytes)
    again = process_python(str(case), result.new_bytes, settings, True)
    assert not again.changed, f"a second safe-only run changed {case.name} again:\n{again.new_bytes!r}"


def test_every_topic_has_an_unchanged_case():
    for topic in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        cases = [p for p in topic.glob("*.py") if not p.name.endswith(".expected.py")]
        if not any(p.with_name(p.stem + ".expected.py").exists() for p in cases):
            continue  # check-only topics
        unchanged = [p for p in cases if not p.with_name(p.stem + ".expected.py").exists()]
        assert unchanged, f"{topic.name}: every rewrite needs a look-alike case that must stay byte-identical"
