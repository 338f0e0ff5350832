"""Nothing on disk is trusted (docs/reliability.md): a cache entry the tool did not write is a miss, the cache folder
and the files in it are never reached through a link, nothing from the user cache is executed, and a file swapped
for a link during a run is not written through it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from neuron_migrate.engine import cache as cache_mod
from neuron_migrate.engine import sources
from neuron_migrate.engine.runner import run, write_results
from neuron_migrate.settings import Settings
from tests.helpers import cli, rewrite_bytes

LEGACY = b"import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nxm.mark_step()\n"
MIGRATED = rewrite_bytes(LEGACY)
INJECTED = b"import os\nos.system('echo owned')\nthis is not python(\n"


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    """A user cache folder of the test's own (the per-user secret lives there), and no cache folder forced."""
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("NEURON_MIGRATE_CACHE_DIR", raising=False)
    cache_mod.user_key.cache_clear()
    yield home
    cache_mod.user_key.cache_clear()


def _project(tmp_path, name="proj", chdir=None):
    """A project with one legacy file; `chdir` (a monkeypatch) makes it the working folder, whose project the
    runner keeps its cache in."""
    root = tmp_path / name
    root.mkdir()
    if chdir is not None:
        chdir.chdir(root)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    (root / "train.py").write_bytes(LEGACY)
    return root


def _env(home) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NEURON_MIGRATE_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(home)
    return env


def _poison(folder, mode: str, edit) -> None:
    """Apply `edit` to every file's entry of the `mode` cache files in `folder` (not the project model's)."""
    files = list(folder.glob(f"{mode}-*.json"))
    assert files, list(folder.iterdir())
    for file in files:
        data = json.loads(file.read_text(encoding="utf-8"))
        for path, entry in data.items():
            if path != cache_mod.PROJECT_ENTRY:
                edit(entry)
        file.write_text(json.dumps(data), encoding="utf-8")


# -- 1: cache entries are authenticated ----------------------------------------------------------------------

def test_an_edited_rewrite_entry_is_a_miss_and_its_bytes_are_never_written(tmp_path, user_cache):
    root = _project(tmp_path)
    env = _env(user_cache)
    assert cli("rewrite", "--diff", "train.py", cwd=root, env=env).returncode == 1  # keeps the entry
    folder = root / ".neuron_migrate_cache"

    def inject(entry):
        assert base64.b64decode(entry[1]["new"]) == MIGRATED
        entry[1]["new"] = base64.b64encode(INJECTED).decode()
    _poison(folder, "rewrite", inject)
    proc = cli("rewrite", "train.py", cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (root / "train.py").read_bytes() == MIGRATED


def test_an_edited_check_entry_is_a_miss(tmp_path, user_cache):
    root = _project(tmp_path)
    env = _env(user_cache)
    first = cli("check", "--output-format", "concise", "train.py", cwd=root, env=env)
    assert first.returncode == 1 and "NM101" in first.stdout

    def all_clear(entry):
        entry[1].pop("findings", None)
    _poison(root / ".neuron_migrate_cache", "check", all_clear)
    again = cli("check", "--output-format", "concise", "train.py", cwd=root, env=env)
    assert (again.returncode, again.stdout) == (1, first.stdout)


def test_an_entry_made_with_another_key_or_for_another_file_is_a_miss(tmp_path, user_cache, monkeypatch):
    root = _project(tmp_path, chdir=monkeypatch)
    (root / "other.py").write_bytes(LEGACY)
    settings = Settings()
    first = run([str(root)], settings, rewrite=True, jobs=1, use_cache=True)
    assert sum(r.changed for r in first.results) == 2
    cache = cache_mod.ResultCache(root / ".neuron_migrate_cache", settings, rewrite=True)
    assert len(cache) == 4  # with pyproject.toml, and the project model's facts
    data = LEGACY
    train, other = str(root / "train.py"), str(root / "other.py")
    # each entry's key: the file's bytes and its project facts (both are programs: top-level torch_xla code)
    key_train, key_other = cache.entries[train][0], cache.entries[other][0]
    assert cache.get(train, key_train, data) is not None and cache.get(other, key_other, data) is not None
    cache.entries[train] = cache.entries[other]  # same bytes, another path: its MAC names the other path
    assert cache.get(train, key_other, data) is None
    cache.key = b"k" * 32  # another user's secret
    assert cache.get(other, key_other, data) is None


def test_a_key_file_others_may_read_is_not_used(tmp_path, user_cache, monkeypatch):
    root = _project(tmp_path, chdir=monkeypatch)
    run([str(root)], Settings(), rewrite=False, jobs=1, use_cache=True)
    key = user_cache / "neuron-migrate" / "cache-key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    key.chmod(0o644)
    cache_mod.user_key.cache_clear()
    again = run([str(root)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert any("cache-key" in message and "0600" in message for _, message in again.warnings)
    assert [f.code for f in again.findings] == [f.code for f in run([str(root)], Settings(), False, jobs=1).findings]


# -- 2: the cache folder and its files are never reached through a link --------------------------------------

def test_a_committed_cache_folder_link_is_not_followed(tmp_path, user_cache):
    root = _project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".neuron_migrate_cache").symlink_to(elsewhere, target_is_directory=True)
    proc = cli("check", "train.py", cwd=root, env=_env(user_cache))
    assert proc.returncode == 1
    assert list(elsewhere.iterdir()) == []
    assert "is a symbolic link; the cache was not used" in proc.stderr


def test_links_inside_the_cache_folder_are_not_followed(tmp_path, user_cache, monkeypatch):
    root = _project(tmp_path, chdir=monkeypatch)
    folder = root / ".neuron_migrate_cache"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n", encoding="utf-8")
    (folder / ".gitignore").symlink_to(victim)
    (folder / "CACHEDIR.TAG").symlink_to(victim)
    result = run([str(root)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert result.findings
    assert victim.read_text(encoding="utf-8") == "keep\n"
    cache_file = next(folder.glob("check-*.json"))
    assert not cache_file.is_symlink()
    # the cache file itself swapped for a link: the next save replaces nothing through it
    data = cache_file.read_bytes()
    cache_file.unlink()
    cache_file.symlink_to(victim)
    (root / "train.py").write_bytes(LEGACY + b"# changed\n")  # something new to save
    run([str(root)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert victim.read_text(encoding="utf-8") == "keep\n" and data


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder of another user")
def test_a_cache_folder_of_another_user_is_not_used(tmp_path, user_cache, monkeypatch):
    root = _project(tmp_path, chdir=monkeypatch)
    folder = root / ".neuron_migrate_cache"
    folder.mkdir()
    os.chown(folder, 12345, 12345)
    result = run([str(root)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert any("belongs to another user" in message for _, message in result.warnings)
    assert list(folder.iterdir()) == []


# -- 3: nothing from the user cache runs unchecked: verify's emulated device ----------------------------------

# A library that tells when it is loaded: its constructor appends TAG to the file $NM_TEST_LOADED.
LOUD_LIBRARY = r"""#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
    const char *log = getenv("NM_TEST_LOADED");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (f) { fputs(TAG "\n", f); fclose(f); }
}
"""


class Emulator:
    """verify's C++ emulated device, built (by `cc`, a library that logs its loading) into a cache folder of the
    test, with every library the loader is handed recorded by its bytes."""

    def __init__(self, tmp_path, monkeypatch) -> None:
        import ctypes
        import types

        from neuron_migrate.verify.native import build

        self.build, self.tmp = build, tmp_path
        self.log = tmp_path / "loaded.txt"
        monkeypatch.setenv("NM_TEST_LOADED", str(self.log))
        monkeypatch.setenv("NEURON_MIGRATE_CACHE_DIR", str(tmp_path / "emulators"))
        self.built: list[bytes] = []  # each build's library
        self.handed: list[bytes] = []  # what the loader was asked to load, read from the path it was given

        def cdll(path):
            with open(path, "rb") as fh:
                self.handed.append(fh.read())
            return ctypes.CDLL(path)

        def compile_(work):  # the real one's contract: build in `work`, load it there, give its path
            path = self.compile("built", work / build.LIBRARY)
            self.built.append(path.read_bytes())
            cdll(str(path))
            return str(path)
        monkeypatch.setattr(build, "_compile", compile_)
        monkeypatch.setattr(build, "ctypes", types.SimpleNamespace(CDLL=cdll))
        self.evil = self.compile("evil", tmp_path / "evil.so").read_bytes()

    def compile(self, tag: str, out):
        subprocess.run(["cc", "-shared", "-fPIC", f'-DTAG="{tag}"', "-x", "c", "-", "-o", str(out)],
                       input=LOUD_LIBRARY, text=True, check=True)
        return out

    @property
    def folder(self):
        return self.build.cache_folder()

    @property
    def library(self):
        return self.folder / self.build.LIBRARY

    @property
    def manifest(self):
        return self.folder / self.build.MANIFEST

    def loaded(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []


needs_cc = pytest.mark.skipif(not shutil.which("cc"), reason="needs a C compiler (cc) to build test libraries")


@pytest.fixture
def emulator(tmp_path, user_cache, monkeypatch):
    pytest.importorskip("torch")
    return Emulator(tmp_path, monkeypatch)


@needs_cc
def test_the_emulator_is_built_once_and_then_loaded_from_the_cache(emulator):
    emulator.build.load()
    assert len(emulator.built) == 1 and emulator.loaded() == ["built"]
    manifest = json.loads(emulator.manifest.read_text())
    assert manifest["record"]["sha256"] == hashlib.sha256(emulator.built[0]).hexdigest()
    assert stat.S_IMODE(emulator.folder.stat().st_mode) == 0o700
    emulator.build.load()
    assert len(emulator.built) == 1 and emulator.handed == emulator.built * 2
    assert emulator.loaded() == ["built", "built"]  # the cached copy, a file of its own


def _swap(emulator, evil: bytes) -> None:
    emulator.library.unlink()
    emulator.library.write_bytes(evil)


def _forge(emulator, record: dict, key: bytes = b"") -> None:
    """A manifest for `record`, signed with `key` (empty: the signature left as it was)."""
    manifest = json.loads(emulator.manifest.read_text())
    manifest["record"] = record
    if key:
        manifest["hmac"] = emulator.build._mac(key, emulator.folder, record)
    emulator.manifest.write_text(json.dumps(manifest))


def _evil_sha(emulator) -> dict:
    return {"sha256": hashlib.sha256(emulator.evil).hexdigest()}


POISONS = {
    "bytes changed": (lambda e: _swap(e, e.evil), "its bytes are not the ones this user's build recorded"),
    "a link": (lambda e: (e.library.unlink(), e.library.symlink_to(e.tmp / "evil.so")),
               "neuron_emulator.so is a symbolic link"),
    "manifest edited": (lambda e: (_swap(e, e.evil), _forge(e, _evil_sha(e))),
                        "its manifest was not written by this user's neuron-migrate"),
    "manifest of another key": (lambda e: (_swap(e, e.evil), _forge(e, _evil_sha(e), key=b"k" * 32)),
                                "its manifest was not written by this user's neuron-migrate"),
    "no manifest": (lambda e: (_swap(e, e.evil), e.manifest.unlink()),
                    "there is no manifest of a build by this user beside it"),
    "writable by others": (lambda e: e.library.chmod(0o777), "writable by others (mode 777)"),
    "a failure planted": (lambda e: _forge(e, {"error": "pretend the build failed"}),
                          "its manifest was not written by this user's neuron-migrate"),
}


@needs_cc
@pytest.mark.parametrize("poison", list(POISONS))
def test_a_poisoned_emulator_library_is_never_loaded_and_is_built_again(emulator, poison, capsys):
    emulator.build.load()
    edit, reason = POISONS[poison]
    edit(emulator)
    capsys.readouterr()
    emulator.build.load()
    err = capsys.readouterr().err
    assert f"{emulator.library} was not loaded: " in err and reason in err and "it is built again" in err
    assert emulator.evil not in emulator.handed and "evil" not in emulator.loaded()
    assert len(emulator.built) == 2 and emulator.handed[-1] == emulator.built[-1]
    assert not emulator.library.is_symlink() and emulator.library.read_bytes() == emulator.built[-1]
    emulator.build.load()  # the new build is trusted again
    assert len(emulator.built) == 2 and emulator.handed[-1] == emulator.built[-1]


@needs_cc
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_an_emulator_library_of_another_user_is_never_loaded(emulator, capsys):
    emulator.build.load()
    os.chown(emulator.library, 12345, 12345)
    emulator.build.load()
    assert "neuron_emulator.so: it belongs to another user (uid 12345)" in capsys.readouterr().err
    assert len(emulator.built) == 2 and emulator.handed == emulator.built
    assert emulator.library.stat().st_uid == os.geteuid()


@needs_cc
def test_an_emulator_folder_that_is_a_link_is_not_used(emulator):
    planted = emulator.tmp / "planted"
    planted.mkdir()
    (planted / "neuron_emulator.so").write_bytes(emulator.evil)
    emulator.folder.parent.mkdir(parents=True, exist_ok=True)
    emulator.folder.symlink_to(planted, target_is_directory=True)
    with pytest.raises(emulator.build.BuildError, match="is a symbolic link"):
        emulator.build.load()
    assert emulator.handed == [] and emulator.built == [] and sorted(os.listdir(planted)) == ["neuron_emulator.so"]


@needs_cc
def test_a_failed_build_is_remembered_and_not_waited_for_again(emulator, monkeypatch):
    def fails(work):
        raise RuntimeError("neuron_emulator.cpp:1: error: no such header")
    monkeypatch.setattr(emulator.build, "_compile", fails)
    with pytest.raises(emulator.build.BuildError, match="no such header"):
        emulator.build.load()
    monkeypatch.setattr(emulator.build, "_compile", lambda work: pytest.fail("built again"))
    with pytest.raises(emulator.build.BuildError, match=r"no such header \(delete .* to build again\)"):
        emulator.build.load()


# -- 4: a file swapped for a link during the run ---------------------------------------------------------------

def _swap_for_link(path, target) -> None:
    path.unlink()
    path.symlink_to(target)


def test_a_file_swapped_for_a_link_between_read_and_write_is_not_written_through_it(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_bytes(LEGACY)
    outside = tmp_path / "outside.py"
    outside.write_bytes(LEGACY)  # the same bytes: the "changed on disk" check alone would let it through
    result = run([str(tree)], Settings(), rewrite=True, jobs=1)
    assert [r.changed for r in result.results] == [True]
    _swap_for_link(tree / "train.py", outside)
    failures = write_results(result)
    assert len(failures) == 1 and "symbolic link" in failures[0][1]
    assert outside.read_bytes() == LEGACY


def test_a_link_swapped_in_after_the_check_is_not_followed(tmp_path, monkeypatch):
    """The swap right after the real path is checked (a hook in open_folder): the write goes to the folder's entry
    itself, finds a link and refuses."""
    tree = tmp_path / "tree"
    tree.mkdir()
    path = tree / "train.py"
    path.write_bytes(LEGACY)
    outside = tmp_path / "outside.py"
    outside.write_bytes(LEGACY)
    real_open = sources.open_folder

    def swap_then_open(folder):
        _swap_for_link(path, outside)
        return real_open(folder)
    monkeypatch.setattr(sources, "open_folder", swap_then_open)
    with pytest.raises(OSError, match="symbolic link"):
        sources.write_atomic(str(path), MIGRATED, expected=LEGACY, real=str(path))
    assert outside.read_bytes() == LEGACY and path.is_symlink()


def test_a_folder_swapped_for_a_link_is_not_followed(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    path = tree / "pkg" / "train.py"
    path.write_bytes(LEGACY)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "train.py").write_bytes(LEGACY)
    real_open = sources.open_folder

    def swap_then_open(folder):
        (tree / "pkg").rename(tree / "pkg-moved")
        (tree / "pkg").symlink_to(outside, target_is_directory=True)
        return real_open(folder)
    monkeypatch.setattr(sources, "open_folder", swap_then_open)
    with pytest.raises(OSError):
        sources.write_atomic(str(path), MIGRATED, expected=LEGACY, real=str(path))
    assert (outside / "train.py").read_bytes() == LEGACY


# -- 6: bounded inputs -----------------------------------------------------------------------------------------

def test_a_deeply_nested_pyproject_is_a_clear_error_not_a_traceback(tmp_path):
    """It crashed check, rewrite and pin with a RecursionError and no file processed. Told; when its bytes cannot
    hold the tool's table the run goes on without it (the file itself, when it is in the run, is an error)."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text("a = " + "[" * 500 + "]" * 500 + "\n", encoding="utf-8")
    (root / "train.py").write_bytes(LEGACY)
    told = "pyproject.toml: arrays or tables nested too deep to read; fix the file or move it aside"
    for args, code in ((["check", "--no-cache", "train.py"], 1), (["pin", "."], 2),
                       (["rewrite", "--no-cache", "--unsafe-fixes", "train.py"], 0)):
        proc = cli(*args, cwd=root)
        assert proc.returncode == code, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr
        assert f"warning: {root / told}; it holds no [tool.neuron-migrate] table, so the run went on without it" \
            in proc.stderr, proc.stderr
        if args[0] == "pin":  # the file itself is in the run
            assert "pyproject.toml: error: not valid TOML (TOML value nested more than 100 levels deep" in proc.stderr
    assert (root / "train.py").read_bytes() == MIGRATED


@pytest.mark.parametrize("broken", ["nested", "large"])
def test_a_pyproject_that_may_hold_the_settings_and_cannot_be_read_stops_the_run(tmp_path, broken):
    """The run's settings are unknown: nothing is processed with the wrong ones (a 50 MB file took a minute and
    2.5 GB to parse; now it is refused by its size)."""
    root = tmp_path / "proj"
    root.mkdir()
    table = "[tool.neuron-migrate]\nignore = ['NM103']\n"
    if broken == "nested":
        text, told = table + "a = " + "[" * 500 + "]" * 500 + "\n", "arrays or tables nested too deep to read"
    else:
        text = table + "# padding\n" * (sources.size_limit("pyproject") // 10 + 1)
        told = "file is 4 MB, larger than the 4 MB limit for pyproject files"
    (root / "pyproject.toml").write_text(text, encoding="utf-8")
    (root / "train.py").write_bytes(LEGACY)
    for args in (["check", "--no-cache", "train.py"], ["rewrite", "--no-cache", "train.py"], ["pin", "."]):
        proc = cli(*args, cwd=root)
        assert proc.returncode == 2 and f"error: {root / 'pyproject.toml'}: {told}" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert (root / "train.py").read_bytes() == LEGACY


@pytest.mark.parametrize("include", ["/dev/zero", "fifo.txt", "huge.txt"])
def test_an_include_that_is_not_a_small_regular_file_is_not_read(tmp_path, include):
    """`-r /dev/zero` ate memory, `-r` of a FIFO hung: includes are read only when they are regular files under
    the size limit of requirements files."""
    root = tmp_path / "proj"
    root.mkdir()
    if include == "fifo.txt":
        os.mkfifo(root / include)
    elif include == "huge.txt":
        (root / include).write_bytes(b"numpy\n" * (sources.size_limit("requirements") // 6 + 10))
    (root / "requirements.txt").write_text(f"torch-xla==2.1.0\n-r {include}\n", encoding="utf-8")
    # the helper's timeout: a blocked read fails the test
    pin = cli("pin", "--diff", "--unsafe-fixes", "requirements.txt", cwd=root)
    assert pin.returncode == 1, pin.stderr
    assert "-torch-xla==2.1.0" in pin.stdout and "Traceback" not in pin.stderr
    check = cli("check", "--no-cache", ".", cwd=root)
    assert "Traceback" not in check.stderr and "MemoryError" not in check.stderr
    if include == "huge.txt":  # found as an included requirements file, and too large to read
        assert check.returncode == 2 and "huge.txt: error: file is 4 MB, larger than the 4 MB limit" in check.stderr
    else:
        assert check.returncode in (0, 1), check.stderr


def test_every_kind_has_a_size_limit(tmp_path):
    big = tmp_path / "requirements.txt"
    big.write_bytes(b"torch-xla==2.1.0\n" + b"numpy\n" * (sources.size_limit("requirements") // 6 + 10))
    proc = cli("pin", "--diff", str(big))
    assert proc.returncode == 2
    assert "error: file is 4 MB, larger than the 4 MB limit for requirements files (generated, or not what its name " \
           "says?); it was left alone" in proc.stderr
    assert sources.size_limit("python") == sources.MAX_BYTES
    assert all(sources.size_limit(kind) <= 64 * 1024 * 1024 for kind in ("notebook", "lockfile", "shell", None))


def test_reading_a_fifo_or_a_device_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        with pytest.raises(sources.SourceError, match="not a regular file"):
            sources.read_bytes(path)


def _limited_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # reading /dev/zero ends in MemoryError, not swap


@pytest.mark.parametrize("planted", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("name", [".gitignore", "sub/.gitignore", "README.md", ".git/config"])
def test_files_read_beside_the_migrated_ones_are_read_only_when_regular(tmp_path, name, planted):
    """The files a run reads besides the ones it migrates (a folder's .gitignore, the READMEs the project model
    reads, a repository's .git/config): a FIFO under one of these names hung check, rewrite and pin, a link to
    /dev/zero as .gitignore ate memory. They are read only as regular files, up to a limit."""
    root = tmp_path / "proj"
    (root / "sub").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    (root / "train.py").write_bytes(LEGACY)
    (root / "sub" / "b.py").write_bytes(LEGACY)
    if planted == "fifo":
        os.mkfifo(root / name)
    else:
        (root / name).symlink_to("/dev/zero")
    for args in (["check", "--no-cache", "--output-format", "concise", "."], ["rewrite", "--no-cache", "--diff", "."],
                 ["pin", "--diff", "."]):
        proc = subprocess.run([sys.executable, "-m", "neuron_migrate", *args], cwd=root, capture_output=True,
                              text=True, timeout=120, preexec_fn=_limited_memory, check=False)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, (args, proc.stderr)
        if args[0] == "check":
            assert "train.py:3:10: NM101" in proc.stdout and "b.py:3:10: NM101" in proc.stdout, proc.stdout
    assert (root / "train.py").read_bytes() == LEGACY


def test_a_fifo_planted_as_the_cache_file_or_the_key_does_not_block_the_run(tmp_path, user_cache):
    """A FIFO under the cache file's name (a hostile tree's .neuron_migrate_cache/) or as the user's key blocked
    `check` for good: both are opened without blocking and read only as regular files."""
    root = _project(tmp_path)
    env = _env(user_cache)

    def check():
        return subprocess.run([sys.executable, "-m", "neuron_migrate", "check", "--output-format", "concise",
                               "train.py"], cwd=root, env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=120, check=False)
    first = check()
    assert first.returncode == 1 and "NM101" in first.stdout, first.stderr
    key = user_cache / "neuron-migrate" / cache_mod.KEY_FILE
    for planted in (*(root / ".neuron_migrate_cache").glob("check-*.json"), key):
        planted.unlink()
        os.mkfifo(planted, 0o600)
        again = check()
        assert (again.returncode, again.stdout) == (1, first.stdout), again.stderr
        assert stat.S_ISFIFO(os.lstat(planted).st_mode)
    assert "cache-key is not a file of this user with mode 0600; the cache was not used" in again.stderr


# -- 7: no state leaks from one file to the next -------------------------------------------------------------

def test_a_deep_file_leaves_the_recursion_limit_as_it_was(tmp_path):
    import sys

    deep = tmp_path / "deep.py"
    deep.write_text("import torch_xla.core.xla_model as xm\nx = (" + " ".join(['"s"'] * 3000) + ")\n"
                    "xm.mark_step()\n", encoding="utf-8")
    before = sys.getrecursionlimit()
    result = run([str(deep)], Settings(), rewrite=True, jobs=1)
    assert result.results[0].changed, result.results[0].error
    assert sys.getrecursionlimit() == before


# -- 9: smaller -------------------------------------------------------------------------------------------------

def test_ctrl_c_after_the_last_write_says_what_was_written(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from neuron_migrate.cli import commands, main

    for i in range(2):
        (tmp_path / f"train{i}.py").write_bytes(LEGACY)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(commands, "_report_errors", interrupted)  # while the summary is printed
    result = CliRunner().invoke(main, ["rewrite", "--no-cache", "-j", "1", str(tmp_path)])
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1] == "Interrupted: 2 files written, the others left as they were."
    assert [(tmp_path / f"train{i}.py").read_bytes() for i in range(2)] == [MIGRATED] * 2


def _fixture_sources() -> list:
    from tests.helpers import FIXTURES

    return sorted(p for p in FIXTURES.glob("NM2*/*.py") if not p.name.endswith(".expected.py"))


@pytest.mark.parametrize("path", _fixture_sources(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_crlf_file_is_migrated_as_its_lf_twin(path):
    """An import the file already has is seen on a CRLF line too (the regex's `$` stops before `\\n`, not `\\r`):
    `import torch.utils.checkpoint` was added a second time to the CRLF copy only."""
    data = path.read_bytes()
    if b"\r" in data:
        pytest.skip("the fixture has its own carriage returns")
    lf = rewrite_bytes(data, path.name)
    crlf = rewrite_bytes(data.replace(b"\n", b"\r\n"), path.name)
    assert (crlf or b"").replace(b"\r\n", b"\n") == (lf or b"")


def test_a_newline_in_a_file_name_does_not_split_the_diff_header(tmp_path):
    (tmp_path / "new\nline.py").write_bytes(LEGACY)
    proc = cli("rewrite", "--diff", "--no-cache", ".", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ['--- "a/new\\nline.py"', '+++ "b/new\\nline.py"']
    assert all(line[:1] in ("-", "+", " ", "@", "\\") for line in lines)


# -- 8: notebooks as JSON loaders read them --------------------------------------------------------------------

def _notebook(cells: str, metadata: str = "{}") -> bytes:
    return ('{"cells": [' + cells + '], "metadata": ' + metadata + ', "nbformat": 4, "nbformat_minor": 5}\n').encode()


def _code_cell(source: str) -> str:
    return json.dumps({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                       "source": source.splitlines(keepends=True)})


@pytest.mark.parametrize("twice", ["source", "cells"])
def test_a_notebook_with_a_key_twice_is_refused_and_left_as_it_is(tmp_path, twice):
    """Every JSON loader keeps the last of two equal keys; the rewrite edits positions of its own scan: refused."""
    first, second = _code_cell("import torch\n"), _code_cell("import torch_xla.core.xla_model as xm\nxm.mark_step()\n")
    if twice == "source":
        cells = first[:-1] + ', "source": ' + json.dumps(json.loads(second)["source"]) + "}"
        data = _notebook(cells)
    else:
        data = ('{"cells": [' + first + '], "cells": [' + second + '], "metadata": {}, "nbformat": 4, '
                '"nbformat_minor": 5}\n').encode()
    path = tmp_path / "twice.ipynb"
    path.write_bytes(data)
    for command in ("check", "rewrite"):
        out = cli(command, "--no-cache", str(path))
        assert out.returncode == 2, out.stdout + out.stderr
        assert "twice.ipynb" in out.stdout + out.stderr and f'"{twice}"' in out.stdout + out.stderr
    assert path.read_bytes() == data


NAN_PLACES = {
    "notebook metadata after the cells": lambda cell: _notebook(cell, '{"scores": [NaN, Infinity]}'),
    "notebook metadata before the cells": lambda cell: (
        '{"metadata": {"scores": [NaN, -Infinity]}, "cells": [' + cell + '], "nbformat": 4, "nbformat_minor": 5}\n'
    ).encode(),
    "cell metadata": lambda cell: _notebook(cell.replace('"metadata": {}', '"metadata": {"score": NaN}')),
    "an output's metadata": lambda cell: _notebook(cell.replace(
        '"outputs": []', '"outputs": [{"output_type": "execute_result", "data": {"text/plain": ["x"]}, '
        '"metadata": {"v": Infinity}, "execution_count": 1}]')),
}


@pytest.mark.parametrize("where", list(NAN_PLACES))
def test_nan_in_a_notebooks_metadata_is_read_like_jupyter_reads_it(tmp_path, where):
    """NaN and Infinity (Python's json writes them) where the rewrite's own scan of the notebook meets them (before
    or in a cell) were an internal error."""
    cell = _code_cell("import torch_xla.core.xla_model as xm\nxm.mark_step()\n")
    assert '"metadata": {}' in cell and '"outputs": []' in cell
    path = tmp_path / "nan.ipynb"
    path.write_bytes(NAN_PLACES[where](cell))
    out = cli("rewrite", "--no-cache", str(path))
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr and "error" not in out.stderr, out.stderr
    text = path.read_text(encoding="utf-8")
    assert "torch_xla" not in text and ("NaN" in text or "Infinity" in text)


def test_a_cell_line_spelled_like_a_placeholder_stays_code(tmp_path):
    """The tag of the magic placeholders is chosen per notebook, so a line of code that looks like one is kept."""
    spelled = "pass  # @@@ 5a17 m0"  # what the first magic of a cell became, when the tag was the same everywhere
    path = tmp_path / "tag.ipynb"
    path.write_bytes(_notebook(_code_cell(
        f"import torch_xla.core.xla_model as xm\n!pip list\n{spelled}\nxm.mark_step()\n")))
    out = cli("rewrite", "--no-cache", str(path))
    assert "Traceback" not in out.stderr, out.stderr
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert "".join(cells[0]["source"]).splitlines() == ["!pip list", spelled]


# -- 9: encodings are named --------------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_utf16_file_is_named_as_such_not_as_nul_bytes(tmp_path, encoding):
    path = tmp_path / "wide.py"
    path.write_bytes("import torch_xla.core.xla_model as xm\n".encode(encoding))
    out = cli("check", "--no-cache", str(path))
    assert out.returncode == 2
    said = (out.stdout + out.stderr).lower()
    assert encoding.replace("-", "") in said.replace("-", "") and "nul" not in said
