"""LibCST behind one door: parsing, code generation, positions and the walk.

Everything in the tool that touches LibCST's internals is in this package; other modules use the names below
(and LibCST's public API). `install()` checks the LibCST release against the tested range (door.py); the
engine opens a `session()` around each file, and only inside it are LibCST's methods replaced.
"""

from neuron_migrate.syntax.door import (TESTED, Installation, Session, current, fast, install, installation, patched,
                                        session)
from neuron_migrate.syntax.parse import expression, parse_module, statements
from neuron_migrate.syntax.codegen import Renderer, code
from neuron_migrate.syntax.positions import Positions, positions_of, remember
from neuron_migrate.syntax.walk import (children, field_order, node_kind, syntax_fields, visit_fields, walk,
                                        wants_tokens)

__all__ = [
    "TESTED", "Installation", "Positions", "Renderer", "Session", "children", "code", "current", "expression",
    "fast", "field_order", "install", "installation", "node_kind", "parse_module", "patched", "positions_of",
    "remember", "session", "statements", "syntax_fields", "visit_fields", "walk", "wants_tokens",
]
