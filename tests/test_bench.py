"""The benchmark's small configuration: it runs end to end and prints its ratios.

And a slice of the real-code configuration (bench/real.py). Only generous sanity bounds are asserted; the figures themselves are in docs/performance.md. The run fails on
its own when cold, warm and single-process `check` runs disagree.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import real
from bench.run import main
from tests.helpers import ROOT

BED = Path("/work/bed/dl")  # the sdists and wheels of the real-code benchmark, already downloaded


@pytest.mark.slow
def test_small_benchmark_prints_ratios(capsys):
    figures = main(["--files", "80", "--baseline-share", "0.25", "--jobs", "2"])
    printed = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + printed)
    assert "baseline / check cold" in printed and "rewrite / LibCST parse+codegen" in printed
    assert figures.legacy_files > 0
    assert figures.check_warm.cpu < figures.check_cold.cpu < figures.baseline.cpu


@pytest.mark.slow
def test_small_real_code_slice_prints_ratios(capsys):
    """A slice of the real configuration: accelerate's sdist (fetched into the benchmark's cache when absent) and
    torch's `distributed` package, a fifth of their files."""
    figures = real.main(["--packages", "accelerate,torch.distributed", "--share", "0.2", "--baseline-share", "0.25",
                         "--jobs", "2", *(["--sources", str(BED)] if BED.is_dir() else [])])
    printed = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + printed)
    assert "baseline / check cold" in printed and "peak memory" in printed
    assert figures.files > 50 and figures.legacy_files > 0 and figures.findings > 0
    assert figures.check_warm.cpu < figures.check_cold.cpu < figures.baseline.cpu
    assert 0 < figures.check_peak_mb


@pytest.mark.slow
def test_checkpoint_conversion_memory_stays_near_one_tensor(capsys):
    """bench/checkpoint_memory.py on a small checkpoint of 8 MB tensors: xser and XLA FSDP (2 shards), --to torch
    and dcp, each within 3 tensors of the conversion of one tensor (with glibc's own mmap threshold, FSDP held 3
    to 5 more: `writers.steady_allocator`). The 4 GB figures are in docs/checkpoints.md."""
    pytest.importorskip("torch")
    from bench import checkpoint_memory

    rows = checkpoint_memory.main(["--size-gb", "0.125", "--tensor-mb", "8"])
    with capsys.disabled():
        print("\n" + capsys.readouterr().out)
    assert {(r["layout"], r["target"]) for r in rows} == {(a, b) for a in ("xser", "fsdp") for b in ("torch", "dcp")}
    assert all(r["size_bytes"] >= 0.99 * 0.125 * (1 << 30) for r in rows)
    assert all(r["above_tensors"] < 3 for r in rows), rows


@pytest.mark.slow
def test_user_code_run_prints_the_ruff_row_and_reads_notebooks(tmp_path, capsys):
    """`--user-code`: a small tree of user code, a script, a Python 2 file (left out), a notebook (its code cells,
    IPython lines left out, read by the floor and the baselines; the notebook itself by the tool and ruff)."""
    import json

    tree = tmp_path / "user"
    (tree / "job").mkdir(parents=True)
    (tree / "job" / "train.py").write_text("import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\n"
                                           "xm.mark_step()\n")
    (tree / "job" / "old.py").write_text('print "python 2"\n')
    cells = [{"cell_type": "code", "source": ["!pip install torch-neuronx\n", "import torch\n", "x = 1\n"],
              "metadata": {}, "outputs": [], "execution_count": None},
             {"cell_type": "markdown", "source": ["# prose\n"], "metadata": {}}]
    (tree / "job" / "tour.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                         "nbformat_minor": 5}))
    copy, code = tmp_path / "copy", tmp_path / "cells"
    assert real.user_code(tree, copy, code) == 1
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()) == [
        "job/tour.ipynb", "job/train.py"]
    assert (code / "job" / "tour.py").read_text() == "import torch\nx = 1\n"
    figures = real.main(["--user-code", str(tree), "--baseline-share", "1", "--jobs", "1"])
    printed = capsys.readouterr().out
    assert "ruff check --select ALL" in printed and "check cold / ruff check --select ALL" in printed
    assert "ast.parse + names + code paths (every file)" in printed and figures.names_and_paths.cpu > 0
    assert figures.files == 1 and figures.notebooks == 1 and figures.findings > 0


def _figures(**given) -> real.RealFigures:
    one = real.Time(1.0, 2.0)
    fields = {name: one for name, kind in real.RealFigures.__annotations__.items() if "Time" in kind}
    fields.update(packages=["user code"], files=3, lines=300, legacy_files=1, legacy_lines=100, jobs=2,
                  baseline_measured_share=1.0, single_lines=100, check_peak_mb=100.0, rewrite_peak_mb=50.0,
                  findings=7, notebooks=0)
    fields.update(given)
    return real.RealFigures(**fields)


def test_the_real_code_rows_and_ratios_are_printed_from_the_figures():
    """The names and code paths on Python's tree are a row after the floor and a ratio to it beside the floor
    goal's; ruff's row stays after LibCST's parse and codegen; a run without them prints neither."""
    printed = real.render(_figures(floor=real.Time(0.2, 0.4), names_and_paths=real.Time(0.7, 1.2),
                                   check_cold=real.Time(2.0, 4.0), ruff=real.Time(0.5, 1.0)))
    labels = [line[2:48].strip() for line in printed.splitlines()[2:]]
    assert labels[:6] == ["ast.parse floor (every file)", "ast.parse + names + code paths (every file)",
                          "LibCST parse + qualified names (baseline)", "LibCST parse + codegen (every file)",
                          "ruff check --select ALL", "neuron-migrate check, cold"]
    ratios = {line[2:48].strip(): line[48:] for line in printed.splitlines() if line.rstrip().endswith(")")}
    assert ratios["check cold / ast.parse floor"].split() == ["10.0x", "10.0x", "(goal", "<=", "4)"]
    assert ratios["names + code paths on Python's tree / floor"].split()[:2] == ["3.5x", "3.0x"]
    assert ratios["check cold / ruff check --select ALL"].split()[:2] == ["4.0x", "4.0x"]
    plain = real.render(_figures(names_and_paths=None, ruff=None))
    assert "names + code paths" not in plain and "ruff" not in plain


def test_the_names_and_code_paths_row_builds_them_for_a_file(tmp_path):
    """The row's work on one file: its names and code paths, from the text as the tool decodes it (a declared
    encoding included); what Python refuses is an error, as for the floor."""
    script = tmp_path / "train.py"
    script.write_bytes("# -*- coding: latin-1 -*-\nimport torch_xla.core.xla_model as xm\n"
                       "name = 'caf\xe9'\nif xm.xrt_world_size() > 1:\n    xm.mark_step()\n".encode("latin-1"))
    assert real._names_and_paths(str(script)) == 1
    (tmp_path / "old.py").write_text("print 'Python 2'\n")
    with pytest.raises(SyntaxError):
        real._names_and_paths(str(tmp_path / "old.py"))


def test_the_stages_of_one_run_are_timed_on_a_copy(tmp_path, capsys):
    """`python -m bench.stages`: every stage is printed with its calls, the stages inside the files take no more
    than the files, and a rewrite runs on a copy (the folder given is left as it was)."""
    from bench import stages

    folder = tmp_path / "project"
    shutil.copytree(ROOT / "examples" / "xla_mnist", folder / "train")
    (folder / "notebook.ipynb").write_text(json.dumps({
        "cells": [{"cell_type": "code", "source": "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\n",
                   "metadata": {}, "outputs": [], "execution_count": None}],
        "metadata": {"kernelspec": {"language": "python"}}, "nbformat": 4, "nbformat_minor": 5}))
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    for command in ("check", "rewrite"):
        found = {s.label: s for s in stages.main([str(folder), "--command", command])}
        printed = capsys.readouterr().out
        assert all(label in printed for _, _, label, _ in stages.STAGES)
        files, libcst = found["the files"], found["LibCST's parse"]
        assert files.calls >= 2 and found["notebooks (their cells' stages above too)"].calls >= 1
        if command == "rewrite":
            assert libcst.calls >= 2 and found["the rules' decisions"].calls >= 2
            assert 0 < libcst.seconds <= files.seconds
        else:  # the example's torch_xla code is decided on Python's tree
            assert found["rules decided on Python's tree (treecheck)"].calls >= 2 and libcst.seconds <= files.seconds
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


def test_the_two_trees_layers_are_timed_side_by_side(tmp_path, capsys):
    """`python -m bench.trees`: both parsers and both sets of layers over the files both read, with the ratios;
    a file LibCST cannot read is left out, and a folder with none is an error."""
    from bench import trees

    folder = tmp_path / "code"
    shutil.copytree(ROOT / "examples" / "xla_mnist", folder)
    (folder / "python2.py").write_text("print 'no'\n")
    figures = trees.main([str(folder)])
    printed = capsys.readouterr().out
    assert f"{len(list((ROOT / 'examples' / 'xla_mnist').rglob('*.py')))} files of" in printed
    assert "the layers alone" in printed and "parse included" in printed
    assert set(figures) == {"python_parse", "python", "libcst_parse", "libcst"}
    assert all(seconds > 0 for seconds in figures.values())  # (how they compare is the machine's: not asserted)
    ratios = trees.render({"python_parse": 1.0, "python": 1.5, "libcst_parse": 4.0, "libcst": 6.0}, 3, folder)
    assert "parse included: 4.0x; the layers alone: 2.00 s / 0.50 s = 4.0x" in ratios
    old = tmp_path / "old"
    old.mkdir()
    (old / "legacy.py").write_text("print 'Python 2'\n")
    with pytest.raises(SystemExit, match="no Python file"):
        trees.main([str(old)])
