"""LibCST's parser without its per-node checks.

Every LibCST node checks itself when it is built (`CSTNode.__post_init__` calls `_validate`): right for trees
that code assembles, wasted on the nodes LibCST's own parser builds from source that parsed, which are valid by
construction (LibCST's source says so at that method: "It might make more sense to move validation work into
the visitor, which would allow us to avoid validating the tree when parsing a file"). The checks are about a
seventh of a parse. Nodes built after the parse (the rules' replacements) are still checked.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import libcst as cst
from libcst._nodes.base import CSTNode


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
