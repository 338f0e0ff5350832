import sys

try:
    from neuron_migrate.cli import entry

    entry()
except KeyboardInterrupt:  # Ctrl-C while the command line loads, or after it said what was written
    sys.stderr.write("Interrupted: no file was written.\n")
    sys.exit(130)
