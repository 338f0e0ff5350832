"""Start-up: the methods `dataclasses` writes for LibCST's node classes, compiled once, not at every run.

Most of `import libcst` (0.11 to 0.14 s of the 0.35 s a `check` of one file takes) is the `dataclasses` module
writing `__init__`, `__eq__`, `__repr__` ... of LibCST's 250 node classes as source text and compiling that
text: the same text at every run. While a handler module is imported (LibCST with it), `dataclasses` here
compiles through a table of the code objects the previous runs compiled. A method built from the table is the
one `exec` would build: the same text, compiled with the same flags. Only the compiling is skipped (`import
libcst` falls to about 0.05 s).

The table is a marshal file in the user cache folder, one per Python bytecode version (marshal's format and the
bytecode change with it): `$XDG_CACHE_HOME/neuron-migrate/startup/` (else `~/.cache/...`). It holds code, not
results: `--no-cache` leaves it in use. A table that cannot be read is ignored and written anew; one that cannot
be written is not kept (nothing else changes). `NEURON_MIGRATE_STARTUP_TABLE=0` turns this off.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import importlib.util
import marshal
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator

ENABLED = os.environ.get("NEURON_MIGRATE_STARTUP_TABLE", "1") != "0"
# A table that grew past this (many LibCST releases over time) starts afresh.
MOST = 4096


def table_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    version = importlib.util.MAGIC_NUMBER.hex()
    return Path(base) / "neuron-migrate" / "startup" / f"dataclasses-{sys.implementation.cache_tag}-{version}.marshal"


@contextlib.contextmanager
def compiled_dataclasses() -> Iterator[None]:
    """Within: the dataclasses created compile their methods through the table (see the module's text)."""
    if not ENABLED or "exec" in vars(dataclasses):
        yield  # off, or already inside (a nested import)
        return
    path = table_file()
    table = _load(path)
    new: dict[str, object] = {}

    def exec_(source, globals=None, locals=None, /):
        if type(source) is str:
            code = table.get(source)
            if code is None:
                # the flags `exec` compiles with in dataclasses.py: no `from __future__` import there
                code = new[source] = compile(source, "<string>", "exec", dont_inherit=True)
            source = code
        return builtins.exec(source, globals, locals)

    dataclasses.exec = exec_  # found before the builtin by the module's own calls
    try:
        yield
    finally:
        del dataclasses.exec
    if new:
        _save(path, {**(table if len(table) + len(new) <= MOST else {}), **new})


def _load(path: Path) -> dict[str, object]:
    try:
        table = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(table, dict):
        return {}
    code = type(_load.__code__)
    return {k: v for k, v in table.items() if type(k) is str and type(v) is code}


def _save(path: Path, table: dict[str, object]) -> None:
    """Written whole, then renamed into place: a run reading it meanwhile sees the old table or the new one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".table-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(marshal.dumps(table))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, ValueError):
        pass  # not kept: the next run compiles again
