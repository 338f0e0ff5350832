"""No regular expression of the package takes time super-linear in its input (tests/regex_audit.py says how each is
found and timed), and the 5-line file that made `check` hang is checked at once."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from neuron_migrate.rules.device import XLA_IN_DEVICE_POSITION
from tests.helpers import ROOT, check_codes, deadline

HANG = """CONFIG = dict(
    ############### model ###############
    hidden=128,
)
# runs on xla
"""




def test_the_file_that_hung_check_is_checked_at_once():
    with deadline(30):
        assert check_codes(HANG * 20) == []


@pytest.mark.parametrize("unit", [b"#", b" ", b"\r", b"\\", b"'", b"(#", b"=#", b"# ", b"(\n", b"(\r\n#"])
def test_the_device_position_filter_is_linear(unit):
    def timed(n):  # best of seven: the machine is shared
        data = b"x = dict(" + unit * n + b")\n"
        best = float("inf")
        for _ in range(7):
            start = time.perf_counter()
            XLA_IN_DEVICE_POSITION.search(data)
            best = min(best, time.perf_counter() - start)
        return best
    tries = []
    with deadline(60):  # the old pattern: minutes for 30 `#` after `(`
        for _ in range(3):  # a loaded machine makes one pair noisy; super-linear time is slow every time
            small, big = timed(4_000), timed(16_000)  # in the caches: past ~100 KB, memory costs a step
            tries.append((small, big))
            if big < 9 * small + 0.002:
                break
    assert big < 9 * small + 0.002, tries


@pytest.mark.parametrize("snippet", [b'x.to(  # move\n  "xla")', b'torch.device(\\\n "xla:0")',
                                     b'f(a, device=(  # (the) accelerator\n "xla"))', b'dev = f"xla:{i}"'])
def test_the_device_position_filter_still_finds_the_device_strings(snippet):
    assert XLA_IN_DEVICE_POSITION.search(snippet)


@pytest.mark.slow
def test_every_pattern_of_the_package_is_linear_on_adversarial_inputs():
    """Every pattern against runs of `#`, blanks, `\\r`, quotes, backslashes ... after the prefixes that open the
    constructs patterns look for: 4n characters within SLOW_RATIO times n. In a child process, so that a pattern
    that backtracks without end is named, not a hung run."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.regex_audit"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=1500)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        last = [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]
        pytest.fail(f"a pattern took more than the whole budget (backtracking without end): {last}")
    assert proc.returncode == 0, err
    report = json.loads(out.splitlines()[-1])
    assert report["patterns"] > 100 and report["inputs"] > 30_000
    assert report["slow"] == []
