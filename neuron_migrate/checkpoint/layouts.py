"""The checkpoint layouts the XLA stack wrote, each read as one tree whose leaves load a whole tensor on demand.

- plain: one `torch.save` file (also XLA tensors pickled without `.cpu()`).
- xser: `torch_xla.utils.serialization.save`: the reference file PATH, one `PATH.tensors/tensor_<tid>.pt` each.
- xla-fsdp: torch_xla FSDP's per-rank files (`..._rank-<r>-of-<n>...`, `{"model": ..., "shard_metadata": ...}`),
  merged as `consolidate_sharded_model_checkpoints` does (shards joined, padding cut, flat parameters split,
  the wrappers' prefixes removed).
- zero1: torch_xla's ZeroRedundancyOptimizer per-rank `state_dict()` (`base_state` sharded on dim 0 after
  padding, `shape_info`), merged into the plain optimizer `state_dict()` of the base optimizer class.
- nxd: neuronx-distributed's `tp_rank_XX_pp_rank_XX` shards (`parallel_layers.save`, with or without xser) or
  its trainer checkpoints (`<tag>/model/dp_rank_00_tp_rank_XX_pp_rank_XX.pt`), pipeline stages joined and
  tensor-parallel shards concatenated on each parameter's partition dimension.
- dcp: a `torch.distributed.checkpoint` folder (already native; inspect only reads its metadata).
"""

from __future__ import annotations

import fnmatch
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from neuron_migrate.checkpoint.reader import (
    CheckpointError,
    Stored,
    XserRef,
    is_torch_file,
    leaves,
    read,
)

RANK_NAME = re.compile(r"rank[-_]?(\d+)(?:[-_]of[-_](\d+))?")
NXD_NAME = re.compile(r"^(?:dp_rank_(\d+)_)?tp_rank_(\d+)_pp_rank_(\d+)(?:_dp_rank_(\d+))?(\.pt)?$")
FSDP_SHARD = "_fsdp_shard"
FSDP_SEPARATOR = "_FSDP_SHARD_SEPARATOR_"
FLAT_PARAM = "_fsdp_wrapped_module.flat_param_"

# NxD's parallel layers: ColumnParallelLinear / ParallelEmbedding split dim 0 (weight and bias),
# RowParallelLinear splits the weight's dim 1 and keeps the bias whole. Matched on the module's own name.
COLUMN_PARALLEL = frozenset({"q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "gate_proj", "up_proj",
                             "gate_up_proj", "fc1", "c_fc", "dense_h_to_4h", "w1", "w3", "wi", "query", "key",
                             "value", "lm_head", "embed_tokens", "word_embeddings", "wte", "embed_in", "embed_out"})
ROW_PARALLEL = frozenset({"o_proj", "out_proj", "down_proj", "dense_4h_to_h", "fc2", "c_proj", "w2", "wo"})
REPLICATED = "replicated"


@dataclass
class Leaf:
    """One tensor of the converted checkpoint: its shape and dtype now, its values when `load()` is called."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    load: Callable[[], torch.Tensor]
    files: tuple[Path, ...]

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


@dataclass
class Checkpoint:
    kind: str
    path: Path
    tree: object
    files: list[Path]
    sharding: str = "not sharded"
    notes: list[str] = field(default_factory=list)
    targets: tuple[str, ...] = ("torch", "safetensors", "dcp")


def tensor_leaves(tree, path: tuple = ()):
    """(key path, Leaf) of every leaf of a converted tree, in order."""
    if isinstance(tree, Leaf):
        yield path, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from tensor_leaves(v, (*path, k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from tensor_leaves(v, (*path, i))


def dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _map(tree, fn):
    """The tree with each `Stored` / `XserRef` replaced by fn(leaf); containers rebuilt, other values kept."""
    if isinstance(tree, (Stored, XserRef)):
        return fn(tree)
    if isinstance(tree, dict):
        out = tree.__class__() if isinstance(tree, OrderedDict) else {}
        for k, v in tree.items():
            out[k] = _map(v, fn)
        return out
    if isinstance(tree, list):
        return [_map(v, fn) for v in tree]
    if isinstance(tree, tuple):
        return tuple(_map(v, fn) for v in tree)
    return tree


def stored_leaf(stored: Stored) -> Leaf:
    return Leaf(stored.shape, stored.dtype, stored.load, (stored.storage.file,))


def _checked(leaf_shape, dtype, tensor: torch.Tensor, what: str) -> torch.Tensor:
    if tuple(tensor.shape) != tuple(leaf_shape) or tensor.dtype != dtype:
        raise CheckpointError(f"{what}: expected {tuple(leaf_shape)} {dtype}, read {tuple(tensor.shape)} "
                              f"{tensor.dtype}; the shards do not match their metadata")
    return tensor


# ---------------------------------------------------------------------------------------------------- plain, xser

def read_tree(path: Path):
    """The file's tree with `Leaf`s; an xser reference file gets its `.tensors` folder's tensors."""
    tree = read(path)
    if not any(isinstance(leaf, XserRef) for _, leaf in leaves(tree)):
        return _map(tree, stored_leaf), False
    folder = Path(str(path) + ".tensors")
    if not folder.is_dir():
        raise CheckpointError(f"{path}: an xser reference file, but its tensor folder {folder} is missing; "
                              "copy the folder beside the file")

    def resolve(ref):
        if isinstance(ref, Stored):
            return stored_leaf(ref)
        if not isinstance(ref.tid, int):
            raise CheckpointError(f"{path}: a tensor reference without its number; the file is damaged")
        tensor_file = folder / f"tensor_{ref.tid}.pt"
        if not tensor_file.is_file():
            raise CheckpointError(f"{tensor_file}: missing (the xser checkpoint {path} refers to it); "
                                  "the checkpoint is incomplete")
        inner = read(tensor_file)
        if not isinstance(inner, Stored):
            raise CheckpointError(f"{tensor_file}: expected one tensor, found {type(inner).__name__}")
        return stored_leaf(inner)

    return _map(tree, resolve), True


# ---------------------------------------------------------------------------------------------------- rank files

def _rank_of(path: Path) -> tuple[int, int | None] | None:
    m = None
    for m in RANK_NAME.finditer(path.name):
        pass
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)) if m.group(2) else None


def _siblings(path: Path) -> list[Path]:
    """The files beside PATH whose names differ from it only in the rank number."""
    m = None
    for m in RANK_NAME.finditer(path.name):
        pass
    if m is None:
        return [path]
    head, tail = path.name[: m.start(1)], path.name[m.end(1):]
    pattern = re.compile(re.escape(head) + r"\d+" + re.escape(tail) + r"$")
    return sorted(p for p in path.parent.iterdir() if p.is_file() and pattern.match(p.name))


def _zero1_state(tree) -> tuple | None:
    """The key path of a ZeRO-1 optimizer state_dict in the tree (a dict with base_state and shape_info)."""
    if isinstance(tree, dict):
        if "base_state" in tree and "shape_info" in tree:
            return ()
        for k, v in tree.items():
            found = _zero1_state(v)
            if found is not None:
                return (k, *found)
    return None


def _get(tree, path: tuple):
    for k in path:
        tree = tree[k]
    return tree


def _set(tree, path: tuple, value) -> None:
    _get(tree, path[:-1])[path[-1]] = value


def rank_files(paths: list[Path]) -> Checkpoint:
    """XLA FSDP shards and / or ZeRO-1 optimizer shards, one file per rank."""
    trees = [(p, read_tree(p)[0]) for p in paths]
    first = trees[0][1]
    fsdp = isinstance(first, dict) and "shard_metadata" in first
    if fsdp:
        for p, t in trees:
            if not (isinstance(t, dict) and isinstance(t.get("shard_metadata"), dict) and "model" in t):
                raise CheckpointError(f"{p}: an FSDP shard needs the keys `model` and `shard_metadata` (as "
                                      f"consolidate_sharded_model_checkpoints reads them); this file has not")
        trees.sort(key=lambda pt: pt[1]["shard_metadata"].get("rank", -1))
        world = first["shard_metadata"].get("world_size")
        ranks = [t["shard_metadata"].get("rank") for _, t in trees]
        _check_ranks(paths, ranks, world, "shard_metadata")
    else:
        numbered = [(_rank_of(p), p, t) for p, t in trees]
        numbered.sort(key=lambda x: x[0][0] if x[0] else -1)
        trees = [(p, t) for _, p, t in numbered]
        sizes = {r[1] for r, _, _ in numbered if r and r[1] is not None}
        _check_ranks(paths, [r[0] if r else None for r, _, _ in numbered], sizes.pop() if len(sizes) == 1 else None,
                     "file names")
    zero = _zero1_state(trees[0][1])
    if not fsdp and zero is None:
        raise CheckpointError(f"{paths[0]}: {len(paths)} files with rank numbers, but neither FSDP shards "
                              "(`shard_metadata`) nor ZeRO-1 optimizer shards (`base_state`, `shape_info`)")
    merged = trees[0][1]
    kinds = []
    if fsdp:
        merged = dict(merged)
        layout = _fsdp_layout(trees[0][0], trees[0][1]["model"], trees[0][1]["shard_metadata"])
        merged["model"] = _consolidate_fsdp([(p, t["model"]) for p, t in trees], layout)
        del merged["shard_metadata"]
        for key, value in first.items():
            if _is_optimizer_state(value):
                for p, t in trees:
                    if not _is_optimizer_state(t.get(key)):
                        raise CheckpointError(f"{p}: no optimizer state `{key}` (as {trees[0][0].name} has); the "
                                              "shards do not belong together")
                merged[key] = _fsdp_optimizer([(p, t[key]) for p, t in trees], layout, key)
        kinds.append("xla-fsdp")
    if zero is not None:
        merged = _copy_containers(merged)
        _set_or_root = _merge_zero1([(p, _get(t, zero)) for p, t in trees])
        if zero:
            _set(merged, zero, _set_or_root)
        else:
            merged = _set_or_root
        kinds.append("zero1")
    return Checkpoint("+".join(kinds), paths[0].parent, merged, [p for p, _ in trees],
                      sharding=f"{len(trees)} ranks ({', '.join(kinds)})")


def _copy_containers(tree):
    if isinstance(tree, dict):
        return tree.__class__((k, _copy_containers(v)) for k, v in tree.items())
    if isinstance(tree, list):
        return [_copy_containers(v) for v in tree]
    return tree


def _check_ranks(paths: list[Path], ranks: list, world, source: str) -> None:
    where = paths[0].parent / re.sub(r"\d+", "*", paths[0].name, count=1) if len(paths) else paths
    if world is not None and world != len(ranks):
        missing = sorted(set(range(world)) - {r for r in ranks if isinstance(r, int)})
        raise CheckpointError(f"{where}: {len(ranks)} shard files, but their {source} say {world} ranks"
                              + (f" (missing rank {', '.join(map(str, missing))})" if missing else "")
                              + "; copy every rank's file")
    if ranks != list(range(len(ranks))):
        raise CheckpointError(f"{where}: the shards' ranks are {ranks} by their {source}, expected 0 to "
                              f"{len(ranks) - 1}; a shard is missing or doubled")


def _cat_leaf(parts: list[Leaf], dim: int, what: str, cut: int | None = None,
              shape: tuple[int, ...] | None = None) -> Leaf:
    """The shards joined on dim (in rank order); `cut` keeps the first elements of that dim, `shape` views it."""
    full = list(parts[0].shape)
    for p in parts[1:]:
        if p.dtype != parts[0].dtype or len(p.shape) != len(full) or \
                any(a != b for i, (a, b) in enumerate(zip(p.shape, full)) if i != dim):
            raise CheckpointError(f"{p.files[0]}: {what} is {tuple(p.shape)} {p.dtype} here and "
                                  f"{tuple(parts[0].shape)} {parts[0].dtype} in {parts[0].files[0]}; "
                                  "the shards do not belong together")
    full[dim] = sum(p.shape[dim] for p in parts)
    if cut is not None:
        if cut > full[dim]:
            raise CheckpointError(f"{parts[0].files[0]}: {what} needs {cut} elements on dim {dim}, the shards hold "
                                  f"{full[dim]}; a shard is missing or the metadata does not match")
        full[dim] = cut
    out_shape = tuple(shape) if shape is not None else tuple(full)

    def load() -> torch.Tensor:
        pieces = [_checked(p.shape, p.dtype, p.load(), f"{p.files[0]}: {what}") for p in parts]
        t = torch.cat(pieces, dim) if len(pieces) > 1 else pieces[0]
        del pieces
        if cut is not None:
            t = t.narrow(dim, 0, cut)
        return t.reshape(out_shape) if shape is not None else t

    return Leaf(out_shape, parts[0].dtype, load, tuple(f for p in parts for f in p.files))


@dataclass(frozen=True)
class FsdpShard:
    """One sharded tensor of XLA FSDP's rank state dicts: its key there, its shape on rank 0, its unpadded size,
    and the module's tensors it holds ((name, shape, start, numel) each: one for a parameter, several for a flat
    parameter)."""

    key: str
    shard: tuple[int, ...]
    numel: int
    size: tuple[int, ...]
    pieces: tuple[tuple[str, tuple[int, ...], int, int], ...]


def _fsdp_layout(first_path: Path, first: dict, meta: dict) -> list[FsdpShard]:
    """The sharded tensors of a rank's model state, in its order (the order of the wrapped model's parameters)."""
    shard_info, flatten_info = meta.get("shard_info", {}), meta.get("flatten_info", {})
    out = []
    for name, leaf in first.items():
        parts = name.split(".")
        idx = next((i for i, s in enumerate(parts) if s.startswith(FSDP_SHARD)), None)
        if idx is None:
            continue
        prefix, suffix = ".".join(parts[:idx]), ".".join(parts[idx:])
        info = shard_info.get(prefix, {}).get(suffix)
        if not isinstance(info, dict) or "_orig_size" not in info:
            raise CheckpointError(f"{first_path}: no shard_metadata for {name}; the shard metadata does not match "
                                  "the model state")
        size = tuple(info["_orig_size"])
        numel = _numel(size)
        full_name = f"{prefix}.{info['_orig_name']}" if prefix else info["_orig_name"]
        if FLAT_PARAM not in full_name:
            out.append(FsdpShard(name, _shape(leaf), numel, size, ((_unwrap(full_name), size, 0, numel),)))
            continue
        if full_name not in flatten_info:
            raise CheckpointError(f"{first_path}: no flatten_info for {full_name} in shard_metadata")
        names, shapes, numels = flatten_info[full_name]
        if sum(numels) != numel:
            raise CheckpointError(f"{first_path}: {full_name} holds {numel} elements, its flatten_info "
                                  f"{sum(numels)}; the shard metadata does not match")
        flat_prefix = ".".join(full_name.split(".")[:-1])
        pieces, start = [], 0
        for n, shape, k in zip(names, shapes, numels):
            pieces.append((_unwrap(f"{flat_prefix}.{n}" if flat_prefix else n), tuple(shape), start, k))
            start += k
        out.append(FsdpShard(name, _shape(leaf), numel, size, tuple(pieces)))
    return out


def _shape(leaf) -> tuple[int, ...]:
    return tuple(leaf.shape) if isinstance(leaf, Leaf) else ()


def _unshard(shard: FsdpShard, parts: list[tuple[Path, object]], what: str, group=None) -> list[tuple[str, Leaf]]:
    """The module tensors of one sharded tensor: the ranks' parts joined, the padding cut, a flat one split.
    The slices of a flat tensor share one load (kept in `group` until a tensor of another group is read)."""
    for p, part in parts:
        if not isinstance(part, Leaf):
            raise CheckpointError(f"{p}: {what} is missing; the shards do not belong together")
    flat = [Leaf((_numel(leaf.shape),), leaf.dtype, _flattened(leaf), leaf.files) for _, leaf in parts]
    if len(shard.pieces) == 1:
        name, shape, _, _ = shard.pieces[0]
        whole = _cat_leaf(flat, 0, what, cut=shard.numel, shape=shape)
        return [(name, Leaf(whole.shape, whole.dtype, _member(whole.load, group), whole.files) if group else whole)]
    whole = _cat_leaf(flat, 0, what, cut=shard.numel)
    kept = _member(whole.load, group or _Group())
    return [(name, Leaf(shape, whole.dtype, _slice(kept, start, k, shape), whole.files))
            for name, shape, start, k in shard.pieces]


def _consolidate_fsdp(states: list[tuple[Path, dict]], layout: list[FsdpShard]) -> OrderedDict:
    """`consolidate_sharded_state_dicts`, one leaf at a time."""
    first = states[0][1]
    sharded = {s.key: s for s in layout}
    out: OrderedDict = OrderedDict()
    for name, leaf in first.items():
        if name in sharded:
            out.update(_unshard(sharded[name], [(p, sd.get(name)) for p, sd in states], name))
        else:
            out[_unwrap(name)] = leaf
    return out


def _is_optimizer_state(value) -> bool:
    return isinstance(value, dict) and isinstance(value.get("state"), dict) and \
        isinstance(value.get("param_groups"), list) and "base_state" not in value


def _fsdp_optimizer(states: list[tuple[Path, dict]], layout: list[FsdpShard], key: str) -> dict:
    """The ranks' `optimizer.state_dict()` over the FSDP-wrapped model's sharded parameters -> one keyed by the
    module's parameter names (what `get_optimizer_state_dict` gives and `set_optimizer_state_dict` takes): a flat
    parameter's state is split like the parameter, so indices could not say which tensor is which."""
    first_path, first = states[0]
    ids = [i for g in first["param_groups"] for i in (g.get("params") or [])]
    if len(ids) != len(layout):
        raise CheckpointError(f"{first_path}: `{key}` holds the state of {len(ids)} parameters, the model "
                              f"{len(layout)} sharded ones; the optimizer was not built on the FSDP-wrapped "
                              f"model's parameters, so its state cannot be matched to them")
    for p, sd in states[1:]:
        if [i for g in sd["param_groups"] for i in (g.get("params") or [])] != ids:
            raise CheckpointError(f"{p}: `{key}` has other parameter groups than {first_path}; the shards do not "
                                  "belong together")
    names: dict = {}
    state: dict = {}
    for i, shard in zip(ids, layout):
        names[i] = [name for name, *_ in shard.pieces]
        entries = first["state"].get(i)
        if not isinstance(entries, dict):
            continue  # a parameter the optimizer has not stepped yet
        for p, sd in states[1:]:
            if not isinstance(sd["state"].get(i), dict):
                raise CheckpointError(f"{p}: `{key}` has no state for parameter {i}, {first_path} has; the shards "
                                      "do not belong together")
        group = _Group()
        for name in names[i]:
            state[name] = {}
        for k, value in entries.items():
            if isinstance(value, Leaf) and value.shape == shard.shard:
                parts = [(p, sd["state"].get(i, {}).get(k)) for p, sd in states]
                for name, leaf in _unshard(shard, parts, f"{key}.state.{i}.{k}", group):
                    state[name][k] = leaf
            else:
                for name in names[i]:  # a value of its own for each (a shared `step` tensor would count twice)
                    state[name][k] = Leaf(value.shape, value.dtype, _member(value.load, group), value.files) \
                        if isinstance(value, Leaf) else value
    groups = [{**g, "params": [n for i in (g.get("params") or []) for n in names[i]]} for g in first["param_groups"]]
    return {"state": state, "param_groups": groups}


class _Group:
    """The tensors read once for several leaves (a flat parameter's slices, one optimizer entry's states):
    kept until `release`, which the writers call when the next leaf belongs to another group."""

    def __init__(self) -> None:
        self.kept: dict = {}
        self.release = self.kept.clear


def _member(load, group: _Group | None):
    if group is None:
        return load

    def kept() -> torch.Tensor:
        if id(load) not in group.kept:
            group.kept[id(load)] = (load, load())  # the function kept too: its id stays unique
        return group.kept[id(load)][1]

    kept.release = group.release  # type: ignore[attr-defined]
    return kept


def _unwrap(name: str) -> str:
    return name.replace("_fsdp_wrapped_module.", "").replace("_fpw_module.", "")


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _flattened(leaf: Leaf):
    return lambda: leaf.load().reshape(-1)


def _slice(whole, start: int, numel: int, shape):
    def load() -> torch.Tensor:
        return whole().narrow(0, start, numel).reshape(tuple(shape)).clone()
    load.release = whole.release  # type: ignore[attr-defined]
    return load


def _merge_zero1(states: list[tuple[Path, dict]]) -> dict:
    """ZeRO-1 shards -> the base optimizer's plain `state_dict()` ({"state": {i: ...}, "param_groups": ...})."""
    first_path, first = states[0]
    shape_info = first["shape_info"]
    state: dict = {}
    for idx, entries in first["base_state"].items():
        if idx not in shape_info:
            raise CheckpointError(f"{first_path}: base_state has parameter {idx}, shape_info has not; the shard "
                                  "metadata does not match")
        shape = tuple(shape_info[idx])
        merged = {}
        for key, value in entries.items():
            if isinstance(value, Leaf) and len(value.shape) and len(shape) and value.shape[1:] == shape[1:]:
                parts = []
                for p, sd in states:
                    part = sd["base_state"].get(idx, {}).get(key)
                    if not isinstance(part, Leaf):
                        raise CheckpointError(f"{p}: base_state[{idx}][{key!r}] is missing; the shards do not "
                                              "belong together")
                    parts.append(part)
                per = parts[0].shape[0]
                if any(p.shape[0] != per for p in parts) or not (per * len(parts) - len(parts) < shape[0]
                                                                 <= per * len(parts)):
                    raise CheckpointError(f"{first_path}: base_state[{idx}][{key!r}] shards of {per} rows do not "
                                          f"make {shape[0]} over {len(parts)} ranks; a shard is missing")
                merged[key] = _cat_leaf(parts, 0, f"base_state[{idx}][{key!r}]", cut=shape[0])
            else:
                merged[key] = value
        state[idx] = merged
    out = {"state": state, "param_groups": first.get("param_groups", [])}
    if "sharded_master_weights" in first:
        out["master_weights"] = {i: _cat_leaf([sd["sharded_master_weights"][i] for _, sd in states], 0,
                                              f"sharded_master_weights[{i}]", cut=int(shape_info[i][0]))
                                 for i in first["sharded_master_weights"]}
    return out


# ---------------------------------------------------------------------------------------------------- NxD

@dataclass(frozen=True)
class Partition:
    pattern: str
    dim: int | None  # None: replicated


def parse_partition(text: str) -> Partition:
    pattern, sep, dim = text.rpartition("=")
    if not sep or not pattern:
        raise ValueError(f"{text!r}: give KEY_PATTERN=DIM or KEY_PATTERN=replicated")
    if dim == REPLICATED:
        return Partition(pattern, None)
    return Partition(pattern, int(dim))


def partition_dim(key: str, ndim: int, given: tuple[Partition, ...]) -> int | None | str:
    """The dimension NxD split KEY on, None when replicated, "unknown" when the name does not tell."""
    for p in given:
        if fnmatch.fnmatchcase(key, p.pattern):
            return p.dim
    parts = key.split(".")
    leaf, module = parts[-1], parts[-2] if len(parts) > 1 else ""
    if module in ROW_PARALLEL:
        return 1 if leaf == "weight" and ndim == 2 else None
    if module in COLUMN_PARALLEL:
        return 0 if ndim >= 1 else None
    return "unknown"


def _nxd_files(folder: Path) -> dict[tuple[int, int], Path] | None:
    """{(tp, pp): the file or xser reference} of a parallel_layers.save folder or a trainer `model/` folder."""
    found: dict[tuple[int, int], Path] = {}
    for entry in sorted(folder.iterdir()):
        m = NXD_NAME.match(entry.name)
        if not m:
            continue
        dp = m.group(1) or m.group(4)
        if dp is not None and int(dp) != 0:
            continue  # the other data-parallel ranks hold the same model
        key = (int(m.group(2)), int(m.group(3)))
        if entry.is_dir() and (entry / "checkpoint.pt").is_file():
            found[key] = entry / "checkpoint.pt"
        elif entry.is_file():
            found[key] = entry
        elif entry.is_dir():
            raise CheckpointError(f"{entry}: an NxD shard folder without checkpoint.pt; the checkpoint is incomplete")
    return found or None


def _nxd_root(path: Path) -> tuple[Path, dict, list[str]] | None:
    """(the folder holding the model shards, the shards, notes) for an NxD checkpoint at or under PATH."""
    notes: list[str] = []
    direct = _nxd_files(path)
    if direct:
        return path, direct, notes
    tag = path
    if not (path / "model").is_dir():
        newest = path / "newest"
        tags = [d for d in sorted(path.iterdir()) if d.is_dir() and (d / "model").is_dir()]
        if newest.is_file() and (path / newest.read_text().strip() / "model").is_dir():
            tag = path / newest.read_text().strip()
        elif len(tags) == 1:
            tag = tags[0]
        elif tags:
            raise CheckpointError(f"{path}: {len(tags)} checkpoint tags ({', '.join(t.name for t in tags)}) and no "
                                  "`newest` file; give the tag folder to convert")
        else:
            return None
        notes.append(f"tag {tag.name}")
    shards = _nxd_files(tag / "model")
    if not shards:
        raise CheckpointError(f"{tag / 'model'}: no dp_rank_XX_tp_rank_XX_pp_rank_XX.pt files; the checkpoint is "
                              "incomplete")
    if not (tag / "done").is_file():
        notes.append(f"{tag / 'done'} is missing: NxD writes it after every rank saved; the save may not have "
                     "finished")
    if (tag / "optim").is_dir():
        notes.append("optim/: the NxD optimizer shards are not converted (their states are keyed by position, "
                     "not by parameter name); resume with a fresh optimizer or keep them")
    return tag / "model", shards, notes


def nxd(path: Path, partitions: tuple[Partition, ...]) -> Checkpoint | None:
    found = _nxd_root(path)
    if found is None:
        return None
    folder, shards, notes = found
    tps = sorted({tp for tp, _ in shards})
    pps = sorted({pp for _, pp in shards})
    for tp in range(len(tps)):
        for pp in range(len(pps)):
            if (tp, pp) not in shards:
                raise CheckpointError(f"{folder}: the shard of tp_rank {tp:02d} pp_rank {pp:02d} is missing "
                                      f"(found {len(shards)} of {len(tps) * len(pps)}); the checkpoint is incomplete")
    if tps != list(range(len(tps))) or pps != list(range(len(pps))):
        raise CheckpointError(f"{folder}: the shards' ranks are not numbered from 0; a shard is missing")
    trees = {}
    xser = False
    for key, file in sorted(shards.items()):
        trees[key], is_xser = read_tree(file)
        xser = xser or is_xser
    files = [shards[k] for k in sorted(shards)]
    optimizers = {k for k, v in trees[(0, 0)].items() if _is_optimizer_state(v)} \
        if isinstance(trees[(0, 0)], dict) else set()
    if optimizers and len(pps) > 1:  # each stage numbers its parameters from 0: the states cannot be joined
        for key in optimizers:
            notes.append(f"{key}: the optimizer state of the {len(pps)} pipeline stages is keyed by position, each "
                         "stage counting from 0, so it cannot be joined and is left out; resume with a fresh "
                         "optimizer")
            for tree in trees.values():
                tree.pop(key, None)
        optimizers = set()
    per_tp = [_merge_stages([trees[(tp, pp)] for pp in pps]) for tp in tps]
    shape_dims = _shape_dims(per_tp[0].get("model"), partitions) if optimizers else {}
    merged = _merge_tp(per_tp, partitions, len(tps), guess=(optimizers, shape_dims))
    extra = folder.parent if folder.name == "model" else None
    if extra is not None:
        merged = {"model": merged}
        for name in ("scheduler", "user_content"):
            if (extra / f"{name}.pt").is_file():
                merged[name] = read_tree(extra / f"{name}.pt")[0]
                files.append(extra / f"{name}.pt")
    return Checkpoint("nxd" + ("+xser" if xser else ""), path, merged, files,
                      sharding=f"TP={len(tps)} PP={len(pps)}", notes=notes)


def _merge_stages(trees: list):
    """The pipeline stages' trees joined: dict keys united (the first stage's value wins on a shared key)."""
    out = trees[0]
    for t in trees[1:]:
        if isinstance(out, dict) and isinstance(t, dict):
            merged = out.__class__(out)
            for k, v in t.items():
                merged[k] = _merge_stages([merged[k], v]) if k in merged else v
            out = merged
    return out


def _shape_dims(model, partitions: tuple[Partition, ...]) -> dict:
    """{the shape a tensor has on one TP rank: the dimensions (None: replicated, "unknown") of the model's
    tensors of that shape}."""
    out: dict = {}
    for path, leaf in tensor_leaves(model if isinstance(model, dict) else {}):
        out.setdefault(tuple(leaf.shape), set()).add(partition_dim(dotted(path), len(leaf.shape), partitions))
    return out


def _optimizer_dim(path: tuple, shape: tuple, guess) -> int | None | str:
    """An optimizer state tensor's split, from its parameter's: the states are keyed by position (`state.3.
    exp_avg`), but each has its parameter's shape on the rank, so where every model tensor of that shape is
    split the same way, that way is the parameter's (else "unknown": --partition tells)."""
    optimizers, shape_dims = guess
    if len(path) < 4 or path[0] not in optimizers or path[1] != "state":
        return "unknown"
    dims = shape_dims.get(tuple(shape), set())
    return next(iter(dims)) if len(dims) == 1 else "unknown"


def _merge_tp(trees: list, partitions: tuple[Partition, ...], tp: int, path: tuple = (), guess=((), {})):
    first = trees[0]
    if isinstance(first, Leaf):
        others = [t for t in trees[1:] if not isinstance(t, Leaf)]
        if others or tp == 1:
            return first
        key = dotted(path)
        dim = partition_dim(key.removeprefix("model."), len(first.shape), partitions)
        named = dim != "unknown"
        if not named:
            dim = _optimizer_dim(path, first.shape, guess)
        if dim == "unknown" or dim is None or not first.shape:  # a 0-dim tensor (a `step`) is not split
            return _replicated(trees, key, explicit=dim is None and named)
        if not -len(first.shape) <= dim < len(first.shape):
            raise CheckpointError(f"{first.files[0]}: {key} has {len(first.shape)} dims, cannot split it on {dim}")
        return _cat_leaf(trees, dim % len(first.shape), key)
    if isinstance(first, dict):
        out = first.__class__()
        for k in first:
            out[k] = _merge_tp([t.get(k) if isinstance(t, dict) else None for t in trees], partitions, tp, (*path, k),
                               guess)
        return out
    if isinstance(first, list):
        return [_merge_tp([t[i] if isinstance(t, list) and i < len(t) else None for t in trees], partitions, tp,
                          (*path, i), guess) for i in range(len(first))]
    return first


def _replicated(parts: list[Leaf], key: str, explicit: bool) -> Leaf:
    """A tensor every TP rank holds whole: rank 0's, after checking the others hold the same values."""
    first = parts[0]

    def load() -> torch.Tensor:
        base = first.load()
        for p in parts[1:]:
            other = p.load()
            if other.shape != base.shape or not torch.equal(other, base):
                hint = "it was declared replicated" if explicit else \
                    "its name does not say which dimension NxD split it on"
                raise CheckpointError(f"{p.files[0]}: {key} differs between the tensor-parallel ranks and {hint}; "
                                      f"give --partition '{key}=DIM' (0 for column-parallel, 1 for row-parallel)")
            del other
        return base

    return Leaf(first.shape, first.dtype, load, tuple(f for p in parts for f in p.files))


# ---------------------------------------------------------------------------------------------------- dcp

def dcp(path: Path) -> Checkpoint:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        meta = FileSystemReader(str(path)).read_metadata()
    except Exception as exc:  # noqa: BLE001  (a damaged .metadata raises whatever pickle raised)
        raise CheckpointError(f"{path / '.metadata'}: cannot read ({type(exc).__name__}: {exc})") from None
    tree: dict = {}
    for fqn, md in meta.state_dict_metadata.items():
        if isinstance(md, TensorStorageMetadata):
            tree[fqn] = Leaf(tuple(md.size), md.properties.dtype, _dcp_refuses, (path,))
    files = sorted(p for p in path.iterdir() if p.is_file())
    return Checkpoint("dcp", path, tree, files, sharding="DCP (any layout; dcp.load reshards)",
                      targets=("torch",))


def _dcp_refuses() -> torch.Tensor:
    raise CheckpointError("a DCP folder is read whole by dcp_to_torch_save")


# ---------------------------------------------------------------------------------------------------- entry

def open_checkpoint(path: str | Path, partitions: tuple[Partition, ...] = ()) -> Checkpoint:
    """What PATH holds, as one tree of `Leaf`s (nothing but pickles and shapes read yet)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / ".metadata").is_file():
            return dcp(path)
        found = nxd(path, partitions)
        if found is not None:
            return found
        ranked = [p for p in sorted(path.iterdir()) if p.is_file() and _rank_of(p) and is_torch_file(p)]
        if ranked:
            return rank_files(_siblings(ranked[0]))
        raise CheckpointError(f"{path}: no checkpoint found in the folder (expected a DCP `.metadata`, NxD "
                              "`tp_rank_XX_pp_rank_XX` shards, or per-rank `*rank-N*` files); give the file")
    if NXD_NAME.match(path.name) and not is_torch_file(path):
        raise CheckpointError(f"{path}: not a torch.save archive (truncated, or not a checkpoint)")
    if NXD_NAME.match(path.name):
        found = nxd(path.parent if path.parent.name != "model" else path.parent.parent, partitions)
        if found is not None:
            return found
    if _rank_of(path) and len(_siblings(path)) > 1:
        return rank_files(_siblings(path))
    tree, xser = read_tree(path)
    if isinstance(tree, dict) and "shard_metadata" in tree:
        return rank_files(_siblings(path))
    if _zero1_state(tree) is not None:
        return rank_files(_siblings(path))
    if xser:
        return Checkpoint("xser", path, tree, [path, Path(str(path) + ".tensors")])
    return Checkpoint("plain", path, tree, [path])


def select(ckpt: Checkpoint, only: str | None) -> Checkpoint:
    """The checkpoint reduced to one top-level key (`--only model`)."""
    if only is None:
        return ckpt
    if not isinstance(ckpt.tree, dict) or only not in ckpt.tree:
        keys = ", ".join(map(str, ckpt.tree)) if isinstance(ckpt.tree, dict) else "none: it is not a dict"
        raise CheckpointError(f"{ckpt.path}: no top-level key {only!r} (its keys: {keys})")
    ckpt.tree = ckpt.tree[only]
    return ckpt
