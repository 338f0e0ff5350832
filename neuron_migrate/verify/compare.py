"""Compare two runs' records: loss curves, final parameters, outputs, step counts."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from neuron_migrate.cli.output import plural

LOW_PRECISION = ("torch.bfloat16", "torch.float16")
# (rtol, atol). Two backends (torch_xla or the real device against CPU kernels) round differently, and
# training compounds it: the bundled example's parameters drift by ~1e-4 in 20 steps under torch_xla.
TOLERANCES = {"fp32": (1e-4, 1e-5), "fp32 across backends": (1e-3, 1e-3), "low": (2e-2, 1e-2)}


@dataclass
class Check:
    """One comparison: what, how many values, the worst errors, and whether it is within tolerance."""

    name: str
    ok: bool
    count: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    cosine: float | None = None
    detail: str = ""
    explained: str = ""  # a known torch_xla CPU difference this failure is (the plain CPU run differs alike)
    differing: list[str] = field(default_factory=list)  # the tensors out of tolerance (final parameters)

    @property
    def passed(self) -> bool:
        return self.ok or bool(self.explained)

    @property
    def numeric(self) -> bool:
        """A comparison of computed values (evidence), not of a property of the runs."""
        return any(word in self.name for word in EVIDENCE)

    def to_json(self) -> dict:
        return {k: v for k, v in vars(self).items() if v is not None and v != "" and v != []}


EVIDENCE = ("loss curve", "final parameters", "module outputs", "printed numbers", "ranks agree")


@dataclass
class Comparison:
    rtol: float
    atol: float
    precision: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def evidence(self) -> bool:
        """Something computed was compared: without it there is no verdict."""
        return any(c.numeric and c.count for c in self.checks)

    @property
    def equivalent(self) -> bool:
        return self.evidence and all(c.passed for c in self.checks)

    @property
    def failed(self) -> bool:
        return any(not c.passed for c in self.checks)


def precision_of(records: list[dict], cross_backend: bool = False) -> str:
    dtypes = {d for r in records for d in (*r.get("param_dtypes", ()), *r.get("output_dtypes", ()))}
    if any(r.get("autocast") for r in records) or dtypes & set(LOW_PRECISION):
        return "low"
    return "fp32 across backends" if cross_backend else "fp32"


def _errors(ref: torch.Tensor, tgt: torch.Tensor) -> tuple[float, float, float | None]:
    ref, tgt = ref.double().flatten(), tgt.double().flatten()
    if ref.numel() == 0:
        return 0.0, 0.0, None
    diff = (ref - tgt).abs()
    rel = diff / ref.abs().clamp_min(1e-12)
    norms = ref.norm() * tgt.norm()
    cosine = float(ref.dot(tgt) / norms) if norms > 0 else (1.0 if torch.equal(ref, tgt) else 0.0)
    return float(diff.max()), float(rel.max()), cosine


def _close(ref: torch.Tensor, tgt: torch.Tensor, rtol: float, atol: float) -> bool:
    return bool(torch.allclose(ref.double(), tgt.double(), rtol=rtol, atol=atol, equal_nan=True))


def compare_tensors(name: str, ref: list[torch.Tensor], tgt: list[torch.Tensor], rtol: float, atol: float) -> Check:
    if len(ref) != len(tgt):
        return Check(name, False, detail=f"reference has {len(ref)} values, target {len(tgt)}")
    shapes = [(tuple(a.shape), tuple(b.shape)) for a, b in zip(ref, tgt) if a.shape != b.shape]
    if shapes:
        return Check(name, False, detail=f"shapes differ: reference {shapes[0][0]}, target {shapes[0][1]}")
    if not ref:
        return Check(name, True, 0)
    flat_ref = torch.cat([t.double().flatten() for t in ref])
    flat_tgt = torch.cat([t.double().flatten() for t in tgt])
    max_abs, max_rel, cosine = _errors(flat_ref, flat_tgt)
    ok = all(_close(a, b, rtol, atol) for a, b in zip(ref, tgt))
    return Check(name, ok, flat_ref.numel(), max_abs, max_rel, cosine)


def compare_losses(name: str, ref: list[float], tgt: list[float], rtol: float, atol: float) -> Check:
    count = min(len(ref), len(tgt))
    check = compare_tensors(name, [torch.tensor(ref[:count], dtype=torch.float64)],
                            [torch.tensor(tgt[:count], dtype=torch.float64)], rtol, atol)
    check.count = count
    if len(ref) != len(tgt):
        check.ok = False
        check.detail = f"reference recorded {len(ref)} losses, target {len(tgt)}"
    elif not check.ok:
        first = next(i for i, (a, b) in enumerate(zip(ref, tgt)) if abs(a - b) > atol + rtol * abs(a))
        check.detail = f"first differs at loss {first + 1}: reference {ref[first]:.6g}, target {tgt[first]:.6g}"
    return check


def _params(name: str, ref: list[dict], tgt: list[dict], rtol: float, atol: float) -> list[Check]:
    if len(ref) != len(tgt):
        return [Check(name, False, detail=f"reference moved {len(ref)} top-level module(s) to its device, "
                                          f"target {len(tgt)}")]
    checks = []
    for index, (a, b) in enumerate(zip(ref, tgt)):
        label = f"{name} (module {index + 1})" if len(ref) > 1 else name
        if a.keys() != b.keys():
            missing = sorted(a.keys() ^ b.keys())[:3]
            checks.append(Check(label, False, detail=f"parameter names differ: {', '.join(missing)}"))
            continue
        keys = sorted(a)
        check = compare_tensors(label, [a[k] for k in keys], [b[k] for k in keys], rtol, atol)
        if not check.ok and not check.detail:
            worst = max(keys, key=lambda k: float((a[k] - b[k]).abs().max()) if a[k].numel() else 0.0)
            check.detail = f"largest difference in {worst}"
            check.differing = [k for k in keys if not _close(a[k], b[k], rtol, atol)]
        checks.append(check)
    return checks


def tolerances(records: list[dict], rtol: float | None, atol: float | None, cross_backend: bool) -> Comparison:
    precision = precision_of(records, cross_backend)
    default_rtol, default_atol = TOLERANCES[precision]
    return Comparison(rtol if rtol is not None else default_rtol, atol if atol is not None else default_atol,
                      precision)


def recorded_values(record: dict) -> bool:
    return bool(record["losses"] or record["params"] or record["outputs"])


def compare(reference: list[dict], target: list[dict], rtol: float | None = None, atol: float | None = None,
            cross_backend: bool = False, *, device: str | None = None,
            printed: tuple[list[Printed], list[Printed]] | None = None) -> Comparison:
    """Compare rank by rank: the same number of processes, losses, steps, parameters and outputs, their dtypes,
    and (`device`: where the target ran) that the target computed on the device. When neither run recorded any
    value, the numbers the two runs printed (`printed`) are compared instead."""
    result = tolerances(reference + target, rtol, atol, cross_backend)
    if len(reference) != len(target):
        result.checks.append(Check("processes", False, detail=f"reference {len(reference)}, target {len(target)}"))
        return result
    for ref, tgt in zip(reference, target):
        prefix = f"rank {ref['meta']['rank']}: " if len(reference) > 1 else ""
        result.checks.extend(_compare_rank(prefix, ref, tgt, result.rtol, result.atol))
        dtypes = compare_dtypes(f"{prefix}dtypes", ref, tgt)
        if dtypes is not None:
            result.checks.append(dtypes)
        trained = training_happened(f"{prefix}parameters updated", ref, tgt)
        if trained is not None:
            result.checks.append(trained)
        if device in ("emulated", "neuron"):
            result.checks.append(device_residency(f"{prefix}device residency", tgt, device))
    nothing_recorded = not any(recorded_values(r) for r in reference)
    if nothing_recorded and printed is not None and (printed[0] or printed[1]):
        lines = plural(len(printed[0]), "line")
        result.checks.append(compare_printed(f"printed numbers ({lines})", *printed, result.rtol, result.atol))
    return result


def compare_parameters(name: str, reference: dict, target: dict, rtol: float | None, atol: float | None,
                       cross_backend: bool) -> Comparison:
    """Only the final parameters (a data-parallel rank against a single process: its losses are its shard's)."""
    result = tolerances([reference, target], rtol, atol, cross_backend)
    result.checks.extend(_params(name, reference["params"], target["params"], result.rtol, result.atol))
    return result


def same_data(reference: dict, ranks: list[dict]) -> bool:
    """The ranks trained on the single process's batches: at each of the first steps each rank had its batch, or
    the ranks' batches make it up (a global batch split by a DistributedSampler without shuffling). Compared by
    shape and sum; records without inputs agree."""
    steps = zip(reference.get("inputs") or (), *((r.get("inputs") or ()) for r in ranks))
    for (shape, total), *theirs in steps:
        shapes, sums = [s for s, _ in theirs], [t for _, t in theirs]
        each = all(s == shape for s in shapes) and all(_same_sum(t, total) for t in sums)
        split = (bool(shape) and all(len(s) == len(shape) and s[1:] == shape[1:] for s in shapes)
                 and sum(s[0] for s in shapes) == shape[0] and _same_sum(sum(sums), total))
        if not (each or split):
            return False
    return True


def _same_sum(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-3)


def ranks_agree(name: str, records: list[dict], rtol: float | None, atol: float | None) -> Check:
    """Data parallelism keeps one model: every rank ends with rank 0's parameters."""
    result = tolerances(records, rtol, atol, False)
    worst = Check(name, True, 0)
    for other in records[1:]:
        for check in _params(name, records[0]["params"], other["params"], result.rtol, result.atol):
            worst.count += check.count
            worst.max_abs, worst.max_rel = max(worst.max_abs, check.max_abs), max(worst.max_rel, check.max_rel)
            if not check.ok and worst.ok:
                worst.ok = False
                worst.detail = f"rank {other['meta']['rank']} differs from rank 0" + (
                    f" ({check.detail})" if check.detail else "")
    return worst


# -- three-way: torch_xla on the CPU, the migration on the plain CPU, the target ------------------------------------
KNOWN_XLA_CPU = (
    ("BatchNorm running variance",
     lambda records: any("BatchNorm" in t for r in records for t in r.get("module_types", [])),
     "torch_xla on the CPU updates BatchNorm's running_var with the biased batch variance (torch with the unbiased "
     "one, n/(n-1) larger), so running_var and everything evaluated with it differ slightly"),
    ("bfloat16 accumulation",
     lambda records: any(r.get("autocast") or "torch.bfloat16" in (*r.get("param_dtypes", ()),
                                                                   *r.get("call_dtypes", ())) for r in records),
     "torch_xla on the CPU sums bfloat16 tensors with bfloat16 accumulation (torch accumulates in float32), so "
     "reductions in bfloat16 round differently"),
)


def _bn_explains(check: Check, records: list[dict], rtol: float, atol: float) -> bool:
    """The running variance changes only what is evaluated with the running statistics: the buffers themselves,
    eval-mode outputs and printed evaluation results; never the training loss curve or the weights."""
    if "final parameters" in check.name:
        return bool(check.differing) and all(k.endswith("running_var") for k in check.differing)
    return "module outputs" in check.name or "printed numbers" in check.name


def _bf16_explains(check: Check, records: list[dict], rtol: float, atol: float) -> bool:
    """Reductions rounded in bfloat16 shift the values (a loss over a few thousand values comes out a fifth
    lower), not the course of training: a loss curve is explained only when torch_xla's and the CPU run's,
    each divided by its first loss, agree. A migration that trains differently (another learning rate, a lost
    clipping) changes the course, and is not excused. `records`: the reference's, then the CPU run's."""
    if "loss curve" not in check.name:
        return True
    reference, cpu = records[0]["losses"], records[-1]["losses"]
    if not reference or len(reference) != len(cpu) or not reference[0] or not cpu[0]:
        return False
    return all(abs(a / reference[0] - b / cpu[0]) <= atol + rtol * abs(b / cpu[0]) for a, b in zip(reference, cpu))


EXPLAINS = {"BatchNorm running variance": _bn_explains, "bfloat16 accumulation": _bf16_explains}


def explain_by_cpu(main: Comparison, cpu_target: Comparison, xla_cpu: Comparison, records: list[dict]) -> None:
    """A check that fails against torch_xla, passes between the plain CPU run and the target, and fails alike
    between torch_xla and the plain CPU is a torch_xla CPU difference, not the migration's: when a known one
    applies to the program, the check is marked explained with it."""
    same = {c.name: c for c in cpu_target.checks}
    xla_differs = {c.name for c in xla_cpu.checks if not c.ok}
    known = [(title, text) for title, applies, text in KNOWN_XLA_CPU if applies(records)]
    for check in main.checks:
        if check.ok or not check.numeric:
            continue
        if not (check.name in same and same[check.name].ok and check.name in xla_differs):
            continue
        fitting = [title for title, _ in known if EXPLAINS[title](check, records, main.rtol, main.atol)]
        if fitting:
            check.explained = "; ".join(fitting)
        else:
            main.notes.append(f"{check.name}: the target equals the migration on the plain CPU, and torch_xla "
                              "differs from both, but no known torch_xla CPU difference explains it: "
                              "compare the two CPU runs by hand before trusting either")
    for title, text in known:
        if any(c.explained and title in c.explained for c in main.checks):
            main.notes.append(f"{title}: {text}; the migration equals torch eager on the plain CPU")


def _compare_rank(prefix: str, ref: dict, tgt: dict, rtol: float, atol: float) -> list[Check]:
    checks = []
    steps_ref, steps_tgt = len(ref["step_times"]), len(tgt["step_times"])
    if steps_ref != steps_tgt:
        checks.append(Check(f"{prefix}optimizer steps", False, steps_ref,
                            detail=f"reference took {steps_ref} optimizer steps, target {steps_tgt}"))
    if ref["losses"] or tgt["losses"]:
        checks.append(compare_losses(f"{prefix}loss curve", ref["losses"], tgt["losses"], rtol, atol))
    if not ref.get("modules", ref["params"]) and tgt.get("modules", tgt["params"]):
        # the original kept its model on the CPU (torch_neuronx.trace compiles a CPU module): nothing to hold
        # the target's parameters and outputs against; the printed numbers are compared instead
        checks.append(Check(f"{prefix}final parameters", True, 0,
                            detail="the reference moved no module to its device: not compared"))
        return checks
    if ref["params"] or tgt["params"]:
        checks.extend(_params(f"{prefix}final parameters", ref["params"], tgt["params"], rtol, atol))
    if ref["outputs"] or tgt["outputs"]:
        flat_ref = [t for call in ref["outputs"] for t in call]
        flat_tgt = [t for call in tgt["outputs"] for t in call]
        calls = plural(len(ref["outputs"]), "call")
        checks.append(compare_tensors(f"{prefix}module outputs ({calls})", flat_ref, flat_tgt, rtol, atol))
    return checks


# -- printed output ------------------------------------------------------------------------------------------
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])|\b(?:nan|inf)\b")
# Lines that name a time or a rate differ from run to run: they are not compared.
VOLATILE = re.compile(
    r"\d{1,2}:\d\d(:\d\d)?|\d{4}-\d\d-\d\d|/s\b|/sec\b|\bper (second|sec)\b|\bit/s\b|\bs/it\b|\bthroughput\b|"
    r"\belapsed\b|\btook\b|\btime\b|\bseconds?\b|\bsecs?\b|\d\s*(ms|s|min)\b|\bETA\b", re.IGNORECASE)
DEVICE_WORD = re.compile(r"\b(xla|neuron|cpu|cuda)(:\d+)?\b")


@dataclass
class Printed:
    template: str  # the line with its numbers replaced by '#'
    numbers: list[tuple[float, int]]  # each number and its printed decimals
    text: str


def printed_lines(stdout: str, folders: tuple[str, ...] = ()) -> list[Printed]:
    """The lines of a run's output that carry numbers, normalised: times and rates left out, the run's folder
    and the device's name made alike."""
    lines = []
    for text in stdout.splitlines():
        for folder in folders:
            text = text.replace(folder, "<folder>")
        text = DEVICE_WORD.sub("<device>", text.strip())
        if not text or VOLATILE.search(text):
            continue
        numbers = []
        for match in NUMBER.finditer(text):
            token = match.group(0)
            decimals = len(token.split("e")[0].split("E")[0].partition(".")[2]) if "." in token else 0
            numbers.append((float(token), decimals))
        lines.append(Printed(NUMBER.sub("#", text), numbers, text))
    return lines


def compare_printed(name: str, ref: list[Printed], tgt: list[Printed], rtol: float, atol: float) -> Check:
    """Line by line: the same text around the numbers, each number within tolerance (one unit in its last
    printed digit added: a value printed with 4 decimals is known to 5e-5)."""
    count = sum(len(line.numbers) for line in ref)
    if len(ref) != len(tgt):
        return Check(name, False, count, detail=f"the reference printed {len(ref)} lines, the target {len(tgt)}"
                     + _first_line_difference(ref, tgt))
    max_abs = max_rel = 0.0
    for index, (a, b) in enumerate(zip(ref, tgt)):
        if a.template != b.template:
            return Check(name, False, count, detail=f"line {index + 1} differs: reference {a.text!r}, "
                                                    f"target {b.text!r}")
        for (x, dx), (y, dy) in zip(a.numbers, b.numbers):
            diff = abs(x - y) if not (math.isnan(x) and math.isnan(y)) else 0.0
            if math.isnan(diff):
                diff = math.inf
            max_abs, max_rel = max(max_abs, diff), max(max_rel, diff / max(abs(x), 1e-12))
            printed = 1.001 * 10.0 ** -min(dx, dy) if max(dx, dy) else 0.0  # rounding to the printed digits
            if diff > atol + rtol * abs(x) + printed and diff != 0:
                return Check(name, False, count, max_abs, max_rel,
                             detail=f"line {index + 1}: reference {a.text!r}, target {b.text!r}")
    return Check(name, True, count, max_abs, max_rel)


def _first_line_difference(ref: list[Printed], tgt: list[Printed]) -> str:
    for index, (a, b) in enumerate(zip(ref, tgt)):
        if a.template != b.template:
            return f"; first difference at line {index + 1}: reference {a.text!r}, target {b.text!r}"
    return ""


# -- dtypes, device residency, training --------------------------------------------------------------------------
DTYPE_FIELDS = (("loss_dtypes", "losses"), ("param_dtypes", "parameters"), ("call_dtypes", "module outputs"))
DEVICE_FIELDS = (("param_devices", "parameters"), ("loss_devices", "losses"), ("call_devices", "module outputs"))


def compare_dtypes(name: str, ref: dict, tgt: dict) -> Check | None:
    """The dtypes of the losses, the parameters and the modules' outputs must be the same in both runs."""
    differ, count = [], 0
    for key, what in DTYPE_FIELDS:
        a, b = ref.get(key, []), tgt.get(key, [])
        count += len(a)
        if a and b and a != b:
            differ.append(f"{what}: reference {', '.join(_short(d) for d in a)}, target {', '.join(_short(d) for d in b)}")
    if not count:
        return None
    return Check(name, not differ, count, detail="; ".join(differ))


def _short(dtype: str) -> str:
    return dtype.replace("torch.", "")


def device_residency(name: str, target: dict, device: str) -> Check:
    """On the device the migration targets, the model must be there: parameters, losses and outputs on `neuron`,
    operators run on it."""
    problems, seen = [], []
    for key, what in DEVICE_FIELDS:
        devices = target.get(key, [])
        if devices:
            seen.append(f"{what} on {', '.join(devices)}")
            if "neuron" not in devices:
                problems.append(f"the {what} were on {', '.join(devices)}")
    ops = sum(target.get("ops", {}).values()) if device == "emulated" else None
    if ops == 0:
        problems.append("no operator ran on the neuron device")
    if ops is not None:
        seen.append(f"{ops} operators run on the device")
    if problems:
        detail = ("; ".join(problems) + ": the model never reached the `neuron` device (a device name from "
                  "configuration, or a CPU/CUDA fallback branch taken?)")
        return Check(name, False, detail=detail)
    return Check(name, True, detail="; ".join(seen))


def training_happened(name: str, ref: dict, tgt: dict) -> Check | None:
    """The parameters changed in the target when they changed in the reference (no silent no-op training)."""
    a, b = ref.get("params_changed"), tgt.get("params_changed")
    if not ref.get("step_times") or not a or not b or len(a) != len(b):
        return None  # no optimizer step in the reference: an inference program
    stuck = [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x and not y]
    if stuck:
        return Check(name, False, len(a), detail=f"the parameters of module {', '.join(map(str, stuck))} did not "
                     "change in the target while the reference's did: the optimizer does not update the model "
                     "(created before the model was moved, or its step is never reached?)")
    return Check(name, True, len(a))
