"""1:1 renames: the catalogue's `[[rule.rename]]` rows (the same callable, class or constant under its PyTorch
name), interpreted here for every code that has them.

A legacy name is matched by what it stands for through the file's imports (aliases, `from` imports, imports
inside functions or guarded by try), in calls and as a bare reference (`opt_class = syncfree.AdamW`); the
new spelling is written through the module the row names, which is imported where it is missing. Imports of
the legacy names are left to the import tidy-up, and look-alikes (other modules' `device_count`) never match.
"""

from __future__ import annotations

import libcst as cst

from neuron_migrate.catalogue import renames
from neuron_migrate.rules import Rule, names_pattern
from neuron_migrate.rules.patterns import code
from neuron_migrate.rules.target import portable
from neuron_migrate.syntax.parse import expression

ROWS = renames()
_IMPORTS = (cst.Import, cst.ImportFrom)


class Renamed(Rule):
    """Every code with catalogue rename rows (see `neuron_migrate.catalogue.Rename`)."""

    codes = tuple(sorted({found[0] for found in ROWS.values()}))
    triggers = tuple(sorted({name.split(".")[0].encode() for name in ROWS}))
    pattern = names_pattern({name.rsplit(".", 1)[-1] for name in ROWS})

    def _reference(self, node: cst.CSTNode) -> None:
        ctx = self.ctx
        occ = ctx.current
        if type(occ.parent) is cst.Attribute and occ.parent.value is node:
            return  # only the whole chain
        if type(occ.small) in _IMPORTS:  # exact types: isinstance on LibCST's ABCs is slow
            return
        found = ROWS.get(ctx.qualname(node))
        if found is None:
            return
        rule, row = found
        style = portable(ctx)
        if self._patches_itself(row, node):
            # `torch.utils.checkpoint.checkpoint = xla_checkpoint.checkpoint`: a monkeypatch of the PyTorch name
            # with the legacy one; renamed it would assign the name to itself, so the statement goes
            if ctx.report(rule, node, call=code(node), fixed=row.spelling(style)):
                ctx.remove(occ.small)
            return
        fixed = f"{ctx.module_ref(row.module)}.{row.attribute(style)}"
        if ctx.report(rule, node, call=code(node), fixed=fixed):
            ctx.replace(node, expression(fixed))

    def _patches_itself(self, row, node: cst.CSTNode) -> bool:
        """`<new name> = <legacy name>` alone: the assignment the rename would make `x = x`."""
        occ = self.ctx.current
        small = occ.small
        if type(small) is not cst.Assign or small.value is not node or len(small.targets) != 1:
            return False
        target = self.ctx.qualname(small.targets[0].target)
        return target is not None and target in (row.neuron, row.accelerator)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._reference(node)

    def visit_Name(self, node: cst.Name) -> None:
        if type(self.ctx.current.parent) is not cst.Attribute or self.ctx.current.parent.value is node:
            self._reference(node)
