"""Rule implementations: one module per idiom family, found automatically.

A rule is a class with the catalogue codes it reports, the byte strings without which a file cannot match
(the pre-filter), and `visit_<LibCST node type>` methods that the engine calls with each such node of the
file (`self.ctx.current` tells where it sits). A rule only decides: it reports findings and the edits that
fix them through `self.ctx`; the engine applies, validates and writes.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

if TYPE_CHECKING:
    from neuron_migrate.engine import FileContext


class Rule:
    codes: ClassVar[tuple[str, ...]] = ()
    triggers: ClassVar[tuple[bytes, ...]] = ()
    # ... and, when set, one of these too (b"torch" for rules that only match names imported from torch).
    context: ClassVar[tuple[bytes, ...]] = ()
    # ... and, when set, this pattern too (see `names_pattern`): for names short enough to hide in other words.
    pattern: ClassVar[re.Pattern[bytes] | None] = None
    # Rules that must run after others (for example to see which statements were removed) set a higher order.
    order: ClassVar[int] = 0

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def finish(self) -> None:
        """Called once after every node was visited."""

    @classmethod
    def may_match(cls, data: bytes) -> bool:
        """The pre-filter: False when the file cannot hold anything this rule reports."""
        return any(t in data for t in cls.triggers) and (not cls.context or any(t in data for t in cls.context)) \
            and (cls.pattern is None or cls.pattern.search(data) is not None)

    @classmethod
    def node_types(cls) -> dict[type, str]:
        out = {}
        for name, _ in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("visit_"):
                node_type = getattr(cst, name[len("visit_"):], None)
                if node_type is None:
                    raise TypeError(f"{cls.__name__}.{name}: no LibCST node type {name[6:]}")
                out[node_type] = name
        return out


def names_pattern(names) -> re.Pattern[bytes]:
    """Where a module attribute `name` can be reached from: `<anything>.name` (whatever the module is bound to),
    or an import statement that names it (`from name import`, `import name`, one line or in parentheses)."""
    alternatives = b"|".join(sorted(re.escape(n.encode()) for n in names))
    return re.compile(rb"\.(?:%s)\b|\b(?:import|from)\b[^\n]*\b(?:%s)\b|\bimport\s*\([^)]*\b(?:%s)\b"
                      % (alternatives, alternatives, alternatives))


@functools.lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                found.append(obj)
    return tuple(sorted(found, key=lambda r: (r.order, r.codes)))


@functools.lru_cache(maxsize=1)
def all_triggers() -> tuple[bytes, ...]:
    return tuple(sorted({t for r in all_rules() for t in r.triggers}))
