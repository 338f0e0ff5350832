"""One `torch.save` file read without running anything from it, and its tensors loaded one at a time.

The pickle is read by an unpickler that knows a short table of globals: containers, torch's tensor
rebuilders, dtypes and storage types, and the classes torch_xla and NxD put in their checkpoints
(`torch_xla.utils.serialization.TensorReference`). Each maps to plain data here; any other global stops the
read with a `CheckpointError` naming the file and the global. A tensor is read as a `Stored` (where its bytes
are, its dtype, shape and stride); `Stored.load()` reads those bytes, and nothing else, from the zip archive.
"""

from __future__ import annotations

import collections
import ctypes
import pickle
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

DTYPE_NAMES = ("float32", "float", "float64", "double", "float16", "half", "bfloat16", "int64", "long", "int32",
               "int", "int16", "short", "int8", "uint8", "bool", "complex64", "cfloat", "complex128", "cdouble",
               "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16", "uint32", "uint64")
STORAGE_DTYPES = {"FloatStorage": torch.float32, "DoubleStorage": torch.float64, "HalfStorage": torch.float16,
                  "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
                  "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
                  "BoolStorage": torch.bool, "ComplexFloatStorage": torch.complex64,
                  "ComplexDoubleStorage": torch.complex128, "UntypedStorage": torch.uint8}
XSER_MODULE = "torch_xla.utils.serialization"


class CheckpointError(Exception):
    """A checkpoint that cannot be read or converted: the message names the file and says what to do."""


@dataclass(frozen=True)
class StorageType:
    dtype: torch.dtype


@dataclass(frozen=True)
class Storage:
    file: Path
    entry: str  # the zip entry holding the bytes
    dtype: torch.dtype
    numel: int


@dataclass(frozen=True)
class Stored:
    """A tensor of a `torch.save` file: its storage, offset, shape and stride (nothing read yet)."""

    storage: Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    device: str | None = None  # the device it was pickled from, when not the CPU (an XLA tensor's "xla:0")

    @property
    def dtype(self) -> torch.dtype:
        return self.storage.dtype

    def load(self) -> torch.Tensor:
        return read_storage(self.storage).as_strided(self.shape, self.stride, self.offset)


class XserRef:
    """`torch_xla.utils.serialization.TensorReference`: the tensor is `<ref file>.tensors/tensor_<tid>.pt`."""

    tid: int

    def __setstate__(self, state) -> None:
        self.tid = state.get("tid") if isinstance(state, dict) else None


class _Parameter:
    """`torch.nn.Parameter` as the `new_type` of `_rebuild_from_type_v2`: the data is kept, the type dropped."""


def itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def read_storage(storage: Storage) -> torch.Tensor:
    """The storage's bytes as a 1-D tensor of its dtype, read from the archive into fresh memory."""
    nbytes = storage.numel * itemsize(storage.dtype)
    try:
        with zipfile.ZipFile(storage.file) as archive:
            info = archive.getinfo(storage.entry)
            if info.file_size != nbytes:
                raise CheckpointError(f"{storage.file}: the tensor data {storage.entry} holds {info.file_size} bytes, "
                                      f"its header says {nbytes}; the file is damaged, write it again")
            buffer = bytearray(nbytes)
            with archive.open(info) as stream:
                view, done = memoryview(buffer), 0
                while done < nbytes:
                    n = stream.readinto(view[done:])
                    if not n:
                        raise CheckpointError(f"{storage.file}: {storage.entry} ends early; the file is truncated")
                    done += n
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
        raise CheckpointError(f"{storage.file}: cannot read the tensor data {storage.entry} ({_reason(exc)}); "
                              "the file is truncated or damaged") from None
    if not nbytes:
        return torch.empty(0, dtype=storage.dtype)
    return torch.frombuffer(buffer, dtype=torch.uint8).view(storage.dtype)


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _rebuild_tensor(storage, offset, shape, stride, *rest) -> Stored:
    if not isinstance(storage, Storage):
        raise pickle.UnpicklingError("a tensor without its storage")
    return Stored(storage, int(offset), tuple(int(d) for d in shape), tuple(int(s) for s in stride))


def _rebuild_from_type(func, new_type, args, state):
    return func(*args)


def _first(data, *rest):
    return data


def _from_device(data, dtype=None, device=None, *rest):
    """`_rebuild_device_tensor_from_cpu_tensor`: the CPU copy, with the device it named."""
    if isinstance(data, Stored) and device is not None:
        return Stored(data.storage, data.offset, data.shape, data.stride, str(device))
    return data


def _device(*args):
    return ":".join(str(a) for a in args)


def _latin1(text, encoding="latin1"):
    if encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r}")
    return text.encode("latin1")


@lru_cache(maxsize=1)
def known_globals() -> dict[tuple[str, str], object]:
    table: dict[tuple[str, str], object] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "complex"): complex,
        ("builtins", "slice"): slice, ("_codecs", "encode"): _latin1,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor,
        ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _first,
        ("torch._utils", "_rebuild_parameter_with_state"): _first,
        # an XLA tensor pickled without `.cpu()`: its CPU copy, whatever device it named
        ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor"): _from_device,
        ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
        ("torch.nn.parameter", "Parameter"): _Parameter, ("torch", "Tensor"): _Parameter,
        ("torch", "Size"): tuple, ("torch", "device"): _device,
        (XSER_MODULE, "TensorReference"): XserRef, (XSER_MODULE, "_TensorReference"): XserRef,
    }
    for name in DTYPE_NAMES:
        if isinstance(getattr(torch, name, None), torch.dtype):
            table["torch", name] = getattr(torch, name)
    for name, dtype in STORAGE_DTYPES.items():
        table["torch", name] = StorageType(dtype)
    return table


class _Unpickler(pickle.Unpickler):
    def __init__(self, stream, file: Path, prefix: str) -> None:
        super().__init__(stream)
        self.file = file
        self.prefix = prefix

    def find_class(self, module: str, name: str):
        try:
            return known_globals()[module, name]
        except KeyError:
            raise CheckpointError(
                f"{self.file}: the checkpoint refers to `{module}.{name}`, which neuron-migrate does not read "
                "(only tensors, containers and the torch_xla / NxD checkpoint classes are read; nothing from the "
                "file is run); save that object as plain data, or convert the file where it was written") from None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.80}")
        _, storage_type, key, _location, numel = pid
        if not isinstance(storage_type, StorageType):
            raise pickle.UnpicklingError(f"unknown storage type {storage_type!r:.80}")
        return Storage(self.file, f"{self.prefix}data/{key}", storage_type.dtype, int(numel))


def read(path: str | Path):
    """The object `torch.save` wrote to PATH, with `Stored` in place of each tensor (nothing else loaded)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
            if len(pickles) != 1:
                raise CheckpointError(f"{path}: not a torch.save archive (no data.pkl in it)")
            prefix = pickles[0][: -len("data.pkl")]
            with archive.open(pickles[0]) as stream:
                return _Unpickler(stream, path, prefix).load()
    except zipfile.BadZipFile:
        raise CheckpointError(_not_zip(path)) from None
    except CheckpointError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as exc:
        raise CheckpointError(f"{path}: the pickle inside is damaged ({_reason(exc)}); the file cannot be read") \
            from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({_reason(exc)})") from None


def _not_zip(path: Path) -> str:
    try:
        head = path.read_bytes()[:2] if path.stat().st_size < 64 else path.open("rb").read(2)
    except OSError:
        head = b""
    if head[:1] == b"\x80":
        return (f"{path}: a torch.save file in the format before PyTorch 1.6, which neuron-migrate does not read; "
                "load it and save it again with a current torch")
    return f"{path}: not a complete torch.save archive (truncated, or not a checkpoint)"


def is_torch_file(path: Path) -> bool:
    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False


def leaves(tree, path: tuple = ()):
    """(key path, leaf) of every `Stored` / `XserRef` in a nested dict / list / tuple, in order."""
    if isinstance(tree, (Stored, XserRef)):
        yield path, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from leaves(v, (*path, k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from leaves(v, (*path, i))


def raw_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy (no numpy needed)."""
    n = tensor.numel() * tensor.element_size()
    if not n:
        return memoryview(b"")
    return memoryview((ctypes.c_char * n).from_address(tensor.data_ptr())).cast("B")
