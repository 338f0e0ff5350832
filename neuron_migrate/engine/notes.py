"""The notes of a program set aside for another platform (NM510, NM513, NM520), decided on Python's tree.

A program the native backend does not run on (Inf1, Inf2, Trn1: `handlers._held`) is left as it is, and each of
its files still reports its platform's notes: the XLA inference path it keeps (NM510), the Inf1 code it holds
(NM513), the trn1 instances it asks for (NM520). The rules that decide them walk LibCST's tree, which costs a
LibCST parse of every such file that `check` reads, for a few findings on imports, calls and strings.

`decide` takes the same decisions on Python's tree (`ast`), which the engine parsed anyway, with the rules' own
helpers and tables, where they are the rules' decisions by construction, and returns None where it cannot be
sure, for the LibCST pass to decide as before:

- Every name a decision resolves (`torch_neuronx` of `torch_neuronx.trace`) is bound in the module scope only, and
  declared `global` or `nonlocal` nowhere: it then stands, in every scope, for what the module's bindings make it
  (`names.import_target`), as `names.Analysis.qualname` finds.
- The file tests for no backend (`engine/paths.py`): no guarded torch_xla import, no comparison with a device or
  backend string or enum, no availability helper, probe or torch test, no torch_xla name used as a test; and no TPU
  text where torch_xla is imported in no module-level statement. Every statement is then on the common path, the
  file is no multi-backend file, and the paths let every note act (`Paths.allows`).
- Each node a note is on stands alone: not in parentheses (LibCST's node would hold them, and its position
  with them), a string literal written in one piece outside an f-string.

`handlers._set_aside` asks for it (`NOTES_ONLY`); `process_python` calls it only for a read (`check`) of a file
without markers or suppression comments, where nothing else than these findings can come out of the pass.
`probed` serves the second pass over a held entry (does it report more than its notes?) with the same walk.
`tests/test_notes.py` holds both to the LibCST pass on every fixture, notebook fixture and generated program.
"""

from __future__ import annotations

import ast
import keyword
import os
import re
from contextvars import ContextVar
from typing import Callable

from neuron_migrate.engine import lean, paths
from neuron_migrate.engine.scan import _CHILD_FIELDS, child_fields, nodes
from neuron_migrate.engine.treenames import TRY_STAR
from neuron_migrate.findings import Finding

STRICT = os.environ.get("NEURON_MIGRATE_STRICT_RULES") == "1"  # the test suite's: failures raise
# Set by handlers._set_aside around the notes pass of a held file: the codes the pass asks for.
NOTES_ONLY: ContextVar[frozenset[str] | None] = ContextVar("notes_only", default=None)

_COMPREHENSION_KINDS = frozenset({ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp})
_SCOPE_KINDS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef}) | _COMPREHENSION_KINDS
_STATEMENT_KINDS = frozenset(c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.stmt))
_LONE_CR = re.compile(r"\r(?!\n)")
# words before a `(` that make it parentheses, not a call's: keywords, and the soft ones (`match (x):`)
_KEYWORDS = frozenset(keyword.kwlist) - {"True", "False", "None"} | {"match", "case", "type"}


def call_parenthesis(head: str) -> bool | None:
    """Whether a `(` after `head` (the code before it on its line, without the white space before the `(`) opens a
    call's arguments: True after a name, a closing bracket or a string (`f(`, `g(x)(`, `d[k](`); False where it
    groups (after an operator, a comma, another bracket, or at the start); None after a keyword, where it groups
    too, but a soft keyword (`match (x):`) may also be a name called."""
    at = len(head)
    while at and (head[at - 1].isalnum() or head[at - 1] == "_"):
        at -= 1
    word = head[at:]
    if (word and word not in _KEYWORDS) or (head and head[-1] in ")]'\""):
        return True
    return None if word else False


class Unsure(Exception):
    """A condition of the decision on Python's tree is not met: the LibCST pass decides the file."""


class _Binding:
    __slots__ = ("kind", "qualname", "fallback")

    def __init__(self, kind: str, qualname: str | None = None, fallback: bool | None = False) -> None:
        self.kind, self.qualname, self.fallback = kind, qualname, fallback


class _Tree:
    """One walk of Python's tree: the module scope's bindings, the names bound elsewhere, the parents, the nodes
    the notes look at, and whether the file may test for a backend."""

    def __init__(self, tree: ast.Module, text: str) -> None:
        self.text = text
        self.module: dict[str, list[_Binding]] = {}
        self.elsewhere: set[str] = set()  # names bound in a function, class, lambda or comprehension
        self.declared: set[str] = set()  # names a `global` or `nonlocal` statement declares
        self.imported: dict[str, set[str]] = {}  # a name -> every dotted path an import binds it to, any scope
        self.xla_names: set[str] = set()  # names an import of torch_xla / torch_neuronx binds, any scope
        self.parents: dict[int, ast.AST] = {}  # a string's id -> the node that holds it
        self.statement: dict[int, ast.stmt] = {}  # a call's, attribute's or string's id -> its statement
        self.calls: list[ast.Call] = []
        self.imports: list[ast.stmt] = []
        self.strings: list[ast.Constant] = []
        self.in_fstring: set[int] = set()
        self.tests: list[ast.expr] = []  # the tests of branches (`if`, `x if c else y`, `a and b`)
        # values that make a flag of the names they are assigned to where they are tests (`Paths._assign_flag`,
        # `HAS = xm is not None`), or of the function that returns them (`Paths._function_kind`)
        self.flagging: list[tuple[ast.expr, tuple[str, ...]]] = []
        self.compares: list[ast.Compare] = []
        self.identifiers: set[str] = set()  # every name and attribute name (availability helpers)
        self.torch_tests: list[ast.AST] = []  # names and attributes spelled as torch's tests end
        self.attributes: list[ast.Attribute] = []
        self.probes = False  # a call of a package probe (`find_spec`)
        self.guarded = False  # a torch_xla import straight in a `try` body
        self.unguarded = False  # a torch_xla import in a module-level statement
        self.helper_import = False  # an import of an availability helper (`from .utils import is_tpu_available`)
        self._xla = paths.XLA_PACKAGES
        self._walk(tree)

    # -- the walk ----------------------------------------------------------------------------------------
    def _walk(self, tree: ast.Module) -> None:
        self.unguarded = any(_legacy_import(s, self._xla) for s in tree.body)  # `Paths`: a top-level statement
        # (node, its parent, where it is: 0 the module scope, 1 a comprehension there (`:=` binds in the module),
        # 2 elsewhere; how many except handlers hold it; its statement; whether it is inside an f-string)
        stack: list[tuple] = [(tree, None, 0, 0, None, False)]
        pop, push = stack.pop, stack.append
        dispatch, statements, AST, table = _DISPATCH, _STATEMENT_KINDS, ast.AST, _CHILD_FIELDS
        while stack:
            node, parent, where, handlers, statement, fstring = pop()
            kind = node.__class__
            if kind in statements:
                statement = node
            method = dispatch.get(kind)
            if method is not None:
                method(self, node, parent, where, handlers, statement, fstring)
            if kind in _SCOPE_KINDS:
                where = (1 if where < 2 else 2) if kind in _COMPREHENSION_KINDS else 2
            elif kind is ast.ExceptHandler:
                handlers += 1
            elif kind is ast.JoinedStr:
                fstring = True
            fields = table.get(kind)  # no expression contexts nor operators: no method takes them
            for name in child_fields(kind) if fields is None else fields:
                value = getattr(node, name, None)
                if type(value) is list:
                    for item in value:
                        if isinstance(item, AST):
                            push((item, node, where, handlers, statement, fstring))
                elif isinstance(value, AST):
                    push((value, node, where, handlers, statement, fstring))

    def _bind(self, name: str, top: bool, binding: _Binding) -> None:
        if top:
            self.module.setdefault(name, []).append(binding)
        else:
            self.elsewhere.add(name)

    def _on_import(self, node, parent, where, handlers, statement, fstring) -> None:
        self.imports.append(node)
        self._import(node, where == 0)

    def _on_def(self, node, parent, where, handlers, statement, fstring) -> None:
        self._bind(node.name, where == 0, _Binding("def"))
        body = [s for s in node.body if not _docstring(s)]
        if body and isinstance(body[-1], ast.Return) and body[-1].value is not None:
            self.flagging.append((body[-1].value, (node.name,)))

    def _on_class(self, node, parent, where, handlers, statement, fstring) -> None:
        self._bind(node.name, where == 0, _Binding("class"))

    def _on_assign(self, node, parent, where, handlers, statement, fstring) -> None:
        fallback = _is_none(node.value) or (handlers > 0 and _stand_in(node.value, self.text))
        for target in node.targets:
            self._target(target, where == 0, fallback)
        self.flagging.append((node.value, tuple(t.id for t in node.targets if t.__class__ is ast.Name)))

    def _on_annassign(self, node, parent, where, handlers, statement, fstring) -> None:
        fallback = handlers > 0 and (node.value is None or _stand_in(node.value, self.text))
        self._target(node.target, where == 0, fallback)
        if node.value is not None:
            self.flagging.append((node.value, (node.target.id,) if node.target.__class__ is ast.Name else ()))

    def _on_augassign(self, node, parent, where, handlers, statement, fstring) -> None:
        if node.target.__class__ is ast.Name:
            self._bind(node.target.id, where == 0, _Binding("assign"))

    def _on_for(self, node, parent, where, handlers, statement, fstring) -> None:
        self._target(node.target, where == 0, False, "for")

    def _on_with(self, node, parent, where, handlers, statement, fstring) -> None:
        for item in node.items:
            if item.optional_vars is not None:
                self._target(item.optional_vars, where == 0, False, "with")

    def _on_declare(self, node, parent, where, handlers, statement, fstring) -> None:
        self.declared.update(node.names)

    def _on_if(self, node, parent, where, handlers, statement, fstring) -> None:
        self.tests.append(node.test)

    def _on_try(self, node, parent, where, handlers, statement, fstring) -> None:
        if any(_legacy_import(s, self._xla) for s in node.body):
            self.guarded = True

    def _on_handler(self, node, parent, where, handlers, statement, fstring) -> None:
        if node.name is not None:
            self._bind(node.name, where == 0, _Binding("except"))

    def _on_call(self, node, parent, where, handlers, statement, fstring) -> None:
        self.calls.append(node)
        self.statement[id(node)] = statement
        if fstring:
            self.in_fstring.add(id(node))
        func = node.func
        last = func.attr if func.__class__ is ast.Attribute else func.id if func.__class__ is ast.Name else None
        if last in paths.PACKAGE_PROBES and _dotted(func):
            self.probes = True

    def _on_constant(self, node, parent, where, handlers, statement, fstring) -> None:
        if node.value.__class__ is str:
            self.strings.append(node)
            self.statement[id(node)] = statement
            self.parents[id(node)] = parent
            if fstring:
                self.in_fstring.add(id(node))

    def _on_name(self, node, parent, where, handlers, statement, fstring) -> None:
        self.identifiers.add(node.id)
        if node.id in _TORCH_TEST_NAMES:
            self.torch_tests.append(node)

    def _on_attribute(self, node, parent, where, handlers, statement, fstring) -> None:
        self.attributes.append(node)
        self.statement[id(node)] = statement
        if fstring:
            self.in_fstring.add(id(node))
        self.identifiers.add(node.attr)
        if node.attr in _TORCH_TEST_NAMES:
            self.torch_tests.append(node)

    def _on_compare(self, node, parent, where, handlers, statement, fstring) -> None:
        self.compares.append(node)

    def _on_ifexp(self, node, parent, where, handlers, statement, fstring) -> None:
        self.tests.append(node.test)

    def _on_boolop(self, node, parent, where, handlers, statement, fstring) -> None:
        self.tests.extend(node.values)

    def _on_named(self, node, parent, where, handlers, statement, fstring) -> None:
        """`(x := ...)` binds in the scope around its comprehensions (names.Collector.visit_NamedExpr)."""
        if node.target.__class__ is ast.Name:
            self._bind(node.target.id, where < 2, _Binding("assign"))

    def _on_arguments(self, node, parent, where, handlers, statement, fstring) -> None:
        for arg in (*node.posonlyargs, *node.args, node.vararg, *node.kwonlyargs, node.kwarg):
            if arg is not None:
                self.elsewhere.add(arg.arg)

    def _on_comprehension(self, node, parent, where, handlers, statement, fstring) -> None:
        self._target(node.target, False, False, "for")

    def _on_match_as(self, node, parent, where, handlers, statement, fstring) -> None:
        if node.name is not None:
            self._bind(node.name, where == 0, _Binding("assign"))

    def _target(self, target: ast.AST, top: bool, fallback: bool | None, kind: str = "assign") -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, top, _Binding(kind, fallback=fallback))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._target(element, top, fallback, kind)
        elif isinstance(target, ast.Starred):
            self._target(target.value, top, fallback, kind)

    def _import(self, node: ast.stmt, top: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                name, qual = (alias.asname, alias.name) if alias.asname else ((alias.name.split(".")[0],) * 2)
                if _helper(alias.name.rpartition(".")[2]):
                    self.helper_import = True
                self._imported(name, qual, top)
            return
        module = None if node.level or node.module is None else node.module
        for alias in node.names:
            if alias.name == "*":
                return
            if _helper(alias.name.rpartition(".")[2]):
                self.helper_import = True
            self._imported(alias.asname or alias.name, None if module is None else f"{module}.{alias.name}", top)

    def _imported(self, name: str, qual: str | None, top: bool) -> None:
        self._bind(name, top, _Binding("import", qual))
        if qual is not None:
            self.imported.setdefault(name, set()).add(qual)
            if qual.split(".")[0] in self._xla:
                self.xla_names.add(name)

    # -- names ---------------------------------------------------------------------------------------------
    def qualname(self, expr: ast.AST) -> str | None:
        """What `expr` stands for through the module's imports (names.Analysis.qualname, where its first name is
        bound in the module scope only); raises Unsure where it may be bound elsewhere."""
        parts = _dotted(expr)
        if not parts:
            return None
        head = parts[0]
        if head in self.elsewhere or head in self.declared:
            raise Unsure(f"{head} is bound outside the module scope")
        bindings = self.module.get(head)
        if not bindings:
            return None
        imports = {b.qualname for b in bindings if b.kind == "import"}
        if len(imports) != 1:
            return None
        if any(b.kind != "import" and b.fallback is None for b in bindings):
            raise Unsure(f"{head} is bound to a string in an except handler")
        if any(b.kind != "import" and not b.fallback for b in bindings):
            return None
        base = next(iter(imports))
        return None if base is None else ".".join([base, *parts[1:]])

    def resolves_to(self, expr: ast.AST, targets) -> str | None:
        """`qualname(expr)` where it may be one of `targets` (an import of the chain's first name, in some scope,
        makes one of them); None where it cannot be, whatever the scopes (then no scope needs to be sure)."""
        parts = _dotted(expr)
        if not parts:
            return None
        rest = parts[1:]
        if not any(".".join([q, *rest]) in targets for q in self.imported.get(parts[0], ())):
            return None
        return self.qualname(expr)

    # -- the paths ---------------------------------------------------------------------------------------------
    def tests_nothing(self) -> bool:
        """Whether no statement of the file can be on another path than the common one, in a file that is no
        multi-backend file (see the module docstring): every test `engine/paths.py` knows is ruled out."""
        if self.guarded or self.probes or self.helper_import:
            return False
        if any(_helper(name) for name in self.identifiers) or any(self._torch_test(n) for n in self.torch_tests):
            return False
        for compare in self.compares:
            if any(self._valued(operand) for operand in (compare.left, *compare.comparators)):
                return False
        flags = set(self.xla_names)  # what a test of XLA may read: torch_xla's names, and the flags made of them
        while True:
            more = {name for value, names in self.flagging if self._xla_test(value, flags) for name in names} - flags
            if not more:
                break
            flags |= more
        if any(self._xla_test(test, flags) for test in self.tests) or any(
                self._xla_test(o, flags) for compare in self.compares for o in (compare.left, *compare.comparators)):
            return False
        return self.unguarded or paths._TPU_TEXT.search(self.text) is None

    def _torch_test(self, node: ast.AST) -> bool:
        """`torch.cuda.is_available` and the other torch tests, through any import of the chain's first name."""
        parts = _dotted(node)
        if not parts or parts[-1] not in _TORCH_TEST_NAMES:
            return False
        return any(".".join([q, *parts[1:]]) in paths._TORCH_TESTS for q in self.imported.get(parts[0], ()))

    @staticmethod
    def _valued(node: ast.AST) -> bool:
        """A device or backend string (`"cuda"`, `"cpu:0"`), a collection holding one, or an enum member of a
        backend (`DistributedType.XLA`): what `Paths._value_kind` tells a kind by."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and paths._kind_of_string(node.value) is not None
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(_Tree._valued(e) for e in node.elts)
        return isinstance(node, ast.Attribute) and node.attr in paths._ENUM_KINDS

    def _xla_test(self, test: ast.AST, flags: set[str]) -> bool:
        """A test whose leaf is one of `flags` (a name a torch_xla / torch_neuronx import binds, or a flag made of
        one), or a call of one (`if xm:`, `HAS = trace(...)`, `xm is None`): `Paths._name_kind` takes it for an
        XLA test."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._xla_test(test.operand, flags)
        if isinstance(test, ast.BoolOp):
            return any(self._xla_test(v, flags) for v in test.values)
        if isinstance(test, ast.Call):
            test = test.func
        if isinstance(test, ast.Compare):
            return any(self._xla_test(o, flags) for o in (test.left, *test.comparators))
        return isinstance(test, ast.Name) and test.id in flags

    # -- places ------------------------------------------------------------------------------------------
    def alone(self, node: ast.AST) -> None:
        """Raises Unsure where `node` may be in parentheses: LibCST's node would hold them, and be placed with
        them. A node that opens its line must open its statement; else the text before it on its line must not
        end with `(`, unless that `(` opens a call's arguments (`call_parenthesis`). (A statement is never in
        parentheses.)"""
        if isinstance(node, ast.stmt):
            return
        before = self.line_text(node.lineno)[:self.column(node.lineno, node.col_offset)]
        if before.strip():
            head = before.rstrip()
            if head.endswith("(") and call_parenthesis(head[:-1].rstrip(" \t\f")) is not True:
                raise Unsure("in parentheses")  # else the first argument of a call (`print(torch.neuron...)`)
            return
        statement = self.statement.get(id(node))
        if statement is None or (statement.lineno, statement.col_offset) != (node.lineno, node.col_offset):
            raise Unsure("opens its line inside a statement")

    def _lines(self) -> list[str]:
        lines = self.__dict__.get("_text_lines")
        if lines is None:
            lines = self._text_lines = lean.LINE.findall(self.text)
        return lines

    def string_lines(self, tree: ast.Module) -> set[int]:
        """The lines (from 1) a string literal over several lines holds after its first: where a line that looks
        like a comment may be a string's."""
        found = self.__dict__.get("_string_lines")
        if found is None:
            found = self._string_lines = {
                n for node in nodes(tree) if node.__class__ in (ast.Constant, ast.JoinedStr)
                and node.end_lineno is not None and node.end_lineno > node.lineno
                for n in range(node.lineno + 1, node.end_lineno + 1)}
        return found

    def line_text(self, lineno: int) -> str:
        return self._lines()[lineno - 1].rstrip("\r\n")

    def column(self, lineno: int, offset: int) -> int:
        """The character column of a UTF-8 offset in a line (`ast` counts bytes, findings characters)."""
        return lean.column(self._lines()[lineno - 1], offset)

    def segment(self, node: ast.AST) -> str:
        """The node's source text, as LibCST's code for it (the file's own line ends)."""
        return lean.segment(node, self._lines())

    def short(self, node: ast.AST, limit: int = 60) -> str:
        """`patterns.short`: the node's text on one line, cut at `limit` characters."""
        return one_line(self.segment(node), limit)


def one_line(text: str, limit: int = 60) -> str:
    """`patterns.short` of a node whose code is `text`: on one line, cut at `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _dotted(expr: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        parts.reverse()
        return parts
    return None


def _helper(name: str) -> bool:
    """An availability helper's name (`is_torch_xla_available`, `_XLA_AVAILABLE`: `paths._helper_kind`)."""
    return paths._helper_kind(name) is not None


def _legacy_import(node: ast.stmt, packages: tuple[str, ...]) -> bool:
    """`paths._is_legacy_import`: an import of torch_xla or torch_neuronx."""
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in packages for a in node.names)
    if isinstance(node, ast.ImportFrom) and node.module is not None and not node.level:
        return node.module.split(".")[0] in packages
    return False


def _docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, (str, bytes))


def _is_none(value: ast.AST) -> bool:
    return isinstance(value, ast.Constant) and value.value is None


def _stand_in(value: ast.AST, text: str) -> bool | None:
    """`names._is_stand_in` on Python's tree: a name (`None`, `False` are names to LibCST), one string literal, an
    integer literal, a dotted name, or a call of one."""
    if isinstance(value, (ast.Name, ast.Attribute)):
        return True
    if isinstance(value, ast.Call):
        return _dotted(value.func) is not None
    if isinstance(value, ast.Constant):
        if value.value is None or isinstance(value.value, bool):
            return True
        if isinstance(value.value, int):
            return True
        if isinstance(value.value, (str, bytes)):
            return None  # one literal (a stand-in) or several (not): asked only where the binding is read
    return False


_TORCH_TEST_NAMES = frozenset(q.rpartition(".")[2] for q in paths._TORCH_TESTS)


# -- the notes ---------------------------------------------------------------------------------------------

class _Notes:
    """The notes rules' decisions on one walked tree: one method per rule (`_RULES`), each reporting what the rule
    would, with the fields of its message."""

    def __init__(self, path: str, tree: _Tree, settings) -> None:
        from neuron_migrate.rules import release

        self.path, self.tree, self.settings = path, tree, settings
        self.maintained = release.xla_inference_maintained(settings)
        self.found: list[tuple[str, ast.AST, dict, tuple[int, int] | None]] = []

    def report(self, code: str, node: ast.AST, offset: tuple[int, int] | None = None, **fields) -> None:
        self.tree.alone(node)
        self.found.append((code, node, fields, offset))

    # NeuronxTrace: a trace call of the maintained XLA inference path
    def trace(self) -> None:
        from neuron_migrate.rules.inference import TRACE, TRACE_NOTE, maintained_fields

        if not self.maintained:
            return
        for call in self.tree.calls:
            if self.tree.resolves_to(call.func, (TRACE,)) == TRACE:
                self.report("NM510", call, call=self.tree.short(call), what=TRACE_NOTE,
                            **maintained_fields(self.settings))

    # NeuronLibrary: optimum-neuron's inference classes
    def library(self) -> None:
        from neuron_migrate.rules import inference

        if not self.maintained:
            return
        for node in self.tree.imports:
            if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
                continue
            names = [a.name for a in node.names]
            served = inference.library_import(node.module, None if "*" in names else names)[0]
            if served:
                self.report("NM510", node, **inference.optimum_note(served),
                            **inference.maintained_fields(self.settings))

    # NxdInference: NxD Core's inference tracing and NxD Inference
    def nxd(self) -> None:
        from neuron_migrate.rules.inference import NXD_INFERENCE, NXD_TRACE, maintained_fields, nxd_trace_import

        if not self.maintained:
            return
        fields = maintained_fields(self.settings)
        nxdi: list[ast.stmt] = []
        for node in self.tree.imports:
            if isinstance(node, ast.ImportFrom):
                if node.level or node.module is None:
                    continue
                module = node.module
                if module == NXD_INFERENCE or module.startswith(NXD_INFERENCE + "."):
                    nxdi.append(node)
                    continue
                found = nxd_trace_import(module, [a.name for a in node.names])
                if found is not None:
                    self.report("NM510", node, call=found[0], what=f"uses {found[1]}", **fields)
            elif any(a.name == NXD_INFERENCE or a.name.startswith(NXD_INFERENCE + ".") for a in node.names):
                nxdi.append(node)
        for call in self.tree.calls:
            if not isinstance(call.func, ast.Attribute):
                continue  # a name imported from the module was reported at its import
            what = NXD_TRACE.get(self.tree.resolves_to(call.func, NXD_TRACE) or "")
            if what is not None:
                self.report("NM510", call, call=self.tree.short(call), what=f"uses {what}", **fields)
        if nxdi:
            first = min(nxdi, key=_place)
            n = len(nxdi)
            if n > 1:
                name = NXD_INFERENCE
            elif isinstance(first, ast.ImportFrom):
                name = first.module
            else:
                name = next(a.name for a in first.names if a.name.split(".")[0] == NXD_INFERENCE)
            self.report("NM510", first, call=name,
                        what="uses NxD Inference" + (f" ({n} imports in this file)" if n > 1 else ""), **fields)

    # Inferentia1: once per file, where Inf1 code first shows
    def inferentia1(self) -> None:
        from neuron_migrate.engine.facts import inf1_names
        from neuron_migrate.rules.inference import IMPORT_VERB

        apis, modules = inf1_names()
        candidates: list[tuple[ast.AST, str, str]] = []
        for node in self.tree.imports:
            if isinstance(node, ast.Import):
                alias = next((a for a in node.names if a.name.split(".")[0] in modules), None)
                if alias is not None:
                    candidates.append((node, f"import {alias.name}", IMPORT_VERB))
            elif not node.level and node.module is not None and node.module.split(".")[0] in modules:
                candidates.append((node, f"from {node.module} import ...", IMPORT_VERB))
        for call in self.tree.calls:
            if self.tree.resolves_to(call.func, apis) in apis:
                candidates.append((call, self.tree.short(call), "is the torch-neuron API of"))
        if candidates and inferentia1(self.tree):
            node, subject, verb = min(candidates, key=lambda c: _place(c[0]))
            self.report("NM513", node, subject=subject, verb=verb)

    # InstanceType: a string that asks for a trn1 instance
    def instance_type(self) -> None:
        from neuron_migrate.files.envfiles import TRN1
        from neuron_migrate.rules.inference import _requests, _test_file

        if _test_file(self.path):
            return
        tree = self.tree
        for node in tree.strings:
            value = node.value
            if "trn1" not in value:
                continue  # nor in any literal it is made of
            parent = tree.parents.get(id(node))
            if isinstance(parent, ast.JoinedStr):
                continue  # text of an f-string: no string literal to LibCST
            if id(node) in tree.in_fstring:
                raise Unsure("a string inside an f-string's braces")
            raw_text = tree.segment(node)
            pieces = lean.literals(raw_text)
            if pieces is None or len(pieces) != 1:
                raise Unsure("a string literal written in parts")  # LibCST decides on each part
            match = TRN1.search(value)
            if match is None or not _requests(value, match):
                continue
            if isinstance(parent, ast.Expr) or (isinstance(parent, ast.Dict) and any(k is node for k in parent.keys)):
                continue  # a docstring or a bare string; a table's key
            raw = TRN1.search(raw_text)
            below = raw is not None and "\n" in raw_text[:raw.start()]
            self.report("NM520", node, offset=raw.span() if below else None, text=match.group(0))


def _place(node: ast.AST) -> tuple[int, int, int, int]:
    """Where LibCST's walk meets a node: by its start, an outer node before the inner ones that start with it."""
    return node.lineno, node.col_offset, -node.end_lineno, -node.end_col_offset


_RULES = {"NeuronxTrace": "trace", "NeuronLibrary": "library", "NxdInference": "nxd", "Inferentia1": "inferentia1",
          "InstanceType": "instance_type"}


def walk(tree: ast.Module, text: str, made: dict | None = None) -> _Tree:
    """One walk of Python's tree of `text`; kept in `made` (what the passes over one file share: python.Shared)."""
    walked = made.get("walk") if made is not None else None
    if walked is None:
        walked = _Tree(tree, text)
        if made is not None:
            made["walk"] = walked
    return walked


def decide(path: str, text: str, tree: ast.Module, rules: list, settings, codes: frozenset[str],
           made: dict | None = None) -> list[Finding] | None:
    """The findings of the notes pass of a held file (`codes` of NM510, NM513, NM520) from the `rules` the
    pre-filters left, or None where the LibCST pass must decide (see the module docstring). `made`: see `walk`."""
    if any(r.__name__ not in _RULES for r in rules) or _LONE_CR.search(text):
        return None
    if not rules:
        return []

    def run() -> list[Finding] | None:
        walked = walk(tree, text, made)
        if not walked.tests_nothing():
            return None
        notes = _Notes(path, walked, settings)
        for rule in rules:
            getattr(notes, _RULES[rule.__name__])()
        return _findings(path, walked, notes.found, settings, codes)

    return sure(run)


def sure(decide: Callable[[], list[Finding] | None]) -> list[Finding] | None:
    """`decide()`: findings decided on Python's tree, or None where it is unsure (`Unsure`) or fails, for the
    LibCST pass to decide as it did before these shortcuts (the test suite's strict setting raises a failure)."""
    try:
        return decide()
    except Unsure:
        return None
    except Exception:
        if STRICT:
            raise  # the test suite's setting: a failure here is a bug to see
        return None


def inferentia1(tree: _Tree) -> bool:
    """`facts.inferentia1` on Python's tree: the file imports torch-neuron or reads an Inf1 API."""
    from neuron_migrate.engine.facts import inf1_names

    apis, modules = inf1_names()
    if "neuron" not in tree.text:
        return False
    if any(q.split(".")[0] in modules or q in apis for quals in tree.imported.values() for q in quals):
        return True
    last = {api.rpartition(".")[2] for api in apis}
    if not any(name in tree.text for name in last):
        return False
    for node in tree.attributes:
        if node.attr in last:
            parts = _dotted(node)
            if parts and any(".".join([q, *parts[1:]]) in apis for q in tree.imported.get(parts[0], ())):
                return True
    return False


def _findings(path: str, tree: _Tree, found: list, settings, codes: frozenset[str],
              marked: Callable[[str, ast.AST], bool] | None = None) -> list[Finding]:
    """The decisions as findings, through the one policy; `marked(code, node)`: whether a marker of the code stands
    above the node's statement (the file holds markers)."""
    from neuron_migrate.engine.python import _within
    from neuron_migrate.policy import Policy, _never

    policy = Policy(settings, path, rewrite=True)
    out = []
    for code, node, fields, offset in found:
        if code not in codes:
            continue
        decision = policy.decide(code, None, None, fields, migrating=lambda: False,
                                 marked=(lambda: marked(code, node)) if marked is not None else _never)
        if decision is None:
            continue
        line, col = node.lineno, tree.column(node.lineno, node.col_offset) + 1
        end = node.end_lineno, tree.column(node.end_lineno, node.end_col_offset) + 1
        if offset:
            line, col, end = _within(tree.segment(node), line, col, offset)
        out.append(Finding(path, line, col, code, decision.message, decision.fixable, end_line=end[0],
                           end_col=end[1], held_back=decision.held_back or None))
    out.sort(key=lambda f: f.sort_key())
    return out


def probed(rules: list, probe: frozenset[str], tree: ast.Module, text: str, settings, path: str,
           markers: bool, made: dict | None = None) -> tuple[list, str | None]:
    """For a probe (`handlers._would_change`: does the file report anything but `probe`'s codes?): the rules it must
    run, and a code outside `probe` that the LibCST pass certainly reports (the probe's answer), or None.

    The caller has ruled out the NM199 step (the tree pre-filter ran) and suppression comments (one the notes used
    would otherwise be reported unused, NM901). Where no statement can be on an XLA branch of a multi-backend file
    (`tests_nothing`: a finding there is held for the branch's NM111 marker):

    - a rule whose every code is in `probe` only says what the probe does not ask about, where its codes are
      check-only (no marker, no edit for the tidy-up to follow): it is left out;
    - a variable of the XLA stack's table named in a string literal (`os.environ["NEURON_CC_FLAGS"]`) is
      reported by NM403-NM405 where they run (`_environment`), unless the file holds markers (one on the statement
      stands for the finding)."""
    from neuron_migrate import catalogue

    quiet = [r for r in rules if set(r.codes) <= probe and all(catalogue.rule(c).check_only for c in r.codes)]
    environment = _environment_rule(rules, settings, path, probe) if not markers else None
    if not quiet and environment is None:
        return rules, None
    try:
        found = walk(tree, text, made)
        if not found.tests_nothing():
            return rules, None
        sure = _environment(found) if environment is not None else None
    except Exception:
        if STRICT:
            raise
        return rules, None
    return [r for r in rules if r not in quiet], sure


def _environment_rule(rules: list, settings, path: str, probe: frozenset[str]):
    from neuron_migrate.rules.environment import EnvironmentVariable

    codes = EnvironmentVariable.codes
    if EnvironmentVariable in rules and all(settings.enabled(c, path) and c not in probe for c in codes):
        return EnvironmentVariable
    return None


def _environment(found: _Tree) -> str | None:
    """A code of NM403-NM405 that `EnvironmentVariable.visit_SimpleString` reports, where a string literal of the
    file certainly makes it report one: a literal in one piece, outside an f-string, that spells a variable of the
    table (so that the lean parse keeps its code: the name is a needle) and is not a bfloat16 switch's name alone
    (a read of one is reported at the end or not at all). The rule's `_setting` is not asked for a subscript with a
    slice (`os.environ[a:b] = ...`, where it would fail)."""
    from neuron_migrate.rules.environment import code_for, env_pattern, env_table

    pattern, table = env_pattern(), env_table()
    lines = None
    for string in found.strings:
        match = pattern.search(string.value)
        if match is None or id(string) in found.in_fstring:
            continue
        name = match.group(1)
        if table[name].get("bf16") and string.value == name:
            continue
        statement = found.statement[id(string)]
        if isinstance(statement, ast.Assign) and any(isinstance(n, ast.Slice) for t in statement.targets
                                                     for n in ast.walk(t)):
            continue
        lines = lines if lines is not None else lean.LINE.findall(found.text)
        source = lean.segment(string, lines)
        pieces = lean.literals(source)
        if pieces is None or len(pieces) != 1 or name not in source:
            continue
        return code_for(name, None, False)
    return None


_DISPATCH = {
    ast.Import: _Tree._on_import, ast.ImportFrom: _Tree._on_import, ast.FunctionDef: _Tree._on_def,
    ast.AsyncFunctionDef: _Tree._on_def, ast.ClassDef: _Tree._on_class, ast.Assign: _Tree._on_assign,
    ast.AnnAssign: _Tree._on_annassign, ast.AugAssign: _Tree._on_augassign, ast.For: _Tree._on_for,
    ast.AsyncFor: _Tree._on_for, ast.With: _Tree._on_with, ast.AsyncWith: _Tree._on_with,
    ast.Global: _Tree._on_declare, ast.Nonlocal: _Tree._on_declare, ast.If: _Tree._on_if, ast.Try: _Tree._on_try,
    TRY_STAR: _Tree._on_try, ast.ExceptHandler: _Tree._on_handler, ast.Call: _Tree._on_call,
    ast.Constant: _Tree._on_constant, ast.Name: _Tree._on_name, ast.Attribute: _Tree._on_attribute,
    ast.Compare: _Tree._on_compare, ast.IfExp: _Tree._on_ifexp, ast.BoolOp: _Tree._on_boolop,
    ast.NamedExpr: _Tree._on_named, ast.arguments: _Tree._on_arguments, ast.comprehension: _Tree._on_comprehension,
    ast.MatchAs: _Tree._on_match_as,
}
