"""requirements*.txt, requirements*.in, constraints*.txt: pip's requirements file format.

Comments, blank lines, options, markers and per-requirement options (`--hash`) stay as they are, but for a
comment that names the XLA stack beside the XLA packages the pin removes (`_drop_xla_headings`). Files
included with `-r` are read (not written) so that a package or index installed there counts here too;
they are pinned when they are processed themselves (and listed in the result, so the cache sees them change).
An included file of any name (`requirements/base.txt`) is a requirements file too (discovery finds it through
its includer), and it is pinned with the packages of the files that include it: a `torch==2.1.2` there is part of
the same install as the `torch-neuronx` beside the `-r` line (nothing is added to it; its includer gets the
missing packages).
"""

from __future__ import annotations

import bisect
import os
import re

from neuron_migrate.engine.cache import digest
from neuron_migrate.engine.discover import INCLUDED_SUFFIXES
from neuron_migrate.findings import FileResult
from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.document import TextDocument
from neuron_migrate.pin.lines import LineEntry, pin_entries
from neuron_migrate.pin.matrix import matrix
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import SourceError, decode, read_bytes, size_limit

_COMMENT = re.compile(r"(^|\s)#.*$")
_OPTION_START = re.compile(r"(^|\s)-")
# `\s*=?\s*` (two blank runs that may meet) backtracked quadratically over a line of blanks; the same lines match.
_INCLUDE = re.compile(r"^\s*(?:-r|--requirement)(?:\s*=\s*|\s*)(\S+)")
_INCLUDE_OR_CONSTRAINT = re.compile(r"^\s*(?:-r|--requirement|-c|--constraint)(?:\s*=\s*|\s*)(\S+)")
_INDEX = re.compile(r"^\s*(?:-i|--index-url|--extra-index-url)(?:\s*=\s*|\s+)(\S+)")
MAX_INCLUDE_DEPTH = 8
_FIND_LINKS_TPU = re.compile(r"^[ \t\f]*(?:-f|--find-links)(?:\s*=\s*|\s+)\S*(?:libtpu|/tpuvm/)", re.M | re.I)


def logical_lines(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of each logical line: physical lines joined by a trailing backslash.

    `content` has continuations removed and comments stripped; `end` is past the final newline.
    """
    out = []
    lines = text.splitlines(keepends=True)
    offset = 0
    index = 0
    while index < len(lines):
        start = offset
        parts = []
        while True:
            line = lines[index]
            offset += len(line)
            index += 1
            body = _COMMENT.sub("", line.rstrip("\r\n"))
            if body.endswith("\\") and index < len(lines):
                parts.append(body[:-1])
                continue
            parts.append(body)
            break
        out.append((start, offset, " ".join(parts)))
    return out


def entries_of(text: str) -> tuple[list[LineEntry], list[str], list[str]]:
    """Requirement entries, included requirement files, and index URLs of a requirements file."""
    entries, includes, indexes = [], [], []
    for start, end, content in logical_lines(text):
        stripped = content.strip()
        if not stripped:
            continue
        if stripped.startswith("-"):
            if m := _INCLUDE.match(stripped):
                includes.append(m.group(1))
            elif m := _INDEX.match(stripped):
                indexes.append(m.group(1))
            continue
        first = text[start:end].lstrip()
        req_start = end - len(first)
        option = _OPTION_START.search(first)
        line_end = len(first.splitlines()[0]) if first.strip() else 0
        raw = first[:option.start() if option and option.start() < line_end else line_end]
        raw = _COMMENT.sub("", raw).rstrip().removesuffix("\\").rstrip()
        if not raw:
            continue
        entries.append(LineEntry(start, end, req_start, req_start + len(raw), hashed="--hash" in content))
    return entries, includes, indexes


def _included(path: str, includes: list[str], files_read: dict[str, str | None], depth: int = 0,
              seen: set[str] | None = None) -> tuple[set[str], bool]:
    """Packages and whether the Neuron index appear in the files `path` includes (recursively); the files looked
    at go into `files_read` (the digest of their bytes, None when they cannot be read)."""
    seen = seen if seen is not None else {os.path.realpath(path)}
    names: set[str] = set()
    has_index = False
    for include in includes:
        target = _target(path, include)
        if target in seen or depth >= MAX_INCLUDE_DEPTH or "$" in include:
            continue
        seen.add(target)
        files_read[target] = None
        try:
            data = read_bytes(target, size_limit("requirements"), "requirements")  # a regular file: not a FIFO
            files_read[target] = digest(data)
            text = decode(data).text
        except (OSError, SourceError):
            continue
        entries, more, indexes = entries_of(text)
        names |= planning.names_of([text[e.req_start:e.req_end] for e in entries])
        has_index |= any(_is_neuron_index(url) for url in indexes)
        sub_names, sub_index = _included(target, more, files_read, depth + 1, seen)
        names |= sub_names
        has_index |= sub_index
    return names, has_index


def included_files(path: str, text: str) -> list[str]:
    """The real paths of the files a requirements file includes with `-r` or `-c` (not templated ones)."""
    out = []
    for _start, _end, content in logical_lines(text):
        m = _INCLUDE_OR_CONSTRAINT.match(content.strip())
        if m and "$" not in m.group(1):
            out.append(_target(path, m.group(1)))
    return out


def _target(includer: str, name: str) -> str:
    """The real path of the file `includer` names with `-r` / `-c` (relative to the includer's folder)."""
    return os.path.realpath(os.path.join(os.path.dirname(includer), name))


def _includers(path: str, files_read: dict[str, str | None]) -> set[str]:
    """The packages installed by the requirements files beside `path` or in the folder above that include it
    with `-r` (with what they include themselves); the files looked at go into `files_read`."""
    real = os.path.realpath(path)
    folders = {os.path.dirname(real), os.path.dirname(os.path.dirname(real))}
    names: set[str] = set()
    for folder in sorted(folders):
        try:
            candidates = sorted(e.path for e in os.scandir(folder)
                                if e.name.endswith(INCLUDED_SUFFIXES) and e.is_file())
        except OSError:
            continue
        for candidate in candidates:
            if os.path.realpath(candidate) == real:
                continue
            try:
                data = read_bytes(candidate, size_limit("requirements"), "requirements")
                text = decode(data).text
            except (OSError, SourceError):
                continue
            entries, includes, _indexes = entries_of(text)
            targets = {_target(candidate, i) for i in includes}
            if real not in targets:
                continue
            files_read[os.path.realpath(candidate)] = digest(data)
            names |= planning.names_of([text[e.req_start:e.req_end] for e in entries])
            names |= _included(candidate, includes, files_read, seen={os.path.realpath(candidate), real})[0]
    return names


def _is_neuron_index(url: str) -> bool:
    return url.strip("'\"").rstrip("/") == matrix().index_url


def is_constraints(path: str) -> bool:
    return os.path.basename(path).startswith("constraints")


def process_requirements(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    doc = TextDocument.read(path, data, settings, rewrite)
    entries, includes, indexes = entries_of(doc.text)
    own = planning.names_of([e.text(doc) for e in entries])
    if any(planning.TPU_LINKS.search(url) for url in indexes) or _FIND_LINKS_TPU.search(doc.text):
        own.add(planning.TPU_BUILD)  # `-f <libtpu index>`: the TPU build
    included, included_index = _included(path, includes, doc.files_read)
    present, may_add = own | included, not is_constraints(path)
    if not planning.in_scope(present):
        present |= _includers(path, doc.files_read)  # a part (`-r base.txt`) of a Neuron install
        if not planning.in_scope(present):
            return doc.result(data)
        may_add = False
    pin_entries(doc, entries, present, lambda entry, text: text + doc.newline, may_add=may_add)
    _drop_xla_headings(doc, entries)
    has_index = included_index or any(_is_neuron_index(url) for url in indexes)
    if may_add and not has_index and planning.installs_neuron(own):
        _add_index(doc, entries, indexes)
    return doc.result(data)


_XLA_PACKAGE = re.compile(r"(?:torch[-_]xla|libneuronxla)\b", re.I)
# the XLA stack named (`# PyTorch/XLA stack`, `# torch-xla must match torch`), not the word alone (`(XLA era)`)
_XLA_PROSE = re.compile(r"\bpytorch[ /]xla\b|\btorch[-_]xla\b|\blibneuronxla\b", re.I)


def _drop_xla_headings(doc: TextDocument, entries: list[LineEntry]) -> None:
    """A whole-line comment that speaks of the XLA stack (`# PyTorch/XLA stack for Trainium`), in the paragraph
    (the lines between two blank lines) of an XLA package the pin removes, goes with it: it described what is gone.
    Markers, and comments elsewhere in the file, stay."""
    removed = [e for e in entries if _XLA_PACKAGE.match(e.text(doc)) and any(
        edit.start == e.start and edit.end == e.end and not edit.marker for edit in doc.edits)]
    if not removed or not doc.rewrite:
        return
    starts = doc.line_starts()
    lines = doc.text.splitlines(keepends=True)
    drop: set[int] = set()
    for entry in removed:
        at = bisect.bisect_right(starts, entry.start) - 1
        first, last = at, at
        while first > 0 and lines[first - 1].strip():
            first -= 1
        while last + 1 < len(lines) and lines[last + 1].strip():
            last += 1
        drop.update(i for i in range(first, last + 1) if lines[i].lstrip().startswith("#")
                    and _XLA_PROSE.search(lines[i]) and not doc.own_markers.match(lines[i].strip()))
    for i in sorted(drop):
        start, end = starts[i], starts[i] + len(lines[i])
        if not any(edit.start < end and start < edit.end or edit.start == edit.end == start for edit in doc.edits):
            doc.replace(start, end, "")


def _add_index(doc: TextDocument, entries: list[LineEntry], indexes: list[str]) -> None:
    url = matrix().index_url
    first = entries[0]
    if not doc.report("NM604", first.req_start, end=first.req_end, what=f"`{os.path.basename(doc.path)}`",
                      how="an `--extra-index-url` line", url=url):
        return
    at = first.start
    if indexes:
        for start, end, content in logical_lines(doc.text):
            if _INDEX.match(content.strip()):
                at = end
    line = f"--extra-index-url {url}" + doc.newline
    if at == len(doc.text) and not doc.text.endswith(("\n", "\r")):
        line = doc.newline + line.removesuffix(doc.newline)
    doc.replace(at, at, line)
