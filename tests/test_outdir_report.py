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
    (src / "pkg" / "precision.py").write_text("import torch\n\nx = torch.zeros(3, dtype=torch.float64)\n",
                                              encoding="utf-8")
    (src / "run.sh").write_text("export XLA_USE_BF16=1\nexport XLA_IR_DEBUG=1\npython pkg/train.py\n",
                                encoding="utf-8")
    md, js = tmp_path / "migration.md", tmp_path / "migration.json"
    proc = cli("rewrite", "--no-cache", "--report", str(md), str(src))
    assert proc.returncode == 2  # broken.py could not be processed
    text = md.read_text(encoding="utf-8")
    assert text.startswith("## Migrate to the native PyTorch `neuron` device\n")
    assert str(tmp_path) not in text  # relative paths only
    assert "| NM101 | xla-device-call | 1 |" in text  # the summary table: rewrites, markers, other findings, files
    assert "| NM199 | legacy-api |  | 1 |  | 1 |" in text and "| NM401 | float64 |  |  | 1 | 1 |" in text
    assert "- `pkg/train.py` (" in text
    assert "#### NM199 legacy-api: 1 marker in 1 file" in text and "- [ ] `pkg/train.py`: line 6" in text
    assert "`torch_xla._XLAC._set_ir_debug`" in text and "([docs](https://" in text
    # what `check` still reports without a marker is listed too: the report never says nothing is left
    assert "### Left for a person: other findings" in text and "- [ ] `pkg/precision.py`: line 3" in text
    assert "Left for a person: 2 markers and 1 other finding in 3 files" in text
    assert "### Dependency pins changed\n\n- `requirements.txt`" in text
    assert "### Launch scripts and configurations changed\n\n- `run.sh`" in text  # not a pin
    assert "  - added ``# TODO(neuron-migrate NM403): use autocast, not `XLA_USE_BF16`" in text
    assert "- `pkg/broken.py`: line 2" in text
    assert "Run `neuron-migrate verify`" in text and "Run `neuron-migrate doctor`" in text

    (src / "pkg" / "broken.py").unlink()
    (src / "pkg" / "late.py").write_text(LEGACY, encoding="utf-8")
    proc = cli("rewrite", "--no-cache", "--diff", "--report", str(js), str(src))
    report = json.loads(js.read_text(encoding="utf-8"))
    assert report["mode"] == "dry run"
    assert [c["path"] for c in report["changed"]] == ["pkg/late.py"]
    assert {r["code"] for r in report["per_rule"]} >= {"NM101"}
    (item,) = [i for i in report["manual"] if i["path"] == "pkg/late.py"]
    assert (item["line"], item["code"]) == (6, "NM199")  # the line before the rewrite and item["link"].startswith("https://")
    assert [s["command"] for s in report["next_steps"]][-2:] == ["neuron-migrate verify", "neuron-migrate doctor"]
    # the markers the first run wrote are still left for a person: listed as such, with the rule they stand for
    assert {(i["path"], i["code"]) for i in report["manual"]} >= {("pkg/train.py", "NM199"), ("run.sh", "NM403")}


def test_a_long_report_keeps_its_body_under_the_limit_and_puts_the_lists_in_a_details_file(tmp_path):
    from neuron_migrate.cli import report as rep

    items = [{"path": f"pkg/module_{i:04}.py", "cell": None, "line": line, "code": "NM199",
              "message": f"`xm.api_{i}` is torch_xla API that has no automatic rewrite", "link": "https://example.org"}
             for i in range(3000) for line in (10, 20)]
    report = rep.Report(mode="in place", files_checked=3000, manual=items,
                        changed=[{"path": f"pkg/module_{i:04}.py", "rewrites": 1} for i in range(3000)])
    assert len(rep.markdown(report)) > rep.BODY_LIMIT  # the whole lists would not fit
    path = tmp_path / "migration.md"
    rep.write(str(path), report)
    body, details = path.read_text(encoding="utf-8"), (tmp_path / "migration.details.md").read_text(encoding="utf-8")
    assert len(body) < rep.BODY_LIMIT
    assert "see `migration.details.md`" in body and "#### NM199 legacy-api: 6000 markers in 3000 files" in body
    assert all(f"`pkg/module_{i:04}.py:20` NM199: `xm.api_{i}`" in details for i in (0, 1500, 2999))
    short = tmp_path / "short.md"
    rep.write(str(short), rep.Report(mode="in place", manual=items[:4]))
    assert not (tmp_path / "short.details.md").exists() and "details" not in short.read_text(encoding="utf-8")
