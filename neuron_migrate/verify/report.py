"""What `verify` found, as text, JSON or markdown (fit to paste into a pull request)."""

from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass, field, replace

from neuron_migrate.checkpoint.command import human
from neuron_migrate.cli.output import plural
from neuron_migrate.findings import Finding
from neuron_migrate.verify.closure import Closure
from neuron_migrate.verify.compare import Check, Comparison
from neuron_migrate.verify.fallbacks import DATA_FILE, Fallback
from neuron_migrate.verify.paths import PathCheck
from neuron_migrate.verify.resume import CONVERTED, MANUAL, Legacy
from neuron_migrate.verify.runs import Migration, RunResult

EMULATORS = {"cpp": "C++ backend with real storage", "python": "Python backend"}
DEVICE_NAMES = {
    "cpu": "the plain CPU (`neuron` stands for the CPU)",
    "emulated": "the emulated `neuron` device (CPU)",
    "neuron": "the `neuron` device (native torch-neuronx)",
    "xla": "torch_xla's CPU device (PJRT_DEVICE=CPU)",
    "plain": "plain CPU PyTorch (no Neuron, no torch_xla)",
}
EMULATED_TIMING = ("the emulated device's times are those of the CPU emulation, not of a NeuronCore: read them for "
                   "where compilation happens and how often, not as device performance")
XLA_TIMING = ("under torch_xla a step's time is spent where the lazy graph runs (mark_step), so per-step times "
              "shift by one step; the steady state is comparable, the first step is not")
RECOMPILE_HINT = ("every new input shape compiles a new graph: pad inputs to a fixed size or bucket them into a "
                  "few sizes (and use drop_last=True in the DataLoader)")
STRICT_HINT = "a real device refuses these: move the tensors with .to(device); --strict makes this an error"
TRACEBACK_LINES = 25


@dataclass
class Timing:
    unit: str  # "step" (optimizer steps) or "call" (forward calls of an inference program)
    steps: int
    first: float | None  # the first step: includes compilation
    steady: float | None  # median of the later steps


@dataclass
class Recompile:
    function: str
    shapes: list[list[list[int]]]  # input shapes of each compilation of this function
    reasons: list[str]  # dynamo's reason for each recompilation


@dataclass
class Report:
    script: str
    args: list[str]
    runs: list[RunResult]
    migration: Migration | None
    comparison: Comparison | None = None
    fallbacks: list[Fallback] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    no_neuron: PathCheck | None = None  # the no-Neuron path (plain CPU): the original's fallback kept?
    closure: Closure | None = None  # the migrated program's own files, read before the runs
    checkpoints: list[Legacy] = field(default_factory=list)  # legacy checkpoints it starts on (resume.py)

    @property
    def failed_runs(self) -> list[RunResult]:
        return [r for r in self.runs if r.failed]

    @property
    def exit_code(self) -> int:
        if self.failed_runs or self.comparison is None:
            return 2
        if self.comparison.failed or (self.no_neuron is not None and not self.no_neuron.ok):
            return 1
        return 0 if self.comparison.evidence else 2

    @property
    def verdict(self) -> str:
        if self.failed_runs:
            return "a run failed"
        if self.exit_code == 2:
            return "nothing comparable"
        return "equivalent" if self.exit_code == 0 else "NOT equivalent"

    @property
    def imported(self) -> set[str] | None:
        """The program's files (relative to the project root): those its imports reach, read before the runs,
        and those the target run imported; None when neither is known."""
        target = next((r for r in self.runs if r.program.role == "target" and r.records), None)
        ran = None if target is None else set(target.records[0].get("files", []))
        if self.closure is None or self.migration is None or self.closure.root != self.migration.folder.resolve():
            return ran  # no closure, or the closure of a migration given with --migrated
        return self.closure.relative() | (ran or set())

    def markers(self) -> tuple[list[Finding], int]:
        """The manual items of the files the program imported (all of them when that is unknown), and how many
        others there are."""
        if self.migration is None:
            return [], 0
        imported = self.imported
        shown, hidden = [], 0
        for f in self.migration.manual:
            relative = os.path.relpath(f.path, self.migration.folder)
            if imported is None or relative in imported or not imported:
                shown.append(replace(f, path=relative))
            else:
                hidden += 1
        return shown, hidden


NOTHING_COMPARABLE = ("nothing comparable: neither run recorded a loss (`.backward()`), a device module's "
                      "parameters or outputs, or printed a number; move the model with `.to(device)`, or print the "
                      "values to compare (losses, metrics, outputs) so that both runs print them")


def timing(result: RunResult) -> Timing:
    record = result.records[0] if result.records else {}
    times, unit = record.get("step_times", []), "step"
    if not times and record.get("call_times"):
        times, unit = record["call_times"], "forward call"
    return Timing(unit, len(times), times[0] if times else None,
                  statistics.median(times[1:]) if len(times) > 1 else None)


def compilations(result: RunResult) -> list[dict]:
    return result.records[0].get("compilations", []) if result.records else []


def recompiles(result: RunResult) -> list[Recompile]:
    by_frame: dict[str, list[dict]] = {}
    for c in compilations(result):
        by_frame.setdefault(c["frame"], []).append(c)
    return [Recompile(cs[0]["name"], [c["shapes"] for c in cs], [c.get("reason", "") for c in cs[1:]])
            for cs in by_frame.values() if len(cs) > 1]


def mixed_ops(result: RunResult) -> dict[str, int]:
    totals: dict[str, int] = {}
    for record in result.records:
        for op, n in record.get("mixed", {}).items():
            totals[op] = totals.get(op, 0) + n
    return totals


def _torch_version(result: RunResult) -> str:
    return result.records[0]["meta"]["torch"] if result.records else "?"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _number(value: float) -> str:
    return f"{value:.3g}"


# Dynamo's reasons for a recompilation (its first failed guard), by kind; only a shape change is helped by padding.
REASON_KINDS = (
    ("grad mode", re.compile(r"grad_mode|GLOBAL_STATE changed: grad|requires_grad", re.IGNORECASE)),
    ("dtype", re.compile(r"dtype mismatch|dtype", re.IGNORECASE)),
    ("shape", re.compile(r"size mismatch|stride mismatch|shape", re.IGNORECASE)),
    ("module mode", re.compile(r"\.training\b|training", re.IGNORECASE)),
)
HINTS = {
    "shape": RECOMPILE_HINT,
    "grad mode": ("a graph compiled for training is compiled again for no_grad/inference_mode calls (evaluation): "
                  "once per mode is expected; more often means the mode flips inside the loop"),
    "dtype": "the inputs' dtype changed between calls: cast the inputs once (or autocast the whole step)",
    "module mode": "train() and eval() modes compile separate graphs: once per mode is expected",
}


def _reason_kind(reason: str) -> str | None:
    return next((kind for kind, pattern in REASON_KINDS if pattern.search(reason)), None)


def _kinds(recompile: Recompile) -> set[str]:
    kinds = set()
    for before, after, reason in zip(recompile.shapes, recompile.shapes[1:], recompile.reasons):
        kind = _reason_kind(reason) if reason.strip() else ("shape" if before != after else None)
        if kind:
            kinds.add(kind)
    return kinds


def _shapes_changed(recompile: Recompile) -> bool:
    return "shape" in _kinds(recompile)


def _shape_change(recompile: Recompile) -> str:
    changes = []
    for before, after, reason in zip(recompile.shapes, recompile.shapes[1:], recompile.reasons):
        kind = _reason_kind(reason) if reason.strip() else None
        diff = [f"{tuple(a)} -> {tuple(b)}" for a, b in zip(before, after) if a != b]
        if kind in (None, "shape") and diff:
            changes.append(", ".join(diff[:3]))
        elif reason.strip():
            changes.append(f"{kind or 'guard'}: {reason.strip()}")
        else:
            changes.append("another guard failed")
    return "; ".join(changes)


def _status(check: Check) -> str:
    return "ok  " if check.ok else "xla " if check.explained else "FAIL"


def _check_line(check: Check) -> str:
    status = _status(check)
    if check.numeric:
        figures = f"n={check.count}, max abs {_number(check.max_abs)}, max rel {_number(check.max_rel)}"
        if check.cosine is not None:
            figures += f", cosine {check.cosine:.6f}"
    else:
        figures = ""
    detail = "; ".join(d for d in (check.detail, check.explained and
                                   f"as on the plain CPU: known torch_xla CPU difference ({check.explained})") if d)
    text = f"  {status} {check.name}: {figures}".rstrip(": ") if figures or not detail else f"  {status} {check.name}"
    if detail:
        text += f" ({detail})" if figures else f": {detail}"
    return text


# The wrapper torch.compile puts around an error raised while it compiles: the real error is on the next line.
COMPILER_WRAPPER = re.compile(r"^torch\._dynamo\.exc\.\w+: backend=.* raised:$")
FRAME = re.compile(r'^\s*(?:\[rank\d+\]:\s*)?File "(?P<path>[^"]+)", line (?P<line>\d+), in ')


def _failure_tail(result: RunResult) -> list[str]:
    """The run's first traceback (a second one at exit, torch_xla's, would hide it), else its last lines.

    An error torch.compile wraps (BackendCompilerFailed) comes first as itself, at the innermost line of the
    program's own files, then the traceback with the wrapper."""
    lines = result.stderr.rstrip().splitlines()
    if result.returncode == 0 and not result.records:
        return ["the run ended without writing a record (did it exit with os._exit?)"]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if starts:
        begin = starts[0]
        end = next((i for i in range(begin + 1, len(lines))
                    if lines[i] and not lines[i].startswith((" ", "\t", "Traceback"))), len(lines) - 1)
        first = _unwrapped(lines, begin, end, result.folder)
        if first:
            end += 1  # the wrapped error's line belongs to the traceback
        block = lines[begin:end + 1]
        if len(block) > TRACEBACK_LINES:
            block = block[:2] + ["  ..."] + block[-(TRACEBACK_LINES - 3):]
        if len(starts) > 1 or end < len(lines) - 1:
            block.append(f"(the first error; {len(lines) - end - 1} more lines of output follow it)")
        return first + block
    return lines[-TRACEBACK_LINES:]


def _unwrapped(lines: list[str], begin: int, end: int, folder) -> list[str]:
    """For an error torch.compile wrapped: the error itself and the innermost line of the program's own files
    it was raised from (then a line that says the wrapper follows); else nothing."""
    if not COMPILER_WRAPPER.match(lines[end]) or end + 1 >= len(lines):
        return []
    out = [lines[end + 1]]
    root = str(folder.resolve()) + os.sep if folder is not None else None
    for i in range(end - 1, begin, -1):
        match = FRAME.match(lines[i])
        if match and root and os.path.abspath(match["path"]).startswith(root):
            code = lines[i + 1].strip() if i + 1 < end and not FRAME.match(lines[i + 1]) else ""
            where = f"{os.path.relpath(match['path'], root)}:{match['line']}"
            out.append(f"  at {where}" + (f" `{code}`" if code else ""))
            break
    out.append(f"raised while torch.compile compiled the program ({lines[end].split(':', 1)[0]}), traceback:")
    return out


# -- text ----------------------------------------------------------------------------------------------------
def render_text(report: Report) -> str:
    out = [f"neuron-migrate verify {report.script}: {report.verdict}"]
    for r in report.runs:
        out.append(f"  {r.program.name:<12} {r.program.label} on {_device_name(r)}{_processes(r)}, "
                   f"torch {_torch_version(r)} ({_seconds(r.seconds)}, exit {r.returncode}){_own_env(r)}")
    out += _migration_lines(report)
    out += _checkpoint_lines(report)
    for r in report.failed_runs:
        out.append(f"\nThe {r.program.role} run failed (exit {r.returncode}):")
        out += [f"  | {line}" for line in _failure_tail(r)]
    if report.comparison is not None:
        c = report.comparison
        out.append(f"\nNumerics ({'bf16/fp16' if c.precision == 'low' else c.precision} tolerances: "
                   f"rtol {c.rtol:g}, atol {c.atol:g}):")
        out += [_check_line(check) for check in c.checks]
        if report.exit_code == 2:
            out.append(f"  {NOTHING_COMPARABLE}")
    out += _path_lines(report)
    out += _performance_lines(report)
    out += _fallback_lines(report)
    out += [f"note: {n}" for n in report.notes]
    return "\n".join(out) + "\n"


PATH_RUNS = ("original without torch_xla", "migration without Neuron")


def _neuron_path(report: Report) -> str:
    c = report.comparison
    if report.failed_runs or c is None:
        return "not compared (a run failed)"
    if c.failed:
        return "the runs differ (see Numerics)"
    return "equivalent (see Numerics)" if c.evidence else "nothing comparable"


def _path_lines(report: Report) -> list[str]:
    """Both paths, plainly: where Neuron exists (the runs above) and where it does not (plain CPU PyTorch)."""
    target = next(r for r in report.runs if r.program.role == "target")
    out = ["\nPaths:", f"  Neuron ({target.program.device}): {_neuron_path(report)}"]
    p = report.no_neuron
    if p is None:
        return out + ["  no Neuron: not run (--skip-no-neuron)"]
    out.append(f"  {'ok  ' if p.ok else 'FAIL'} no Neuron (plain CPU PyTorch): {p.summary()}")
    for what, r, o in zip(PATH_RUNS, (p.original, p.migration), p.outcomes):
        out.append(f"    {what + ':':<27} {o.describe()} (exit {r.returncode}, {_seconds(r.seconds)})")
    if p.comparison is not None:
        out += ["  " + _check_line(check) for check in p.comparison.checks]
    return out


def _path_json(report: Report) -> dict | None:
    p = report.no_neuron
    if p is None:
        return None
    original, migration = p.outcomes
    return {"ok": p.ok, "same_path": p.same_path, "summary": p.summary(),
            "runs": [{**_run_json(r), "ran": o.ran, "stopped_on": o.error, "devices": o.devices, "progress": o.progress}
                     for r, o in ((p.original, original), (p.migration, migration))],
            "checks": [] if p.comparison is None else [c.to_json() for c in p.comparison.checks]}


def emulator_kind(r: RunResult) -> str | None:
    """Which emulated device a run had: "cpp" (the C++ backend, real storage) or "python" (its fallback)."""
    kinds = {record.get("emulator") for record in r.records} - {None}
    return kinds.pop() if len(kinds) == 1 else None


def _device_name(r: RunResult) -> str:
    kind = emulator_kind(r)
    name = DEVICE_NAMES[r.program.device]
    return name if kind is None else name.replace("(CPU)", f"(CPU; {EMULATORS[kind]})")


def _processes(r: RunResult) -> str:
    return f" ({r.program.nproc} processes, torchrun)" if r.program.nproc > 1 else ""


def _own_env(r: RunResult) -> str:
    if not r.program.env:
        return ""
    return "; own environment: " + " ".join(f"{k}={v}" for k, v in sorted(r.program.env.items()))


def _migration_lines(report: Report) -> list[str]:
    m = report.migration
    if m is None:
        return []
    shown, hidden = report.markers()
    imported = report.imported
    own = [c for c in m.changed if not imported or c in imported]
    others = f"; {len(m.changed) - len(own)} more in files the program does not import" if len(own) < len(m.changed) \
        else ""
    out = [f"  migration: {plural(len(m.changed), 'file')} rewritten ({', '.join(own) or 'none'}{others}), "
           f"{plural(len(m.manual), 'manual item')} left as TODO markers"
           + (f" ({hidden} in files the program does not import)" if hidden else "")]
    out += [f"    {f.path}:{f.line}: {f.code} {f.message}" for f in shown]
    out += [f"    {os.path.relpath(path, m.folder)}: error: {message}" for path, message in m.errors]
    left = report.closure.leftovers if report.closure is not None else []
    if left:
        out.append(f"  torch_xla left in the program's files: {plural(len(left), 'line')}")
        out += [f"    {use}{' (runs at start)' if use.at_start else ''}" for use in left]
    return out


def _checkpoint_said(item: Legacy) -> str:
    """What was done with one legacy checkpoint, in a sentence."""
    given = f" ({item.option})" if item.argument is not None else ""
    sharded = f" ({item.sharding.split(' (')[0]})" if item.action == MANUAL else ""
    what = f"{item.kind_name}{sharded}, {plural(item.tensors, 'tensor')}, {human(item.nbytes)}"
    if item.action == CONVERTED:
        where = ("in each one's own folder, which its argument names" if item.outside else
                 "at the same path in each one's copy")
        return (f"{item.shown}{given}: {what}: converted to one torch.save file {where} for the migrated runs "
                f"({', '.join(item.runs) or 'none'}), as the migration reads it with torch.load; the original "
                "runs read it as it is")
    if item.action == MANUAL:
        return f"{item.shown}{given}: {what}: not converted: {item.detail}"
    return f"{item.shown}{given}: not converted, it cannot be read: {item.detail}"


def _checkpoint_lines(report: Report) -> list[str]:
    if not report.checkpoints:
        return []
    converted = sum(1 for c in report.checkpoints if c.action == CONVERTED)
    out = [f"  checkpoints: {plural(len(report.checkpoints), 'legacy checkpoint')} the program may start on, "
           f"{converted} converted for the migrated runs"]
    return out + [f"    {_checkpoint_said(c)}" for c in report.checkpoints]


def _performance_lines(report: Report) -> list[str]:
    out = ["\nPerformance (first step includes compilation; steady state is the median of later steps):"]
    for r in report.runs:
        t = timing(r)
        line = (f"  {r.program.name:<12} {plural(t.steps, t.unit)}, first {_seconds(t.first)}, "
                f"steady {_seconds(t.steady)}")
        if r.records and "compilations" in r.records[0]:
            line += f", {plural(len(compilations(r)), 'compiled graph')}"
        elif r.records and "xla_compilations" in r.records[0]:
            line += f", {plural(r.records[0]['xla_compilations'], 'XLA compilation')}"
        out.append(line)
        for rc in recompiles(r):
            out.append(f"    recompiled {rc.function} {len(rc.shapes) - 1}x: {_shape_change(rc)}")
        hints = {HINTS[kind] for rc in recompiles(r) for kind in _kinds(rc)}
        out += [f"    hint: {hint}" for hint in sorted(hints)]
        mixed = mixed_ops(r)
        if mixed:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(mixed.items(), key=lambda kv: -kv[1]))
            out.append(f"    CPU and neuron tensors mixed in: {ops}; {STRICT_HINT}")
    return out


def _shows_fallbacks(report: Report) -> bool:
    target = report.runs[-1]
    return target.program.device in ("emulated", "neuron") and bool(target.records)


def _fallback_lines(report: Report) -> list[str]:
    target = report.runs[-1]
    if not _shows_fallbacks(report):
        return []
    kind = "observed" if target.program.device == "neuron" else "predicted"
    out = [f"\nCPU fallbacks ({kind}; known-fallback data: rules/{DATA_FILE}):"]
    if not report.fallbacks:
        return out + ["  none of the operators the program ran is a known fallback"]
    for f in report.fallbacks:
        count = f" x{f.count}" if f.count else ""
        out.append(f"  {f.op}{count}" + (f": {f.note}" if f.note else ""))
    return out


# -- JSON ----------------------------------------------------------------------------------------------------
def to_json(report: Report) -> dict:
    c = report.comparison
    return {
        "script": report.script,
        "args": report.args,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "runs": [_run_json(r) for r in report.runs],
        "migration": None if report.migration is None else {
            "changed": report.migration.changed,
            "manual": [f.to_json() for f in report.markers()[0]],
            "manual_in_files_not_imported": report.markers()[1],
            "torch_xla_left": [{"where": f"{u.path}:{u.line}", "line": u.code, "module": u.module,
                                "at_start": u.at_start} for u in (report.closure.leftovers if report.closure else [])],
            "errors": [{"path": p, "message": m} for p, m in report.migration.errors],
        },
        "comparison": None if c is None else {
            "equivalent": c.equivalent, "evidence": c.evidence, "precision": c.precision, "rtol": c.rtol,
            "atol": c.atol,
            "checks": [check.to_json() for check in c.checks],
        },
        "checkpoints": [c.to_json() for c in report.checkpoints],
        "no_neuron": _path_json(report),
        "fallbacks": [{"op": f.op, "count": f.count, "note": f.note} for f in report.fallbacks],
        "notes": report.notes,
    }


def _run_json(r: RunResult) -> dict:
    t = timing(r)
    return {
        "role": r.program.role, "name": r.program.name, "nproc": r.program.nproc, "env": r.program.env,
        "program": r.program.label, "device": r.program.device, "emulator": emulator_kind(r),
        "python": r.program.python, "torch": _torch_version(r), "returncode": r.returncode, "seconds": r.seconds,
        "processes": len(r.records), "steps": t.steps if t.unit == "step" else 0,
        "forward_calls": t.steps if t.unit != "step" else None, "first_step_seconds": t.first,
        "steady_step_seconds": t.steady,
        "compilations": compilations(r),
        "recompilations": [{"function": rc.function, "shapes": rc.shapes, "reasons": rc.reasons}
                           for rc in recompiles(r)],
        "mixed_device_ops": mixed_ops(r),
        "losses": r.records[0]["losses"] if r.records else [],
        "error": "\n".join(_failure_tail(r)) if r.failed else None,
    }


def render_json(report: Report) -> str:
    return json.dumps(to_json(report), indent=2) + "\n"


# -- markdown ------------------------------------------------------------------------------------------------
def render_markdown(report: Report) -> str:
    icon = {"equivalent": "✅", "NOT equivalent": "❌"}.get(report.verdict, "⚠️")
    out = [f"### {icon} neuron-migrate verify: `{report.script}` is {report.verdict}", ""]
    out += ["| run | program | device | time | exit |", "| --- | --- | --- | --- | --- |"]
    out += [f"| {r.program.name} | {r.program.label} | {_device_name(r)}{_processes(r)}, "
            f"torch {_torch_version(r)} | {_seconds(r.seconds)} | {r.returncode} |" for r in report.runs]
    if report.migration is not None:
        m = report.migration
        shown, hidden = report.markers()
        out += ["", f"Migration: {plural(len(m.changed), 'file')} rewritten, "
                    f"{plural(len(m.manual), 'manual item')} left as TODO markers"
                    + (f" ({hidden} in files the program does not import)." if hidden else ".")]
        out += [f"- `{f.path}:{f.line}` {f.code}: {f.message}" for f in shown]
    if report.checkpoints:
        out += ["", "Legacy checkpoints the program may start on:"]
        out += [f"- {_checkpoint_said(c)}" for c in report.checkpoints]
    for r in report.failed_runs:
        out += ["", f"**The {r.program.role} run failed** (exit {r.returncode}):", "", "```",
                *_failure_tail(r), "```"]
    if report.comparison is not None:
        c = report.comparison
        out += ["", f"#### Numerics (rtol {c.rtol:g}, atol {c.atol:g})", "",
                "| check | result | values | max abs | max rel | cosine | detail |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        out += [f"| {ch.name} | {'ok' if ch.ok else 'torch_xla CPU difference' if ch.explained else '**FAIL**'} | "
                f"{ch.count} | {_number(ch.max_abs)} | {_number(ch.max_rel)} | "
                f"{'-' if ch.cosine is None else f'{ch.cosine:.6f}'} | "
                f"{'; '.join(d for d in (ch.detail, ch.explained) if d)} |" for ch in c.checks]
        if report.exit_code == 2:
            out += ["", NOTHING_COMPARABLE]
    out += _path_markdown(report)
    out += ["", "#### Performance", "", "| run | steps or calls | first | steady state | compiled graphs |",
            "| --- | --- | --- | --- | --- |"]
    for r in report.runs:
        t = timing(r)
        out.append(f"| {r.program.name} | {plural(t.steps, t.unit)} | {_seconds(t.first)} | {_seconds(t.steady)} | "
                   f"{len(compilations(r)) if r.records and 'compilations' in r.records[0] else '-'} |")
    for r in report.runs:
        for rc in recompiles(r):
            hint = "".join(f"; {HINTS[kind]}" for kind in sorted(_kinds(rc)))
            out.append(f"\n- {r.program.name}: `{rc.function}` recompiled {len(rc.shapes) - 1}x "
                       f"({_shape_change(rc)}){hint}")
    if _shows_fallbacks(report):
        out += ["", f"#### CPU fallbacks (known-fallback data: rules/{DATA_FILE})", ""]
        out += [f"- `{f.op}`" + (f" x{f.count}" if f.count else "") + (f": {f.note}" if f.note else "")
                for f in report.fallbacks] or ["None of the operators the program ran is a known fallback."]
    out += [f"\n> {n}" for n in report.notes]
    return "\n".join(out) + "\n"


def _path_markdown(report: Report) -> list[str]:
    target = next(r for r in report.runs if r.program.role == "target")
    p = report.no_neuron
    out = ["", "#### Paths", "", "| path | result |", "| --- | --- |",
           f"| Neuron ({target.program.device}) | {_neuron_path(report)} |"]
    if p is None:
        return out + ["| no Neuron | not run |"]
    out.append(f"| no Neuron (plain CPU PyTorch) | {'ok' if p.ok else '**FAIL**'}: {p.summary()} |")
    out += [f"| no Neuron: {what} | {o.describe()} |" for what, o in zip(PATH_RUNS, p.outcomes)]
    if p.comparison is not None:
        out += [f"| no Neuron: {ch.name} | {'ok' if ch.passed else '**FAIL**'} {ch.detail} |"
                for ch in p.comparison.checks]
    return out


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown}
