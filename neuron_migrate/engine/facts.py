"""File facts: what the analysis tells about one file as a whole, by name, worked out on first use, once per file.

A fact is a function of the file's context registered with `@fact`; rules read it as `ctx.facts.<name>`. The
engine defines the facts every rule family may ask (below); a rule family defines its own beside its rules.
Facts replace a shared, string-keyed blackboard: each has one definition, one name and a docstring.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

import libcst as cst

if TYPE_CHECKING:
    from neuron_migrate.engine.context import FileContext

_FACTS: dict[str, Callable[[FileContext], object]] = {}


def fact(fn: Callable[[FileContext], object]) -> Callable[[FileContext], object]:
    """Register `fn` as the file fact `fn.__name__`."""
    if _FACTS.get(fn.__name__, fn) is not fn:
        raise ValueError(f"file fact {fn.__name__!r} is defined twice")
    _FACTS[fn.__name__] = fn
    return fn


class Facts:
    """The facts of one file; each computed when first read."""

    def __init__(self, ctx: FileContext) -> None:
        self._ctx = ctx

    def __getattr__(self, name: str):
        try:
            compute = _FACTS[name]
        except KeyError:
            raise AttributeError(f"no file fact {name!r}") from None
        value = compute(self._ctx)
        setattr(self, name, value)  # later reads find the attribute and skip __getattr__
        return value


# `.to("neuron")`, `device="neuron:0"`, `torch.device("neuron")`, `autocast("neuron")`, `torch.neuron.synchronize()`
NEURON_DEVICE_USE = re.compile(
    r"""(\.to\(\s*|device(_type)?\s*=\s*|\.device\(\s*|autocast\(\s*)["']neuron(:\d+)?["']|\btorch\.neuron\.""")
# Bytes a file moving to neuron always holds: the pre-filter context of rules that only report there.
MOVING_TO_NEURON_BYTES = (b"torch_xla", b"neuron")


def imports_any(ctx: FileContext, roots: tuple[str, ...]) -> bool:
    """Whether the file imports from one of these top-level packages (anywhere, in any scope)."""
    return any(b.kind == "import" and (b.qualname or "").split(".")[0] in roots
               for scope in ctx.analysis.scopes for bindings in scope.bindings.values() for b in bindings)


@fact
def moving_to_neuron(ctx: FileContext) -> bool:
    """The file belongs to a program moving to the neuron device: it imports torch_xla or torch_neuronx at module
    level, or already uses the `neuron` device. (A library that imports torch_xla only inside the function of an
    XLA code path, as PyTorch itself does, is a multi-backend library, not such a program.)"""
    return any(
        b.kind == "import" and (b.qualname or "").split(".")[0] in ("torch_xla", "torch_neuronx")
        for bindings in ctx.analysis.module_scope.bindings.values() for b in bindings
    ) or bool(NEURON_DEVICE_USE.search(ctx.source.text))


@fact
def quote(ctx: FileContext) -> str:
    """The quote character the file prefers for new string literals."""
    text = ctx.source.text
    return "'" if text.count("'") > 2 * text.count('"') else '"'


def fstring_quote(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """The quote that code placed at `node` must use when it sits inside an f-string (the other one than the
    innermost f-string's own, before Python 3.12); None outside f-strings."""
    parents = ctx.analysis.parents
    parent = parents.get(node)
    while parent is not None:
        if type(parent) is cst.FormattedString:
            return "'" if parent.start.rstrip().endswith('"') else '"'
        parent = parents.get(parent)
    return None
