"""Notebooks through the real CLI: cells as one module, IPython lines untouched, JSON layout kept."""

from __future__ import annotations

import difflib
import json

from neuron_migrate.files.notebook import _logical_starts
from tests.helpers import cli


def _notebook(cells: list[tuple[str, str]], language: str = "python") -> str:
    """nbformat's own layout: indent 1, keys in order, raw UTF-8, a final newline."""
    out = []
    for n, (kind, source) in enumerate(cells, start=1):
        cell = {"cell_type": kind, "metadata": {"tags": ["train"]}, "source": source.splitlines(keepends=True)}
        if kind == "code":
            cell = {"cell_type": "code", "execution_count": n, "id": f"c{n}", "metadata": {},
                    "outputs": [{"name": "stdout", "output_type": "stream", "text": ["ok ✓\n"]}],
                    "source": source.splitlines(keepends=True)}
        out.append(cell)
    nb = {"cells": out, "metadata": {"kernelspec": {"display_name": "Python 3", "language": language,
                                                     "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


TRAIN = [
    ("markdown", "# Fine-tune on Trainium — step 1\n"),
    ("code", "%pip install torch-neuronx==2.8.0\n!nvidia-smi\nimport torch\nimport torch_xla.core.xla_model as xm"),
    ("code", "model = torch.nn.Linear(4, 4)"),
    ("code", "%%time\ndevice = xm.xla_device()\nfor step in range(3):\n    loss = model(torch.ones(4)).sum()\n"
             "    xm.mark_step()\n    !echo done\nfiles = !ls\nx = (1 +\n     2)"),
    ("code", "%%bash\necho xm.mark_step()"),
]


def test_rewrite_changes_only_source_lines_and_keeps_ipython_lines(tmp_path):
    path = tmp_path / "train.ipynb"
    path.write_text(_notebook(TRAIN), encoding="utf-8")
    old = path.read_text(encoding="utf-8")
    proc = cli("rewrite", "--no-cache", str(path))
    assert proc.returncode == 0, proc.stderr
    new = path.read_text(encoding="utf-8")
    assert new.endswith("}\n")
    changed = [line for line in difflib.ndiff(old.splitlines(), new.splitlines()) if line[:1] in "+-"]
    assert changed and all(line[2:].lstrip().startswith('"') for line in changed), changed
    cells = json.loads(new)["cells"]
    assert "".join(cells[3]["source"]) == (
        "%%time\ndevice = torch.device(\"neuron\")\nfor step in range(3):\n    loss = model(torch.ones(4)).sum()\n"
        "    !echo done\nfiles = !ls\nx = (1 +\n     2)")
    assert "".join(cells[1]["source"]) == (  # the install line is pinned, the shell line kept
        '%pip install "torch-neuronx==2.14.3.1.*" torch==2.14.0 "neuronx-cc==2.*" nki '
        "--extra-index-url https://pip.repos.neuron.amazonaws.com\n!nvidia-smi\nimport torch")
    assert "".join(cells[4]["source"]) == "%%bash\necho xm.mark_step()"
    before = json.loads(old)
    for i in (0, 2, 4):
        assert cells[i] == before["cells"][i]
    assert cells[3]["outputs"] == before["cells"][3]["outputs"]
    again = cli("rewrite", "--no-cache", str(path))
    assert again.returncode == 0 and path.read_text(encoding="utf-8") == new


def test_check_points_at_cell_and_line(tmp_path):
    path = tmp_path / "train.ipynb"
    path.write_text(_notebook(TRAIN), encoding="utf-8")
    proc = cli("check", "--no-cache", str(path))
    assert proc.returncode == 1
    assert f"{path}:cell 4:2:10: NM101" in proc.stdout
    assert f"{path}:cell 4:5:5: NM103" in proc.stdout
    assert f"{path}:cell 2:1:14: NM602 [*] `torch-neuronx==2.8.0` is the legacy XLA build" in proc.stdout
    assert "cell 5" not in proc.stdout  # the %%bash cell is not Python


def test_look_alike_and_clean_notebooks_stay_byte_identical(tmp_path):
    local_xm = [("code", "import numpy as np\nxm = np.zeros(3)"), ("code", "xm.mark_step = None\n%timeit xm.sum()")]
    other_language = [("code", "library(torch_xla)\nxm.mark_step()")]
    for name, cells, language in (("local.ipynb", local_xm, "python"), ("r.ipynb", other_language, "R")):
        path = tmp_path / name
        path.write_text(_notebook(cells, language), encoding="utf-8")
        data = path.read_bytes()
        proc = cli("rewrite", "--no-cache", str(path))
        assert proc.returncode == 0, proc.stderr
        assert path.read_bytes() == data


def test_broken_notebook_is_reported_and_left_alone(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [', encoding="utf-8")
    bad_cell = tmp_path / "syntax.ipynb"
    bad_cell.write_text(_notebook([("code", "import torch_xla"), ("code", "x = (\n")]), encoding="utf-8")
    before = {p: p.read_bytes() for p in (broken, bad_cell)}
    proc = cli("rewrite", "--no-cache", str(tmp_path))
    assert proc.returncode == 2
    assert f"{broken}: error: not a valid notebook" in proc.stderr
    assert f"{bad_cell}: error: cell 2, line" in proc.stderr
    assert all(p.read_bytes() == data for p, data in before.items())


def test_magic_detection_follows_logical_lines():
    lines = ["x = (a\n", "% b)\n", "s = '''\n", "!not a shell line\n", "'''\n", "!ls\n", "y = 1 + \\\n", "%2\n"]
    assert _logical_starts(lines) == [True, False, True, False, False, True, True, False]
