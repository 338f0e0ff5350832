"""check --format sarif|github and --exit-zero."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema

from tests.helpers import FIXTURES, cli

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())


def test_sarif_of_the_fixtures_is_valid(tmp_path):
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    result = cli("check", "--format", "sarif", "--unsafe-fixes", "fixtures", cwd=tmp_path)  # NM320's fix is unsafe
    assert result.returncode == 1, result.stderr
    log = json.loads(result.stdout)
    jsonschema.validate(log, SCHEMA)
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    results = run["results"]
    assert {r["ruleId"] for r in results} >= {"NM301", "NM401", "NM403", "NM501", "NM320"}
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        assert not r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("/")
    assert all(rule["help"]["text"] and rule["helpUri"].startswith("https://") for rule in rules)
    fixed = [r for r in results if r["ruleId"] == "NM320"][0]
    change = fixed["fixes"][0]["artifactChanges"][0]
    source = (tmp_path / change["artifactLocation"]["uri"]).read_text()
    expected = (tmp_path / change["artifactLocation"]["uri"].replace(".py", ".expected.py")).read_text()
    assert _apply(source, change["replacements"]) == expected
    assert not [r for r in results if r["ruleId"] == "NM401" and "fixes" in r]


def _apply(text: str, replacements: list[dict]) -> str:
    for rep in sorted(replacements, key=lambda r: -r["deletedRegion"]["charOffset"]):
        start = rep["deletedRegion"]["charOffset"]
        text = text[:start] + rep["insertedContent"]["text"] + text[start + rep["deletedRegion"]["charLength"]:]
    return text


def test_github_annotations_and_exit_zero(tmp_path):
    (tmp_path / "a.py").write_text("import torch\nx = torch.zeros(3, dtype=torch.float64)\nfrom torch import func\n"
                                   "func.vmap(f)\n")
    result = cli("check", "--format", "github", "--exit-zero", "a.py", cwd=tmp_path)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("::warning file=a.py,line=2,col=26,endLine=2,endColumn=39,title=NM401 float64::")
    assert lines[1].startswith("::error file=a.py,line=4,col=1,")
    assert cli("check", "a.py", cwd=tmp_path).returncode == 1


def test_the_rewrite_summary_the_report_and_the_files_agree(tmp_path):
    """One count: the markers the summary lists are those the report counts and the files hold (one per marker,
    old ones in files the run leaves alone included); findings reported without a marker are listed too."""
    (tmp_path / "old.py").write_text(
        "import torch\n\n# TODO(neuron-migrate NM301): use a dense tensor; neuron-migrate explain NM301\n"
        "x = torch.zeros(3).to_sparse()\n")
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch_xla.core.xla_model as xm\n\n\n"
        "def step(x):\n    y = x.double()\n    xm.mark_step()\n"
        "    return xm.all_to_all(x, 1, 0, 2), y\n")
    report = tmp_path / "report.json"
    out = cli("rewrite", "--no-cache", "--report", str(report), str(tmp_path))
    held = sum(p.read_text().count("# TODO(neuron-migrate ") for p in tmp_path.glob("*.py"))
    data = json.loads(report.read_text())
    summary = out.stdout + out.stderr
    assert held == 2 and len(data["manual"]) == held, (summary, data["manual"])
    assert f"{held} items left for a person" in summary
    assert len(data["other"]) == 1 and "1 finding reported without a marker" in summary and "NM401" in summary
