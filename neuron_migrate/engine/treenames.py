"""Resolve names on Python's tree: the scope table of engine/names.py, built from `ast`.

The engine parses every file with Python's own parser first; the rules decide on LibCST's tree. Moving a decision to
Python's tree (engine/notes.py, engine/treecheck.py) needs the names it reads resolved as the LibCST analysis
resolves them. `TreeNames` builds the same table from Python's tree, in one walk: the same scopes (module, class,
function, lambda, comprehension), the same bindings of each (`names.Binding`: its kind, the dotted path of an
import, whether it is a fallback and whether it is conditional), the same count of reads of each name, the same
`global` and `nonlocal` declarations. The resolution itself (`lookup`, `binding_of`, `qualname`, `local_name_for`)
is `names.Resolver`'s, the code both tables share.

The table is LibCST's, quirks and all, not Python's symbol table:

- A function's decorators, parameter defaults and annotations are read in the function's own scope, a class's
  bases and keywords in the class's, and the first iterable of a comprehension in the comprehension's.
- A read is a name that is not bound where it stands (`None`, `True` and `False` are names too): an augmented
  assignment's target and `del x` read `x`; a capture pattern's name binds it, `*rest` and `**rest` in a pattern
  read it (a class pattern's keyword, `Point(x=0)`, reads nothing); `except* E as name` binds nothing (it reads
  `name`).
- `__all__ = ["name"]` at module level reads each name its string literals spell (each literal of an implicitly
  joined string on its own).
- A binding is a fallback where it assigns `None`, or where an `except` handler holds it and it assigns a stand-in:
  a name (`True`, `False` and `None` are names to LibCST), a single string literal, an integer, an attribute or a
  call of a dotted name. A binding is conditional where an `if`, `try`, loop, `with` or `match` of its scope holds it.

Python's parser normalizes identifiers (NFKC: `µ` is read as `μ`); LibCST keeps them as spelled. Where the text
holds such a word, `exact` is False and a caller decides on LibCST's tree.

`tests/test_treenames.py` holds the table to LibCST's on every fixture and example, a sample of the standard
library and generated code: scope by scope, and the qualified name of every name and attribute.
"""

from __future__ import annotations

import ast
import re
import unicodedata

from neuron_migrate.engine import lean
from neuron_migrate.engine.names import Binding, Resolver, Scope

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# `try: ... except* ...` (ast.TryStar, Python 3.11); on 3.10, whose parser takes no such statement, a class that no
# node is an instance of, so the tables that name it need no second form
TRY_STAR: type = getattr(ast, "TryStar", None) or type("TryStar", (), {})
# the compound statements that make a binding inside them conditional (names.NESTING; `for` and `try: except*` are
# walked by their own methods)
_NESTING = frozenset({ast.If, ast.Try, ast.While, ast.With, ast.AsyncWith, ast.Match})
_READS = (ast.Load, ast.Del)
_WORD = re.compile(r"\w+")
_CHILDREN: dict[type, tuple[str, ...]] = {}  # child_fields, by node type


def dotted(expr: ast.AST) -> list[str] | None:
    """`a.b.c` -> ["a", "b", "c"]; None for anything that is not a plain name chain (`names.dotted` on `ast`)."""
    parts: list[str] = []
    while expr.__class__ is ast.Attribute:
        parts.append(expr.attr)
        expr = expr.value
    if expr.__class__ is ast.Name:
        parts.append(expr.id)
        parts.reverse()
        return parts
    return None


# the fields of a node that hold no node (names, operators, contexts, flags), and the nodes that hold none
_LEAF_FIELDS = frozenset({"ctx", "op", "ops", "id", "attr", "arg", "conversion", "type_comment", "is_async", "simple",
                          "module", "level", "asname", "kind", "type_ignores"})
_LEAVES = frozenset({ast.Constant, ast.Name, ast.Global, ast.Nonlocal, ast.alias, ast.Pass, ast.Break, ast.Continue,
                     ast.Import, ast.ImportFrom})


def child_fields(kind: type) -> tuple[str, ...]:
    """The fields of a node type of an expression or statement that may hold nodes: each holds a node, None, or a
    list of nodes and Nones (a dict's `**` key), so a walk needs no type test of what it finds there."""
    return () if kind in _LEAVES else tuple(f for f in kind._fields if f not in _LEAF_FIELDS)


def exact_identifiers(text: str) -> bool:
    """No word of the text is one Python's parser would read otherwise (NFKC: `µ` as `μ`): its tree holds the
    identifiers as LibCST's does."""
    return text.isascii() or not any(
        unicodedata.normalize("NFKC", word) != word for word in _WORD.findall(text) if not word.isascii())


class TreeNames(Resolver):
    """The scope table of one module's Python tree, with name resolution (see the module docstring)."""

    _dotted = staticmethod(dotted)

    def __init__(self, tree: ast.Module, text: str) -> None:
        self.tree, self.text = tree, text
        self.scopes: list[Scope] = []
        self.module_scope = self._open("module", tree, None)
        # every Name and Attribute node, with the scope it stands in (the table's reads and qualname's questions)
        self.names: list[tuple[ast.expr, Scope]] = []
        self._bound: dict[tuple[str, Scope], str | None] = {}
        self._lines: list[str] | None = None
        # False where Python's parser normalized an identifier of the text (NFKC: `µ` is read as `μ`), which
        # LibCST keeps as spelled: the names of the two tables may differ
        self.exact = exact_identifiers(text)
        self._walk(tree)

    def _open(self, kind: str, node: ast.AST, parent: Scope | None) -> Scope:
        scope = Scope(kind, node, parent)
        self.scopes.append(scope)
        return scope

    # -- the walk ----------------------------------------------------------------------------------------------
    def _walk(self, tree: ast.Module) -> None:
        # (node, its scope, how many except handlers hold it, whether it is in a module-level `__all__ = ...`);
        # a node of None closes a compound statement of the scope
        module = self.module_scope
        stack: list[tuple] = [(s, module, 0, False) for s in reversed(tree.body)]
        pop, push, names = stack.pop, stack.append, self.names
        Name, Attribute, children_of = ast.Name, ast.Attribute, _CHILDREN
        while stack:
            node, scope, handlers, in_all = pop()
            if node is None:
                scope.nesting -= 1
                continue
            kind = node.__class__
            if kind is Name:
                names.append((node, scope))
                if node.ctx.__class__ in _READS:
                    scope.read(node.id)
                continue
            if kind is Attribute:
                names.append((node, scope))
                push((node.value, scope, handlers, in_all))
                continue
            special = _DISPATCH.get(kind)
            if special is not None:
                items = special(self, node, scope, handlers, in_all)
                if items is not None:
                    stack.extend(reversed(items))
                continue
            if kind in _NESTING:
                scope.nesting += 1
                push((None, scope, 0, False))
            elif kind is ast.Constant:
                value = node.value
                if value is None or value is True or value is False:
                    scope.read(str(value))  # names to LibCST
                elif in_all and scope is module:
                    self._all_names(node)
                continue
            fields = children_of.get(kind)
            if fields is None:
                fields = children_of[kind] = child_fields(kind)
            children = []
            for field in fields:
                value = getattr(node, field)
                if value.__class__ is list:
                    children.extend((item, scope, handlers, in_all) for item in value if item is not None)
                elif value is not None:
                    children.append((value, scope, handlers, in_all))
            stack.extend(reversed(children))

    def _bind(self, scope: Scope, name: str, kind: str, **fields) -> None:
        """`names.Collector._bind`: in the module scope where the scope declares the name `global`."""
        if name in scope.globals:
            scope = self.module_scope
        scope.bind(Binding(name, kind, **fields))

    def _bind_target(self, scope: Scope, target: ast.AST, kind: str, fallback: bool = False) -> None:
        if target.__class__ is ast.Name:
            self._bind(scope, target.id, kind, node=target, fallback=fallback)
        elif target.__class__ in (ast.Tuple, ast.List):
            for element in target.elts:
                self._bind_target(scope, element, kind, fallback)
        elif target.__class__ is ast.Starred:
            self._bind_target(scope, target.value, kind, fallback)

    # -- scopes --------------------------------------------------------------------------------------------------
    def _function(self, node, scope, handlers, in_all):
        self._bind(scope, node.name, "def", node=node)
        inner = self._open("function", node, scope)
        return [*((d, inner, handlers, False) for d in node.decorator_list), (node.args, inner, handlers, False),
                *(() if node.returns is None else ((node.returns, inner, handlers, False),)),
                *((s, inner, handlers, False) for s in node.body)]

    def _lambda(self, node, scope, handlers, in_all):
        inner = self._open("lambda", node, scope)
        return [(node.args, inner, handlers, False), (node.body, inner, handlers, False)]

    def _arguments(self, node: ast.arguments, scope, handlers, in_all):
        every = [*node.posonlyargs, *node.args, *((node.vararg,) if node.vararg else ()), *node.kwonlyargs,
                 *((node.kwarg,) if node.kwarg else ())]
        for arg in every:
            self._bind(scope, arg.arg, "param", node=arg)
        return [*((a.annotation, scope, handlers, False) for a in every if a.annotation is not None),
                *((d, scope, handlers, False) for d in node.defaults),
                *((d, scope, handlers, False) for d in node.kw_defaults if d is not None)]

    def _class(self, node, scope, handlers, in_all):
        self._bind(scope, node.name, "class", node=node)
        inner = self._open("class", node, scope)
        return [*((d, inner, handlers, False) for d in node.decorator_list),
                *((b, inner, handlers, False) for b in node.bases),
                *((k, inner, handlers, False) for k in node.keywords),
                *((s, inner, handlers, False) for s in node.body)]

    def _comprehension(self, node, scope, handlers, in_all):
        inner = self._open("comprehension", node, scope)
        heads = (node.key, node.value) if node.__class__ is ast.DictComp else (node.elt,)
        return [(h, inner, handlers, in_all) for h in (*heads, *node.generators)]

    def _generator(self, node: ast.comprehension, scope, handlers, in_all):
        self._bind_target(scope, node.target, "for")
        return [(node.target, scope, handlers, in_all), (node.iter, scope, handlers, in_all),
                *((i, scope, handlers, in_all) for i in node.ifs)]

    def _global(self, node, scope, handlers, in_all):
        for name in node.names:
            scope.declare("globals" if node.__class__ is ast.Global else "nonlocals", name)

    # -- bindings ------------------------------------------------------------------------------------------------
    def _import(self, node: ast.Import, scope, handlers, in_all):
        for alias in node.names:
            if alias.asname is not None:
                self._bind(scope, alias.asname, "import", qualname=alias.name, node=node, alias=alias)
            else:
                head = alias.name.partition(".")[0]
                self._bind(scope, head, "import", qualname=head, node=node, alias=alias)

    def _import_from(self, node: ast.ImportFrom, scope, handlers, in_all):
        module = node.module if not node.level else None
        for alias in node.names:
            if alias.name == "*":
                return
            qual = None if module is None else f"{module}.{alias.name}"
            self._bind(scope, alias.asname or alias.name, "import", qualname=qual, node=node, alias=alias)

    def _assign(self, node: ast.Assign, scope, handlers, in_all):
        fallback = _is_none(node.value) or (handlers > 0 and self._stand_in(node.value))
        for target in node.targets:
            self._bind_target(scope, target, "assign", fallback)
        in_all = scope is self.module_scope and any(t.__class__ is ast.Name and t.id == "__all__"
                                                    for t in node.targets)
        return [*((t, scope, handlers, in_all) for t in node.targets), (node.value, scope, handlers, in_all)]

    def _ann_assign(self, node: ast.AnnAssign, scope, handlers, in_all):
        fallback = handlers > 0 and (node.value is None or self._stand_in(node.value))
        self._bind_target(scope, node.target, "assign", fallback)
        return [(node.target, scope, handlers, False), (node.annotation, scope, handlers, False),
                *(() if node.value is None else ((node.value, scope, handlers, False),))]

    def _aug_assign(self, node: ast.AugAssign, scope, handlers, in_all):
        target = node.target
        in_all = False
        if target.__class__ is ast.Name:
            self._bind(scope, target.id, "assign", node=target)
            scope.read(target.id)  # LibCST's walk counts the target as a read too
            in_all = scope is self.module_scope and target.id == "__all__"
        return [(target, scope, handlers, in_all), (node.value, scope, handlers, in_all)]

    def _named(self, node: ast.NamedExpr, scope, handlers, in_all):
        owner = scope
        while owner is not None and owner.kind == "comprehension":
            owner = owner.parent
        if owner is not None:
            owner.bind(Binding(node.target.id, "assign", node=node.target))
        return [(node.target, scope, handlers, in_all), (node.value, scope, handlers, in_all)]

    def _for(self, node, scope, handlers, in_all):
        scope.nesting += 1
        self._bind_target(scope, node.target, "for")
        return [(node.target, scope, handlers, False), (node.iter, scope, handlers, False),
                *((s, scope, handlers, False) for s in node.body), *((s, scope, handlers, False) for s in node.orelse),
                (None, scope, 0, False)]

    def _with_item(self, node: ast.withitem, scope, handlers, in_all):
        if node.optional_vars is not None:
            self._bind_target(scope, node.optional_vars, "with")
        return [(node.context_expr, scope, handlers, False),
                *(() if node.optional_vars is None else ((node.optional_vars, scope, handlers, False),))]

    def _try_star(self, node: ast.stmt, scope, handlers, in_all):
        """`try: ... except* E as name:`: LibCST's walk binds no name there (it reads it) and counts no handler."""
        scope.nesting += 1
        items = [(s, scope, handlers, False) for s in node.body]
        for handler in node.handlers:
            if handler.name is not None:
                scope.read(handler.name)
            if handler.type is not None:
                items.append((handler.type, scope, handlers, False))
            items += [(s, scope, handlers, False) for s in handler.body]
        return [*items, *((s, scope, handlers, False) for s in node.orelse),
                *((s, scope, handlers, False) for s in node.finalbody), (None, scope, 0, False)]

    def _handler(self, node: ast.ExceptHandler, scope, handlers, in_all):
        if node.name is not None:
            self._bind(scope, node.name, "except", node=node)
        handlers += 1
        return [*(() if node.type is None else ((node.type, scope, handlers, False),)),
                *((s, scope, handlers, False) for s in node.body)]

    # -- patterns ------------------------------------------------------------------------------------------------
    def _match_as(self, node: ast.MatchAs, scope, handlers, in_all):
        if node.name is not None:
            self._bind(scope, node.name, "assign", node=node)
        return None if node.pattern is None else [(node.pattern, scope, handlers, False)]

    def _match_star(self, node: ast.MatchStar, scope, handlers, in_all):
        if node.name is not None:
            scope.read(node.name)  # LibCST's `*rest` is a name it does not bind

    def _match_mapping(self, node: ast.MatchMapping, scope, handlers, in_all):
        if node.rest is not None:
            scope.read(node.rest)
        return [(k, scope, handlers, False) for k in (*node.keys, *node.patterns)]

    def _match_singleton(self, node: ast.MatchSingleton, scope, handlers, in_all):
        scope.read(str(node.value))  # `case None:` reads the name `None` to LibCST

    def _match_class(self, node: ast.MatchClass, scope, handlers, in_all):
        return [(node.cls, scope, handlers, False), *((p, scope, handlers, False) for p in node.patterns),
                *((p, scope, handlers, False) for p in node.kwd_patterns)]

    # -- string literals -----------------------------------------------------------------------------------------
    def _joined(self, node: ast.JoinedStr, scope, handlers, in_all):
        """An f-string: its text parts are no string literals to LibCST; an f-string joined implicitly to plain
        literals is, in `__all__`, read for those."""
        if in_all and scope is self.module_scope:
            for value in self._literal_values(node, plain_only=True):
                scope.read(value)
        return [(v, scope, handlers, in_all) for v in node.values if v.__class__ is ast.FormattedValue]

    def _all_names(self, node: ast.Constant) -> None:
        if node.value.__class__ is str:
            for value in self._literal_values(node):
                self.module_scope.read(value)

    def _literal_values(self, node: ast.AST, plain_only: bool = False) -> list[str]:
        """The value of each string literal of `node`'s text (several where literals are joined implicitly); with
        `plain_only`, of the literals that are no f-strings."""
        text = lean.segment(node, self._text_lines())
        if not plain_only and lean.literals(text) is not None and len(lean.literals(text)) == 1:
            return [node.value]
        values = []
        at = 0
        while True:
            found = lean._STRING.match(text, at)
            if found is None:
                return values
            if "f" not in found.group(1).lower():
                value = ast.literal_eval(found.group(0))
                if value.__class__ is str:
                    values.append(value)
            at = lean._BETWEEN.match(text, found.end()).end()

    def _stand_in(self, value: ast.expr) -> bool:
        """`names._is_stand_in` on Python's tree: a name (`None`, `True` and `False` are names to LibCST), one
        string literal, an integer, an attribute, or a call of a dotted name."""
        kind = value.__class__
        if kind in (ast.Name, ast.Attribute):
            return True
        if kind is ast.Call:
            return dotted(value.func) is not None
        if kind is not ast.Constant:
            return False
        constant = value.value
        if constant is None or constant is True or constant is False:
            return True
        if constant.__class__ is int:
            return True
        if constant.__class__ in (str, bytes):
            found = lean.literals(lean.segment(value, self._text_lines()))
            return found is not None and len(found) == 1
        return False

    def _text_lines(self) -> list[str]:
        if self._lines is None:
            self._lines = lean.LINE.findall(self.text)
        return self._lines


def _is_none(value: ast.expr) -> bool:
    return value.__class__ is ast.Constant and value.value is None


_DISPATCH = {
    ast.FunctionDef: TreeNames._function, ast.AsyncFunctionDef: TreeNames._function, ast.Lambda: TreeNames._lambda,
    ast.arguments: TreeNames._arguments, ast.ClassDef: TreeNames._class,
    **{kind: TreeNames._comprehension for kind in _COMPREHENSIONS}, ast.comprehension: TreeNames._generator,
    ast.Global: TreeNames._global, ast.Nonlocal: TreeNames._global, ast.Import: TreeNames._import,
    ast.ImportFrom: TreeNames._import_from, ast.Assign: TreeNames._assign, ast.AnnAssign: TreeNames._ann_assign,
    ast.AugAssign: TreeNames._aug_assign, ast.NamedExpr: TreeNames._named, ast.For: TreeNames._for,
    ast.AsyncFor: TreeNames._for, ast.withitem: TreeNames._with_item, ast.ExceptHandler: TreeNames._handler,
    TRY_STAR: TreeNames._try_star, ast.MatchAs: TreeNames._match_as, ast.MatchStar: TreeNames._match_star,
    ast.MatchMapping: TreeNames._match_mapping, ast.MatchSingleton: TreeNames._match_singleton,
    ast.MatchClass: TreeNames._match_class, ast.JoinedStr: TreeNames._joined,
}
