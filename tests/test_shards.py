"""`--shard K/N` and `neuron-migrate merge`, through the command line: N shards cover the tree once, a file keeps
its shard when others are added, and the merged JSON or SARIF report is the report of one run over the tree."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from neuron_migrate.cli.merge import finding_key, notification_key, result_key
from tests.helpers import FIXTURES, cli

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())

TRAIN = """\
import os

import torch
import torch_xla.core.xla_model as xm


def train_step(model, batch, optimizer):
    loss = model(batch.to(xm.xla_device()))
    loss.backward()
    xm.optimizer_step(optimizer)
    xm.mark_step()
    return loss
"""


def _order(items: list[dict]) -> list[dict]:
    """merge's documented order of errors, warnings and library notes: path, then message."""
    return sorted(items, key=lambda item: (item.get("path", ""), item.get("message", "")))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A checkout (a `.git` folder at its top) holding a copy of the fixtures, and the unsharded reports."""
    root = tmp_path_factory.mktemp("checkout")
    (root / ".git").mkdir()
    shutil.copytree(FIXTURES, root / "fixtures")
    reports = {}
    for fmt in ("json", "sarif"):
        result = cli("check", "--no-cache", "--format", fmt, "-o", f"all.{fmt}", "fixtures", cwd=root)
        assert result.returncode == 1, result.stderr
        reports[fmt] = json.loads((root / f"all.{fmt}").read_text())
    return root, reports


def _shards(root: Path, count: int, fmt: str, *args: str) -> list[Path]:
    files = []
    for k in range(1, count + 1):
        out = root / f"shard-{k}-of-{count}.{fmt}"
        result = cli("check", "--no-cache", "--shard", f"{k}/{count}", "--format", fmt, "-o", out.name, *args,
                     "fixtures", cwd=root)
        assert result.returncode in (0, 1), result.stderr
        files.append(out)
    return files


def _union_equals_unsharded(root: Path, whole: dict, count: int) -> None:
    shards = [json.loads(p.read_text()) for p in _shards(root, count, "json")]
    assert [s["shard"] for s in shards] == [{"index": k, "count": count} for k in range(1, count + 1)]
    files = [{f["path"] for f in s["findings"]} for s in shards]
    assert sum(len(f) for f in files) == len(set().union(*files)), "a file was reported by two shards"
    union = sorted((f for s in shards for f in s["findings"]), key=finding_key)
    assert union == whole["findings"]
    # the one note per XLA-stack library: in exactly one shard, with the count of all its files
    assert _order([lib for s in shards for lib in s["libraries"]]) == _order(whole["libraries"])
    merged = cli("merge", "-o", "merged.json", *(f"shard-{k}-of-{count}.json" for k in range(1, count + 1)),
                 cwd=root)
    assert merged.returncode == 1, merged.stderr  # the fixtures have findings: the merge fails like check
    expected = dict(whole, errors=_order(whole["errors"]), libraries=_order(whole["libraries"]))
    assert json.loads((root / "merged.json").read_text()) == expected


def test_three_shards_are_the_unsharded_run_and_merge_into_it(checkout):
    root, reports = checkout
    assert len(reports["json"]["libraries"]) >= 3
    _union_equals_unsharded(root, reports["json"], 3)


@pytest.mark.slow
@pytest.mark.parametrize("count", [1, 2, 7])
def test_n_shards_are_the_unsharded_run_and_merge_into_it(checkout, count):
    root, reports = checkout
    _union_equals_unsharded(root, reports["json"], count)


def test_sarif_shards_upload_apart_and_merge_into_the_unsharded_log(checkout):
    root, reports = checkout
    shards = _shards(root, 3, "sarif")
    logs = [json.loads(p.read_text()) for p in shards]
    for log in logs:
        jsonschema.validate(log, SCHEMA)
    # GitHub's route of several uploads: each shard's run has its own category
    ids = [log["runs"][0]["automationDetails"]["id"] for log in logs]
    assert ids == [f"neuron-migrate/shard-{k}-of-3/" for k in (1, 2, 3)]
    merged = cli("merge", "-o", "merged.sarif", *(p.name for p in shards), cwd=root)
    assert merged.returncode == 1, merged.stderr
    log = json.loads((root / "merged.sarif").read_text())
    jsonschema.validate(log, SCHEMA)
    run = log["runs"][0]
    assert len(log["runs"]) == 1 and "automationDetails" not in run
    rules = run["tool"]["driver"]["rules"]
    assert len({r["id"] for r in rules}) == len(rules) == len(logs[0]["runs"][0]["tool"]["driver"]["rules"])
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])
    whole = reports["sarif"]
    assert whole["runs"][0]["results"] == sorted(whole["runs"][0]["results"], key=result_key)  # check's own order
    whole["runs"][0]["invocations"][0]["toolExecutionNotifications"].sort(key=notification_key)
    assert log == whole


def test_sarif_merge_keeps_one_run_per_tool(tmp_path):
    """Logs with a second tool (another linter's run in the same file) keep it apart; rules are per tool."""
    other = {"tool": {"driver": {"name": "other-linter", "version": "1", "rules": [{"id": "X1"}]}},
             "results": [{"ruleId": "X1", "ruleIndex": 0, "message": {"text": "x"},
                          "locations": [{"physicalLocation": {"artifactLocation": {"uri": "b.py"}}}]}]}
    (tmp_path / "a.py").write_text(TRAIN)
    assert cli("check", "--format", "sarif", "-o", "ours.sarif", "a.py", cwd=tmp_path).returncode == 1
    ours = json.loads((tmp_path / "ours.sarif").read_text())
    (tmp_path / "theirs.sarif").write_text(json.dumps({"version": "2.1.0", "runs": [other]}))
    result = cli("merge", "ours.sarif", "theirs.sarif", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    log = json.loads(result.stdout)
    jsonschema.validate(log, SCHEMA)
    assert [run["tool"]["driver"]["name"] for run in log["runs"]] == ["neuron-migrate", "other-linter"]
    assert log["runs"][0]["results"] == ours["runs"][0]["results"]
    assert log["runs"][1]["results"] == other["results"]


def _tree(root: Path, names: list[str]) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TRAIN)


def _owners(root: Path, count: int, *paths: str) -> dict[str, int]:
    """file -> the shard that reports it, from `check --format concise` of every shard (each file has findings)."""
    owner: dict[str, int] = {}
    for k in range(1, count + 1):
        result = cli("check", "--no-cache", "--format", "concise", "--shard", f"{k}/{count}", *paths, cwd=root)
        assert result.returncode in (0, 1), result.stderr
        for line in result.stdout.splitlines()[:-1]:  # the summary comes last
            path = Path(line.split(":", 1)[0]).as_posix()
            assert owner.setdefault(path, k) == k, f"{path} reported by shards {owner[path]} and {k}"
    return owner


NAMES = [f"pkg{i % 4}/sub{i % 3}/train_{i}.py" for i in range(24)] + ["train.py", "tools/launch_0.py"]


def test_adding_files_moves_no_other_file_between_shards(tmp_path):
    (tmp_path / ".git").mkdir()
    _tree(tmp_path, NAMES)
    before = _owners(tmp_path, 3, ".")
    assert set(before) == set(NAMES), "every file is in one shard"
    assert set(before.values()) == {1, 2, 3}
    added = [f"pkg{i % 5}/new/added_{i}.py" for i in range(10)] + ["pkg0/sub0/a_first.py"]
    _tree(tmp_path, added)
    after = _owners(tmp_path, 3, ".")
    assert set(after) == set(NAMES) | set(added)
    assert {name: after[name] for name in NAMES} == before


def test_a_files_shard_does_not_depend_on_how_its_folder_is_named(tmp_path):
    """Keys are relative to the project root: `check pkg0` from the top, `check .` inside pkg0 and an absolute
    path put a file in the same shard."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    _tree(tmp_path, NAMES)
    top = _owners(tmp_path, 3, ".")
    inside = _owners(tmp_path / "pkg0", 3, ".")
    absolute = _owners(tmp_path / "pkg1", 3, str(tmp_path / "pkg0"))
    assert {f"pkg0/{path}": k for path, k in inside.items()} == {p: k for p, k in top.items() if p.startswith("pkg0/")}
    assert {Path(path).relative_to(tmp_path).as_posix(): k for path, k in absolute.items()} == \
        {p: k for p, k in top.items() if p.startswith("pkg0/")}


def test_a_missing_path_is_reported_by_one_shard(tmp_path):
    _tree(tmp_path, NAMES)
    codes = []
    for k in (1, 2):
        result = cli("check", "--no-cache", "--format", "json", "--shard", f"{k}/2", ".", "gone.py", cwd=tmp_path)
        codes.append(result.returncode)
        errors = json.loads(result.stdout)["errors"]
        assert errors in ([], [{"path": "gone.py", "message": "no such file or directory"}])
    assert sorted(codes) == [1, 2], "one shard reports the missing path (exit 2), the other its findings"


def test_statistics_of_shards_add_up(tmp_path):
    _tree(tmp_path, NAMES)
    whole = cli("check", "--no-cache", "--statistics", "--format", "json", ".", cwd=tmp_path)
    for k in (1, 2):
        part = cli("check", "--no-cache", "--statistics", "--format", "json", "--shard", f"{k}/2", "-o",
                   f"s{k}.json", ".", cwd=tmp_path)
        assert part.returncode == 1, part.stderr
    merged = cli("merge", "s1.json", "s2.json", cwd=tmp_path)
    assert merged.returncode == 1, merged.stderr
    assert json.loads(merged.stdout) == json.loads(whole.stdout)


def test_rewrite_and_pin_shards_cover_the_tree_once(tmp_path):
    """rewrite --diff and pin --diff of the shards: each changed file in one shard, the same diff as unsharded."""
    shutil.copytree(FIXTURES / "NM103-mark-step", tmp_path / "code" / "steps")
    shutil.copytree(FIXTURES / "NM101-xla-device-call", tmp_path / "code" / "devices")
    shutil.copytree(FIXTURES / "pin", tmp_path / "deps")

    def diffs(*args: str) -> dict[str, str]:
        result = cli(*args, cwd=tmp_path)
        assert result.returncode in (0, 1), result.stderr
        chunks = re.split(r"(?m)^(?=--- )", result.stdout)
        return {chunk.splitlines()[0]: chunk for chunk in chunks if chunk.strip()}

    for command, folder in (("rewrite", "code"), ("pin", "deps")):
        extra = ("--no-cache",) if command == "rewrite" else ()
        whole = diffs(command, "--diff", *extra, folder)
        assert len(whole) >= 4
        parts = [diffs(command, "--diff", *extra, "--shard", f"{k}/3", folder) for k in (1, 2, 3)]
        assert sum(len(p) for p in parts) == len(whole)
        assert {name: chunk for p in parts for name, chunk in p.items()} == whole


@pytest.mark.parametrize("command, value, message", [
    ("check", "0/3", "between 1 and N (3)"),
    ("check", "4/3", "between 1 and N (3)"),
    ("check", "1/0", "N must be 1 or more"),
    ("check", "2", "is not K/N"),
    ("check", "-1/3", "is not K/N"),
    ("rewrite", "3/2", "between 1 and N (2)"),
    ("pin", "a/b", "is not K/N"),
])
def test_shard_must_be_k_of_n(tmp_path, command, value, message):
    result = cli(command, "--shard", value, ".", cwd=tmp_path)
    assert result.returncode == 2
    assert "--shard" in result.stderr and message in result.stderr


def test_shard_refuses_standard_input_and_output_dir(tmp_path):
    result = cli("check", "--shard", "1/2", "-", input=TRAIN, cwd=tmp_path)
    assert result.returncode == 2 and "standard input is one source" in result.stderr
    (tmp_path / "src").mkdir()
    result = cli("rewrite", "--shard", "1/2", "--output-dir", "out", "src", cwd=tmp_path)
    assert result.returncode == 2 and "--output-dir writes a copy of the whole tree" in result.stderr


def test_merge_refuses_reports_that_do_not_make_one_run(tmp_path):
    _tree(tmp_path, NAMES)
    for k in (1, 2, 3):
        assert cli("check", "--format", "json", "--shard", f"{k}/3", "-o", f"s{k}.json", ".",
                   cwd=tmp_path).returncode == 1
    assert cli("check", "--format", "json", "--shard", "1/2", "-o", "t1.json", ".", cwd=tmp_path).returncode == 1
    assert cli("check", "--format", "sarif", "--shard", "3/3", "-o", "s3.sarif", ".", cwd=tmp_path).returncode == 1
    assert cli("check", "--format", "json", "-o", "all.json", ".", cwd=tmp_path).returncode == 1
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    (tmp_path / "broken.json").write_text('{"findings": [')
    cases = {
        ("s1.json", "s2.json"): "shard 3/3 missing",
        ("s1.json", "s2.json", "s3.json", "s2.json"): "both shard 2/3",
        ("s1.json", "s2.json", "t1.json"): "different numbers of shards",
        ("s1.json", "s2.json", "s3.sarif"): "not of one format",
        ("s1.json", "s2.json", "s3.json", "all.json"): "not written with --shard",
        ("all.json", "all.json"): "the reports overlap",
        ("all.json", "notes.json"): "not a report of `neuron-migrate check",
        ("all.json", "broken.json"): "broken.json: not a JSON file",
        ("all.json", "absent.json"): "absent.json: cannot read it",
    }
    for files, message in cases.items():
        result = cli("merge", *files, cwd=tmp_path)
        assert result.returncode == 2, (files, result.stdout)
        assert message in result.stderr, (files, result.stderr)
        assert not result.stdout
    ok = cli("merge", "--exit-zero", "s3.json", "s1.json", "s2.json", cwd=tmp_path)
    assert ok.returncode == 0
    assert json.loads(ok.stdout) == json.loads((tmp_path / "all.json").read_text())
