"""Visit a LibCST tree the way `node.visit(visitor)` does, two to three times faster, for visitors that only read.

LibCST's own walk rebuilds every node on the way back up (it serves transformers too); a read-only visitor
does not need that. Children are taken from the node's dataclass fields in the order LibCST visits them, and
`on_visit` / `on_leave` are called exactly as LibCST calls them, so any `CSTVisitor` works unchanged. A visitor
that reads names and expressions can also skip whitespace, comments and punctuation (`tokens=False`).

The visiting order of the fields is read from LibCST's code (below), which only the tested LibCST releases
vouch for: with LibCST unpatched (door.py) children come from LibCST's public `node.children`, and
`field_order()` is None.
"""

from __future__ import annotations

import dataclasses
import functools
import typing

import libcst as cst

from neuron_migrate.syntax import door


@functools.lru_cache(maxsize=None)
def _visit_order(node_type: type) -> tuple[str, ...]:
    """The node's fields in the order LibCST visits them. Its `_visit_and_replace_children` passes each
    field's name as a string to the visit helper, so the code object's constants list them in that order."""
    declared = {f.name for f in dataclasses.fields(node_type)}
    used = [c for c in node_type._visit_and_replace_children.__code__.co_consts if isinstance(c, str)]
    ordered = tuple(dict.fromkeys(name for name in used if name in declared))
    return ordered + tuple(sorted(declared - set(ordered)))


@functools.lru_cache(maxsize=None)
def _declared(node_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(node_type))


def visit_fields(node_type: type) -> tuple[str, ...]:
    """Every field of the node type: in the order LibCST visits them where `field_order()` holds, else in the
    order they are declared (for callers that need each field, in any order)."""
    return _visit_order(node_type) if door.fast() else _declared(node_type)


def field_order() -> bool:
    """`visit_fields` and `syntax_fields` give LibCST's visiting order (else walk with `children`)."""
    return door.fast()


# Whitespace, comments and punctuation: leaves for a reader of names and expressions (they hold nothing but
# more whitespace). A walk that skips them visits about half as many nodes.
TOKENS: tuple[type, ...] = (
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Newline, cst.Comment,
    cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.ImportStar, cst.Asynchronous,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace,
    cst.RightCurlyBrace, cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp,
)
NOT_A_NODE, TOKEN, SYNTAX = 0, 1, 2


def subclass(node_type: type, bases: type | tuple[type, ...]) -> bool:
    """`issubclass` read from the MRO. LibCST's node bases are ABCs, and an ABC's `issubclass` that answers no
    asks every subclass of the base in turn (about 60 ms over the first file a process reads); LibCST registers
    no virtual subclass, so the MRO gives the same answer."""
    mro = node_type.__mro__
    if isinstance(bases, tuple):
        return any(base in mro for base in bases)
    return bases in mro


@functools.lru_cache(maxsize=None)
def node_kind(value_type: type) -> int:
    """Cached: what a value of this type is to a walk."""
    if not subclass(value_type, cst.CSTNode):
        return NOT_A_NODE
    return TOKEN if subclass(value_type, TOKENS) else SYNTAX


# `node_kind` by type, for the walks that inline `children` (engine/names.py, engine/paths.py): a dict lookup
# where the cached function's call costs more, on every node of a file
KINDS: dict[type, int] = {}


def syntax_fields(node_type: type) -> tuple[str, ...]:
    """The fields of `visit_fields(node_type)` whose declared type admits a node other than a token: the rest (a
    node's whitespace, its parentheses and commas) can be skipped without reading them."""
    return _syntax_fields(node_type, door.fast())


@functools.lru_cache(maxsize=None)
def _syntax_fields(node_type: type, in_visit_order: bool) -> tuple[str, ...]:
    fields = _visit_order(node_type) if in_visit_order else _declared(node_type)
    try:
        hints = typing.get_type_hints(node_type)
    except Exception:  # an annotation that does not resolve: keep every field
        return fields
    return tuple(name for name in fields if _may_hold_syntax(hints.get(name, object)))


def _may_hold_syntax(hint) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return False
    if origin is not None:  # Union, Optional, Sequence, ...
        return any(_may_hold_syntax(a) for a in typing.get_args(hint))
    if isinstance(hint, type):
        if subclass(hint, cst.CSTNode):
            return not subclass(hint, TOKENS)
        return hint is object  # str, bool, MaybeSentinel, NoneType: no node
    return True  # a forward reference or a type variable: cannot tell


def wants_tokens(node_types) -> bool:
    """Whether a visitor asking for `node_types` needs the TOKENS visited."""
    return any(subclass(t, TOKENS) or any(subclass(token, t) for token in TOKENS) for t in node_types)


def children(node: cst.CSTNode, tokens: bool = True) -> list[cst.CSTNode]:
    """The node's children in LibCST's visiting order; `tokens=False` leaves out TOKENS."""
    least = TOKEN if tokens else SYNTAX
    if not door.fast():
        return [child for child in node.children if node_kind(type(child)) >= least]
    out: list[cst.CSTNode] = []
    node_type = type(node)
    for name in _visit_order(node_type) if tokens else _syntax_fields(node_type, True):
        value = getattr(node, name)
        kind = node_kind(type(value))
        if kind >= least:
            out.append(value)
        elif kind == NOT_A_NODE and type(value) in (list, tuple):
            out.extend(v for v in value if node_kind(type(v)) >= least)
    return out


def walk(root: cst.CSTNode, visitor: cst.CSTVisitor, tokens: bool = True) -> None:
    """`tokens=False` leaves out whitespace, comments and punctuation (TOKENS) and what they hold."""
    stack: list[tuple[cst.CSTNode, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            visitor.on_leave(node)
            continue
        stack.append((node, True))
        if visitor.on_visit(node):
            stack.extend((child, False) for child in reversed(children(node, tokens)))
