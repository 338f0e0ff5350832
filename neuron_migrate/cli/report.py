"""`rewrite --report FILE.md|FILE.json`: the migration report, written to read well as a pull-request description.

It lists the files changed, the rewrites per rule, every item left for a person (file:line, message, link),
the files skipped and why, the dependency pins changed, and the next steps.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

from neuron_migrate import catalogue
from neuron_migrate.catalogue import CatalogueError
from neuron_migrate.engine.discover import kind_of
from neuron_migrate.cli.output import plural
from neuron_migrate.engine.runner import Run
from neuron_migrate.engine.sources import write_atomic

NEXT_STEPS = (
    ("neuron-migrate check .", "to list what is left: the markers above and APIs the native backend lacks"),
    ("neuron-migrate verify", "to run the original and the migrated program on the same inputs and compare them"),
    ("neuron-migrate doctor", "to check the Neuron SDK, driver, runtime and pinned packages on the target machine"),
)
CODE_KINDS = frozenset({"python", "notebook"})
MARKER_TEXT = re.compile(r"\b(NM\d{3}): (.*)$", re.S)  # in an NM900 message: the marker's code and text


@dataclass
class Report:
    mode: str  # "in place", "dry run" or "copy in DIR"
    files_checked: int = 0
    changed: list[dict] = field(default_factory=list)  # {"path", "rewrites"}
    per_rule: list[dict] = field(default_factory=list)  # {"code", "name", "count"}
    manual: list[dict] = field(default_factory=list)  # {"path", "cell", "line", "code", "message", "link"}
    skipped: list[dict] = field(default_factory=list)  # {"path", "reason"}
    libraries: list[dict] = field(default_factory=list)  # XLA-stack libraries left alone: {"path", "library", ...}
    pins: list[dict] = field(default_factory=list)  # {"path", "removed": [...], "added": [...]}
    next_steps: list[dict] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2) + "\n"


def build(run: Run, mode: str) -> Report:
    report = Report(mode=mode, files_checked=len(run.results))
    counts: Counter[str] = Counter()
    for result in run.changed:
        report.changed.append({"path": result.path, "rewrites": sum(result.applied.values())})
        counts.update(result.applied)
        if kind_of(result.path) not in CODE_KINDS:
            report.pins.append({"path": result.path, **_changed_lines(result.old_bytes or b"", result.new_bytes)})
        report.manual.extend(_manual_item(m) for m in result.manual)
    report.per_rule = [{"code": code, "name": _name(code), "count": n} for code, n in sorted(counts.items())]
    report.skipped = [{"path": p, "reason": why} for p, why in run.errors]
    report.skipped += [{"path": r.path, "reason": r.skipped} for r in run.results if r.skipped]
    report.libraries = [lib.to_json() for lib in run.libraries]
    report.next_steps = [{"command": command, "why": why} for command, why in NEXT_STEPS]
    return report


def _name(code: str) -> str:
    try:
        return catalogue.rule(code).name
    except CatalogueError:
        return ""


def _manual_item(marker) -> dict:
    """A marker finding (NM900) as the rule it stands for, its message and its link."""
    code, message, link = marker.code, marker.message, ""
    m = MARKER_TEXT.search(marker.message)
    if m:
        code, message = m.group(1), m.group(2).strip()
        if ", see " in message:
            message, _, link = message.rpartition(", see ")
    if not link:
        try:
            link = catalogue.rule(code).link
        except CatalogueError:
            link = ""
    return {"path": marker.path, "cell": marker.cell, "line": marker.line, "code": code, "message": message,
            "link": link}


def _changed_lines(old: bytes, new: bytes | None) -> dict:
    before = old.decode("utf-8", "replace").splitlines()
    after = (new or b"").decode("utf-8", "replace").splitlines()
    return {"removed": [line for line in before if line not in after],
            "added": [line for line in after if line not in before]}


def markdown(report: Report) -> str:
    out = ["## Migrate to the native PyTorch `neuron` device", ""]
    rewrites = sum(r["count"] for r in report.per_rule)
    out.append(f"`neuron-migrate rewrite` ({report.mode}) changed {plural(len(report.changed), 'file')} "
               f"with {plural(rewrites, 'rewrite')}, out of {plural(report.files_checked, 'file')} checked; "
               f"{plural(len(report.manual), 'item')} left for a person.")
    out.append("")
    if report.per_rule:
        out += ["### Rewrites per rule", "", "| Rule | Name | Rewrites |", "| --- | --- | ---: |"]
        out += [f"| {r['code']} | {r['name']} | {r['count']} |" for r in report.per_rule]
        out.append("")
    if report.changed:
        out += ["### Files changed", ""]
        out += [f"- `{c['path']}` ({plural(c['rewrites'], 'rewrite')})" for c in report.changed]
        out.append("")
    if report.manual:
        out += ["### Left for a person", "",
                "Each item is marked in the code with `# TODO(neuron-migrate NMxxx)`; `neuron-migrate check` "
                "reports the markers until they are resolved. Lines are those of the files before the rewrite.", ""]
        out += [f"- [ ] `{_where(m)}` {m['code']}: {m['message']}" + (f" ([docs]({m['link']}))" if m["link"] else "")
                for m in report.manual]
        out.append("")
    if report.pins:
        out += ["### Dependency pins changed", ""]
        for pin in report.pins:
            out.append(f"- `{pin['path']}`")
            out += [f"  - removed `{line.strip()}`" for line in pin["removed"]]
            out += [f"  - added `{line.strip()}`" for line in pin["added"]]
        out.append("")
    if report.skipped:
        out += ["### Files skipped", ""]
        out += [f"- `{s['path']}`: {s['reason']}" for s in report.skipped]
        out.append("")
    if report.libraries:
        out += ["### XLA-stack libraries left alone", ""]
        out += [f"- `{lib['path']}`: {lib['message']}" for lib in report.libraries]
        out.append("")
    out += ["### Next steps", ""]
    out += [f"{i}. Run `{step['command']}` {step['why']}." for i, step in enumerate(report.next_steps, start=1)]
    return "\n".join(out) + "\n"


def _where(item: dict) -> str:
    cell = f"cell {item['cell']}:" if item.get("cell") is not None else ""
    return f"{item['path']}:{cell}{item['line']}"


def write(path: str, report: Report, fmt: str | None = None) -> None:
    """`fmt` "json" or "markdown"; None: from the file name (`.json`, else markdown)."""
    fmt = fmt or ("json" if path.lower().endswith(".json") else "markdown")
    text = report.to_json() if fmt == "json" else markdown(report)
    write_atomic(path, text.encode("utf-8"))
