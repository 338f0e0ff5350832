"""Monkeypatches: no fix may make a function call the name the file rebinds to that same function.

```python
from torch_xla.utils.checkpoint import checkpoint as xla_ckpt
def _ckpt(*a, **k):
    return xla_ckpt(*a, **k)
torch.utils.checkpoint.checkpoint = _ckpt
```

Renamed in place, the call in `_ckpt` would read `torch.utils.checkpoint.checkpoint` when it runs, after the
patch, and so call `_ckpt` itself until the stack runs out. The same holds for any fix that writes a native name
the file patches (`torch.save = _save` around `xm.save`, `builtins.print = _print` around `xm.master_print`).
`self_calls` compares the fixed module with the original: a patching function (or lambda) that reads the patched
name late (an attribute chain, a builtin) more often than before is a fix that cannot be made; the engine drops
the decision that caused it and marks it, like a fix that does not compile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import libcst as cst

from neuron_migrate.engine.names import Analysis, Scope, dotted, dotted_str
from neuron_migrate.syntax.walk import walk


class SelfCall(Exception):
    """The fixed module would call a patched name from the function patched in for it."""


# `head.attr... =` at a line's start, or setattr(: where a file can patch an imported module's name at all
MAY_PATCH = re.compile(r"^[ \t]*([A-Za-z_]\w*)\.[\w.]*[ \t]*=(?!=)|\bsetattr\(", re.M)


def may_patch(text: str, module_bindings: Mapping[str, Sequence]) -> bool:
    """The cheap test first: an assignment to an attribute of a name the module imports, or a setattr call.
    `module_bindings`: the module scope's bindings by name (of LibCST's analysis, or of Python's tree in
    engine/notes.py), each with its `kind`."""
    for match in MAY_PATCH.finditer(text):
        head = match.group(1)
        if head is None or any(b.kind == "import" for b in module_bindings.get(head, ())):
            return True
    return False


def self_calls(before: Analysis, after: Analysis) -> None:
    """Raise SelfCall where a patching function of the fixed module reads the name it is patched in for more often
    than the same function of the original did (a rewrite made it call itself)."""
    new = _patches(after)
    if not new:
        return
    old = {(name, function): count for name, function, count in _patches(before)}
    for name, function, count in new:
        if count > old.get((name, function), 0):
            raise SelfCall(f"`{function}` is patched in for `{name}`, and the rewrite would make it call itself")


def assignments(analysis: Analysis) -> list[tuple[str, cst.BaseExpression, Scope]]:
    """(qualified name assigned, the value, the scope of the assignment) for each patch of an imported name."""
    found = _recorded(analysis)
    if found is None:
        finder = _Assignments()
        walk(analysis.module, finder, tokens=False)
        found = finder.found
    scopes = {id(s.node): s for s in analysis.scopes}
    out = []
    for target, value, node in found:
        scope = _scope_at(analysis, node, scopes)
        name = _patched_name(analysis, target, scope)
        if name is not None:
            out.append((name, value, scope))
    return out


def _patches(analysis: Analysis) -> list[tuple[str, str, int]]:
    """(qualified name patched, the function or lambda patched in, how often it reads that name late)."""
    scopes = {id(s.node): s for s in analysis.scopes}
    out = []
    for name, value, scope in assignments(analysis):
        if isinstance(value, cst.Lambda):
            body, where = value, scopes.get(id(value), scope)
        elif isinstance(value, cst.Name):
            owner = analysis.lookup(value.value, scope)
            defs = [b.node for b in owner.bindings[value.value] if b.kind == "def"] if owner is not None else []
            if len(defs) != 1:
                continue
            body, where = defs[0], scopes.get(id(defs[0]))
        else:
            continue
        if where is not None:
            out.append((name, dotted_str(value) or "lambda", _late_reads(analysis, body, where, name)))
    return out


class _Assignments(cst.CSTVisitor):
    """`a.b.c = value` and `setattr(a.b, "c", value)`: (target chain, value, the statement's node)."""

    def __init__(self) -> None:
        self.found: list[tuple[cst.BaseExpression | tuple, cst.BaseExpression, cst.CSTNode]] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        _assigned(node, self.found)

    def visit_Call(self, node: cst.Call) -> None:
        _set(node, self.found)


def _assigned(node: cst.Assign, found: list) -> None:
    for target in node.targets:
        if isinstance(target.target, cst.Attribute):
            found.append((target.target, node.value, node))


def _set(node: cst.Call, found: list) -> None:
    if isinstance(node.func, cst.Name) and node.func.value == "setattr" and len(node.args) == 3 \
            and isinstance(node.args[1].value, cst.SimpleString):
        attr = node.args[1].value.evaluated_value
        if isinstance(attr, str):
            found.append(((node.args[0].value, attr), node.args[2].value, node))


def _recorded(analysis: Analysis) -> list | None:
    """What `_Assignments` finds, from what the analysis's own walk recorded (assignments first, then `setattr`
    calls: what reads them takes them as a set); None where the analysis replayed statements of one that did not
    record them."""
    if analysis.attribute_assignments is None or analysis.setattr_names is None:
        return None
    found: list = []
    for node in analysis.attribute_assignments:
        _assigned(node, found)
    parents = analysis.parents
    for name in analysis.setattr_names:
        call = parents.get(name)
        if type(call) is cst.Call and call.func is name:
            _set(call, found)
    return found


def _scope_at(analysis: Analysis, node: cst.CSTNode, scopes: dict[int, Scope]) -> Scope:
    parents = analysis.parents
    current = parents.get(node)
    while current is not None:
        scope = scopes.get(id(current))
        if scope is not None:
            return scope
        current = parents.get(current)
    return analysis.module_scope


def _patched_name(analysis: Analysis, target, scope: Scope) -> str | None:
    """The qualified name an assignment target stands for, through the file's imports (`builtins.print`)."""
    if isinstance(target, tuple):
        owner = analysis.qualname(target[0], scope)
        return f"{owner}.{target[1]}" if owner is not None else None
    return analysis.qualname(target, scope)


def _late_reads(analysis: Analysis, body: cst.CSTNode, scope: Scope, name: str) -> int:
    """How often `body` reads `name` through a lookup made when it runs: an attribute chain (`torch.save`), or a
    builtin's bare name (`print` for `builtins.print`), a name imported inside a function. A name the module
    imports is bound early, before the patch runs."""
    builtin = name[len("builtins."):] if name.startswith("builtins.") and name.count(".") == 1 else None
    reads = _Reads()
    walk(body, reads, tokens=False)
    count = 0
    for expr in reads.found:
        if isinstance(expr, cst.Name):
            owner = analysis.lookup(expr.value, scope)
            if owner is None:
                count += expr.value == builtin
            elif owner.kind != "module" and analysis.qualname(expr, scope) == name:
                count += 1  # imported inside a function: when it runs, after the patch
        elif analysis.qualname(expr, scope) == name:
            count += 1
    return count


class _Reads(cst.CSTVisitor):
    """The outermost name chains of a body: `a.b.c` once, not `a.b` too; bare names."""

    def __init__(self) -> None:
        self.found: list[cst.BaseExpression] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if dotted(node) is not None:
            self.found.append(node)
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        self.found.append(node)
