"""Which function processes which kind of file.

A handler takes (path, data, settings, write_mode) and returns a FileResult: findings always, and
`new_bytes` when the file would change. Handlers never write; the runner does (atomically), after the
result has been validated. Modules are imported on first use so that start-up stays fast.
"""

from __future__ import annotations

import importlib
from typing import Callable

from neuron_migrate.findings import FileResult
from neuron_migrate.settings import Settings

Handler = Callable[[str, bytes, Settings, bool], FileResult]

HANDLERS: dict[str, str] = {
    "python": "neuron_migrate.engine:process_python",
}


def handler_for(kind: str) -> Handler | None:
    spec = HANDLERS.get(kind)
    if spec is None:
        return None
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func)
