"""The `neuron-migrate` command and `python -m neuron_migrate`: a `check` whose record still holds is replayed
(engine/replay.py: milliseconds, without loading the command line); any other command runs (cli/)."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from neuron_migrate.engine import replay

        code = replay.replay(sys.argv[1:])
        if code is None:
            replay.ARGV = sys.argv[1:]
            from neuron_migrate.engine import deferred

            deferred.install()  # before the command line, its rules and LibCST are imported
            from neuron_migrate.cli import entry

            entry()
            return
    except KeyboardInterrupt:  # Ctrl-C while the command line loads, or after it said what was written
        sys.stderr.write("Interrupted: no file was written.\n")
        sys.exit(130)
    sys.exit(code)
