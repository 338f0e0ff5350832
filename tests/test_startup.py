"""The start-up table (engine/startup.py): the methods of LibCST's dataclasses, built from kept code objects, are
the methods a plain import builds; a damaged or unwritable table costs nothing but the speed; the switch works.

Each case runs in a fresh interpreter: LibCST is imported once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import FIXTURES

# Prints every method `dataclasses` wrote for LibCST's node classes, down to its bytecode, and whether the patch
# was taken back.
PROBE = r"""
import dataclasses, json, sys
from neuron_migrate.engine.startup import compiled_dataclasses

if sys.argv[1] == "table":
    with compiled_dataclasses():
        import libcst
else:
    import libcst

def dump(code):
    consts = [dump(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return [code.co_code.hex(), consts, code.co_names, code.co_varnames, code.co_freevars, code.co_filename,
            code.co_name, code.co_qualname, code.co_flags, code.co_firstlineno, code.co_linetable.hex()]

methods = {}
for name in dir(libcst):
    cls = getattr(libcst, name)
    if isinstance(cls, type) and dataclasses.is_dataclass(cls):
        for attr, value in vars(cls).items():
            code = getattr(value, "__code__", None)
            if code is not None and code.co_filename == "<string>":
                methods[f"{name}.{attr}"] = dump(code)
print(json.dumps({"methods": methods, "patched": "exec" in vars(dataclasses)}, sort_keys=True))
"""


def _probe(mode: str, cache_home, **env) -> dict:
    run_env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), **env}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=run_env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _table(cache_home):
    found = list((cache_home / "neuron-migrate" / "startup").glob("dataclasses-*.marshal"))
    assert len(found) <= 1
    return found[0] if found else None


def test_methods_built_from_the_table_are_the_methods_a_plain_import_builds(tmp_path):
    plain = _probe("plain", tmp_path)
    assert len(plain["methods"]) > 300 and _table(tmp_path) is None  # a plain import keeps no table
    first = _probe("table", tmp_path)  # compiles, and keeps the table
    table = _table(tmp_path)
    assert table is not None and table.stat().st_size > 100_000
    stamp = table.stat().st_mtime_ns
    second = _probe("table", tmp_path)  # every method from the table: nothing new, so nothing written
    assert table.stat().st_mtime_ns == stamp
    assert first == second == plain
    assert plain["patched"] is False


def test_a_damaged_table_is_ignored_and_written_anew(tmp_path):
    plain = _probe("plain", tmp_path)
    _probe("table", tmp_path)
    table = _table(tmp_path)
    table.write_bytes(b"\x00not marshal data" * 10)
    assert _probe("table", tmp_path) == plain
    assert table.stat().st_size > 100_000  # rewritten whole
    table.write_bytes(table.read_bytes()[:5000])  # cut short
    assert _probe("table", tmp_path) == plain


def test_a_cache_folder_that_cannot_be_written_costs_only_the_speed(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    plain = _probe("plain", tmp_path)
    assert _probe("table", blocker) == plain
    assert blocker.read_text() == "a file where the cache folder would be"
    assert [p.name for p in tmp_path.iterdir()] == ["not-a-folder"]


def test_the_switch_turns_it_off_and_check_reports_the_same_either_way(tmp_path):
    target = str(FIXTURES / "NM103-mark-step" / "statement_forms.py")

    def check(cache_home, **env):
        run_env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), **env}
        run_env.pop("NEURON_MIGRATE_CACHE_DIR", None)
        return subprocess.run([sys.executable, "-m", "neuron_migrate", "check", "--no-cache", target],
                              capture_output=True, text=True, env=run_env, timeout=300)

    off = check(tmp_path / "off", NEURON_MIGRATE_STARTUP_TABLE="0")
    assert off.returncode == 1 and "NM" in off.stdout
    assert not (tmp_path / "off").exists()
    on = [check(tmp_path / "on") for _ in range(2)]  # the first keeps the table, the second reads it
    assert _table(tmp_path / "on") is not None
    assert [(r.returncode, r.stdout, r.stderr) for r in on] == [(off.returncode, off.stdout, off.stderr)] * 2
