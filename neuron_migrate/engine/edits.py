"""Apply the edits the rules decided, in one pass over the tree.

Rules never transform trees themselves: they say "replace this node", "remove this statement", "insert
these statements after that one", "put this marker above that statement". The Applier carries them out
bottom-up, so an outer replacement sees the inner ones already made, and keeps what nobody asked to change:
comments above a removed statement move to the next statement, a block left empty gets `pass`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

import libcst as cst
from libcst._nodes.expression import _BaseParenthesizedNode
from libcst._nodes.internal import CodegenState

from neuron_migrate.syntax.walk import children, node_kind, visit_fields

Replacer = Callable[[cst.CSTNode], cst.CSTNode]

MARKER_PREFIX = "# TODO(neuron-migrate "


def marker_text(code: str, message: str, link: str) -> str:
    message = " ".join(message.split()).rstrip(".")
    return f"{MARKER_PREFIX}{code}): {message}, see {link}"


@dataclass
class EditSet:
    replace: dict[cst.CSTNode, list[Replacer]] = field(default_factory=dict)
    remove: set[cst.CSTNode] = field(default_factory=set)  # small statements or whole statements
    after: dict[cst.CSTNode, list[cst.BaseStatement]] = field(default_factory=dict)
    before: dict[cst.CSTNode, list[cst.BaseStatement]] = field(default_factory=dict)
    markers: dict[cst.CSTNode, list[str]] = field(default_factory=dict)
    unwrap: set[cst.CSTNode] = field(default_factory=set)  # `with` statements replaced by their body

    def __bool__(self) -> bool:
        return bool(self.replace or self.remove or self.after or self.before or self.markers or self.unwrap)

    def add_replace(self, node: cst.CSTNode, fn: Replacer) -> None:
        self.replace.setdefault(node, []).append(fn)

    def targets(self) -> set[cst.CSTNode]:
        return {*self.replace, *self.remove, *self.after, *self.before, *self.markers, *self.unwrap}

    def add_marker(self, statement: cst.CSTNode, text: str) -> None:
        texts = self.markers.setdefault(statement, [])
        if text not in texts:
            texts.append(text)


def existing_comments(statement: cst.CSTNode) -> list[str]:
    lines = getattr(statement, "leading_lines", ())
    return [line.comment.value for line in lines if line.comment is not None]


def has_marker(statement: cst.CSTNode, code: str) -> bool:
    tag = f"{MARKER_PREFIX}{code})"
    return any(c.startswith(tag) for c in existing_comments(statement))


class Applier:
    """Rebuilds the nodes on the paths to the edited ones, bottom-up, as a LibCST transformer would, without
    visiting the subtrees that hold no edit."""

    def __init__(self, edits: EditSet, visit: set[cst.CSTNode]) -> None:
        self.edits = edits
        self.visit = visit  # the edited nodes and their ancestors; other subtrees are left as they are
        self._dropped: set[cst.CSTNode] = set()

    def rebuild(self, node: cst.CSTNode):
        """`node` (on a path) with its children on paths rebuilt, then its own edits made. In a list of
        statements, a FlattenSentinel result stands for several statements."""
        visit = self.visit
        changes = {}
        for name in visit_fields(type(node)):
            value = getattr(node, name)
            if type(value) in (list, tuple):
                if any(node_kind(type(item)) and item in visit for item in value):
                    items: list = []
                    for item in value:
                        new = self.rebuild(item) if node_kind(type(item)) and item in visit else item
                        if isinstance(new, cst.FlattenSentinel):
                            items.extend(new.nodes)
                        elif new is not cst.RemovalSentinel.REMOVE:
                            items.append(new)
                    changes[name] = tuple(items)
            elif node_kind(type(value)) and value in visit:
                new = self.rebuild(value)
                if new is not value:
                    changes[name] = new
        return self.on_leave(node, node.with_changes(**changes) if changes else node)

    def on_leave(self, original_node, updated_node):
        result = updated_node
        for fn in self.edits.replace.get(original_node, ()):
            result = fn(result)
        if isinstance(original_node, cst.SimpleStatementLine):
            return self._statement(original_node, result)
        if isinstance(original_node, cst.BaseCompoundStatement):
            return self._statement(original_node, result)
        if isinstance(original_node, cst.SimpleStatementSuite):
            return self._suite(original_node, result)
        if isinstance(original_node, (cst.IndentedBlock, cst.Module)):
            return self._block(result)
        return result

    def _statement(self, original, updated):
        edits = self.edits
        dropped = original in edits.remove
        if isinstance(original, cst.SimpleStatementLine) and isinstance(updated, cst.SimpleStatementLine):
            keep = [u for o, u in zip(original.body, updated.body) if o not in edits.remove]
            dropped = dropped or not keep
            if keep and len(keep) != len(updated.body):
                keep[-1] = keep[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
                updated = updated.with_changes(body=keep)
        before = list(edits.before.get(original, ()))
        after = list(edits.after.get(original, ()))
        texts = [t for t in edits.markers.get(original, ()) if t not in existing_comments(original)]
        if texts and hasattr(updated, "leading_lines"):
            lines = [cst.EmptyLine(indent=True, comment=cst.Comment(t)) for t in texts]
            updated = updated.with_changes(leading_lines=[*updated.leading_lines, *lines])
        if dropped:
            replacement = [*before, *after]
            if not replacement:
                self._dropped.add(updated)  # the enclosing block carries its comments on
                return updated
            replacement[0] = replacement[0].with_changes(
                leading_lines=[*updated.leading_lines, *replacement[0].leading_lines])
            return cst.FlattenSentinel(replacement)
        if original in edits.unwrap and isinstance(updated, cst.With) and isinstance(updated.body, cst.IndentedBlock):
            body = list(updated.body.body)
            body[0] = body[0].with_changes(leading_lines=[*updated.leading_lines, *body[0].leading_lines])
            return cst.FlattenSentinel(body)
        if before or after:
            if before and hasattr(updated, "leading_lines"):
                before[0] = before[0].with_changes(leading_lines=[*updated.leading_lines, *before[0].leading_lines])
                updated = updated.with_changes(leading_lines=[])
            return cst.FlattenSentinel([*before, updated, *after])
        return updated

    def _suite(self, original, updated):
        keep = [u for o, u in zip(original.body, updated.body) if o not in self.edits.remove]
        if len(keep) == len(updated.body):
            return updated
        if not keep:
            keep = [cst.Pass()]
        keep[-1] = keep[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(body=keep)

    def _block(self, updated):
        body = list(updated.body)
        if not any(s in self._dropped for s in body):
            return updated
        out: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []
        dropped_before = False
        for stmt in body:
            if stmt in self._dropped:
                carried.extend(stmt.leading_lines)
                dropped_before = True
                continue
            if dropped_before:
                stmt = stmt.with_changes(leading_lines=_merge_lines(carried, stmt.leading_lines, at_start=not out))
                carried, dropped_before = [], False
            out.append(stmt)
        footer = list(updated.footer)
        if any(line.comment is not None for line in carried):
            footer = [*carried, *footer]  # comments of the last statements removed stay, at the block's end
        if isinstance(updated, cst.Module):
            return updated.with_changes(body=out, footer=footer)
        if not out:
            comments = [line for line in footer if line.comment is not None]
            out = [cst.SimpleStatementLine([cst.Pass()], leading_lines=_strip_blank_start(comments))]
            footer = [line for line in updated.footer]
        return updated.with_changes(body=out, footer=footer)


def _merge_lines(carried: list[cst.EmptyLine], own: list, at_start: bool) -> list:
    """The lines above a statement whose predecessors were removed: comments stay, blank runs do not grow."""
    if any(line.comment is not None for line in carried):
        merged = [*carried, *own]
    elif any(line.comment is None for line in own):
        merged = list(own)
    else:
        merged = [*carried[:1], *own] if carried else list(own)
    return _strip_blank_start(merged) if at_start else merged


def _strip_blank_start(lines: list) -> list:
    i = 0
    while i < len(lines) and lines[i].comment is None:
        i += 1
    return list(lines[i:])


# -- code generation ---------------------------------------------------------------------------------------
# LibCST generates code through a state object and per-node methods; for our own states (no positions to
# record) three of its steps do nothing and cost a Python call each, around every node: the before/after hooks,
# `record_syntactic_position` and, for expressions without parentheses, `_parenthesize`. The adjustments below
# skip them for those states only (any other state goes the LibCST way), and let the Renderer reuse statements.
# Tests hold the Renderer's text equal to `module.code` on the fixtures and standard-library modules.

NOTHING = contextlib.nullcontext()  # a context manager with nothing to do, entered again and again


class PlainCodegenState(CodegenState):
    """LibCST's code-generation state, whose `record_syntactic_position` (a no-op unless positions are computed)
    is a plain object instead of a generator-based context manager: a third less time per module."""

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):  # noqa: ARG002
        return NOTHING


_GENERATE_WITH_HOOKS = cst.CSTNode._codegen


def _codegen(self: cst.CSTNode, state, **kwargs) -> None:
    """LibCST's `_codegen`, without the calls of the state's before/after hooks where those do nothing."""
    if type(state) is _RememberingState or type(state) is PlainCodegenState:
        self._codegen_impl(state, **kwargs)
    else:
        _GENERATE_WITH_HOOKS(self, state, **kwargs)


cst.CSTNode._codegen = _codegen  # type: ignore[method-assign]

_PARENTHESIZE = _BaseParenthesizedNode._parenthesize


def _parenthesize(self, state):
    """LibCST's `_parenthesize` (a generator-based context manager, around every expression) where it does
    something: parentheses to write, or positions to record. Otherwise nothing to enter, for our own states."""
    if not self.lpar and not self.rpar and (type(state) is PlainCodegenState or type(state) is _RememberingState):
        return NOTHING
    return _PARENTHESIZE(self, state)


_BaseParenthesizedNode._parenthesize = _parenthesize  # type: ignore[method-assign]


class _RememberingState(PlainCodegenState):
    """Generates each statement once per file: `statements` maps (statement, indentation, elif) to its code."""

    statements: dict


def _remembered_codegen(self: cst.CSTNode, state, **kwargs) -> None:
    """A statement's `_codegen`: from the Renderer's memory where it was generated before at the same place."""
    memory = state.statements if type(state) is _RememberingState else None
    if memory is None:
        _codegen(self, state, **kwargs)
        return
    key = (self, tuple(state.indent_tokens), kwargs.get("is_elif", False))
    text = memory.get(key)
    if text is None:
        first = len(state.tokens)
        _codegen(self, state, **kwargs)
        text = memory[key] = "".join(state.tokens[first:])
        del state.tokens[first:]
    state.tokens.append(text)


# A statement's code depends on the statement, its indentation and the module's defaults only, so the Renderer
# may reuse it: the classes of statements generate through the memory when a Renderer asks (and as LibCST does
# for anybody else).
for _statement_class in (cst.SimpleStatementLine, cst.If, cst.For, cst.While, cst.With, cst.Try, cst.TryStar,
                         cst.FunctionDef, cst.ClassDef, cst.Match):
    _statement_class._codegen = _remembered_codegen  # type: ignore[method-assign]


class Renderer:
    """The code of a module (the same text as `module.code`), each statement generated once: after the edits, the
    statements they did not touch, at any depth, are not generated again."""

    def __init__(self) -> None:
        self._statements: dict[tuple, str] = {}
        self._modules: dict[cst.Module, str] = {}

    def code(self, module: cst.Module) -> str:
        text = self._modules.get(module)
        if text is None:
            text = self._modules[module] = self._render(module)
        return text

    def _render(self, module: cst.Module) -> str:
        state = _RememberingState(default_indent=module.default_indent, default_newline=module.default_newline)
        state.statements = self._statements
        for node in (*module.header, *module.body, *module.footer):
            node._codegen(state)
        text = "".join(state.tokens)
        if module.has_trailing_newline:
            return text or module.default_newline
        # Module drops its final token, the last line's newline
        return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith(("\n", "\r")) else text


def apply(module: cst.Module, edits: EditSet,
          parents: Mapping[cst.CSTNode, cst.CSTNode | None] | None = None) -> cst.Module:
    """The module with the edits made. `parents` (from the module's Analysis) saves a walk over the tree."""
    if not edits:
        return module
    return Applier(edits, with_ancestors(module, edits.targets(), parents)).rebuild(module)


def with_ancestors(root: cst.CSTNode, nodes: set[cst.CSTNode],
                   parents: Mapping[cst.CSTNode, cst.CSTNode | None] | None = None) -> set[cst.CSTNode]:
    """`nodes` and every node above them up to `root`. A `parents` map that does not lead a node up to `root`
    (it was made for another tree) is not trusted: the tree is walked instead."""
    parent = parents if parents is not None else _parents(root)
    out: set[cst.CSTNode] = {root}
    for node in nodes:
        while node not in out:
            out.add(node)
            node = parent.get(node)
            if node is None:
                if parents is not None:
                    return with_ancestors(root, nodes)
                break  # not in this tree: nothing to apply there
    return out


def _parents(root: cst.CSTNode) -> dict[cst.CSTNode, cst.CSTNode]:
    parent: dict[cst.CSTNode, cst.CSTNode] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        for child in children(node):
            parent[child] = node
            stack.append(child)
    return parent
