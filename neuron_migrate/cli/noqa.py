"""`check --add-noqa`: a `# noqa: NMxxx` comment for every current finding, for teams that adopt the checks on a
big repository and want only new code held to them.

The comment goes where `suppress.py` looks for it: in Python at the end of the finding's logical line (the
last line of a statement that spans several, the header line of a compound statement), in the other kinds at
the end of the line, after the last line continued with `\\`. A line that already has a `# noqa: ...` with
codes gets the new codes added to it. A file is written only when the result still parses (Python, TOML);
notebooks are left alone (their cells are JSON strings): the findings there are counted as not suppressed.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections import defaultdict
from dataclasses import dataclass, field

from neuron_migrate.catalogue import toml_reader
from neuron_migrate.engine.sources import write_atomic
from neuron_migrate.findings import Finding

# Findings no line comment silences: the markers (resolve them) and the stale suppressions themselves.
UNUSED_CODE = "NM901"
NOT_SUPPRESSIBLE = frozenset({"NM900", UNUSED_CODE})
NOQA = re.compile(r"#\s*noqa\s*:\s*(?:NM\d{3}|[A-Z]+\d+)(?:\s*,\s*(?:NM\d{3}|[A-Z]+\d+))*", re.I)
CONTINUED = re.compile(r"\\[ \t]*$")


@dataclass
class Added:
    files: list[str] = field(default_factory=list)  # files written
    comments: int = 0  # codes added
    left: list[tuple[Finding, str]] = field(default_factory=list)  # finding, why no comment was added
    codes: set[tuple[str, int, str]] = field(default_factory=set)  # (path, line, code) of each code added


def add_noqa(findings: list[Finding], read, kind_of) -> Added:
    """Add the comments for `findings`; `read(path)` gives a file's bytes (None: unreadable), `kind_of(path)`
    its kind."""
    out = Added()
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        if f.code in NOT_SUPPRESSIBLE:
            out.left.append((f, "a marker or a stale suppression: resolve it rather than silence it"))
        elif f.cell is not None:
            out.left.append((f, "in a notebook: add `# noqa: CODE` at the end of the cell's line by hand"))
        else:
            by_path[f.path].append(f)
    for path, items in by_path.items():
        data = read(path)
        kind = kind_of(path)
        try:
            text = data.decode("utf-8") if data is not None else None
        except UnicodeDecodeError:
            text = None
        if text is None:
            out.left += [(f, "the file could not be read as UTF-8") for f in items]
            continue
        new, added = _with_comments(text, kind, items)
        count = len(added)
        if count == 0 or new == text:
            continue
        if not _still_parses(new, kind):
            out.left += [(f, "the comment would break the file; add it by hand") for f in items]
            continue
        try:
            write_atomic(path, new.encode("utf-8"), expected=data)
        except OSError as exc:
            out.left += [(f, f"could not write ({exc.strerror or exc})") for f in items]
            continue
        out.files.append(path)
        out.comments += count
        out.codes |= {(path, row, code) for row, code in added}
    return out


def remove_noqa(stale: list[tuple[str, int, str]], read) -> int:
    """Take the codes `stale` names (path, line, code) off the `# noqa:` comments of those lines (the whole
    comment where none is left); the number of codes taken off. A code whose finding a later run no longer
    reports (NM190, once the findings whose fixes would leave an import unused are silenced) goes again."""
    by_path: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path, line, code in stale:
        by_path[path][line].add(code.upper())
    removed = 0
    for path, rows in by_path.items():
        data = read(path)
        if data is None:
            continue
        text = data.decode("utf-8")
        lines = text.splitlines(keepends=True)
        for row, codes in rows.items():
            if not 1 <= row <= len(lines):
                continue
            line = lines[row - 1]
            body = line.rstrip("\r\n")
            m = NOQA.search(body)
            if m is None:
                continue
            present = re.findall(r"\b[A-Z]+\d+", m.group(0)[m.group(0).index(":") + 1:], re.I)
            kept = [c for c in present if c.upper() not in codes]
            removed += len(present) - len(kept)
            comment = "# noqa: " + ", ".join(kept) if kept else ""
            before = body[:m.start()] if kept else body[:m.start()].rstrip(" \t")
            lines[row - 1] = before + comment + body[m.end():] + line[len(body):]
        new = "".join(lines)
        if new != text:
            write_atomic(path, new.encode("utf-8"), expected=data)
    return removed


def _with_comments(text: str, kind: str | None, findings: list[Finding]) -> tuple[str, list[tuple[int, str]]]:
    lines = text.splitlines(keepends=True)
    end_of = _python_line_ends(text) if kind == "python" else _text_line_ends(lines)
    wanted: dict[int, list[str]] = defaultdict(list)
    for f in findings:
        row = end_of(f.line)
        if row is not None and 1 <= row <= len(lines) and f.code not in wanted[row]:
            wanted[row].append(f.code)
    added: list[tuple[int, str]] = []
    for row, codes in wanted.items():
        line = lines[row - 1]
        body = line.rstrip("\r\n")
        newline = line[len(body):]
        m = NOQA.search(body)
        if m:
            present = {c.upper() for c in re.findall(r"\b[A-Z]+\d+", m.group(0), re.I)}
            codes = [c for c in codes if c not in present]
            if not codes:
                continue
            body = body[:m.end()] + ", " + ", ".join(codes) + body[m.end():]
        else:
            body = body.rstrip(" \t") + "  # noqa: " + ", ".join(codes)
        lines[row - 1] = body + newline
        added += [(row, code) for code in codes]
    return "".join(lines), added


def _python_line_ends(text: str):
    """line -> the last line of its logical line (where a statement's comment goes)."""
    ends: dict[int, int] = {}
    start = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
                continue
            if token.type == tokenize.NEWLINE or token.type == tokenize.ENDMARKER:
                if start is not None:
                    for row in range(start, token.start[0] + 1):
                        ends[row] = token.start[0]
                start = None
            elif start is None:
                start = token.start[0]
    except (tokenize.TokenError, SyntaxError):
        return lambda line: None
    return ends.get


def _text_line_ends(lines: list[str]):
    def end(line: int) -> int | None:
        row = line
        while row < len(lines) and CONTINUED.search(lines[row - 1].rstrip("\r\n")):
            row += 1
        return row

    return end


def _still_parses(text: str, kind: str | None) -> bool:
    try:
        if kind == "python":
            compile(text, "<noqa>", "exec", dont_inherit=True)
        elif kind in ("pyproject", "lockfile"):
            toml_reader().loads(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
