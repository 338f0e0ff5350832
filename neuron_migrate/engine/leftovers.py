"""NM199, an engine step after the rules: every torch_xla reference that no rule reported on (enabled or not) is
reported and marked, so nothing is left behind silently. A new rule only has to report on a node (a `Call` counts
for its `func` too) to take it over."""

from __future__ import annotations

import functools

import libcst as cst

from neuron_migrate.catalogue import load_data, rule
from neuron_migrate.engine.edits import marker_room, marker_text, shorten
from neuron_migrate.engine.imports import is_legacy
from neuron_migrate.engine.names import dotted_str, not_a_read


@functools.lru_cache(maxsize=1)
def _hints() -> dict[str, str]:
    return load_data("mappings.toml")["hints"]


def _is_module(qualname: str) -> bool:
    """A torch_xla module (rather than a function or class of one), as far as the mapping data knows."""
    return qualname == "torch_xla" or any(key.startswith(qualname + ".") for key in _hints())


def hint_for(qualname: str) -> str:
    hints = _hints()
    if qualname in hints:
        return hints[qualname]
    parts = qualname.split(".")
    for i in range(len(parts) - 1, 0, -1):
        key = ".".join(parts[:i]) + ".*"
        if key in hints:
            return hints[key]
    return ""


MODULE_HINT = ("the torch_xla module itself is used as a value, e.g. an availability test; torch_xla is not "
               "installed with the native backend: decide what this code should do there")


_TARGET_OWNERS = (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor)
_BINDERS = (cst.AsName, cst.Param, cst.Global, cst.Nonlocal)
_IMPORTS = (cst.Import, cst.ImportFrom)


def _is_target(node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    kind = type(parent)  # exact types: isinstance on LibCST's ABCs is slow, and every name comes here
    if kind in _TARGET_OWNERS:
        return parent.target is node
    return kind in _BINDERS


CODE = "NM199"
TRIGGERS = (b"torch_xla",)
NODE_TYPES = (cst.Attribute, cst.Name)


def active(present, settings, path: str) -> bool:
    """Whether the step runs on this file (its pre-filter and the selection). The pre-filter reads the file's own
    bytes: a helper module of a program moving to neuron counts as holding `torch_xla` for the rules' pre-filter
    (facts.MOVING_TO_NEURON_BYTES), but the step only reports names the file imports from torch_xla, which its
    own text must spell."""
    return any(trigger in present.data for trigger in TRIGGERS) and settings.enabled(CODE, path)


def _reference(ctx, occ) -> str | None:
    """The legacy qualified name `occ.node` stands for, where it is a whole name chain that is used (not bound,
    not imported)."""
    node, parent = occ.node, occ.parent
    if type(parent) is cst.Attribute and (parent.value is node or parent.attr is node):
        return None  # only the whole chain counts
    if _is_target(node, parent) or not_a_read(node, parent):
        return None  # a binding (`xm = None`), a keyword's name (`f(xm=...)`), `global xm`: not a use
    if type(occ.small) in _IMPORTS:
        return None
    ctx.current = occ
    qual = ctx.qualname(node)
    return qual if is_legacy(qual) else None


def report_leftovers(ctx) -> None:
    """After every rule decided: report and mark each legacy reference no rule reported on."""
    by_statement: dict[cst.CSTNode, list[str]] = {}
    for occ in ctx.analysis.occurrences:
        node = occ.node
        if type(node) not in NODE_TYPES or node in ctx.handled:
            continue
        qual = _reference(ctx, occ)
        if qual is None or ctx.facts.paths.kept_detection(node, occ.scope):
            continue  # `xm is not None`, `if xm:`: an availability test, which the import tidy keeps working
        name = dotted_str(node) or qual
        whole, (qual, name) = qual, _up_to_dunder(qual, name)
        if _inner(node, whole.count(".") - qual.count(".")) in ctx.handled:
            continue  # `__version__` of `__version__.split`: a rule reported it
        hint = MODULE_HINT if isinstance(node, cst.Name) and _is_module(qual) else hint_for(qual)
        if ctx.report(CODE, node, marker=False, name=name, qualname=qual, hint=f"; {hint}" if hint else ""):
            items = by_statement.setdefault(occ.statement, {})
            items.setdefault(name, hint)
    ctx.current = None
    info = rule(CODE)
    for statement, items in by_statement.items():
        ctx.mark(statement, marker_text(CODE, _marker_what(items), info.link))


def _inner(node: cst.CSTNode, levels: int) -> cst.CSTNode:
    """The chain `levels` attributes shorter than `node` (`a.b` of `a.b.c` at 1)."""
    for _ in range(levels):
        if type(node) is not cst.Attribute:
            break
        node = node.value
    return node


def _up_to_dunder(qual: str, name: str) -> tuple[str, str]:
    """`torch_xla.__version__.split` is the module's `__version__` (a string whose method is no torch_xla API):
    the reference ends at the first module attribute such as `__version__` or `__file__`."""
    parts = qual.split(".")
    for i, part in enumerate(parts[1:], 1):
        if part.startswith("__") and part.endswith("__") and i + 1 < len(parts):
            extra = len(parts) - i - 1
            spelled = name.split(".")
            return ".".join(parts[:i + 1]), ".".join(spelled[:-extra]) if len(spelled) > extra else name
    return qual, name


def _marker_what(items: dict[str, str | None]) -> str:
    """`xm.foo`, `xm.bar` without an automatic rewrite; with the hint where one name has one and it fits. The
    words come first, so a marker cut to its room still says what is wrong (never `no...`)."""
    names = ", ".join(f"`{name}`" for name in items)
    if len(items) == 1:
        (name, hint), = items.items()
        if hint and len(with_hint := f"`{name}` has no automatic rewrite: {hint}") <= marker_room(CODE):
            return with_hint
    room = marker_room(CODE)
    for what in (f"no automatic rewrite for {names}", f"no rewrite for {names}"):
        if len(what) <= room:  # the names as written
            return what
    what = f"no rewrite for {names}"
    if not shorten(what, room).endswith("..."):
        return what  # the names shortened to their last part
    return f"{names}: by hand"  # a long name: the name is what the marker must keep
