"""Tidy imports after the rules' edits: add what new code needs, drop legacy imports nothing uses any more, and
the imports of other libraries that only the rewritten code used (`from torch.cuda import synchronize`).

Legacy imports are those of torch_xla (and its submodules). An import is dropped only when no read of its
name resolves to it; a `try: import torch_xla... except ImportError: xm = None` guard whose body held only
such imports goes away whole, and an `if <feature test>:` guard left empty goes too.

A guard that stays (its body runs more code, or its handler does something the program reads) is a feature
detection: its torch_xla import is never simply dropped. It becomes `import torch_neuronx` in the same place, so
the body still fails where Neuron is absent and the handler (the GPU / CPU fallback) still runs there; an import
whose name is still read only as an availability flag (`xm is not None`, `if xm:`) becomes
`import torch_neuronx as xm`.
"""

from __future__ import annotations

import re
from collections import ChainMap
from typing import Callable, Mapping, Sequence

import libcst as cst

from neuron_migrate.engine.edits import (FIRST_PARTY, STDLIB, THIRD_PARTY, EditSet, apply, is_import_line,
                                         marker_code, section, set_off)
from neuron_migrate.engine.names import Analysis, Binding, dotted, dotted_str
from neuron_migrate.engine.paths import PACKAGE_PROBES, guards_imports
from neuron_migrate.syntax.codegen import code as generated
from neuron_migrate.syntax.walk import children

LEGACY_ROOTS = ("torch_xla",)
NATIVE_DETECTION = "torch_neuronx"  # what a kept feature detection imports instead of torch_xla
REPORTING_CALLS = frozenset({"print", "warn", "warning", "info", "debug", "error", "exception", "log"})
UNUSED_CODE = "NM190"
STRANDED_CODE = "NM191"  # a torch_xla import left in a guard whose detection moves to the native backend


def is_legacy(qualname: str | None) -> bool:
    return qualname is not None and qualname.split(".")[0] in LEGACY_ROOTS


def _legacy_module_of(binding: Binding) -> str | None:
    """The legacy module an import binding refers to (also for `import torch_xla.x.y`, which binds torch_xla)."""
    if binding.kind != "import" or binding.alias is None:
        return None
    node = binding.node
    if isinstance(node, cst.ImportFrom):
        module = dotted_str(node.module) if node.module is not None and not node.relative else None
        return module if is_legacy(module) else None
    full = dotted_str(binding.alias.name)
    return full if is_legacy(full) else None


def unused_bindings(analysis: Analysis) -> list[Binding]:
    """Legacy import bindings that no read resolves to."""
    used: set[tuple[int, str]] = set()
    for scope in analysis.scopes:
        for name in scope.reads:
            owner = analysis.lookup(name, scope)
            if owner is not None:
                used.add((id(owner), name))
    out = []
    for scope in analysis.scopes:
        for name, bindings in scope.bindings.items():
            if (id(scope), name) in used:
                continue
            out.extend(b for b in bindings if _legacy_module_of(b) is not None)
    return out


def read_aliases(analysis: Analysis) -> set[int]:
    """The ids of the import aliases some read resolves to."""
    out: set[int] = set()
    for scope in analysis.scopes:
        for name in scope.reads:
            owner = analysis.lookup(name, scope)
            if owner is not None:
                out.update(id(b.alias) for b in owner.bindings.get(name, ()) if b.alias is not None)
    return out


def orphaned_bindings(before: Analysis, after: Analysis) -> list[Binding]:
    """The imports of other libraries that the fixes leave unused (`from torch.cuda import synchronize` once its
    `synchronize()` became the device's): read in `before`, the file as it was, and no more in `after`. Not the
    imports of a guard (a feature detection), those silenced for linters (`# noqa`), `from __future__`, nor names
    the module exports (`__all__`)."""
    was_read = read_aliases(before)
    if not was_read:
        return []
    now_read = read_aliases(after)
    exported = _exported(after.module)
    out = []
    for scope in after.scopes:
        for name, bindings in scope.bindings.items():
            for b in bindings:
                if b.kind != "import" or b.alias is None or id(b.alias) not in was_read or \
                        id(b.alias) in now_read or _legacy_module_of(b) is not None or name in exported:
                    continue
                line = after.parents.get(b.node)
                if isinstance(b.node, cst.ImportFrom) and dotted_str(b.node.module or cst.Name("")) == "__future__":
                    continue
                if _guard_of(b.node, after.parents) is not None or not isinstance(line, cst.SimpleStatementLine) \
                        or _silenced(line):
                    continue
                out.append(b)
    return out


def _silenced(line: cst.SimpleStatementLine) -> bool:
    comment = line.trailing_whitespace.comment
    return comment is not None and re.search(r"#\s*noqa\b", comment.value, re.IGNORECASE) is not None


def _exported(module: cst.Module) -> set[str]:
    """The names listed in the module's `__all__`."""
    out: set[str] = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else \
                [small.target] if isinstance(small, (cst.AugAssign, cst.AnnAssign)) else []
            value = getattr(small, "value", None)
            if value is not None and any(isinstance(t, cst.Name) and t.value == "__all__" for t in targets):
                out.update(n.evaluated_value for n in _walk(value)
                           if isinstance(n, cst.SimpleString) and isinstance(n.evaluated_value, str))
    return out


def unused_decisions(ctx, unused: list[Binding]) -> list:
    """NM190 for each legacy import the fixed file no longer uses (its fix: the tidy-up removes it). Placed at
    the import, which the fixes do not touch; the message says when the fixes are what leave it unused."""
    from neuron_migrate import catalogue
    from neuron_migrate.engine.context import FIXED, Decision

    info = catalogue.rule(UNUSED_CODE)
    already = {id(b.alias) for b in unused_bindings(ctx.analysis)}
    parents = ctx.analysis.parents  # a binding's node is its Import / ImportFrom; the statement line holds it
    out = []
    for b in unused:
        after = "" if id(b.alias) in already else " once the other fixes are made"
        out.append(Decision(UNUSED_CODE, b.alias, info.format(module=_legacy_module_of(b), after=after), True,
                            parents.get(b.node), status=FIXED))
    return out


def flag_decisions(ctx, flags: list[Binding]) -> list:
    """NM190 for each legacy import the fixed file reads only as an availability flag (its fix: it becomes
    `import torch_neuronx as <name>`, so the tests keep working)."""
    from neuron_migrate import catalogue
    from neuron_migrate.engine.context import FIXED, Decision

    info = catalogue.rule(UNUSED_CODE)
    parents = ctx.analysis.parents
    after = (f" except as an availability flag once the other fixes are made (it becomes `import "
             f"{NATIVE_DETECTION} as ...`, so the tests keep working)")
    return [Decision(UNUSED_CODE, b.alias, info.format(module=_legacy_module_of(b), after=after), True,
                     parents.get(b.node), status=FIXED) for b in flags]


def stranded_decisions(ctx, unused: list[Binding], flags: list[Binding]) -> list:
    """NM191 (reported for a person) for each torch_xla import that stays in a `try: ... except ImportError:` guard
    whose detection moves to the native backend: a guard where another torch_xla import goes or becomes `import
    torch_neuronx` (this run), or that imports torch_neuronx already (a second run). Where torch_xla is absent, the
    kept import fails, the handler runs and the migrated code behind the guard's flag is skipped."""
    from neuron_migrate.engine.context import Decision
    from neuron_migrate.policy import Policy

    analysis = ctx.analysis
    going = {id(b.alias) for b in (*unused, *flags)}
    kept: dict[cst.Try, list[Binding]] = {}
    moving: set[cst.Try] = set()
    for scope in analysis.scopes:
        for bindings in scope.bindings.values():
            for b in bindings:
                if _legacy_module_of(b) is None or b.node is None:
                    continue
                guard = _guard_of(b.node, analysis.parents)
                if guard is None:
                    continue
                if id(b.alias) in going:
                    moving.add(guard)
                else:
                    kept.setdefault(guard, []).append(b)
    policy = Policy(ctx.settings, ctx.path, rewrite=True)  # as FileContext.report asks it: the same in both commands
    out = []
    for guard, bindings in kept.items():
        if guard not in moving and not _has_native_import(guard):
            continue  # the guard stays as it was: its XLA path is whole (what uses it is reported)
        for b in bindings:
            module = _legacy_module_of(b)
            if isinstance(b.node, cst.ImportFrom):  # `from torch_xla.debug import profiler`: the name it imports
                module = f"{module}.{dotted_str(b.alias.name)}"
            statement = analysis.parents.get(b.node)
            decided = policy.decide(STRANDED_CODE, statement, ctx.suppressions if ctx.may_suppress else None,
                                    {"module": module})
            if decided is not None:  # not silenced on its line
                out.append(Decision(STRANDED_CODE, b.alias, decided.message, decided.fixable, statement,
                                    held_back=decided.held_back))
    return out


def tidy(module: cst.Module, analysis: Analysis, unused: list[Binding], required: list[tuple[str, str | None]],
         definitions: list[str], *, render: Callable[[cst.Module], str], fixed: bool = True,
         flags: list[Binding] | None = None, made: set[cst.EmptyLine] | None = None,
         orphaned: list[Binding] = (), origins: dict | None = None,
         required_from: Sequence[tuple[str, str]] = ()) -> cst.Module:
    """Add the imports and definitions the fixed `module` needs, drop the `unused` legacy imports (and the guards
    that only held them) and the `orphaned` imports of other libraries (`orphaned_bindings`). `analysis` is that
    of `module` (see `fix` in python.py); `render` gives a module's code; `fixed`: the rules made edits (a file
    they leave alone keeps its detections as they are); `made`: the comment lines the fixes wrote
    (`edits.apply`), which stay set off from an import above them; `origins`: as `edits.apply` takes it."""
    made = set() if made is None else made
    module = _tidy(module, analysis, unused, required, definitions, render, fixed, flags, made, list(orphaned),
                   origins, required_from)
    return set_off(module, made)


def _tidy(module: cst.Module, analysis: Analysis, unused: list[Binding], required: list[tuple[str, str | None]],
          definitions: list[str], render: Callable[[cst.Module], str], fixed: bool, flags: list[Binding] | None,
          made: set[cst.EmptyLine], orphaned: list[Binding], origins: dict | None = None,
          required_from: Sequence[tuple[str, str]] = ()) -> cst.Module:
    analysed = module
    # only what the rewritten code really reads: a rule may ask for an import and then not make its edit
    unresolved = {name for scope in analysis.scopes for name in scope.reads if analysis.lookup(name, scope) is None}
    wanted, read = {defined_name(d) for d in definitions} & unresolved, set()
    while wanted:  # and what those read (a helper that calls another helper defined beside it)
        kept = [d for d in definitions if defined_name(d) in wanted]
        defined = Analysis(cst.parse_module("\n".join(kept) + "\n"))
        # what they read from the module (the methods of a class defined there included)
        read = {name for scope in defined.scopes for name in scope.reads if defined.lookup(name, scope) is None}
        if not read & {defined_name(d) for d in definitions} - wanted:
            break
        wanted |= read & {defined_name(d) for d in definitions}
    definitions = [d for d in definitions if defined_name(d) in wanted]
    if definitions:
        unresolved |= read
        orphaned = [b for b in orphaned if b.name not in read]  # `os` that `WORLD_SIZE = ...` reads now
    module = _add_imports(module, _still_needed(module, required, unresolved, render))
    module = _add_from_imports(module, [(m, n) for m, n in required_from if n in unresolved])
    module = _add_definitions(module, definitions)
    flags = (flag_only_bindings(analysis) if flags is None else flags) if fixed else []
    probes = _native_probes(module) if fixed and not _legacy_kept(analysis, unused, flags) else []
    if not unused and not flags and not probes and not orphaned:
        return module
    edits = EditSet()
    for probe in probes:
        quote = probe.value[len(probe.prefix)]
        edits.add_replace(probe, lambda old, q=quote: old.with_changes(value=f"{q}{NATIVE_DETECTION}{q}"))
    parents = _parents_after_additions(analysed, module, analysis.parents)
    emptied = _emptied([*unused, *orphaned])
    guards = _Guards(emptied, {b.name for b in unused}, analysis)
    gone = {s for s in _enclosing_statements(emptied, parents) if guards.only_guards_dead_imports(s)}
    edits.remove.update(gone)
    # the imports only a guard that goes read (its `is_torch_xla_available()` test) go with it
    emptied = _drop(edits, module, [*unused, *orphaned, *_read_only_in(gone, module, analysis, parents)], parents)
    _keep_detections(edits, emptied, flags, gone, parents)
    return apply(module, edits, parents, made, origins)


def _fails(small: cst.CSTNode) -> bool:
    """`assert False, "..."` (or `assert 0`): a raise spelled as an assertion, as a missing-package handler writes it."""
    return isinstance(small, cst.Assert) and (
        isinstance(small.test, cst.Name) and small.test.value == "False"
        or isinstance(small.test, cst.Integer) and small.test.value == "0")


def _emptied(bindings: list[Binding]) -> set[cst.CSTNode]:
    """The import statements all of whose aliases are among `bindings`."""
    dead = {id(b.alias) for b in bindings}
    return {b.node for b in bindings if b.node is not None and all(id(a) in dead for a in b.node.names)}


def _drop(edits: EditSet, module: cst.Module, bindings: list[Binding],
          parents: Mapping[cst.CSTNode, cst.CSTNode | None]) -> set[cst.CSTNode]:
    """Take the import aliases of `bindings` out of their statements, and the statements they empty (where that
    was the file's last import of torch_neuronx, `import torch_neuronx` stands in its place: `_stand_ins`).
    Returns the statements removed."""
    dead = {id(b.alias) for b in bindings}
    stand_ins = _stand_ins(module, [b for b in bindings if _legacy_module_of(b) is None
                                    and not _nested_in_function(b.node, parents)], dead)
    emptied: set[cst.CSTNode] = set()
    seen: set[cst.CSTNode] = set()
    for b in bindings:
        node = b.node
        if node in seen or node is None:
            continue
        seen.add(node)
        keep = [a for a in node.names if id(a) not in dead]
        if not keep and node in stand_ins:
            edits.add_replace(node, stand_ins[node])
            line = parents.get(node)
            if isinstance(line, cst.SimpleStatementLine) and line.trailing_whitespace.comment is None:
                edits.add_replace(line, _noqa_line)  # the line says the import is meant (pyflakes' F401)
        elif not keep:
            edits.remove.add(node)
            emptied.add(node)
        elif len(keep) != len(node.names):
            edits.add_replace(node, _keep_aliases(keep))
    return emptied


def _read_only_in(statements: set[cst.CSTNode], module: cst.Module, analysis: Analysis,
                  parents: Mapping[cst.CSTNode, cst.CSTNode | None]) -> list[Binding]:
    """The module-level imports of other libraries that nothing reads but the top-level `statements` of `module`
    (which go). `analysis` is that of `module` before the tidy-up added imports; `parents`, of `module`."""
    scope = analysis.module_scope
    counts: dict[str, int] = {}
    for statement in statements:
        if parents.get(statement) is not module:
            continue
        stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(statement, None)]
        while stack:
            node, parent = stack.pop()
            if type(node) is cst.Name and _flag_use(node, parent) is not None:
                counts[node.value] = counts.get(node.value, 0) + 1
            stack.extend((c, node) for c in children(node, tokens=False))
    out: list[Binding] = []
    exported = _exported(module) if counts else set()
    for name, count in counts.items():
        bindings = scope.bindings.get(name, ())
        if not bindings or any(b.kind != "import" or b.alias is None or _legacy_module_of(b) is not None
                               or parents.get(parents.get(b.node)) is not module for b in bindings):
            continue
        reads = sum(other.reads.get(name, 0) for other in analysis.scopes
                    if name in other.reads and analysis.lookup(name, other) is scope)
        line = parents.get(bindings[0].node)
        if reads == count and isinstance(line, cst.SimpleStatementLine) and not _silenced(line) \
                and name not in exported:
            out.extend(bindings)
    return out


def _nested_in_function(node: cst.CSTNode | None, parents: Mapping[cst.CSTNode, cst.CSTNode | None]) -> bool:
    """The import sits in a branch, loop or `with` of a function (`if idx == 0: import torch_neuronx` before a
    trace): it ran on that path only, after the function's earlier statements had used the device, so it was
    there for the API the fixes took away, not to register the device; it goes like any unused import."""
    line = parents.get(node) if node is not None else None
    block = parents.get(line) if line is not None else None
    owner = parents.get(block) if block is not None else None
    if owner is None or type(owner) in (cst.FunctionDef, cst.Module) or type(block) is cst.Module:
        return False
    while owner is not None and type(owner) is not cst.FunctionDef:
        owner = parents.get(owner)
    return owner is not None


def _stand_ins(module: cst.Module, orphaned: list[Binding], dead: set[int]) -> dict[cst.CSTNode, Callable]:
    """For each import statement of torch_neuronx the fixes leave unused, where the file imports torch_neuronx
    nowhere else: `import torch_neuronx` to stand in its place, which registers the `neuron` device where the
    automatic loading of device backends is off (TORCH_DEVICE_BACKEND_AUTOLOAD=0). The imports of other
    libraries simply go, as a linter's fix would take them."""
    own = [b for b in orphaned if (_module_name(b.node) or "").split(".")[0] == NATIVE_DETECTION
           and all(id(a) in dead for a in b.node.names)]
    if not own:
        return {}
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if type(node) is cst.Import or type(node) is cst.ImportFrom:
            if isinstance(node.names, (list, tuple)) and any(
                    id(a) not in dead and (_module_name(node, a) or "").split(".")[0] == NATIVE_DETECTION
                    for a in node.names):
                return {}
            continue
        stack.extend(children(node, tokens=False))
    return {b.node: _native_import(None) for b in own}


def _module_name(node: cst.Import | cst.ImportFrom, alias: cst.ImportAlias | None = None) -> str | None:
    """The absolute module an import statement (its `alias`, by default its first) imports; None for a relative
    one."""
    if isinstance(node, cst.Import):
        return dotted_str((alias or node.names[0]).name)
    return None if node.relative or node.module is None else dotted_str(node.module)


def _noqa_line(updated: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    return updated.with_changes(trailing_whitespace=cst.TrailingWhitespace(
        whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment("# noqa: F401"),
        newline=updated.trailing_whitespace.newline))


def _guard_of(small: cst.CSTNode, parents: Mapping[cst.CSTNode, cst.CSTNode | None]) -> cst.Try | None:
    """The `try` whose own body holds the import `small`, where a handler catches its ImportError."""
    line = parents.get(small)
    block = parents.get(line) if line is not None else None
    owner = parents.get(block) if isinstance(block, cst.IndentedBlock) else None
    if isinstance(owner, cst.Try) and owner.body is block and guards_imports(owner):
        return owner
    return None


def _keep_detections(edits: EditSet, emptied: set[cst.CSTNode], flags: list[Binding], gone: set[cst.CSTNode],
                     parents: Mapping[cst.CSTNode, cst.CSTNode | None]) -> None:
    """Turn the torch_xla imports of the feature detections that stay into torch_neuronx imports (see the module
    docstring): one per guard, plus one per name still tested as a flag."""
    served: set[cst.Try] = set()
    for b in flags:
        guard = _guard_of(b.node, parents)
        if guard is None or b.node in emptied:
            continue
        served.add(guard)
        edits.add_replace(b.node, _native_import(b.name))
    for small in sorted(emptied, key=lambda n: id(n)):
        guard = _guard_of(small, parents)
        if guard is None or guard in gone or guard in served or _has_native_import(guard):
            continue
        served.add(guard)
        edits.remove.discard(small)
        line = parents.get(small)
        if isinstance(line, cst.SimpleStatementLine) and list(line.body) == [small] \
                and line.trailing_whitespace.comment is None:
            # imported only to fail where Neuron is absent: linters are told it is meant (pyflakes' F401)
            edits.add_replace(line, _native_import_line)
        else:
            edits.add_replace(small, _native_import(None))


def _native_import(alias: str | None):
    name = cst.ImportAlias(cst.Name(NATIVE_DETECTION),
                           asname=cst.AsName(cst.Name(alias)) if alias and alias != NATIVE_DETECTION else None)

    def fn(updated):
        return cst.Import(names=[name], semicolon=updated.semicolon)
    return fn


def _native_import_line(updated: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """`import torch_neuronx  # noqa: F401` in the place of the line's one torch_xla import."""
    return _noqa_line(updated.with_changes(body=[cst.Import(names=[cst.ImportAlias(cst.Name(NATIVE_DETECTION))])]))


def _has_native_import(guard: cst.Try) -> bool:
    return any(isinstance(s, cst.Import) and any(dotted_str(a.name) == NATIVE_DETECTION for a in s.names)
               for line in guard.body.body if isinstance(line, cst.SimpleStatementLine) for s in line.body)


def _legacy_kept(analysis: Analysis, unused: list[Binding], flags: list[Binding]) -> bool:
    """Whether the fixed module still imports torch_xla somewhere (after the tidy-up)."""
    going = {id(b) for b in unused} | {id(b) for b in flags}
    return any(_legacy_module_of(b) is not None and id(b) not in going
               for scope in analysis.scopes for bindings in scope.bindings.values() for b in bindings)


def _native_probes(module: cst.Module) -> list[cst.SimpleString]:
    """The `"torch_xla"` of `find_spec("torch_xla")` (and RequirementCache / package_available): once the file no
    longer imports torch_xla they name torch_neuronx, so the detection succeeds where the migrated code runs."""
    found: list[cst.SimpleString] = []
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call and node.args and (dotted(node.func) or [""])[-1] in PACKAGE_PROBES:
            value = node.args[0].value
            if type(value) is cst.SimpleString and value.evaluated_value in ("torch_xla", "torch-xla"):
                found.append(value)
        stack.extend(children(node, tokens=False))
    return found


def flag_only_bindings(analysis: Analysis) -> list[Binding]:
    """The torch_xla imports in a guard whose name every read uses only as an availability flag (`xm is not None`,
    `if xm:`, `not xm`, `xm and ...`), whole-import bindings only (`import a.b as xm`, `from a import b as xm`)."""
    candidates: dict[str, list[Binding]] = {}
    for scope in analysis.scopes:
        for name, bindings in scope.bindings.items():
            for b in bindings:
                if _legacy_module_of(b) is not None and len(b.node.names) == 1 and \
                        _guard_of(b.node, analysis.parents) is not None:
                    candidates.setdefault(name, []).append(b)
    if not candidates:
        return []
    uses: dict[str, list[bool]] = {}
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(analysis.module, None)]
    while stack:  # the module as it is now (the parent map also holds the nodes that edits replaced)
        node, parent = stack.pop()
        if type(node) in (cst.Import, cst.ImportFrom):
            continue  # names there are bound, not read: `torch_xla` of `import torch_xla.core.xla_model as xm`
        if type(node) is cst.Name and node.value in candidates:
            use = _flag_use(node, parent)
            if use is not None:
                uses.setdefault(node.value, []).append(use)
        stack.extend((c, node) for c in children(node, tokens=False))
    return [b for name, bs in candidates.items() if uses.get(name) and all(uses[name]) for b in bs]


def _flag_use(name: cst.Name, parent) -> bool | None:
    """True: `name` is read as a flag; False: read otherwise; None: not a read (a binding, an attribute name)."""
    if parent is None or isinstance(parent, (cst.ImportAlias, cst.AsName, cst.AssignTarget, cst.Param)) or (
            isinstance(parent, cst.Attribute) and parent.attr is name) or (
            isinstance(parent, cst.Arg) and parent.keyword is name):
        return None
    if isinstance(parent, cst.Comparison) and parent.left is name and len(parent.comparisons) == 1:
        target = parent.comparisons[0]
        return isinstance(target.operator, (cst.Is, cst.IsNot)) and isinstance(target.comparator, cst.Name) \
            and target.comparator.value == "None"
    if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not):
        return True
    if isinstance(parent, (cst.If, cst.While, cst.IfExp)) and parent.test is name:
        return True
    if isinstance(parent, cst.BooleanOperation):
        return True
    return False


def _enclosing_statements(statements: set[cst.CSTNode], parents: Mapping[cst.CSTNode, cst.CSTNode | None]) -> list:
    """The compound statements whose own block holds each small statement (small -> line -> block -> statement)."""
    out = []
    for small in statements:
        line = parents.get(small)
        block = parents.get(line) if line is not None else None
        owner = parents.get(block) if isinstance(block, cst.IndentedBlock) else None
        if owner is not None and getattr(owner, "body", None) is block and owner not in out:
            out.append(owner)
    return out


def _parents_after_additions(before: cst.Module, after: cst.Module,
                             parents: Mapping[cst.CSTNode, cst.CSTNode | None]) -> Mapping[cst.CSTNode, cst.CSTNode | None]:
    """The parent map of `after`, a copy of `before` with top-level statements added or given new leading lines:
    `before`'s map, with the new module and the new statements in front."""
    overlay: dict[cst.CSTNode, cst.CSTNode | None] = {after: None}
    for statement in after.body:
        overlay[statement] = after
        if parents.get(statement) is not before:  # new, or a copy of an old statement: its children move with it
            for child in children(statement, tokens=False):
                overlay[child] = statement
    return ChainMap(overlay, parents)


def _still_needed(module: cst.Module, required: list[tuple[str, str | None]], unresolved: set[str],
                  render: Callable[[cst.Module], str]) -> list[tuple[str, str | None]]:
    """The requested imports the rewritten code really uses (a rule may ask for one and then not edit)."""
    out = []
    text = None
    for m, a in required:
        if (a or m.split(".")[0]) in unresolved:
            out.append((m, a))
        elif a is None and "." in m:  # `import torch.distributed` where `torch` is bound: is the submodule used?
            text = render(module) if text is None else text
            if re.search(rf"(?<![\w.]){re.escape(m)}\b", text) and not _imported_at_top(text, m):
                out.append((m, a))
    return out


def _imported_at_top(text: str, module: str) -> bool:
    """The file already has `import <module>` (among others on the line, perhaps) at its top level."""
    name = re.escape(module)
    return re.search(rf"(?m)^import[ \t]+(?:[\w.]+(?:[ \t]+as[ \t]+\w+)?[ \t]*,[ \t]*)*{name}[ \t]*(?:,|#|;|\r|$)",
                     text) is not None


def _keep_aliases(keep: list[cst.ImportAlias]):
    keep_text = [generated(a.name) for a in keep]

    def fn(updated):
        names = [a for a in updated.names if generated(a.name) in keep_text]
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(names=names)
    return fn


class _Guards:
    """Tells the `try`/`if` statements that only guarded legacy imports which are all going away."""

    def __init__(self, emptied: set[cst.CSTNode], dead_names: set[str], analysis: Analysis) -> None:
        self.emptied = emptied
        self.dead_names = dead_names
        self.read_names = {n for s in analysis.scopes for n in s.reads}

    def only_guards_dead_imports(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Try):
            return node.orelse is None and node.finalbody is None and self._only_dead_imports(node.body) and all(
                self._harmless(h.body) for h in node.handlers)
        if isinstance(node, cst.If):
            return node.orelse is None and self._only_dead_imports(node.body) and _pure_test(node.test)
        return False

    def _only_dead_imports(self, block: cst.BaseSuite) -> bool:
        if not isinstance(block, cst.IndentedBlock):
            return False
        found = False
        for stmt in block.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                return False
            for s in stmt.body:
                if s in self.emptied:
                    found = True
                elif not isinstance(s, cst.Pass):
                    return False
        return found

    def _harmless(self, block: cst.BaseSuite) -> bool:
        body = block.body if isinstance(block, cst.IndentedBlock) else []
        for stmt in body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                return False
            for s in stmt.body:
                if isinstance(s, (cst.Pass, cst.Raise)) or s in self.emptied or _fails(s):
                    continue
                if isinstance(s, cst.Expr) and isinstance(s.value, (cst.SimpleString, cst.Ellipsis)):
                    continue
                if isinstance(s, cst.Expr) and isinstance(s.value, cst.Call) and \
                        (dotted(s.value.func) or [""])[-1] in REPORTING_CALLS:
                    continue  # "torch_xla not found" messages go with the guard
                if isinstance(s, cst.Assign) and all(
                    isinstance(t.target, cst.Name) and (t.target.value in self.dead_names
                                                        or t.target.value not in self.read_names)
                    for t in s.targets
                ):
                    continue
                return False
        return True


def _pure_test(test: cst.BaseExpression) -> bool:
    """A guard condition without side effects worth keeping (names, comparisons, feature tests)."""
    for node in _walk(test):
        if isinstance(node, cst.Call):
            name = (dotted(node.func) or [""])[-1]
            if not (name.startswith(("is_", "has_", "_is_", "find_spec")) or "available" in name):
                return False
    return True


def _walk(node: cst.CSTNode):
    yield node
    for child in children(node):
        yield from _walk(child)


def _add_imports(module: cst.Module, required: list[tuple[str, str | None]]) -> cst.Module:
    """Each new import in the block of the file's leading imports it belongs to (standard library, third party),
    in name order there (see `_into_block`); a third-party one without such a block goes where the legacy import
    was or after the leading imports, a standard-library one starts its own block before the others."""
    for m, a in required:
        statement = cst.parse_statement(f"import {m} as {a}\n" if a else f"import {m}\n")
        placed = _into_block(module, statement, m)
        if placed is None:
            placed = _new_stdlib_block(module, statement) if section(m) == STDLIB else \
                _after_earlier_blocks(module, statement)
        module = placed
    return module


def _add_from_imports(module: cst.Module, required: list[tuple[str, str]]) -> cst.Module:
    """One `from m import a, b` line for each module of `required` (the names sorted, as isort has them), placed as
    `_add_imports` places an import; over 88 characters, one name a line in parentheses."""
    names: dict[str, list[str]] = {}
    for m, n in required:
        names.setdefault(m, []).append(n)
    for m, listed in names.items():
        listed = sorted(set(listed))
        line = f"from {m} import {', '.join(listed)}\n"
        if len(line) > 89:
            line = f"from {m} import (\n" + "".join(f"    {n},\n" for n in listed) + ")\n"
        statement = cst.parse_statement(line)
        placed = _into_block(module, statement, m, is_from=True)
        module = placed if placed is not None else _after_earlier_blocks(module, statement)
    return module


def _after_earlier_blocks(module: cst.Module, new: cst.SimpleStatementLine) -> cst.Module:
    """A third-party import in a file without a third-party block: where the legacy import was, or after the
    leading imports; set off by a blank line when it follows the standard-library block."""
    index = _import_position(list(module.body))
    module = _add_other_imports(module, [], [new])
    body = list(module.body)
    previous = _line_section(body[index - 1]) if index > 0 else None
    if previous is not None and previous[0] < THIRD_PARTY and not body[index].leading_lines:
        body[index] = body[index].with_changes(leading_lines=[cst.EmptyLine()])
    following = index + 1
    if following < len(body) and _line_section(body[following]) is None and not body[following].leading_lines \
            and not (following == 1 and is_docstring(body[0])):
        # the code after the imports stays set off from them by a blank line (isort's and ruff's I001)
        body[following] = body[following].with_changes(leading_lines=[cst.EmptyLine()])
    return module.with_changes(body=body)


def _line_section(stmt: cst.BaseStatement) -> tuple[int, str, bool] | None:
    """(block, module, is a `from` import) of a top-level import line; None for any other statement."""
    if not is_import_line(stmt):
        return None
    first = stmt.body[0]
    if isinstance(first, cst.ImportFrom):
        if first.relative or first.module is None:
            return FIRST_PARTY, "", True
        name = dotted_str(first.module)
        return section(name), name, True
    name = dotted_str(first.names[0].name)
    return section(name), name, False


def _leading_imports(body: list[cst.BaseStatement]) -> list[tuple[int, tuple[int, str, bool]]]:
    """(index, (block, module, is a `from` import)) of the import lines before the module's first other statement."""
    out = []
    for i, stmt in enumerate(body):
        found = _line_section(stmt)
        if found is None and not (i == 0 and is_docstring(stmt)):
            break
        if found is not None:
            out.append((i, found))
    return out


def _import_blocks(body: list[cst.BaseStatement]) -> list[list[tuple[int, tuple[int, str, bool]]]]:
    """The blocks of module-level import lines (consecutive lines, a blank or comment line starts the next), each as
    (index, (block, module, is a `from` import)) of its lines, the leading ones and those after other code
    (`import torch` below an argument parser's call)."""
    blocks: list[list[tuple[int, tuple[int, str, bool]]]] = [[]]
    for i, stmt in enumerate(body):
        found = _line_section(stmt)
        if found is None or stmt.leading_lines:
            blocks.append([])
        if found is not None:
            blocks[-1].append((i, found))
    return [block for block in blocks if block]


def _into_block(module: cst.Module, new: cst.SimpleStatementLine, name: str,
                is_from: bool = False) -> cst.Module | None:
    """`new` (an `import name`) in a block of its kind, where isort puts it: among the block's `import` lines by
    name, before its `from` lines; None when the file has no such block. The block is the first one that imports
    `name`'s package (`torch.distributed` beside `import torch`, after other code too where that code does not
    read the name it binds), else the file's leading imports of its kind, else for the standard library its
    largest later block (`import time` beside `import os` and `import sys` below an argument parser, not beside an
    `import os` put right above the one statement that needed it). Inserted before the block's first line, it
    takes that line's blank lines above."""
    body = list(module.body)
    kind = section(name)
    package = name.split(".")[0].lower()
    bound = _import_names(new)
    later, read, start = [], set(), 0
    for found in _import_blocks(body):
        read.update(_names_read(body[start:found[0][0]]))  # what the code above this block reads
        start = found[0][0]
        block = [(i, m, is_from) for i, (sec, m, is_from) in found if sec == kind]
        if block and not bound & read:
            later.append(block)
    block = next((b for b in later if any(m.split(".")[0].lower() == package for _i, m, _f in b)), None) \
        or [(i, m, is_from) for i, (sec, m, is_from) in _leading_imports(body) if sec == kind] \
        or (max(later, key=len) if later and kind == STDLIB else None)
    if not block:
        return None
    key = name.lower()
    # an `import` goes before the block's first `from` line or later name; a `from` import, among the `from` lines
    before = next((i for i, m, from_line in block
                   if (from_line and m.lower() > key if is_from else from_line or m.lower() > key)), None)
    if before is None:
        return module.with_changes(body=[*body[:block[-1][0] + 1], new, *body[block[-1][0] + 1:]])
    if before == block[0][0]:
        new, body[before] = _take_leading_lines(new, body[before])
    return module.with_changes(body=[*body[:before], new, *body[before:]])


def _take_leading_lines(new: cst.SimpleStatementLine, stmt: cst.BaseStatement,
                        left: Sequence[cst.EmptyLine] = ()) -> tuple[cst.SimpleStatementLine, cst.BaseStatement]:
    """`new`, inserted right above `stmt`, takes the blank lines and comments above it (a block's header), all but
    the migration markers right above `stmt`: those stand for `stmt` and stay on it (a marker parted from its
    statement is not seen as placed, and the next run would add another). `stmt` keeps `left` above its markers."""
    lines = list(stmt.leading_lines)
    cut = len(lines)
    while cut and lines[cut - 1].comment is not None and marker_code(lines[cut - 1].comment.value):
        cut -= 1
    kept = lines[cut:]
    return new.with_changes(leading_lines=lines[:cut]), stmt.with_changes(leading_lines=[*left, *kept] if kept else
                                                                          list(left))


def _new_stdlib_block(module: cst.Module, new: cst.SimpleStatementLine) -> cst.Module:
    """A standard-library block of its own before the file's other imports (after `from __future__` imports and
    the docstring), set off by a blank line."""
    body = list(module.body)
    later = next((i for i, (sec, _m, _f) in _leading_imports(body) if sec > STDLIB), None)
    if later is None:
        return _add_other_imports(module, [], [new])
    new, body[later] = _take_leading_lines(new, body[later], [cst.EmptyLine()])
    return module.with_changes(body=[*body[:later], new, *body[later:]])


def _add_other_imports(module: cst.Module, required: list[tuple[str, str | None]],
                       statements: list[cst.SimpleStatementLine] = ()) -> cst.Module:
    new = [cst.parse_statement(f"import {m} as {a}\n" if a else f"import {m}\n") for m, a in required]
    new += list(statements)
    if not new:
        return module
    body = list(module.body)
    index = _import_position(body)
    if index < len(body) and _mentions_legacy_import(body[index]):
        # the new import takes the place (and the blank lines above) of the legacy one it replaces
        new[0], body[index] = _take_leading_lines(new[0], body[index])
    elif index < len(body) and not body[index].leading_lines and not is_import_line(body[index]):
        blank = [cst.EmptyLine() for _ in range(2 if isinstance(body[index], (cst.FunctionDef, cst.ClassDef)) else 1)]
        body[index] = body[index].with_changes(leading_lines=blank)
    return module.with_changes(body=[*body[:index], *new, *body[index:]])


def defined_name(definition: str) -> str:
    """The name a definition binds: `DEVICE = ...` -> DEVICE, `class RateTracker: ...` -> RateTracker."""
    head = definition.split("=", 1)[0] if not definition.startswith(("class ", "def ")) else \
        definition.split(None, 1)[1].split("(", 1)[0].split(":", 1)[0]
    return head.strip()


def _add_definitions(module: cst.Module, definitions: list[str]) -> cst.Module:
    """Module-level statements new code relies on (`DEVICE = ...`, a class), after the leading imports; a class
    or function is set off by two blank lines, as PEP 8 has it."""
    if not definitions:
        return module
    new = _constants_first(list(cst.parse_module("".join(d + "\n" for d in definitions)).body))
    body = list(module.body)
    index = 0
    for i, stmt in enumerate(body):
        if is_import_line(stmt) or _mentions_legacy_import(stmt) or (i == 0 and is_docstring(stmt)):
            index = i + 1
            continue
        break
    index = _after_late_imports(body, index, new)
    for i, stmt in enumerate(new):
        compound = isinstance(stmt, (cst.ClassDef, cst.FunctionDef))
        after_compound = i > 0 and isinstance(new[i - 1], (cst.ClassDef, cst.FunctionDef))
        if i == 0 or compound or after_compound:
            new[i] = stmt.with_changes(leading_lines=_blank_lines(2 if compound or after_compound else 1))
    if index < len(body):
        lines = list(body[index].leading_lines)
        blank = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
        gap = 2 if isinstance(new[-1], (cst.ClassDef, cst.FunctionDef)) else 1 if not lines else 0
        if blank < gap:
            body[index] = body[index].with_changes(leading_lines=_blank_lines(gap - blank) + lines)
    return module.with_changes(body=[*body[:index], *new, *body[index:]])


def _constants_first(new: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The simple statements (`WORLD_SIZE = ...`) before the classes and functions, as a person groups them, except
    one that reads a name a class or function among them defines (it stays after that definition)."""
    compound = [stmt for stmt in new if isinstance(stmt, (cst.ClassDef, cst.FunctionDef))]
    defined = {stmt.name.value for stmt in compound}
    early = [stmt for stmt in new if not isinstance(stmt, (cst.ClassDef, cst.FunctionDef))
             and not defined & set(_names_read([stmt]))]
    return [*early, *(stmt for stmt in new if all(stmt is not e for e in early))]


def _after_late_imports(body: list[cst.BaseStatement], index: int, new: list[cst.BaseStatement]) -> int:
    """Where the definitions go when they read a name only an import below other code binds (`import os` after
    an argument parser's call): after the run of import lines that holds the last such import, else `index`."""
    read = set(_names_read(new))
    bound_above = {name for stmt in body[:index] for name in _import_names(stmt)}
    for i in range(len(body) - 1, index - 1, -1):
        if is_import_line(body[i]) and (_import_names(body[i]) & read) - bound_above:
            while i + 1 < len(body) and is_import_line(body[i + 1]):
                i += 1
            return i + 1
    return index


def _names_read(nodes):
    """The names the nodes use (`time` of `time.time()`, not the attribute's `time`)."""
    for node in nodes:
        if isinstance(node, cst.Name):
            yield node.value
        yield from _names_read([node.value] if isinstance(node, cst.Attribute) else children(node))


def _import_names(stmt: cst.BaseStatement) -> set[str]:
    """The names an import line binds (`import a.b` binds `a`); none for another statement."""
    if not is_import_line(stmt):
        return set()
    out = set()
    for small in stmt.body:
        if isinstance(small.names, cst.ImportStar):
            continue
        for alias in small.names:
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                out.add(alias.asname.name.value)
            else:
                out.add(dotted_str(alias.name).split(".")[0])
    return out


def _blank_lines(count: int) -> list[cst.EmptyLine]:
    """`count` blank lines, each its own node (a tree holds every node once)."""
    return [cst.EmptyLine() for _ in range(count)]


def is_docstring(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr) \
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


def _import_position(body: list[cst.BaseStatement]) -> int:
    """Before the first legacy import at module level, else after the leading docstring and imports."""
    for i, stmt in enumerate(body):
        if _mentions_legacy_import(stmt):
            return i
    index = 0
    for i, stmt in enumerate(body):
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            break
        s = stmt.body[0]
        docstring = i == 0 and isinstance(s, cst.Expr) and isinstance(s.value, (cst.SimpleString,
                                                                                  cst.ConcatenatedString))
        if not (docstring or isinstance(s, (cst.Import, cst.ImportFrom))):
            break
        index = i + 1
    return index


def _mentions_legacy_import(stmt: cst.BaseStatement) -> bool:
    if isinstance(stmt, cst.SimpleStatementLine):
        for s in stmt.body:
            if isinstance(s, cst.Import) and any(is_legacy(dotted_str(a.name)) for a in s.names):
                return True
            if isinstance(s, cst.ImportFrom) and s.module is not None and not s.relative \
                    and is_legacy(dotted_str(s.module)):
                return True
        return False
    if isinstance(stmt, cst.Try):
        return any(_mentions_legacy_import(s) for s in stmt.body.body)
    return False
