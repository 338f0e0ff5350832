"""The benchmark's small configuration: it runs end to end and prints its ratios.

And a slice of the real-code configuration (bench/real.py). Only generous sanity bounds are asserted; the figures themselves are in docs/performance.md. The run fails on
its own when cold, warm and single-process `check` runs disagree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import real
from bench.run import main

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
