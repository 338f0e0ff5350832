"""Stream a converted tree out, one tensor in memory at a time.

- `write_torch`: a `torch.save` zip archive (what `torch.load` reads): each tensor's bytes are written as
  soon as it is loaded, the pickle of the tree last.
- `write_safetensors`: the header first (shapes and dtypes are known before any tensor is read), then the data.
- `write_dcp`: a `torch.distributed.checkpoint` folder written by `dcp.save` in this one process, whose planner
  loads each tensor only when the writer asks for it, one file per tensor (its single-file writer keeps every
  tensor of a file until the file is written).
"""

from __future__ import annotations

import json
import pickle
import struct
import warnings
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import torch

from neuron_migrate.checkpoint.layouts import Leaf, dotted, tensor_leaves
from neuron_migrate.checkpoint.reader import CheckpointError, raw_bytes

ZIP64_LIMIT = 1 << 31
SAFETENSORS_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                      torch.uint8: "U8", torch.bool: "BOOL"}
for _name, _code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
    if hasattr(torch, _name):
        SAFETENSORS_DTYPES[getattr(torch, _name)] = _code
STORAGE_CLASSES = {torch.float32: "FloatStorage", torch.float64: "DoubleStorage", torch.float16: "HalfStorage",
                   torch.bfloat16: "BFloat16Storage", torch.int64: "LongStorage", torch.int32: "IntStorage",
                   torch.int16: "ShortStorage", torch.int8: "CharStorage", torch.uint8: "ByteStorage",
                   torch.bool: "BoolStorage", torch.complex64: "ComplexFloatStorage",
                   torch.complex128: "ComplexDoubleStorage"}

Advance = Callable[[int], None]
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def steady_allocator() -> None:
    """Give every allocation of 1 MB or more its own mapping, returned to the system when it is freed.

    glibc raises its mmap threshold (up to 32 MB) each time a mapped block is freed, so after the first tensor
    the later ones of a few MB come from the heap, which keeps their memory once they are freed: converting a
    checkpoint of 16 MB tensors then held 5 to 10 tensors more than one (measured, bench/checkpoint_memory.py).
    A fixed threshold stops that. No effect where the C library has no mallopt."""
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 1 << 20)
    except (OSError, AttributeError, TypeError):
        pass


def materialize(leaf: Leaf, key: str) -> torch.Tensor:
    tensor = leaf.load()
    if tuple(tensor.shape) != tuple(leaf.shape) or tensor.dtype != leaf.dtype:
        raise CheckpointError(f"{leaf.files[0]}: {key} was announced as {tuple(leaf.shape)} {leaf.dtype} and read "
                              f"as {tuple(tensor.shape)} {tensor.dtype}; the checkpoint does not match its metadata")
    return tensor.contiguous()


def _release(leaf: Leaf, following: Leaf | None) -> None:
    """Drop a flat parameter kept for its slices once the next leaf no longer reads it."""
    release = getattr(leaf.load, "release", None)
    if release is not None and (following is None or getattr(following.load, "release", None) is not release):
        release()


class _StorageOut:
    def __init__(self, key: str, dtype: torch.dtype, numel: int) -> None:
        self.key, self.dtype, self.numel = key, dtype, numel


class _TensorOut:
    def __init__(self, storage: _StorageOut, shape: tuple[int, ...]) -> None:
        self.storage, self.shape = storage, shape

    def __reduce__(self):
        stride, acc = [], 1
        for d in reversed(self.shape):
            stride.append(acc)
            acc *= d
        return (torch._utils._rebuild_tensor_v2,
                (self.storage, 0, torch.Size(self.shape), tuple(reversed(stride)), False, OrderedDict()))


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _StorageOut):
            return ("storage", getattr(torch, STORAGE_CLASSES[obj.dtype]), obj.key, "cpu", obj.numel)
        return None


def _swap(tree, table: dict[int, object]):
    if isinstance(tree, Leaf):
        return table[id(tree)]
    if isinstance(tree, dict):
        return tree.__class__((k, _swap(v, table)) for k, v in tree.items())
    if isinstance(tree, list):
        return [_swap(v, table) for v in tree]
    if isinstance(tree, tuple):
        return tuple(_swap(v, table) for v in tree)
    return tree


def _entry(archive: zipfile.ZipFile, name: str, data: bytes | memoryview) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = len(data)
    with archive.open(info, "w", force_zip64=len(data) >= ZIP64_LIMIT) as out:
        out.write(data)


def write_torch(tree, dst: Path, advance: Advance) -> None:
    items = list(tensor_leaves(tree))
    for path, leaf in items:
        if leaf.dtype not in STORAGE_CLASSES:
            raise CheckpointError(f"{dotted(path)}: {leaf.dtype} tensors are not written by this converter")
    table: dict[int, object] = {}
    with zipfile.ZipFile(dst, "w", allowZip64=True) as archive:
        for i, (path, leaf) in enumerate(items):
            if id(leaf) in table:
                continue
            tensor = materialize(leaf, dotted(path))
            _entry(archive, f"archive/data/{i}", raw_bytes(tensor))
            table[id(leaf)] = _TensorOut(_StorageOut(str(i), leaf.dtype, tensor.numel()), tuple(leaf.shape))
            del tensor
            _release(leaf, items[i + 1][1] if i + 1 < len(items) else None)
            advance(leaf.nbytes)
        stream = _Buffer()
        _Pickler(stream, protocol=2).dump(_swap(tree, table))
        _entry(archive, "archive/data.pkl", stream.getvalue())
        _entry(archive, "archive/byteorder", b"little")
        _entry(archive, "archive/version", b"3\n")
        _entry(archive, "archive/.data/version", b"3\n")


class _Buffer:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, b) -> int:
        self.chunks.append(bytes(b))
        return len(b)

    def getvalue(self) -> bytes:
        return b"".join(self.chunks)


def flat_tensors(tree, what: str) -> list[tuple[str, Leaf]]:
    """name -> tensor of a state dict, refusing anything else (safetensors holds only that)."""
    if not isinstance(tree, dict) or not all(isinstance(v, Leaf) for v in tree.values()):
        keys = ", ".join(map(str, tree)) if isinstance(tree, dict) else type(tree).__name__
        raise CheckpointError(f"{what}: safetensors holds one flat name -> tensor mapping; this checkpoint holds "
                              f"more ({keys}); pick the state dict with --only KEY (e.g. --only model)")
    return [(str(k), v) for k, v in tree.items()]


def write_safetensors(tree, dst: Path, advance: Advance, what: str) -> None:
    items = flat_tensors(tree, what)
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, leaf in items:
        if leaf.dtype not in SAFETENSORS_DTYPES:
            raise CheckpointError(f"{what}: {name} is {leaf.dtype}, which safetensors does not hold")
        header[name] = {"dtype": SAFETENSORS_DTYPES[leaf.dtype], "shape": list(leaf.shape),
                        "data_offsets": [offset, offset + leaf.nbytes]}
        offset += leaf.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for i, (name, leaf) in enumerate(items):
            tensor = materialize(leaf, name)
            out.write(raw_bytes(tensor))
            del tensor
            _release(leaf, items[i + 1][1] if i + 1 < len(items) else None)
            advance(leaf.nbytes)


def write_dcp(tree, dst: Path, advance: Advance) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    placeholders: dict[int, tuple[str, Leaf]] = {}

    def placeholder(path, leaf: Leaf) -> torch.Tensor:
        # shape and dtype without memory: the planner reads only those; resolve_data loads the values
        t = torch.zeros((), dtype=leaf.dtype).expand(leaf.shape)
        placeholders[id(t)] = (dotted(path), leaf)
        return t

    def swap(tree, path=()):
        if isinstance(tree, Leaf):
            return placeholder(path, tree)
        if isinstance(tree, dict):
            return {str(k): swap(v, (*path, k)) for k, v in tree.items()}
        if isinstance(tree, (list, tuple)):
            return tree.__class__(swap(v, (*path, i)) for i, v in enumerate(tree))
        return tree

    kept: list = [None]  # the release of the group of tensors read last (a flat parameter's slices)

    class StreamingPlanner(DefaultSavePlanner):
        def resolve_data(self, write_item):
            obj = self.lookup_object(write_item.index)
            if isinstance(obj, torch.Tensor) and id(obj) in placeholders:
                key, leaf = placeholders[id(obj)]
                release = getattr(leaf.load, "release", None)
                if kept[0] is not None and kept[0] is not release:
                    kept[0]()
                kept[0] = release
                tensor = materialize(leaf, key)
                advance(leaf.nbytes)
                return self.transform_object(write_item, tensor)
            return super().resolve_data(write_item)

    state = swap(tree)
    if not isinstance(state, dict):
        state = {"state": state}
    # one file per item: FileSystemWriter keeps each tensor it wrote until its file is finished, so one file for
    # the rank would hold the whole checkpoint in memory
    writer = dcp.FileSystemWriter(str(dst), single_file_per_rank=False, thread_count=1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # one process, on purpose
        dcp.save(state, storage_writer=writer, planner=StreamingPlanner(), no_dist=True)
