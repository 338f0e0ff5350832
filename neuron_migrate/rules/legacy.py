"""NM199: every torch_xla API that no other rule rewrote is reported, so nothing is left behind silently."""

from __future__ import annotations

import functools

import libcst as cst

from neuron_migrate.catalogue import load_data, rule
from neuron_migrate.engine.edits import marker_text
from neuron_migrate.engine.imports import is_legacy
from neuron_migrate.engine.names import dotted_str
from neuron_migrate.rules import Rule


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


class LegacyApi(Rule):
    codes = ("NM199",)
    triggers = (b"torch_xla",)
    order = 100  # after every rule that may handle the same names

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.references: list[tuple[object, cst.CSTNode, str]] = []

    def _reference(self, node: cst.CSTNode) -> None:
        occ = self.ctx.current
        parent = occ.parent
        if type(parent) is cst.Attribute and (parent.value is node or parent.attr is node):
            return  # only the whole chain counts
        if _is_target(node, parent):
            return  # a binding (`xm = None`), not a use
        if type(occ.small) in _IMPORTS:
            return
        qual = self.ctx.qualname(node)
        if is_legacy(qual):
            self.references.append((occ, node, qual))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._reference(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._reference(node)

    def finish(self) -> None:
        ctx = self.ctx
        by_statement: dict[cst.CSTNode, list[str]] = {}
        for occ, node, qual in self.references:
            if node in ctx.handled:
                continue
            ctx.current = occ
            name = dotted_str(node) or qual
            hint = MODULE_HINT if isinstance(node, cst.Name) and _is_module(qual) else hint_for(qual)
            if ctx.report("NM199", node, marker=False, name=name, qualname=qual, hint=f"; {hint}" if hint else ""):
                items = by_statement.setdefault(occ.statement, [])
                item = f"`{name}` ({hint})" if hint else f"`{name}`"
                if item not in items:
                    items.append(item)
        ctx.current = None
        info = rule("NM199")
        for statement, items in by_statement.items():
            text = "torch_xla API without an automatic rewrite: " + ", ".join(items)
            ctx.edits.add_marker(statement, marker_text("NM199", text, info.link))
