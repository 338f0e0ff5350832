"""`rewrite --report FILE.md|FILE.json`: the migration report, written to read well as a pull-request description.

The markdown holds, in this order: a summary table (rewrites, markers and other findings per rule, and the files
each touches), the unsafe fixes to review, the items left for a person grouped by rule with their file:line lists
(the markers, then the findings `check` still reports without a marker: check-only notes, unsafe fixes held
back), the dependency pins and the launch scripts and configurations changed, the files skipped, and the next
steps. Every path is relative. The body stays under BODY_LIMIT characters (a pull-request description holds
65,536): where the full lists do not fit, they go to a details file next to it (`<report>.details.md`), which the
body names. More sections (notes on the libraries a project uses, say) go in SECTIONS.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable

from neuron_migrate import catalogue
from neuron_migrate.catalogue import CatalogueError
from neuron_migrate.engine.discover import kind_of
from neuron_migrate.engine.runner import Run
from neuron_migrate.engine.sources import write_atomic
from neuron_migrate.findings import FixSafety

NEXT_STEPS = (
    ("neuron-migrate check .", "to list what is left: the markers above and APIs the native backend lacks"),
    ("neuron-migrate verify", "to run the original and the migrated program on the same inputs and compare them"),
    ("neuron-migrate doctor", "to check the Neuron SDK, driver, runtime and pinned packages on the target machine"),
)
CODE_KINDS = frozenset({"python", "notebook"})
PIN_KINDS = frozenset({"requirements", "pyproject", "lockfile", "setup-cfg", "conda-env", "dockerfile"})
MARKER_CODE = "NM900"
MARKER_TEXT = re.compile(r"\b(NM\d{3}): (.*)$", re.S)  # in an NM900 message: the marker's code and text
BODY_LIMIT = 60_000
DETAILS_SUFFIX = ".details.md"


@dataclass
class Report:
    mode: str  # "in place", "dry run" or "copy in DIR"
    files_checked: int = 0
    changed: list[dict] = field(default_factory=list)  # {"path", "rewrites"}
    per_rule: list[dict] = field(default_factory=list)  # {"code", "name", "count"}: rewrites
    summary: list[dict] = field(default_factory=list)  # {"code", "name", "rewrites", "markers", "other", "files"}
    unsafe: list[dict] = field(default_factory=list)  # {"path", "cell", "line", "code", "message", "link"}
    manual: list[dict] = field(default_factory=list)  # markers, as above
    other: list[dict] = field(default_factory=list)  # findings `check` still reports without a marker, as above
    skipped: list[dict] = field(default_factory=list)  # {"path", "reason"}
    libraries: list[dict] = field(default_factory=list)  # XLA-stack libraries left alone: {"path", "library", ...}
    pins: list[dict] = field(default_factory=list)  # {"path", "removed": [...], "added": [...]}
    configs: list[dict] = field(default_factory=list)  # launch scripts and configurations changed, as pins
    next_steps: list[dict] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2) + "\n"


def build(run: Run, mode: str) -> Report:
    paths = Paths([r.path for r in run.results] + [p for p, _ in run.errors])
    report = Report(mode=mode, files_checked=len(run.results))
    counts: Counter[str] = Counter()
    for result in run.changed:
        report.changed.append({"path": paths(result.path), "rewrites": sum(result.applied.values())})
        counts.update(result.applied)
        if kind_of(result.path) not in CODE_KINDS:
            lines = {"path": paths(result.path), **_changed_lines(result.old_bytes or b"", result.new_bytes)}
            (report.pins if kind_of(result.path) in PIN_KINDS else report.configs).append(lines)
    left = left_for_a_person(run.results)
    report.manual = _unique([_item(f, paths) for f in left.markers])  # findings on one line that one marker stands for
    report.other = [_item(f, paths) for f in left.other]
    report.unsafe = [_item(f, paths) for f in left.unsafe]
    report.per_rule = [{"code": code, "name": _name(code), "count": n} for code, n in sorted(counts.items())]
    report.summary = _summary(report, counts)
    report.skipped = [{"path": paths(p), "reason": why} for p, why in run.errors]
    report.skipped += [{"path": paths(r.path), "reason": r.skipped} for r in run.results if r.skipped]
    report.libraries = [lib.to_json() for lib in run.libraries]
    report.next_steps = [{"command": command, "why": why} for command, why in NEXT_STEPS]
    return report


@dataclass
class Left:
    markers: list = field(default_factory=list)  # the markers the files hold after the run (NM900, or placed now)
    other: list = field(default_factory=list)  # findings reported without a marker (check-only notes, held fixes)
    unsafe: list = field(default_factory=list)  # unsafe fixes made: to review


def left_for_a_person(results) -> Left:
    """What a run leaves for a person, one classification for the rewrite summary and the report (so the two
    agree): markers, the findings reported without one, the unsafe fixes made."""
    left = Left()
    for result in results:
        if result.error:
            continue
        changed = result.changed
        for f in result.findings:
            if f.code == MARKER_CODE or f.status == "marked":
                if f.status == "marked" and not changed:
                    continue  # nothing was written: the marker is not there (a dry run writes nothing either)
                left.markers.append(f)
            elif f.status == "fixed":
                if _safety(f.code) is FixSafety.UNSAFE and changed:
                    left.unsafe.append(f)
            else:
                left.other.append(f)
    seen: set[tuple] = set()
    unique = []
    for f in left.markers:  # findings on one line that one marker stands for count once
        m = MARKER_TEXT.search(f.message) if f.code == MARKER_CODE else None
        key = (f.path, f.cell, f.line, m.group(1) if m else f.code)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    left.markers = unique
    return left


def _unique(items: list[dict]) -> list[dict]:
    seen: set[tuple] = set()
    out = []
    for item in items:
        key = (item["path"], item["cell"], item["line"], item["code"])
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


class Paths:
    """Paths as the report shows them: relative to the current folder when under it, else to the common folder
    of the files processed (a report is read elsewhere: it holds no absolute path)."""

    def __init__(self, paths: list[str]) -> None:
        absolute = [os.path.abspath(p) for p in paths]
        dirs = [os.path.dirname(p) for p in absolute]
        try:
            self.root = os.path.commonpath(dirs) if dirs else os.getcwd()
        except ValueError:  # paths on several drives
            self.root = os.getcwd()

    def __call__(self, path: str) -> str:
        absolute = os.path.abspath(path)
        here = os.getcwd()
        if absolute == here or absolute.startswith(here.rstrip(os.sep) + os.sep):
            return os.path.relpath(absolute, here)
        try:
            return os.path.relpath(absolute, self.root)
        except ValueError:
            return os.path.basename(absolute)


def relative_mode(mode: str) -> str:
    """`copy in DIR` with DIR relative (see Paths)."""
    if mode.startswith("copy in "):
        folder = mode[len("copy in "):]
        return "copy in " + (os.path.relpath(folder) if os.path.isabs(folder) else folder)
    return mode


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


def _safety(code: str) -> FixSafety | None:
    try:
        return catalogue.rule(code).fix
    except CatalogueError:
        return None


def _name(code: str) -> str:
    try:
        return catalogue.rule(code).name
    except CatalogueError:
        return ""


def _link(code: str) -> str:
    try:
        return catalogue.rule(code).link
    except CatalogueError:
        return ""


def _without_explain(message: str) -> str:
    """The marker's text less its closing `; neuron-migrate explain NMxxx` (without a regex: a search for it
    would go back over every run of blanks)."""
    head, sep, code = message.rpartition("neuron-migrate explain NM")
    if not sep or len(code) != 3 or not (code.isascii() and code.isdigit()):
        return message
    head = head.rstrip(" ")
    return head[:-1] if head.endswith(";") else head


def _item(finding, paths: Paths) -> dict:
    """A finding as an item; a marker finding (NM900) as the rule it stands for, with its text."""
    code, message = finding.code, finding.message
    m = MARKER_TEXT.search(message) if code == MARKER_CODE else None
    if m:
        code, message = m.group(1), m.group(2).strip()
        message = _without_explain(message)
        if ", see " in message:  # a marker of earlier releases
            message = message.rpartition(", see ")[0]
    return {"path": paths(finding.path), "cell": finding.cell, "line": finding.line, "code": code,
            "message": message, "link": _link(code)}


def _summary(report: Report, rewrites: Counter) -> list[dict]:
    markers = Counter(m["code"] for m in report.manual)
    other = Counter(m["code"] for m in report.other)
    files: dict[str, set[str]] = defaultdict(set)
    for m in [*report.manual, *report.other, *report.unsafe]:
        files[m["code"]].add(m["path"])
    return [{"code": code, "name": _name(code), "rewrites": rewrites[code], "markers": markers[code],
             "other": other[code], "files": len(files[code]) or None}
            for code in sorted({*rewrites, *markers, *other})]


def _changed_lines(old: bytes, new: bytes | None) -> dict:
    before = old.decode("utf-8", "replace").splitlines()
    after = (new or b"").decode("utf-8", "replace").splitlines()
    return {"removed": [line for line in before if line not in after],
            "added": [line for line in after if line not in before]}


# -- markdown --------------------------------------------------------------------------------------------------
Section = Callable[[Report, "Limits"], list[str]]


@dataclass(frozen=True)
class Limits:
    """How much of each list the body shows (None: all); what is left out is in the details file."""

    files: int | None = None  # files per rule group, and files changed
    details: str = ""  # the details file's name, where a list was cut

    def cut(self, items: list, what: str) -> tuple[list, list[str]]:
        if self.files is None or len(items) <= self.files:
            return items, []
        rest = len(items) - self.files
        return items[:self.files], [f"- ... and {_plural(rest, what)} more: see `{self.details}`"]


def _headline(report: Report, limits: Limits) -> list[str]:
    rewrites = sum(r["count"] for r in report.per_rule)
    files = {m["path"] for m in [*report.manual, *report.other]}
    line = (f"`neuron-migrate rewrite` ({relative_mode(report.mode)}) changed {_plural(len(report.changed), 'file')} "
            f"with {_plural(rewrites, 'rewrite')}, out of {_plural(report.files_checked, 'file')} checked. Left for a "
            f"person: {_plural(len(report.manual), 'marker')} and {_plural(len(report.other), 'other finding')} in "
            f"{_plural(len(files), 'file')}; {_plural(len(report.unsafe), 'unsafe fix', 'unsafe fixes')} to review.")
    if report.manual or report.other:
        line += " `neuron-migrate check` reports them (and exits 1) until they are resolved."
    return [line, ""]


def _summary_table(report: Report, limits: Limits) -> list[str]:
    if not report.summary:
        return []
    out = ["### Summary", "", "| Rule | Name | Rewrites | Markers | Other findings | Files |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in report.summary:
        out.append(f"| {r['code']} | {r['name']} | {r['rewrites'] or ''} | {r['markers'] or ''} | "
                   f"{r['other'] or ''} | {r['files'] or ''} |")
    return out + [""]


def _unsafe(report: Report, limits: Limits) -> list[str]:
    if not report.unsafe:
        return []
    out = ["### Unsafe fixes to review", "",
           "These rewrites were made, but the program may not compute the same thing: read each one.", ""]
    for code, items in _by_rule(report.unsafe):
        try:
            notes = catalogue.rule(code).fix_notes.strip()
        except CatalogueError:
            notes = ""
        out += _group(code, items, f"{_plural(len(items), 'fix', 'fixes')}", notes, limits, box=False)
    return out


def _left(report: Report, limits: Limits) -> list[str]:
    out = []
    if report.manual:
        out += ["### Left for a person: markers", "",
                "Each item is marked in the code with `# TODO(neuron-migrate NMxxx)` (`neuron-migrate explain NMxxx` "
                "says what to do). Lines are those of the files before the rewrite.", ""]
        for code, items in _by_rule(report.manual):
            out += _group(code, items, _plural(len(items), "marker"), _summary_of(code), limits)
    if report.other:
        out += ["### Left for a person: other findings", "",
                "`neuron-migrate check` reports these without a marker: notes on performance and precision, "
                "unsafe fixes held back (`[~]`: `neuron-migrate rewrite --unsafe-fixes` makes them), suppressions that "
                "are not needed.", ""]
        for code, items in _by_rule(report.other):
            out += _group(code, items, _plural(len(items), "finding"), _summary_of(code), limits)
    return out


def _summary_of(code: str) -> str:
    try:
        return catalogue.rule(code).summary.strip()
    except CatalogueError:
        return ""


def _by_rule(items: list[dict]) -> list[tuple[str, list[dict]]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for item in items:
        groups[item["code"]].append(item)
    return sorted(groups.items())


def _group(code: str, items: list[dict], count: str, about: str, limits: Limits, box: bool = True) -> list[str]:
    """One rule: a heading, what it is about, one example message, and the file:line list (one line a file)."""
    by_file: dict[str, list[dict]] = defaultdict(list)
    for item in items:
        by_file[item["path"]].append(item)
    link = items[0]["link"]
    out = [f"#### {code} {_name(code)}: {count} in {_plural(len(by_file), 'file')}", ""]
    if about:
        out += [about + (f" ([docs]({link}))" if link else ""), ""]
    example = items[0]
    out += [f"For example, `{_where(example)}`: {example['message']}", ""]
    files, more = limits.cut(list(by_file.items()), "file")
    check = "- [ ] " if box else "- "
    for path, found in files:
        lines = ", ".join(_line(i) for i in found)
        out.append(f"{check}`{path}`: {'line' if len(found) == 1 else 'lines'} {lines}")
    return out + more + [""]


def _line(item: dict) -> str:
    return f"cell {item['cell']}:{item['line']}" if item.get("cell") is not None else str(item["line"])


def _files_changed(report: Report, limits: Limits) -> list[str]:
    if not report.changed:
        return []
    files, more = limits.cut(report.changed, "file")
    return ["### Files changed", "", *[f"- `{c['path']}` ({_plural(c['rewrites'], 'rewrite')})" for c in files],
            *more, ""]


def _line_changes(title: str, key: str) -> Section:
    def section(report: Report, limits: Limits) -> list[str]:
        changes = getattr(report, key)
        if not changes:
            return []
        out = [title, ""]
        for change in changes:
            out.append(f"- `{change['path']}`")
            out += [f"  - removed {_code(line.strip())}" for line in change["removed"]]
            out += [f"  - added {_code(line.strip())}" for line in change["added"]]
        return out + [""]
    return section


def _code(text: str) -> str:
    """`text` as inline code, with as many backticks around it as it needs."""
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _skipped(report: Report, limits: Limits) -> list[str]:
    if not report.skipped:
        return []
    return ["### Files skipped", "", *[f"- `{s['path']}`: {s['reason']}" for s in report.skipped], ""]


def _libraries(report: Report, limits: Limits) -> list[str]:
    if not report.libraries:
        return []
    return ["### Libraries left alone", "",
            *[f"- `{lib['path']}`: {lib['message']}" for lib in report.libraries], ""]


def _next_steps(report: Report, limits: Limits) -> list[str]:
    return ["### Next steps", "",
            *[f"{i}. Run `{step['command']}` {step['why']}." for i, step in enumerate(report.next_steps, start=1)]]


SECTIONS: list[Section] = [
    _headline, _summary_table, _unsafe, _left,
    _line_changes("### Dependency pins changed", "pins"),
    _line_changes("### Launch scripts and configurations changed", "configs"),
    _files_changed, _skipped, _libraries, _next_steps,
]
TITLE = "## Migrate to the native PyTorch `neuron` device"


def markdown(report: Report, limits: Limits = Limits()) -> str:
    out = [TITLE, ""]
    for section in SECTIONS:
        out += section(report, limits)
    return "\n".join(out) + "\n"


def details(report: Report) -> str:
    """Every item with its own message: the lists the body could not hold."""
    out = ["## Migration report: every item", ""]
    for title, items in (("Unsafe fixes to review", report.unsafe), ("Markers", report.manual),
                         ("Other findings", report.other)):
        if items:
            out += [f"### {title}", ""]
            out += [f"- [ ] `{_where(m)}` {m['code']}: {m['message']}" for m in items]
            out.append("")
    out += _files_changed(report, Limits())
    return "\n".join(out) + "\n"


def render(report: Report, details_name: str) -> tuple[str, str | None]:
    """The markdown body, and the details file's text where the body could not hold every list."""
    body = markdown(report)
    if len(body) <= BODY_LIMIT:
        return body, None
    for files in (20, 10, 5, 3, 1, 0):
        body = markdown(report, Limits(files=files, details=details_name))
        if len(body) <= BODY_LIMIT:
            break
    return body, details(report)


def _where(item: dict) -> str:
    cell = f"cell {item['cell']}:" if item.get("cell") is not None else ""
    return f"{item['path']}:{cell}{item['line']}"


def write(path: str, report: Report, fmt: str | None = None) -> None:
    """`fmt` "json" or "markdown"; None: from the file name (`.json`, else markdown). A markdown body too long
    for a pull-request description leaves its full lists to a details file beside it, named in the body."""
    fmt = fmt or ("json" if path.lower().endswith(".json") else "markdown")
    if fmt == "json":
        write_atomic(path, report.to_json().encode("utf-8"))
        return
    stem = path[:-3] if path.lower().endswith(".md") else path
    details_path = stem + DETAILS_SUFFIX
    body, more = render(report, os.path.basename(details_path))
    write_atomic(path, body.encode("utf-8"))
    if more is not None:
        write_atomic(details_path, more.encode("utf-8"))
