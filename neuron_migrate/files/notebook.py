"""Jupyter notebooks: the code cells are checked and rewritten together, as one module.

The cells are joined in order (so an import in cell 1 binds a name used in cell 5), with a boundary comment
between them; IPython lines that are not Python (`%magic`, `!shell`, `x = !cmd`, `obj?`) stand in as
`pass` placeholders while the engine runs and come back exactly as they were; cells with a non-Python cell
magic (`%%bash`, `%%writefile`) are left out. After the rewrite, only the `source` values of the cells that
changed are replaced in the JSON text, so outputs, metadata, key order, indentation and the final newline
stay byte for byte and the diff shows only changed source lines. Findings carry the cell number (counting
every cell from 1) and the line inside the cell. `!pip install` / `%pip install` lines go to the pin rules.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import json
import re
from dataclasses import dataclass
from json.decoder import scanstring

from neuron_migrate.engine.python import process_python
from neuron_migrate.findings import FileResult, Finding
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import SourceError

PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
MAGIC_LINE = re.compile(r"\s*([%!]|[\w.]+\s*=\s*[%!](?!=)|\?|[\w.]+\?{1,2}\s*$)")
INSTALL_LINE = re.compile(r"\s*(!|%)\s*(python[\d.]*\s+-m\s+)?pip3?\s+install\b")
NONCE = "5a17"


@dataclass
class Cell:
    index: int  # 1-based among all cells
    source: str
    span: tuple[int, int] | None  # where its `source` value sits in the JSON text
    start: int = 0  # first line of the cell in the joined module (1-based)
    placeholders: dict[str, str] = dataclasses.field(default_factory=dict)


def process_notebook(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    try:
        text = data.decode("utf-8-sig")
        notebook = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise SourceError(f"not a valid notebook: the file is not JSON ({exc}); it was left alone") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise SourceError("not a valid notebook: no list of cells (nbformat 4 expected); it was left alone")
    language = _language(notebook)
    if language not in (None, "python"):
        return FileResult(path, old_bytes=data, skipped=f"a {language} notebook, not Python")
    cells = _code_cells(text, notebook)
    module, cells = _join(cells)
    try:
        inner = process_python(path, module.encode("utf-8"), settings, rewrite)
    except SourceError as exc:
        raise SourceError(_locate(str(exc), cells)) from None
    result = FileResult(path, old_bytes=data, applied=dict(inner.applied),
                        findings=[_in_cell(f, cells) for f in inner.findings],
                        manual=[_in_cell(f, cells) for f in inner.manual])
    sources = _split(inner.new_bytes.decode("utf-8"), cells) if rewrite and inner.new_bytes \
        else [c.source for c in cells]
    sources = _pin_installs(path, cells, sources, settings, rewrite, result)
    if rewrite:
        new_text = _splice(text, cells, sources)
        if new_text != text:
            result.new_bytes = (data[:3] if data.startswith(b"\xef\xbb\xbf") else b"") + new_text.encode("utf-8")
    result.findings.sort(key=lambda f: f.sort_key())
    return result


def _pin_installs(path: str, cells: list[Cell], sources: list[str], settings: Settings, rewrite: bool,
                  result: FileResult) -> list[str]:
    """`!pip install` / `%pip install` lines, pinned like install lines of shell scripts (the pin rules).

    Cells run in order, so a package an earlier cell installs is not added again later; findings are placed at
    their cell and line, and the pins' counts join the result's.
    """
    from neuron_migrate.pin.shell import pin_install_command

    present: set[str] = set()
    out = []
    for cell, source in zip(cells, sources):
        lines = source.splitlines(keepends=True)
        for number, (line, starts) in enumerate(zip(lines, _logical_starts(lines)), start=1):
            body = line.rstrip("\r\n")
            if not (starts and INSTALL_LINE.match(line)):
                continue
            pinned = pin_install_command(body, settings, path=path, rewrite=rewrite, present=frozenset(present))
            present |= pinned.installs
            result.findings += [dataclasses.replace(f, path=path, line=number + f.line - 1, cell=cell.index,
                                                    end_line=None if f.end_line is None else number + f.end_line - 1)
                                for f in pinned.findings]
            for code, n in pinned.applied.items():
                result.applied[code] = result.applied.get(code, 0) + n
            lines[number - 1] = pinned.text + line[len(body):]
        out.append("".join(lines))
    return out


def _language(notebook: dict) -> str | None:
    meta = notebook.get("metadata") or {}
    for value in ((meta.get("language_info") or {}).get("name"), (meta.get("kernelspec") or {}).get("language")):
        if isinstance(value, str) and value:
            return value.lower()
    return None


# -- cells to one module and back ----------------------------------------------------------------------------

def _code_cells(text: str, notebook: dict) -> list[Cell]:
    spans = _source_spans(text)
    out = []
    for i, (cell, span) in enumerate(zip(notebook["cells"], spans), start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if not isinstance(source, str) or not _is_python_cell(source):
            continue
        out.append(Cell(i, source, span))
    return out


def _is_python_cell(source: str) -> bool:
    first = source.lstrip().split("\n", 1)[0]
    if not first.startswith("%%"):
        return True
    name = first[2:].split(maxsplit=1)[0] if first[2:].strip() else ""
    return name in PYTHON_CELL_MAGICS


def _boundary(n: int) -> str:
    return f"# @@@ {NONCE} c{n}"


def _join(cells: list[Cell]) -> tuple[str, list[Cell]]:
    lines: list[str] = []
    for n, cell in enumerate(cells):
        if n:
            lines.append(_boundary(n) + "\n")
        cell.start = len(lines) + 1
        body = _mask(cell)
        lines.extend(body.splitlines(keepends=True))
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
    return "".join(lines), cells


def _mask(cell: Cell) -> str:
    """The cell's code with every IPython-only line replaced by a `pass` placeholder of the same indentation."""
    out = []
    lines = cell.source.splitlines(keepends=True)
    for line, starts in zip(lines, _logical_starts(lines)):
        if starts and MAGIC_LINE.match(line) and not line.lstrip().startswith("#"):
            tag = f"# @@@ {NONCE} m{len(cell.placeholders)}"
            cell.placeholders[tag] = line.rstrip("\r\n").lstrip()
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}pass  {tag}\n")
        else:
            out.append(line)
    return "".join(out)


def _logical_starts(lines: list[str]) -> list[bool]:
    """For each line, whether it begins a new logical line (not inside brackets, a string or a continuation)."""
    out = []
    depth, quote, continued = 0, "", False
    for line in lines:
        starts = depth == 0 and not quote and not continued
        out.append(starts)
        if starts and MAGIC_LINE.match(line):
            continued = False
            continue
        continued = False
        i = 0
        while i < len(line):
            c = line[i]
            if quote:
                if c == "\\":
                    i += 2
                    continue
                if line.startswith(quote, i):
                    i += len(quote)
                    quote = ""
                    continue
            elif c == "#":
                break
            elif c in "\"'":
                quote = line[i:i + 3] if line[i:i + 3] in ('"""', "'''") else c
                i += len(quote)
                continue
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth = max(0, depth - 1)
            elif c == "\\" and not line[i + 1:].strip():
                continued = True
            i += 1
        if len(quote) == 1:
            quote = ""  # an unterminated one-line string ends with its line
    return out


def _split(module: str, cells: list[Cell]) -> list[str]:
    """The rewritten module cut back into cell sources, with the IPython lines restored."""
    parts: list[list[str]] = [[]]
    boundaries = {_boundary(n) for n in range(1, len(cells))}
    for line in module.splitlines(keepends=True):
        if line.rstrip("\r\n") in boundaries:
            parts.append([])
        else:
            parts[-1].append(line)
    if len(parts) != len(cells):
        raise SourceError("internal error: the rewrite lost a cell boundary; the notebook was left alone. "
                          "Please report this.")
    out = []
    for cell, lines in zip(cells, parts):
        text = "".join(_restore(line, cell) for line in lines)
        if not cell.source.endswith("\n") and text.endswith("\n"):
            text = text[:-1]
        out.append(text)
    return out


def _restore(line: str, cell: Cell) -> str:
    stripped = line.strip()
    if stripped.startswith("pass  # @@@"):
        tag = stripped[len("pass  "):]
        if tag in cell.placeholders:
            return line[: len(line) - len(line.lstrip())] + cell.placeholders[tag] + "\n"
    return line


def _in_cell(finding: Finding, cells: list[Cell]) -> Finding:
    cell = _cell_at(finding.line, cells)
    shift = cell.start - 1
    return dataclasses.replace(finding, cell=cell.index, line=finding.line - shift,
                               end_line=finding.end_line - shift if finding.end_line is not None else None)


def _cell_at(line: int, cells: list[Cell]) -> Cell:
    found = cells[0]
    for cell in cells:
        if cell.start <= line:
            found = cell
    return found


def _locate(message: str, cells: list[Cell]) -> str:
    m = re.match(r"line (\d+):(\d+): (.*)", message, re.S)
    if not m or not cells:
        return message
    cell = _cell_at(int(m.group(1)), cells)
    return f"cell {cell.index}, line {int(m.group(1)) - cell.start + 1}:{m.group(2)}: {m.group(3)}"


# -- the JSON text: find each cell's `source` and replace only what changed ----------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _value_end(text: str, i: int) -> int:
    c = text[i]
    if c == '"':
        return scanstring(text, i + 1)[1]
    if c == "{":
        end = i + 1
        for _key, _start, end in _members(text, i):
            pass
        return _skip(text, end) + 1
    if c == "[":
        end = i + 1
        for _start, end in _elements(text, i):
            pass
        return _skip(text, end) + 1
    m = _SCALAR.match(text, i)
    if not m:
        raise ValueError(f"unexpected character at {i}")
    return m.end()


def _members(text: str, i: int):
    """(key, value start, value end) of the object starting at `i`."""
    i = _skip(text, i + 1)
    while text[i] != "}":
        key, i = scanstring(text, i + 1)
        i = _skip(text, _skip(text, i) + 1)
        end = _value_end(text, i)
        yield key, i, end
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)


def _elements(text: str, i: int):
    """(start, end) of each element of the array starting at `i`."""
    i = _skip(text, i + 1)
    while text[i] != "]":
        end = _value_end(text, i)
        yield i, end
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)


def _source_spans(text: str) -> list[tuple[int, int] | None]:
    top = _skip(text, 0)
    for key, start, _end in _members(text, top):
        if key == "cells":
            return [next(((s, e) for k, s, e in _members(text, cs) if k == "source"), None)
                    if text[cs] == "{" else None for cs, _ce in _elements(text, start)]
    return []


def _splice(text: str, cells: list[Cell], sources: list[str]) -> str:
    ascii_only = text.isascii()
    for cell, new in sorted(zip(cells, sources), key=lambda p: -(p[0].span or (0, 0))[0]):
        if new == cell.source or cell.span is None:
            continue
        start, end = cell.span
        text = text[:start] + _render_source(text, start, end, new, ascii_only) + text[end:]
    return text


def _render_source(text: str, start: int, end: int, new: str, ascii_only: bool) -> str:
    """`new` as a JSON source value in the style of the old one, keeping the raw text of unchanged lines."""
    if text[start] == '"':
        return json.dumps(new, ensure_ascii=ascii_only)
    old = list(_elements(text, start))
    raw = [text[s:e] for s, e in old]
    values = [json.loads(r) for r in raw]
    lines = new.splitlines(keepends=True)
    items = []
    for op, a1, a2, b1, b2 in difflib.SequenceMatcher(None, values, lines, autojunk=False).get_opcodes():
        items += raw[a1:a2] if op == "equal" else [json.dumps(line, ensure_ascii=ascii_only) for line in lines[b1:b2]]
    if old:
        opening, closing = text[start:old[0][0]], text[old[-1][1]:end]
        sep = text[old[0][1]:old[1][0]] if len(old) > 1 else "," + opening[1:]
    else:
        indent = _line_indent(text, start)
        unit = _indent_unit(text)
        opening, closing = ("[\n" + indent + unit, "\n" + indent + "]") if "\n" in text.strip() else ("[", "]")
        sep = "," + opening[1:]
    return opening + sep.join(items) + closing if items else "[]"


def _line_indent(text: str, i: int) -> str:
    line_start = text.rfind("\n", 0, i) + 1
    line = text[line_start:i]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _indent_unit(text: str) -> str:
    m = re.search(r"\n([ \t]+)\S", text)
    return m.group(1) if m else " "


# -- where a cell's line lies in the .ipynb file (for annotations on the file itself) -------------------------

def cell_file_lines(data: bytes) -> dict[int, list[int]]:
    """For each code cell (numbered like findings: every cell from 1), the 1-based line of the notebook file on
    which each of its source lines is written; {} for a file that is not a notebook. A `source` written as one
    JSON string puts every line of the cell on the line of that string."""
    try:
        text = data.decode("utf-8-sig")
        spans = _source_spans(text)
    except (UnicodeDecodeError, ValueError, IndexError):
        return {}
    newlines = [i for i, ch in enumerate(text) if ch == "\n"]

    def line_of(offset: int) -> int:
        return bisect.bisect_left(newlines, offset) + 1

    out: dict[int, list[int]] = {}
    for index, span in enumerate(spans, start=1):
        if span is None:
            continue
        start, end = span
        try:
            if text[start] == '"':
                out[index] = [line_of(start)] * _line_count(json.loads(text[start:end]))
            elif text[start] == "[":
                rows: list[int] = []
                for s, e in _elements(text, start):
                    value = json.loads(text[s:e])
                    rows += [line_of(s)] * _line_count(value if isinstance(value, str) else "")
                out[index] = rows
        except ValueError:
            continue
    return out


def _line_count(value: str) -> int:
    return max(1, value.count("\n") + (0 if value.endswith("\n") else 1))
