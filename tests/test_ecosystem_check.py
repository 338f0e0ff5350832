"""The ecosystem check (bench/ecosystem.py) on small corpora made here: the real tool on a legacy repository, and a
stand-in tool whose faults are known, so that every goal the script measures is seen to fail when it should."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from bench import ecosystem

LEGACY = textwrap.dedent("""\
    import torch
    import torch_xla.core.xla_model as xm


    def train(model, loader, optimizer):
        device = xm.xla_device()
        model = model.to(device)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            xm.mark_step()
""")
PLAIN = "import torch\n\n\ndef f(x):\n    return torch.relu(x)\n"

# A stand-in for `python -m neuron_migrate`: `rewrite` edits every .py file by the word it holds, `check` reports
# one finding per file that still says LEGACY. Each word is one fault the check must see.
FAKE_TOOL = textwrap.dedent('''\
    import json, pathlib, sys
    command = sys.argv[1]
    root = pathlib.Path(".")
    if command == "check":
        found = [{"path": p.as_posix(), "line": 1} for p in sorted(root.rglob("*.py")) if "LEGACY" in p.read_text()]
        print(json.dumps({"findings": found, "errors": []}))
        sys.exit(1 if found else 0)
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        new = text
        if "UNUSED" in text and "import json" not in text:
            new = "import json\\n" + text            # an unused import: F401 introduced
        if "BROKEN" in text and "def broken(" not in text:
            new = text + "def broken(:\\n"           # no longer compiles
        if "AGAIN" in text:
            new = text + "# once more\\n"            # every run adds a line
        if "LONG" in text and "far longer" not in text:  # only a repository selecting E501 sees it
            new = text + "# this comment is far longer than thirty characters\\n"
        if "TORCHXLA" in text and "import torch_xla" not in text:
            new = text + "import torch_xla  # noqa: F401\\n"
        if new != text:
            path.write_text(new)
    for path in sorted(root.rglob("*.ipynb")):
        notebook = json.loads(path.read_text())
        for cell in notebook["cells"]:
            source = "".join(cell["source"])
            if "BROKEN" in source and "(:" not in source:
                cell["source"] = [source + "\\nx = (:"]
                path.write_text(json.dumps(notebook))
''')


def _notebook(*cells: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                  "source": cell.splitlines(keepends=True)} for cell in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def fake_tool(tmp_path) -> list[str]:
    script = tmp_path / "fake_tool.py"
    script.write_text(FAKE_TOOL)
    return [sys.executable, str(script)]


def test_the_real_tool_on_a_legacy_repository(tmp_path):
    corpus = _write(tmp_path / "corpus", {
        "org__train/train.py": LEGACY,
        "org__train/util.py": PLAIN,
        "org__train/README.md": "# train\n",
        "org__other/model.py": PLAIN,
    })
    result = ecosystem.run(corpus, ecosystem.tool_command(), jobs=1)
    train, other = result.repos["org__train"], result.repos["org__other"]
    assert train.files_changed == 1 and train.rewrites >= 3  # the device, the mark_step, the import
    assert train.still_import_torch_xla == 0 and train.markers == 0
    assert (train.second_run_changes, train.compile_errors, train.lint_introduced) == (0, 0, 0)
    assert other.files_changed == 0
    assert list(result.outputs) == ["org__train/train.py"]
    assert b"torch_xla" not in result.outputs["org__train/train.py"]
    assert not result.failed()
    assert (corpus / "org__train/train.py").read_text() == LEGACY  # the corpus itself is never written


def test_each_fault_of_the_tool_is_counted_where_it_happens(tmp_path, fake_tool):
    corpus = _write(tmp_path / "corpus", {
        "a__lint/x.py": "# UNUSED\nimport os\nprint(os.sep)\n",
        "a__lint/same.py": "# UNUSED\nimport json\n",  # unused before and after: nothing introduced
        "b__compile/y.py": "# BROKEN\n",
        "b__compile/broken_before.py": "# BROKEN\ndef f(:\n",  # did not compile before: not the tool's fault
        "c__again/z.py": "# AGAIN\n",
        "d__torchxla/w.py": "# TORCHXLA LEGACY\n",
        "e__clean/v.py": "x = 1\n",
    })
    result = ecosystem.run(corpus, fake_tool)
    repos = result.repos
    assert repos["a__lint"].lint_introduced == 1 and repos["a__lint"].files_changed == 1
    assert any("x.py: ruff F401" in p for p in repos["a__lint"].problems)
    assert repos["b__compile"].compile_errors == 1 and repos["b__compile"].files_changed == 2
    assert repos["c__again"].second_run_changes == 1
    assert repos["d__torchxla"].still_import_torch_xla == 1 and repos["d__torchxla"].findings_after == 1
    assert repos["e__clean"].files_changed == 0
    assert sum(r.second_run_changes for r in repos.values()) == 1  # the idempotent faults change nothing again
    assert result.failed()


def test_a_repository_with_its_own_ruff_settings_is_linted_with_them(tmp_path, fake_tool):
    corpus = _write(tmp_path / "corpus", {
        "own__settings/ruff.toml": 'line-length = 30\n[lint]\nselect = ["E501"]\n',
        "own__settings/x.py": "# LONG\n",
        "default__settings/x.py": "# LONG\n",  # E501 is not in the default set
    })
    result = ecosystem.run(corpus, fake_tool)
    assert result.repos["own__settings"].lint_introduced == 1
    assert result.repos["default__settings"].lint_introduced == 0


def test_notebook_cells_compile_as_ipython_would_run_them(tmp_path):
    before = _notebook("!pip install torch\nimport torch", "%%bash\necho hi", "x = 1")
    broken = _notebook("!pip install torch\nimport torch", "%%bash\necho hi", "x = (:")
    assert ecosystem.compile_errors("n.ipynb", before.encode(), before.encode()) == []
    assert ecosystem.compile_errors("n.ipynb", before.encode(), broken.encode()) == ["n.ipynb (code cell 3)"]
    # a cell that was no Python before (RST text) is not the tool's fault
    rst = _notebook(".. note::\n   text", "x = 1")
    assert ecosystem.compile_errors("n.ipynb", rst.encode(), rst.encode()) == []


def test_notebook_faults_are_counted(tmp_path, fake_tool):
    corpus = _write(tmp_path / "corpus", {"nb__repo/n.ipynb": _notebook("!pip install x\nimport os", "BROKEN = 1")})
    result = ecosystem.run(corpus, fake_tool)
    assert result.repos["nb__repo"].compile_errors == 1


def test_main_exit_codes_and_json(tmp_path, fake_tool, monkeypatch, capsys):
    assert ecosystem.main(["--corpus", str(tmp_path / "missing")]) == 2
    assert "no ecosystem corpus" in capsys.readouterr().err
    monkeypatch.setattr(ecosystem, "tool_command", lambda python=sys.executable: fake_tool)
    clean = _write(tmp_path / "clean", {"r__one/x.py": "# TORCHXLA\n"})
    assert ecosystem.main(["--corpus", str(clean), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["failed"] is False and figures["total"]["files_changed"] == 1
    assert figures["repositories"]["r__one"]["still_import_torch_xla"] == 1
    faulty = _write(tmp_path / "faulty", {"r__two/x.py": "# AGAIN\n"})
    assert ecosystem.main(["--corpus", str(faulty)]) == 1
    printed = capsys.readouterr().out
    assert "r__two" in printed and "r__two/x.py: changed again by a second rewrite" in printed


def test_compare_prints_only_what_changed(tmp_path, fake_tool):
    corpus = _write(tmp_path / "corpus", {"same__repo/x.py": "# UNUSED\n", "moved__repo/y.py": "# UNUSED\n"})
    base = ecosystem.run(corpus, fake_tool)
    head = ecosystem.run(corpus, fake_tool)
    assert ecosystem.compare(base, head, "main") == "no change in the output against main"
    head.outputs["moved__repo/y.py"] = b"import json, os\n# UNUSED\n"
    head.repos["moved__repo"].lint_introduced = 2
    printed = ecosystem.compare(base, head, "main")
    assert "same__repo" not in printed
    assert "moved__repo" in printed and "1 -> 2" in printed
    assert "--- main/moved__repo/y.py" in printed and "+import json, os" in printed and "-import json" in printed
