"""Render results for people and machines: finding lines, unified diffs, JSON, summaries."""

from __future__ import annotations

import difflib
import json
from collections import Counter

from neuron_migrate.findings import FileResult, Finding


def finding_line(f: Finding) -> str:
    where = f"{f.path}:cell {f.cell}:{f.line}:{f.col}" if f.cell is not None else f"{f.path}:{f.line}:{f.col}"
    return f"{where}: {f.code} {f.message}"


def unified_diff(result: FileResult) -> str:
    """A difflib unified diff of one file, with file headers; lines keep their own newline characters."""
    assert result.old_bytes is not None and result.new_bytes is not None
    old = _lines(result.old_bytes)
    new = _lines(result.new_bytes)
    diff = difflib.unified_diff(old, new, fromfile=f"a/{result.path.lstrip('/')}",
                                tofile=f"b/{result.path.lstrip('/')}")
    out = []
    for line in diff:
        if not line.endswith(("\n", "\r")):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="surrogateescape").splitlines(keepends=True)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def library_line(library) -> str:
    """The note for an XLA-stack library whose files were left alone (engine/stack.py): one per library."""
    return f"{library.root}: note: {library.message}"


def libraries_left(libraries) -> str:
    """`2 XLA-stack libraries left alone (310 files)`, for the summaries; "" when there are none."""
    if not libraries:
        return ""
    n = len(libraries)
    return (f"{n} XLA-stack {'library' if n == 1 else 'libraries'} left alone "
            f"({plural(sum(lib.files for lib in libraries), 'file')})")


def check_summary(findings: list[Finding], files: int, errors: int, libraries=()) -> str:
    left = libraries_left(libraries)
    if not findings and not errors:
        return f"All clear: {plural(files, 'file')} checked, nothing to migrate" + (f"; {left}." if left else ".")
    fixable = sum(1 for f in findings if f.fixable)
    files_with = len({f.path for f in findings})
    text = f"Found {plural(len(findings), 'finding')} in {plural(files_with, 'file')} ({files} checked)"
    if fixable:
        text += f"; {fixable} fixable with `neuron-migrate rewrite`"
    if errors:
        text += f"; {plural(errors, 'file')} could not be processed"
    if left:
        text += f"; {left}"
    return text + "."


def rewrite_summary(results: list[FileResult], dry_run: bool, libraries=()) -> list[str]:
    changed = [r for r in results if r.changed and not r.error]
    per_rule: Counter[str] = Counter()
    for r in changed:
        per_rule.update(r.applied)
    verb = "Would rewrite" if dry_run else "Rewrote"
    lines = [f"{verb} {plural(len(changed), 'file')} ({plural(sum(per_rule.values()), 'rewrite')})."]
    if per_rule:
        lines.append("Rewrites per rule: " + ", ".join(f"{code} x{n}" for code, n in sorted(per_rule.items())))
    manual = [m for r in results for m in r.manual]
    if manual:
        lines.append(f"{plural(len(manual), 'item')} left for a person (marked `# TODO(neuron-migrate ...)`):")
        lines.extend("  " + finding_line(m) for m in manual)
    if libraries:
        lines.append(libraries_left(libraries) + ":")
        lines.extend("  " + library_line(lib) for lib in libraries)
    return lines


def json_report(findings: list[Finding], errors: list[tuple[str, str]], libraries=()) -> str:
    return json.dumps({
        "findings": [f.to_json() for f in findings],
        "errors": [{"path": p, "message": m} for p, m in errors],
        "libraries": [lib.to_json() for lib in libraries],
    }, indent=2)
