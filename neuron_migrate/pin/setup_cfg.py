"""setup.cfg: `install_requires` and `python_requires` in `[options]`, every list in `[options.extras_require]`."""

from __future__ import annotations

import re

from neuron_migrate.findings import FileResult
from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.document import TextDocument
from neuron_migrate.pin.lines import LineEntry, pin_entries
from neuron_migrate.pin.matrix import python_issue
from neuron_migrate.settings import Settings

_SECTION = re.compile(r"^\[([^\]]+)\]\s*$")
_KEY = re.compile(r"^([A-Za-z0-9_.-]+)\s*[=:]\s*(.*?)\s*$")
_COMMENT = re.compile(r"(?<!\s)\s+[#;].*$")  # from the start of the blanks: linear


def _value_entry(doc: TextDocument, line_start: int, line_end: int, value_start: int) -> LineEntry | None:
    body = doc.text[value_start:line_end].rstrip("\r\n")
    body = _COMMENT.sub("", body) if not body.lstrip().startswith("#") else ""
    stripped = body.strip()
    if not stripped or stripped.startswith(("#", ";")):
        return None
    start = value_start + body.index(stripped)
    return LineEntry(line_start, line_end, start, start + len(stripped))


def entries(doc: TextDocument) -> tuple[list[LineEntry], list[tuple[int, str]]]:
    """Requirement entries of the dependency keys, and (offset, value) of `python_requires`."""
    out: list[LineEntry] = []
    python: list[tuple[int, str]] = []
    section = None
    collecting = False
    offset = 0
    for line in doc.text.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        if m := _SECTION.match(line):
            section, collecting = m.group(1).strip(), False
            continue
        if line[:1] in " \t" and collecting:
            if entry := _value_entry(doc, start, offset, start):
                out.append(entry)
            continue
        m = _KEY.match(line)
        collecting = False
        if not m:
            continue
        key = m.group(1).replace("-", "_")
        if section == "options" and key == "python_requires":
            python.append((start + m.start(2), m.group(2)))
        elif (section == "options" and key == "install_requires") or section == "options.extras_require":
            collecting = True
            if m.group(2) and (entry := _value_entry(doc, start, offset, start + m.start(2))):
                out.append(entry)
    return out, python


def process_setup_cfg(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    doc = TextDocument.read(path, data, settings, rewrite)
    found, python = entries(doc)
    present = planning.names_of([e.text(doc) for e in found])
    for offset, value in python if planning.python_in_scope(present) else ():
        if (issue := python_issue(value, planning.in_scope(present))) is not None:
            doc.report(issue[0], offset, text=f"python_requires = {value}", **issue[1])
    if planning.in_scope(present):
        pin_entries(doc, found, present, lambda entry, text: _indent(doc, entry) + text + doc.newline)
    return doc.result(data)


def _indent(doc: TextDocument, entry: LineEntry) -> str:
    line = doc.text[entry.start:entry.end]
    indent = re.match(r"[ \t]*", line).group()
    return indent or "    "
