"""Jupyter notebooks, read as IPython runs them: Python cells as one module, the other cells as the files they are.

IPython first takes off every cell the indentation of its first non-blank line, so the cells are read dedented
and written back with it. The Python cells (plain, or under `%%time`, `%%capture`, ...) are joined in order (an
import in cell 1 binds a name used in cell 5), with a boundary comment between them; IPython lines that are not
Python (`%magic`, `!shell`, `x = !cmd`, `obj?`, with the lines a trailing `\\` continues) stand in as `pass`
placeholders while the engine runs and come back as they were; `!pip install` / `%pip install` lines go to the
pin rules, `%env NAME=value` lines to the environment checks of shell scripts (as `export NAME=value`). A `%%writefile FILE` cell is the file it writes: its body goes through the handlers of that file's kind
(Python, requirements, shell, ... by the name), under that path; a `%%bash` / `%%sh` / `%%script bash` cell
through those of shell scripts, under the notebook's path. Cells that are not code (`%%html`, `%%markdown`,
unknown magics, a written file of no known kind or that its handlers cannot read) are left alone, and never make
the notebook fail; nor does a code cell that is not Python (reStructuredText pasted in a code cell, a bare `curl`
line: IPython refuses to run it too), which is left as it is with a warning while the other cells migrate.

After the rewrite, only the `source` values of the cells that changed are replaced in the JSON text, so outputs,
metadata, key order, indentation and the final newline stay byte for byte and the diff shows only changed source
lines. Findings carry the cell number (counting every cell from 1) and the line and column inside the cell.
"""

from __future__ import annotations

import ast
import bisect
import contextvars
import dataclasses
import difflib
import functools
import itertools
import json
import os
import re
import shlex
from dataclasses import dataclass
from json.decoder import scanstring

from neuron_migrate.engine.context import PROBE, Reported
from neuron_migrate.engine.edits import MARKER_PREFIX
from neuron_migrate.engine.python import SHARED_TREES, TOP_LEVEL_AWAIT, process_python
from neuron_migrate.files.launch import WRITTEN
from neuron_migrate.findings import FileResult, Finding
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import SourceError

PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
SHELL_CELL_MAGICS = frozenset({"bash", "sh", "system", "sx", "!"})
SCRIPT_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
WRITEFILE_MAGICS = frozenset({"writefile", "file"})
SCRIPT_VALUE_OPTIONS = frozenset({"--proc", "--out", "--err"})  # `%%script` options that take a value
MAGIC_LINE = re.compile(r"\s*([%!]|[\w.]+\s*=\s*[%!](?!=)|\?|[\w.]+\?{1,2}\s*$)")
ENV_LINE = re.compile(r"%(?:env|set_env)\s+(?P<name>[A-Za-z_]\w*)(?:\s*=\s*|\s+)(?P<value>\S.*)$", re.S)
INSTALL_LINE = re.compile(r"\s*(!|%)\s*(python[\d.]*\s+-m\s+)?pip3?\s+install\b")
LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # Python's physical lines: \n, \r\n or \r ends one
# The tag of the boundary comments and magic placeholders: one the notebook's text and cells do not hold (a cell
# line spelled like a placeholder must stay a line of code, not come back as a magic); set per notebook.
NONCE: contextvars.ContextVar[str] = contextvars.ContextVar("NONCE", default="5a17")


def _nonce(text: str, cells: list) -> str:
    taken = [text, *(cell.text for cell in cells), *(cell.source for cell in cells)]
    n = 0
    while any(f"@@@ {_spelled(n)}" in t for t in taken):
        n += 1
    return _spelled(n)


def _spelled(n: int) -> str:
    return "5a17" if n == 0 else f"5a17x{n}"

PYTHON, EMBEDDED, SKIPPED = "python", "embedded", "skipped"


def lines_of(text: str) -> list[str]:
    return LINE.findall(text)


@dataclass
class Magic:
    """One IPython-only logical line of a Python cell (its first line without indentation, the lines a `\\`
    continues as they are), and the text it comes back as (the pinned install command, or itself)."""

    text: str
    replacement: str | None  # None: the line goes (a setting the native backend ignores)
    line: int  # where it starts in the cell (1-based)
    indent: int  # the width of the first line's indentation
    stale_above: str | None = None  # the comment line right above it that goes with the old pins (stripped)


@dataclass
class Cell:
    index: int  # 1-based among all cells
    source: str  # as the notebook holds it
    span: tuple[int, int] | None  # where its `source` value sits in the JSON text
    indent: str = ""  # what IPython takes off each line that starts with it (the first non-blank line's indent)
    text: str = ""  # the source as IPython runs it (dedented)
    kind: str = PYTHON
    file_kind: str | None = None  # for EMBEDDED cells: the kind of file the body is
    file_path: str | None = None  # ... and the path its handlers see
    body_line: int = 0  # for EMBEDDED cells: the line of `text` (0-based) where the body starts
    start: int = 0  # for PYTHON cells: first line of the cell in the joined module (1-based)
    placeholders: dict[str, Magic] = dataclasses.field(default_factory=dict)

    def position(self, line: int, col: int | None) -> tuple[int, int | None]:
        """(line, column) in the cell's source of a (line, column) in its dedented text."""
        if col is None or not self.indent:
            return line, col
        lines = self.raw_lines
        return line, col + len(self.indent) if 0 < line <= len(lines) and lines[line - 1].startswith(self.indent) \
            else col

    @functools.cached_property
    def raw_lines(self) -> list[str]:
        return lines_of(self.source)

    def reindented(self, new: str) -> str:
        """The rewritten dedented text with the cell's indentation back: unchanged lines as they were."""
        if new == self.text:
            return self.source
        if not self.indent:
            return new
        old, raw, lines = lines_of(self.text), self.raw_lines, lines_of(new)
        out: list[str] = []
        for op, a1, a2, b1, b2 in difflib.SequenceMatcher(None, old, lines, autojunk=False).get_opcodes():
            out += raw[a1:a2] if op == "equal" else [self.indent + x if x.strip() else x for x in lines[b1:b2]]
        return "".join(out)


def _read(data: bytes) -> tuple[str, dict]:
    """The notebook's text and JSON, once for the passes over one file (python.Shared, which only read it)."""
    shared = SHARED_TREES.get()
    if shared is not None and data in shared.notebooks:
        return shared.notebooks[data]
    try:
        text = data.decode("utf-8-sig")
        notebook = json.loads(text, object_pairs_hook=_unique_keys)
    except _Refused as exc:
        raise SourceError(f"not a valid notebook: {exc}; it was left alone") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise SourceError(f"not a valid notebook: the file is not JSON ({exc}); it was left alone") from None
    except RecursionError:
        raise SourceError("not a valid notebook: JSON nested too deep to read; it was left alone") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise SourceError("not a valid notebook: no list of cells (nbformat 4 expected); it was left alone")
    if shared is not None:
        shared.notebooks[data] = text, notebook
    return text, notebook


def process_notebook(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    text, notebook = _read(data)
    language = _language(notebook)
    if language not in (None, "python"):
        return FileResult(path, old_bytes=data, skipped=f"a {language} notebook, not Python")
    cells = _code_cells(path, text, notebook, spans=rewrite)
    result = FileResult(path, old_bytes=data)
    written = WRITTEN.set(_written_programs(path, cells))
    nonce = NONCE.set(_nonce(text, cells))
    for cell in cells:  # a program written in parts (`%%writefile -a`) is one file: no part is migrated alone
        if cell.kind == EMBEDDED and cell.file_path in _appended(path, cells):
            cell.kind = SKIPPED
    try:
        for cell in cells:
            problem = _not_python(cell) if cell.kind == PYTHON else None
            if problem is not None:
                cell.kind = SKIPPED
                result.warnings.append(f"cell {cell.index} is not Python ({problem}), so IPython cannot run it "
                                       "either: it was left as it is, and the other cells were read")
        new = _python_cells(path, [c for c in cells if c.kind == PYTHON], settings, rewrite, result)
        for cell in cells:
            if cell.kind == EMBEDDED:
                new[cell.index] = _embedded_cell(path, cell, settings, rewrite, result)
    finally:
        NONCE.reset(nonce)
        WRITTEN.reset(written)
    if rewrite:
        sources = [cell.reindented(new.get(cell.index, cell.text)) for cell in cells]
        new_text = _splice(text, cells, sources)
        if new_text != text:
            result.new_bytes = (data[:3] if data.startswith(b"\xef\xbb\xbf") else b"") + new_text.encode("utf-8")
    result.findings.sort(key=lambda f: f.sort_key())
    return result


def first_python_cell(path: str, data: bytes) -> Cell | None:
    """The notebook's first Python code cell, where a finding about the whole notebook is placed; None for a
    notebook that has none or cannot be read (its own handler says why)."""
    try:
        text, notebook = _read(data)
    except SourceError:
        return None
    cells = _code_cells(path, text, notebook, spans=False)
    return next((c for c in cells if c.kind == PYTHON), None)


def _python_cells(path: str, cells: list[Cell], settings: Settings, rewrite: bool, result: FileResult
                  ) -> dict[int, str]:
    """The Python cells checked (and rewritten) as one module; their new dedented texts by cell index."""
    if not cells:
        return {}
    module = _join(cells)
    _pin_installs(path, cells, settings, rewrite, result)
    _env_settings(path, cells, settings, rewrite, result)
    _launch_lines(path, cells, settings, rewrite, result)
    probe = PROBE.get()
    if probe is not None and any(f.code not in probe for f in result.findings) and _compiles(module):
        # a pass that only asks whether the notebook reports more (handlers._would_change): it does. (Where the
        # cells do not compile as one module, they are decided all the same: the error is the answer.)
        raise Reported
    awaiting = TOP_LEVEL_AWAIT.set(True)  # IPython runs `await` at the top level of a cell
    try:
        inner = process_python(path, module.encode("utf-8"), settings, rewrite)
    except SourceError as exc:
        raise SourceError(_locate(str(exc), cells)) from None
    finally:
        TOP_LEVEL_AWAIT.reset(awaiting)
    for code, n in inner.applied.items():
        result.applied[code] = result.applied.get(code, 0) + n
    result.findings += [_in_module(f, cells) for f in inner.findings]
    result.manual += [_in_module(f, cells) for f in inner.manual]
    result.files_read.update(inner.files_read)
    if not rewrite:
        return {}
    rewritten = inner.new_bytes.decode("utf-8") if inner.new_bytes else module
    return {cell.index: new for cell, new in zip(cells, _split(rewritten, cells))}


def _embedded_cell(path: str, cell: Cell, settings: Settings, rewrite: bool, result: FileResult) -> str:
    """A `%%writefile` or shell cell through the handlers of its body's kind; the cell's new dedented text (its
    text where nothing changes or the handlers cannot read the body: the cell is then left alone)."""
    from neuron_migrate.engine import handlers

    lines = lines_of(cell.text)
    head, body = "".join(lines[:cell.body_line]), "".join(lines[cell.body_line:])
    try:
        inner = handlers.process(cell.file_path, body.encode("utf-8"), cell.file_kind, settings, rewrite)
    except SourceError:
        return cell.text
    if inner is None or inner.error:
        return cell.text
    for code, n in inner.applied.items():
        result.applied[code] = result.applied.get(code, 0) + n
    result.findings += [_in_cell(f, cell, cell.body_line, path) for f in inner.findings]
    result.manual += [_in_cell(f, cell, cell.body_line, path) for f in inner.manual]
    result.files_read.update(inner.files_read)
    if rewrite and inner.changed:
        return head + inner.new_bytes.decode("utf-8")
    return cell.text


def _pin_installs(path: str, cells: list[Cell], settings: Settings, rewrite: bool, result: FileResult) -> None:
    """`!pip install` / `%pip install` lines (with the lines they continue on), pinned like install lines of shell
    scripts (the pin rules): the pinned command is what the placeholder comes back as.

    Cells run in order, so a package an earlier cell installs is not added again later; findings are placed at
    their cell and line, and the pins' counts join the result's.
    """
    from neuron_migrate.pin.shell import pin_install_command

    present: set[str] = set()
    for cell in cells:
        for magic in cell.placeholders.values():
            if not INSTALL_LINE.match(magic.text):
                continue
            above = _comments_above(cell, magic)  # a marker there stands for its code
            pinned = pin_install_command("".join(above) + magic.text, settings, path=path, rewrite=rewrite,
                                         present=frozenset(present))
            present |= pinned.installs
            first = len(above) + 1
            for f in pinned.findings:
                if f.code == "NM900" or f.line < first:
                    continue  # a marker is a comment line of the cell: the Python engine reports it
                result.findings.append(_at(
                    f, cell, path, magic.line + f.line - first, f.col + (magic.indent if f.line == first else 0),
                    None if f.end_line is None else magic.line + f.end_line - first,
                    None if f.end_col is None else f.end_col + (magic.indent if f.end_line == first else 0)))
            for code, n in pinned.applied.items():
                result.applied[code] = result.applied.get(code, 0) + n
            # the one edit pin makes above the command: the comment right above it goes when it names the old
            # version (`# Upgrade to neuronx-cc 2.21.x`); the cell drops it when it is put back together
            kept = above if pinned.text.startswith("".join(above)) or not above else above[:-1]
            if kept is not above:
                magic.stale_above = above[-1].strip()
            text = pinned.text[len("".join(kept)):] if pinned.text.startswith("".join(kept)) else pinned.text
            command = text
            markers = []  # the markers the pin rules put above the command: indented as the command is
            while command.startswith(MARKER_PREFIX) and "\n" in command:
                marker, command = command.split("\n", 1)
                markers.append(marker)
            magic.replacement = "".join(f"{marker}\n{' ' * magic.indent}" for marker in markers) + command


def _appends(cell: Cell) -> bool:
    """A `%%writefile -a FILE` cell: it adds to the file."""
    head = lines_of(cell.text)[cell.body_line - 1].strip()[2:]
    return any(a in ("-a", "--append") for a in _words(head))


def _appended(path: str, cells: list[Cell]) -> set[str]:
    """The Python files written in parts: a part is no program (requirement lines stand alone, they are pinned)."""
    return {c.file_path for c in cells
            if c.kind == EMBEDDED and c.file_kind == "python" and c.file_path != path and _appends(c)}


def _written_programs(path: str, cells: list[Cell]) -> dict[str, str]:
    """The Python files the notebook's `%%writefile` cells write, as they stand after its last cell; a file
    written in parts (`-a`) stands empty."""
    out: dict[str, str] = {}
    for cell in cells:
        if cell.kind != EMBEDDED or cell.file_kind != "python" or cell.file_path == path:
            continue
        out[os.path.abspath(cell.file_path)] = "".join(lines_of(cell.text)[cell.body_line:])
    for target in _appended(path, cells):  # left alone (see process_notebook): so are its launch lines
        out[os.path.abspath(target)] = ""
    return out


def _env_settings(path: str, cells: list[Cell], settings: Settings, rewrite: bool, result: FileResult) -> None:
    """`%env NAME=value` / `%set_env NAME value` lines, checked as the shell line `export NAME=value` with the
    comment lines above it in the cell (a marker there stands for its code): an ignored setting goes, a bfloat16
    switch gets its marker above it. The Python engine reports the markers (NM900) of the cells."""
    from neuron_migrate.files.envfiles import SHELL_SETTING, process

    for cell in cells:
        for magic in cell.placeholders.values():
            m = ENV_LINE.fullmatch(magic.text)
            if m is None:
                continue
            above = _comments_above(cell, magic)
            export = f"export {m['name']}={shlex.quote(m['value'].rstrip())}"
            shift = m.start("name") - len("export ")
            inner = process(path, ("".join(above) + export + "\n").encode("utf-8"), settings, rewrite,
                            SHELL_SETTING, "shell")
            for f in inner.findings:
                if f.line != len(above) + 1:
                    continue  # a marker above (NM900): the Python engine reports it
                result.findings.append(_at(f, cell, path, magic.line, f.col + shift + magic.indent, magic.line,
                                           len(magic.text) + 1 + magic.indent))
            for code, n in inner.applied.items():
                result.applied[code] = result.applied.get(code, 0) + n
            if inner.new_bytes is not None:
                new = lines_of(inner.new_bytes.decode("utf-8"))[len(above):]
                kept = [x.rstrip("\n") for x in new if x.rstrip("\n") != export]
                if len(new) > len(kept):
                    magic.replacement = "\n".join(kept + [magic.text])
                else:  # removed; in a block, where it may be the only statement, it becomes `pass`
                    magic.replacement = "pass" if magic.indent else None


def _launch_lines(path: str, cells: list[Cell], settings: Settings, rewrite: bool, result: FileResult) -> None:
    """`!python train.py` lines, checked as launch lines of a shell script: a program that spawned its own
    workers (on disk beside the notebook, or written by one of its `%%writefile` cells) is started by torchrun;
    `!optimum-cli export neuron ...` exports for the XLA stack (NM524);
    `!source /opt/aws_neuronx_venv_.../bin/activate`, as a shell script's line that activates a DLAMI venv (NM616)."""
    from neuron_migrate.files import envfiles, launch

    for cell in cells:
        for magic in cell.placeholders.values():
            if not magic.text.startswith("!") or INSTALL_LINE.match(magic.text):
                continue
            if "python" in magic.text or "optimum-cli" in magic.text:  # a launch, or an export for the XLA stack
                handler = launch.process_shell
            elif "aws_neuronx_venv" in magic.text:  # `!source /opt/aws_neuronx_venv_pytorch_2_8/bin/activate`
                handler = envfiles.process_shell
            else:
                continue
            above = _comments_above(cell, magic)  # a marker there stands for its code
            inner = handler(path, ("".join(above) + magic.text[1:] + "\n").encode("utf-8"), settings, rewrite)
            for f in inner.findings:
                first = len(above) + 1
                if f.code == "NM900" or f.line < first:
                    continue  # a marker is a comment line of the cell: the Python engine reports it
                result.findings.append(_at(
                    f, cell, path, magic.line + f.line - first, f.col + (1 + magic.indent if f.line == first else 0),
                    None if f.end_line is None else magic.line + f.end_line - first,
                    None if f.end_col is None else f.end_col + (1 + magic.indent if f.end_line == first else 0)))
            for code, n in inner.applied.items():
                result.applied[code] = result.applied.get(code, 0) + n
            result.files_read.update(inner.files_read)
            if inner.new_bytes is not None:
                new = lines_of(inner.new_bytes.decode("utf-8"))[len(above):]
                # the markers go above the command, which keeps its continuation lines (`!cmd \` + `  --flag`)
                count = len(lines_of(magic.text))
                markers, command = new[:-count], "".join(new[-count:]).rstrip("\n")
                # at the line's indentation (a `! cmd` line's blank after `!` is the command's, not the marker's)
                magic.replacement = "".join(f"{m.strip()}\n{' ' * magic.indent}" for m in markers) + "!" + command


def _comments_above(cell: Cell, magic: Magic) -> list[str]:
    """The comment lines right above an IPython line in its cell (stripped, one per line)."""
    above: list[str] = []
    for line in reversed(lines_of(cell.text)[:magic.line - 1]):
        if not line.lstrip().startswith("#"):
            break
        above.insert(0, line.strip() + "\n")
    return above


class _Refused(ValueError):
    """JSON that JSON readers disagree on: the message says what and what to do."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object, refused when a key appears twice: JSON readers keep only the last one, while the cell
    positions this module edits are found by its own scan, so the code reported and the code rewritten could
    differ (and Jupyter shows only the last)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"the key {json.dumps(key)} appears twice in one JSON object (readers keep only the "
                           "last one); remove the other one")
        out[key] = value
    return out


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _language(notebook: dict) -> str | None:
    meta = _dict(notebook.get("metadata"))
    for value in (_dict(meta.get("language_info")).get("name"), _dict(meta.get("kernelspec")).get("language")):
        if isinstance(value, str) and value:
            return value.lower()
    return None


# -- the cells as IPython reads them ---------------------------------------------------------------------------

def _code_cells(path: str, text: str, notebook: dict, spans: bool = True) -> list[Cell]:
    """The notebook's code cells as IPython reads them; with `spans`, where each one's source is in `text` (what a
    rewrite replaces: found by a second scan of the text, which a notebook only read does without)."""
    found_spans = _source_spans(text) if spans else itertools.repeat(None)
    out = []
    for i, (cell, span) in enumerate(zip(notebook["cells"], found_spans), start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) and all(isinstance(s, str) for s in source) \
            else source
        if not isinstance(source, str):
            continue
        found = Cell(i, source, span)
        found.indent, found.text = _dedented(source)
        _classify(path, found)
        if found.kind != SKIPPED:
            out.append(found)
    return out


def _dedented(source: str) -> tuple[str, str]:
    """IPython's first step on a cell: the indentation of the first non-blank line is taken off every line that
    starts with it. Returns (that indentation, the text)."""
    lines = lines_of(source)
    first = next((line for line in lines if line.strip()), "")
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    if not indent:
        return "", source
    return indent, "".join(line[len(indent):] if line.startswith(indent) else line for line in lines)


def _classify(path: str, cell: Cell) -> None:
    """Python (plain, or under a cell magic that runs Python), EMBEDDED (the body is a file of a kind the tool
    handles: `%%writefile FILE`, shell cell magics) or SKIPPED (not code, or not code the tool reads)."""
    from neuron_migrate.engine.discover import kind_of

    lines = lines_of(cell.text)
    first = next((n for n, line in enumerate(lines) if line.strip()), None)
    if first is None or not lines[first].startswith("%%"):
        return
    words = _words(lines[first][2:])
    name, args = (words[0], words[1:]) if words else ("", [])
    cell.body_line = first + 1
    if name in PYTHON_CELL_MAGICS:
        return
    cell.kind = EMBEDDED
    if name in WRITEFILE_MAGICS:
        target = next((a for a in args if not a.startswith("-")), None)
        kind = kind_of(target) if target else None
        if kind is not None and kind != "notebook":
            cell.file_kind = kind
            cell.file_path = os.path.normpath(os.path.join(os.path.dirname(path), os.path.expanduser(target)))
            return
    elif name in SHELL_CELL_MAGICS or (name == "script" and os.path.basename(_program(args)) in SCRIPT_SHELLS):
        cell.file_kind, cell.file_path = "shell", path
        return
    cell.kind = SKIPPED


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # an unclosed quote
        return line.split()


def _program(args: list[str]) -> str:
    """The program a `%%script [options] PROGRAM` cell runs."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in SCRIPT_VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return ""


# -- Python cells to one module and back ---------------------------------------------------------------------

def _boundary(n: int) -> str:
    return f"# @@@ {NONCE.get()} c{n}"


def _join(cells: list[Cell]) -> str:
    lines: list[str] = []
    for n, cell in enumerate(cells):
        if n:
            lines.append(_boundary(n) + "\n")
        cell.start = len(lines) + 1
        lines.extend(lines_of(_mask(cell)))
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
    return "".join(lines)


def _mask(cell: Cell) -> str:
    """The cell's code with every IPython-only logical line replaced by a `pass` placeholder of the same
    indentation, and the physical lines it continues on by comments: the line count stays."""
    lines = lines_of(cell.text)
    if not any(MAGIC_LINE.match(line) for line in lines):
        return "".join(lines)  # most cells: nothing to mask, and no need to know where logical lines start
    out = []
    starts = _logical_starts(lines)
    n = 0
    while n < len(lines):
        line = lines[n]
        if not (starts[n] and MAGIC_LINE.match(line) and not line.lstrip().startswith("#")):
            out.append(line)
            n += 1
            continue
        end = n + 1
        while end < len(lines) and not starts[end]:
            end += 1
        tag = f"# @@@ {NONCE.get()} m{len(cell.placeholders)}"
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        text = _without_newline(stripped + "".join(lines[n + 1:end]))
        cell.placeholders[tag] = Magic(text, text, n + 1, len(indent))
        out.append(f"{indent}pass  {tag}\n")
        out += [f"{indent}{tag}.{k}\n" for k in range(1, end - n)]
        n = end
    return "".join(out)


def _compiles(module: str) -> bool:
    """Whether Python compiles the joined cells as IPython runs them (`await` at the top allowed)."""
    try:
        compile(module, "<notebook>", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _not_python(cell: Cell) -> str | None:
    """What keeps a Python cell from compiling as IPython would run it (its magics masked, `await` allowed at
    the top), with the line and column in the cell; None when it compiles. Asked once per cell for the passes over
    one notebook (python.Shared): the answer rests on the cell's source and the nonce its mask spells."""
    shared = SHARED_TREES.get()
    if shared is None:
        return _compiled_cell(cell)
    key = (NONCE.get(), cell.source)
    if key not in shared.cells:
        shared.cells[key] = _compiled_cell(cell)
    return shared.cells[key]


def _compiled_cell(cell: Cell) -> str | None:
    try:
        compile(_mask(cell), "<cell>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as exc:
        line, col = cell.position(exc.lineno or 1, (exc.offset or 1) - 1)
        return f"{exc.msg} at line {line}:{(col or 0) + 1}"
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, nesting too deep for the compiler
        return str(exc) or type(exc).__name__
    finally:
        cell.placeholders = {}
    return None


def _without_newline(text: str) -> str:
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith(("\n", "\r")) else text


# The characters `_logical_starts` acts on, outside a string and inside one opened by each quote.
_OUTSIDE = re.compile(r"[#'\"()\[\]{}\\]")
_IN_STRING = {"'": re.compile(r"['\\]"), '"': re.compile(r'["\\]')}


def _logical_starts(lines: list[str]) -> list[bool]:
    """For each line, whether it begins a new logical line (not inside brackets, a string or a continuation).
    An IPython line (`!cmd`, `%magic`) continues while its lines end with a backslash, as IPython reads it."""
    out = []
    depth, quote, continued = 0, "", False
    for line in lines:
        starts = depth == 0 and not quote and not continued
        out.append(starts)
        if (starts or continued == "magic") and (continued == "magic" or MAGIC_LINE.match(line)):
            continued = "magic" if _without_newline(line).endswith("\\") else False
            continue
        continued = False
        i = 0
        while True:  # from one character that matters to the next
            found = (_IN_STRING[quote[0]] if quote else _OUTSIDE).search(line, i)
            if found is None:
                break
            i = found.start()
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
                quote = line[i:i + 3] if line[i:i + 3] in ('\"\"\"', "\'\'\'") else c
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
    """The rewritten module cut back into the cells' dedented texts, with the IPython lines restored."""
    parts: list[list[str]] = [[]]
    boundaries = {_boundary(n) for n in range(1, len(cells))}
    for line in lines_of(module):
        if line.rstrip("\r\n") in boundaries:
            parts.append([])
        else:
            parts[-1].append(line)
    if len(parts) != len(cells):
        raise SourceError("internal error: the rewrite lost a cell boundary; the notebook was left alone. "
                          "Please report this.")
    out = []
    for cell, lines in zip(cells, parts):
        restored: list[str] = []
        for line in lines:
            magic = cell.placeholders.get(_tag(line.strip()))
            if magic is not None and magic.stale_above is not None and restored \
                    and restored[-1].strip() == magic.stale_above:
                restored.pop()  # the comment that named the old pins (see _pin_installs)
            restored.append(_restore(line, cell))
        text = "".join(restored)
        if not cell.text.endswith(("\n", "\r")) and text.endswith("\n"):
            text = text[:-1]
        if text != cell.text and not cell.text.startswith(("\n", "\r")):
            text = text.lstrip("\r\n")  # a cell does not open with the blank lines that set off new code above it
        out.append(text)
    return out


def _tag(stripped: str) -> str:
    """The placeholder tag of a module line: `pass  # @@@ ...` (a placeholder alone in its block), or the comment
    alone (kept where an edit removed the statement around the placeholder)."""
    return stripped[len("pass  "):] if stripped.startswith("pass  # @@@") else stripped


def _restore(line: str, cell: Cell) -> str:
    """A module line as the cell holds it: a placeholder becomes its IPython line again (the lines it continues
    on come with it, so their own placeholders go)."""
    stripped = line.strip()
    prefix = f"# @@@ {NONCE.get()} m"
    if stripped.startswith(prefix) and "." in stripped and stripped.rsplit(".", 1)[0] in cell.placeholders:
        return ""
    tag = _tag(stripped)
    if tag in cell.placeholders:  # kept where an edit removed the statement around the placeholder
        if cell.placeholders[tag].replacement is None:
            return ""
        newline = line[len(line.rstrip("\r\n")):] or "\n"
        return line[: len(line) - len(line.lstrip())] + cell.placeholders[tag].replacement + newline
    return line


def _in_module(finding: Finding, cells: list[Cell]) -> Finding:
    cell = _cell_at(finding.line, cells)
    shift = cell.start - 1
    return _at(finding, cell, finding.path, finding.line - shift, finding.col,
               None if finding.end_line is None else finding.end_line - shift, finding.end_col)


def _in_cell(finding: Finding, cell: Cell, offset: int, path: str) -> Finding:
    """A finding of an embedded body (line 1 is the cell's line `offset + 1`), placed in the notebook."""
    return _at(finding, cell, path, finding.line + offset, finding.col,
               None if finding.end_line is None else finding.end_line + offset, finding.end_col)


def _at(finding: Finding, cell: Cell, path: str, line: int, col: int, end_line: int | None,
        end_col: int | None) -> Finding:
    """The finding at (line, col) .. (end_line, end_col) of the cell's dedented text, placed in its source."""
    line, col = cell.position(line, col)
    if end_line is not None:
        end_line, end_col = cell.position(end_line, end_col)
    return dataclasses.replace(finding, path=path, cell=cell.index, line=line, col=col, end_line=end_line,
                               end_col=end_col)


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
    line, col = cell.position(int(m.group(1)) - cell.start + 1, int(m.group(2)))
    return f"cell {cell.index}, line {line}:{col}: {m.group(3)}"


# -- the JSON text: find each cell's `source` and replace only what changed ----------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()  # NaN and Infinity too, as json.loads
# NaN and Infinity too: not JSON, but Python's json writes them (a float metadata value) and reads them back
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|NaN|-?Infinity")


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _value_end(text: str, i: int) -> int:
    """Where the JSON value starting at `i` ends. An object or array (a cell's outputs and metadata, most of a
    notebook's text) is read by json's own scanner, in C: only its end is wanted."""
    c = text[i]
    if c == '"':
        return scanstring(text, i + 1)[1]
    if c == "{" or c == "[":
        return _DECODER.raw_decode(text, i)[1]
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
