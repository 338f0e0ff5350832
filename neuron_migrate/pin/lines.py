"""Formats that keep one requirement per line (requirements files, setup.cfg, the pip list of environment.yml).

A format finds its entries; this module asks the plan, reports, and edits: a re-pinned entry changes only
its version, a removed entry loses its lines (comment included), an added package gets a line of its own
shaped like its neighbour's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.document import TextDocument


@dataclass(frozen=True)
class LineEntry:
    start: int  # offset of the entry's first line
    end: int  # offset past its last line (newline included)
    req_start: int  # the requirement text is doc.text[req_start:req_end]
    req_end: int
    hashed: bool = False

    def text(self, doc: TextDocument) -> str:
        return doc.text[self.req_start:self.req_end]


def pin_entries(doc: TextDocument, entries: list[LineEntry], present: set[str],
                make_line: Callable[[LineEntry, str], str], may_add: bool = True) -> planning.Plan:
    """Plan over the entries, report, and record the edits the reports allow."""
    texts: list[str | None] = [e.text(doc) for e in entries]
    result = planning.plan(texts, doc.family, present, may_add=may_add, instance=doc.settings.instance,
                           unsafe_fixes=doc.settings.unsafe_fixes, beside=planning.environment(doc.settings))
    frozen = any(e.hashed for e in entries)

    def report(index: int, code: str, fields: dict) -> bool:
        entry = entries[index]
        return doc.report(code, entry.req_start, entry.start, end=entry.req_end, **fields)

    for index, outcome in planning.approve(result, texts, report, frozen).items():
        entry = entries[index]
        added = "".join(make_line(entry, text) for text in outcome.extra)
        if outcome.remove:
            doc.replace(entry.start, entry.end, added)
            continue
        if outcome.replacement is not None:
            doc.replace(entry.req_start, entry.req_end, outcome.replacement)
            if stale := _stale_comment(doc, entry):
                doc.replace(*stale, "")
        if added:
            tail = "" if doc.text[:entry.end].endswith(("\n", "\r")) else doc.newline
            doc.replace(entry.end, entry.end, tail + added.removesuffix(doc.newline) if tail else added)
    return result


_TRAILING_COMMENT = re.compile(r"(,?)([ \t]+#[^\r\n]*)")
_DESCRIBES_OLD_PIN = re.compile(r"\b(xla|legacy|torch[-_]xla|libneuronxla|2\.\d+\.\d+(\.\d+)*)\b", re.I)


def _stale_comment(doc: TextDocument, entry: LineEntry) -> tuple[int, int] | None:
    """The span of the comment after a re-pinned requirement on its line (after its closing quote, if quoted)
    when it describes the old pin (`# legacy XLA build`, `# 2.9.0 is what we tested`): it goes with the old
    version. Other comments stay."""
    return stale_comment_at(doc, entry.req_end + (doc.text[entry.req_end:entry.req_end + 1] in ("'", '"')))


def stale_comment_at(doc: TextDocument, at: int) -> tuple[int, int] | None:
    """The span of the comment that follows `at` on its line (after a list's comma, if any: the comment of the
    line's last element) when it describes the old pin."""
    m = _TRAILING_COMMENT.match(doc.text, at)
    if m is None or not _DESCRIBES_OLD_PIN.search(m.group(2)):
        return None
    return m.start(2), m.end(2)
