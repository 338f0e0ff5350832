"""Sizes of the sweeps, printed at the end of the run; tests that need an optional part skip without it."""

import os
from importlib.util import find_spec

# A rule that fails before it reports anything is a bug the suite must see (the tool itself skips it for the user).
os.environ.setdefault("NEURON_MIGRATE_STRICT_RULES", "1")

import pytest

from tests.helpers import SWEEP_REPORT

# marker -> (module whose absence skips the test, how to get it)
OPTIONAL = {
    "needs_torch": ("torch", "needs PyTorch: pip install \"torch==2.13.0\" -e \".[verify]\""),
}


def pytest_configure(config):
    config.stash[SWEEP_REPORT] = []
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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for line in config.stash.get(SWEEP_REPORT, []):
        terminalreporter.write_line(line)
