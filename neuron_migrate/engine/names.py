"""Resolve names through the file's own imports, scope by scope.

One pass over the tree records every scope (module, class, function, lambda, comprehension), what each
scope binds (imports with the dotted path they bind, and every other kind of binding), which names each
scope reads, and the nodes the rules asked for. Resolution then follows Python's rules: the innermost
function scope that binds a name wins, class scopes are skipped from nested functions, the module scope
comes last. A name is bound to an import only when every binding of it in its scope is that import or a
fallback such as `xm = None` in an `except ImportError` handler; any other binding makes it a local object
that no rule touches.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import libcst as cst

from neuron_migrate.syntax.walk import (KINDS, SYNTAX, TOKEN, children, field_order, node_kind, subclass,
                                        syntax_fields, visit_fields, wants_tokens)

NESTING = (cst.If, cst.Try, cst.TryStar, cst.For, cst.While, cst.With, cst.Match)
SCOPE_NODES = (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


@dataclass(eq=False)
class Binding:
    name: str
    kind: str  # "import", "assign", "def", "class", "param", "for", "with", "except", "global", ...
    qualname: str | None = None  # for imports: the dotted path the name stands for
    node: cst.CSTNode | None = None  # the Import / ImportFrom small statement, or the binding node
    alias: cst.ImportAlias | None = None
    fallback: bool = False  # an `xm = None` style stand-in in an except handler or guard
    conditional: bool = False  # inside an if/try/loop/with of its scope: it may not have run at a given read


@dataclass(eq=False)
class Scope:
    kind: str  # "module", "class", "function", "lambda", "comprehension"
    node: cst.CSTNode
    parent: Scope | None
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    reads: dict[str, int] = field(default_factory=dict)
    globals: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    nesting: int = 0  # compound statements open around the walk's current position (while collecting)
    log: list[tuple] | None = None  # while collecting a top-level statement: what it does to this (module) scope

    def bind(self, binding: Binding) -> None:
        binding.conditional = self.nesting > 0
        self.bindings.setdefault(binding.name, []).append(binding)
        if self.log is not None:
            self.log.append(("bind", binding))

    def read(self, name: str) -> None:
        self.reads[name] = self.reads.get(name, 0) + 1
        if self.log is not None:
            self.log.append(("read", name))

    def declare(self, which: str, name: str) -> None:
        """`global name` (which="globals") or `nonlocal name` (which="nonlocals") in this scope."""
        getattr(self, which).add(name)
        if self.log is not None:
            self.log.append(("declare", which, name))

    def replay(self, log: list[tuple]) -> None:
        """Do again what a top-level statement did to the module scope it was collected in."""
        for event in log:
            if event[0] == "bind":
                self.bindings.setdefault(event[1].name, []).append(event[1])  # as bound, conditional or not
            elif event[0] == "read":
                self.reads[event[1]] = self.reads.get(event[1], 0) + 1
            else:
                getattr(self, event[1]).add(event[2])


@dataclass(eq=False, slots=True)
class Occurrence:
    """A node a rule asked for, with where it sits."""

    node: cst.CSTNode
    scope: Scope
    statement: cst.CSTNode  # innermost statement (SimpleStatementLine or compound statement)
    small: cst.CSTNode | None  # innermost small statement, when inside a simple statement line
    parent: cst.CSTNode | None
    block: cst.CSTNode | None  # the IndentedBlock / Module whose body holds `statement`
    in_loop: bool = False


def not_a_read(node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """Whether `node`, a name of LibCST's tree, stands where Python reads no name: a keyword argument's name
    (`setup(world_size=n)`), a class pattern's keyword (`case Point(x=0)`), a name of `global` / `nonlocal`. It is
    no reference to what the file imports under that name, whose rewrite there would not compile."""
    kind = type(parent)  # exact types: isinstance on LibCST's ABCs is slow, and every name comes here
    return (kind is cst.Arg and parent.keyword is node) or kind is cst.NameItem \
        or (kind is cst.MatchKeywordElement and parent.key is node)


def dotted(expr: cst.CSTNode) -> list[str] | None:
    """`a.b.c` -> ["a", "b", "c"]; None for anything that is not a plain name chain."""
    parts: list[str] = []
    while type(expr) is cst.Attribute:  # exact types: isinstance on LibCST's ABCs is slow, and this is hot
        parts.append(expr.attr.value)
        expr = expr.value
    if type(expr) is cst.Name:
        parts.append(expr.value)
        parts.reverse()
        return parts
    return None


def dotted_str(expr: cst.CSTNode | None) -> str | None:
    if expr is None:
        return None
    parts = dotted(expr)
    return ".".join(parts) if parts else None


STATEMENT, SMALL, BLOCK, NESTED = 1, 2, 4, 8


@functools.lru_cache(maxsize=None)
def _role(node_type: type) -> int:
    """What a node type is to the walk, computed once per type (see syntax.walk.subclass)."""
    role = 0
    if subclass(node_type, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        role |= STATEMENT
    elif subclass(node_type, cst.BaseSmallStatement):
        role |= SMALL
    if subclass(node_type, (cst.Module, cst.IndentedBlock)):
        role |= BLOCK
    if subclass(node_type, NESTING):
        role |= NESTED
    return role


@functools.lru_cache(maxsize=None)
def _handler(visitor_type: type, prefix: str, node_type: type):
    """The visitor's `visit_<Type>` / `leave_<Type>` function, as CSTVisitor looks it up for every node."""
    return getattr(visitor_type, prefix + node_type.__name__, None)


_EXCEPT_GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "RuntimeError", "OSError"}


# What the walk needs to know of a node type, worked out once per process: its kind as a child (walk.KINDS), and
# per (visitor class, wanted types, tokens): its role, visit and leave methods, whether it is wanted, its fields.
_UNKNOWN = object()
_INFOS: dict[tuple, dict[type, tuple]] = {}


class Collector(cst.CSTVisitor):
    """One walk that builds the scope table and gathers the nodes of the requested types."""

    def __init__(self, wanted: Iterable[type] = ()) -> None:
        super().__init__()
        self.wanted = tuple(wanted)
        self.module_scope: Scope | None = None
        self.scopes: list[Scope] = []
        self.occurrences: list[Occurrence] = []
        self._scope: Scope | None = None
        self._stack: list[cst.CSTNode] = []
        self._statements: list[cst.CSTNode] = []
        self._smalls: list[cst.CSTNode | None] = []
        self._blocks: list[cst.CSTNode] = []
        self._skip_names: set[cst.Name] = set()  # Name nodes that are not reads (attr, keyword, targets...)
        self._handler_depth = 0  # inside an except handler of an import guard
        self._loops = 0
        self._wanted_types: dict[type, bool] = {}
        self.parents: dict[cst.CSTNode, cst.CSTNode | None] = {}
        # top-level statement -> (what it did to the module scope, the slice of `scopes` it created, the slices of
        # the records below that it added)
        self.contributions: dict[cst.CSTNode, tuple[list[tuple], tuple[int, int], tuple[tuple[int, ...], ...]]] = {}
        # what file facts read, found by this walk rather than one walk each (engine/facts.py, engine/patches.py):
        # every string literal, every attribute, every `a.b = ...` assignment and every `setattr` name, in file order
        self.strings: list[cst.SimpleString] = []
        self.attributes: list[cst.Attribute] = []
        self.attribute_assignments: list[cst.Assign] = []
        self.setattr_names: list[cst.Name] = []
        self._first_records: tuple[int, ...] = (0, 0, 0, 0)  # their lengths where the current top-level statement began

    # -- generic walk -------------------------------------------------------------------------------------
    def on_visit(self, node: cst.CSTNode) -> bool:
        parent = self._stack[-1] if self._stack else None
        self._stack.append(node)
        self.parents[node] = parent
        node_type = type(node)
        role = _role(node_type)
        if role & STATEMENT:
            self._statements.append(node)
            self._smalls.append(None)
            if role & NESTED and self._scope is not None:
                self._scope.nesting += 1
        elif role & SMALL and self._smalls:
            self._smalls[-1] = node
        if role & BLOCK:
            self._blocks.append(node)
        if self.wanted and self._wants(node_type) and self._scope is not None:
            self.occurrences.append(Occurrence(
                node, self._scope, self._statements[-1] if self._statements else node,
                self._smalls[-1] if self._smalls else None, parent,
                self._blocks[-2] if node_type is cst.IndentedBlock and len(self._blocks) > 1
                else (self._blocks[-1] if self._blocks else None),
                self._loops > 0,
            ))
        visit = _handler(type(self), "visit_", node_type)
        return visit is None or visit(self, node) is not False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        node_type = type(original_node)
        leave = _handler(type(self), "leave_", node_type)
        if leave is not None:
            leave(self, original_node)
        self._stack.pop()
        role = _role(node_type)
        if role & STATEMENT:
            self._statements.pop()
            self._smalls.pop()
            if role & NESTED and self._scope is not None:
                self._scope.nesting -= 1
        if role & BLOCK:
            self._blocks.pop()

    def collect(self, root: cst.CSTNode, tokens: bool = True, record: bool = False,
                reuse: Analysis | None = None) -> None:
        """What `walk(root, self, tokens)` does, with the walk and the visitor's dispatch fused into one loop: the
        analysis visits every node of every file that passes the pre-filter, so this is the hot path.

        `record` keeps what each top-level statement contributes (`contributions`); with `reuse`, an analysis
        that recorded, a top-level statement it saw is not walked again: its contribution is replayed."""
        reused = reuse.contributions if reuse is not None else {}
        if reused and self.wanted:
            raise ValueError("a replayed statement yields no occurrences: reuse is for analyses without wanted nodes")
        least = TOKEN if tokens else SYNTAX
        in_order = field_order()  # else LibCST's own `children` (a release outside the tested range)
        fields_of = (visit_fields if tokens else syntax_fields) if in_order else lambda _: None
        kinds = KINDS
        visitor_type = type(self)
        infos = _INFOS.setdefault((visitor_type, frozenset(self.wanted), tokens, in_order), {})  # per node type
        parents, statements, smalls, blocks = self.parents, self._statements, self._smalls, self._blocks
        stack: list[tuple[cst.CSTNode, cst.CSTNode | None, bool]] = [(root, None, False)]
        while stack:
            node, parent, leaving = stack.pop()
            node_type = type(node)
            info = infos.get(node_type)
            if info is None:
                role = _role(node_type)
                leave = _handler(visitor_type, "leave_", node_type)
                info = infos[node_type] = (
                    role, _handler(visitor_type, "visit_", node_type), leave,
                    bool(self.wanted) and self._wants(node_type), fields_of(node_type),
                    leave is not None or bool(role & (STATEMENT | BLOCK)))  # something to do on leaving
            role, visit, leave, wanted, fields, on_leave = info
            top_level = parent is root and role & STATEMENT
            if top_level and not leaving and node in reused:
                parents[node] = parent
                self._replay(node, reuse)
                continue
            if leaving:
                if leave is not None:
                    leave(self, node)
                if top_level and record:
                    self.contributions[node] = (self.module_scope.log, (self._first_scope, len(self.scopes)),
                                                (self._first_records, self._records()))
                    self.module_scope.log = None
                if role & STATEMENT:
                    statements.pop()
                    smalls.pop()
                    if role & NESTED and self._scope is not None:
                        self._scope.nesting -= 1
                if role & BLOCK:
                    blocks.pop()
                continue
            parents[node] = parent
            if top_level and record:
                self.module_scope.log = []
                self._first_scope = len(self.scopes)
                self._first_records = self._records()
            if role & STATEMENT:
                statements.append(node)
                smalls.append(None)
                if role & NESTED and self._scope is not None:
                    self._scope.nesting += 1
            elif role & SMALL and smalls:
                smalls[-1] = node
            if role & BLOCK:
                blocks.append(node)
            if wanted and self._scope is not None:
                self.occurrences.append(Occurrence(
                    node, self._scope, statements[-1] if statements else node, smalls[-1] if smalls else None,
                    parent, blocks[-2] if node_type is cst.IndentedBlock and len(blocks) > 1
                    else (blocks[-1] if blocks else None), self._loops > 0))
            if on_leave:
                stack.append((node, parent, True))
            if visit is not None and visit(self, node) is False:
                continue
            if fields is None:
                found = children(node, tokens)
            else:
                found = []
                for name in fields:
                    value = getattr(node, name)
                    for item in value if type(value) is tuple or type(value) is list else (value,):
                        item_type = type(item)
                        kind = kinds.get(item_type)
                        if kind is None:
                            kind = kinds[item_type] = node_kind(item_type)
                        if kind >= least:
                            found.append(item)
            for child in reversed(found):
                stack.append((child, node, False))

    def _records(self) -> tuple[int, ...]:
        return len(self.strings), len(self.attributes), len(self.attribute_assignments), len(self.setattr_names)

    def _replay(self, statement: cst.CSTNode, reuse: Analysis) -> None:
        log, (first, last), (starts, ends) = reuse.contributions[statement]
        self.module_scope.replay(log)
        if reuse.strings is not None:  # the statement's records, in the order a walk finds them
            for mine, theirs, start, end in zip(
                    (self.strings, self.attributes, self.attribute_assignments, self.setattr_names),
                    (reuse.strings, reuse.attributes, reuse.attribute_assignments, reuse.setattr_names), starts, ends):
                mine += theirs[start:end]
        moved: dict[Scope, Scope] = {reuse.module_scope: self.module_scope}
        for old in reuse.scopes[first:last]:  # in creation order: a scope's parent comes before it
            new = dataclasses.replace(old, parent=moved.get(old.parent, old.parent))
            moved[old] = new
            self.scopes.append(new)

    def _wants(self, node_type: type) -> bool:
        wanted = self._wanted_types.get(node_type)
        if wanted is None:
            wanted = self._wanted_types[node_type] = subclass(node_type, self.wanted)
        return wanted

    def _push(self, kind: str, node: cst.CSTNode) -> Scope:
        scope = Scope(kind, node, self._scope)
        self.scopes.append(scope)
        self._scope = scope
        return scope

    def _pop(self) -> None:
        assert self._scope is not None
        self._scope = self._scope.parent

    def _bind(self, name: str, kind: str, **kw) -> None:
        scope = self._scope
        assert scope is not None
        if name in scope.globals and self.module_scope is not None:
            scope = self.module_scope
        scope.bind(Binding(name, kind, **kw))

    def _bind_target(self, target: cst.BaseExpression, kind: str, fallback: bool = False) -> None:
        if isinstance(target, cst.Name):
            self._skip_names.add(target)
            self._bind(target.value, kind, node=target, fallback=fallback)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._bind_target(el.value, kind, fallback)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value, kind, fallback)

    # -- scopes -------------------------------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        self.module_scope = self._push("module", node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._skip_names.add(node.name)
        self._bind(node.name.value, "def", node=node)
        for dec in node.decorators:
            pass  # decorators are read in the enclosing scope (visited as children before the body)
        self._push("function", node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._pop()

    def visit_Param(self, node: cst.Param) -> None:
        self._skip_names.add(node.name)
        self._bind(node.name.value, "param", node=node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._skip_names.add(node.name)
        self._bind(node.name.value, "class", node=node)
        self._push("class", node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._push("lambda", node)

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self._pop()

    def _visit_comp(self, node) -> None:
        self._push("comprehension", node)

    def _leave_comp(self, node) -> None:
        self._pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comp
    leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _leave_comp

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind_target(node.target, "for")

    def visit_Global(self, node: cst.Global) -> None:
        for item in node.names:
            self._skip_names.add(item.name)
            assert self._scope is not None
            self._scope.declare("globals", item.name.value)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        for item in node.names:
            self._skip_names.add(item.name)
            assert self._scope is not None
            self._scope.declare("nonlocals", item.name.value)

    # -- loops and guards ---------------------------------------------------------------------------------
    def visit_For(self, node: cst.For) -> None:
        self._bind_target(node.target, "for")
        self._loops += 1

    def leave_For(self, original_node: cst.For) -> None:
        self._loops -= 1

    def visit_While(self, node: cst.While) -> None:
        self._loops += 1

    def leave_While(self, original_node: cst.While) -> None:
        self._loops -= 1

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None and isinstance(node.name.name, cst.Name):
            self._skip_names.add(node.name.name)
            self._bind(node.name.name.value, "except", node=node)
        self._handler_depth += 1

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler) -> None:
        self._handler_depth -= 1

    # -- bindings -----------------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            self._skip_import_names(alias)
            full = dotted_str(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._bind(alias.asname.name.value, "import", qualname=full, node=node, alias=alias)
            else:
                head = full.split(".")[0]
                self._bind(head, "import", qualname=head, node=node, alias=alias)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is not None:
            for n in _names_in(node.module):
                self._skip_names.add(n)
        if isinstance(node.names, cst.ImportStar):
            return
        module = dotted_str(node.module) if node.module is not None else None
        relative = bool(node.relative)
        for alias in node.names:
            self._skip_import_names(alias)
            name = dotted_str(alias.name)
            if name is None:
                continue
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) \
                else name
            qual = None if relative or module is None else f"{module}.{name}"
            self._bind(local, "import", qualname=qual, node=node, alias=alias)

    def _skip_import_names(self, alias: cst.ImportAlias) -> None:
        for n in _names_in(alias.name):
            self._skip_names.add(n)
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            self._skip_names.add(alias.asname.name)

    def visit_Assign(self, node: cst.Assign) -> None:
        fallback = _is_none(node.value) or (self._handler_depth > 0 and _is_stand_in(node.value))
        attribute = False
        for t in node.targets:
            self._bind_target(t.target, "assign", fallback)
            attribute = attribute or type(t.target) is cst.Attribute
        if attribute:
            self.attribute_assignments.append(node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        fallback = self._handler_depth > 0 and (node.value is None or _is_stand_in(node.value))
        self._bind_target(node.target, "assign", fallback)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Name):
            self._bind(node.target.value, "assign", node=node.target)
            # an augmented assignment also reads the name; leave it out of _skip_names

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        if isinstance(node.target, cst.Name):
            self._skip_names.add(node.target)
            scope = self._scope
            while scope is not None and scope.kind == "comprehension":
                scope = scope.parent
            if scope is not None:
                scope.bind(Binding(node.target.value, "assign", node=node.target))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind_target(node.asname.name, "with")

    def visit_MatchKeywordElement(self, node) -> None:
        self._skip_names.add(node.key)  # `case Point(x=0)`: the class's attribute, no read of a name `x`

    def visit_MatchAs(self, node) -> None:
        if getattr(node, "name", None) is not None:
            self._skip_names.add(node.name)
            self._bind(node.name.value, "assign", node=node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skip_names.add(node.attr)
        self.attributes.append(node)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip_names.add(node.keyword)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == "setattr":
            self.setattr_names.append(node)
        if node in self._skip_names:
            return
        scope = self._scope
        if scope is not None:
            scope.read(node.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.strings.append(node)
        # `__all__ = ["name"]` keeps an imported name alive.
        stmt = self._smalls[-1] if self._smalls else None
        if type(stmt) in (cst.Assign, cst.AugAssign) and self._scope is self.module_scope:
            targets = [t.target for t in stmt.targets] if isinstance(stmt, cst.Assign) else [stmt.target]
            if any(isinstance(t, cst.Name) and t.value == "__all__" for t in targets):
                value = node.evaluated_value
                if isinstance(value, str):
                    self.module_scope.read(value)


def _names_in(expr: cst.CSTNode) -> list[cst.Name]:
    out = []
    while isinstance(expr, cst.Attribute):
        out.append(expr.attr)
        expr = expr.value
    if isinstance(expr, cst.Name):
        out.append(expr)
    return out


def _is_none(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Name) and value.value == "None"


def _is_stand_in(value: cst.BaseExpression) -> bool:
    """`None`, `False`, a constant, or a dotted name: what code assigns when an optional import failed."""
    return isinstance(value, (cst.Name, cst.SimpleString, cst.Integer, cst.Attribute)) or (
        isinstance(value, cst.Call) and dotted(value.func) is not None
    )


class Resolver:
    """Name resolution over a scope table (`scopes`, `module_scope`): what the LibCST analysis (`Analysis`) and
    the one of Python's tree (engine/treenames.py) share. `_dotted` reads a name chain of the tree's own nodes."""

    _dotted = staticmethod(dotted)
    _bound: dict[tuple[str, Scope], str | None]  # binding_of, once the tables are complete

    @staticmethod
    def lookup(name: str, scope: Scope) -> Scope | None:
        """The scope whose binding of `name` a read in `scope` sees (None: builtin or undefined)."""
        first = True
        current: Scope | None = scope
        while current is not None:
            if name in current.globals:
                current = _module_of(current)
                return current if current is not None and name in current.bindings else None
            if (first or current.kind != "class") and name in current.bindings:
                return current
            first = False
            current = current.parent
        return None

    def binding_of(self, name: str, scope: Scope) -> str | None:
        """The dotted import path `name` stands for in `scope`, or None when it is not an unambiguous import."""
        key = (name, scope)
        found = self._bound.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            owner = self.lookup(name, scope)
            found = self._bound[key] = None if owner is None else import_target(owner.bindings[name])
        return found

    def qualname(self, expr: cst.CSTNode, scope: Scope) -> str | None:
        parts = self._dotted(expr)
        if not parts:
            return None
        base = self.binding_of(parts[0], scope)
        if base is None:
            return None
        return ".".join([base, *parts[1:]])

    def local_name_for(self, qualname: str, scope: Scope) -> str | None:
        """A name readable in `scope` that is bound to the module `qualname` (e.g. "torch" -> "th")."""
        current: Scope | None = scope
        seen: set[str] = set()
        while current is not None:
            for name, bindings in current.bindings.items():
                if name in seen:
                    continue
                seen.add(name)
                if import_target(bindings) == qualname and self.lookup(name, scope) is current and not (
                        current.kind == "function" and any(b.conditional for b in bindings)):
                    return name
            current = current.parent
        return None


class Analysis(Resolver):
    """The scope table of one module, with name resolution."""

    def __init__(self, module: cst.Module, wanted: Sequence[type] = (), record: bool = False,
                 reuse: Analysis | None = None) -> None:
        """`record`: remember what each top-level statement contributes, so that the analysis of an edited copy
        of the module (`reuse=` this one) walks only the top-level statements the edits replaced."""
        collector = Collector(wanted)
        # no binding, read or scope is in a token
        collector.collect(module, tokens=wants_tokens(wanted), record=record, reuse=reuse)
        self.module = module
        self.scopes = collector.scopes
        self.module_scope = collector.module_scope
        self.occurrences = collector.occurrences
        self.contributions = collector.contributions
        # what facts read instead of walking the module again (see Collector.strings); the statements `reuse`
        # replayed add what it recorded of them, where it recorded
        complete = reuse is None or reuse.strings is not None
        self.strings = collector.strings if complete else None
        self.attributes = collector.attributes if complete else None
        self.attribute_assignments = collector.attribute_assignments if complete else None
        self.setattr_names = collector.setattr_names if complete else None
        self._bound: dict[tuple[str, Scope], str | None] = {}  # binding_of, once the tables are complete
        # every node's parent (None for the module); below reused statements, the parents `reuse` found
        self.parents = ChainMap(collector.parents, reuse.parents) if reuse is not None else collector.parents


def import_target(bindings: list[Binding]) -> str | None:
    imports = {b.qualname for b in bindings if b.kind == "import"}
    if len(imports) != 1:
        return None
    if any(b.kind != "import" and not b.fallback for b in bindings):
        return None
    return next(iter(imports))


def _module_of(scope: Scope) -> Scope | None:
    while scope.parent is not None:
        scope = scope.parent
    return scope
