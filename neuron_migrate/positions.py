"""Line and column of nodes, computed in one code-generation pass and kept for the module last asked about.

The same numbers as LibCST's PositionProvider, without the metadata wrapper's extra walk over the tree;
the engine and the import tidy-up ask about the same module, so the pass runs once per file.
"""

from __future__ import annotations

from typing import Mapping

import libcst as cst
from libcst._position import CodeRange
from libcst.metadata.position_provider import PositionProvidingCodegenState


class _Sink:
    """Stands in for the provider: the codegen state writes positions into `_computed`."""

    def __init__(self) -> None:
        self._computed: dict[cst.CSTNode, CodeRange] = {}


_last: tuple[cst.Module, dict[cst.CSTNode, CodeRange]] | None = None


def positions(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    global _last
    if _last is not None and _last[0] is module:
        return _last[1]
    sink = _Sink()
    module._codegen(PositionProvidingCodegenState(default_indent=module.default_indent,
                                                  default_newline=module.default_newline, provider=sink))
    _last = (module, sink._computed)
    return sink._computed
