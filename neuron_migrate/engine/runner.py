"""Run handlers over discovered files: read bytes, process (in parallel), then write or report.

The order of results is the order of discovery, whatever the number of worker processes. With a cache, a
file whose bytes, path, settings and tool are unchanged since a previous run is not processed again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from neuron_migrate.engine.cache import ResultCache, default_dir, digest
from neuron_migrate.engine.discover import Problem, Target, discover
from neuron_migrate.engine import shards
from neuron_migrate.engine.shards import Shard
from neuron_migrate.engine.stack import Library, set_aside
from neuron_migrate.findings import FileResult
from neuron_migrate.engine import handlers, replay, shared
from neuron_migrate.cli.progress import Progress
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import SourceError, read_bytes, size_limit, write_atomic

PARALLEL_THRESHOLD = 16  # below this many files, worker start-up costs more than it saves
DEEP_STACK_BYTES = 512 * 1024 * 1024
DEEP_RECURSION_LIMIT = 30_000


@dataclass
class Run:
    results: list[FileResult] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # XLA-stack libraries whose files were found and left alone (engine/stack.py): one note each, not findings
    libraries: list[Library] = field(default_factory=list)
    # shown path -> real path at discovery: the writes refuse a file that resolves elsewhere by then
    reals: dict[str, str] = field(default_factory=dict)
    # the project model (engine/project.py): programs, their files and targets; None for standard input, and when
    # the cache held its facts (`run(model=True)` builds it always)
    project: object | None = None
    # path -> the key of the result this run gave the file (its bytes and project facts, as the cache keys it)
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def errors(self) -> list[tuple[str, str]]:
        out = [(p.path, p.message) for p in self.problems if not p.warning]
        out += [(r.path, r.error) for r in self.results if r.error]
        return out

    @property
    def warnings(self) -> list[tuple[str, str]]:
        """What the run met and went past (a folder loop): told, not a failure."""
        return [(p.path, p.message) for p in self.problems if p.warning] + [
            (r.path, w) for r in self.results for w in r.warnings]

    @property
    def findings(self):
        return [f for r in self.results for f in r.findings]

    @property
    def changed(self) -> list[FileResult]:
        return [r for r in self.results if r.changed and not r.error]


@dataclass
class Outcome:
    """A processed file, with what the cache needs: the hash of the bytes processed, and whether the result
    depends on those bytes only (an internal error does not)."""

    result: FileResult
    digest: str | None = None
    cacheable: bool = False
    # the paths a worker looked at while it processed its share of files, for a run being recorded (engine/replay.py)
    seen: replay.Taken = ((), (), ())


def _process(target: Target, settings: Settings, rewrite: bool, data: bytes | None = None) -> Outcome:
    if data is None:
        try:
            data = read_bytes(target.path, size_limit(target.kind), target.kind)
        except SourceError as exc:
            return Outcome(FileResult(target.path, error=str(exc)))
    key = digest(data)
    try:
        try:
            result = handlers.process(target.path, data, target.kind, settings, rewrite)
        except RecursionError:
            result = _with_deep_stack(handlers.process, target.path, data, target.kind, settings, rewrite)
    except SourceError as exc:
        return Outcome(FileResult(target.path, old_bytes=data, error=str(exc)), key, cacheable=True)
    except RecursionError:
        return Outcome(FileResult(target.path, old_bytes=data,
                                  error="nesting too deep to process; the file was left alone"))
    except Exception as exc:  # an internal error must not stop the run nor touch the file
        return Outcome(FileResult(target.path, old_bytes=data,
                                  error=f"internal error ({type(exc).__name__}: {exc}); the file was left alone. "
                                  "Please report it at https://github.com/neuron-migrate/neuron-migrate/issues"))
    if result is None:
        result = FileResult(target.path, old_bytes=data, skipped=f"no handler for {target.kind} files")
    return Outcome(result, key, cacheable=True)


def _with_deep_stack(fn, *args):
    """fn(*args) in a thread with a large stack and recursion limit: a generated table of thousands of implicitly
    concatenated strings nests that deep in the syntax tree, and LibCST visits it recursively."""
    outcome: dict[str, object] = {}

    def call() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # handed to the calling thread
            outcome["error"] = exc

    previous_size = threading.stack_size(DEEP_STACK_BYTES)
    previous_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous_limit, DEEP_RECURSION_LIMIT))
    try:
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        thread.join()
    finally:
        # back as it was: whether a later file is too deep must not depend on the files processed before it
        sys.setrecursionlimit(previous_limit)
        threading.stack_size(previous_size)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]


def _process_chunk(args: tuple[list[tuple[Target, Settings]], bool]) -> list[Outcome]:
    """Worker side. The bytes of unchanged files do not travel back: the parent does not need them."""
    targets, rewrite = args
    out = []
    replay.take()  # what this process looked at before: the parent's, or another share's
    for target, settings in targets:
        outcome = _process(target, settings, rewrite)
        if not outcome.result.changed:
            outcome.result.old_bytes = None
        out.append(outcome)
    if out:
        out[-1].seen = replay.take()
    return out


# Python's cyclic collector looks at its youngest objects every 700 allocations by default. A file's trees are
# hundreds of thousands of small objects that reference counting frees (they hold no cycles), so the files are
# processed with a first threshold of 50,000: over the ecosystem's user code 3% less CPU for `check` and 6% for
# `rewrite`, for 4-7 MB more peak memory (docs/performance.md).
GC_THRESHOLD = (50_000, 20, 20)


@contextlib.contextmanager
def _fewer_collections():
    old = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*old)


class Workers:
    """The worker processes of a run, forked before the project model is built where the run will process most of
    its files: each imports the handlers itself (`handlers.prepare`, the rules and LibCST: about 0.13 s) while this
    process builds the model, instead of this process importing them first and forking after."""

    def __init__(self, jobs: int, kinds) -> None:
        from concurrent.futures import ProcessPoolExecutor  # only here: its import costs a single-file run time

        self.jobs = jobs
        self.pool = ProcessPoolExecutor(max_workers=jobs, initializer=_worker_start, initargs=(frozenset(kinds),))
        # the first submit forks the workers: Ctrl-C there would leave a worker that the pool does not know yet (and
        # that the exit then waits for), or a worker that dies of it before `_worker_start`, with a traceback
        with _signals_held(signal.SIGINT) as received:
            self.pool.submit(_ready)
        if received:
            self.stop()
            signal.raise_signal(received[0])

    def stop(self) -> None:
        _stop(self.pool)

    def read_modules(self, code: list) -> list:
        """`project.read_modules(code)`, shared with the workers: the model's reads of the Python files and
        notebooks are most of its time, and the workers, once their imports are done, would wait for it. The
        shares go to the pool in order; this process takes itself, from the last, each share no worker has taken
        yet, and then the workers' results. A share a worker could not return is read here."""
        from neuron_migrate.engine.project import read_modules

        size = max(4, len(code) // (self.jobs * 8))
        shares = [code[i:i + size] for i in range(0, len(code), size)]
        parts = []
        try:
            parts += [self.pool.submit(_read_share, share) for share in shares]
        except Exception:  # a pool broken or shut down: everything is read here
            for part in parts:
                _cancelled(part)
            return read_modules(code)
        own = {i: read_modules(shares[i]) for i in reversed(range(len(shares))) if _cancelled(parts[i])}
        out = []
        for i, part in enumerate(parts):
            if i not in own:
                try:
                    read, seen = _result(part)
                except Exception:  # a worker gone (BrokenProcessPool) or an error of its own: as if read here
                    read = read_modules(shares[i])
                else:
                    replay.noted(*seen)
                own[i] = read
            out += own.pop(i)
        return out


def _cancelled(part) -> bool:
    """`part.cancel()`, for a task the pool has not handed to a worker yet. Until its manager thread drops it, the
    pool still lists it, and where the pool breaks first (a worker killed, Ctrl-C: `_stop`), Python 3.10 and 3.11
    mark every listed task failed, this one too: that raises in the manager thread (InvalidStateError; 3.12 ignores
    it), which then dies before it closes the pipe of tasks, and the exit waits for ever on the thread still writing
    to that pipe. The cancelled task takes no failure."""
    if not part.cancel():
        return False
    part.set_exception = _ignored
    return True


def _ignored(exc: BaseException) -> None:
    """What a cancelled task does with the failure a broken pool gives it: nothing."""


def _ready() -> None:
    """The task that starts the workers."""


def _read_share(code: list) -> tuple[list, replay.Taken]:
    """Worker side of `Workers.read_modules`: the modules read, and what this share looked at."""
    from neuron_migrate.engine.project import read_modules

    replay.take()  # what this process looked at before
    read = read_modules(code)
    return read, replay.take()


def _chunks(targets: list, jobs: int) -> list[list]:
    """Consecutive slices of `targets`, each a share of what is left: large first, then smaller and smaller, so
    that the workers finish together whatever files the last slices hold (guided scheduling)."""
    out, i = [], 0
    while i < len(targets):
        size = max(1, min(64, (len(targets) - i) // (jobs * 4)))
        out.append(targets[i:i + size])
        i += size
    return out


def _process_all(targets: list[tuple[Target, Settings]], known: dict[str, bytes], rewrite: bool,
                 jobs: int, workers: Workers | None = None) -> Iterator[Outcome]:
    """Outcomes in the order of `targets` (each with the settings of its file), computed in `jobs` worker
    processes when that pays (in `workers` where they were started already)."""
    if workers is None and (jobs <= 1 or len(targets) < PARALLEL_THRESHOLD):
        with _fewer_collections():
            for target, settings in targets:
                yield _process(target, settings, rewrite, known.get(target.path))
        return
    if workers is None:
        handlers.prepare({target.kind for target, _ in targets})  # before the fork: the workers inherit it
        workers = Workers(jobs, ())
    pool = workers.pool
    try:
        parts = [pool.submit(_process_chunk, (c, rewrite)) for c in _chunks(targets, jobs)]
        for i, part in enumerate(parts):
            parts[i] = None  # its results go once used, not at the end of the run
            yield from _result(part)
        pool.shutdown()
    except BaseException:  # Ctrl-C, or the caller stops early: the workers go now, mid-file or not
        workers.stop()
        raise


# How often the main thread wakes while it waits for a worker's results (seconds).
WAKE = 0.2


def _result(part):
    """`part.result()`, waking every `WAKE` seconds. A signal (Ctrl-C) that the kernel hands to one of the pool's
    threads is handled in this, the main thread (CPython runs Python handlers there), and only once it wakes: a wait
    without end would leave it to whenever the next result comes, and a worker stuck or gone sends none."""
    from concurrent.futures import TimeoutError as Waiting  # the builtin TimeoutError from 3.11 on

    while True:
        try:
            return part.result(timeout=WAKE)
        except Waiting:
            continue


def _worker_start(kinds: frozenset[str] = frozenset()) -> None:
    """A worker leaves Ctrl-C to the parent (a terminal sends it to every process of the group): it neither
    prints a traceback of its own nor dies holding the lock of the queue the parent reads. It imports the handlers
    of `kinds` (a pool started before the parent imported them)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.set_threshold(*GC_THRESHOLD)
    handlers.prepare(kinds)


def _stop(pool) -> None:
    """End the workers without waiting for their files (the parent is interrupted: their results are not
    wanted). `shutdown(wait=True)` would wait for each chunk, or for ever on a worker blocked on a pipe.

    A worker ended while it sent its results leaves part of a message in the pipe of results, and the pool's
    manager thread waits for the rest; this process holds the other end of that pipe, so no end of file would ever
    come, and the interpreter's exit joins that thread: closing that end once the workers are gone ends the wait."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)  # shutdown forgets it
    results = getattr(pool, "_result_queue", None)  # and this
    tasks = getattr(pool, "_call_queue", None)
    # no future is cancelled here (nor by `pool.map`, which cancels the rest when its caller is interrupted): the pool
    # marks each one broken when it finds its workers gone, and on 3.11 doing so to a cancelled future raises in its
    # manager thread (InvalidStateError, a traceback at exit; 3.12 ignores it). The model's reads cancel the shares
    # this process takes itself: those take no failure (`_cancelled`).
    pool.shutdown(wait=False)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join(timeout=1)
        if worker.is_alive():
            worker.kill()
            worker.join(timeout=1)
    if tasks is not None:  # its feeder thread may be writing to the pipe of tasks, which no worker reads now:
        tasks.cancel_join_thread()  # the exit must not wait for it (the manager thread closes the pipe, if alive)
    if results is not None:
        results._writer.close()
    if manager is not None:
        manager.join(timeout=1)
        if not manager.is_alive():  # gone with its pipe: concurrent.futures' exit hook must not wake it (on 3.11
            from concurrent.futures import process  # it can write to the pipe as it closes: a traceback at exit)

            getattr(process, "_threads_wakeups", {}).pop(manager, None)


def run(paths: Iterable[str], settings: Settings, rewrite: bool, kinds: frozenset[str] | None = None,
        jobs: int | None = None, exclude: Iterable[str] = (), use_cache: bool = False,
        progress: bool | None = None, shard: Shard | None = None, model: bool = False,
        shared_helpers: bool = True, earlier: Run | None = None) -> Run:
    """Process every file found under `paths`. `use_cache` reads and updates the result cache;
    `progress` None shows a bar on an interactive stderr for long runs; `shard` keeps its part of the files (and
    of the problems and library notes: engine/shards.py); `model` builds the project model even when the cache
    holds its facts (`Run.project`, for `check --show-project`); without `shared_helpers`, no file imports helpers from
    a module of its folder the run would write (engine/shared.py): a fix in a JSON or SARIF report is applied
    alone, so it keeps its copies. `earlier`: a run over the same paths moments ago (rewrite's count of the unsafe
    fixes left, after its writes): a file it did not change whose key is still the same (its bytes and project
    facts) takes the earlier result, findings and all, which do not depend on the mode."""
    paths = list(paths)
    targets, problems = discover(paths, kinds if kinds is not None else frozenset(handlers.HANDLERS), exclude)
    targets, libraries = set_aside(targets)
    from neuron_migrate.project_facts import settings_for

    cache = ResultCache(default_dir(), settings, rewrite) if use_cache else None
    every = targets
    if shard is not None:
        targets, problems, libraries = shards.split(shard, targets, problems, libraries)
    jobs = jobs or os.cpu_count() or 1
    # a run that will process many files starts its workers now: they import the handlers while the model is built
    # (with a warm cache, which files are left is known once the model is: workers, if any, are started then)
    reusable = {r.path: (earlier.keys[r.path], r) for r in earlier.results
                if r.path in earlier.keys and not r.error and not r.changed} if earlier is not None else {}
    fresh = sum(1 for t in targets if t.path not in reusable)  # a recount after a rewrite: the files it changed
    workers = Workers(jobs, {t.kind for t in targets}) if jobs > 1 and fresh >= PARALLEL_THRESHOLD \
        and (cache is None or not len(cache)) else None
    try:  # the workers go with the run, whatever ends it
        facts, project = _project_facts(paths, every, targets, settings, cache, model, workers)
        if not shared_helpers:
            facts = {path: f if f is None or f.shared_helpers is None else dataclasses.replace(f, shared_helpers=None)
                     for path, f in facts.items()}
        per_file = [settings_for(settings, facts[t.path]) for t in targets]
        if cache is not None and cache.refused:
            problems = [*problems, Problem(str(cache.directory), cache.refused, warning=True)]
        results: dict[int, FileResult] = {}
        known: dict[str, bytes] = {}
        keys: dict[str, str] = {}
        for i, target in enumerate(targets):
            if target.path in reusable or (cache is not None and len(cache)):
                key = _key(target, known, per_file[i])
                if key is None:
                    continue  # processed (and reported) like any other file
                hit = reusable.get(target.path)
                hit = hit[1] if hit is not None and hit[0] == key else \
                    cache.get(target.path, key, known[target.path]) if cache is not None and len(cache) else None
                if hit is not None:
                    results[i] = hit
                    keys[target.path] = key
        pending = [i for i in range(len(targets)) if i not in results]
        with Progress(len(targets), enabled=progress) as bar:
            bar.advance(len(results))
            outcomes = _process_all([(targets[i], per_file[i]) for i in pending], known, rewrite, jobs, workers)
            try:
                for i, outcome in zip(pending, outcomes):
                    result = outcome.result
                    replay.noted(*outcome.seen)
                    if not outcome.cacheable:
                        replay.spoil()
                    if result.old_bytes is None and not result.error:
                        result.old_bytes = known.get(result.path)
                    if outcome.digest is not None:
                        keys[result.path] = _entry_key(outcome.digest, per_file[i])
                        if cache is not None and outcome.cacheable:
                            cache.put(result.path, keys[result.path], result)
                    results[i] = result
                    bar.advance()
            finally:
                outcomes.close()  # interrupted between two outcomes: the workers stop now, not when collected
        if workers is not None:
            workers.pool.shutdown()  # done already, unless no file was left for them
        if cache is not None:
            cache.save()
        ordered = [results[i] for i in range(len(targets))]
        if rewrite and shared_helpers:  # the module of helpers the changed scripts of a folder now import
            # a new module only one file would import (the others' helpers were written inline): that file keeps its
            # copies, processed again without the module
            lonely = set(shared.lonely(ordered, facts)) if shard is None else set()  # a later shard may add one
            for i, target in enumerate(targets):
                if target.path in lonely:
                    alone = dataclasses.replace(facts[target.path], shared_helpers=None)
                    outcome = _process(target, settings_for(settings, alone), rewrite, known.get(target.path))
                    if outcome.result.old_bytes is None and not outcome.result.error:
                        outcome.result.old_bytes = ordered[i].old_bytes
                    ordered[i] = outcome.result
                    keys.pop(target.path, None)  # not the result its key stands for
            ordered += shared.modules(ordered, facts)
        return Run(results=ordered, problems=problems, libraries=libraries,
                   reals={t.path: t.real for t in targets if t.real}, project=project, keys=keys)
    except BaseException:
        if workers is not None:
            workers.stop()
        raise


def _project_facts(paths: list[str], every: list[Target], targets: list[Target], settings: Settings,
                   cache: ResultCache | None, model: bool,
                   workers: Workers | None = None) -> tuple[dict, object | None]:
    """The project facts of each of `targets` (path -> FileProject or None), and the project model of `every`
    target when it was built (its files read with the help of `workers`, where started). The cache keeps the facts
    with what the model read: a run whose targets, settings and working folder are the same and whose inputs read
    the same reuses them without building the model."""
    from neuron_migrate.engine.inputs import unchanged
    from neuron_migrate.project_facts import FileProject

    key = digest(json.dumps([os.getcwd(), [os.path.abspath(p) for p in paths], [[t.path, t.kind] for t in every],
                             settings.key()]).encode())
    kept = cache.project(key) if cache is not None and not model else None
    if kept is not None:
        try:
            raw = kept["facts"]
            if all(t.path in raw for t in targets) and unchanged(kept["inputs"]):
                return {t.path: None if raw[t.path] is None else FileProject(
                    **{k: tuple(v) if isinstance(v, list) else v for k, v in raw[t.path].items()})
                    for t in targets}, None
        except (KeyError, TypeError):
            pass
    from neuron_migrate.engine.project import Project  # its cost is measured: bench/ and docs/

    project = Project(paths, every, settings, workers.read_modules if workers is not None else None)
    facts = {t.path: project.of(t.path, t.kind) for t in targets}
    if cache is not None:
        cache.put_project(key, {"inputs": project.inputs(), "facts": {
            path: None if f is None else dataclasses.asdict(f) for path, f in facts.items()}})
    return facts, project


def run_bytes(path: str, data: bytes, kind: str, settings: Settings, rewrite: bool) -> Run:
    """Process bytes that are not read from a file (standard input) as the file `path` of `kind`; no cache."""
    result = _process(Target(path, kind, explicit=True), settings, rewrite, data).result
    if result.old_bytes is None and not result.error:
        result.old_bytes = data
    return Run(results=[result])


def _key(target: Target, known: dict[str, bytes], settings: Settings) -> str | None:
    """The file's key (`_entry_key`), its bytes kept in `known`; None where it cannot be read."""
    try:
        data = read_bytes(target.path, size_limit(target.kind), target.kind)
    except SourceError:
        return None
    known[target.path] = data
    return _entry_key(digest(data), settings)


def _entry_key(data_digest: str, settings: Settings) -> str:
    """A file's cache key: its bytes, and the project facts its result depends on (engine/project.py)."""
    if settings.project is None:
        return data_digest
    return digest(f"{data_digest}\0{settings.project.key()}".encode())


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM while the changed files were written: how many were (None: not known)."""

    def __init__(self, written: int | None, signum: int = signal.SIGINT) -> None:
        super().__init__(written, signum)
        self.written = written
        self.signum = signum


# Files written by this process so far: Ctrl-C after the writes (while the summary prints) still says what was written.
files_written = 0


def write_results(run: Run) -> list[tuple[str, str]]:
    """Write every changed file atomically; returns (path, error) for writes that failed (file intact).

    Ctrl-C or SIGTERM during the writes stops the run after the file being written (Interrupted, with the number
    written), so no file is left half-written and no temporary file stays behind.
    """
    global files_written
    failures = []
    written = 0
    failed_folders: set[str] = set()  # where a module of shared helpers could not be written
    with _signals_held(signal.SIGINT, signal.SIGTERM) as received:
        # a created module first: the scripts that import it are not written without it
        for result in shared.written_first(run.changed):
            if received:
                raise Interrupted(written, received[0])
            assert result.new_bytes is not None
            if shared.without_module(result, failed_folders):
                result.error = shared.NOT_WRITTEN
                failures.append((result.path, result.error))
                continue
            try:
                write_atomic(result.path, result.new_bytes, expected=result.old_bytes, real=run.reals.get(result.path))
            except OSError as exc:
                result.error = f"could not write ({exc.strerror or exc}); the file was left as it was"
                failures.append((result.path, result.error))
                if result.created:
                    failed_folders.add(os.path.dirname(result.path))
            except KeyboardInterrupt:
                raise Interrupted(written) from None
            else:
                written += 1
                files_written += 1
        if received:
            raise Interrupted(written, received[0])
    return failures


@contextlib.contextmanager
def _signals_held(*signals: int):
    """`signals` received meanwhile are recorded, not handled (a list, empty while none came): the caller handles
    them once it is safe (between two files, after the workers started)."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in signals}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
