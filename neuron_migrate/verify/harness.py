"""The recorder injected into each run at start-up (by a `sitecustomize` on the subprocess's path).

It records, without any change to the program: every scalar loss `.backward()` is called on, the top-level
modules moved to a device (their outputs in eval / no-grad calls, their final parameters), the wall time
of each optimizer step, the compilations, and the device's operator counts. `max_steps` ends the run cleanly
after N optimizer steps (N forward calls of the moved modules for a program without an optimizer).

On the `plain` device (a machine without Neuron: the no-Neuron path) nothing is set up: the XLA-based stack and
torch-neuronx cannot be imported, there is no `torch.neuron`, and modules moved to the CPU are recorded too.
The record then says where the program's tensors went (`moved_to`) and, when it stopped on an exception, what
and where (`error`).

This module runs under the reference interpreter too (torch_xla, another torch version): it uses only the
standard library and torch, and imports the emulator only when asked to emulate.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections.abc import Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

CONFIG_ENV = "NEURON_MIGRATE_VERIFY"
MAX_OUTPUT_CALLS = 64
MAX_INPUT_CALLS = 4
# What a machine without Neuron does not have: the XLA-based stack and torch-neuronx (legacy or native).
NEURON_PACKAGES = ("torch_xla", "torch_neuronx", "libneuronxla", "neuronx_distributed",
                   "neuronx_distributed_training", "neuronx_distributed_inference", "transformers_neuronx",
                   "neuronx_cc", "torch_neuron", "optimum.neuron")


class Recorder:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.max_steps = config.get("max_steps")
        self.losses: list = []
        self.step_ends: list[float] = []
        self.call_ends: list[float] = []
        self.first_call: float | None = None
        self.modules: list[torch.nn.Module] = []
        self.outputs: list[list] = []
        self.forward_calls = 0
        self.optimizers = 0
        self.stopped = ""
        self.pending_stop = ""  # a --max-steps stop reached inside torch_xla.compile, made when it returns
        self.autocast = False
        self.exit_registered = False
        self.written = False
        self.loss_facts: set[tuple[str, str]] = set()  # (dtype, device type) of each loss
        self.call_facts: set[tuple[str, str]] = set()  # (dtype, device type) of each output of the modules
        self.start_fingerprints: list[list[float]] = []  # of each module's parameters when first moved
        self.moved_to: set[str] = set()  # device types of the program's .to() calls (the `plain` device)
        self.error: dict | None = None  # the exception the program stopped on
        self.final_params: list[dict] | None = None  # gathered before the process group went away
        self.final_fingerprints: list[list[float]] | None = None
        self.inputs: list[torch.Tensor] = []  # the first training calls' first tensor input (see on_inputs)

    # -- events ------------------------------------------------------------------------------------------
    def on_backward(self, tensor: torch.Tensor) -> None:
        if tensor.numel() == 1:
            self.losses.append(tensor.detach().clone())
        self.loss_facts.add((str(tensor.dtype), tensor.device.type))
        self._start_clock()

    def on_step(self) -> None:
        _synchronize(self.config["device"])
        self.step_ends.append(time.perf_counter())
        if self.max_steps and len(self.step_ends) >= self.max_steps:
            reason = f"--max-steps {self.max_steps} optimizer steps"
            if _xla_tracing(self.config["device"]):
                self.pending_stop = self.pending_stop or reason  # inside torch_xla.compile: once it has run
            else:
                self.stop(reason)

    def stop_if_pending(self) -> None:
        if self.pending_stop:
            self.stop(self.pending_stop)

    def recorded(self, module) -> bool:
        return any(m is module for m in self.modules)

    def on_module_to(self, module: torch.nn.Module) -> None:
        if not self.recorded(module):
            self.modules.append(module)
            self.start_fingerprints.append(_fingerprint(module))
            # Eager calls run the hooks; dynamo traces them as no-ops inside compiled code, where the
            # compiled entry point is wrapped instead (see on_compile).
            module.register_forward_pre_hook(lambda m, args: None if _compiling() else self.on_inputs(m, args))
            module.register_forward_hook(lambda m, args, out: None if _compiling() else self.on_call(m, out))
            self.on_compile(module)
        self.register_exit()

    def on_compile(self, module: torch.nn.Module) -> None:
        """`module.compile()`: time and record calls around the compiled entry point, outside dynamo."""
        compiled = getattr(module, "_compiled_call_impl", None)
        if compiled is not None and self.recorded(module) and not getattr(compiled, "_neuron_migrate", False):
            module._compiled_call_impl = self.wrap(module, compiled)

    def wrap(self, module: torch.nn.Module, call):
        def recorded_call(*args, **kwargs):
            self.on_inputs(module, args)
            out = call(*args, **kwargs)
            self.on_call(module, out)
            return out

        recorded_call._neuron_migrate = True
        return recorded_call

    def on_inputs(self, module: torch.nn.Module, args) -> None:
        """Keep the first tensor input of the first training calls: which batches the model trained on (a rank of
        a data-parallel program trains on its shard). Summed only when the record is written, so that no value is
        read from the device while the program runs (under torch_xla that would cut its graphs)."""
        self._start_clock()
        if len(self.inputs) < MAX_INPUT_CALLS and module.training and torch.is_grad_enabled() \
                and module in self.top_level():
            first = next(iter(_tensors(args)), None)
            if first is not None:
                self.inputs.append(first.detach().clone())

    def on_call(self, module: torch.nn.Module, output) -> None:
        self.autocast = self.autocast or _autocast_enabled()
        if module in self.top_level():
            self.call_facts.update((str(t.dtype), t.device.type) for t in _tensors(output))
        if module in self.top_level() and not (torch.is_grad_enabled() and module.training):
            if len(self.outputs) < MAX_OUTPUT_CALLS:
                self.outputs.append([t.detach().clone() for t in _tensors(output)])
            self.forward_calls += 1
            _synchronize(self.config["device"])
            self.call_ends.append(time.perf_counter())
            if self.optimizers == 0 and self.max_steps and self.forward_calls >= self.max_steps:
                self.stop(f"--max-steps {self.max_steps} forward calls")

    def _start_clock(self) -> None:
        if self.first_call is None:
            self.first_call = time.perf_counter()

    def stop(self, reason: str) -> None:
        self.stopped = reason
        self.write()
        raise SystemExit(0)

    # -- the record --------------------------------------------------------------------------------------
    def register_exit(self) -> None:
        """Write at exit; registered late so it runs before the exit handlers of libraries imported earlier."""
        if not self.exit_registered:
            atexit.register(self.write)
            self.exit_registered = True

    def top_level(self) -> list[torch.nn.Module]:
        inner = {id(sub) for m in self.modules for sub in m.modules() if sub is not m}
        return [m for m in self.modules if id(m) not in inner]

    def durations(self, ends: list[float]) -> list[float]:
        """Time of each step (or call): the first is counted from the first forward call, compilation included."""
        if not ends:
            return []
        start = self.first_call if self.first_call is not None else ends[0]
        ends = [start, *ends]
        return [b - a for a, b in zip(ends, ends[1:])]

    def record(self) -> dict:
        modules = self.top_level()
        starts = [self.start_fingerprints[i] for i, m in enumerate(self.modules) if any(m is t for t in modules)]
        return {
            "meta": {"device": self.config["device"], "rank": int(os.environ.get("RANK", 0)),
                     "world_size": int(os.environ.get("WORLD_SIZE", 1)), "pid": os.getpid(),
                     "torch": str(torch.__version__), "stopped": self.stopped, "argv": sys.argv},
            "losses": [float(t.float().cpu()) for t in self.losses],
            "step_times": self.durations(self.step_ends),
            "call_times": self.durations(self.call_ends),
            "modules": [type(m).__name__ for m in modules],
            "params": self.final_params if self.final_params is not None else self.params(modules),
            "outputs": [[t.float().cpu() if t.is_floating_point() else t.cpu() for t in call]
                        for call in self.outputs],
            "inputs": [[list(t.shape), float(t.double().sum().cpu())] for t in self.inputs],
            "autocast": self.autocast,
            "output_dtypes": sorted({str(t.dtype) for call in self.outputs for t in call}),
            "param_dtypes": sorted({str(p.dtype) for m in modules for p in m.parameters()}),
            "loss_dtypes": sorted({dtype for dtype, _ in self.loss_facts}),
            "call_dtypes": sorted({dtype for dtype, _ in self.call_facts}),
            "param_devices": sorted({p.device.type for m in modules for p in m.parameters()}),
            "loss_devices": sorted({device for _, device in self.loss_facts}),
            "call_devices": sorted({device for _, device in self.call_facts}),
            "module_types": sorted({type(sub).__name__ for m in modules for sub in m.modules()}),
            "params_changed": [start != end for start, end in zip(starts, self.final_fingerprints or
                                                                   [_fingerprint(m) for m in modules])],
            "files": _imported_files(self.config.get("project_root") or self.config.get("script_root")),
            "moved_to": sorted(self.moved_to),
            "error": self.error,
            **_safe_device_facts(self.config["device"]),
        }

    def params(self, modules: list[torch.nn.Module]) -> list[dict]:
        """The floating-point state of each module; a sharded parameter (FSDP2, DTensor) gathered whole."""
        return [{k: _full(v).detach().float().cpu() for k, v in m.state_dict().items()
                 if isinstance(v, torch.Tensor) and v.is_floating_point()} for m in modules]

    def before_destroy(self) -> None:
        """Gathering a sharded parameter is a collective: done while the process group still exists."""
        modules = self.top_level()
        if self.final_params is None and any(_is_sharded(p) for m in modules for p in m.parameters()):
            self.final_params = self.params(modules)
            self.final_fingerprints = [_fingerprint(m) for m in modules]

    def write(self) -> None:
        if self.written:
            return
        self.written = True
        path = os.path.join(self.config["out"], f"record-{os.getpid()}.pt")
        torch.save(self.record(), path + ".tmp")
        os.replace(path + ".tmp", path)


def _fingerprint(module: torch.nn.Module) -> list[float]:
    """A cheap summary of the parameters' values: a training step changes it."""
    with torch.no_grad():
        return [float(_full(p).detach().double().sum().cpu()) for p in module.parameters()]


def _is_sharded(value) -> bool:
    return type(value).__name__ == "DTensor" or type(getattr(value, "data", None)).__name__ == "DTensor"


def _full(value: torch.Tensor) -> torch.Tensor:
    """A DTensor (an FSDP2 or tensor-parallel shard) as the whole tensor, gathered from every rank."""
    return value.full_tensor() if hasattr(value, "full_tensor") and hasattr(value, "placements") else value


def _imported_files(root: str | None) -> list[str]:
    """The program's own files it imported (under the project's copy), relative to it."""
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        path = os.path.abspath(path)
        if root is not None and path.startswith(root + os.sep):
            files.add(os.path.relpath(path, root))
    return sorted(files)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return [t for t in (getattr(value, k, None) for k in ("logits", "last_hidden_state")) if t is not None]


def _compiling() -> bool:
    return torch.compiler.is_compiling()


def _autocast_enabled() -> bool:
    for device_type in ("neuron", "xla", "cpu", "cuda"):
        try:
            if torch.is_autocast_enabled(device_type):
                return True
        except RuntimeError:  # a device type this torch does not know
            continue
    return False


def _synchronize(device: str) -> None:
    if device == "neuron":
        torch.neuron.synchronize()


def _safe_device_facts(device: str) -> dict:
    """The device's counters; a record is written without them rather than not at all."""
    try:
        return _device_facts(device)
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write(f"neuron-migrate verify: the device's counters could not be read: {exc!r}\n")
        return {}


def _device_facts(device: str) -> dict:
    if device in ("emulated", "cpu"):
        from neuron_migrate.verify import dynamo, emulator

        emulated = {"emulator": emulator.backend(), "emulator_build_error": emulator._state.get("build_error")
                    } if device == "emulated" else {}
        return {**emulated, "ops": dict(emulator.STATS.ops), "mixed": dict(emulator.STATS.mixed),
                "compilations": [vars(c) for c in dynamo.LOG.compilations]}
    if device == "neuron":
        import torch_neuronx

        return {"fallback_ops": sorted(torch_neuronx.get_fallback_ops()),
                "dynamo_metrics": repr(torch_neuronx.get_dynamo_metrics())}
    if device == "xla":
        if "torch_xla" not in sys.modules:  # a program that never used torch_xla: importing it at exit fails
            return {}
        import torch_xla.debug.metrics as met

        data = met.metric_data("CompileTime")
        return {"xla_compilations": data[0] if data else 0}
    return {}


def _moved_to(args, kwargs) -> str | None:
    """The device type a `.to(...)` call moves to (None: a dtype-only call, or one this harness cannot parse)."""
    try:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
    except Exception:  # not a device move this harness understands: the program will raise on its own
        return None
    return None if device is None else device.type


def _install_hooks(recorder: Recorder) -> None:
    backward = torch.Tensor.backward

    def recorded_backward(self, *args, **kwargs):
        recorder.on_backward(self)
        return backward(self, *args, **kwargs)

    torch.Tensor.backward = recorded_backward

    module_to = torch.nn.Module.to
    plain = recorder.config["device"] == "plain"  # no device: the CPU is where the model goes

    def recorded_to(self, *args, **kwargs):
        out = module_to(self, *args, **kwargs)
        device = _moved_to(args, kwargs)
        if device is not None and (plain or device not in ("cpu", "meta")):
            recorder.on_module_to(self)
        if plain and device is not None:
            recorder.moved_to.add(device)
        return out

    torch.nn.Module.to = recorded_to
    if plain:
        tensor_to = torch.Tensor.to

        def recorded_tensor_to(self, *args, **kwargs):
            device = _moved_to(args, kwargs)
            if device is not None:
                recorder.moved_to.add(device)
            return tensor_to(self, *args, **kwargs)

        torch.Tensor.to = recorded_tensor_to

    module_compile = torch.nn.Module.compile

    def recorded_compile(self, *args, **kwargs):
        module_compile(self, *args, **kwargs)
        recorder.on_compile(self)

    torch.nn.Module.compile = recorded_compile

    torch_compile = torch.compile

    def recorded_torch_compile(model=None, *args, **kwargs):
        compiled = torch_compile(model, *args, **kwargs) if model is not None else torch_compile(*args, **kwargs)
        if isinstance(model, torch.nn.Module) and recorder.recorded(model) and hasattr(compiled, "forward"):
            compiled.forward = recorder.wrap(model, compiled.forward)
        return compiled

    torch.compile = recorded_torch_compile

    optimizer_init = torch.optim.Optimizer.__init__

    def recorded_init(self, *args, **kwargs):
        recorder.optimizers += 1
        recorder.register_exit()
        return optimizer_init(self, *args, **kwargs)

    torch.optim.Optimizer.__init__ = recorded_init
    register_optimizer_step_post_hook(lambda *args: recorder.on_step())
    _gather_before_destroy(recorder)


def _gather_before_destroy(recorder: Recorder) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    destroy = dist.destroy_process_group

    def recorded_destroy(*args, **kwargs):
        recorder.before_destroy()
        return destroy(*args, **kwargs)

    dist.destroy_process_group = recorded_destroy


def _setup_device(config: dict) -> None:
    device = config["device"]
    if device == "emulated":
        from neuron_migrate.verify import emulator

        emulator.install(strict=config.get("strict", False))
    elif device == "cpu":
        from neuron_migrate.verify import cpu_alias

        cpu_alias.install()
    elif device == "neuron":
        import torch_neuronx

        torch_neuronx.clear_op_tracking()
    elif device == "plain":
        sys.meta_path.insert(0, _Absent(NEURON_PACKAGES))


class _Absent:
    """A meta path finder for packages this machine does not have: importing them fails as if not installed."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == name or fullname.startswith(name + ".") for name in self.names):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def _error_facts(kind, value, tb, roots: list[str]) -> dict:
    """What the program stopped on, and the innermost line of the program's own files it was raised from."""
    import traceback

    facts = {"type": kind.__name__, "message": str(value)[:400], "module": getattr(value, "name", None)
             if isinstance(value, ImportError) else None, "where": None, "line": None}
    for frame in reversed(traceback.extract_tb(tb)):
        path = os.path.abspath(frame.filename)
        root = next((r for r in roots if path.startswith(r + os.sep)), None)
        if root is not None:
            facts["where"] = f"{os.path.relpath(path, root)}:{frame.lineno}"
            facts["line"] = (frame.line or "").strip()
            break
    return facts


def _record_errors(recorder: Recorder) -> None:
    previous = sys.excepthook
    roots = [r for r in (recorder.config.get("script_root"), recorder.config.get("root")) if r]

    def excepthook(kind, value, tb):
        try:
            recorder.error = _error_facts(kind, value, tb, roots)
        finally:
            previous(kind, value, tb)

    sys.excepthook = excepthook


class _PatchOnImport:
    """A meta path finder that patches one module right after it is first imported (without importing it)."""

    def __init__(self, name: str, patch) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            self.patch(module)

        spec.loader.exec_module = patched
        return spec


def _xla_tracing(device: str) -> bool:
    """Inside a function torch_xla.compile traces (`full_graph=True`), where nothing may run: the losses cannot be
    read there, so a stop waits until the function has returned."""
    if device != "xla" or "torch_xla" not in sys.modules:
        return False
    import torch_xla

    return not torch_xla._XLAC._get_allow_execution()


def _stops_after_compiled(recorder) -> Callable:
    """Patch for the `torch_xla` module: a function `torch_xla.compile` returns makes a stop the step hook deferred
    (the stop raises SystemExit, as it does outside)."""
    def patch(module) -> None:
        compile_ = module.compile

        def compile(f=None, *args, **kwargs):
            compiled = compile_(f, *args, **kwargs)
            if f is None:
                return compiled  # the context manager: a deferred stop is made at exit

            def run(*a, **k):
                out = compiled(*a, **k)
                recorder.stop_if_pending()
                return out
            return run

        module.compile = compile
    return patch


def _single_process_spawn(module) -> None:
    """torch_xla runs one process on the CPU (`xmp.spawn(nprocs=8)` is refused there): the reference runs the
    spawned function once, as rank 0 of 1."""
    spawn = module.spawn

    def spawn_one(fn, args=(), nprocs=None, *rest, **kwargs):
        if nprocs not in (None, 1):
            sys.stderr.write(f"neuron-migrate verify: xmp.spawn(nprocs={nprocs}) runs one process on torch_xla's "
                             "CPU device\n")
        return spawn(fn, args, None, *rest, **kwargs)

    module.spawn = spawn_one


def start() -> Recorder | None:
    """Called by the injected sitecustomize: set up the device and start recording."""
    text = os.environ.get(CONFIG_ENV)
    if not text:
        return None
    config = json.loads(text)
    if config.get("nproc", 1) > 1 and "RANK" not in os.environ:
        return None  # the torchrun launcher: only its workers run the program
    _setup_device(config)
    if config["device"] == "xla":
        sys.meta_path.insert(0, _PatchOnImport("torch_xla.distributed.xla_multiprocessing", _single_process_spawn))
    if config.get("seed") is not None:
        torch.manual_seed(config["seed"])
    recorder = Recorder(config)
    if config["device"] == "xla":
        if "torch_xla" in sys.modules:
            _stops_after_compiled(recorder)(sys.modules["torch_xla"])
        else:
            sys.meta_path.insert(0, _PatchOnImport("torch_xla", _stops_after_compiled(recorder)))
    _install_hooks(recorder)
    _record_errors(recorder)
    atexit.register(recorder.write)
    try:
        import multiprocessing.util

        multiprocessing.util.Finalize(None, recorder.write, exitpriority=100)  # children exit with os._exit
    except ImportError:
        pass
    return recorder
