"""A content-hash cache of per-file results, so a second run over an unchanged tree parses nothing.

An entry is valid for one file path, the hash of its bytes, the hashes of the other files its handlers read
(`FileResult.files_read`: the program a launch script starts, included requirements files; a file that was
looked for and missing must still be missing; the entries of a folder a decision listed, by their names), the tool (its version and a fingerprint of its own code and
rule data, so an edited install never serves stale results), the settings (`Settings.key()`) and the mode
(check or rewrite). Entries live in one JSON file per tool, settings and mode under
`.neuron_migrate_cache/` at the project root (or the user cache folder outside a project). Runs read it once
and write it once, atomically: concurrent runs never see a torn file, and the worst a race does is drop
entries another run would have added. One more entry (`PROJECT_ENTRY`) keeps the project model's facts of the
run's files with what the model read (engine/runner.py `_project_facts`), so a warm run builds no model.

The cache folder is not trusted (docs/reliability.md): it may be committed to the repository, restored from a
shared CI cache or edited. JSON, not pickle, so reading it runs no code; every entry carries a MAC (keyed BLAKE2b)
of all it says (the cache file's name, the path, the digest of the source bytes, the result, the other files read)
keyed by a secret of the user kept outside the tree (`user_key`), so an entry the tool did not write itself is a
miss, and a `rewrite` never writes bytes it did not compute. No secret that can be kept safely: no cache. The
folder and its files are never reached through a link: a folder that is a link or belongs to another user is
not used (a warning says so), and files are created and replaced inside the opened folder without following
links (`sources.write_in_folder`).
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

from neuron_migrate.findings import FileResult, Finding
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import read_regular, write_in_folder
from neuron_migrate.engine.store import (  # noqa: F401 (the cache's folder, key and fingerprint live in store.py)
    CACHE_DIR_NAME, ENV_DIR, KEY_BYTES, KEY_FILE, PROJECT_MARKERS, Unsafe, compare_digest, default_dir, digest,
    keyed_digest, listing_digest, own_io, tool_fingerprint, user_folder, user_key)
from neuron_migrate.engine.store import owned_folder as _owned_folder

FORMAT = 5  # 2: entries list the other files a result depends on; 3: entries carry an HMAC; 4: store.py's fingerprint;
# 5: the MAC is keyed BLAKE2b (store.keyed_digest), as the replay's: `hashlib` and OpenSSL are no longer loaded
MAX_CACHE_FILE = 1 << 30  # a larger cache file is not read (it would only cost memory)
# The entry of the project model's facts (engine/project.py): no file path holds a NUL
PROJECT_ENTRY = "\0project"
_OPEN = getattr(os, "O_CLOEXEC", 0) | os.O_NOFOLLOW | os.O_NONBLOCK  # a planted FIFO: no wait


class ResultCache:
    def __init__(self, directory: str | os.PathLike, settings: Settings, rewrite: bool) -> None:
        self.directory = Path(directory)
        mode = "rewrite" if rewrite else "check"
        key = digest(f"{FORMAT}\0{tool_fingerprint()}\0{settings.key()}".encode())
        self.name = f"{mode}-{key}.json"
        self.file = self.directory / self.name
        self.dirty = False
        # Why the cache is off for this run, when a folder or the key is not safe to use (told as a warning)
        self.refused: str | None = None
        self.key: bytes | None = None
        try:
            with own_io():  # the tool's own files, not inputs of the run (engine/replay.py)
                self.key = user_key()
                self.entries: dict[str, list] = self._load()
        except Unsafe as exc:
            self.refused, self.key, self.entries = str(exc), None, {}
        except OSError:
            self.key, self.entries = None, {}  # no safe place for the secret (a read-only home): no cache

    def _load(self) -> dict[str, list]:
        folder = _owned_folder(self.directory, create=False)
        if folder is None:
            return {}
        try:
            # a regular file, not through a link (a FIFO planted under the cache file's name would block the run)
            raw = read_regular(self.name, MAX_CACHE_FILE, dir_fd=folder, follow=False, whole=True)
            if raw is None:
                return {}
            data = json.loads(raw)
        except ValueError:
            return {}
        finally:
            os.close(folder)
        return data if isinstance(data, dict) else {}

    def __len__(self) -> int:
        return len(self.entries)

    def _mac(self, path: str, data_digest: str, raw: object, files_read: object) -> str:
        assert self.key is not None
        message = json.dumps([self.name, path, data_digest, raw, files_read], sort_keys=True, separators=(",", ":"))
        return keyed_digest(self.key, message.encode())

    def get(self, path: str, data_digest: str, data: bytes) -> FileResult | None:
        """The result kept for `path` with these bytes; None (a miss) for an entry of other bytes, one whose
        other files changed, or one the tool did not write (its MAC does not match)."""
        entry = self.entries.get(path)
        if self.key is None or not isinstance(entry, list) or len(entry) != 4 or entry[0] != data_digest:
            return None
        _, raw, files_read, mac = entry
        try:
            if not (isinstance(mac, str) and compare_digest(mac, self._mac(path, data_digest, raw, files_read))):
                return None
            files_read = dict(files_read)
            if any(_current_digest(other) != known for other, known in files_read.items()):
                return None
            result = _result_from_json(path, data, raw)
        except (KeyError, TypeError, ValueError):
            return None
        result.files_read = files_read
        return result

    def put(self, path: str, data_digest: str, result: FileResult) -> None:
        if self.key is None:
            return
        raw = _result_to_json(result)
        files_read = dict(result.files_read)
        self.entries[path] = [data_digest, raw, files_read, self._mac(path, data_digest, raw, files_read)]
        self.dirty = True

    def project(self, key: str) -> dict | None:
        """What the entry of the project model (`PROJECT_ENTRY`) kept for the run `key` names: {"inputs": what the
        model read, "facts": path -> facts}; None when there is none for this key or the tool did not write it."""
        entry = self.entries.get(PROJECT_ENTRY)
        if self.key is None or not isinstance(entry, list) or len(entry) != 3 or entry[0] != key:
            return None
        _, raw, mac = entry
        try:
            if not (isinstance(mac, str) and compare_digest(mac, self._mac(PROJECT_ENTRY, key, raw, None))):
                return None
        except (TypeError, ValueError):
            return None
        return raw if isinstance(raw, dict) else None

    def put_project(self, key: str, raw: dict) -> None:
        if self.key is None:
            return
        self.entries[PROJECT_ENTRY] = [key, raw, self._mac(PROJECT_ENTRY, key, raw, None)]
        self.dirty = True

    def save(self) -> None:
        """Merge with what other runs saved meanwhile and replace the file atomically; failures are ignored
        (a cache that cannot be written only costs time)."""
        if not self.dirty or self.key is None:
            return
        try:
            with own_io():
                self._write()
        except (OSError, Unsafe):
            return
        self.dirty = False

    def _write(self) -> None:
        merged = {**self._load(), **self.entries}
        folder = _owned_folder(self.directory, create=True)
        assert folder is not None
        try:
            _mark_cache_folder(folder)
            write_in_folder(folder, self.name, json.dumps(merged, separators=(",", ":")).encode())
        finally:
            os.close(folder)


def _current_digest(path: str) -> str | None:
    """The digest of a file's bytes now; None when it is not a readable file (as a handler found it missing). A
    folder's entries a result depends on are kept under a `store.listing_key` (it holds a NUL)."""
    if "\0" in path:
        return listing_digest(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO: no wait
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return digest(fh.read())
        except OSError:
            return None


def _mark_cache_folder(folder: int) -> None:
    """Keep the folder out of git and out of backups, like other tools' caches (files made here, never written
    through a link that is already there)."""
    for name, text in ((".gitignore", "# Created by neuron-migrate\n*\n"),
                       ("CACHEDIR.TAG",
                        "Signature: 8a477f597d28d172789f06886806bc55\n# neuron-migrate result cache\n")):
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN, 0o644, dir_fd=folder)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)


def _result_to_json(result: FileResult) -> dict:
    out: dict = {}
    if result.findings:
        out["findings"] = [f.to_json() for f in result.findings]
    if result.manual:
        out["manual"] = [f.to_json() for f in result.manual]
    if result.applied:
        out["applied"] = result.applied
    if result.changed:
        assert result.new_bytes is not None
        out["new"] = base64.b64encode(result.new_bytes).decode("ascii")
    for name in ("error", "skipped", "warnings"):
        if getattr(result, name):
            out[name] = getattr(result, name)
    return out


def _result_from_json(path: str, data: bytes, raw: dict) -> FileResult:
    return FileResult(
        path,
        findings=[Finding(**f) for f in raw.get("findings", ())],
        manual=[Finding(**f) for f in raw.get("manual", ())],
        applied=dict(raw.get("applied", {})),
        old_bytes=data,
        new_bytes=base64.b64decode(raw["new"]) if "new" in raw else None,
        error=raw.get("error"),
        skipped=raw.get("skipped"),
        warnings=[str(w) for w in raw.get("warnings", ())],
    )
