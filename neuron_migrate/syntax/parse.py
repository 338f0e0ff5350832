"""LibCST, adjusted for speed where the result cannot differ (the code generation side is in `edits.py`).

- Parsing without the per-node checks. Every LibCST node checks itself when it is built (`CSTNode.__post_init__`
  calls `_validate`): right for trees that code assembles, wasted on the nodes LibCST's own parser builds from
  source that parsed, which are valid by construction (LibCST's source says so at that method: "It might make
  more sense to move validation work into the visitor, which would allow us to avoid validating the tree when
  parsing a file"). The checks are about a seventh of a parse. Nodes built after the parse are still checked.
- Identity hashing in C instead of LibCST's Python method (the same hash).
- The replacement texts rules write, parsed once per process (see `expression`).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import libcst as cst
from libcst._nodes.base import CSTNode


def _identity_hash_in_c() -> None:
    """LibCST nodes hash by identity through a Python method (`return id(self)`), copied into every node class;
    every dict and set keyed by nodes (parents, edits, the analysis) pays a Python call per lookup. `object`'s
    own hash is the same identity hash, in C."""
    python_hash = CSTNode.__dict__["__hash__"]
    classes = [CSTNode]
    while classes:
        cls = classes.pop()
        if cls.__dict__.get("__hash__") is python_hash:
            cls.__hash__ = object.__hash__  # type: ignore[method-assign]
        classes.extend(cls.__subclasses__())


_identity_hash_in_c()


def _unchecked(self: CSTNode) -> None:
    pass


@contextlib.contextmanager
def _nodes_unchecked() -> Iterator[None]:
    checked = CSTNode.__dict__["__post_init__"]
    CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
    try:
        yield
    finally:
        CSTNode.__post_init__ = checked  # type: ignore[method-assign]


def parse_module(text: str) -> cst.Module:
    """`libcst.parse_module(text)`, minus the node checks; raises `libcst.ParserSyntaxError` the same way."""
    with warnings.catch_warnings(), _nodes_unchecked():
        warnings.simplefilter("ignore")
        return cst.parse_module(text)


# -- expressions the rules write -----------------------------------------------------------------------------
# Rules build their replacements from text, and the same few texts come back in file after file
# (`int(os.environ.get("LOCAL_RANK", 0))`, `"neuron"`): LibCST's parser costs about 0.1 ms a call whatever the
# text's length. Nodes are immutable, so one parsed expression can serve any number of files; within one file a
# node must appear only once (the engine keys its maps by node), so the n-th use of a text in a file takes the
# n-th copy parsed of it (parsed when no file needed that many before). `new_file()` starts a file.
_PARSED: dict[tuple[str, str], list] = {}  # (kind, text) -> [copies, the file last handed out in, copies used there]
_MAX_TEXTS = 4096
_file = 0


def new_file() -> None:
    global _file
    _file += 1


def expression(text: str) -> cst.BaseExpression:
    """`libcst.parse_expression(text)`, a node not handed out before in the current file."""
    return _parsed(("expression", text), lambda: cst.parse_expression(text))


def statements(text: str) -> tuple[cst.BaseStatement, ...]:
    """The statements of `libcst.parse_module(text)`, nodes not handed out before in the current file."""
    return _parsed(("statements", text), lambda: tuple(cst.parse_module(text).body))


def _parsed(key: tuple[str, str], parse):
    entry = _PARSED.get(key)
    if entry is None:
        if len(_PARSED) >= _MAX_TEXTS:
            _PARSED.clear()
        entry = _PARSED[key] = [[], _file, 0]
    elif entry[1] != _file:
        entry[1], entry[2] = _file, 0
    copies, used = entry[0], entry[2]
    if used == len(copies):
        copies.append(parse())
    entry[2] = used + 1
    return copies[used]
