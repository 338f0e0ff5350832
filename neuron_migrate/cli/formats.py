"""Findings for CI: SARIF 2.1.0 (GitHub code scanning and other viewers) and GitHub workflow annotations."""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from urllib.parse import quote

from neuron_migrate import __version__, catalogue
from neuron_migrate.catalogue import RuleInfo
from neuron_migrate.findings import FileResult, Finding, FixSafety

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
HOME = "https://github.com/neuron-migrate/neuron-migrate"


def level(info: RuleInfo) -> str:
    """`error` for code that will not run as written on the native backend, `warning` for the rest."""
    return "error" if info.fix is FixSafety.MANUAL and not info.check_only else "warning"


def artifact_uri(path: str) -> str:
    """A relative URI from the working folder where the file lies below it, else a file:// URI."""
    full = os.path.abspath(path)
    rel = os.path.relpath(full)
    if not rel.startswith(".."):
        return quote(Path(rel).as_posix())
    return Path(full).as_uri()


def _rule_descriptor(info: RuleInfo) -> dict:
    return {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary.strip()},
        "fullDescription": {"text": " ".join(info.why.split())},
        "help": {"text": catalogue.explain(info), "markdown": catalogue.explain(info)},
        "helpUri": info.link,
        "defaultConfiguration": {"level": level(info)},
        "properties": {"tags": ["neuron-migrate", info.group, f"fix:{info.fix.value}"], "precision": "high"},
    }


def _region(f: Finding, sources: Sources) -> dict:
    if f.cell is not None:  # the cell's columns are not the JSON file's: lines only
        start = sources.file_line(f) or 1
        end = sources.file_line(f, f.end_line) if f.end_line is not None else None
        return {"startLine": start, **({"endLine": end} if end is not None and end >= start else {})}
    region = {"startLine": f.line, "startColumn": f.col}
    if f.end_line is not None and f.end_col is not None:
        region.update(endLine=f.end_line, endColumn=f.end_col)
    return region


def _in_cell(f: Finding) -> str:
    return f"cell {f.cell}, line {f.line}: " if f.cell is not None else ""


class Sources:
    """The bytes of the files findings point into, read once each: for code frames and for the notebook cells'
    lines in the `.ipynb` file. `known` holds bytes already in hand (standard input, files a rewrite read)."""

    def __init__(self, known: dict[str, bytes] | None = None) -> None:
        self._bytes: dict[str, bytes | None] = dict(known or {})
        self._cells: dict[str, dict[int, list[int]]] = {}

    def data(self, path: str) -> bytes | None:
        if path not in self._bytes:
            try:
                with open(path, "rb") as fh:
                    self._bytes[path] = fh.read()
            except OSError:
                self._bytes[path] = None
        return self._bytes[path]

    def cell_lines(self, path: str) -> dict[int, list[int]]:
        if path not in self._cells:
            from neuron_migrate.files.notebook import cell_file_lines

            data = self.data(path)
            self._cells[path] = cell_file_lines(data) if data is not None else {}
        return self._cells[path]

    def file_line(self, f: Finding, line: int | None = None) -> int | None:
        """The line of the file itself: for a notebook finding, the `.ipynb` line its cell line is written on."""
        line = f.line if line is None else line
        if f.cell is None:
            return line
        rows = self.cell_lines(f.path).get(f.cell)
        if not rows:
            return None
        return rows[min(max(line, 1), len(rows)) - 1]


def _hunks(result: FileResult):
    """(old lines, new lines, offsets of the old lines, opcodes that change something) of one rewritten file."""
    old = result.old_bytes.decode("utf-8", "replace").splitlines(keepends=True)
    new = result.new_bytes.decode("utf-8", "replace").splitlines(keepends=True)
    offsets = [0]
    for line in old:
        offsets.append(offsets[-1] + len(line))
    ops = [op for op in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes() if op[0] != "equal"]
    return old, new, offsets, ops


def file_fix(result: FileResult, info: RuleInfo) -> dict | None:
    """The whole rewrite of one file as a SARIF fix: one replacement per changed run of lines."""
    if result.old_bytes is None or not result.changed:
        return None
    _old, new, offsets, ops = _hunks(result)
    replacements = [{"deletedRegion": {"charOffset": offsets[i1], "charLength": offsets[i2] - offsets[i1]},
                     "insertedContent": {"text": "".join(new[j1:j2])}} for _tag, i1, i2, j1, j2 in ops]
    title = info.fix_title or f"Apply the fix for {info.code}"
    return {"description": {"text": f"{title} (with every other rewrite `neuron-migrate rewrite` makes in this file)"},
            "artifactChanges": [{"artifactLocation": {"uri": artifact_uri(result.path)},
                                 "replacements": replacements}]}


def json_fix(result: FileResult, info: RuleInfo) -> dict | None:
    """The fix of a finding for JSON: its safety, what it does and the edits, in ruff's shape (rows and columns
    1-based, the end excluded). The edits are the file's whole rewrite: a finding's fix can need an import that
    another finding's fix also uses, so `neuron-migrate rewrite` applies them together."""
    if result.old_bytes is None or not result.changed:
        return None
    _old, new, _offsets, ops = _hunks(result)
    edits = [{"content": "".join(new[j1:j2]), "location": {"row": i1 + 1, "column": 1},
              "end_location": {"row": i2 + 1, "column": 1}} for _tag, i1, i2, j1, j2 in ops]
    return {"applicability": info.fix.value, "message": info.fix_title or f"Apply the fix for {info.code}",
            "scope": "file", "edits": edits}


def json_report(findings: list[Finding], errors: list[tuple[str, str]],
                rewrites: dict[str, FileResult] | None = None, sources: Sources | None = None,
                warnings: list[tuple[str, str]] = (), libraries=(), shard=None) -> str:
    """Findings with their rule's name, severity and link, and the fix where `rewrites` holds one; the XLA-stack
    libraries left alone; the shard (`--shard K/N`) the report covers, for `neuron-migrate merge`."""
    rewrites = rewrites or {}
    sources = sources or Sources()
    out = []
    for f in findings:
        info = catalogue.rule(f.code)
        item = f.to_json()
        item.update(name=info.name, severity=level(info), url=info.link)
        if f.cell is not None:
            item["file_line"] = sources.file_line(f)
        item["fix"] = json_fix(rewrites[f.path], info) if f.fixable and f.path in rewrites else None
        out.append(item)
    report = {"findings": out, "errors": [{"path": p, "message": m} for p, m in errors],
              "libraries": [lib.to_json() for lib in libraries]}
    if warnings:
        report["warnings"] = [{"path": p, "message": m} for p, m in warnings]
    if shard is not None:
        report["shard"] = {"index": shard.index, "count": shard.count}
    return json.dumps(report, indent=2)


def sarif_report(findings: list[Finding], errors: list[tuple[str, str]],
                 rewrites: dict[str, FileResult] | None = None, sources: Sources | None = None,
                 libraries=(), shard=None) -> str:
    """One SARIF run: every rule of the catalogue, a result per finding, fixes for fixable findings; an
    XLA-stack library left alone is a tool notification of level `note` (not a result: nothing to fix there).
    A shard's run has its own `automationDetails.id` (GitHub's category: each shard can be uploaded on its own)
    and says which shard it is in its properties (`neuron-migrate merge` checks the shards it joins)."""
    rules = list(catalogue.catalogue().values())
    index = {info.code: i for i, info in enumerate(rules)}
    rewrites = rewrites or {}
    sources = sources or Sources()
    results = []
    for f in findings:
        info = catalogue.rule(f.code)
        location = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(f.path)},
                                         "region": _region(f, sources)}}
        result = {"ruleId": f.code, "ruleIndex": index[f.code], "level": level(info),
                  "message": {"text": _in_cell(f) + f.message}, "locations": [location]}
        if f.cell is not None:
            result["properties"] = {"cell": f.cell, "cellLine": f.line, "cellColumn": f.col}
        fix = file_fix(rewrites[f.path], info) if f.fixable and f.path in rewrites else None
        if fix is not None:
            result["fixes"] = [fix]
        results.append(result)
    notifications = [{"level": "error", "message": {"text": message},
                      "locations": [{"physicalLocation": {"artifactLocation": {"uri": artifact_uri(path)}}}]}
                     for path, message in errors]
    notifications += [{"level": "note", "message": {"text": lib.message},
                       "locations": [{"physicalLocation": {"artifactLocation": {"uri": artifact_uri(lib.root)}}}]}
                      for lib in libraries]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "neuron-migrate", "version": __version__, "semanticVersion": __version__,
                                "informationUri": HOME, "rules": [_rule_descriptor(i) for i in rules]}},
            "invocations": [{"executionSuccessful": not errors, "toolExecutionNotifications": notifications}],
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
    if shard is not None:
        log["runs"][0]["automationDetails"] = {"id": sarif_category(shard)}
        log["runs"][0]["properties"] = {"shard": {"index": shard.index, "count": shard.count}}
    return json.dumps(log, indent=2)


def sarif_category(shard) -> str:
    """`neuron-migrate/shard-2-of-4/`: the run's automation id, which GitHub code scanning takes as the category
    (the part up to the last `/`)."""
    return f"neuron-migrate/shard-{shard.slug}/"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(findings: list[Finding], errors: list[tuple[str, str]],
                       sources: Sources | None = None, libraries=()) -> str:
    """GitHub Actions workflow commands: one `::error`/`::warning` line per finding and per failed file, one
    `::notice` per XLA-stack library left alone; a notebook finding is placed on the `.ipynb` line its cell line
    is written on, and names the cell."""
    sources = sources or Sources()
    lines = []
    for f in findings:
        info = catalogue.rule(f.code)
        props = [f"file={_escape_property(f.path)}"]
        if f.cell is not None:
            props.append(f"line={sources.file_line(f) or 1}")
        else:
            props += [f"line={f.line}", f"col={f.col}"]
            if f.end_line is not None and f.end_col is not None:
                props += [f"endLine={f.end_line}", f"endColumn={f.end_col}"]
        props.append(f"title={_escape_property(f'{f.code} {info.name}')}")
        text = f"{_in_cell(f)}{f.message} ({info.link})"
        lines.append(f"::{level(info)} {','.join(props)}::{_escape_data(text)}")
    for path, message in errors:
        lines.append(f"::error file={_escape_property(path)},title=neuron-migrate::{_escape_data(message)}")
    for lib in libraries:
        lines.append(f"::notice file={_escape_property(lib.root)},title=neuron-migrate::{_escape_data(lib.message)}")
    return "\n".join(lines)
