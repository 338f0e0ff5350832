"""The benchmark's small configuration: it runs end to end and prints its ratios.

Only generous sanity bounds are asserted; the figures themselves are in docs/performance.md. The run fails on
its own when cold, warm and single-process `check` runs disagree.
"""

from __future__ import annotations

import pytest

from bench.run import main


@pytest.mark.slow
def test_small_benchmark_prints_ratios(capsys):
    figures = main(["--files", "80", "--baseline-share", "0.25", "--jobs", "2"])
    printed = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + printed)
    assert "baseline / check cold" in printed and "rewrite / LibCST parse+codegen" in printed
    assert figures.legacy_files > 0
    assert figures.check_warm.cpu < figures.check_cold.cpu < figures.baseline.cpu
