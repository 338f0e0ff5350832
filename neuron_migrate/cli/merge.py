"""`neuron-migrate merge`: one report from the JSON or SARIF reports of several runs (the shards of a CI matrix).

The merged report is the report one run over all the files would print:

- JSON (`check --format json`): the findings of every report, in `check`'s order (path, cell, line, column, code,
  message); the errors, warnings and XLA-stack library notes, ordered by path then message. The `shard` field
  goes.
- `check --statistics --format json`: the counts per code added up, in `check`'s order (most first).
- SARIF: one run per tool (by driver name): the rules deduplicated by id in the order first met, every result
  with its `ruleIndex` into them, ordered by file, cell, line, column, rule and message; one invocation, successful
  when every one was, its notifications ordered by level (errors first), file and text. The shards' own
  `automationDetails` and shard properties go.

Reports written with `--shard K/N` are checked: one N for all, each K once, none missing. Any two reports may not
report on the same file (a shard given twice, or two runs over overlapping folders).
"""

from __future__ import annotations

import json
import sys
from typing import NoReturn

import click

from neuron_migrate.cli.commands import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, Output

LEVELS = {"error": 0, "warning": 1, "note": 2, "none": 3}


class MergeError(Exception):
    """Reports that cannot be merged; the message names the file and the reason."""


@click.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--output-file", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the merged report to this file instead of standard output.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when the merged report has findings.")
def merge(reports, output_file, exit_zero) -> None:
    """Merge the JSON or SARIF reports of several `check` runs, such as the shards of a CI matrix, into one.

    Takes the files `check --format json`, `check --statistics --format json` or `check --format sarif` wrote (one
    format for all) and prints the report one run over all their files would print. The reports of `--shard K/N`
    runs must be every shard of one N, each once. Exit 0 when the merged report is clean, 1 when it has findings
    (0 with --exit-zero), 2 when a report holds an error or the reports cannot be merged.
    """
    try:
        logs = [(path, _load(path)) for path in reports]
        kinds = {path: _kind(path, log) for path, log in logs}
        if len(set(kinds.values())) > 1:
            listed = ", ".join(f"{path} ({kind})" for path, kind in kinds.items())
            raise MergeError(f"the reports are not of one format: {listed}; merge the JSON and the SARIF reports "
                             "apart")
        kind = next(iter(kinds.values()))
        merged, findings, errors = MERGERS[kind](logs)
    except MergeError as exc:
        _fail(str(exc))
    out = Output(output_file, "never")
    out.echo(json.dumps(merged, indent=2))
    out.close()
    sys.exit(EXIT_ERROR if errors else EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN)


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _load(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise MergeError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MergeError(f"{path}: not a JSON file ({exc}); give the files `check --format json` or "
                         "`--format sarif` wrote") from None


def _kind(path: str, log) -> str:
    if isinstance(log, dict) and isinstance(log.get("runs"), list) and log.get("version") == "2.1.0":
        return "sarif"
    if isinstance(log, dict) and isinstance(log.get("findings"), list):
        return "json"
    if isinstance(log, list) and all(isinstance(row, dict) and {"code", "count"} <= row.keys() for row in log):
        return "statistics"
    raise MergeError(f"{path}: not a report of `neuron-migrate check --format json` or `--format sarif` (nor of "
                     "`--statistics --format json`)")


# -- shards and overlaps -------------------------------------------------------------------------------------------
def _check_shards(shards: list[tuple[str, dict | None]]) -> None:
    """Every shard of one N, each once, when any report is a shard's."""
    given = [(path, s) for path, s in shards if s is not None]
    if not given:
        return
    bare = [path for path, s in shards if s is None]
    if bare:
        raise MergeError(f"{', '.join(bare)}: not written with --shard, unlike {given[0][0]}; merge the shards of "
                         "one run only")
    counts = {s["count"] for _path, s in given}
    if len(counts) > 1:
        listed = ", ".join(f"{path} ({s['index']}/{s['count']})" for path, s in given)
        raise MergeError(f"the reports come from different numbers of shards: {listed}")
    count = counts.pop()
    met: dict[int, str] = {}
    for path, s in given:
        if s["index"] in met:
            raise MergeError(f"{met[s['index']]} and {path} are both shard {s['index']}/{count}")
        met[s["index"]] = path
    missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in met]
    if missing:
        raise MergeError(f"shard {', '.join(missing)} missing: the merged report would not cover the tree; give "
                         f"the report of every one of the {count} shards")


def _check_disjoint(files: list[tuple[str, set[str]]]) -> None:
    owner: dict[str, str] = {}
    for report, paths in files:
        for path in sorted(paths):
            if path in owner:
                raise MergeError(f"{owner[path]} and {report} both report on {path}: the reports overlap (a shard "
                                 "given twice, or runs over overlapping folders)")
            owner[path] = report


def _shard_of(path: str, value) -> dict | None:
    if value is None:
        return None
    if not (isinstance(value, dict) and isinstance(value.get("index"), int) and isinstance(value.get("count"), int)
            and 1 <= value["index"] <= value["count"]):
        raise MergeError(f"{path}: its shard is not {{index: K, count: N}} with 1 <= K <= N: {value!r}")
    return value


# -- check --format json ------------------------------------------------------------------------------------------
def finding_key(f: dict) -> tuple:
    """check's order (Finding.sort_key) for a finding as JSON."""
    return (f["path"], f.get("cell") or 0, f["line"], f["col"], f["code"], f["message"])


def _by_path(item: dict) -> tuple:
    return (item.get("path", ""), item.get("message", ""))


def merge_json(logs: list[tuple[str, dict]]) -> tuple[dict, int, int]:
    _check_shards([(path, _shard_of(path, log.get("shard"))) for path, log in logs])
    _check_disjoint([(path, {f["path"] for f in log["findings"]}) for path, log in logs])
    findings = sorted((f for _path, log in logs for f in log["findings"]), key=finding_key)
    errors = sorted((e for _path, log in logs for e in log.get("errors", ())), key=_by_path)
    warnings = sorted((w for _path, log in logs for w in log.get("warnings", ())), key=_by_path)
    libraries = sorted((lib for _path, log in logs for lib in log.get("libraries", ())), key=_by_path)
    merged = {"findings": findings, "errors": errors, "libraries": libraries}
    if warnings:
        merged["warnings"] = warnings
    return merged, len(findings), len(errors)


# -- check --statistics --format json -----------------------------------------------------------------------------
def merge_statistics(logs: list[tuple[str, list]]) -> tuple[list, int, int]:
    rows: dict[str, dict] = {}
    for _path, log in logs:
        for row in log:
            into = rows.setdefault(row["code"], {"code": row["code"], "name": row.get("name"), "count": 0,
                                                 "fixable": 0})
            into["count"] += row["count"]
            into["fixable"] += row.get("fixable", 0)
    merged = sorted(rows.values(), key=lambda row: (-row["count"], row["code"]))
    return merged, sum(row["count"] for row in merged), 0


# -- check --format sarif -----------------------------------------------------------------------------------------
def _uri(location: dict) -> str:
    return location.get("physicalLocation", {}).get("artifactLocation", {}).get("uri", "")


def result_key(result: dict) -> tuple:
    """The order of check's SARIF results: file, cell, line, column (in the cell for a notebook), rule, message."""
    location = (result.get("locations") or [{}])[0]
    region = location.get("physicalLocation", {}).get("region", {})
    props = result.get("properties", {})
    return (_uri(location), props.get("cell") or 0, props.get("cellLine", region.get("startLine", 0)),
            props.get("cellColumn", region.get("startColumn", 0)), result.get("ruleId", ""),
            result.get("message", {}).get("text", ""))


def notification_key(note: dict) -> tuple:
    location = (note.get("locations") or [{}])[0]
    return (LEVELS.get(note.get("level", "warning"), 1), _uri(location), note.get("message", {}).get("text", ""))


def merge_sarif(logs: list[tuple[str, dict]]) -> tuple[dict, int, int]:
    tools: dict[str, list[tuple[str, dict]]] = {}
    for path, log in logs:
        for run in log["runs"]:
            driver = run.get("tool", {}).get("driver", {})
            if "name" not in driver:
                raise MergeError(f"{path}: a run without `tool.driver.name`")
            tools.setdefault(driver["name"], []).append((path, run))
    runs = [_merge_runs(name, runs) for name, runs in tools.items()]
    first = logs[0][1]
    merged = {"$schema": first.get("$schema"), "version": "2.1.0", "runs": runs}
    if merged["$schema"] is None:
        del merged["$schema"]
    findings = sum(len(run["results"]) for run in runs)
    errors = sum(1 for run in runs for inv in run.get("invocations", ()) if not inv.get("executionSuccessful", True))
    return merged, findings, errors


def _merge_runs(name: str, runs: list[tuple[str, dict]]) -> dict:
    versions = {run["tool"]["driver"].get("version") for _path, run in runs}
    if len(versions) > 1:
        listed = ", ".join(f"{path} ({run['tool']['driver'].get('version')})" for path, run in runs)
        raise MergeError(f"the runs of {name} come from different versions: {listed}; run every shard with one "
                         "version")
    _check_shards([(path, _shard_of(path, run.get("properties", {}).get("shard"))) for path, run in runs])
    _check_disjoint([(path, {_uri((r.get("locations") or [{}])[0]) for r in run.get("results", ())})
                     for path, run in runs])
    rules: list[dict] = []
    index: dict[str, int] = {}
    for _path, run in runs:
        for rule in run["tool"]["driver"].get("rules", ()):
            if rule["id"] not in index:
                index[rule["id"]] = len(rules)
                rules.append(rule)
    results = []
    for path, run in runs:
        for result in run.get("results", ()):
            result = dict(result)
            if "ruleIndex" in result or result.get("ruleId") in index:
                if result.get("ruleId") not in index:
                    raise MergeError(f"{path}: a result of rule {result.get('ruleId')!r}, which its run does not "
                                     "describe")
                result["ruleIndex"] = index[result["ruleId"]]
            results.append(result)
    results.sort(key=result_key)
    notes = sorted((note for _path, run in runs for inv in run.get("invocations", ())
                    for note in inv.get("toolExecutionNotifications", ())), key=notification_key)
    successful = all(inv.get("executionSuccessful", True) for _path, run in runs for inv in run.get("invocations", ()))
    first = runs[0][1]
    merged = {key: value for key, value in first.items()
              if key not in ("tool", "invocations", "results", "automationDetails", "properties")}
    driver = dict(first["tool"]["driver"], rules=rules)
    merged = {"tool": {**first["tool"], "driver": driver},
              "invocations": [{"executionSuccessful": successful, "toolExecutionNotifications": notes}],
              **merged, "results": results}
    properties = {k: v for k, v in first.get("properties", {}).items() if k != "shard"}
    if properties:
        merged["properties"] = properties
    return merged


MERGERS = {"json": merge_json, "statistics": merge_statistics, "sarif": merge_sarif}
