"""Build the C++ emulated device once per torch version and source, into a cache folder, and load it.

The library is built with `torch.utils.cpp_extension.load` (g++ and torch's headers) into
`$XDG_CACHE_HOME/neuron-migrate/emulator-<torch version>-<hash of the source>` (`NEURON_MIGRATE_CACHE_DIR`
overrides the parent folder). A file lock lets one process build while the others of a run wait and then load
what it built.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("neuron_emulator.cpp")
NAME = "neuron_emulator"
FLAGS = ["-O1", "-g0"]  # the kernels are torch's own: the few lines here need no optimisation, the build speed does


class BuildError(RuntimeError):
    """The C++ emulator could not be built here (no compiler, or it failed): the Python one runs instead."""


def cache_folder() -> Path:
    base = os.environ.get("NEURON_MIGRATE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "neuron-migrate")
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:12]
    return Path(base) / f"emulator-{torch.__version__}-{digest}"


def compiler() -> str | None:
    """The compiler torch's extension builder will call: $CXX when set, else c++ (or g++)."""
    if os.environ.get("CXX"):
        return shutil.which(os.environ["CXX"])
    return shutil.which("c++") or shutil.which("g++")


def load() -> Path:
    """Load the library into this process, building it first when the cache has none."""
    folder = cache_folder()
    built = folder / f"{NAME}.so"
    failed = folder / "build_failed"
    if failed.is_file():  # one failed build per source and torch: later runs do not wait for it again
        raise BuildError(failed.read_text())
    if not built.is_file():
        if compiler() is None:
            raise BuildError("no C++ compiler (c++ or g++) on PATH" if not os.environ.get("CXX") else
                             f"no C++ compiler: CXX={os.environ['CXX']} is not on PATH")
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process of the run may be building: wait for it
            if failed.is_file():
                raise BuildError(failed.read_text())
            if not built.is_file():
                try:
                    _build(folder)  # loads what it built
                except BuildError as exc:
                    failed.write_text(f"{exc} (delete {folder} to build again)")
                    raise
                return built
    torch.ops.load_library(str(built))
    return built


def _build(folder: Path) -> None:
    from torch.utils import cpp_extension

    start = time.perf_counter()
    work = folder / "build"
    try:
        if cpp_extension.is_ninja_available():
            path = cpp_extension.load(NAME, [str(SOURCE)], extra_cflags=FLAGS, build_directory=str(_fresh(work)),
                                      is_python_module=False, is_standalone=False, verbose=False)
        else:  # torch's builder needs ninja: one compiler call does the same
            path = compile_directly(_fresh(work) / f"{NAME}.so")
            torch.ops.load_library(path)
    except Exception as exc:  # a compiler's failure has many shapes
        raise BuildError(f"building the C++ emulated device failed: {str(exc).strip()[-600:]}") from exc
    path = path if isinstance(path, str) else str(work / f"{NAME}.so")
    os.replace(path, folder / f"{NAME}.so.tmp")
    os.replace(folder / f"{NAME}.so.tmp", folder / f"{NAME}.so")
    (folder / "build_seconds").write_text(f"{time.perf_counter() - start:.1f}\n")
    shutil.rmtree(work, ignore_errors=True)


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


def _fresh(work: Path) -> Path:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work
