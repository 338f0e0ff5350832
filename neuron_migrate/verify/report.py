"""What `verify` found, as text, JSON or markdown (fit to paste into a pull request)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field

from neuron_migrate.cli.output import plural
from neuron_migrate.verify.compare import Check, Comparison
from neuron_migrate.verify.fallbacks import DATA_FILE, Fallback
from neuron_migrate.verify.runs import Migration, RunResult

DEVICE_NAMES = {
    "cpu": "the plain CPU (`neuron` stands for the CPU)",
    "emulated": "the emulated `neuron` device (CPU)",
    "neuron": "the `neuron` device (native torch-neuronx)",
    "xla": "torch_xla's CPU device (PJRT_DEVICE=CPU)",
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

    @property
    def failed_runs(self) -> list[RunResult]:
        return [r for r in self.runs if r.failed]

    @property
    def exit_code(self) -> int:
        if self.failed_runs or self.comparison is None:
            return 2
        return 0 if self.comparison.equivalent else 1

    @property
    def verdict(self) -> str:
        if self.failed_runs:
            return "a run failed"
        return "equivalent" if self.exit_code == 0 else "NOT equivalent"


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


def _shapes_changed(recompile: Recompile) -> bool:
    return any(a != b for a, b in zip(recompile.shapes, recompile.shapes[1:]))


def _shape_change(recompile: Recompile) -> str:
    changes = []
    for before, after, reason in zip(recompile.shapes, recompile.shapes[1:], recompile.reasons):
        diff = [f"{tuple(a)} -> {tuple(b)}" for a, b in zip(before, after) if a != b]
        changes.append(", ".join(diff[:3]) or f"same shapes: {reason.strip() or 'another guard failed'}")
    return "; ".join(changes)


def _check_line(check: Check) -> str:
    status = "ok  " if check.ok else "FAIL"
    figures = f"n={check.count}, max abs {_number(check.max_abs)}, max rel {_number(check.max_rel)}"
    if check.cosine is not None:
        figures += f", cosine {check.cosine:.6f}"
    return f"  {status} {check.name}: {figures}" + (f" ({check.detail})" if check.detail else "")


def _failure_tail(result: RunResult) -> list[str]:
    lines = result.stderr.rstrip().splitlines()
    if result.returncode == 0 and not result.records:
        return ["the run ended without writing a record (did it exit with os._exit?)"]
    return lines[-TRACEBACK_LINES:]


# -- text ----------------------------------------------------------------------------------------------------
def render_text(report: Report) -> str:
    out = [f"neuron-migrate verify {report.script}: {report.verdict}"]
    for r in report.runs:
        out.append(f"  {r.program.role:<9} {r.program.label} on {DEVICE_NAMES[r.program.device]}, "
                   f"torch {_torch_version(r)} ({_seconds(r.seconds)}, exit {r.returncode})")
    out += _migration_lines(report)
    for r in report.failed_runs:
        out.append(f"\nThe {r.program.role} run failed (exit {r.returncode}):")
        out += [f"  | {line}" for line in _failure_tail(r)]
    if report.comparison is not None:
        c = report.comparison
        out.append(f"\nNumerics ({'bf16/fp16' if c.precision == 'low' else c.precision} tolerances: "
                   f"rtol {c.rtol:g}, atol {c.atol:g}):")
        out += [_check_line(check) for check in c.checks]
    out += _performance_lines(report)
    out += _fallback_lines(report)
    out += [f"note: {n}" for n in report.notes]
    return "\n".join(out) + "\n"


def _migration_lines(report: Report) -> list[str]:
    m = report.migration
    if m is None:
        return []
    out = [f"  migration: {plural(len(m.changed), 'file')} rewritten ({', '.join(m.changed) or 'none'}), "
           f"{plural(len(m.manual), 'manual item')} left as TODO markers"]
    out += [f"    {f.path}:{f.line}: {f.code} {f.message}" for f in m.manual]
    out += [f"    {path}: error: {message}" for path, message in m.errors]
    return out


def _performance_lines(report: Report) -> list[str]:
    out = ["\nPerformance (first step includes compilation; steady state is the median of later steps):"]
    for r in report.runs:
        t = timing(r)
        line = (f"  {r.program.role:<9} {plural(t.steps, t.unit)}, first {_seconds(t.first)}, "
                f"steady {_seconds(t.steady)}")
        if r.records and "compilations" in r.records[0]:
            line += f", {plural(len(compilations(r)), 'compiled graph')}"
        elif r.records and "xla_compilations" in r.records[0]:
            line += f", {plural(r.records[0]['xla_compilations'], 'XLA compilation')}"
        out.append(line)
        for rc in recompiles(r):
            out.append(f"    recompiled {rc.function} {len(rc.shapes) - 1}x: {_shape_change(rc)}")
        if any(_shapes_changed(rc) for rc in recompiles(r)):
            out.append(f"    hint: {RECOMPILE_HINT}")
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
            "manual": [f.to_json() for f in report.migration.manual],
            "errors": [{"path": p, "message": m} for p, m in report.migration.errors],
        },
        "comparison": None if c is None else {
            "equivalent": c.equivalent, "precision": c.precision, "rtol": c.rtol, "atol": c.atol,
            "checks": [check.to_json() for check in c.checks],
        },
        "fallbacks": [{"op": f.op, "count": f.count, "note": f.note} for f in report.fallbacks],
        "notes": report.notes,
    }


def _run_json(r: RunResult) -> dict:
    t = timing(r)
    return {
        "role": r.program.role, "program": r.program.label, "device": r.program.device,
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
    out += [f"| {r.program.role} | {r.program.label} | {DEVICE_NAMES[r.program.device]}, torch {_torch_version(r)} "
            f"| {_seconds(r.seconds)} | {r.returncode} |" for r in report.runs]
    if report.migration is not None:
        m = report.migration
        out += ["", f"Migration: {plural(len(m.changed), 'file')} rewritten, "
                    f"{plural(len(m.manual), 'manual item')} left as TODO markers."]
        out += [f"- `{f.path}:{f.line}` {f.code}: {f.message}" for f in m.manual]
    for r in report.failed_runs:
        out += ["", f"**The {r.program.role} run failed** (exit {r.returncode}):", "", "```",
                *_failure_tail(r), "```"]
    if report.comparison is not None:
        c = report.comparison
        out += ["", f"#### Numerics (rtol {c.rtol:g}, atol {c.atol:g})", "",
                "| check | result | values | max abs | max rel | cosine | detail |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        out += [f"| {ch.name} | {'ok' if ch.ok else '**FAIL**'} | {ch.count} | {_number(ch.max_abs)} | "
                f"{_number(ch.max_rel)} | {'-' if ch.cosine is None else f'{ch.cosine:.6f}'} | {ch.detail} |"
                for ch in c.checks]
    out += ["", "#### Performance", "", "| run | steps or calls | first | steady state | compiled graphs |",
            "| --- | --- | --- | --- | --- |"]
    for r in report.runs:
        t = timing(r)
        out.append(f"| {r.program.role} | {plural(t.steps, t.unit)} | {_seconds(t.first)} | {_seconds(t.steady)} | "
                   f"{len(compilations(r)) if r.records and 'compilations' in r.records[0] else '-'} |")
    for r in report.runs:
        for rc in recompiles(r):
            hint = f"; {RECOMPILE_HINT}" if _shapes_changed(rc) else ""
            out.append(f"\n- {r.program.role}: `{rc.function}` recompiled {len(rc.shapes) - 1}x "
                       f"({_shape_change(rc)}){hint}")
    if _shows_fallbacks(report):
        out += ["", f"#### CPU fallbacks (known-fallback data: rules/{DATA_FILE})", ""]
        out += [f"- `{f.op}`" + (f" x{f.count}" if f.count else "") + (f": {f.note}" if f.note else "")
                for f in report.fallbacks] or ["None of the operators the program ran is a known fallback."]
    out += [f"\n> {n}" for n in report.notes]
    return "\n".join(out) + "\n"


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown}
