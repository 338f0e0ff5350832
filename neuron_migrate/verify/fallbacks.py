"""Which operators the program ran that the native backend is known to run on the CPU instead.

The known-fallback data is `rules/fallback_ops.toml` (`[ops."aten::<name>"]` with a `note`), which `check`
uses too (NM308).
"""

from __future__ import annotations

from dataclasses import dataclass

from neuron_migrate.catalogue import load_data

DATA_FILE = "fallback_ops.toml"


@dataclass(frozen=True)
class Fallback:
    op: str  # aten::<name>
    count: int  # times the program ran it (0 when only the name is known)
    note: str


def known_fallbacks() -> dict[str, str]:
    """aten operator -> what to know about its fallback."""
    return {op: entry.get("note", "") for op, entry in load_data(DATA_FILE)["ops"].items()}


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
