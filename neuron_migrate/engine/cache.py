"""A content-hash cache of per-file results, so a second run over an unchanged tree parses nothing.

An entry is valid for one file path, the hash of its bytes, the hashes of the other files its handlers read
(`FileResult.files_read`: the program a launch script starts, included requirements files; a file that was
looked for and missing must still be missing), the tool (its version and a fingerprint of its own code and
rule data, so an edited install never serves stale results), the settings (`Settings.key()`) and the mode
(check or rewrite). Entries live in one JSON file per tool, settings and mode under
`.neuron_migrate_cache/` at the project root (or the user cache folder outside a project). Runs read it once
and write it once, atomically: concurrent runs never see a torn file, and the worst a race does is drop
entries another run would have added. JSON, not pickle: a cache folder committed to a repository must not be
able to run code.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
from pathlib import Path

from neuron_migrate import __version__
from neuron_migrate.findings import FileResult, Finding
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import write_atomic

CACHE_DIR_NAME = ".neuron_migrate_cache"
ENV_DIR = "NEURON_MIGRATE_CACHE_DIR"
FORMAT = 2  # 2: entries list the other files a result depends on
PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@functools.lru_cache(maxsize=1)
def tool_fingerprint() -> str:
    """The version plus the size and mtime of every module and data file of the installed tool."""
    package = Path(__file__).resolve().parents[1]  # the neuron_migrate package
    from neuron_migrate.catalogue import data_dir

    parts = [__version__, str(FORMAT)]
    for folder in (package, data_dir()):
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".py", ".toml", ".json") and "__pycache__" not in path.parts:
                st = path.stat()
                parts.append(f"{path.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns}")
    return digest("\n".join(parts).encode())


def default_dir(start: str | os.PathLike | None = None) -> Path:
    """`$NEURON_MIGRATE_CACHE_DIR`, else `.neuron_migrate_cache/` in the nearest project folder above `start`,
    else the user cache folder."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / m).exists() for m in PROJECT_MARKERS):
            return folder / CACHE_DIR_NAME
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "neuron-migrate"


class ResultCache:
    def __init__(self, directory: str | os.PathLike, settings: Settings, rewrite: bool) -> None:
        self.directory = Path(directory)
        mode = "rewrite" if rewrite else "check"
        key = digest(f"{tool_fingerprint()}\0{settings.key()}".encode())
        self.file = self.directory / f"{mode}-{key}.json"
        self.entries: dict[str, list] = self._load()
        self.dirty = False

    def _load(self) -> dict[str, list]:
        try:
            with open(self.file, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, path: str, data_digest: str, data: bytes) -> FileResult | None:
        entry = self.entries.get(path)
        if not entry or entry[0] != data_digest:
            return None
        try:
            files_read = dict(entry[2]) if len(entry) > 2 else {}
            if any(_current_digest(other) != known for other, known in files_read.items()):
                return None
            result = _result_from_json(path, data, entry[1])
        except (KeyError, TypeError, ValueError):
            return None
        result.files_read = files_read
        return result

    def put(self, path: str, data_digest: str, result: FileResult) -> None:
        self.entries[path] = [data_digest, _result_to_json(result)] + ([result.files_read] if result.files_read else [])
        self.dirty = True

    def save(self) -> None:
        """Merge with what other runs saved meanwhile and replace the file atomically; failures are ignored
        (a cache that cannot be written only costs time)."""
        if not self.dirty:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            _mark_cache_folder(self.directory)
            merged = {**self._load(), **self.entries}
            write_atomic(str(self.file), json.dumps(merged, separators=(",", ":")).encode())
        except OSError:
            return
        self.dirty = False


def _current_digest(path: str) -> str | None:
    """The digest of a file's bytes now; None when it is not a readable file (as a handler found it missing)."""
    try:
        with open(path, "rb") as fh:
            return digest(fh.read())
    except OSError:
        return None


def _mark_cache_folder(directory: Path) -> None:
    """Keep the folder out of git and out of backups, like other tools' caches."""
    ignore = directory / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# Created by neuron-migrate\n*\n", encoding="utf-8")
    tag = directory / "CACHEDIR.TAG"
    if not tag.exists():
        tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# neuron-migrate result cache\n",
                       encoding="utf-8")


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
    for name in ("error", "skipped"):
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
    )
