"""`rewrite --output-dir` and `rewrite --report` through the real CLI."""

from __future__ import annotations

import json
import os

from tests.helpers import cli

LEGACY = """import torch
import torch_xla
import torch_xla.core.xla_model as xm

device = xm.xla_device()
torch_xla._XLAC._set_ir_debug(True)
"""
CLEAN = "import torch\n\nx = torch.zeros(3)\n"


def _tree(root):
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "train.py").write_text(LEGACY, encoding="utf-8")
    (root / "pkg" / "model.py").write_text(CLEAN, encoding="utf-8")
    (root / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    (root / "requirements.txt").write_text("torch-neuronx==2.8.0\n", encoding="utf-8")
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_output_dir_holds_a_migrated_copy_and_the_source_is_untouched(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    before = _tree(src)
    proc = cli("rewrite", "--no-cache", "--output-dir", str(out), str(src))
    assert proc.returncode == 0, proc.stderr
    assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before
    assert (out / "pkg" / "model.py").read_bytes() == before[src / "pkg" / "model.py"]
    assert (out / "data.csv").read_bytes() == before[src / "data.csv"]
    migrated = (out / "pkg" / "train.py").read_text(encoding="utf-8")
    assert 'device = torch.device("neuron")' in migrated and "xla_device" not in migrated
    again = cli("rewrite", "--no-cache", "--output-dir", str(out), str(src))
    assert again.returncode == 0 and (out / "pkg" / "train.py").read_text(encoding="utf-8") == migrated


def test_output_dir_inside_the_source_is_refused(tmp_path):
    src = tmp_path / "src"
    before = _tree(src)
    proc = cli("rewrite", "--no-cache", "--output-dir", str(src / "migrated"), str(src))
    assert proc.returncode == 2
    assert "inside the source tree" in proc.stderr
    assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before


def test_nothing_is_written_through_a_symlink_leaving_the_output_dir(tmp_path):
    src, out, elsewhere = tmp_path / "src", tmp_path / "out", tmp_path / "elsewhere"
    _tree(src)
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "pkg")
    proc = cli("rewrite", "--no-cache", "--output-dir", str(out), str(src))
    assert proc.returncode == 2
    assert "leads out of the output folder" in proc.stderr
    assert list(elsewhere.iterdir()) == []


def test_markdown_and_json_reports(tmp_path):
    src = tmp_path / "src"
    _tree(src)
    (src / "pkg" / "broken.py").write_text("import torch_xla\ndef f(:\n", encoding="utf-8")
    md, js = tmp_path / "migration.md", tmp_path / "migration.json"
    proc = cli("rewrite", "--no-cache", "--report", str(md), str(src))
    assert proc.returncode == 2  # broken.py could not be processed
    text = md.read_text(encoding="utf-8")
    assert text.startswith("## Migrate to the native PyTorch `neuron` device\n")
    assert "| NM101 | xla-device-call | 1 |" in text
    assert f"- `{src / 'pkg' / 'train.py'}` (" in text
    manual = [line for line in text.splitlines() if line.startswith(f"- [ ] `{src / 'pkg' / 'train.py'}:6` NM199: ")]
    assert len(manual) == 1 and "`torch_xla._XLAC._set_ir_debug`" in manual[0]
    assert "([docs](https://" in text
    assert f"- `{src / 'pkg' / 'broken.py'}`: line 2" in text
    assert "Run `neuron-migrate verify`" in text and "Run `neuron-migrate doctor`" in text

    (src / "pkg" / "broken.py").unlink()
    (src / "pkg" / "late.py").write_text(LEGACY, encoding="utf-8")
    proc = cli("rewrite", "--no-cache", "--diff", "--report", str(js), str(src))
    report = json.loads(js.read_text(encoding="utf-8"))
    assert report["mode"] == "dry run"
    assert [c["path"] for c in report["changed"]] == [str(src / "pkg" / "late.py")]
    assert {r["code"] for r in report["per_rule"]} >= {"NM101"}
    item = report["manual"][0]
    assert (item["line"], item["code"]) == (6, "NM199")  # the line before the rewrite and item["link"].startswith("https://")
    assert [s["command"] for s in report["next_steps"]][-2:] == ["neuron-migrate verify", "neuron-migrate doctor"]
