"""The Target: how migrated code spells the device it runs on. The only module that writes `torch.neuron.` or
`torch.accelerator.` into migrated code (catalogue rename rows carry their own two spellings; a test keeps it so).

`--device-style neuron` (default) writes the `neuron` device and its module: `torch.device("neuron")`,
`torch.neuron.synchronize()`. `--device-style accelerator` writes code that runs on Trainium, on a GPU and on the
CPU alike: one module-level

    DEVICE = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")

per file, every rewritten device reference uses it (`DEVICE`, `DEVICE.type`), and device-module calls take their
`torch.accelerator` (or device-neutral `torch`) spelling.

A rule asks `target(ctx)` for the file's Target and calls one method per idea: device, device type, synchronize,
manual_seed, device_count, set_device, compile backend, process-group backend, device-module functions.
"""

from __future__ import annotations

from neuron_migrate.engine.facts import fact

NEURON = "neuron"
ACCELERATOR = "accelerator"
STYLES = (NEURON, ACCELERATOR)
DEVICE_NAMES = ("DEVICE", "ACCELERATOR_DEVICE", "TARGET_DEVICE")

# Device-module functions (`torch.cuda.<f>` namesakes) that torch.accelerator offers, under its name.
ACCELERATOR_NAMESAKES = {"is_available": "is_available", "device_count": "device_count",
                         "synchronize": "synchronize", "current_device": "current_device_index",
                         "set_device": "set_device_index", "current_stream": "current_stream",
                         "set_stream": "set_stream"}


@fact
def device_target(ctx) -> Target:
    """The file's Target, made on first use (it remembers the file's module-level device name)."""
    return Target(ctx)


def native_device(ctx) -> str:
    """How the native device is spelled in the file's style, for marker prose (adds nothing to the file)."""
    torch = ctx.analysis.local_name_for("torch", ctx.analysis.module_scope) or "torch"
    if portable(ctx):
        return f"{torch}.accelerator.current_accelerator()"
    return f"{torch}.device({ctx.string(NEURON)})"


def target(ctx) -> Target:
    return ctx.facts.device_target


def portable(ctx) -> bool:
    return ctx.settings.device_style == ACCELERATOR


class Target:
    """Spellings of the target device for one file, in the file's device style."""

    __slots__ = ("ctx", "device_name")

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.device_name: str | None = None  # the module-level device variable, once defined

    @property
    def portable(self) -> bool:
        return portable(self.ctx)

    def _torch(self) -> str:
        return self.ctx.module_ref("torch")

    # -- the device --------------------------------------------------------------------------------------
    def module_device(self) -> str:
        """The name of the file's module-level device variable, defined once on first use."""
        if self.device_name is None:
            ctx = self.ctx
            scope = ctx.analysis.module_scope
            name = next((n for n in DEVICE_NAMES if not ctx._name_taken(n)), DEVICE_NAMES[-1])
            torch = ctx.module_ref("torch", scope=scope)
            ctx.define(f"{name} = {torch}.accelerator.current_accelerator(check_available=True) or "
                       f"{torch}.device({ctx.string('cpu')})")
            self.device_name = name
        return self.device_name

    def device(self, index: str | None = None) -> str:
        """An expression for the target device (with an index: that device of the target type)."""
        ctx = self.ctx
        if self.portable:
            name = self.module_device()
            return f"{self._torch()}.device({name}.type, {index})" if index else name
        torch = self._torch()
        return f"{torch}.device({ctx.string(NEURON)}, {index})" if index else f"{torch}.device({ctx.string(NEURON)})"

    def current_device(self) -> str:
        """This process's device with its index (`torch.device("neuron", torch.neuron.current_device())`), for APIs
        that warn on a device without one; in the portable style the device itself (the CPU has no index)."""
        return self.device() if self.portable else self.device(f"{self.device_module('current_device')}()")

    def device_type(self) -> str:
        """An expression for the target device type (`"neuron"`, or `DEVICE.type`)."""
        return f"{self.module_device()}.type" if self.portable else self.ctx.string(NEURON)

    # -- the device module -------------------------------------------------------------------------------
    def synchronize_call(self) -> str:
        """Wait for the device, as an expression (a no-op where there is no accelerator, in the portable style)."""
        torch = self._torch()
        if not self.portable:
            return f"{torch}.neuron.synchronize()"
        return f"({torch}.accelerator.synchronize() if {torch}.accelerator.is_available() else None)"

    def synchronize_function(self) -> str:
        """The function that waits for the device, to pass where a function is expected (no-op without an
        accelerator, in the portable style)."""
        torch = self._torch()
        if not self.portable:
            return f"{torch}.neuron.synchronize"
        return f"{torch}.accelerator.synchronize if {torch}.accelerator.is_available() else lambda: None"

    def synchronize_statement(self) -> str:
        """Wait for the device, as a statement; in the portable style a form that is a no-op without an accelerator."""
        if not self.portable:
            return self.synchronize_call() + "\n"
        torch = self._torch()
        return f"if {torch}.accelerator.is_available():\n    {torch}.accelerator.synchronize()\n"

    def manual_seed(self) -> str:
        """The function that seeds the device generator: `torch.neuron.manual_seed`; in the portable style
        `torch.manual_seed` (it seeds the CPU and every device generator, so it runs anywhere)."""
        torch = self._torch()
        return f"{torch}.manual_seed" if self.portable else f"{torch}.neuron.manual_seed"

    def initial_seed(self) -> str:
        """The seed the device generator was last seeded with, as an expression; in the portable style the CPU
        generator's (`torch.manual_seed`, what seeds are rewritten to there, seeds both)."""
        torch = self._torch()
        return f"{torch}.initial_seed()" if self.portable else f"{torch}.neuron.initial_seed()"

    def get_rng_state(self) -> str:
        """The device generator's state (a tensor), as an expression; in the portable style the CPU generator's
        where there is no accelerator."""
        torch = self._torch()
        if not self.portable:
            return f"{torch}.neuron.get_rng_state()"
        device = self.module_device()
        return f"({torch}.get_device_module({device}).get_rng_state() if {device}.type != {self.ctx.string('cpu')} " \
               f"else {torch}.get_rng_state())"

    def set_rng_state(self, state: str) -> str:
        """Restore a state `get_rng_state()` returned, as an expression."""
        torch = self._torch()
        if not self.portable:
            return f"{torch}.neuron.set_rng_state({state})"
        device = self.module_device()
        return f"({torch}.get_device_module({device}).set_rng_state({state}) if {device}.type != " \
               f"{self.ctx.string('cpu')} else {torch}.set_rng_state({state}))"

    def set_rng_state_statement(self, state: str) -> str:
        """`set_rng_state(state)` as a statement (in the portable style an `if` on the device type)."""
        if not self.portable:
            return self.set_rng_state(state) + "\n"
        torch, device = self._torch(), self.module_device()
        return f"if {device}.type != {self.ctx.string('cpu')}:\n" \
               f"    {torch}.get_device_module({device}).set_rng_state({state})\nelse:\n" \
               f"    {torch}.set_rng_state({state})\n"

    def device_count(self) -> str:
        """The function that counts the devices this process sees."""
        return self.device_module("device_count")

    def select_device_statement(self, index: str) -> str:
        """Make device `index` (the local rank) this process's current device."""
        torch = self._torch()
        if self.portable:
            return f"if {torch}.accelerator.is_available():\n    {torch}.accelerator.set_device_index({index})\n"
        return f"{torch}.neuron.set_device({index})\n"

    def device_module(self, name: str) -> str:
        """`torch.neuron.<name>` (a function of the device module, the `torch.cuda` namesake); in the portable style
        its torch.accelerator spelling where torch.accelerator has one (memory queries and the rest stay
        `torch.neuron.<name>`: see the NM32x fixtures' opt-out)."""
        torch = self._torch()
        if self.portable and name in ACCELERATOR_NAMESAKES:
            return f"{torch}.accelerator.{ACCELERATOR_NAMESAKES[name]}"
        return f"{torch}.neuron.{name}"

    def compile_metrics(self) -> str:
        """The native backend's compilation figures (`torch.neuron.get_dynamo_metrics()`, what a printed torch_xla
        metrics report becomes); in the portable style an empty dict where the device is not neuron."""
        torch = self._torch()
        if not self.portable:
            return f"{torch}.neuron.get_dynamo_metrics()"
        device = self.module_device()
        return f"({torch}.get_device_module({device}).get_dynamo_metrics() if {device}.type == " \
               f"{self.ctx.string(NEURON)} else {{}})"

    # -- backends ----------------------------------------------------------------------------------------
    def compile_backend(self) -> str:
        """The `backend=` value for model.compile: Neuron's on neuron, the default (inductor) elsewhere."""
        ctx = self.ctx
        if self.portable:
            return f"{ctx.string(NEURON)} if {self.module_device()}.type == {ctx.string(NEURON)} else " \
                   f"{ctx.string('inductor')}"
        return ctx.string(NEURON)

    def process_group_backend(self) -> str:
        """The process-group backend: `"neuron"`, or the one torch maps the device to (neuron, nccl, gloo)."""
        ctx = self.ctx
        if self.portable:
            return f"{ctx.module_ref('torch.distributed', 'dist')}.get_default_backend_for_device({self.module_device()})"
        return ctx.string(NEURON)
