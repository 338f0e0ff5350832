"""Compare two runs' records: loss curves, final parameters, outputs, step counts."""

from __future__ import annotations

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

    def to_json(self) -> dict:
        return {k: v for k, v in vars(self).items() if v is not None and v != ""}


@dataclass
class Comparison:
    rtol: float
    atol: float
    precision: str
    checks: list[Check] = field(default_factory=list)

    @property
    def equivalent(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)


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
        checks.append(check)
    return checks


def compare(reference: list[dict], target: list[dict], rtol: float | None = None, atol: float | None = None,
            cross_backend: bool = False) -> Comparison:
    """Compare rank by rank: the same number of processes, losses, steps, parameters and outputs."""
    precision = precision_of(reference + target, cross_backend)
    default_rtol, default_atol = TOLERANCES[precision]
    result = Comparison(rtol if rtol is not None else default_rtol, atol if atol is not None else default_atol,
                        precision)
    if len(reference) != len(target):
        result.checks.append(Check("processes", False, detail=f"reference {len(reference)}, target {len(target)}"))
        return result
    for ref, tgt in zip(reference, target):
        prefix = f"rank {ref['meta']['rank']}: " if len(reference) > 1 else ""
        result.checks.extend(_compare_rank(prefix, ref, tgt, result.rtol, result.atol))
    return result


def _compare_rank(prefix: str, ref: dict, tgt: dict, rtol: float, atol: float) -> list[Check]:
    checks = []
    steps_ref, steps_tgt = len(ref["step_times"]), len(tgt["step_times"])
    if steps_ref != steps_tgt:
        checks.append(Check(f"{prefix}optimizer steps", False, steps_ref,
                            detail=f"reference took {steps_ref} optimizer steps, target {steps_tgt}"))
    if ref["losses"] or tgt["losses"]:
        checks.append(compare_losses(f"{prefix}loss curve", ref["losses"], tgt["losses"], rtol, atol))
    if ref["params"] or tgt["params"]:
        checks.extend(_params(f"{prefix}final parameters", ref["params"], tgt["params"], rtol, atol))
    if ref["outputs"] or tgt["outputs"]:
        flat_ref = [t for call in ref["outputs"] for t in call]
        flat_tgt = [t for call in tgt["outputs"] for t in call]
        calls = plural(len(ref["outputs"]), "call")
        checks.append(compare_tensors(f"{prefix}module outputs ({calls})", flat_ref, flat_tgt, rtol, atol))
    return checks
