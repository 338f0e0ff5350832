"""Code paths on Python's tree: engine/paths.py's `Paths`, built from `ast` and the names of engine/treenames.py.

The rules' reports are gated by the code paths (`Paths.allows`): a finding acts only where its node's path lets its
family act. A decision taken on Python's tree needs the same paths, so `TreePaths` walks Python's tree as `Paths`
walks LibCST's: the same statements, arms of `x if c else y` and operands of `a and b` / `a or b` on the same paths,
the same tests, flags, availability functions and guarded imports, and from them the same file-wide answers
(`xla_optional`, `multi_backend`, `two_devices`, `neuron_library`). See engine/paths.py for what each path means;
what does not depend on the tree's node types (`allows`, what a test's branches are, the names that test for a
backend, the file-wide answers) is `paths.PathLogic`, which both classes share.

Where the two trees differ, the walk follows LibCST's:

- `a and b and c` is one node with three operands in Python's tree, two nested ones in LibCST's (`(a and b) and c`):
  the walk splits it the same way, into stand-in nodes (`_Chain`) that hold the operands they cover.
- A one-line block (`if x: a; b`) is a suite of small statements to LibCST, not a block of statements: its torch_xla
  imports make no import unguarded or conditional, a one-line function body is not read for what the function
  tests, and a one-line `try` body holds no guarded import. The walk tells it by the text before its first
  statement (`:` ends it).
- `except*` handlers are not walked (LibCST's `TryStar` is no `Try` to `Paths`); neither are a `match` statement's
  subject, a function's parameters or a class's bases.
- `neuron_library` and the neuron switch read the code of whole statements and blocks, with the comments LibCST
  gives them. Where a comment spells a use of the neuron device, which statement owns it is LibCST's call:
  `exact` is False there, where a block's header goes on over a line continuation (`if x: \\`) and where
  `TreeNames.exact` is; a caller decides on LibCST's tree instead.

The markers of multi-backend files (`Paths.hold`, `mark_branches`) are not here: a file whose decisions they take
goes to LibCST. `tests/test_treepaths.py` holds `TreePaths` to `Paths` on every fixture and example, the standard
library sample, the ecosystem and generated modules: node by node and fact by fact.
"""

from __future__ import annotations

import ast
import functools
import re

from neuron_migrate.engine import lean
from neuron_migrate.engine.facts import NEURON_DEVICE_USE, uses_neuron_device
from neuron_migrate.engine.names import Scope
from neuron_migrate.engine.paths import (_ENUM_KINDS, _GUARD_EXCEPTIONS, _TORCH_TESTS, COMMON, FALLBACK, OTHER_PATHS,
                                         PACKAGE_PROBES, TPU, XLA, XLA_PACKAGES, PathLogic, _kind_of_string)
from neuron_migrate.engine.treenames import TRY_STAR, TreeNames, child_fields, dotted

_TERMINATORS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_COMPOUND = (ast.If, ast.Try, TRY_STAR, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Match,
             ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CHILDREN: dict[type, tuple[str, ...]] = {}  # child_fields, by node type
# a block header continued onto the next line (`if x: \`): its one-line block is not told by the text before it
_COLON_CONTINUED = re.compile(r":[ \t\f]*\\\r?\n")
_POSITIVE = (ast.Eq, ast.Is, ast.In)
_NEGATIVE = (ast.NotEq, ast.IsNot, ast.NotIn)


class _Chain(ast.BoolOp):
    """LibCST's left operand of `a and b and c`: the operands before the last, as one node (`(a and b)`)."""

    _fields = ("values",)


class TreePaths(PathLogic):
    """The paths of one file's Python tree (see the module docstring and engine/paths.py)."""

    def __init__(self, names: TreeNames, program: bool) -> None:
        self.names, self.program = names, program
        self.resolver = names
        self.text = names.text
        self._lines = lean.LINE.findall(self.text)
        self._scopes = {s.node: s for s in names.scopes if s.kind in ("function", "class", "module")}
        self._path: dict[ast.AST, tuple[str, ast.AST | None]] = {}
        self.detections: set[ast.AST] = set()
        self.evaluated_on: dict[ast.AST, str] = {}
        self.flags: dict[tuple[int, str], str] = {}
        self.functions: dict[ast.AST, str] = {}
        self.guarded_imports: set[ast.AST] = set()
        self.kinds: set[str] = set()
        self.unguarded = False
        self.conditional = False
        self.own_switch = False
        self._chains: dict[ast.BoolOp, _Chain] = {}
        self._parents: dict[ast.AST, ast.AST] | None = None
        self.exact = names.exact and not (self._neuron_device and _device_in_comment(self._lines)) \
            and _COLON_CONTINUED.search(self.text) is None
        tree = names.tree
        self._walk_block(tree.body, COMMON, None, names.module_scope, toplevel=True)
        self._answer(self.text)

    @staticmethod
    def _imported(alias: ast.alias) -> str:
        return alias.name

    @staticmethod
    def _from_import(node) -> bool:
        return node.__class__ is ast.ImportFrom

    @staticmethod
    def _relative_import(node) -> bool:
        return node.__class__ is ast.ImportFrom and bool(node.level)

    # -- queries ---------------------------------------------------------------------------------------------
    def parent(self, node: ast.AST) -> ast.AST | None:
        """The node that holds `node` (a `_Chain` for an operand it covers); None for the module."""
        if self._parents is None:
            self._parents = parents = {}
            for node_ in ast.walk(self.names.tree):
                for child in ast.iter_child_nodes(node_):
                    parents[child] = node_
            for boolop, chain in self._chains.items():
                for value in chain.values:
                    parents[value] = chain
                parents[chain] = boolop
        return self._parents.get(node)

    def where(self, node: ast.AST) -> tuple[str, ast.AST | None]:
        current = node
        while current is not None:
            found = self._path.get(current)
            if found is not None:
                return found
            current = self.parent(current)
        return COMMON, None

    def path_of(self, node: ast.AST) -> str:
        return self.where(node)[0]

    def in_detection(self, node: ast.AST) -> bool:
        current = node
        while current is not None:
            if current in self.detections:
                return True
            if isinstance(current, ast.stmt):
                return False
            current = self.parent(current)
        return False

    def kept_detection(self, node: ast.AST, scope: Scope) -> bool:
        if node.__class__ is not ast.Name or not self.in_detection(node):
            return False
        owner = self.names.lookup(node.id, scope)
        return owner is not None and any(b.kind == "import" and b.node in self.guarded_imports
                                         for b in owner.bindings[node.id])

    def _evaluated_path(self, node: ast.AST) -> str:
        current = node
        while current is not None and not isinstance(current, ast.stmt):
            if current in self.evaluated_on:
                return self.evaluated_on[current]
            current = self.parent(current)
        return self.path_of(node)

    def _split(self, node: ast.BoolOp) -> tuple[ast.expr, ast.expr]:
        """(the left operand, the right one) of a boolean operation as LibCST nests it; a left operand of several
        operands is a `_Chain`, made once per node."""
        values = node.values
        if len(values) == 2:
            return values[0], values[1]
        left = self._chains.get(node)
        if left is None:
            first, last = values[0], values[-2]
            left = self._chains[node] = _Chain(op=node.op, values=values[:-1], lineno=first.lineno,
                                               col_offset=first.col_offset, end_lineno=last.end_lineno,
                                               end_col_offset=last.end_col_offset)
            if self._parents is not None:
                self._parents.update({value: left for value in left.values})
                self._parents[left] = node
        return left, values[-1]

    # -- the walk --------------------------------------------------------------------------------------------
    def _set(self, node: ast.AST, path: str, branch) -> None:
        self._path[node] = (path, branch)

    def _walk_block(self, body: list[ast.stmt], path: str, branch, scope: Scope, toplevel: bool = False) -> None:
        for statement in body:
            self._set(statement, path, branch)
            path, branch = self._statement(statement, path, branch, scope, toplevel)

    def _walk_suite(self, body: list[ast.stmt], path: str, branch, scope: Scope) -> None:
        if not self._one_line(body):
            self._walk_block(body, path, branch, scope)
            return
        for small in body:  # `if x: a; b`: small statements, each on the suite's path
            self._set(small, path, branch)
            self._assign_flag(small, scope)
            self._expressions(small, path, branch, scope)

    def _one_line(self, body: list[ast.stmt]) -> bool:
        """The block is written on its header's line (`if x: a; b`): LibCST's SimpleStatementSuite."""
        if not body:
            return False
        first = body[0]
        line = self._lines[first.lineno - 1]
        return line[:lean.column(line, first.col_offset)].rstrip().endswith(":")

    def _statement(self, node: ast.stmt, path: str, branch, scope: Scope, toplevel: bool):
        kind = node.__class__
        if kind not in _COMPOUND:
            if _is_legacy_import(node) and toplevel and path == COMMON:
                self.unguarded = True
            elif _is_legacy_import(node) and path in OTHER_PATHS:
                self.conditional = True
            self._assign_flag(node, scope)
            self._expressions(node, path, branch, scope)
            return path, branch
        if kind is ast.If:
            return self._if(node, path, branch, scope)
        if kind is ast.Try:
            self._try(node, path, branch, scope)
            return path, branch
        if kind in _FUNCTIONS:
            inner = self._scopes.get(node, scope)
            for decorator in node.decorator_list:
                self._expressions(decorator, path, branch, scope)
            self._walk_suite(node.body, path, branch, inner)
            found = self._function_kind(node, inner)
            if found is not None:
                self.functions[node] = found
            return path, branch
        if kind is ast.ClassDef:
            self._walk_suite(node.body, path, branch, self._scopes.get(node, scope))
            return path, branch
        if kind is ast.While:
            self._expressions(node.test, path, branch, scope)
        elif kind in (ast.For, ast.AsyncFor):
            self._expressions(node.iter, path, branch, scope)
        elif kind in (ast.With, ast.AsyncWith):
            for item in node.items:
                self._expressions(item, path, branch, scope)
        if kind is ast.Match:
            for case in node.cases:
                self._walk_suite(case.body, path, branch, scope)
            return path, branch
        self._walk_suite(node.body, path, branch, scope)  # a TryStar's handlers and `finally:` are not walked
        if getattr(node, "orelse", None):
            self._walk_suite(node.orelse, path, branch, scope)
        return path, branch

    def _if(self, node: ast.If, path: str, branch, scope: Scope):
        body, orelse = self._branch(node.test, path, scope)
        self._condition(node.test, path, branch, body, orelse, scope)
        body_branch = node if body == XLA and path != XLA else branch
        else_branch = node if orelse == XLA and path != XLA else branch
        self._walk_suite(node.body, body, body_branch, scope)
        if self._elif(node):
            inner = node.orelse[0]
            self._set(inner, orelse, else_branch)
            self._if(inner, orelse, else_branch, scope)
        elif node.orelse:
            self._walk_suite(node.orelse, orelse, else_branch, scope)
        if not node.orelse and _terminates(node.body) and orelse != path and not self._value_test(node.test):
            if orelse == XLA and path != XLA:
                return orelse, node
            return orelse, branch
        return path, branch

    def _elif(self, node: ast.If) -> bool:
        """The `if`'s `else` is an `elif` (an `if` inside `else:` is one of the `else` block's statements)."""
        if len(node.orelse) != 1 or node.orelse[0].__class__ is not ast.If:
            return False
        inner = node.orelse[0]
        line = self._lines[inner.lineno - 1]
        return line[lean.column(line, inner.col_offset):].startswith("elif")

    def _try(self, node: ast.Try, path: str, branch, scope: Scope) -> None:
        guarded = any(_handler_guards(h) for h in node.handlers)
        # a one-line `try:` holds small statements, no line of them: no guarded import (LibCST's suite)
        lines = [] if self._one_line(node.body) else self._line_groups(node.body)
        xla_from = next((i for i, line in enumerate(lines) if any(_is_legacy_import(s) for s in line)), None)
        if not guarded or xla_from is None:
            self._walk_suite(node.body, path, branch, scope)
            for h in node.handlers:
                self._walk_suite(h.body, path, branch, scope)
        else:
            self.kinds.add(XLA)
            inner_branch = node if path != XLA else branch
            for i, line in enumerate(lines):
                p, b = (XLA, inner_branch) if i >= xla_from else (path, branch)
                for statement in line:
                    self._set(statement, p, b)
                    if _is_legacy_import(statement):
                        self.guarded_imports.add(statement)
                    elif i > xla_from and statement.__class__ not in _COMPOUND:
                        self._guard_flag(statement, scope, True)
                    self._statement(statement, p, b, scope, False)
            for h in node.handlers:
                hp = FALLBACK if _handler_guards(h) else path
                self._set(h, hp, None if hp == FALLBACK else branch)
                if hp == FALLBACK and not self._one_line(h.body):
                    for statement in h.body:
                        if statement.__class__ not in _COMPOUND:
                            self._guard_flag(statement, scope, False)
                self._walk_suite(h.body, hp, None if hp == FALLBACK else branch, scope)
            if node.orelse:
                self._walk_suite(node.orelse, XLA, inner_branch, scope)
        if node.orelse and xla_from is None:
            self._walk_suite(node.orelse, path, branch, scope)
        if node.finalbody:
            self._walk_suite(node.finalbody, path, branch, scope)

    def _line_groups(self, body: list[ast.stmt]) -> list[list[ast.stmt]]:
        """The statements of a block by line (`a; b` is one line of two small statements: LibCST's
        SimpleStatementLine); a compound statement is a line of its own."""
        groups: list[list[ast.stmt]] = []
        for i, statement in enumerate(body):
            if i and body[i - 1].end_lineno == statement.lineno:
                groups[-1].append(statement)
            else:
                groups.append([statement])
        return groups

    def _expressions(self, node: ast.AST, path: str, branch, scope: Scope) -> None:
        stack = [(node, path, branch)]
        while stack:
            current, p, b = stack.pop()
            kind = current.__class__
            if kind is ast.IfExp:
                body, orelse = self._branch(current.test, p, scope)
                self._condition(current.test, p, b, body, orelse, scope)
                for arm, q in ((current.body, body), (current.orelse, orelse)):
                    qb = current if q == XLA and p != XLA else b
                    self._set(arm, q, qb)
                    stack.append((arm, q, qb))
                continue
            if kind is ast.Call and p not in OTHER_PATHS:
                found = self._call(current, scope)
                if found is not None and found[0] in OTHER_PATHS:
                    self.kinds.add(found[0])
                    self._set(current, found[0], None)
                    p, b = found[0], None
            if kind is ast.BoolOp or kind is _Chain:
                left, right_node = self._split(current)
                body, orelse = self._branch(left, p, scope)
                right = body if current.op.__class__ is ast.And else orelse
                if right != p:
                    if right in (XLA, FALLBACK):
                        self.detections.add(left)
                    else:
                        self._set(left, right, None)
                rb = current if right == XLA and p != XLA else b
                self._set(right_node, right, rb)
                stack.append((left, self._path.get(left, (p, b))[0], b))
                stack.append((right_node, right, rb))
                continue
            fields = _CHILDREN.get(kind)
            if fields is None:
                fields = _CHILDREN[kind] = child_fields(kind)
            for field in fields:
                value = getattr(current, field)
                if value.__class__ is list:
                    stack.extend((item, p, b) for item in value if item is not None)
                elif value is not None:
                    stack.append((value, p, b))

    # -- tests -----------------------------------------------------------------------------------------------
    def _test(self, test: ast.expr, scope: Scope) -> tuple[str, bool] | None:
        kind = test.__class__
        if kind is ast.UnaryOp and test.op.__class__ is ast.Not:
            found = self._test(test.operand, scope)
            return (found[0], not found[1]) if found else None
        if kind is ast.BoolOp or kind is _Chain:
            left_node, right_node = self._split(test)
            left, right = self._test(left_node, scope), self._test(right_node, scope)
            if test.op.__class__ is ast.And:
                positive = [f for f in (left, right) if f is not None and f[1]]
                if positive:
                    return positive[0]
            return left if left is not None and left == right else None
        if kind is ast.Compare:
            return self._comparison(test, scope)
        if kind is ast.Call:
            return self._call(test, scope)
        if kind is ast.Name or kind is ast.Attribute:
            found = self._name_kind(test, scope)
            return (found, True) if found else None
        return None

    def _value_test(self, test: ast.expr) -> bool:
        while test.__class__ is ast.UnaryOp:
            test = test.operand
        if test.__class__ is ast.BoolOp or test.__class__ is _Chain:
            left, right = self._split(test)
            return self._value_test(left) or self._value_test(right)
        return test.__class__ is ast.Compare and any(
            self._value_kind(o) is not None for o in (test.left, *test.comparators))

    def _comparison(self, test: ast.Compare, scope: Scope) -> tuple[str, bool] | None:
        if len(test.ops) != 1:
            return None
        op, right, left = test.ops[0], test.comparators[0], test.left
        positive = isinstance(op, _POSITIVE)
        if not (positive or isinstance(op, _NEGATIVE)):
            if isinstance(op, (ast.Gt, ast.GtE)) and left.__class__ is ast.Call:
                return self._call(left, scope)
            return None
        if isinstance(op, (ast.Is, ast.IsNot)) and right.__class__ is ast.Constant and right.value is None:
            kind = self._name_kind(left, scope) if left.__class__ in (ast.Name, ast.Attribute) else \
                self._probe(left) if left.__class__ is ast.Call else None
            return (kind, not positive) if kind else None
        for a in (left, right):
            kind = self._value_kind(a)
            if kind is not None:
                return kind, positive
        return None

    def _value_kind(self, node: ast.expr) -> str | None:
        value = self._string(node)
        if value is not None:
            return _kind_of_string(value)
        if node.__class__ in (ast.Tuple, ast.List, ast.Set):
            kinds = {self._value_kind(e.value if e.__class__ is ast.Starred else e) for e in node.elts}
            return kinds.pop() if len(kinds) == 1 else None
        if node.__class__ is ast.Attribute and node.value.__class__ in (ast.Name, ast.Attribute):
            kind = _ENUM_KINDS.get(node.attr)
            if kind is not None and self._relative(dotted(node.value)):
                self.own_switch = True
            return kind
        return None

    def _string(self, node: ast.expr) -> str | None:
        """`paths._string`: the value of one string literal (implicitly joined ones are no SimpleString)."""
        if node.__class__ is not ast.Constant or node.value.__class__ is not str:
            return None
        found = lean.literals(lean.segment(node, self._lines))
        return node.value if found is not None and len(found) == 1 else None

    def _call(self, call: ast.Call, scope: Scope) -> tuple[str, bool] | None:
        probe = self._probe(call)
        if probe is not None:
            return probe, True
        qual = self.names.qualname(call.func, scope)
        if qual in _TORCH_TESTS:
            return _TORCH_TESTS[qual], True
        if call.func.__class__ in (ast.Name, ast.Attribute):
            kind = self._name_kind(call.func, scope, called=True, qual=qual)
            if kind == XLA and any(k.arg == "check_is_tpu" and k.value.__class__ is ast.Constant
                                   and k.value.value is True for k in call.keywords):
                kind = TPU
            if kind is not None:
                return kind, True
        return None

    def _probe(self, call: ast.Call) -> str | None:
        parts = dotted(call.func)
        arguments = [*call.args, *call.keywords]
        if parts and parts[-1] in PACKAGE_PROBES and arguments:
            first = min(arguments, key=lambda a: (a.lineno, a.col_offset))  # LibCST's first argument
            value = self._string(first.value if first.__class__ in (ast.keyword, ast.Starred) else first)
            if value is not None and re.match(r"torch[_-](?:xla|neuronx)\b", value):
                return XLA
        return None

    # -- flags -----------------------------------------------------------------------------------------------
    def _guard_flag(self, small: ast.stmt, scope: Scope, value: bool) -> None:
        if small.__class__ is ast.Assign and small.value.__class__ is ast.Constant and (
                small.value.value is value or (not value and small.value.value is None)):
            for t in small.targets:
                if t.__class__ is ast.Name:
                    self.flags[self._owner_key(t.id, scope)] = XLA

    def _assign_flag(self, small: ast.stmt, scope: Scope) -> None:
        if small.__class__ is ast.Assign:
            value, targets = small.value, small.targets
        elif small.__class__ is ast.AnnAssign and small.value is not None:
            value, targets = small.value, [small.target]
        else:
            return
        found = self._test(value, scope)
        if found is None or not found[1]:
            return
        if found[0] == XLA:
            self.detections.add(value)
        for t in targets:
            if t.__class__ is ast.Name:
                self.flags[self._owner_key(t.id, scope)] = found[0]

    def _function_kind(self, node: ast.FunctionDef, inner: Scope) -> str | None:
        body = [] if self._one_line(node.body) else node.body
        groups = [g for g in self._line_groups(body) if not self._docstring(g)]
        if len(groups) == 1 and groups[0][0].__class__ is ast.Try:
            guard = groups[0][0]
            if not self._one_line(guard.body) and any(_is_legacy_import(s) for s in guard.body):
                returns = [self._returned(g) for g in self._line_groups(guard.body)]
                returns += [self._returned(g) for h in guard.handlers
                            for g in self._line_groups([] if self._one_line(h.body) else h.body)]
                if any(r is not None and r.__class__ is ast.Constant and r.value is True for r in returns):
                    return XLA
        if groups and groups[-1][0].__class__ not in _COMPOUND:
            value = self._returned(groups[-1])
            if value is not None:
                found = self._test(value, inner)
                if found is not None and found[1]:
                    return found[0]
        return None

    def _returned(self, group: list[ast.stmt]) -> ast.expr | None:
        """`paths._returned` of a logical line: the value its last small statement returns."""
        last = group[-1]
        return last.value if last.__class__ is ast.Return and group[0].__class__ not in _COMPOUND else None

    def _docstring(self, group: list[ast.stmt]) -> bool:
        """`paths._docstring` of a logical line: one expression that is a string literal, or several joined (an
        f-string alone is none)."""
        if len(group) != 1 or group[0].__class__ is not ast.Expr:
            return False
        value = group[0].value
        if value.__class__ is ast.Constant:
            return value.value.__class__ in (str, bytes)
        if value.__class__ is ast.JoinedStr:
            found = lean.literals(lean.segment(value, self._lines))
            return found is not None and len(found) > 1
        return False

    # -- the file's other answers -------------------------------------------------------------------------------
    @functools.cached_property
    def _neuron_device(self) -> bool:
        """The file spells a use of the neuron device somewhere (`facts.NEURON_DEVICE_USE`): asked once."""
        return uses_neuron_device(self.text)

    @functools.cached_property
    def neuron_library(self) -> bool:
        if not self._neuron_device or self._imports_xla or self.program:
            return False
        body = self.names.tree.body
        return not any(NEURON_DEVICE_USE.search(self._code(body, i)) for i, s in enumerate(body)
                       if s.__class__ not in (*_FUNCTIONS, ast.ClassDef))

    def _code(self, body: list[ast.stmt], i: int, end: int | None = None) -> str:
        """The text of statements `i` to `end` (one past the last; `i + 1` when None) of a block, from the line after
        the statement before them (their comments and blank lines) to the end of the last one's line; a one-line
        block's from its first statement on (its header is not its code)."""
        last = body[(i + 1 if end is None else end) - 1]
        tail = "".join(self._lines[body[i].lineno:last.end_lineno])
        if i == 0 and self._one_line(body):
            line = self._lines[body[0].lineno - 1]
            return line[lean.column(line, body[0].col_offset):] + tail
        start = body[i - 1].end_lineno + 1 if i else first_line(body[i])
        start = min(start, first_line(body[i]))
        return "".join(self._lines[start - 1:body[i].lineno]) + tail

    def _neuron_switch(self) -> bool:
        if self._imports_xla or not self._neuron_device:
            return False
        for block, node, i in self._ifs():
            arms = [node.body]
            last = node
            while self._elif(last):
                last = last.orelse[0]
                arms.append(last.body)
            if last.orelse:
                arms.append(last.orelse)
            if not node.orelse:
                if block is None or not _terminates(node.body):
                    continue  # the rest of the module is no branch (LibCST: its block must be an indented one)
                arms.append(block[i + 1:])
            found = [bool(arm) and NEURON_DEVICE_USE.search(self._code(arm, 0, len(arm))) is not None for arm in arms]
            if any(found) and not all(found):
                return True
        return False

    def _ifs(self):
        """(the block holding it, None at module level; the `if`; its index there) for every `if` that is no
        `elif`, in every block of the file."""
        stack: list[tuple[list[ast.stmt], bool]] = [(self.names.tree.body, True)]
        while stack:
            body, top = stack.pop()
            for i, statement in enumerate(body):
                if statement.__class__ is ast.If:
                    yield (None if top else body), statement, i
                    last = statement
                    stack.append((last.body, False))
                    while self._elif(last):
                        last = last.orelse[0]
                        stack.append((last.body, False))
                    if last.orelse:
                        stack.append((last.orelse, False))
                    continue
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(statement, field, None)
                    if inner:
                        stack.append((inner, False))
                for handler in getattr(statement, "handlers", ()):
                    stack.append((handler.body, False))
                for case in getattr(statement, "cases", ()):
                    stack.append((case.body, False))

    def _outside_branches(self, node: ast.AST) -> bool:
        child, current = node, self.parent(node)
        while current is not None and current.__class__ not in (*_FUNCTIONS, ast.Lambda):
            if current.__class__ in (ast.If, ast.Try, TRY_STAR, ast.Match):
                return False
            if current.__class__ in (ast.For, ast.AsyncFor, ast.While) and child in current.orelse:
                return False  # a loop's `else:` block (LibCST's Else)
            child, current = current, self.parent(current)
        return current is not None


def first_line(statement: ast.AST) -> int:
    """The first line of a statement, its decorators' included (a node without decorators: its own line)."""
    decorators = getattr(statement, "decorator_list", ())
    return min([statement.lineno, *(d.lineno for d in decorators)])


def _device_in_comment(lines: list[str]) -> bool:
    """A comment may spell a use of the neuron device (a `#` before the match on its line), in a file that spells
    one somewhere."""
    for line in lines:
        if "#" in line:
            for match in NEURON_DEVICE_USE.finditer(line):
                if "#" in line[:match.start()]:
                    return True
    return False


def _terminates(body: list[ast.stmt]) -> bool:
    return bool(body) and body[-1].__class__ in _TERMINATORS


def _handler_guards(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if handler.type.__class__ is ast.Tuple else [handler.type]
    names = [".".join(parts) if (parts := dotted(t.value if t.__class__ is ast.Starred else t)) else None
             for t in types]
    return any(n is not None and n.split(".")[-1] in _GUARD_EXCEPTIONS for n in names)


def _is_legacy_import(statement: ast.stmt) -> bool:
    if statement.__class__ is ast.Import:
        return any(a.name.split(".")[0] in XLA_PACKAGES for a in statement.names)
    if statement.__class__ is ast.ImportFrom and statement.module is not None and not statement.level:
        return statement.module.split(".")[0] in XLA_PACKAGES
    return False
