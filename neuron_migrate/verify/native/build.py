"""Build the C++ emulated device once per torch version and source, into a cache folder, and load it.

The library is built with `torch.utils.cpp_extension.load` (g++ and torch's headers) into
`$XDG_CACHE_HOME/neuron-migrate/emulator-<torch version>-<hash of the source>` (`NEURON_MIGRATE_CACHE_DIR`
overrides the parent folder). A lock on the folder lets one process build while the others of a run wait and then
load what it built.

The folder is not trusted (docs/reliability.md: a restored or shared CI cache can hold any file), and loading a
library runs its code. The build records `manifest.json`: the library's SHA-256 (or why the build failed) under an
HMAC keyed by the user's secret of the result cache (`cache.user_key`). A library is loaded only from a folder of
the user not writable by others, opened without following a link, a regular file of the user not writable by
others, whose bytes, read from that descriptor, match a manifest this user's key signed; the loader is handed the
same descriptor (`/proc/self/fd/N`), never the path again. Anything else is told on stderr, not loaded, and built
again.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import hmac
import json
import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

import torch

from neuron_migrate.engine import cache
from neuron_migrate.engine.sources import write_in_folder

SOURCE = Path(__file__).with_name("neuron_emulator.cpp")
NAME = "neuron_emulator"
LIBRARY = f"{NAME}.so"
MANIFEST = "manifest.json"
MAX_LIBRARY = 256 << 20  # the library is under 1 MB: a larger file is not read
MAX_MANIFEST = 64 << 10
FLAGS = ["-O1", "-g0"]  # the kernels are torch's own: the few lines here need no optimisation, the build speed does
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class BuildError(RuntimeError):
    """The C++ emulator could not be built here (no compiler, or it failed): the Python one runs instead."""


class Untrusted(Exception):
    """What is in the cache folder is not what this user built (the reason): it is not loaded, it is built again."""


def cache_folder() -> Path:
    base = os.environ.get("NEURON_MIGRATE_CACHE_DIR") or str(cache.user_folder())
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:12]
    return Path(base) / f"emulator-{torch.__version__}-{digest}"


def compiler() -> str | None:
    """The compiler torch's extension builder will call: $CXX when set, else c++ (or g++)."""
    if os.environ.get("CXX"):
        return shutil.which(os.environ["CXX"])
    return shutil.which("c++") or shutil.which("g++")


def load() -> Path:
    """Load the library into this process, building it first when the cache has none this user built."""
    folder = cache_folder()
    try:
        key = cache.user_key()
        fd = cache._owned_folder(folder, create=True, private=True)
    except (cache.Unsafe, OSError) as exc:
        raise BuildError(f"the C++ emulated device was not built: no safe place to keep it ({exc})") from exc
    assert fd is not None
    try:
        try:
            return _load_cached(fd, folder, key)
        except FileNotFoundError:
            pass  # not built yet
        except Untrusted as exc:
            sys.stderr.write(f"neuron-migrate verify: {folder / LIBRARY} was not loaded: {exc}; it is built again\n")
        if compiler() is None:
            raise BuildError("no C++ compiler (c++ or g++) on PATH" if not os.environ.get("CXX") else
                             f"no C++ compiler: CXX={os.environ['CXX']} is not on PATH")
        lock = os.open(".", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0), dir_fd=fd)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process of the run may be building: wait for it
            try:
                return _load_cached(fd, folder, key)  # it built meanwhile
            except (FileNotFoundError, Untrusted):
                return _build(fd, folder, key)
        finally:
            os.close(lock)  # and the lock with it
    finally:
        os.close(fd)


def _mac(key: bytes, folder: Path, record: dict) -> str:
    message = json.dumps([folder.name, record], sort_keys=True, separators=(",", ":"))
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def _open_own_file(fd: int, name: str) -> int:
    """A descriptor of the regular file `name` of the folder `fd`, of this user and not writable by others; never
    through a link. FileNotFoundError when there is none, Untrusted when it is not such a file."""
    try:
        file = os.open(name, _OPEN, dir_fd=fd)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            raise Untrusted(f"{name} is a symbolic link") from exc
        raise Untrusted(f"{name} cannot be opened ({exc.strerror})") from exc
    st = os.fstat(file)
    problem = ("not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"it belongs to another user (uid {st.st_uid})" if st.st_uid != os.geteuid() else
               f"it is writable by others (mode {stat.S_IMODE(st.st_mode):o})" if st.st_mode & 0o022 else None)
    if problem:
        os.close(file)
        raise Untrusted(f"{name}: {problem}")
    return file


def _read(file: int, limit: int, name: str) -> bytes:
    if os.fstat(file).st_size > limit:
        raise Untrusted(f"{name} is larger than {limit} bytes")
    chunks, size = [], 0
    while chunk := os.read(file, 1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise Untrusted(f"{name} is larger than {limit} bytes")
    return b"".join(chunks)


def _load_cached(fd: int, folder: Path, key: bytes) -> Path:
    """Load the library of the folder `fd` when this user's manifest vouches for its bytes; BuildError for a build
    that failed before, FileNotFoundError when nothing was built, Untrusted for anything else."""
    try:
        file = _open_own_file(fd, MANIFEST)
    except FileNotFoundError:
        try:
            os.stat(LIBRARY, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            raise FileNotFoundError(folder / LIBRARY) from None
        raise Untrusted("there is no manifest of a build by this user beside it (an older neuron-migrate built it, "
                        "or it was put there)") from None
    try:
        raw = _read(file, MAX_MANIFEST, MANIFEST)
    finally:
        os.close(file)
    try:
        manifest = json.loads(raw)
        record, mac = manifest["record"], manifest["hmac"]
        signed = isinstance(mac, str) and hmac.compare_digest(mac, _mac(key, folder, record))
    except (ValueError, KeyError, TypeError):
        signed = False
    if not signed:
        raise Untrusted("its manifest was not written by this user's neuron-migrate (edited, or made with another "
                        "key)")
    if record.get("error"):
        raise BuildError(f"{record['error']} (delete {folder} to build again)")
    file = _open_own_file(fd, LIBRARY)
    try:
        if hashlib.sha256(_read(file, MAX_LIBRARY, LIBRARY)).hexdigest() != record.get("sha256"):
            raise Untrusted("its bytes are not the ones this user's build recorded")
        _load_descriptor(file, folder / LIBRARY)
    finally:
        os.close(file)
    return folder / LIBRARY


def _load_descriptor(file: int, path: Path) -> None:
    """Load the library open as `file`: the loader opens the same file through /proc (the bytes just checked,
    whatever the path holds now); `torch.ops.load_library` would resolve the path again."""
    try:
        ctypes.CDLL(f"/proc/self/fd/{file}")
    except OSError as exc:
        raise BuildError(f"the C++ emulated device could not be loaded from {path}: {exc}") from exc
    torch.ops.loaded_libraries.add(str(path))


def _build(fd: int, folder: Path, key: bytes) -> Path:
    """Build in a new private folder, load the library from there, and keep it with its manifest (or the failure,
    so that later runs do not wait for it again)."""
    for name in (MANIFEST, LIBRARY):  # what was refused goes first (a link is removed, never followed)
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise BuildError(f"the C++ emulated device was not built: {folder / name} cannot be removed "
                             f"({exc.strerror})") from exc
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="build-", dir=folder))
    try:
        try:
            data = Path(_compile(work)).read_bytes()  # loads what it built
        except Exception as exc:  # a compiler's failure has many shapes
            error = f"building the C++ emulated device failed: {str(exc).strip()[-600:]}"
            _record(fd, folder, key, {"error": error})
            raise BuildError(f"{error} (delete {folder} to build again)") from exc
        write_in_folder(fd, LIBRARY, data, new_mode=0o755)
        _record(fd, folder, key, {"sha256": hashlib.sha256(data).hexdigest(),
                                  "build_seconds": round(time.perf_counter() - start, 1)})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder / LIBRARY


def _record(fd: int, folder: Path, key: bytes, record: dict) -> None:
    manifest = {"record": record, "hmac": _mac(key, folder, record)}
    write_in_folder(fd, MANIFEST, json.dumps(manifest, indent=1).encode() + b"\n", new_mode=0o644)


def _compile(work: Path) -> str:
    """Build the library in the folder `work` (new, private) and load it; its path."""
    from torch.utils import cpp_extension

    if cpp_extension.is_ninja_available():
        return cpp_extension.load(NAME, [str(SOURCE)], extra_cflags=FLAGS, build_directory=str(work),
                                  is_python_module=False, is_standalone=False, verbose=False)
    path = compile_directly(work / LIBRARY)  # torch's builder needs ninja: one compiler call does the same
    torch.ops.load_library(path)
    return path


def compile_directly(out: Path) -> str:
    """Build the library with one call of the compiler (torch's headers and libraries, its C++ ABI)."""
    import subprocess

    from torch.utils import cpp_extension

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    command = [compiler() or "c++", "-shared", "-fPIC", "-std=c++20", *FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
               *(f"-isystem{p}" for p in cpp_extension.include_paths()), str(SOURCE), "-o", str(out),
               *(f"-L{p}" for p in cpp_extension.library_paths()), "-lc10", "-ltorch_cpu", "-ltorch"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr or proc.stdout)
    return str(out)
