"""Parsing: LibCST's parser, adjusted for speed where the result cannot differ (inside sessions, see door.py).

- Parsing without the per-node checks. Every LibCST node checks itself when it is built (`CSTNode.__post_init__`
  calls `_validate`): right for trees that code assembles, wasted on the nodes LibCST's own parser builds from
  source that parsed, which are valid by construction (LibCST's source says so at that method: "It might make
  more sense to move validation work into the visitor, which would allow us to avoid validating the tree when
  parsing a file"). The checks are about a seventh of a parse. Inside a session `__post_init__` skips them while
  this thread runs LibCST's parser for `parse_module`, and only then: nodes built after the parse, or by any
  other thread, are still checked.
- Identity hashing in C instead of LibCST's Python method, inside sessions.
- The replacement texts rules write, parsed once per process (see `expression`).
"""

from __future__ import annotations

import threading
import warnings

import libcst as cst
from libcst._nodes.base import CSTNode

from neuron_migrate.syntax import door


# -- the node checks ---------------------------------------------------------------------------------------
_CHECKED = CSTNode.__dict__["__post_init__"]


class _Parsing(threading.local):
    on = False  # this thread is inside `parse_module`'s call of LibCST's parser


_parsing = _Parsing()


def _checked_unless_parsing(self: CSTNode) -> None:
    if not _parsing.on:
        _CHECKED(self)


door.register(CSTNode, "__post_init__", _checked_unless_parsing)


def parse_module(text: str) -> cst.Module:
    """`libcst.parse_module(text)`, minus the node checks where that is safe; raises `libcst.ParserSyntaxError`
    the same way."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not door.patched():
            return cst.parse_module(text)
        _parsing.on = True
        try:
            return cst.parse_module(text)
        finally:
            _parsing.on = False


# -- identity hashing --------------------------------------------------------------------------------------
def _register_identity_hash_in_c() -> None:
    """LibCST nodes hash by identity through a Python method (`return id(self)`), copied into every node class;
    every dict and set keyed by nodes (parents, edits, the analysis) pays a Python call per lookup. `object`'s
    own hash is an identity hash too, in C (another number: a dict of nodes made outside a session does not find
    them inside one)."""
    python_hash = CSTNode.__dict__["__hash__"]
    classes, seen = [CSTNode], set()
    while classes:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if cls.__dict__.get("__hash__") is python_hash:
            door.register(cls, "__hash__", object.__hash__)
        classes.extend(cls.__subclasses__())


_register_identity_hash_in_c()


# -- expressions the rules write -----------------------------------------------------------------------------
# Rules build their replacements from text, and the same few texts come back in file after file
# (`int(os.environ.get("LOCAL_RANK", "0"))`, `"neuron"`): LibCST's parser costs about 0.1 ms a call whatever the
# text's length. Nodes are immutable, so one parsed expression can serve any number of files; within one file a
# node must appear only once (the engine keys its maps by node), so the n-th use of a text in a file takes the
# n-th copy parsed of it (parsed when no file needed that many before). The file is the open session (door.py),
# which counts the copies it was handed; outside a session every call parses anew.
_PARSED: dict[tuple[str, str], list] = {}  # (kind, text) -> the copies parsed so far
_MAX_TEXTS = 4096


def expression(text: str) -> cst.BaseExpression:
    """`libcst.parse_expression(text)`, a node not handed out before in the current file."""
    return _parsed(("expression", text), lambda: cst.parse_expression(text))


def statements(text: str) -> tuple[cst.BaseStatement, ...]:
    """The statements of `libcst.parse_module(text)`, nodes not handed out before in the current file."""
    return _parsed(("statements", text), lambda: tuple(cst.parse_module(text).body))


def _parsed(key: tuple[str, str], parse):
    state = door.current()
    if state is None:
        return parse()
    copies = _PARSED.get(key)
    if copies is None:
        if len(_PARSED) >= _MAX_TEXTS:
            _PARSED.clear()  # a file counting more copies than a list now holds gets new ones (below)
        copies = _PARSED[key] = []
    used = state.handed_out.get(key, 0)
    state.handed_out[key] = used + 1
    if used < len(copies):
        return copies[used]
    node = parse()
    copies.append(node)
    return node
