"""1:1 renames: the catalogue's `[[rule.rename]]` rows (the same callable, class or constant under its PyTorch
name), interpreted here for every code that has them.

A legacy name is matched by what it stands for through the file's imports (aliases, `from` imports, imports
inside functions or guarded by try), in calls and as a bare reference (`opt_class = syncfree.AdamW`); the
new spelling is written through the module the row names, which is imported where it is missing. Imports of
the legacy names are left to the import tidy-up, and look-alikes (other modules' `device_count`) never match.

Where the file patches the PyTorch name itself (`torch.utils.checkpoint.checkpoint = _ckpt`, `_ckpt` calling
torch_xla's), the new spelling would be read after the patch and call `_ckpt` again: the legacy `from` import
becomes the same import of the PyTorch original instead (bound before the patch), and a reference through a
module is marked (engine/patches.py holds every other fix to the same rule).
"""

from __future__ import annotations

import libcst as cst

from neuron_migrate.catalogue import renames
from neuron_migrate.engine import patches
from neuron_migrate.engine.names import dotted_str, not_a_read
from neuron_migrate.rules import Rule, names_pattern
from neuron_migrate.rules.patterns import code
from neuron_migrate.rules.target import portable
from neuron_migrate.syntax.parse import expression, statements

ROWS = renames()
_IMPORTS = (cst.Import, cst.ImportFrom)


RELEASE_METHODS = frozenset({"split", "rsplit", "partition", "startswith"})
RELEASE_PARSERS = frozenset({"parse", "Version", "LooseVersion", "StrictVersion", "parse_version"})


def _read_as_release(ctx, node: cst.CSTNode) -> bool:
    """A version string read for the release it names: split, compared or parsed (`__version__.split(".")`,
    `__version__ >= "2.1"`, `version.parse(__version__)`), not shown or stored."""
    parents = ctx.analysis.parents
    parent = parents.get(node)
    if type(parent) is cst.Attribute:
        return parent.value is node and parent.attr.value in RELEASE_METHODS
    if type(parent) in (cst.Comparison, cst.ComparisonTarget):
        return True
    call = parents.get(parent) if type(parent) is cst.Arg else None
    if type(call) is cst.Call:
        func = call.func
        name = func.attr.value if type(func) is cst.Attribute else getattr(func, "value", None)
        return name in RELEASE_PARSERS
    return False


class Renamed(Rule):
    """Every code with catalogue rename rows (see `neuron_migrate.catalogue.Rename`)."""

    codes = tuple(sorted({found[0] for found in ROWS.values()}))
    triggers = tuple(sorted({name.split(".")[0].encode() for name in ROWS}))
    pattern = names_pattern({name.rsplit(".", 1)[-1] for name in ROWS})
    torch_xla_names_only = all(name.split(".")[0] == "torch_xla" for name in ROWS)  # a report's name is a row's
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A row's name read, or imported by name: LibCST's tree also holds such a name where Python's reads none
        (a keyword's name, `global`), and the rule reports it there."""
        return scan.any_qual(ROWS) or not scan.imports.isdisjoint(ROWS)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._patched: set[str] | None = None
        self._rebound: set[int] = set()  # the legacy imports already made imports of the originals

    def patched(self, row) -> bool:
        """The file assigns the PyTorch name (a monkeypatch) something other than the legacy name itself (that
        assignment goes: see `_patches_itself`)."""
        if self._patched is None:
            ctx = self.ctx
            found = patches.assignments(ctx.analysis) if patches.may_patch(ctx.source.text, ctx.analysis.module_scope.bindings) else []
            self._patched = {(name, ctx.qualname(value, scope)) for name, value, scope in found}
        return any(name in (row.neuron, row.accelerator) and value not in row.names for name, value in self._patched)

    def _bind_early(self, rule: str, row, node: cst.CSTNode) -> None:
        """`from torch_xla.utils.checkpoint import checkpoint as xla_ckpt` -> the same `from` import of the original,
        bound before the file patches the PyTorch name; the references stay. Any other reference: marked."""
        ctx = self.ctx
        spelling = row.spelling(portable(ctx))
        module, attribute = spelling.rsplit(".", 1)
        statement = self._import_from(node)
        if statement is None:
            if ctx.report(rule, node, call=code(node), fixed=spelling):
                ctx.fix_failed(ctx.decisions[-1], "the file patches it")
            return
        local = node.value
        fixed = f"from {module} import {attribute}" + (f" as {local}" if local != attribute else "")
        if ctx.report(rule, node, call=code(node), fixed=fixed) and id(statement) not in self._rebound:
            self._rebound.add(id(statement))
            ctx.replace(statement, statements(fixed)[0].body[0])

    def _import_from(self, node: cst.CSTNode) -> cst.ImportFrom | None:
        """The module's one-name `from` import that binds this bare name (the only one, but for an `= None` stand-in of a failed import), else None: an
        import inside a function runs when the function does, after the patch."""
        if type(node) is not cst.Name:
            return None
        owner = self.ctx.analysis.lookup(node.value, self.ctx.scope)
        bindings = owner.bindings.get(node.value, []) if owner is not None else []
        imported = [b for b in bindings if b.kind == "import"]
        if owner is None or owner.kind != "module" or len(imported) != 1 \
                or any(b.kind != "import" and not b.fallback for b in bindings):
            return None
        statement = imported[0].node
        if type(statement) is not cst.ImportFrom or isinstance(statement.names, cst.ImportStar) \
                or len(statement.names) != 1 or dotted_str(statement.names[0].name) is None:
            return None
        return statement

    def _reference(self, node: cst.CSTNode) -> None:
        ctx = self.ctx
        occ = ctx.current
        if type(occ.parent) is cst.Attribute and occ.parent.value is node and ctx.qualname(occ.parent) in ROWS:
            return  # the whole chain is a legacy name: renamed as one (`__version__.split` renames `__version__`)
        if type(occ.small) in _IMPORTS or not_a_read(node, occ.parent):  # exact types: isinstance is slow
            return
        found = ROWS.get(ctx.qualname(node))
        if found is None:
            return
        rule, row = found
        if row.neuron.endswith(".__version__") and not _read_as_release(ctx, node):
            return  # shown or stored as torch_xla's own version (a docs page, a log line): NM199 marks it
        style = portable(ctx)
        if self._patches_itself(row, node):
            # `torch.utils.checkpoint.checkpoint = xla_checkpoint.checkpoint`: a monkeypatch of the PyTorch name
            # with the legacy one; renamed it would assign the name to itself, so the statement goes
            if ctx.report(rule, node, call=code(node), fixed=row.spelling(style)):
                ctx.remove(occ.small)
            return
        if self.patched(row):
            self._bind_early(rule, row, node)
            return
        fixed = f"{ctx.module_ref(row.module, row.alias)}.{row.attribute(style)}"
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
