"""How migrated code names its device: the literal `neuron` device, or whatever accelerator the machine has.

`--device-style neuron` (default) writes `torch.device("neuron")`. `--device-style accelerator` writes code
that runs on Trainium, on a GPU and on the CPU alike: one module-level

    DEVICE = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")

per file, and every rewritten device reference uses it (`DEVICE`, `DEVICE.type`).
"""

from __future__ import annotations

from neuron_migrate.engine.facts import fact

NEURON = "neuron"
ACCELERATOR = "accelerator"
STYLES = (NEURON, ACCELERATOR)
DEVICE_NAMES = ("DEVICE", "ACCELERATOR_DEVICE", "TARGET_DEVICE")


def portable(ctx) -> bool:
    return ctx.settings.device_style == ACCELERATOR


@fact
def device_variable(ctx) -> str:
    """The name of the file's module-level device variable (accelerator style), defined after the imports when
    first asked for."""
    scope = ctx.analysis.module_scope
    name = next((n for n in DEVICE_NAMES if not ctx._name_taken(n)), DEVICE_NAMES[-1])
    torch = ctx.module_ref("torch", scope=scope)
    ctx.define(f"{name} = {torch}.accelerator.current_accelerator(check_available=True) or "
               f"{torch}.device({ctx.string('cpu')})")
    return name


def module_device(ctx) -> str:
    return ctx.facts.device_variable


def device(ctx, index: str | None = None) -> str:
    """An expression for the target device (with an index: that device of the target type)."""
    if portable(ctx):
        name = module_device(ctx)
        return f"{ctx.module_ref('torch')}.device({name}.type, {index})" if index else name
    torch = ctx.module_ref("torch")
    return f"{torch}.device({ctx.string(NEURON)}, {index})" if index else f"{torch}.device({ctx.string(NEURON)})"


def device_type(ctx) -> str:
    """An expression for the target device type (`"neuron"`, or `DEVICE.type`)."""
    return f"{module_device(ctx)}.type" if portable(ctx) else ctx.string(NEURON)


def synchronize_call(ctx) -> str:
    return f"{ctx.module_ref('torch')}.neuron.synchronize()"


def synchronize_statement(ctx) -> str:
    """Wait for the device; in the portable style a form that is a no-op where there is no accelerator."""
    if not portable(ctx):
        return synchronize_call(ctx) + "\n"
    torch = ctx.module_ref("torch")
    return f"if {torch}.accelerator.is_available():\n    {torch}.accelerator.synchronize()\n"


def compile_backend(ctx) -> str:
    """The `backend=` value for model.compile: Neuron's on neuron, the default (inductor) elsewhere."""
    if portable(ctx):
        return f"{ctx.string(NEURON)} if {module_device(ctx)}.type == {ctx.string(NEURON)} else {ctx.string('inductor')}"
    return ctx.string(NEURON)


def process_group_backend(ctx) -> str:
    """The process-group backend: `"neuron"`, or the one torch maps the device to (neuron, nccl, gloo)."""
    if portable(ctx):
        return f"{ctx.module_ref('torch.distributed', 'dist')}.get_default_backend_for_device({module_device(ctx)})"
    return ctx.string(NEURON)


def select_device_statement(ctx, index: str) -> str:
    """Make device `index` (the local rank) this process's current device."""
    torch = ctx.module_ref("torch")
    if portable(ctx):
        return f"if {torch}.accelerator.is_available():\n    {torch}.accelerator.set_device_index({index})\n"
    return f"{torch}.neuron.set_device({index})\n"
