"""File facts: what the analysis tells about one file as a whole, by name, worked out on first use, once per file.

A fact is a function of the file's context registered with `@fact`; rules read it as `ctx.facts.<name>`. The
engine defines the facts every rule family may ask (below); a rule family defines its own beside its rules.
Facts replace a shared, string-keyed blackboard: each has one definition, one name and a docstring.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Callable

import libcst as cst

from neuron_migrate.catalogue import load_data
from neuron_migrate.engine.names import dotted
from neuron_migrate.project_facts import MAIN_BLOCK

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


def uses_neuron_device(text: str) -> bool:
    """`NEURON_DEVICE_USE` is found in `text`. Each of its spellings holds the word "neuron", which `in` finds
    at a small share of the regex's cost: most files spell no "neuron" at all."""
    return "neuron" in text and NEURON_DEVICE_USE.search(text) is not None


# Bytes a file moving to neuron always holds: the pre-filter context of rules that only report there.
MOVING_TO_NEURON_BYTES = (b"torch_xla", b"neuron")


def imports_any(ctx: FileContext, roots: tuple[str, ...]) -> bool:
    """Whether the file imports from one of these top-level packages (anywhere, in any scope)."""
    return any(b.kind == "import" and (b.qualname or "").split(".")[0] in roots
               for scope in ctx.analysis.scopes for bindings in scope.bindings.values() for b in bindings)


@fact
def program(ctx: FileContext) -> bool:
    """The file is a program's entry point: it has a `__main__` block, or the project model found it run (a
    notebook, a file a launch script, notebook or estimator runs). A rewrite does not change it."""
    project = ctx.settings.project
    return (project is not None and project.entry) or MAIN_BLOCK.search(ctx.source.text) is not None


@fact
def moving_to_neuron(ctx: FileContext) -> bool:
    """The file belongs to a program moving to the neuron device: it imports torch_xla or torch_neuronx at module
    level, or is a program that imports it in any scope (`_mp_fn` imports it inside), or already uses the `neuron`
    device, or a program that moves reaches it through the project's imports (engine/project.py: a helper module
    of an XLA training script). (A library that imports torch_xla only inside the function of an XLA code path, as
    PyTorch itself does, is a multi-backend library, not such a program.)"""
    project = ctx.settings.project
    if project is not None and project.moving is not None:
        return True
    scopes = ctx.analysis.scopes if ctx.facts.program else (ctx.analysis.module_scope,)
    return any(
        b.kind == "import" and (b.qualname or "").split(".")[0] in ("torch_xla", "torch_neuronx")
        for scope in scopes for bindings in scope.bindings.values() for b in bindings
    ) or (uses_neuron_device(ctx.source.text) and not ctx.facts.inferentia1)


@functools.lru_cache(maxsize=1)
def inf1_names() -> tuple[frozenset[str], frozenset[str]]:
    """The Inferentia 1 APIs and modules (`[inferentia1]` in rules/inference.toml)."""
    data = load_data("inference.toml")["inferentia1"]
    return frozenset(data["apis"]), frozenset(data["modules"])


@fact
def inferentia1(ctx: FileContext) -> bool:
    """The file is Inferentia 1 code (torch-neuron, another product): it imports `torch_neuron` or uses an Inf1
    API (`torch.neuron.trace`, `DataParallel`, `analyze_model`), resolved through its imports in any scope. Its
    `torch.neuron.` is not the native device module, so it does not make the file move to neuron (NM513)."""
    apis, modules = inf1_names()
    if "neuron" not in ctx.source.text:
        return False
    imported: dict[str, set[str]] = {}
    for scope in ctx.analysis.scopes:
        for name, bindings in scope.bindings.items():
            for b in bindings:
                if b.kind == "import" and b.qualname:
                    if b.qualname.split(".")[0] in modules or b.qualname in apis:
                        return True
                    imported.setdefault(name, set()).add(b.qualname)
    last = frozenset(api.rsplit(".", 1)[1] for api in apis)
    if not any(name in ctx.source.text for name in last):
        return False
    for node in ctx.analysis.attributes:  # every attribute of the module, found by the analysis's walk
        if node.attr.value not in last:
            continue
        parts = dotted(node)
        if parts and any(".".join([q, *parts[1:]]) in apis for q in imported.get(parts[0], ())):
            return True
    return False


@fact
def quote(ctx: FileContext) -> str:
    """The quote character the file prefers for new string literals (the literals of the whole file: a lean tree's
    count is completed by what engine/lean.py counted in the code it left out)."""
    counts = {"'": ctx.left_out_quotes[0], '"': ctx.left_out_quotes[1]}
    for node in ctx.analysis.strings:  # string literals: apostrophes in comments and text say nothing
        quote = node.quote  # `"""` says nothing (docstrings have it whatever the file's style); `'''` does
        if quote != '"""':
            counts[quote[0]] += 1
    return "'" if counts["'"] > counts['"'] else '"'


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
