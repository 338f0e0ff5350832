"""A `check` whose inputs have not changed since a recorded run prints what that run printed, without loading the
command line, the rules or a single source: the warm run of a pre-commit hook, an editor or CI.

Recording. A `check` over paths that uses the cache (`cli/commands.py`) notes, while it runs, every path it or one
of its workers looked at: each file opened, each folder listed (Python's audit events `open`, `os.listdir` and
`os.scandir`) and each path probed (`os.stat` and `os.lstat`, which `Path.exists`, `os.path.isfile` and
`realpath` go through), a missing one as much as one that is there. Then it keeps, beside the result cache, one
record for the exact command line, working folder, environment, terminals and tool (`run_key`): the signature of
each of those paths (`signature`: type, inode, device, size, mtime and ctime, of the link and of what it points
to; of a folder only went through, its identity; a path that was missing, missing still), the names a folder
listed for a few of them had (`store.names_ending`), what it wrote on standard output and error, and its exit
code. Workers hand over what they looked at with each share of files (`take`, runner.py).

Replaying. `replay` finds the record of the same key and compares every signature with the path's now: one
difference (a file edited, added to or removed from a folder that was listed, a config file created where one was
looked for) and the command runs in full. A file's content cannot change without its ctime changing, which no
program sets back; a folder's entries, without its own. So a record stands for exactly the run it recorded.

Trust. The cache folder is untrusted input (docs/reliability.md): a record is a MAC'd JSON document, never code,
and a record the user's secret (`store.user_key`) did not sign is ignored. The race: a file changed while the run
read it, within the resolution of the file system's clock, would carry a timestamp that cannot tell "before" from
"after"; a run that finds any of its inputs changed less than `SLACK_NS` before it started keeps no record (the
next run does).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time

from neuron_migrate.engine import store
from neuron_migrate.engine.store import compare_digest

FORMAT = 1
PREFIX = "replay-"
SLACK_NS = 2_000_000_000  # wider than any file system's timestamp granularity (FAT: 2 s) and clock skew we meet
KEEP = 4  # records kept per cache folder, the most recent (one per command line, folder and environment)
MAX_RECORD = 256 << 20  # a larger record is not read
# Shell bookkeeping that changes from one command to the next and that the tool never reads
VOLATILE_ENV = frozenset({"_", "OLDPWD"})
# The command line, when the command runs as `neuron-migrate` (start.py): a command invoked otherwise (in a test's
# process) records nothing, its arguments are not `sys.argv`'s
ARGV: list[str] | None = None
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def run_key(argv: list[str]) -> str:
    """What a record is kept for: the tool and the Python running it, the working folder, the command line, the
    environment, and whether standard output and error are terminals (colours, progress)."""
    env = sorted((k, v) for k, v in os.environ.items() if k not in VOLATILE_ENV)
    ttys = [_isatty(fd) for fd in (1, 2)]
    return store.digest(json.dumps([FORMAT, sys.executable, sys.version, store.tool_fingerprint(), os.getcwd(),
                                    list(argv), env, ttys]).encode())


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def signature(path: str, listed: bool = False) -> list:
    """What changes when the file or folder at `path` changes in a way a run could see: the type, inode, device,
    size, mtime and ctime of a file (and those of what a link points to); of a folder, its type, inode and device,
    and its size, mtime and ctime too where the run `listed` it (they change with its entries); [errno] for a path
    that cannot be looked at. A folder a run only went through (`realpath`, a probe for a file in it) may have
    its entries change without the run seeing anything new: `/tmp` changes all the time."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return [exc.errno]
    sig = _fields(st, listed)
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except OSError as exc:
            return [*sig, exc.errno]
        sig += _fields(st, listed)
    return sig


def _fields(st: os.stat_result, listed: bool) -> list:
    if stat.S_ISDIR(st.st_mode) and not listed:
        return [st.st_mode, st.st_ino, st.st_dev, None, None, None]
    return [st.st_mode, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _changed_since(sig: list, moment: int) -> bool:
    """Whether the mtime or ctime of a signature (the link's or its target's) is at `moment` or later."""
    return any(isinstance(t, int) and t >= moment for t in (*sig[4:6], *sig[10:12]))


# -- replaying --------------------------------------------------------------------------------------------------

def replay(argv: list[str]) -> int | None:
    """Print what the recorded `check` with these arguments printed and return its exit code, when nothing it
    looked at has changed since; None (run the command) otherwise, or when there is no record to trust."""
    if not argv or argv[0] != "check" or "--no-cache" in argv or sys.stdout is None or sys.stderr is None:
        return None
    try:
        record = _record(argv)
        if record is None:
            return None
        inputs, listed, names = record["inputs"], frozenset(record["listed"]), record["names"]
        out, err, code = record["out"], record["err"], record["exit"]
        if not (isinstance(inputs, dict) and isinstance(out, str) and isinstance(err, str) and type(code) is int):
            return None
        for path, sig in inputs.items():
            if signature(path, path in listed) != sig:
                return None
        for folder, suffix, found in names:
            if store.names_ending(folder, suffix) != found:
                return None
    except (OSError, ValueError, TypeError, KeyError, store.Unsafe):
        return None
    try:
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
        if err:
            sys.stderr.write(err)
            sys.stderr.flush()
    except BrokenPipeError:  # `check | head`: as the full command ends (click's way), quietly
        _quiet_exit()
        return 1
    return code


def _record(argv: list[str]) -> dict | None:
    key = store.read_key(create=False)
    if key is None:
        return None
    name = f"{PREFIX}{run_key(argv)}.json"
    folder = store.owned_folder(store.default_dir(), create=False)
    if folder is None:
        return None
    try:
        raw = store.read_regular(name, MAX_RECORD, dir_fd=folder, follow=False, whole=True)
    finally:
        os.close(folder)
    if raw is None:
        return None
    mac, sep, body = raw.partition(b"\n")
    if not sep or not compare_digest(mac, _mac(key, name, body).encode()):
        return None
    record = json.loads(body)
    return record if isinstance(record, dict) else None


def _mac(key: bytes, name: str, body: bytes) -> str:
    return store.keyed_digest(key, name.encode() + b"\0" + body)


def _quiet_exit() -> None:
    """Standard output's reader is gone: nothing more goes there, nor a complaint at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# -- recording --------------------------------------------------------------------------------------------------

class _Recording:
    def __init__(self, key: str) -> None:
        self.key = key
        self.started = time.time_ns()
        self.cwd = os.getcwd()
        self.seen: set[str] = set()
        self.listed: set[str] = set()  # the folders among them whose entries were read
        # (folder, suffix) -> the names it had that end so (store.names_ending): a listing for a few names
        self.names: dict[tuple[str, str], list[str] | None] = {}
        self.spoiled = False


_recording: _Recording | None = None
_hooked = False
_real_stat, _real_lstat = os.stat, os.lstat


def _note(path: object, listed: bool = False) -> None:
    recording = _recording
    if recording is None or store.own_files[0] or path is None or isinstance(path, int):
        return
    try:
        path = os.fspath(path)  # type: ignore[arg-type]
    except TypeError:
        return
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if "\0" in path:
        return  # not a path: a folder's filtered listing among a result's files read (store.listing_key)
    path = path if os.path.isabs(path) else os.path.join(recording.cwd, path)
    recording.seen.add(path)
    if listed:
        recording.listed.add(path)


def _audit(event: str, args: tuple) -> None:
    if _recording is None:
        return
    if event == "open":
        mode, flags = args[1], args[2]
        if (isinstance(mode, str) and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)) or \
                (mode is None and isinstance(flags, int) and flags & _WRITES):
            return  # written, not read (a temporary file, a byte-compiled module)
        _note(args[0])
    elif event in ("os.listdir", "os.scandir"):
        _note(args[0] if args[0] is not None else ".", listed=True)


def _stat(path, *args, **kwargs):
    if kwargs.get("dir_fd") is None:
        _note(path)
    return _real_stat(path, *args, **kwargs)


def _lstat(path, *args, **kwargs):
    if kwargs.get("dir_fd") is None:
        _note(path)
    return _real_lstat(path, *args, **kwargs)


def start(argv: list[str]) -> None:
    """Note what this process (and the workers it forks from now on) looks at, for a record of the command `argv`
    (`finish`). An audit hook cannot be removed: one per process, idle when nothing is recorded."""
    global _recording, _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    _recording = _Recording(run_key(argv))
    os.stat, os.lstat = _stat, _lstat
    store.names_noted[0] = _names


def recording() -> bool:
    return _recording is not None


def _names(folder: str, suffix: str, found: list[str] | None) -> None:
    if _recording is not None:
        _recording.names[os.path.join(_recording.cwd, folder), suffix] = found


Taken = tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, str, "list[str] | None"], ...]]


def take() -> Taken:
    """What this process noted so far (the paths, the folders listed among them, the listings for a few names),
    which it then forgets (a worker hands it over with each share of files it processed)."""
    if _recording is None:
        return (), (), ()
    taken = (tuple(_recording.seen), tuple(_recording.listed),
             tuple((folder, suffix, found) for (folder, suffix), found in _recording.names.items()))
    _recording.seen.clear()
    _recording.listed.clear()
    _recording.names.clear()
    return taken


def noted(paths, listed=(), names=()) -> None:
    """What a worker looked at (`take`), or paths that the run's result depends on."""
    for path in paths:
        _note(path)
    for path in listed:
        _note(path, listed=True)
    for folder, suffix, found in names:
        _names(folder, suffix, found)


def spoil() -> None:
    """This run's output does not stand for its inputs alone (a file that could not be processed for a reason of
    its own, an internal error): no record."""
    if _recording is not None:
        _recording.spoiled = True


def stop() -> _Recording | None:
    global _recording
    recording, _recording = _recording, None
    os.stat, os.lstat = _real_stat, _real_lstat
    store.names_noted[0] = None
    return recording


def finish(out: str, err: str, code: int) -> bool:
    """Keep the record of the run started with `start`: what it printed and its exit code, with the signature of
    everything it looked at. Nothing is kept (False) when the run was spoiled, one of its inputs changed too
    recently to tell whether the run saw the change, or the cache folder or the secret cannot be used."""
    recording = stop()
    if recording is None or recording.spoiled:
        return False
    try:
        directory = os.path.abspath(store.default_dir())
        own = tuple({os.path.join(p, "") for p in (directory, os.path.realpath(directory),
                                                    os.path.abspath(store.user_folder()))})
        inputs = {}
        threshold = recording.started - SLACK_NS
        for path in sorted(recording.seen):
            if path.startswith(own) or os.path.join(path, "") in own:
                continue
            sig = signature(path, path in recording.listed)
            if len(sig) > 1 and _changed_since(sig, threshold):
                return False
            inputs[path] = sig
        names = sorted([folder, suffix, found] for (folder, suffix), found in recording.names.items())
        if any(store.names_ending(folder, suffix) != found for folder, suffix, found in names):
            return False  # a folder's names changed during the run
        key = store.user_key()
        body = json.dumps({"inputs": inputs, "listed": sorted(recording.listed & inputs.keys()), "names": names,
                           "out": out, "err": err, "exit": code},
                          separators=(",", ":")).encode()
        name = f"{PREFIX}{recording.key}.json"
        from neuron_migrate.engine.sources import write_in_folder

        folder = store.owned_folder(directory, create=True)
        assert folder is not None
        try:
            write_in_folder(folder, name, _mac(key, name, body).encode() + b"\n" + body)
            _prune(folder, name)
        finally:
            os.close(folder)
    except (OSError, ValueError, store.Unsafe):  # ValueError: text JSON cannot carry; no record, the run stands
        return False
    return True


def _prune(folder: int, kept: str) -> None:
    """The `KEEP` most recent records stay (a record per command line, folder and environment)."""
    records = []
    listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0), dir_fd=folder)
    try:
        for entry in os.scandir(listing):
            if entry.name.startswith(PREFIX) and entry.name.endswith(".json") and entry.name != kept:
                try:
                    records.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
                except OSError:
                    continue
    finally:
        os.close(listing)
    for _, name in sorted(records, reverse=True)[KEEP - 1:]:
        try:
            os.unlink(name, dir_fd=folder)
        except OSError:
            pass
