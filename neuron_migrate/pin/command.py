"""`neuron-migrate pin`: put every dependency file under PATH on one TorchNeuron family."""

from __future__ import annotations

from dataclasses import replace

import click

from neuron_migrate.cli.commands import _settings, exit_after_rewrite, shard_option, show_or_write, unsafe_fixes_option
from neuron_migrate.pin.matrix import matrix
from neuron_migrate.engine.runner import run

# Only the dependency rules (and their markers; NM513: an Inferentia 1 install is left as written): `pin` never
# rewrites code.
PIN_CODES = frozenset({"NM6", "NM513", "NM900"})


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--torch", "torch", type=click.Choice(matrix().torch_versions), default=None,
              help=f"PyTorch version of the torch-neuronx family to pin (default {matrix().default}).")
@click.option("--neuron-sdk", "neuron_sdk", type=click.Choice(matrix().sdk_names), default=None,
              help=f"Neuron release whose packages to pin (default: the newest, {matrix().newest.sdk}).")
@click.option("--instance", type=click.Choice(matrix().instances), default=None,
              help=f"Target instance (default {matrix().default_instance}): TorchAO Neuron is pinned on trn3.")
@click.option("--diff", "--dry-run", "dry_run", is_flag=True,
              help="Print a unified diff and write nothing (exit 1 when something would change).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes, 1 or more (default: all cores).")
@click.option("--exclude", multiple=True, help="Gitignore-style patterns of paths to skip.")
@unsafe_fixes_option
@shard_option
def pin(paths, torch, neuron_sdk, instance, dry_run, jobs, exclude, unsafe_fixes, shard) -> None:
    """Pin requirements, pyproject.toml, setup.py/setup.cfg, environment.yml, Dockerfiles, shell scripts and
    notebook install cells to one row of the Neuron release matrix: torch, torch-neuronx, neuronx-cc, nki,
    torchvision and torchaudio (torchao-neuron on trn3), the Neuron package index. Removing torch-xla and
    swapping torchao for torchao-neuron are unsafe fixes, made with --unsafe-fixes. Code is left alone
    (`rewrite` does both).
    """
    paths = paths or (".",)
    resolved = _settings(paths, (), (), exclude, torch=torch, neuron_sdk=neuron_sdk, instance=instance,
                         unsafe_fixes=unsafe_fixes)
    settings = replace(resolved.settings, select=PIN_CODES)
    result = run(paths, settings, rewrite=True, jobs=jobs, exclude=resolved.exclude, shard=shard)
    show_or_write(result, dry_run, command="pin")
    exit_after_rewrite(result, dry_run)
