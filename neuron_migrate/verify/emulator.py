"""The emulated `neuron` device: a PrivateUse1 backend written in Python that keeps tensor data on the CPU.

A `NeuronTensor` is a wrapper tensor: it reports device `neuron:0` to PyTorch (autograd, optimizers, modules,
serialization all see a device tensor) and holds a CPU tensor with the data. Every aten operator that reaches
it runs on that CPU tensor through `__torch_dispatch__`; operators with no neuron tensor argument (factories
such as `torch.zeros(..., device="neuron")`) reach the PrivateUse1 key and run through the same code. Each
operator run is counted (the fallback prediction reads the counts).

Each process owns one emulated device: `neuron:N` (a rank's `neuron:{local_rank}`) names it, and its tensors
report index 0, because PyTorch's Python device guard counts one device (the autograd engine relies on it).

In strict mode an operator that mixes neuron tensors with CPU tensors (other than 0-dim ones, which devices
accept as scalars) raises like a real device would; otherwise the mix is counted and reported.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import Counter

import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

NAME = "neuron"
DEVICE = f"{NAME}:0"
aten = torch.ops.aten

# Operators that legitimately take tensors from two devices.
CROSS_DEVICE_OPS = frozenset({"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "set_", "index",
                              "index_put_", "_index_put_impl_"})


class Stats:
    """What the emulator saw: operators run on the device, and operators that mixed devices."""

    def __init__(self) -> None:
        self.ops: Counter[str] = Counter()
        self.mixed: Counter[str] = Counter()
        self.tracked: Counter[str] = Counter()  # since torch_neuronx.clear_op_tracking()

    def clear_tracked(self) -> None:
        self.tracked.clear()


STATS = Stats()
_state = {"strict": False, "device": 0, "installed": False, "native": False}
BACKEND_ENV = "NEURON_MIGRATE_EMULATOR"  # "cpp", "python" or unset (the C++ one where it builds)


@functools.lru_cache(maxsize=None)
def op_name(func) -> str:
    """`aten::add.Tensor` -> "add.Tensor"; the default overload is left out ("mm")."""
    name = func._schema.name.split("::", 1)[-1]
    return name if func._overloadname == "default" else f"{name}.{func._overloadname}"


class NeuronTensor(torch.Tensor):
    """A tensor on the emulated `neuron` device; `.cpu_data` holds its values."""

    cpu_data: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, data: torch.Tensor):
        out = torch.Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), storage_offset=data.storage_offset(), dtype=data.dtype,
            layout=data.layout, device=DEVICE, requires_grad=False)
        out.cpu_data = data
        return out

    def __repr__(self, *, tensor_contents=None):
        if torch._subclasses.fake_tensor.is_fake(self.cpu_data):  # while torch.compile traces
            return f"NeuronTensor(fake, size={tuple(self.shape)}, dtype={self.dtype})"
        if tensor_contents is None:
            tensor_contents = torch._tensor_str._tensor_str(self.cpu_data.detach(), len("tensor("))
        return "tensor(" + torch._tensor_str._str(self, tensor_contents=tensor_contents).partition("(")[2]

    def __format__(self, spec: str) -> str:
        if self.dim() == 0:
            return self.item().__format__(spec)
        return super().__format__(spec)

    def __reduce_ex__(self, protocol):
        # what PyTorch saves for a device tensor without storage, so the file loads with weights_only=True
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (self.cpu_data.detach().clone(), self.dtype, str(self.device), self.requires_grad))

    def tolist(self):
        return self.cpu_data.tolist()

    @classmethod
    @torch._dynamo.disable  # runs below a compiled graph too; dynamo must not trace the emulator itself
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {})

    # A traceable wrapper subclass: torch.compile traces the CPU tensor inside (see dynamo.py).
    def __tensor_flatten__(self):
        return ["cpu_data"], None

    @staticmethod
    def __tensor_unflatten__(inner, context, outer_size, outer_stride):
        return NeuronTensor(inner["cpu_data"])


def _check_devices(func, flat) -> None:
    name = op_name(func).split(".")[0]
    tensors = [v for v in flat if isinstance(v, torch.Tensor)]
    if name in CROSS_DEVICE_OPS or not any(v.device.type == NAME for v in tensors):
        return
    if not any(v.device.type == "cpu" and v.dim() > 0 for v in tensors):
        return
    STATS.mixed[op_name(func)] += 1
    if _state["strict"]:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, {NAME}:0 and cpu! "
            f"(operator aten::{name}: a tensor was not moved with .to(device); the emulated device runs in "
            "strict mode)")


def to_cpu(value):
    """What a value means on the CPU: the data of a neuron tensor, `cpu` for a neuron device."""
    if isinstance(value, NeuronTensor):
        return value.cpu_data
    if isinstance(value, torch.Tensor) and value.device.type == NAME:  # a fake tensor while torch.compile traces
        return value.to("cpu")
    if isinstance(value, torch.device) and value.type == NAME:
        return torch.device("cpu")
    if isinstance(value, str) and value.split(":")[0] == NAME:
        return "cpu"
    return value


def _stays_on_cpu(func, args, kwargs) -> bool:
    """`_to_copy` to another device (`t.cpu()`): the result leaves the device."""
    if func is not aten._to_copy.default:
        return False
    device = kwargs.get("device")
    return device is not None and torch.device(device).type != NAME


def _run(func, args, kwargs):
    flat, _ = tree_flatten((args, kwargs))
    _check_devices(func, flat)
    STATS.ops[op_name(func)] += 1
    STATS.tracked[op_name(func)] += 1
    out = func(*tree_map(to_cpu, args), **tree_map(to_cpu, kwargs))
    if _stays_on_cpu(func, args, kwargs):
        return out
    # an in-place or out= operator returns its argument: give back the caller's object, with its new sizes
    for v in flat:
        if isinstance(v, NeuronTensor):
            _refresh(v)
    originals = {id(v.cpu_data): v for v in flat if isinstance(v, NeuronTensor)}
    originals.update({id(v): v for v in flat if isinstance(v, torch.Tensor) and not isinstance(v, NeuronTensor)})
    return tree_map(lambda v: _wrap(v, originals), out)


def _refresh(tensor: NeuronTensor) -> None:
    """After `resize_` or an out= operator resized the data, the wrapper reports the data's sizes again."""
    data = tensor.cpu_data
    if torch._subclasses.fake_tensor.is_fake(data):
        return
    if (tensor.shape, tensor.stride(), tensor.storage_offset()) == (data.shape, data.stride(), data.storage_offset()):
        return
    torch._C._swap_tensor_impl(tensor, NeuronTensor(data))  # the caller's object keeps its identity and data


def _wrap(value, originals):
    if not isinstance(value, torch.Tensor):
        return value
    original = originals.get(id(value))
    return NeuronTensor(value) if original is None else original


class Module:
    """`torch.neuron`: the device module the emulated backend registers."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def init() -> None:
        pass

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        return int(os.environ.get("NEURON_MIGRATE_EMULATED_DEVICES") or os.environ.get("LOCAL_WORLD_SIZE") or 1)

    @staticmethod
    def current_device() -> int:
        return _state["device"]

    @staticmethod
    def set_device(device) -> None:
        index = device if isinstance(device, int) else (torch.device(device).index or 0)
        if not 0 <= index < Module.device_count():
            raise RuntimeError(f"invalid {NAME} device index {index}: {Module.device_count()} device(s) visible")
        _state["device"] = index

    @staticmethod
    @contextlib.contextmanager
    def device(device):
        previous = _state["device"]
        Module.set_device(device)
        try:
            yield
        finally:
            _state["device"] = previous

    @staticmethod
    def get_device_name(device=None) -> str:
        return "Emulated NeuronCore (neuron-migrate verify, CPU)"

    @staticmethod
    def synchronize(device=None) -> None:
        pass

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.float32, torch.float16, torch.bfloat16]

    @staticmethod
    def is_bf16_supported() -> bool:
        return True

    # The emulated device draws random numbers from the CPU generator, so seeding is the CPU's.
    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.default_generator.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def seed() -> None:
        torch.default_generator.seed()

    @staticmethod
    def initial_seed() -> int:
        return torch.initial_seed()

    @staticmethod
    def get_rng_state(device=None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device=None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def empty_cache() -> None:
        pass

    @staticmethod
    def memory_allocated(device=None) -> int:
        return 0

    max_memory_allocated = memory_reserved = max_memory_reserved = memory_allocated

    @staticmethod
    def memory_stats(device=None) -> dict:
        return {}

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        pass

    # The compilation figures (torch.neuron.get_dynamo_metrics): the emulated device compiles nothing.
    @staticmethod
    def get_dynamo_metrics() -> dict:
        return {}

    @staticmethod
    def reset_dynamo_metrics() -> None:
        pass


class Event:
    """`torch.neuron.Event`: the emulated device runs every operator at once, so an event is always complete."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream=None) -> None:
        import time

        self._time = time.perf_counter()

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "Event") -> float:
        if self._time is None or end._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        return (end._time - self._time) * 1000.0


class Stream:
    """`torch.neuron.Stream`: one queue, already drained (operators run when called)."""

    def __init__(self, device=None, priority: int = 0, **kwargs) -> None:
        self.device_index = 0
        self.priority = priority

    def wait_stream(self, stream: "Stream") -> None:
        pass

    def wait_event(self, event: Event) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        pass


    @property
    def device(self) -> torch.device:
        return torch.device(DEVICE)


_DEFAULT_STREAM = Stream()


def _add_streams(module) -> None:
    module.Stream, module.Event = Stream, Event
    module.current_stream = module.default_stream = staticmethod(lambda device=None: _DEFAULT_STREAM)
    module.set_stream = staticmethod(lambda stream: None)
    module.stream = staticmethod(lambda stream=None: contextlib.nullcontext(stream))
    module.wait_stream = module.wait_event = module.record_event = staticmethod(lambda *args, **kwargs: None)


_add_streams(Module)


def _known_fallbacks() -> dict[str, str]:
    if "fallbacks" not in _state:
        from neuron_migrate.verify.fallbacks import known_fallbacks

        _state["fallbacks"] = known_fallbacks()
    return _state["fallbacks"]


def get_fallback_ops() -> list[str]:
    """Like the native `torch_neuronx.get_fallback_ops()`: the operators run since the tracking was cleared that
    the native backend is known to run on the CPU (the prediction of rules/fallback_ops.toml)."""
    known = _known_fallbacks()
    return sorted(f"aten::{name}" for name in STATS.tracked if f"aten::{name.split('.')[0]}" in known)


def get_executed_ops() -> list[str]:
    """The operators run on the device since the tracking was cleared (the predicted fallbacks left out)."""
    fallback = set(get_fallback_ops())
    return sorted(f"aten::{name}" for name in STATS.tracked if f"aten::{name}" not in fallback)


def clear_op_tracking() -> None:
    STATS.clear_tracked()


def _torch_neuronx_stub():
    """A `torch_neuronx` with the native API the emulated device can honour, for programs that import it."""
    import importlib.machinery
    import types

    stub = types.ModuleType("torch_neuronx")
    # `importlib.util.find_spec("torch_neuronx")`, the migrated feature detection, raises ValueError on a module
    # in sys.modules without a spec: the stand-in answers it as the installed package does
    stub.__spec__ = importlib.machinery.ModuleSpec("torch_neuronx", None, is_package=True)
    stub.__doc__ = "neuron-migrate verify: the emulated device's stand-in for the native torch_neuronx API"
    stub.__version__ = "0+emulated"
    stub.__path__ = []  # a package: `import torch_neuronx.xyz` fails with a clear ModuleNotFoundError
    for name in ("get_fallback_ops", "get_executed_ops", "clear_op_tracking"):
        setattr(stub, name, globals()[name])
    for name in ("device_count", "current_device", "set_device", "synchronize", "device", "empty_cache",
                 "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                 "memory_stats", "reset_peak_memory_stats"):
        setattr(stub, name, getattr(torch.get_device_module(NAME), name))
    _add_streams(stub)
    stub.is_neuron_runtime_initialized = lambda: True
    stub.get_dynamo_metrics = lambda: {}
    stub.reset_dynamo_metrics = lambda: None
    return stub


def _pin_memory_is_a_no_op() -> None:
    """Pinned host memory speeds up copies to a real device; on the emulated one (the CPU) it is a no-op, as
    `pin_memory=True` is on a machine without an accelerator."""
    pin, pinned = torch.Tensor.pin_memory, torch.Tensor.is_pinned

    def pin_memory(self, device=None):
        if device is None or torch.device(device).type == NAME:
            return self
        return pin(self, device)

    def is_pinned(self, device=None):
        if device is None or torch.device(device).type == NAME:
            return False
        return pinned(self, device)

    torch.Tensor.pin_memory, torch.Tensor.is_pinned = pin_memory, is_pinned


class _GeneratorType(type(torch.Generator)):
    """`torch.Generator` stays the type of every generator, those PyTorch makes itself included."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch._C.Generator)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, torch._C.Generator)


class Generator(torch._C.Generator, metaclass=_GeneratorType):
    """`torch.Generator(device="neuron")` on the Python emulated device: PyTorch asks a Python backend's hooks for
    no generator, so a device generator is a CPU generator of its own that reports the `neuron` device. Its
    numbers are those of the C++ emulated device's generator (a CPU generator of its own there too)."""

    def __new__(cls, device="cpu"):
        if str(device).split(":")[0] != NAME:
            return torch._C.Generator(device)
        return super().__new__(cls, "cpu")

    def __init__(self, device="cpu") -> None:
        pass

    @property
    def device(self) -> torch.device:
        return torch.device(DEVICE)


@torch._dynamo.disable
def _device_kernel(op, *args, **kwargs):
    return _run(op, args, kwargs)


# Factories whose composite kernel creates an empty tensor and resizes it through the out= variant: a wrapper's
# sizes are fixed when it is made, so they run here as a whole (on the CPU) instead.
RESIZING_FACTORIES = {
    "arange": ("default", "start", "start_step"), "eye": ("default", "m"), "range": ("default", "step"),
    "linspace": ("default", "Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"),
    "logspace": ("default", "Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"),
    "tril_indices": ("default",), "triu_indices": ("default",), "randperm": ("default", "generator"),
}


def register_device_kernels(kernel) -> tuple[torch.library.Library, ...]:
    """`kernel(op, *args, **kwargs)` for every operator that reaches the PrivateUse1 key.

    Operators get there without a neuron tensor argument (factories) or from C++ code that hides the Python
    key (`torch.tensor(..., device=...)` copies there); the boxed fallback cannot run those copies.
    """
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(kernel, "PrivateUse1")
    copies = torch.library.Library("aten", "IMPL")
    for name in ("copy_", "_copy_from", "_copy_from_and_resize"):
        copies.impl(name, functools.partial(kernel, getattr(aten, name).default), "PrivateUse1")
    for name, overloads in RESIZING_FACTORIES.items():
        for overload in overloads:
            op = getattr(getattr(aten, name), overload, None)
            if op is not None:
                copies.impl(f"{name}.{overload}" if overload != "default" else name,
                            functools.partial(kernel, op), "PrivateUse1")
    return fallback, copies


def backend() -> str:
    """Which emulated device runs in this process: "cpp" (real storage) or "python"."""
    return "cpp" if _state["native"] else "python"


def install(strict: bool = False) -> None:
    """Register the emulated `neuron` device in this process (once): the C++ one with real storage where it
    builds (`native/`), else this Python one; NEURON_MIGRATE_EMULATOR=cpp|python chooses."""
    _state["strict"] = strict
    if _state["installed"]:
        return
    choice = os.environ.get(BACKEND_ENV, "").strip().lower()
    if choice not in ("", "auto", "cpp", "python"):
        raise RuntimeError(f"{BACKEND_ENV}={choice!r}: expected cpp, python or auto")
    if choice != "python":
        from neuron_migrate.verify import native

        try:
            return native.install(strict)
        except native.BuildError as exc:
            if choice == "cpp":
                raise
            _state["build_error"] = str(exc)
    install_python()


def install_python() -> None:
    """The Python emulated device: CPU kernels on CPU data, behind tensors that report the `neuron` device."""
    from neuron_migrate.verify import autocast

    _setup_privateuseone_for_python_backend(NAME, backend_module=Module())
    _state["libraries"] = (*register_device_kernels(_device_kernel), *autocast.install())
    _pin_memory_is_a_no_op()
    torch.Generator = Generator
    install_common()


def install_common() -> None:
    """What both emulated devices share: compile backend, process group, the `torch_neuronx` stand-in."""
    from neuron_migrate.verify import autocast, distributed, dynamo

    if _state["native"]:
        _state["libraries"] = tuple(autocast.install())
    dynamo.install()
    distributed.install()
    import importlib.util
    import sys

    if "torch_neuronx" not in sys.modules and importlib.util.find_spec("torch_neuronx") is None:
        sys.modules["torch_neuronx"] = _torch_neuronx_stub()
    _state["installed"] = True
