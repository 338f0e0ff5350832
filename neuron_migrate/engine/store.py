"""Where the tool keeps what it remembers between runs, and how it reaches it safely: the cache folder, the user's
secret that authenticates what is kept there, the fingerprint of the tool's own code, and reads and folder
opens that never follow a planted link nor block on a FIFO.

Light on purpose (the standard library's `os`, `stat` and `json`, BLAKE2 without OpenSSL): a `check` replayed from
its record (engine/replay.py) reads all it needs through this module before the command line is even loaded.
The result cache (engine/cache.py) and the writes (engine/sources.py) use the same functions.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat

try:  # BLAKE2 is built into CPython; `hashlib` itself loads OpenSSL first (7 ms)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - another Python
    from hashlib import blake2b
try:  # what `hmac.compare_digest` is (MACs compared in constant time), without OpenSSL
    from _operator import _compare_digest
except ImportError:  # pragma: no cover - another Python
    from hmac import compare_digest as _compare_digest
compare_digest = _compare_digest

from neuron_migrate import __version__

CACHE_DIR_NAME = ".neuron_migrate_cache"
ENV_DIR = "NEURON_MIGRATE_CACHE_DIR"
PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
KEY_FILE = "cache-key"  # in the user cache folder (user_folder), mode 0600
KEY_BYTES = 32
_OPEN = getattr(os, "O_CLOEXEC", 0) | os.O_NOFOLLOW | os.O_NONBLOCK  # a planted FIFO: no wait
_FOLDER_FLAGS = os.O_DIRECTORY | getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0)
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the neuron_migrate package


def digest(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


def keyed_digest(key: bytes, data: bytes) -> str:
    """A MAC of `data` under `key` (keyed BLAKE2b, a MAC by design: no HMAC construction needed)."""
    return blake2b(data, digest_size=32, key=key).hexdigest()


def data_dir() -> str:
    """The rule catalogue's folder: installed inside the package, or `rules/` beside it in a source checkout."""
    installed = os.path.join(PACKAGE, "catalogue_data")
    return installed if os.path.isdir(installed) else os.path.join(os.path.dirname(PACKAGE), "rules")


# The packages whose behaviour the results depend on (LibCST parses; the others read configs and ignore files)
DEPENDENCIES = ("libcst", "click", "packaging", "tomlkit", "pathspec")


@functools.lru_cache(maxsize=1)
def tool_fingerprint() -> str:
    """The version plus the size and mtime of every module and data file of the installed tool, and of the
    `__init__.py` of each dependency where it is installed (an upgrade of LibCST rewrites it)."""
    from importlib.machinery import PathFinder  # loaded with the interpreter: no import cost

    parts = [__version__]
    for name in DEPENDENCIES:
        spec = PathFinder.find_spec(name)
        try:
            st = os.stat(spec.origin) if spec is not None and spec.origin else None
        except OSError:
            st = None
        parts.append(f"{name}:{spec.origin if st else None}:{st.st_size if st else 0}:{st.st_mtime_ns if st else 0}")
    for folder in (PACKAGE, data_dir()):
        files = []
        for top, dirs, names in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [os.path.join(top, n) for n in names if n.endswith((".py", ".toml", ".json"))]
        for path in sorted(files):
            st = os.stat(path)
            parts.append(f"{os.path.relpath(path, folder)}:{st.st_size}:{st.st_mtime_ns}")
    return digest("\n".join(parts).encode())


def user_folder() -> str:
    """`$XDG_CACHE_HOME/neuron-migrate`, else `~/.cache/neuron-migrate`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "neuron-migrate")


def default_dir(start: str | os.PathLike | None = None) -> str:
    """`$NEURON_MIGRATE_CACHE_DIR`, else `.neuron_migrate_cache/` in the nearest project folder above `start`,
    else the user cache folder."""
    if os.environ.get(ENV_DIR):
        return os.environ[ENV_DIR]
    here = os.path.realpath(start or os.getcwd())
    while True:
        if any(os.path.exists(os.path.join(here, m)) for m in PROJECT_MARKERS):
            return os.path.join(here, CACHE_DIR_NAME)
        parent = os.path.dirname(here)
        if parent == here:
            return user_folder()
        here = parent


class Unsafe(Exception):
    """A cache folder or key file that must not be used (a link, another user's, writable by others)."""


def open_folder(folder: str) -> int:
    """A descriptor of `folder` (an absolute path), opened one component at a time without following a link:
    a folder on the way swapped for a link makes this fail (ELOOP or ENOTDIR), it is never followed."""
    fd = os.open(os.sep, _FOLDER_FLAGS)
    try:
        for part in [p for p in folder.split(os.sep) if p]:
            nxt = os.open(part, _FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, limit: int, dir_fd: int | None = None, follow: bool = True,
                 whole: bool = False) -> bytes | None:
    """Up to `limit` bytes of the regular file `path` (a `.gitignore`, a README, `.git/config`, a cache file the
    run reads beside the files it migrates); None when it cannot be read or is not a regular file: a FIFO would
    block the run, `/dev/zero` never ends. `follow=False`: None for a link too. `whole`: None for a file larger
    than `limit`, which is then not read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (whole and st.st_size > limit):  # a folder too
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1 if whole else limit)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if whole and len(data) > limit else data


def owned_folder(path: str | os.PathLike, create: bool, private: bool = False) -> int | None:
    """A descriptor of the folder `path`, opened without following a link, after checking that it is a folder
    of this user (not writable by others when `private`); None when it is missing and not to be created.
    Unsafe when it is a link or someone else's; OSError when it cannot be created or opened."""
    path = os.path.abspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.mkdir(path, 0o700 if private else 0o777)
        except FileExistsError:
            pass
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise Unsafe(f"the cache folder {path} is a symbolic link; the cache was not used (remove the link, or "
                     "run with --no-cache)")
    parent, name = os.path.split(path)
    fd = open_folder(os.path.join(os.path.realpath(parent), name))
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise Unsafe(f"{path} is not a folder; the cache was not used")
        if st.st_uid != os.geteuid():
            raise Unsafe(f"the cache folder {path} belongs to another user (uid {st.st_uid}); the cache was not "
                         "used (remove the folder, or run with --no-cache)")
        if private and st.st_mode & 0o022:
            raise Unsafe(f"the folder {path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}); the "
                         "cache was not used (`chmod go-w` it)")
    except BaseException:
        os.close(fd)
        raise
    return fd


@functools.lru_cache(maxsize=1)
def user_key() -> bytes:
    """The per-user secret that authenticates what the tool keeps: `cache-key` (mode 0600) in the user cache
    folder, created on first use. Unsafe or OSError when it cannot be created or kept safely (then: no cache)."""
    key = read_key(create=True)
    assert key is not None
    return key


def read_key(create: bool) -> bytes | None:
    """`user_key`, read afresh; without `create`, None where there is none yet (a replay looks, a run makes it)."""
    folder = owned_folder(user_folder(), create=create, private=True)
    if folder is None:
        return None
    try:
        for _ in range(3):
            try:
                fd = os.open(KEY_FILE, os.O_RDONLY | _OPEN, dir_fd=folder)
            except FileNotFoundError:
                if not create:
                    return None
                _create_key(folder)
                continue
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                    raise Unsafe(f"{os.path.join(user_folder(), KEY_FILE)} is not a file of this user with mode "
                                 "0600; the cache was not used (remove the file: a new one is made)")
                key = fh.read(KEY_BYTES + 1)
            if len(key) != KEY_BYTES:
                raise Unsafe(f"{os.path.join(user_folder(), KEY_FILE)} is damaged; the cache was not used (remove "
                             "the file: a new one is made)")
            return key
        raise OSError(errno.ENOENT, "the cache key vanished while it was made")
    finally:
        os.close(folder)


def _create_key(folder: int) -> None:
    """Written whole under a temporary name, then linked into place: a run reading it meanwhile sees no key
    or the whole key, and of two runs making it at once, the first one's stays."""
    tmp = f".key-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(KEY_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, KEY_FILE, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp, dir_fd=folder)


def entries(folder: str, suffixes: tuple[str, ...] | None = None, names: tuple[str, ...] = ()) -> list[str] | None:
    """The sorted entries of `folder`, a sub-folder's name ending in `/`: those that end with one of `suffixes` or
    are one of `names` (all of them without `suffixes`); None when it cannot be listed."""
    try:
        with os.scandir(folder) as listing:
            found = [e.name + "/" if e.is_dir() else e.name for e in listing]
    except OSError:
        return None
    return sorted(n for n in found if suffixes is None or n.endswith(suffixes) or n in names)


def listing_key(folder: str, suffixes: tuple[str, ...] | None = None, names: tuple[str, ...] = ()) -> str:
    """The key under which a result keeps the `entries` of a folder it depends on, among the files it read
    (`FileResult.files_read`, engine/cache.py): the folder's path, a separator, then the filter after a NUL, which
    no path holds."""
    return "\0".join((os.path.join(os.path.abspath(folder), ""), "\t".join(suffixes or ()) if suffixes is not None
                       else "*", "\t".join(names)))


def listing_digest(key: str, found: list[str] | None = None) -> str | None:
    """The digest of the `entries` a `listing_key` names (`found`, where they were just listed); None when the folder
    cannot be listed."""
    folder, suffixes, names = key.split("\0")
    if found is None:
        found = entries(folder, None if suffixes == "*" else tuple(suffixes.split("\t")) if suffixes else (),
                        tuple(names.split("\t")) if names else ())
    return None if found is None else digest("\n".join(found).encode())


# While a run is recorded (engine/replay.py): called with each listing made for a few names (`names_ending`)
names_noted: list = [None]


def names_ending(folder: str, suffix: str) -> list[str] | None:
    """The names in `folder` that end with `suffix`, sorted; None when it cannot be listed. What a run recorded for
    a replay depends on is those names, not the folder's other entries: a folder above the tree (`/tmp`, a home)
    changes all the time."""
    with own_io():
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(suffix))
        except OSError:
            names = None
    if names_noted[0] is not None:
        names_noted[0](folder, suffix, names)
    return names


# While positive, the tool is reading or writing its own cache, not the tree: a run being recorded for a replay
# (engine/replay.py) does not count those files among its inputs.
own_files = [0]


@contextlib.contextmanager
def own_io():
    own_files[0] += 1
    try:
        yield
    finally:
        own_files[0] -= 1
