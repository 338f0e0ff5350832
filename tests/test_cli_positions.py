"""Every finding has an end, whatever the file kind: `check --format json` gives `end_line` / `end_col` and SARIF
a complete region (`endLine` / `endColumn`) for requirements, pyproject, setup files, environment.yml,
Dockerfiles, shell scripts (environment settings, launch lines, pip installs), accelerate configs and notebooks,
all through the real command line. The region is the text the finding is about (the requirement, the setting
with its value, the image), and what `check` prints is what JSON carries.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import cli

FILES = {
    "requirements.txt": "torch-xla==2.1.0  # pinned for the XLA stack\ntorch\n",
    "pyproject.toml": '[project]\nname = "demo"\nrequires-python = ">=3.8,<3.10"\n'
                      'dependencies = ["torch-xla==2.1.0", "torch"]\n',
    "setup.cfg": "[options]\npython_requires = >=3.8,<3.10\ninstall_requires =\n    torch-xla==2.1.0\n    torch\n",
    "setup.py": 'from setuptools import setup\n\nsetup(name="demo", python_requires=">=3.8,<3.10",\n'
                '      install_requires=["torch-xla==2.1.0", "torch"])\n',
    "environment.yml": "name: demo\ndependencies:\n  - python=3.8\n  - pip:\n    - torch-xla==2.1.0\n    - torch\n",
    "Dockerfile": "FROM python:3.8-slim\nENV XLA_USE_BF16=1\nRUN pip install torch-xla==2.1.0 torch\n",
    # a marker goes above line 2 in the rewrite: the pip install below is still reported at its own line 3
    "run.sh": "#!/bin/bash\nexport XLA_USE_BF16=1\npip install torch-xla==2.1.0\nexport NEURON_RT_LOG_LEVEL=INFO\n",
    "launch.sh": "#!/bin/bash\npython train.py --epochs 3\n",
    "train.py": "import torch_xla.distributed.xla_multiprocessing as xmp\n\n\ndef main(index):\n    print(index)\n\n\n"
                "if __name__ == '__main__':\n    xmp.spawn(main, args=())\n",
    "configs/accelerate_config.yaml": "compute_environment: LOCAL_MACHINE\ndistributed_type: XLA\n"
                                      "mixed_precision: bf16\nnum_processes: 2\n# trn1 instance, neuron cores\n",
    "marked.sh": "#!/bin/bash\n# TODO(neuron-migrate NM403): `XLA_USE_BF16` is ignored: use autocast; "
                 "neuron-migrate explain NM403\nexport XLA_USE_BF16=1\n",
}
NOTEBOOK = {"cells": [
    {"cell_type": "markdown", "metadata": {}, "source": ["# Training on Trainium\n"]},
    {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
     "source": ["!pip install torch-xla==2.1.0\n", "import torch_xla.core.xla_model as xm\n",
                "device = xm.xla_device()\n"]},
], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}

# (path, code, line): the text the finding's region covers, in the file (or, for a notebook, the cell)
REGIONS = [
    ("requirements.txt", "NM601", 1, "torch-xla==2.1.0"),
    ("requirements.txt", "NM602", 2, "torch"),
    ("pyproject.toml", "NM607", 3, '">=3.8,<3.10"'),
    ("pyproject.toml", "NM601", 4, '"torch-xla==2.1.0"'),
    ("setup.cfg", "NM607", 2, ">=3.8,<3.10"),
    ("setup.cfg", "NM601", 4, "torch-xla==2.1.0"),
    ("setup.py", "NM607", 3, '">=3.8,<3.10"'),
    ("setup.py", "NM601", 4, '"torch-xla==2.1.0"'),
    ("environment.yml", "NM607", 3, "python=3.8"),
    ("environment.yml", "NM601", 5, "torch-xla==2.1.0"),
    ("Dockerfile", "NM608", 1, "python:3.8-slim"),
    ("Dockerfile", "NM403", 2, "XLA_USE_BF16=1"),
    ("Dockerfile", "NM601", 3, "torch-xla==2.1.0"),
    ("run.sh", "NM403", 2, "XLA_USE_BF16=1"),
    ("run.sh", "NM601", 3, "torch-xla==2.1.0"),
    ("run.sh", "NM604", 3, "pip install torch-xla==2.1.0"),
    ("launch.sh", "NM240", 2, "python train.py"),
    ("configs/accelerate_config.yaml", "NM511", 2, "XLA"),
    ("marked.sh", "NM900", 2, "# TODO(neuron-migrate NM403): `XLA_USE_BF16` is ignored: use autocast; "
                              "neuron-migrate explain NM403"),
    ("nb.ipynb", "NM601", 1, "torch-xla==2.1.0"),
    ("nb.ipynb", "NM101", 3, "xm.xla_device()"),
]


CONCISE = re.compile(r"^(?P<path>[^:\s]+):(?:cell (?P<cell>\d+):)?(?P<line>\d+):(?P<col>\d+): (?P<code>NM\d+) ")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kinds")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "nb.ipynb").write_text(json.dumps(NOTEBOOK, indent=1))
    return root


@pytest.fixture(scope="module")
def findings(project) -> list[dict]:
    proc = cli("check", "--format", "json", "--no-cache", "--unsafe-fixes", ".", cwd=project)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert not report["errors"]
    return report["findings"]


def _text(project: Path, finding: dict) -> str:
    """The text from the finding's start to its end, in its file (or its notebook cell)."""
    if finding["path"].endswith(".ipynb"):
        cell = NOTEBOOK["cells"][finding["cell"] - 1]
        lines = "".join(cell["source"]).splitlines(keepends=True)
    else:
        lines = (project / finding["path"]).read_text().splitlines(keepends=True)
    line, col, end_line, end_col = finding["line"], finding["col"], finding["end_line"], finding["end_col"]
    if line == end_line:
        return lines[line - 1][col - 1:end_col - 1]
    return lines[line - 1][col - 1:] + "".join(lines[line:end_line - 1]) + lines[end_line - 1][:end_col - 1]


def test_every_finding_of_every_kind_has_an_end(findings):
    kinds = {Path(f["path"]).name for f in findings}
    assert kinds >= {"requirements.txt", "pyproject.toml", "setup.cfg", "setup.py", "environment.yml", "Dockerfile",
                     "run.sh", "launch.sh", "accelerate_config.yaml", "marked.sh", "nb.ipynb"}, kinds
    missing = [f for f in findings if f.get("end_line") is None or f.get("end_col") is None]
    assert not missing, missing
    backwards = [f for f in findings if (f["end_line"], f["end_col"]) <= (f["line"], f["col"])]
    assert not backwards, backwards


@pytest.mark.parametrize("path, code, line, text", REGIONS, ids=[f"{p}-{c}" for p, c, _, _ in REGIONS])
def test_the_region_is_the_text_the_finding_is_about(project, findings, path, code, line, text):
    matching = [f for f in findings if f["path"] == path and f["code"] == code and f["line"] == line]
    assert matching, f"no {code} at {path}:{line}: {[(f['path'], f['code'], f['line']) for f in findings]}"
    assert _text(project, matching[0]) == text


def test_json_reports_what_check_prints(project, findings):
    """JSON takes its findings from a rewrite pass: a handler that runs after one that inserted a marker still
    places its findings in the file as it is, and the marker just written is not an NM900."""
    proc = cli("check", "--output-format", "concise", "--no-cache", "--unsafe-fixes", ".", cwd=project)
    printed = sorted((m["path"], int(m["cell"] or 0), int(m["line"]), int(m["col"]), m["code"])
                     for m in map(CONCISE.match, proc.stdout.splitlines()) if m)
    carried = sorted((f["path"], f.get("cell", 0), f["line"], f["col"], f["code"]) for f in findings)
    assert printed == carried
    assert [f for f in findings if f["code"] == "NM900"] == [f for f in findings if f["path"] == "marked.sh"
                                                            and f["code"] == "NM900"]


def test_sarif_regions_are_complete_and_notebook_lines_are_the_files(project):
    proc = cli("check", "--format", "sarif", "--no-cache", ".", cwd=project)
    assert proc.returncode == 1, proc.stderr
    results = json.loads(proc.stdout)["runs"][0]["results"]
    regions = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                r["locations"][0]["physicalLocation"]["region"]) for r in results]
    assert len(regions) > 30  # one NM603 per install line since the missing packages are named together
    # a notebook's region has lines only: the cell's columns are not those of the JSON file
    incomplete = [(uri, region) for uri, region in regions if not (
        {"startLine", "endLine"} if uri.endswith(".ipynb") else {"startLine", "startColumn", "endLine", "endColumn"}
    ) <= set(region)]
    assert not incomplete, incomplete
    # the region's lines are the .ipynb file's: the lines of the JSON strings that hold the cell's lines
    notebook = (project / "nb.ipynb").read_text().splitlines()
    held = {i for i, line in enumerate(notebook, start=1) if "torch-xla" in line or "xla_model" in line
            or "xla_device" in line}
    lines = {(region["startLine"], region["endLine"]) for uri, region in regions if uri.endswith("nb.ipynb")}
    assert lines == {(i, i) for i in held}, (lines, held)


def test_every_kind_carries_severity_link_and_the_fix_rewrite_makes(project, findings, tmp_path):
    """JSON findings of the other file kinds carry what Python findings carry, and a fixable finding's edits
    give the file `rewrite` writes (a copy with --output-dir)."""
    from neuron_migrate import catalogue
    from neuron_migrate.cli.formats import level

    out = cli("rewrite", "--no-cache", "--unsafe-fixes", "--output-dir", str(tmp_path / "copy"), ".", cwd=project)
    assert out.returncode in (0, 1), out.stderr
    checked = set()
    for item in findings:
        info = catalogue.rule(item["code"])
        assert (item["name"], item["severity"], item["url"]) == (info.name, level(info), info.link)
        if not item["fixable"] or item["path"].endswith(".ipynb"):
            continue
        assert item["fix"]["applicability"] == info.fix.value, item
        lines = (project / item["path"]).read_text().splitlines(keepends=True)
        for edit in sorted(item["fix"]["edits"], key=lambda e: e["location"]["row"], reverse=True):
            assert edit["location"]["column"] == edit["end_location"]["column"] == 1
            lines[edit["location"]["row"] - 1:edit["end_location"]["row"] - 1] = [edit["content"]]
        assert "".join(lines) == (tmp_path / "copy" / item["path"]).read_text(), item["path"]
        checked.add(item["path"])
    assert checked >= {"requirements.txt", "pyproject.toml", "setup.cfg", "environment.yml", "Dockerfile",
                       "run.sh", "launch.sh", "configs/accelerate_config.yaml"}, checked
