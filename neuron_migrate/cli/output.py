"""Render results for people and machines: finding lines, code frames, unified diffs, statistics, summaries."""

from __future__ import annotations

import difflib
import functools
import json
from collections import Counter
from typing import Callable

from neuron_migrate.cli.terminal import PLAIN, Style
from neuron_migrate.findings import FileResult, Finding, FixSafety
from neuron_migrate.engine.stack import MULTI_BACKEND, XLA_STACK

FRAME_LINES = 3  # at most this many lines of the finding itself in a code frame
FRAME_WIDTH = 100  # a frame line longer than this is cut (with an ellipsis)


FIXABLE, HELD_BACK = "[*]", "[~]"  # `rewrite` fixes it; an unsafe fix only `rewrite --unsafe-fixes` makes


def finding_line(f: Finding, style: Style = PLAIN) -> str:
    """`path:line:col: CODE [*] message`; `[*]`: `neuron-migrate rewrite` fixes it; `[~]`: its fix is unsafe and
    held back (`rewrite --unsafe-fixes` makes it)."""
    where = f"{f.path}:cell {f.cell}:{f.line}:{f.col}" if f.cell is not None else f"{f.path}:{f.line}:{f.col}"
    mark = " " + style.fixable(FIXABLE) if f.fixable else " " + style.dim(HELD_BACK) if f.held_back else ""
    return f"{style.path(where)}: {style.code(f.code)}{mark} {f.message}"


@functools.lru_cache(maxsize=2)
def _cells(data: bytes):
    """A notebook's cells, read once for the findings of its cells (they come one after the other)."""
    return json.loads(data.decode("utf-8-sig")).get("cells", [])


def cell_source(data: bytes, cell: int) -> str | None:
    try:
        source = _cells(data)[cell - 1].get("source", "")
    except (ValueError, AttributeError, IndexError, TypeError):
        return None
    source = "".join(source) if isinstance(source, list) else source
    return source if isinstance(source, str) else None


def source_lines(data: bytes | None, cell: int | None) -> list[str] | None:
    """The lines a finding's line numbers count: the file's, or its notebook cell's."""
    if data is None:
        return None
    text = cell_source(data, cell) if cell is not None else data.decode("utf-8", errors="replace")
    return None if text is None else text.splitlines()


def code_frame(f: Finding, lines: list[str] | None, style: Style = PLAIN) -> list[str]:
    """A short frame under a finding: the line before it, its lines (at most FRAME_LINES) and carets under
    its first line; nothing when the lines are not at hand."""
    if not lines or not 1 <= f.line <= len(lines):
        return []
    last = min(f.end_line or f.line, f.line + FRAME_LINES - 1, len(lines))
    first = max(1, f.line - 1)
    width = len(str(last))
    gutter = " " * width + " " + style.dim("|")
    out = [gutter]
    for number in range(first, last + 1):
        text = lines[number - 1].expandtabs(1)
        shown = text if len(text) <= FRAME_WIDTH else text[:FRAME_WIDTH - 1] + "…"
        out.append(f"{style.dim(str(number).rjust(width) + ' |')} {shown}".rstrip())
        if number == f.line:
            start = max(0, f.col - 1)
            end = f.end_col - 1 if f.end_line == f.line and f.end_col is not None else len(text.rstrip())
            end = min(max(end, start + 1), FRAME_WIDTH)
            if start < FRAME_WIDTH:
                out.append(f"{gutter} {' ' * start}{style.caret('^' * (end - start))} {style.code(f.code)}")
    out.append(gutter)
    return out


def statistics(findings: list[Finding], style: Style = PLAIN) -> list[str]:
    """Counts by code, most frequent first: `count  CODE  [*]  name` (`[*]`: every one of them is fixable, `[-]`:
    some are; `[~]`: their fix is unsafe and held back, `--unsafe-fixes` makes it)."""
    from neuron_migrate import catalogue

    counts = Counter(f.code for f in findings)
    fixable = Counter(f.code for f in findings if f.fixable)
    held = Counter(f.code for f in findings if f.held_back)
    width = max((len(str(n)) for n in counts.values()), default=1)
    out = []
    for code, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        mark = FIXABLE if fixable[code] == n else "[-]" if fixable[code] else HELD_BACK if held[code] else "   "
        out.append(f"{str(n).rjust(width)}  {style.code(code)}  {style.fixable(mark)}  {catalogue.rule(code).name}")
    return out


def statistics_json(findings: list[Finding]) -> str:
    from neuron_migrate import catalogue

    counts = Counter(f.code for f in findings)
    fixable = Counter(f.code for f in findings if f.fixable)
    return json.dumps([{"code": code, "name": catalogue.rule(code).name, "count": n, "fixable": fixable[code]}
                       for code, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))], indent=2)


def color_diff(text: str, style: Style) -> str:
    if not style.color:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        body, end = line.rstrip("\r\n"), line[len(line.rstrip("\r\n")):]
        if line.startswith(("---", "+++")):
            body = style.header(body)
        elif line.startswith("@@"):
            body = style.hunk(body)
        elif line.startswith("+"):
            body = style.added(body)
        elif line.startswith("-"):
            body = style.removed(body)
        out.append(body + end)
    return "".join(out)


def unified_diff(result: FileResult) -> str:
    """A difflib unified diff of one file, with file headers; lines keep their own newline characters. A
    notebook whose changes are all in its cells' sources shows each changed cell as code (`a/x.ipynb:cell 3`,
    cells numbered like the findings), as ruff does, not the escaped JSON lines."""
    assert result.old_bytes is not None and result.new_bytes is not None
    name = result.path.lstrip("/")
    if result.path.endswith(".ipynb"):
        cells = _cell_sources(result.old_bytes), _cell_sources(result.new_bytes)
        if cells[0] is not None and cells[1] is not None and len(cells[0][0]) == len(cells[1][0]) \
                and cells[0][1] == cells[1][1]:
            return "".join(_diff(_ended(old), _ended(new), f"{name}:cell {i}")  # a cell has no last newline
                           for i, (old, new) in enumerate(zip(cells[0][0], cells[1][0]), start=1) if old != new)
    return _diff(_lines(result.old_bytes), _lines(result.new_bytes), name, created=result.created)


def _ended(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _diff(old: list[str] | str, new: list[str] | str, name: str, created: bool = False) -> str:
    """`created`: a new file (git's `--- /dev/null` header)."""
    old = old.splitlines(keepends=True) if isinstance(old, str) else old
    new = new.splitlines(keepends=True) if isinstance(new, str) else new
    out = []
    source = "/dev/null" if created else _header(f"a/{name}")
    for line in difflib.unified_diff(old, new, fromfile=source, tofile=_header(f"b/{name}")):
        if not line.endswith(("\n", "\r")):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


_GIT_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def _header(name: str) -> str:
    """A file name in a diff header, quoted as git quotes it when it holds a newline, a tab, a quote, a backslash
    or another control character: a newline in a name must not end the header line."""
    if not any(c in _GIT_ESCAPES or ord(c) < 32 or ord(c) == 127 for c in name):
        return name
    return '"' + "".join(_GIT_ESCAPES.get(c) or (f"\\{ord(c):03o}" if ord(c) < 32 or ord(c) == 127 else c)
                         for c in name) + '"'


def _cell_sources(data: bytes) -> tuple[list[str], str] | None:
    """Each cell's source, and the notebook without them (what else changed, if anything); None when it is not
    a notebook's JSON."""
    try:
        notebook = json.loads(data.decode("utf-8"))
        cells = notebook["cells"]
        sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]
        rest = json.dumps({**notebook, "cells": [{k: v for k, v in c.items() if k != "source"} for c in cells]},
                          sort_keys=True)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not all(isinstance(s, str) for s in sources):
        return None
    return sources, rest


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="surrogateescape").splitlines(keepends=True)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def library_line(library) -> str:
    """The note for a library whose files were left alone (engine/stack.py): one per library."""
    return f"{library.root}: note: {library.message}"


def libraries_left(libraries) -> str:
    """`2 XLA-stack libraries and 1 multi-backend library left alone (310 files)`, for the summaries; "" when
    there are none."""
    if not libraries:
        return ""
    groups = []
    for kind, word in ((XLA_STACK, "XLA-stack"), (MULTI_BACKEND, "multi-backend")):
        n = sum(1 for lib in libraries if lib.kind == kind)
        if n:
            groups.append(f"{n} {word} {'library' if n == 1 else 'libraries'}")
    return f"{' and '.join(groups)} left alone ({plural(sum(lib.files for lib in libraries), 'file')})"


def check_summary(findings: list[Finding], files: int, errors: int, libraries=(), unsafe_fixes: bool = True) -> str:
    """`Found ...`, or `All clear ...`. Without `unsafe_fixes` (the run's setting) no fixable finding is an unsafe
    fix (policy.Policy holds those back), and the catalogue is not read to ask."""
    left = libraries_left(libraries)
    if not findings and not errors:
        if not files and not libraries:
            return ("No files to check: no Python file, notebook, requirements, pyproject, setup, Dockerfile, shell "
                    "script or accelerate config under the given paths (or all of them excluded).")
        return f"All clear: {plural(files, 'file')} checked, nothing to migrate" + (f"; {left}." if left else ".")
    fixable = [f for f in findings if f.fixable]
    files_with = len({f.path for f in findings})
    text = f"Found {plural(len(findings), 'finding')} in {plural(files_with, 'file')} ({files} checked)"
    if fixable:
        # with unsafe fixes on (`--unsafe-fixes`, or the configuration), some of them need the flag to be made
        unsafe = unsafe_fixes and any(_fix_safety(f.code) is FixSafety.UNSAFE for f in fixable)
        command = "neuron-migrate rewrite --unsafe-fixes" if unsafe else "neuron-migrate rewrite"
        text += f"; {FIXABLE} {len(fixable)} fixable with `{command}`"
    held = held_back(findings, "`neuron-migrate rewrite --unsafe-fixes` makes {them} (review the result)")
    if held:
        text += f"; {held}"
    if errors:
        text += f"; {plural(errors, 'file')} could not be processed"
    if left:
        text += f"; {left}"
    return text + "."


def _fix_safety(code: str) -> FixSafety | None:
    from neuron_migrate import catalogue

    try:
        return catalogue.rule(code).fix
    except catalogue.CatalogueError:
        return None


def held_back(findings, how: str) -> str:
    """`[~] 3 unsafe fixes held back: <how>` for the findings whose unsafe fix this run did not make ("{them}" in
    `how`: it or them); "" when there are none."""
    n = sum(1 for f in findings if f.held_back)
    if not n:
        return ""
    what = f"{n} unsafe {'fix' if n == 1 else 'fixes'}"
    return f"{HELD_BACK} {what} held back: " + how.format(them="it" if n == 1 else "them")


def rewrite_summary(results: list[FileResult], dry_run: bool, libraries=(), command: str = "rewrite",
                    later: int | None = None, where: Callable[[str], str] | None = None) -> list[str]:
    """The summary of a rewrite. `later`: how many unsafe fixes a check of the files as this run left them still
    holds back (what a later run with --unsafe-fixes makes); None when not counted (a dry run changes nothing, so
    such a run makes them all)."""
    changed = [r for r in results if r.changed and not r.error]
    per_rule: Counter[str] = Counter()
    for r in changed:
        per_rule.update(r.applied)
    verb = "Would rewrite" if dry_run else "Rewrote"
    created = [where(r.path) if where else r.path for r in changed if r.created]  # `where`: in --output-dir
    lines = [f"{verb} {plural(len(changed) - len(created), 'file')} ({plural(sum(per_rule.values()), 'rewrite')})."]
    if created:  # engine/shared.py
        lines[0] = lines[0][:-1] + f"; {'would create' if dry_run else 'created'} {', '.join(created)}, the " \
            f"helpers {'its' if len(created) == 1 else 'their'} folder's scripts now import."
    if per_rule:
        lines.append("Rewrites per rule: " + ", ".join(f"{code} x{n}" for code, n in sorted(per_rule.items())))
    from neuron_migrate.cli.report import left_for_a_person

    left = left_for_a_person(results)  # as the report counts them
    if left.markers:
        lines.append(f"{plural(len(left.markers), 'item')} left for a person (marked `# TODO(neuron-migrate ...)`):")
        lines.extend("  " + finding_line(m) for m in left.markers)
    if left.other:
        lines.append(f"{plural(len(left.other), 'finding')} reported without a marker (`neuron-migrate check` "
                     "lists them too):")
        lines.extend("  " + finding_line(m) for m in left.other)
    if later is not None and later < sum(1 for f in left.other if f.held_back):
        # NM107's compile, NM106's DDP: found beside the legacy idioms this run replaced, not in its output
        held = held_back(left.other, f"`neuron-migrate {command} --unsafe-fixes` makes {{them}} when run on the "
                         f"files as they were; on the files as they are now it finds {later} of them.")
    else:
        held = held_back(left.other, f"`neuron-migrate {command} --unsafe-fixes` makes {{them}} (review the result).")
    if held:
        lines.append(held)
    if libraries:
        lines.append(libraries_left(libraries) + ":")
        lines.extend("  " + library_line(lib) for lib in libraries)
    return lines


def json_report(findings: list[Finding], errors: list[tuple[str, str]], **kw) -> str:
    from neuron_migrate.cli.formats import json_report as report

    return report(findings, errors, **kw)
