"""A text file being pinned: findings at offsets, span edits applied in one pass, TODO markers for a person.

The dependency formats (requirements files, setup.cfg, environment.yml, Dockerfiles, shell scripts) all
use `#` comments, so a manual finding leaves the same `# TODO(neuron-migrate NM6xx)` marker a Python
rule leaves, above the line it is about, and `check` keeps reporting it as NM900; and a line is silenced
with the same `# neuron-migrate: ignore[NM601]` / `# noqa: NM601` comments. What is reported, fixed or
marked is decided by the one report policy (policy.py).
"""

from __future__ import annotations

import bisect
import codecs
import re
from dataclasses import dataclass, field

from neuron_migrate import catalogue
from neuron_migrate.engine.discover import kind_of
from neuron_migrate.engine.edits import MARKER_PREFIX
from neuron_migrate.findings import FileResult, Finding
from neuron_migrate.pin.matrix import Family, target
from neuron_migrate.policy import Policy, marked_above
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import Source, SourceError
from neuron_migrate.suppress import line_suppressions

OWN_MARKERS = re.compile(r"#\s*TODO\(neuron-migrate (NM6\d\d)\):\s*(.*)$")


def markers_of(codes: str) -> re.Pattern[str]:
    """The marker pattern for a document whose handler owns the codes matching `codes` (a regex)."""
    return re.compile(r"#\s*TODO\(neuron-migrate (%s)\):\s*(.*)$" % codes)


@dataclass
class Edit:
    start: int
    end: int
    text: str
    marker: bool = False  # a TODO marker: at the same offset as another insertion, it goes last (above its line)


@dataclass
class TextDocument:
    path: str
    source: Source
    settings: Settings
    rewrite: bool
    edits: list[Edit] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    applied: dict[str, int] = field(default_factory=dict)
    markers_reported_elsewhere: bool = False  # setup.py: the Python engine reports every marker
    kind: str = "shell"  # the file kind, for its comment syntax (suppressions)
    files_read: dict[str, str | None] = field(default_factory=dict)  # other files the result depends on
    own_markers: re.Pattern[str] = OWN_MARKERS  # the markers this document reports as NM900

    def __post_init__(self) -> None:
        self.policy = Policy(self.settings, self.path, self.rewrite)
        self.suppressions = line_suppressions(self.source.text, self.kind)

    @classmethod
    def read(cls, path: str, data: bytes, settings: Settings, rewrite: bool) -> "TextDocument":
        """A UTF-8 text file (with or without a BOM), as pip, Docker and shells read them."""
        bom = data.startswith(codecs.BOM_UTF8)
        body = data[len(codecs.BOM_UTF8):] if bom else data
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = body[:exc.start].count(b"\n") + 1
            raise SourceError(f"line {line}: bytes are not valid UTF-8 (byte {body[exc.start]:#04x}); convert the "
                              "file to UTF-8, then run again") from None
        return cls(path, Source(text, "utf-8", bom), settings, rewrite, kind=kind_of(path) or "shell")

    @property
    def text(self) -> str:
        return self.source.text

    @property
    def newline(self) -> str:
        return self.source.newline

    @property
    def family(self) -> Family:
        try:
            return target(self.settings)
        except ValueError as exc:
            raise SourceError(str(exc)) from None

    # -- positions -----------------------------------------------------------------------------------------
    def line_starts(self) -> list[int]:
        starts = getattr(self, "_starts", None)
        if starts is None:
            starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", self.text)]
            self._starts = starts
        return starts

    def position(self, offset: int) -> tuple[int, int]:
        starts = self.line_starts()
        line = bisect.bisect_right(starts, offset) - 1
        return line + 1, offset - starts[line] + 1

    def line_start(self, offset: int) -> int:
        starts = self.line_starts()
        return starts[bisect.bisect_right(starts, offset) - 1]

    def line_end(self, offset: int) -> int:
        """The offset just past the newline that ends the line holding `offset` (or the end of the text)."""
        starts = self.line_starts()
        index = bisect.bisect_right(starts, offset)
        return starts[index] if index < len(starts) else len(self.text)

    # -- findings ------------------------------------------------------------------------------------------
    def span_end(self, offset: int) -> int:
        """The offset past the text of the line holding `offset`: the end of a finding that names no end."""
        rest = self.text[offset:self.line_end(offset)]
        return offset + len(rest.rstrip(" \t\r\n"))

    def report(self, code: str, offset: int, line_offset: int | None = None, *, end: int | None = None,
               held: bool = False, **fields: object) -> bool:
        """Record a finding of the text from `offset` to `end` (default: the end of the line's text); True when
        the caller should make its edit now.

        For manual codes the marker goes above the line holding `line_offset` (default: `offset`); a line
        that already carries this code's marker is not reported again (its NM900 stands for it). `held`: the
        fix waits for an unsafe fix this run holds back (see `Policy.decide`).
        """
        anchor = self.line_start(offset if line_offset is None else line_offset)
        line, col = self.position(offset)
        decision = self.policy.decide(code, line, self.suppressions, fields,
                                      marked=lambda: self._marked(anchor, code), held=held)
        if decision is None:
            return False
        end_line, end_col = self.position(max(offset, self.span_end(offset) if end is None else end))
        self.findings.append(decision.finding(self.policy, line, col, end_line=end_line, end_col=end_col))
        if decision.mark:
            indent = re.match(r"[ \t]*", self.text[anchor:]).group()
            marker = Edit(anchor, anchor, indent + decision.marker + self.newline, marker=True)
            if marker not in self.edits:  # one marker per (code, line): two findings of a line can share one
                self.edits.append(marker)
        if decision.fix:
            self.applied[code] = self.applied.get(code, 0) + 1
        return decision.fix

    def _marked(self, line_start: int, code: str) -> bool:
        starts = self.line_starts()
        index = bisect.bisect_left(starts, line_start)
        above: list[str] = []
        while index > 0 and self.text[starts[index - 1]:starts[index]].lstrip().startswith("#"):
            index -= 1
            above.insert(0, self.text[starts[index]:starts[index + 1]])
        return marked_above(above, code)

    # -- edits ---------------------------------------------------------------------------------------------
    def replace(self, start: int, end: int, text: str) -> None:
        if start == end and start == self.line_start(start):
            # new lines go above the markers of the line they are put before: a marker belongs to the line below
            # it, and a line put between them made the next run mark that line again
            start = end = self._above_own_markers(start)
        self.edits.append(Edit(start, end, text))

    def _above_own_markers(self, line_start: int) -> int:
        starts = self.line_starts()
        index = bisect.bisect_left(starts, line_start)
        while index > 0 and self.own_markers.match(self.text[starts[index - 1]:starts[index]].strip()):
            index -= 1
        return starts[index] if index < len(starts) else line_start

    def render(self) -> str:
        out = []
        position = 0
        for edit in sorted(self.edits, key=lambda e: (e.start, e.end, e.marker)):
            if edit.start < position:
                raise SourceError("internal error: two pin edits overlap; the file was left alone. "
                                  "Please report this.")
            out.append(self.text[position:edit.start])
            out.append(edit.text)
            position = edit.end
        out.append(self.text[position:])
        return "".join(out)

    def result(self, data: bytes) -> FileResult:
        result = FileResult(self.path, old_bytes=data, findings=self.findings, files_read=dict(self.files_read),
                            used_suppressions=set(self.suppressions.used) if self.suppressions else set())
        markers = (lambda text: []) if self.markers_reported_elsewhere else (
            lambda text: own_marker_findings(text, self.path, self.settings, self.own_markers))
        if self.rewrite:
            new_text = self.render()
            if new_text != self.text:
                result.new_bytes = self.source.encode(new_text)
                result.applied = {k: v for k, v in self.applied.items() if v}
                result.manual = markers(new_text)
        # the markers already in the file are findings in both commands (`check --format json` runs a rewrite)
        result.findings = self.findings + markers(self.text)
        result.findings.sort(key=lambda f: f.sort_key())
        return result


def own_marker_findings(text: str, path: str, settings: Settings,
                        pattern: re.Pattern[str] = OWN_MARKERS) -> list[Finding]:
    """NM900 for the NM6xx markers in a dependency file (other handlers of the same kind report their own)."""
    if MARKER_PREFIX not in text or not settings.enabled("NM900", path):
        return []
    info = catalogue.rule("NM900")
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = pattern.search(line)
        if m:
            out.append(Finding(path, lineno, m.start() + 1, "NM900", info.format(code=m.group(1),
                                                                                   text=m.group(2).strip()),
                               end_line=lineno, end_col=len(line.rstrip()) + 1))
    return out
