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


def _region(f: Finding) -> dict:
    region = {"startLine": f.line, "startColumn": f.col}
    if f.end_line is not None and f.end_col is not None:
        region.update(endLine=f.end_line, endColumn=f.end_col)
    return region


def file_fix(result: FileResult, info: RuleInfo) -> dict | None:
    """The whole rewrite of one file as a SARIF fix: one replacement per changed run of lines."""
    if result.old_bytes is None or not result.changed:
        return None
    old = result.old_bytes.decode("utf-8", "replace").splitlines(keepends=True)
    new = result.new_bytes.decode("utf-8", "replace").splitlines(keepends=True)
    offsets = [0]
    for line in old:
        offsets.append(offsets[-1] + len(line))
    replacements = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        replacements.append({"deletedRegion": {"charOffset": offsets[i1], "charLength": offsets[i2] - offsets[i1]},
                             "insertedContent": {"text": "".join(new[j1:j2])}})
    title = info.fix_title or f"Apply the fix for {info.code}"
    return {"description": {"text": f"{title} (with every other rewrite `neuron-migrate rewrite` makes in this file)"},
            "artifactChanges": [{"artifactLocation": {"uri": artifact_uri(result.path)},
                                 "replacements": replacements}]}


def sarif_report(findings: list[Finding], errors: list[tuple[str, str]],
                 rewrites: dict[str, FileResult] | None = None, libraries=()) -> str:
    """One SARIF run: every rule of the catalogue, a result per finding, fixes for fixable findings; an
    XLA-stack library left alone is a tool notification of level `note` (not a result: nothing to fix there)."""
    rules = list(catalogue.catalogue().values())
    index = {info.code: i for i, info in enumerate(rules)}
    rewrites = rewrites or {}
    results = []
    for f in findings:
        info = catalogue.rule(f.code)
        location = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(f.path)}, "region": _region(f)}}
        result = {"ruleId": f.code, "ruleIndex": index[f.code], "level": level(info),
                  "message": {"text": f.message}, "locations": [location]}
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
    return json.dumps(log, indent=2)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(findings: list[Finding], errors: list[tuple[str, str]], libraries=()) -> str:
    """GitHub Actions workflow commands: one `::error`/`::warning` line per finding and per failed file, one
    `::notice` per XLA-stack library left alone."""
    lines = []
    for f in findings:
        info = catalogue.rule(f.code)
        props = [f"file={_escape_property(f.path)}", f"line={f.line}", f"col={f.col}"]
        if f.end_line is not None and f.end_col is not None:
            props += [f"endLine={f.end_line}", f"endColumn={f.end_col}"]
        props.append(f"title={_escape_property(f'{f.code} {info.name}')}")
        lines.append(f"::{level(info)} {','.join(props)}::{_escape_data(f'{f.message} ({info.link})')}")
    for path, message in errors:
        lines.append(f"::error file={_escape_property(path)},title=neuron-migrate::{_escape_data(message)}")
    for lib in libraries:
        lines.append(f"::notice file={_escape_property(lib.root)},title=neuron-migrate::{_escape_data(lib.message)}")
    return "\n".join(lines)
