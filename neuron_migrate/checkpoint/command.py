"""`neuron-migrate checkpoint inspect|convert`. torch is imported only once a sub-command runs."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import click

EXIT_OK, EXIT_ERROR = 0, 2
TARGETS = ("torch", "safetensors", "dcp")
INSTALL_HINT = ('neuron-migrate checkpoint needs PyTorch: pip install "neuron-migrate[verify]" '
                '(or pip install torch next to neuron-migrate)')
PARTITION_HELP = ("KEY_PATTERN=DIM (or =replicated): the dimension NxD split the tensors matching the glob on, "
                  "for names the converter does not recognise (repeatable), e.g. 'layers.*.attn.qkv.weight=0'.")


def _error(message: str) -> None:
    click.echo(message, err=True)
    sys.exit(EXIT_ERROR)


def _torch() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch  # noqa: F401
    except ImportError:
        _error(f"error: {INSTALL_HINT}")


def _partitions(values: tuple[str, ...]):
    from neuron_migrate.checkpoint.layouts import parse_partition

    try:
        return tuple(parse_partition(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--partition") from None


@click.group()
def checkpoint() -> None:
    """Inspect and convert the checkpoints torch_xla and neuronx-distributed wrote, without either installed.

    \b
    neuron-migrate checkpoint inspect ckpt/                  what it is, its tensors, what it converts to
    neuron-migrate checkpoint convert ckpt/ model.pt         one torch.save file (torch.load reads it)
    neuron-migrate checkpoint convert ckpt/ out/ --to dcp    a torch.distributed.checkpoint folder (dcp.load)
    Exit 0 on success, 2 when the checkpoint cannot be read or converted (DST is then left as it was).
    """


@checkpoint.command()
@click.argument("path", type=click.Path())
@click.option("--partition", multiple=True, metavar="KEY=DIM", help=PARTITION_HELP)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def inspect(path, partition, fmt) -> None:
    """What the checkpoint at PATH is, its tensors, how it was sharded and what it converts to."""
    _torch()
    from neuron_migrate.checkpoint.layouts import dotted, open_checkpoint, tensor_leaves
    from neuron_migrate.checkpoint.reader import CheckpointError

    try:
        ckpt = open_checkpoint(path, _partitions(partition))
    except CheckpointError as exc:
        _error(f"error: {exc}")
    tensors = [(dotted(p), leaf) for p, leaf in tensor_leaves(ckpt.tree)]
    total = sum(leaf.nbytes for _, leaf in tensors)
    if fmt == "json":
        click.echo(json.dumps({
            "path": str(path), "kind": ckpt.kind, "sharding": ckpt.sharding, "files": [str(f) for f in ckpt.files],
            "tensors": [{"key": k, "shape": list(leaf.shape), "dtype": str(leaf.dtype).removeprefix("torch.")}
                        for k, leaf in tensors],
            "total_bytes": total, "targets": list(ckpt.targets), "notes": ckpt.notes}, indent=2))
        return
    click.echo(f"{path}: {KIND_NAMES.get(ckpt.kind, ckpt.kind)}")
    click.echo(f"  sharding: {ckpt.sharding}")
    click.echo(f"  files: {len(ckpt.files)}" + (f" ({', '.join(f.name for f in ckpt.files[:4])}"
                                                 f"{', ...' if len(ckpt.files) > 4 else ''})" if ckpt.files else ""))
    click.echo(f"  tensors: {len(tensors)}, {human(total)}")
    width = min(60, max((len(k) for k, _ in tensors), default=0))
    for key, leaf in tensors:
        click.echo(f"    {key:<{width}}  {tuple(leaf.shape)!s:<16} {str(leaf.dtype).removeprefix('torch.')}")
    click.echo(f"  converts to: {', '.join(ckpt.targets)} (neuron-migrate checkpoint convert {path} DST "
               f"--to {ckpt.targets[0]})")
    for note in ckpt.notes:
        click.echo(f"  note: {note}")


KIND_NAMES = {
    "plain": "a torch.save file", "xser": "torch_xla serialization (xser.save: reference file + tensor files)",
    "xla-fsdp": "torch_xla FSDP shards (consolidate_sharded_model_checkpoints layout)",
    "zero1": "torch_xla ZeRO-1 optimizer shards", "xla-fsdp+zero1": "torch_xla FSDP and ZeRO-1 shards",
    "nxd": "neuronx-distributed tensor/pipeline-parallel shards",
    "nxd+xser": "neuronx-distributed tensor/pipeline-parallel shards (xser)",
    "dcp": "a torch.distributed.checkpoint folder",
}


def human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


@checkpoint.command()
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--to", "target", type=click.Choice(TARGETS), default=None,
              help="torch: one torch.save file; safetensors: one .safetensors file; dcp: a "
                   "torch.distributed.checkpoint folder. Default: safetensors when DST ends in .safetensors, "
                   "else torch.")
@click.option("--only", metavar="KEY", default=None,
              help="Convert only this top-level key of the checkpoint (e.g. `--only model`).")
@click.option("--partition", multiple=True, metavar="KEY=DIM", help=PARTITION_HELP)
@click.option("--force", is_flag=True, help="Replace DST when it exists.")
def convert(src, dst, target, only, partition, force) -> None:
    """Convert the checkpoint SRC into DST, one tensor at a time; DST appears only when the whole conversion
    succeeded."""
    _torch()
    from neuron_migrate.checkpoint.layouts import open_checkpoint, select, tensor_leaves
    from neuron_migrate.checkpoint.reader import CheckpointError

    dst_path = Path(dst)
    target = target or ("safetensors" if dst_path.suffix == ".safetensors" else "torch")
    if os.path.lexists(dst_path) and not force:
        _error(f"error: {dst}: exists; remove it or give --force")
    if not dst_path.resolve().parent.is_dir():
        _error(f"error: {dst}: the folder {dst_path.resolve().parent} does not exist")
    try:
        ckpt = select(open_checkpoint(src, _partitions(partition)), only)
        if target not in ckpt.targets:
            raise CheckpointError(f"{src}: a {ckpt.kind} checkpoint converts to {', '.join(ckpt.targets)}, not "
                                  f"{target}")
        leaves = list(tensor_leaves(ckpt.tree))
        _convert(ckpt, dst_path, target, len(leaves), src)
    except CheckpointError as exc:
        _error(f"error: {exc}\nnothing was written to {dst}")
    except OSError as exc:
        _error(f"error: {dst}: {exc.strerror or exc}\nnothing was written to {dst}")
    total = sum(leaf.nbytes for _, leaf in leaves)
    click.echo(f"{src} ({ckpt.kind}, {ckpt.sharding}) -> {dst} ({target}): {len(leaves)} tensors, {human(total)}")
    for note in ckpt.notes:
        click.echo(f"note: {note}", err=True)


def _convert(ckpt, dst: Path, target: str, count: int, src: str) -> None:
    """Write into a temporary folder beside DST, then rename; on any failure or interrupt nothing is left."""
    from neuron_migrate.checkpoint import writers
    from neuron_migrate.cli.progress import Progress

    writers.steady_allocator()
    parent = dst.resolve().parent
    work = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".partial", dir=parent))
    try:
        out = work / dst.name
        with Progress(count, label="tensors") as bar:
            def advance(_nbytes: int) -> None:
                bar.advance()

            if ckpt.kind == "dcp":
                from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

                dcp_to_torch_save(str(ckpt.path), str(out))
            elif target == "torch":
                writers.write_torch(ckpt.tree, out, advance)
            elif target == "safetensors":
                writers.write_safetensors(ckpt.tree, out, advance, src)
            else:
                writers.write_dcp(ckpt.tree, out, advance)
        if os.path.lexists(dst):  # --force: the old DST goes only once the new one is complete
            old = work / ".replaced"
            os.replace(dst, old)
        os.replace(out, dst)
    finally:
        shutil.rmtree(work, ignore_errors=True)
