"""Start-up runs no code from the user cache folder (docs/reliability.md).

The tool once kept the methods `dataclasses` writes for LibCST's node classes as a marshal table of code objects
in `~/.cache/neuron-migrate/startup/` and built them from it at every start, so one replaced code object ran at
the next start, even with --no-cache. It is gone (50 ms of start-up; docs/performance.md item 11): a poisoned
table at its old place, holding a payload for every method LibCST's import writes, runs nothing, and `check
--no-cache` creates nothing in the user cache folder."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from importlib.util import MAGIC_NUMBER

from tests.helpers import FIXTURES

# The source text of every method `dataclasses` compiles while LibCST is imported: the keys of the old table.
SOURCES = r"""
import builtins, dataclasses, json, sys
seen = []
def record(source, *args):
    seen.append(source)
    return builtins.exec(source, *args)
dataclasses.exec = record
import libcst
print(json.dumps(seen))
"""


def _env(cache_home) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NEURON_MIGRATE_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(cache_home), NEURON_MIGRATE_STARTUP_TABLE="1")
    return env


def _check(*args, cwd, cache_home):
    return subprocess.run([sys.executable, "-m", "neuron_migrate", *args], capture_output=True, text=True,
                          cwd=cwd, env=_env(cache_home), timeout=300)


def test_a_poisoned_start_up_table_in_the_user_cache_runs_nothing(tmp_path):
    sources = json.loads(subprocess.run([sys.executable, "-c", SOURCES], capture_output=True, text=True,
                                        check=True, timeout=300).stdout)
    assert len(sources) > 300  # LibCST's node classes: the table would have held all of these
    marker = tmp_path / "ran"
    payload = compile(f"open({str(marker)!r}, 'w').close()", "<string>", "exec", dont_inherit=True)
    home = tmp_path / "xdg"
    folder = home / "neuron-migrate" / "startup"
    folder.mkdir(parents=True)
    table = folder / f"dataclasses-{sys.implementation.cache_tag}-{MAGIC_NUMBER.hex()}.marshal"
    table.write_bytes(marshal.dumps({source: payload for source in sources}))
    target = str(FIXTURES / "NM103-mark-step" / "statement_forms.py")
    for args in (["check", "--no-cache", target], ["check", target], ["rewrite", "--diff", target]):
        out = _check(*args, cwd=tmp_path, cache_home=home)
        assert not marker.exists(), args  # first: the payload that ran also breaks the run
        assert out.returncode == 1 and "NM103" in out.stdout + out.stderr, out.stderr


def test_check_without_cache_writes_nothing_to_the_user_cache(tmp_path):
    target = str(FIXTURES / "NM103-mark-step" / "statement_forms.py")
    out = _check("check", "--no-cache", target, cwd=tmp_path, cache_home=tmp_path / "xdg")
    assert out.returncode == 1 and "NM103" in out.stdout
    assert not (tmp_path / "xdg").exists()


def test_a_check_of_one_file_loads_no_openssl_and_defers_libcst(tmp_path):
    """What start-up leaves out (docs/performance.md item 11 and stop 55), in the command's own process: `hashlib`
    (it loads OpenSSL: the cache's MAC and the replay's are keyed BLAKE2b, temporary names come from `os.urandom`),
    packaging, tomllib, configparser and shutil (imported where a run needs them), and the methods of LibCST's
    classes and the tool's until first called (engine/deferred.py), with the cache on and off."""
    target = tmp_path / "train.py"
    target.write_text("import torch_xla.core.xla_model as xm\n\nxm.mark_step()\n", encoding="utf-8")
    code = ("import json, runpy, sys\n"
            "sys.argv = ['neuron-migrate', *sys.argv[1:]]\n"
            "try:\n"
            "    runpy.run_module('neuron_migrate', run_name='__main__')\n"
            "except SystemExit:\n"
            "    pass\n"
            "import libcst\n"
            "from neuron_migrate.engine.deferred import is_stand_in\n"
            "from neuron_migrate.findings import Finding\n"
            "left_out = ('hashlib', 'hmac', 'secrets', '_hashlib', 'packaging', 'tomllib', 'configparser', 'shutil')\n"
            "print(json.dumps([sorted(m for m in left_out if m in sys.modules),\n"
            "                  is_stand_in(libcst.Comment.__dict__['__setattr__']),\n"
            "                  is_stand_in(Finding.__dict__['__setattr__'])]))\n")
    for args in (["check", "--no-cache", str(target)], ["check", str(target)]):
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=tmp_path,
                             env=_env(tmp_path / "xdg"), timeout=300)
        assert "NM103" in out.stdout, out.stderr
        loaded, deferred, own_deferred = json.loads(out.stdout.strip().splitlines()[-1])
        assert loaded == [], args
        assert deferred == own_deferred == (sys.version_info[:2] <= (3, 12)), args
