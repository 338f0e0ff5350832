"""The no-Neuron path: the original without torch_xla and the migration without Neuron, on plain CPU PyTorch.

A migration must keep every path the original has. Where no Neuron device exists (a GPU or CPU machine, a CI
runner), the original runs its own fallback (CUDA, the CPU) or stops for want of torch_xla; the migration must
do the same: run the same fallback and compute the same thing, or stop for want of Neuron before it computes
anything the original did not. What "the same path" means, measurably, in the two runs' records:

- the outcome: both ran to the end, or both stopped (each with its exception and the program's line);
- where the program put its tensors: the device types of its `.to()` calls, of the parameters of the modules
  it moved, of its losses and of its modules' outputs;
- how far it got: the optimizer steps, the losses, the forward calls.

When both ran, what they computed is compared as the Neuron path's runs are (losses, parameters, outputs,
dtypes; printed numbers when nothing was recorded), with the tolerances of the same CPU kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from neuron_migrate.cli.output import plural
from neuron_migrate.verify.compare import Check, Comparison, compare, compare_printed, printed_lines
from neuron_migrate.verify.runs import RunResult

# An error raised because the Neuron device or its packages are missing names them (`torch.device("neuron")`,
# `torch.neuron`, `tensor.neuron()`, backend "neuron", `import torch_neuronx`).
NAMES_NEURON = re.compile(r"\bneuron\b|\btorch_neuronx\b|\btorch_xla\b")
# the modules of the XLA stack a program stops at on plain PyTorch
LEGACY_STACK = frozenset({"torch_xla", "torch_neuronx", "libneuronxla", "neuronx_distributed"})
DEVICE_FACTS = (("moved_to", "moved tensors to"), ("param_devices", "parameters on"), ("loss_devices", "losses on"),
                ("call_devices", "outputs on"))
PROGRESS = (("step_times", "optimizer step", "optimizer steps"), ("losses", "loss", "losses"),
            ("call_times", "forward call", "forward calls"))


@dataclass
class Outcome:
    """How one run of the no-Neuron path went."""

    ran: bool
    error: dict | None  # type, message, module, where (file:line), line: what it stopped on
    devices: dict[str, list[str]]
    progress: dict[str, int]
    stderr_tail: str = ""

    @classmethod
    def of(cls, run: RunResult) -> "Outcome":
        record = run.records[0] if run.records else {}
        tail = next((line for line in reversed(run.stderr.strip().splitlines()) if line.strip()), "")
        return cls(run.returncode == 0 and bool(run.records), record.get("error"),
                   {key: list(record.get(key, [])) for key, _ in DEVICE_FACTS},
                   {key: len(record.get(key, [])) for key, *_ in PROGRESS}, tail)

    def stop(self) -> str:
        """`stops at train.py:7 `import torch_xla` (ModuleNotFoundError: No module named 'torch_xla')`."""
        if self.error is None:
            return f"stops ({self.stderr_tail or 'no error message'})"
        where = f" at {self.error['where']}" if self.error.get("where") else ""
        line = f" `{self.error['line']}`" if self.error.get("line") else ""
        return f"stops{where}{line} ({self.error['type']}: {_short(self.error['message'])})"

    def wants_legacy_stack(self) -> bool:
        """It stopped at an import of the XLA stack, absent without Neuron (`import torch_xla`)."""
        error = self.error or {}
        return error.get("type") in ("ModuleNotFoundError", "ImportError") \
            and (error.get("module") or "").split(".")[0] in LEGACY_STACK

    def names_neuron(self) -> bool:
        text = f"{(self.error or {}).get('message', '')} {(self.error or {}).get('module') or ''} {self.stderr_tail}"
        return bool(NAMES_NEURON.search(text))

    def where(self) -> str:
        seen = [f"{what} {', '.join(self.devices[key])}" for key, what in DEVICE_FACTS if self.devices[key]]
        return "; ".join(seen) or "no tensor moved, no module recorded"

    def work(self) -> str:
        done = [f"{self.progress[key]} {one if self.progress[key] == 1 else many}"
                for key, one, many in PROGRESS if self.progress[key]]
        return ", ".join(done) or "nothing computed"

    def describe(self) -> str:
        if self.ran:
            return f"runs to the end: {self.where()}; {self.work()}"
        work = self.work()
        return self.stop() + ("" if work == "nothing computed" else f", after {work}")


def _short(message: str, keep: int = 70) -> str:
    """A long message's start and end (torch's device-string error names the device at its end)."""
    message = " ".join(message.split())
    return message if len(message) <= 2 * keep else f"{message[:keep]} ... {message[-keep:]}"


@dataclass
class PathCheck:
    """The no-Neuron path: did the migration take the original's path, and compute the same thing?"""

    original: RunResult
    migration: RunResult
    same_path: bool
    detail: str
    comparison: Comparison | None = None  # what both computed (when both ran, or printed before stopping)
    notes: list[str] = field(default_factory=list)
    added: bool = False  # the original has no path without torch_xla; the migration runs one to the end

    @property
    def ok(self) -> bool:
        return (self.same_path or self.added) and (self.comparison is None or not self.comparison.failed)

    @property
    def failed_checks(self) -> list[Check]:
        return [] if self.comparison is None else [c for c in self.comparison.checks if not c.passed]

    @property
    def outcomes(self) -> tuple[Outcome, Outcome]:
        return Outcome.of(self.original), Outcome.of(self.migration)

    def summary(self) -> str:
        if self.added:
            return f"a path added: {self.detail}"
        if not self.same_path:
            return f"another path: {self.detail}"
        if self.comparison is not None and self.comparison.failed:
            names = ", ".join(c.name for c in self.failed_checks)
            return f"same path, other results ({names} differ): {self.detail}"
        if self.comparison is not None and self.comparison.evidence:
            return f"same path, same results: {self.detail}"
        return f"same path: {self.detail}"


def _printed(original: RunResult, migration: RunResult):
    folders = tuple(str(f.resolve()) for f in (original.folder, migration.folder) if f is not None)
    return printed_lines(original.stdout, folders), printed_lines(migration.stdout, folders)


def _differences(a: Outcome, b: Outcome) -> list[str]:
    differ = [f"{what}: original {', '.join(a.devices[key]) or 'none'}, migration {', '.join(b.devices[key]) or 'none'}"
              for key, what in DEVICE_FACTS if a.devices[key] != b.devices[key]]
    differ += [f"{many}: original {a.progress[key]}, migration {b.progress[key]}"
               for key, _, many in PROGRESS if a.progress[key] != b.progress[key]]
    return differ


def compare_no_neuron(original: RunResult, migration: RunResult, rtol: float | None = None,
                      atol: float | None = None) -> PathCheck:
    a, b = Outcome.of(original), Outcome.of(migration)
    if a.ran and not b.ran:
        return PathCheck(original, migration, False,
                         "the migration stops where the original runs: the original's fallback is lost (a "
                         "`torch.neuron` call, a `neuron` device or backend reached where no Neuron device exists?)")
    if not a.ran and b.ran:
        # the original has no path here, so the migration keeps none from it; a fallback it runs to the end
        # (the accelerator device style's CPU fallback) is reported, not failed
        check = PathCheck(original, migration, False,
                          f"the original stops for want of torch_xla, the migration runs to the end without Neuron "
                          f"({b.where()})", added=True)
        check.notes.append("no-Neuron path: the migration runs where the original stopped for want of torch_xla "
                           f"({b.where()}): if the program must not run without Neuron, make it stop there")
        return check
    differ = _differences(a, b)
    printed = _printed(original, migration)
    if a.ran:
        comparison = compare(original.records, migration.records, rtol, atol, printed=printed)
        if differ:
            return PathCheck(original, migration, False, "both run, but " + "; ".join(differ), comparison)
        return PathCheck(original, migration, True, "both run their fallback, to the same point, on the same devices",
                         comparison)
    comparison = None
    ref, tgt = printed
    if a.wants_legacy_stack() and len(tgt) > len(ref):
        # the original stopped at an import of the XLA stack: what the migration printed after that point (its
        # arguments, "preparing data") has no counterpart, only the lines before it compare
        tgt = tgt[:len(ref)]
    if ref or tgt:
        comparison = Comparison(*(rtol or 1e-4, atol or 1e-5), "fp32")
        comparison.checks.append(compare_printed(f"printed before stopping ({plural(len(ref), 'line')})",
                                                 ref, tgt, comparison.rtol, comparison.atol))
    detail = "neither runs without its device"
    if differ:
        return PathCheck(original, migration, False, detail + "; but " + "; ".join(differ), comparison)
    check = PathCheck(original, migration, True, detail, comparison)
    if not b.names_neuron():
        check.notes.append("no-Neuron path: the migration stops with an error that does not name Neuron: read it "
                           "above; on a machine without Neuron it is what users will see")
    return check
