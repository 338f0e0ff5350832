"""Code generation: LibCST's, with three of its no-op steps skipped for our own states, and statements reused.

LibCST generates code through a state object and per-node methods; for our own states (no positions to
record) three of its steps do nothing and cost a Python call each, around every node: the before/after hooks,
`record_syntactic_position` and, for expressions without parentheses, `_parenthesize`. The replacements below
skip them for those states only (any other state goes the LibCST way), and let the Renderer reuse statements.
They are in LibCST's classes only inside the tool's sessions (door.py); with LibCST unpatched (a release outside
the tested range) the Renderer is `module.code` and `code(node)` is `Module.code_for_node`. Tests hold the
Renderer's text equal to stock LibCST's `module.code` on the fixtures and standard-library modules.
"""

from __future__ import annotations

import contextlib

import libcst as cst
from libcst._nodes.expression import _BaseParenthesizedNode
from libcst._nodes.internal import CodegenState

from neuron_migrate.syntax import door

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


_PARENTHESIZE = _BaseParenthesizedNode._parenthesize


def _parenthesize(self, state):
    """LibCST's `_parenthesize` (a generator-based context manager, around every expression) where it does
    something: parentheses to write, or positions to record. Otherwise nothing to enter, for our own states."""
    if not self.lpar and not self.rpar and (type(state) is PlainCodegenState or type(state) is _RememberingState):
        return NOTHING
    return _PARENTHESIZE(self, state)


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


door.register(cst.CSTNode, "_codegen", _codegen)
door.register(_BaseParenthesizedNode, "_parenthesize", _parenthesize)
# A statement's code depends on the statement, its indentation and the module's defaults only, so the Renderer
# may reuse it: the classes of statements generate through the memory when a Renderer asks (and as LibCST does
# for anybody else).
STATEMENT_CLASSES = (cst.SimpleStatementLine, cst.If, cst.For, cst.While, cst.With, cst.Try, cst.TryStar,
                     cst.FunctionDef, cst.ClassDef, cst.Match)
for _statement_class in STATEMENT_CLASSES:
    door.register(_statement_class, "_codegen", _remembered_codegen)


class Renderer:
    """The code of a module (the same text as `module.code`), each statement generated once: after the edits, the
    statements they did not touch, at any depth, are not generated again. One Renderer serves one file, inside
    the file's session (its memory is keyed by nodes, which hash differently outside sessions)."""

    def __init__(self) -> None:
        self._statements: dict[tuple, str] = {}
        self._modules: dict[cst.Module, str] = {}

    def code(self, module: cst.Module) -> str:
        text = self._modules.get(module)
        if text is None:
            text = self._modules[module] = self._render(module) if door.fast() else module.code
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


_EMPTY_MODULE = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    """The code of one node, as `Module([]).code_for_node(node)` gives it."""
    if not door.fast():
        return _EMPTY_MODULE.code_for_node(node)
    state = PlainCodegenState(default_indent=_EMPTY_MODULE.default_indent,
                              default_newline=_EMPTY_MODULE.default_newline)
    node._codegen(state)
    return "".join(state.tokens)
