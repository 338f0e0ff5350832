"""Sizes of the sweeps, printed at the end of the run."""

from tests.helpers import SWEEP_REPORT


def pytest_configure(config):
    config.stash[SWEEP_REPORT] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for line in config.stash.get(SWEEP_REPORT, []):
        terminalreporter.write_line(line)
