"""Sizes of the sweeps, printed at the end of the run; tests that need an optional part skip without it; how many
`slow` tests the run left out (pyproject.toml's addopts deselects them) and how to run them."""

import os
from importlib.util import find_spec

# A rule that fails before it reports anything is a bug the suite must see (the tool itself skips it for the user).
os.environ.setdefault("NEURON_MIGRATE_STRICT_RULES", "1")

import pytest

from tests.helpers import SWEEP_REPORT

SLOW_LEFT_OUT = pytest.StashKey[int]()

# marker -> (module whose absence skips the test, how to get it)
OPTIONAL = {
    "needs_torch": ("torch", "needs PyTorch: pip install \"torch==2.13.0\" -e \".[verify]\""),
}


def pytest_configure(config):
    config.stash[SWEEP_REPORT] = []
    config.stash[SLOW_LEFT_OUT] = 0
    for marker, (module, how) in OPTIONAL.items():
        config.addinivalue_line("markers", f"{marker}: skipped when `{module}` is not installed ({how})")


def pytest_collection_modifyitems(config, items):
    for marker, (module, how) in OPTIONAL.items():
        if find_spec(module) is not None:
            continue
        skip = pytest.mark.skip(reason=how)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


def pytest_deselected(items):
    if items:
        config = items[0].config
        slow = sum(1 for item in items if "slow" in item.keywords)
        config.stash[SLOW_LEFT_OUT] = config.stash.get(SLOW_LEFT_OUT, 0) + slow


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for line in config.stash.get(SWEEP_REPORT, []):
        terminalreporter.write_line(line)
    left_out = config.stash.get(SLOW_LEFT_OUT, 0)
    if left_out and "not slow" in (config.option.markexpr or ""):
        terminalreporter.write_line(f"{left_out} slow tests left out: `python -m pytest -q -m slow` runs them")
