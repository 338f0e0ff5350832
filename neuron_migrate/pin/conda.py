"""environment.yml: the `pip:` list of a conda environment, and its `python` version.

The YAML is read line by line (block style, as conda writes it), so every other line stays as it was.
"""

from __future__ import annotations

import re

from neuron_migrate.findings import FileResult
from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.document import TextDocument
from neuron_migrate.pin.lines import LineEntry, pin_entries
from neuron_migrate.pin.matrix import matrix, python_issue
from neuron_migrate.settings import Settings

_ITEM = re.compile(r"^(?P<indent>[ \t]*)-[ \t]+(?P<value>.*?)[ \t]*(?:[ \t]#.*)?$")
_PIP_KEY = re.compile(r"^[ \t]*-[ \t]+pip[ \t]*:[ \t]*(?:#.*)?$")
_PYTHON = re.compile(r"^python(?:[ \t]*(?P<op>==|=|>=|<=|>|<|!=|~=)?[ \t]*(?P<version>[\d.*]+))(?P<rest>.*)$")
_CONDA_NAMES = {"pytorch": "torch", "pytorch-cpu": "torch", "torch": "torch"}
_INDEX = re.compile(r"^(?:-i|--index-url|--extra-index-url)[ =]+(\S+)$")


def _unquote(value: str) -> tuple[str, int]:
    """The value without surrounding YAML quotes, and how many characters the opening quote takes."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1], 1
    return value, 0


def process_conda_env(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    doc = TextDocument.read(path, data, settings, rewrite)
    entries: list[LineEntry] = []
    indexes: list[str] = []
    conda: list[tuple[str, int]] = []  # conda packages (not pip) and where they are
    pip_indent = None
    offset = 0
    mx = matrix()
    for line in doc.text.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        body = line.rstrip("\r\n")
        m = _ITEM.match(body)
        indent = len(re.match(r"[ \t]*", body).group())
        if pip_indent is not None and body.strip() and not body.lstrip().startswith("#") and indent <= pip_indent:
            pip_indent = None
        if _PIP_KEY.match(body):
            pip_indent = indent
            continue
        if not m:
            continue
        value, quote = _unquote(m.group("value"))
        value_start = start + m.start("value") + quote
        if pip_indent is None:
            conda.append((value, value_start))
        elif index := _INDEX.match(value):
            indexes.append(index.group(1))
        elif not value.startswith("-"):
            entries.append(LineEntry(start, offset, value_start, value_start + len(value)))
    present = planning.names_of([e.text(doc) for e in entries])
    if planning.python_in_scope(present | {_CONDA_NAMES.get(_conda_name(v), "") for v, _ in conda}):
        for value, value_start in conda:
            _check_python(doc, value, value_start, planning.in_scope(present))
    if not planning.in_scope(present):
        return doc.result(data)
    pin_entries(doc, entries, present, lambda entry, text: _item_line(doc, entry, text))
    if mx.index_url not in doc.text and planning.installs_neuron(present, mx):
        first = entries[0]
        if doc.report("NM604", first.req_start, end=first.req_end, what="The pip section",
                      how="an `--extra-index-url` item", url=mx.index_url):
            doc.replace(first.start, first.start, _item_line(doc, first, f"--extra-index-url {mx.index_url}"))
    return doc.result(data)


def _conda_name(spec: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]*", spec.split("::")[-1]).group().lower()


def _item_line(doc: TextDocument, entry: LineEntry, text: str) -> str:
    line = doc.text[entry.start:entry.end]
    prefix = line[:entry.req_start - entry.start]
    quote = prefix[-1] if prefix.endswith(("'", '"')) else ""
    return f"{prefix}{text}{quote}{doc.newline}"


def _check_python(doc: TextDocument, value: str, offset: int, neuron: bool) -> None:
    m = _PYTHON.match(value)
    if not m or m.group("rest").strip().startswith(("[", "=")):
        return
    op, version = m.group("op") or "=", m.group("version")
    if op == "=" or (op == "==" and not version.endswith("*") and version.count(".") == 1):
        spec = f"=={version.rstrip('.*')}.*"
    else:
        spec = op + version
    if (issue := python_issue(spec, neuron)) is not None:
        doc.report(issue[0], offset, end=offset + len(value), text=value, **issue[1])
