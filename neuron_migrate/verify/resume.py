"""Legacy checkpoints a verified program starts on: found before the runs, converted for the migrated runs.

A checkpoint the XLA stack wrote is named by an argument (`--resume ckpt/model.xser`, `--load=ckpt`) or lies
in the project (a path the code names). The runs of the original read it as it is. The migrated runs get
what the migrated code reads:

- xser (`xser.save`): the migration reads it with `torch.load(path)` (NM221), so each migrated run's copy gets
  one `torch.save` file at that path, converted once by `neuron_migrate.checkpoint`;
- a `torch.save` file of XLA tensors (saved without `.cpu()`): `torch.load` stays, and without torch_xla it
  cannot rebuild them, so the file is converted the same way, its tensors on the CPU;
- XLA FSDP shards, ZeRO-1 optimizer shards and NxD tensor/pipeline-parallel shards: the migration marks their
  reader for a person (NM230, NM235); they are reported with the `neuron-migrate checkpoint convert` command
  to run, and left as they are.

The user's files are never written: a converted file replaces the copied file or link in a run's own folder
(a linked folder on the way is made a folder of links first), or, for a checkpoint outside the project, lies
in the run's own temporary folder and the argument names it.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

CONVERTED = "converted"  # a torch.save file in the migrated runs' copies
MANUAL = "manual"  # the migration's reader is marked for a person: the command to run is reported
UNREADABLE = "unreadable"  # it looks like a legacy checkpoint but cannot be read: left as it is
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".xser", ".tar", ".pkl")
PICKLE_LIMIT = 32 * 1024 * 1024  # a project file whose pickle is larger than this is data, not a state dict
# what the migration turns each layout's reader into, for the report
MARKED = {"xla-fsdp": "NM230", "zero1": "NM230", "xla-fsdp+zero1": "NM230", "nxd": "NM235", "nxd+xser": "NM235"}
KIND_NAMES = {
    "xser": "torch_xla serialization (xser)", "plain": "a torch.save file of XLA tensors",
    "xla-fsdp": "XLA FSDP shards", "zero1": "ZeRO-1 optimizer shards", "xla-fsdp+zero1": "XLA FSDP and ZeRO-1 shards",
    "nxd": "NxD tensor/pipeline-parallel shards", "nxd+xser": "NxD tensor/pipeline-parallel shards (xser)",
}


@dataclass
class Legacy:
    """One legacy checkpoint the program may start on."""

    path: Path  # where it is (resolved): a file, or the folder of a sharded checkpoint
    at: Path  # the path the program names it by (absolute, links not followed): where the runs' copies hold it
    shown: str  # as the report names it: the argument's text, else the path from the working folder
    kind: str  # the layout (`neuron_migrate.checkpoint.layouts`), or "" when unreadable
    action: str  # CONVERTED, MANUAL or UNREADABLE
    argument: int | None = None  # its index in the program's arguments
    prefix: str = ""  # what precedes the path in that argument (`--load=`)
    option: str | None = None  # the option the argument belongs to, for the report
    sharding: str = ""
    tensors: int = 0
    nbytes: int = 0
    detail: str = ""  # why it was not converted
    command: str = ""  # the conversion a person runs (MANUAL)
    converted: Path | None = None  # the converted file, once (copied into each migrated run)
    runs: list[str] = field(default_factory=list)  # the runs that got the converted file
    outside: bool = False  # outside the project: the runs get it in their own folder, by the argument

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.kind, self.kind)

    def to_json(self) -> dict:
        return {"path": self.shown, "argument": self.option if self.argument is not None else None,
                "kind": self.kind or None, "action": self.action, "sharding": self.sharding or None,
                "tensors": self.tensors, "bytes": self.nbytes, "runs": self.runs, "outside_project": self.outside,
                "detail": self.detail or None,
                "command": self.command or None}


def project_top(cwd: Path, root: Path) -> Path:
    """The folder each run copies (as `runs.stage` decides): the project root, else the working folder."""
    from neuron_migrate.verify.runs import inside

    return root if inside(cwd, root) is not None else cwd


def find(args: list[str], cwd: Path, root: Path) -> list[Legacy]:
    """The legacy checkpoints the arguments name, then those in the project, each once."""
    cwd, root = cwd.resolve(), root.resolve()
    top = project_top(cwd, root)
    found: list[Legacy] = []
    for index, arg in enumerate(args):
        prefix, value = _value(arg)
        if not value:
            continue
        path = Path(os.path.normpath(cwd / value))  # an absolute value stays as it is
        if not os.path.exists(path):
            continue
        item = _open(path, value, strong=_signature(path))
        if item is not None:
            option = args[index - 1] if not prefix and index and args[index - 1].startswith("-") else prefix[:-1]
            item.argument, item.prefix, item.option = index, prefix, option or f"argument {index + 1}"
            _add(found, item)
    for path, strong in _project_candidates(top):
        item = _open(path, "", strong=strong, limit=PICKLE_LIMIT)
        if item is not None:
            # a sharded checkpoint by its folder, found from one of its files
            item.shown = _shown(item.path if item.action == MANUAL else path, cwd, top)
            _add(found, item)
    for item in found:
        if item.action == MANUAL:
            _advise(item)
    return found


def _value(arg: str) -> tuple[str, str]:
    """(`--load=`, the path) of `--load=PATH`; ("", arg) otherwise."""
    if arg.startswith("-") and "=" in arg:
        head, _, value = arg.partition("=")
        return head + "=", value
    return "", arg


def _shown(path: Path, cwd: Path, top: Path) -> str:
    for base in (cwd, top):
        try:
            return str(path.relative_to(base))
        except ValueError:
            pass
    return str(path)


def _add(found: list[Legacy], item: Legacy) -> None:
    """Each checkpoint once: not again, nor a part of one found already (a tag of an NxD trainer folder)."""
    if not any(item.path == other.path or other.path in item.path.parents for other in found):
        found.append(item)


def _signature(path: Path) -> bool:
    """Named or laid out as the XLA stack names its checkpoints: xser's tensor folder beside the file, NxD's
    rank names, a per-rank file."""
    from neuron_migrate.checkpoint.layouts import NXD_NAME

    if Path(str(path) + ".tensors").is_dir() or NXD_NAME.match(path.name):
        return True
    if path.is_dir():
        try:
            return any(NXD_NAME.match(p.name) or p.name == "newest" or _ranked(p) for p in path.iterdir())
        except OSError:
            return False
    return _ranked(path)


def _ranked(path: Path) -> bool:
    """A per-rank torch.save file (`ckpt_rank-00000000-of-00000002.pth`, `optim_rank0.pt`)."""
    from neuron_migrate.checkpoint.layouts import RANK_NAME
    from neuron_migrate.checkpoint.reader import is_torch_file

    return bool(RANK_NAME.search(path.name)) and path.is_file() and is_torch_file(path)


def _project_candidates(top: Path):
    """(path, named like a legacy checkpoint) of what in the project may be one: xser reference files, NxD shard
    folders, per-rank files, and torch.save files (which may hold XLA tensors)."""
    from neuron_migrate.checkpoint.layouts import NXD_NAME, RANK_NAME
    from neuron_migrate.verify.runs import SKIP_DIRS

    for folder, dirs, files in os.walk(top):
        here = Path(folder)
        if any(NXD_NAME.match(d) for d in dirs) or any(NXD_NAME.match(f) for f in files) or \
                ("newest" in files and any((here / d / "model").is_dir() for d in dirs)):
            # an NxD checkpoint folder (or a trainer's, with its tags): one checkpoint, its files not looked at
            yield here, True
            dirs[:] = []
            continue
        xser = sorted(set(files) & {d[: -len(".tensors")] for d in dirs if d.endswith(".tensors")})
        for f in xser:
            yield here / f, True
        dirs[:] = sorted(d for d in dirs if not d.endswith(".tensors")
                         and not any(fnmatch.fnmatch(d, pattern) for pattern in SKIP_DIRS))
        for f in sorted(files):
            if f in xser:
                continue
            if RANK_NAME.search(f) and f.endswith(CHECKPOINT_SUFFIXES):
                yield here / f, _ranked(here / f)
            elif f.endswith(CHECKPOINT_SUFFIXES):
                yield here / f, False


def _pickle_size(path: Path) -> int | None:
    """The size of the pickle in a torch.save archive, None when it is not one."""
    try:
        with zipfile.ZipFile(path) as archive:
            return sum(i.file_size for i in archive.infolist() if i.filename.endswith("data.pkl"))
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError):
        return None


def _open(path: Path, shown: str, strong: bool, limit: int | None = None) -> Legacy | None:
    """What the checkpoint at PATH is, when it is one the migration cannot read as it is; None for anything
    else (a text file, a folder of images, a plain checkpoint, a DCP folder)."""
    from neuron_migrate.checkpoint.layouts import open_checkpoint, tensor_leaves
    from neuron_migrate.checkpoint.reader import CheckpointError, Stored, leaves, read

    if path.is_file() and not strong:
        size = _pickle_size(path)
        if size is None or (limit is not None and size > limit):
            return None
    try:
        ckpt = open_checkpoint(path)
        if ckpt.kind == "plain" and not any(isinstance(leaf, Stored) and leaf.device
                                            for _, leaf in leaves(read(path))):
            return None  # torch.load reads it in the migrated program as in the original
    except Exception as exc:  # a CheckpointError, or anything unforeseen in a file laid out like one
        if not strong:
            return None
        detail = str(exc) if isinstance(exc, CheckpointError) else f"{path}: {type(exc).__name__}: {exc}"
        return Legacy(path.resolve(), path, shown, "", UNREADABLE, detail=detail)
    if ckpt.kind == "dcp":
        return None
    tensors = list(tensor_leaves(ckpt.tree))
    item = Legacy(ckpt.path.resolve() if ckpt.kind not in ("xser", "plain") else path.resolve(), path, shown,
                  ckpt.kind, CONVERTED if ckpt.kind in ("xser", "plain") else MANUAL, sharding=ckpt.sharding,
                  tensors=len(tensors), nbytes=sum(leaf.nbytes for _, leaf in tensors))
    return item


def _advise(item: Legacy) -> None:
    """The conversion a person runs for a checkpoint whose reader the migration marks."""
    src = item.shown.rstrip("/") or "."
    dst = f"{src}.pt" if item.path.is_dir() and src not in (".", "..") else \
        os.path.join(os.path.dirname(src), "model.pt")
    item.command = f"neuron-migrate checkpoint convert {src} {dst}"
    item.detail = (f"the migration's reader of these shards is marked for a person ({MARKED[item.kind]}): "
                   f"convert them once with `{item.command}` (or `--to dcp` for a sharded model) and load the "
                   "result; the migrated runs get the shards as they are")


def convert(found: list[Legacy], workdir: Path) -> None:
    """Convert each CONVERTED checkpoint once, to a torch.save file in workdir; a failure makes it UNREADABLE."""
    from neuron_migrate.checkpoint import writers
    from neuron_migrate.checkpoint.layouts import open_checkpoint
    from neuron_migrate.checkpoint.reader import CheckpointError

    if any(item.action == CONVERTED for item in found):
        writers.steady_allocator()
    for i, item in enumerate(found):
        if item.action != CONVERTED:
            continue
        out = workdir / "checkpoints" / str(i) / item.path.name
        out.parent.mkdir(parents=True)
        try:
            writers.write_torch(open_checkpoint(item.path).tree, out, lambda _n: None)
        except Exception as exc:  # verify goes on; the migrated runs get the checkpoint as it is
            item.action = UNREADABLE
            item.detail = str(exc) if isinstance(exc, CheckpointError) else f"{item.path}: {type(exc).__name__}: {exc}"
            shutil.rmtree(out.parent, ignore_errors=True)
            continue
        item.converted = out


def place(found: list[Legacy], run_name: str, folder: Path, top: Path, workdir: Path, args: list[str]) -> list[str]:
    """Give one migrated run the converted checkpoints: each replaces its path in the run's copy (`folder`, the
    copy of `top`); one outside the project goes to the run's own folder and its argument names it there. The
    run's arguments, changed where they name a checkpoint by another path than the copy's."""
    args = list(args)
    for item in found:
        if item.converted is None:
            continue
        where = _lexically_inside(item.at, top)
        if where is not None:
            dst = folder / where
            _own_folder(folder, dst.parent)
        else:
            item.outside = True
            dst = workdir / "checkpoints" / run_name.replace(" ", "-") / str(found.index(item)) / item.path.name
            dst.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
        os.close(fd)
        shutil.copyfile(item.converted, temporary)
        os.replace(temporary, dst)  # replaces the copied file or the link itself, never what a link points to
        if item.argument is not None:
            _, value = _value(args[item.argument])
            # a relative path inside the project names the copy already (the run starts in the copy of cwd)
            if os.path.isabs(value) or where is None:
                args[item.argument] = item.prefix + str(dst)
        item.runs.append(run_name)
    return args


def _lexically_inside(path: Path, folder: Path) -> Path | None:
    """PATH relative to FOLDER when it names something under it (links not followed: the copy keeps them)."""
    path, folder = Path(os.path.normpath(path)), Path(os.path.normpath(folder))
    try:
        return path.relative_to(folder)
    except ValueError:
        return None


def _own_folder(folder: Path, target: Path) -> None:
    """Make every folder from `folder` down to `target` a real folder of the run's copy: a linked folder (the
    copy keeps the project's symbolic links) becomes a folder of links to its entries."""
    current = folder
    for part in target.relative_to(folder).parts:
        current = current / part
        if current.is_symlink():
            real = Path(os.path.realpath(current))
            current.unlink()
            current.mkdir()
            for entry in real.iterdir():
                os.symlink(entry, current / entry.name)
