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

from neuron_migrate.engine.paths import XLA_REWRITE

if TYPE_CHECKING:
    from neuron_migrate.engine.python import FileContext
    from neuron_migrate.engine.scan import Scan
    from neuron_migrate.settings import Settings


class Present:
    """Which byte strings one file holds, each searched for once however many rules ask."""

    __slots__ = ("data", "_seen", "_imports")

    def __init__(self, data: bytes, held: tuple[bytes, ...] = ()) -> None:
        """`held`: byte strings counted as present whatever the bytes say (a helper module of a program moving to
        neuron holds what such a file holds: see `moving_to_neuron` in engine/facts.py)."""
        self.data = data
        self._seen: dict[bytes, bool] = dict.fromkeys(held, True)
        self._imports: bytes | None = None

    @property
    def imports(self) -> bytes:
        """The text of the file's import statements (see IMPORT_STATEMENTS), found once."""
        if self._imports is None:
            self._imports = b"\n".join(IMPORT_STATEMENTS.findall(self.data))
        return self._imports

    def any(self, needles: tuple[bytes, ...]) -> bool:
        seen = self._seen
        for needle in needles:
            hit = seen.get(needle)
            if hit is None:
                hit = seen[needle] = needle in self.data
            if hit:
                return True
        return False


class Rule:
    codes: ClassVar[tuple[str, ...]] = ()
    triggers: ClassVar[tuple[bytes, ...]] = ()
    # ... and, when set, one of these too (b"torch" for rules that only match names imported from torch).
    context: ClassVar[tuple[bytes, ...]] = ()
    # ... and, when set, this pattern too (see `names_pattern`): for names short enough to hide in other words.
    pattern: ClassVar[NamesPattern | re.Pattern[bytes] | None] = None
    # Which code paths (engine/paths.py) the codes act on: XLA_REWRITE (the default) acts on XLA-path and common
    # code, never on a TPU, CUDA, MPS, XPU or CPU-fallback path, and not at all in a multi-backend file (one NM111
    # marker per XLA branch instead); CUDA_LEFTOVER (NM320-NM323) acts on XLA-path code, and on common code only
    # where the file does not keep XLA optional. `FileContext.report` applies it to every finding.
    acts_on: ClassVar[str] = XLA_REWRITE
    # Every report of the rule is on a name the file imports from torch_xla (its call tables hold torch_xla's
    # names only): the tree pre-filter then passes the file on only where an import binds a torch_xla module. (The
    # byte pre-filter alone passes any module of a program moving to neuron: see facts.MOVING_TO_NEURON_BYTES.)
    torch_xla_names_only: ClassVar[bool] = False
    # `may_match_tree` reads no selection (which codes are enabled; the options and the project it may read): it is
    # False only where the rule reports nothing at all, enabled or not. The engine then asks it where the NM199
    # step runs too (engine/python.py `tree_filter`), where every rule that may report runs whatever the
    # selection, for the nodes it takes over from the step.
    tree_predicate_any_selection: ClassVar[bool] = False

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def finish(self) -> None:
        """Called once after every node was visited."""

    @classmethod
    def may_match(cls, data: bytes, present: Present | None = None) -> bool:
        """The pre-filter: False when the file cannot hold anything this rule reports. `present` shares the
        byte-string lookups among the rules deciding on the same file."""
        present = present or Present(data)
        return (not cls.context or present.any(cls.context)) and present.any(cls.triggers) \
            and (cls.pattern is None or _search(cls.pattern, data, present))

    @classmethod
    def may_match_tree(cls, scan: Scan, settings: Settings) -> bool:
        """The tree pre-filter (engine/scan.py), asked where the byte pre-filter passed the file and `check` has
        Python's tree of it: False only when no report of this rule is possible given what the file spells, its
        names resolved through its imports. The default keeps the rule, unless all it reports are names imported
        from torch_xla (`torch_xla_names_only`)."""
        return not cls.torch_xla_names_only or scan.imports_under(("torch_xla",))

    @classmethod
    def words(cls) -> tuple[str, ...]:
        """Words a decision may rest on in a function that spells no trigger (`torch.jit.save` of a traced model in a
        file that imports torch_neuronx elsewhere, a field named like a Neuron-only argument in the file's own
        class): `check`'s lean parse (engine/lean.py) keeps every definition that spells one as a word."""
        return ()

    @classmethod
    def project_words(cls, project) -> tuple[str, ...]:
        """`words` that the project model gives (a `FileProject`): names a decision rests on that another module
        defines, so that no trigger of this file is near them."""
        return ()

    @classmethod
    def node_types(cls) -> dict[type, str]:
        """{LibCST node type: name of the method that visits it}, found once per class."""
        found = cls.__dict__.get("_node_types")
        if found is None:
            found = cls._find_node_types()
            cls._node_types = found
        return found

    @classmethod
    def _find_node_types(cls) -> dict[type, str]:
        out = {}
        for name, _ in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("visit_"):
                node_type = getattr(cst, name[len("visit_"):], None)
                if node_type is None:
                    raise TypeError(f"{cls.__name__}.{name}: no LibCST node type {name[6:]}")
                out[node_type] = name
        return out


# Import statements, found cheaply: from a line start or after `;` / `:`, with backslash continuations and a
# parenthesised name list that spans lines. A superset (a docstring line starting with "from" counts too).
IMPORT_STATEMENTS = re.compile(rb"(?:^|[;:])[ \t]*(?:from|import)\b(?:[^\n\\(]|\\[\s\S])*(?:\([^)]*\)[^\n]*)?",
                               re.M)


class NamesPattern:
    """Where a module attribute `name` can be reached from: `<anything>.name` (whatever the module is bound to,
    `torch . sparse` and `torch.\\` continuations too), or an import statement that names it (`from name import`,
    `import name`, `from m import (a,\n name)`, with backslash continuations)."""

    def __init__(self, names) -> None:
        self.names = tuple(sorted(set(names)))
        alternatives = b"|".join(sorted(re.escape(n.encode()) for n in names))
        self._attribute = re.compile(rb"\.(?:\s|\\)*(?:%s)\b" % alternatives)
        self._imported = re.compile(rb"\b(?:%s)\b" % alternatives)

    def search(self, data: bytes, present: Present | None = None) -> bool:
        if self._attribute.search(data):
            return True
        return self._imported.search((present or Present(data)).imports) is not None


def _search(pattern: NamesPattern | re.Pattern[bytes], data: bytes, present: Present) -> bool:
    if isinstance(pattern, NamesPattern):
        return pattern.search(data, present)
    return pattern.search(data) is not None


def names_pattern(names) -> NamesPattern:
    return NamesPattern(names)


@functools.lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                found.append(obj)
    return tuple(sorted(found, key=lambda r: (_AFTER.get(r.__name__, 0), r.codes)))


# The orderings that matter, all of them; every other rule decides in the order of its codes. Rules see every node
# in file order; a later rule's `finish()` runs after an earlier one's, and its edits to the same statement come
# after the earlier rule's. (NM199, which needs every rule's reports, is not a rule: an engine step after them.)
_AFTER = {
    # NM508 / NM509 before NM506: the optimum-neuron import of trainer classes that stay is the library's first
    "OptimumNeuronTrainer": -1,
    "GradientAveraging": 1,  # NM106 after NM107: the DDP wrapper it inserts comes after the inserted model.compile()
}
