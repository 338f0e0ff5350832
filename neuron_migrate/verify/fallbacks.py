"""Which operators the program ran that the native backend is known to run on the CPU instead.

The known-fallback data is `rules/fallback_ops.toml` (`[ops."aten::<name>"]` with a `note`). Until that file
ships, a built-in copy of the one list known (the explicit linalg CPU-fallback registrations of the
pre-release TorchNeuron source) stands in, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from neuron_migrate.catalogue import data_dir, load_data

DATA_FILE = "fallback_ops.toml"
BUILT_IN = {f"aten::{name}": "a linalg operator the native backend runs on the CPU"
            for name in ("linalg_qr", "_linalg_svd", "_linalg_eigh", "linalg_cholesky_ex", "linalg_inv_ex",
                         "linalg_lu_factor_ex", "linalg_ldl_factor_ex", "_linalg_slogdet", "_linalg_det",
                         "cholesky_inverse", "triangular_solve")}


@dataclass(frozen=True)
class Fallback:
    op: str  # aten::<name>
    count: int  # times the program ran it (0 when only the name is known)
    note: str


def known_fallbacks() -> tuple[dict[str, str], str]:
    """aten operator -> note, and where the data came from."""
    if (data_dir() / DATA_FILE).is_file():
        ops = load_data(DATA_FILE).get("ops", {})
        return {op: entry.get("note", "") for op, entry in ops.items()}, f"rules/{DATA_FILE}"
    return BUILT_IN, "built-in linalg list (rules/fallback_ops.toml not installed)"


def predict(op_counts: dict[str, int], known: dict[str, str]) -> list[Fallback]:
    """The operators run on the emulated device that match the known-fallback data, most frequent first.

    Counts are keyed "name" or "name.overload"; the data names operators without overload.
    """
    totals: dict[str, int] = {}
    for name, count in op_counts.items():
        op = "aten::" + name.split(".")[0]
        if op in known:
            totals[op] = totals.get(op, 0) + count
    return sorted((Fallback(op, n, known[op]) for op, n in totals.items()), key=lambda f: (-f.count, f.op))


def observed(op_names: list[str], known: dict[str, str]) -> list[Fallback]:
    """What the real backend reported (`torch_neuronx.get_fallback_ops()`: names only, no counts)."""
    return [Fallback(op, 0, known.get(op.split(".")[0], "")) for op in sorted(set(op_names))]
