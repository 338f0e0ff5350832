"""`neuron-migrate pin`: put every dependency file under PATH on one TorchNeuron family."""

from __future__ import annotations

from dataclasses import replace

import click

from neuron_migrate.cli.commands import _settings, exit_after_rewrite, show_or_write
from neuron_migrate.pin.matrix import matrix
from neuron_migrate.engine.runner import run

# Only the dependency rules (and their markers): `pin` never rewrites code.
PIN_CODES = frozenset({"NM6", "NM900"})


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--torch", "torch", type=click.Choice([f.torch for f in matrix().families]), default=None,
              help=f"TorchNeuron family to pin (default {matrix().default}).")
@click.option("--diff", "--dry-run", "dry_run", is_flag=True,
              help="Print a unified diff and write nothing (exit 1 when something would change).")
@click.option("--jobs", "-j", type=int, default=None, help="Worker processes (default: all cores).")
@click.option("--exclude", multiple=True, help="Gitignore-style patterns of paths to skip.")
def pin(paths, torch, dry_run, jobs, exclude) -> None:
    """Pin requirements, pyproject.toml, setup.py/setup.cfg, environment.yml, Dockerfiles, shell scripts and
    notebook install cells to one TorchNeuron family: torch, torch-neuronx, neuronx-cc, nki, torchvision and
    torchaudio, the Neuron package index, no torch-xla. Code is left alone (`rewrite` does both).
    """
    paths = paths or (".",)
    resolved = _settings(paths, (), (), exclude, torch=torch)
    settings = replace(resolved.settings, select=PIN_CODES)
    result = run(paths, settings, rewrite=True, jobs=jobs, exclude=resolved.exclude)
    show_or_write(result, dry_run)
    exit_after_rewrite(result, dry_run)
