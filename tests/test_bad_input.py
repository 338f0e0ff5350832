"""Bad input gets a clear answer through the command line, and the rest of the run goes on.

One tree holds every kind of bad input beside ordinary legacy files; `rewrite` and `check` run over it once
each, and every case is checked on that output: the message (file, line where there is one, the reason), the
exit code, the bad file left byte-identical and the good files migrated.
"""

from __future__ import annotations

import codecs
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from neuron_migrate.engine import sources
from neuron_migrate.cli import main
from tests.helpers import cli, rewrite_bytes

LEGACY = b"import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nxm.mark_step()\n"
MIGRATED = rewrite_bytes(LEGACY)

# file name -> (content, expected error line without the leading path)
BAD_FILES: dict[str, tuple[bytes, str]] = {
    "syntax_error.py": (LEGACY + b"def broken(:\n    pass\n",
                        ":5:12: error: syntax error (for Python 3.{minor}): invalid syntax; fix the syntax, "
                        "then run again"),
    "python2.py": (LEGACY + b'print "step done"\n',
                   ":5:1: error: syntax error (for Python 3.{minor}): Missing parentheses in call to 'print'. "
                   "Did you mean print(...)? (this looks like Python 2 code; port it to Python 3 first)"),
    "python2_except.py": (b"import torch_xla\ntry:\n    run()\nexcept ValueError, exc:\n    pass\n",
                          ":4:8: error: syntax error (for Python 3.{minor}): multiple exception types must be "
                          "parenthesized (this looks like Python 2 code"),
    "not_text.py": (b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)),
                    ": error: file contains NUL bytes: not a Python source file; it was left alone"),
    "latin1_without_cookie.py": ("# Schätzung des Geräts\n".encode("latin-1") + LEGACY,
                                 ":1: error: bytes are not valid utf-8 (byte 0xe4); add a coding cookie such as "
                                 "`# -*- coding: latin-1 -*-` or convert the file to UTF-8"),
    "unknown_cookie.py": (b"# -*- coding: klingon -*-\n" + LEGACY,
                          ": error: unknown encoding: klingon in the coding cookie; name an encoding Python knows "
                          "(PEP 263)"),
    "bom_and_latin1_cookie.py": (codecs.BOM_UTF8 + b"# coding: latin-1\n" + LEGACY,
                                 ": error: the file starts with a UTF-8 byte order mark but its coding cookie is "
                                 "not `utf-8` (Python refuses such a file); remove the cookie or spell it `utf-8`"),
}
if sys.version_info < (3, 12):  # syntax LibCST reads but this Python does not: Python's message, in both modes
    BAD_FILES["newer_python.py"] = (LEGACY + b"type Alias = int\n",
                                    ":5:6: error: syntax error (for Python 3.{minor}): invalid syntax; fix the syntax, "
                                    "then run again")
BIG = "generated_50mb.py"


def _big_file(path: Path) -> None:
    line = b"TABLE.append((0x7f, 'xla', 3.25, None))  # generated\n"
    with open(path, "wb") as fh:
        fh.write(b"TABLE = []\n")
        fh.write(line * (50 * 1024 * 1024 // len(line) + 1))


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad")
    for name, (content, _) in BAD_FILES.items():
        (root / name).write_bytes(content)
    _big_file(root / BIG)
    (root / "empty.py").write_bytes(b"")
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_bytes(b"")
    (root / "pkg" / "train.py").write_bytes(LEGACY)
    (root / "zz_last.py").write_bytes(LEGACY)
    os.mkfifo(root / "pipe.py")  # reading a pipe would block the run forever
    return root


@pytest.fixture(scope="module")
def rewrite_run(tree):
    before = {p: p.read_bytes() for p in tree.rglob("*.py") if p.is_file()}
    proc = cli("rewrite", str(tree), str(tree / "does_not_exist.py"))
    return proc, before


@pytest.fixture(scope="module")
def check_run(tree, rewrite_run):
    return cli("check", str(tree))


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_is_reported_and_left_alone(tree, rewrite_run, check_run, name):
    proc, before = rewrite_run
    expected = str(tree / name) + BAD_FILES[name][1].format(minor=sys.version_info.minor)
    for output in (proc.stderr, check_run.stderr):
        assert expected in output, output
    assert (tree / name).read_bytes() == before[tree / name]


def test_a_50_mb_file_is_reported_and_left_alone(tree, rewrite_run):
    proc, before = rewrite_run
    assert f"{tree / BIG}: error: file is 50 MB, larger than the 20 MB limit for source files (generated code?); " \
           "it was left alone" in proc.stderr
    assert (tree / BIG).read_bytes() == before[tree / BIG]


def test_a_missing_path_is_reported(tree, rewrite_run):
    proc, _ = rewrite_run
    assert f"{tree / 'does_not_exist.py'}: error: no such file or directory" in proc.stderr


def test_the_rest_of_the_run_goes_on_and_exits_2(tree, rewrite_run, check_run):
    proc, _ = rewrite_run
    assert proc.returncode == 2 and check_run.returncode == 2
    assert (tree / "pkg" / "train.py").read_bytes() == MIGRATED
    assert (tree / "zz_last.py").read_bytes() == MIGRATED
    assert "Rewrote 2 files" in proc.stdout
    assert len(proc.stderr.strip().splitlines()) == len(BAD_FILES) + 2  # + the big file, the missing path


def test_empty_files_and_pipes_are_no_error(tree, rewrite_run):
    proc, _ = rewrite_run
    assert "empty.py" not in proc.stderr and "__init__.py" not in proc.stderr and "pipe.py" not in proc.stderr
    assert (tree / "empty.py").read_bytes() == b""
    assert stat.S_ISFIFO((tree / "pipe.py").lstat().st_mode)


def test_an_empty_file_alone_is_clean(tmp_path):
    path = tmp_path / "empty.py"
    path.write_bytes(b"")
    proc = cli("check", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "All clear: 1 file checked, nothing to migrate." in proc.stdout


def test_unreadable_file_is_reported_and_the_rest_goes_on(tmp_path, monkeypatch):
    secret = tmp_path / "secret.py"
    secret.write_bytes(LEGACY)
    other = tmp_path / "other.py"
    other.write_bytes(LEGACY)
    secret.chmod(0)
    if os.geteuid() == 0:  # root reads anything: refuse the open the way the kernel does for others
        real_open = sources._open_readonly

        def guarded_open(path):
            if os.fspath(path) == str(secret):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path)
        monkeypatch.setattr(sources, "_open_readonly", guarded_open)
    result = CliRunner().invoke(main, ["rewrite", "-j", "1", str(tmp_path)], catch_exceptions=False)
    secret.chmod(0o644)
    assert result.exit_code == 2
    assert f"{secret}: error: permission denied: cannot read the file" in result.stderr
    assert secret.read_bytes() == LEGACY
    assert other.read_bytes() == MIGRATED


def _generated_table(parts: int) -> bytes:
    return b"HELP = (\n" + b"".join(b"    'line %d of a generated help text\\n'\n" % i for i in range(parts)) + b")\n"


def test_deeply_nested_generated_table_is_still_migrated(tmp_path):
    table = _generated_table(600)  # nests deeper than Python's default recursion limit allows to visit
    path = tmp_path / "generated.py"
    path.write_bytes(LEGACY + table)
    proc = cli("rewrite", str(path))
    assert proc.returncode == 0, proc.stderr
    out = path.read_bytes()
    assert out.endswith(table) and b"device = torch.device('neuron')\n" in out and b"torch_xla" not in out


def test_table_beyond_what_libcst_parses_is_reported_as_its_limit(tmp_path):
    """`rewrite` names LibCST's limit and leaves the file alone; `check`, which decides this file on Python's tree
    (its device call and its step), reports its findings without building LibCST's tree."""
    path = tmp_path / "generated.py"
    data = LEGACY + _generated_table(6000)
    path.write_bytes(data)
    proc = cli("rewrite", str(path))
    assert proc.returncode == 2
    assert f"{path}:6006:1: error: the rewriting parser (LibCST) cannot read this valid Python (" in proc.stderr
    assert "the file was left alone. Please report it at https://" in proc.stderr
    assert path.read_bytes() == data
    proc = cli("check", str(path))
    assert proc.returncode == 1 and not proc.stderr
    assert [line.split(": ")[1].split()[0] for line in proc.stdout.splitlines() if line.startswith(str(path))] \
        == ["NM190", "NM101", "NM103"]


def test_a_notebook_that_is_not_json_is_reported_and_the_rest_goes_on(tmp_path):
    from neuron_migrate.engine.handlers import HANDLERS

    if "notebook" not in HANDLERS:
        pytest.skip("no notebook handler registered on this branch yet")
    notebook = tmp_path / "broken.ipynb"
    data = b'{"cells": [{"cell_type": "code", "source": ["import torch_xla.core.xla_model as xm\\n"'
    notebook.write_bytes(data)
    good = tmp_path / "train.py"
    good.write_bytes(LEGACY)
    proc = cli("rewrite", str(tmp_path))
    assert proc.returncode == 2
    assert f"{notebook}: error: not a valid notebook: the file is not JSON (" in proc.stderr
    assert notebook.read_bytes() == data
    assert good.read_bytes() == MIGRATED


def test_code_python_rejects_only_when_compiling_is_not_rewritten(tmp_path):
    """`return` outside a function parses but does not compile: Python refuses to import the file, so the rewrite
    does not write it and says what Python says."""
    path = tmp_path / "train.py"
    data = LEGACY + b"return 5\n"
    path.write_bytes(data)
    proc = cli("rewrite", str(tmp_path))
    assert proc.returncode == 2
    assert f"{path}:5:1: error: syntax error (for Python 3.{sys.version_info.minor}): 'return' outside function" \
        in proc.stderr
    assert path.read_bytes() == data


def test_a_read_only_file_is_refused_with_exit_2_and_left_alone(tmp_path):
    """Mode 444 in a writable folder: an atomic replace could write it (and does, for root), so it is refused."""
    path = tmp_path / "train.py"
    path.write_bytes(LEGACY)
    path.chmod(0o444)
    other = tmp_path / "other.py"
    other.write_bytes(LEGACY)
    proc = cli("rewrite", "--no-cache", str(tmp_path))
    assert proc.returncode == 2
    assert f"{path}: error: could not write (read-only file, mode 444: make it writable with `chmod u+w` to rewrite " \
           "it); the file was left as it was" in proc.stderr
    assert path.read_bytes() == LEGACY and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert other.read_bytes() == MIGRATED


def test_a_rewritten_file_keeps_its_mode_owner_and_group(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(LEGACY)
    path.chmod(0o640)
    if os.geteuid() == 0:  # root may give the file away: to another owner and a group it is not in
        os.chown(path, 65534, 65533)
    before = path.stat()
    proc = cli("rewrite", "--no-cache", str(path))
    assert proc.returncode == 0, proc.stderr
    after = path.stat()
    assert path.read_bytes() == MIGRATED
    assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_gid) == \
        (stat.S_IMODE(before.st_mode), before.st_uid, before.st_gid)


# -- verify: input and environment errors are exit 2 (1 means "not equivalent") -------------------------------

def test_verify_without_torch_exits_2(tmp_path):
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named torch')\n")
    script = tmp_path / "train.py"
    script.write_bytes(LEGACY)
    proc = cli("verify", str(script), env={"PYTHONPATH": os.pathsep.join(
        [str(shadow.parent), *filter(None, [os.environ.get("PYTHONPATH")]), *sys.path])})
    assert proc.returncode == 2, proc.stderr
    assert "error: neuron-migrate verify needs PyTorch" in proc.stderr


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), RuntimeError("unexpected")],
                         ids=["environment", "internal"])
def test_verify_errors_that_are_no_verdict_exit_2(tmp_path, monkeypatch, failure):
    pytest.importorskip("torch")
    from neuron_migrate.verify import session

    def fails(*args, **kwargs):
        raise failure
    monkeypatch.setattr(session, "verify_script", fails)
    script = tmp_path / "train.py"
    script.write_bytes(LEGACY)
    result = CliRunner().invoke(main, ["verify", str(script)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"{script}: error: ")
