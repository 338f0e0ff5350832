"""Line and column of nodes: the same numbers as LibCST's PositionProvider, for the statements that need them.

The provider runs position-tracking code generation over the whole module, about four times slower than plain
code generation. Findings usually sit in a few statements of a long file, so `positions_of` generates only the
statements that hold the requested nodes, each started at the line where Python's own parser (`ast`, already
run on the file by the engine) puts it:

    pair LibCST statements with ast statements (same pre-order) -> first line and indentation of each statement
    -> position-tracking codegen of that statement alone -> its text must be the source text at that place

Whenever something does not line up (the two trees, or the generated text and the source), or where LibCST
does not give the text back line for line, the whole module is computed instead, as `positions` does. With
LibCST unpatched (a release outside the tested range, see door.py) that is LibCST's own PositionProvider.

What is located is the state of one file: it is kept by the file's session (`remember`), or by a `Positions`
object of the caller's.
"""

from __future__ import annotations

import ast
import re
from typing import Iterable, Mapping

import libcst as cst
from libcst._position import CodePosition, CodeRange
from libcst.metadata import MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from neuron_migrate.syntax import door
from neuron_migrate.syntax.codegen import NOTHING

# The line ends of Python's tokenizer and of LibCST's position counting (str.splitlines also splits at
# \v \f \x1c-\x1e \x85 \u2028 \u2029, which are not line ends in Python).
LINE_END = re.compile(r"\r\n?|\n")

# A line holding only a backslash continuation, before a statement: LibCST drops it, so its positions further
# on are those of a text one line shorter than the source (only the whole-module pass gives those numbers).
DROPPED_LINE = re.compile(r"(?:\A|\n|\r)[ \t\f]*\\(?:\r\n?|\n)")

_SMALL: dict[type, tuple[type, ...]] = {
    cst.Expr: (ast.Expr,), cst.Assign: (ast.Assign,), cst.AnnAssign: (ast.AnnAssign,),
    cst.AugAssign: (ast.AugAssign,), cst.Return: (ast.Return,), cst.Raise: (ast.Raise,), cst.Pass: (ast.Pass,),
    cst.Break: (ast.Break,), cst.Continue: (ast.Continue,), cst.Del: (ast.Delete,), cst.Import: (ast.Import,),
    cst.ImportFrom: (ast.ImportFrom,), cst.Global: (ast.Global,), cst.Nonlocal: (ast.Nonlocal,),
    cst.Assert: (ast.Assert,),
}
_COMPOUND: dict[type, tuple[type, ...]] = {
    cst.If: (ast.If,), cst.While: (ast.While,), cst.For: (ast.For, ast.AsyncFor),
    cst.With: (ast.With, ast.AsyncWith), cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.ClassDef: (ast.ClassDef,), cst.Try: (ast.Try,), cst.Match: (ast.Match,),
}
if hasattr(ast, "TryStar"):
    _COMPOUND[cst.TryStar] = (ast.TryStar,)
if hasattr(ast, "TypeAlias"):
    _SMALL[cst.TypeAlias] = (ast.TypeAlias,)


class _Sink:
    """Stands in for the provider: the codegen state writes positions into `_computed`."""

    def __init__(self, computed: dict[cst.CSTNode, CodeRange] | None = None) -> None:
        self._computed: dict[cst.CSTNode, CodeRange] = {} if computed is None else computed


class _SelectiveState(PositionProvidingCodegenState):
    """Positions of the wanted nodes and of what lies inside them (a node's syntactic position may be hoisted
    from a child's), nothing else: most nodes of a generated statement are not asked about."""

    def select(self, wanted: set[cst.CSTNode] | frozenset[cst.CSTNode]) -> _SelectiveState:
        self.wanted = wanted
        self.inside = 0  # wanted nodes open around the current one
        return self

    def _update_position(self, value: str) -> None:
        if "\n" in value or "\r" in value:
            super()._update_position(value)
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if self.inside or node in self.wanted:
            self.inside += 1
            self._stack.append(CodePosition(self.line, self.column))
        else:
            self._stack.append(None)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        if start is None:
            return
        self.inside -= 1
        if node not in self.provider._computed:
            self.provider._computed[node] = CodeRange(start, CodePosition(self.line, self.column))

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        if self.inside:
            return super().record_syntactic_position(node, start_node=start_node, end_node=end_node)
        return NOTHING


class _Mismatch(Exception):
    """The LibCST and ast statement trees do not pair up."""


def positions(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    """Every node of the module, in one code-generation pass (what LibCST's PositionProvider gives)."""
    if not door.fast():
        return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    sink = _Sink()
    module._codegen(PositionProvidingCodegenState(default_indent=module.default_indent,
                                                  default_newline=module.default_newline, provider=sink))
    return sink._computed


class _Located:
    """One module with its source text and ast tree; statements are located and generated on demand."""

    def __init__(self, module: cst.Module, text: str, tree: ast.Module) -> None:
        self.module, self.text, self.tree = module, text, tree
        self.starts: dict[cst.CSTNode, tuple[int, tuple[str, ...], bool]] | None = None  # line, indent, is elif
        self.line_offsets: list[int] | None = None
        self.computed: dict[cst.CSTNode, CodeRange] = {}

    def positions(self, wanted: Iterable[tuple[cst.CSTNode, cst.CSTNode | None]]) -> Mapping | None:
        """Positions holding every wanted node, or None where the fast way cannot vouch for one."""
        wanted = list(wanted)
        nodes = frozenset(node for node, _ in wanted)
        for node, statement in wanted:
            if node in self.computed:
                continue
            if statement is None or statement in self.computed:  # a statement inside one generated before
                return None
            found = self.statement_positions(statement, nodes)
            if found is None:
                return None
            self.computed.update(found)
            if node not in self.computed:
                return None
        return self.computed

    def statement_positions(self, statement: cst.CSTNode, wanted: frozenset[cst.CSTNode] | None = None
                            ) -> dict[cst.CSTNode, CodeRange] | None:
        """The positions of one statement's nodes (only the `wanted` ones and what they hold, when given),
        generated alone; None where they cannot be vouched for."""
        if self.starts is None:
            self.starts = {}
            try:
                if DROPPED_LINE.search(self.text) is None:
                    self._block(self.module.body, self.tree.body, ())
            except (_Mismatch, RecursionError):
                self.starts = {}  # no statement is found
                return None
        start = self.starts.get(statement)
        if start is None:
            return None
        line, indent, is_elif = start
        computed: dict[cst.CSTNode, CodeRange] = {}
        state_type = PositionProvidingCodegenState if wanted is None else _SelectiveState
        state = state_type(default_indent=self.module.default_indent, default_newline=self.module.default_newline,
                           provider=_Sink(computed), indent_tokens=list(indent), line=line)
        if wanted is not None:
            state.select(wanted)
        if is_elif:
            statement._codegen(state, is_elif=True)
        else:
            statement._codegen(state)
        return computed if self._matches_source(line, state.tokens) else None

    def _matches_source(self, line: int, tokens: list[str]) -> bool:
        """The generated text is the source text from the start of `line` (the statement is where we think)."""
        if self.line_offsets is None:
            self.line_offsets = [0] + [m.end() for m in LINE_END.finditer(self.text)]
        if not 1 <= line <= len(self.line_offsets) or not tokens:
            return False
        offset = self.line_offsets[line - 1]
        generated = "".join(tokens)
        if self.text.startswith(generated, offset):
            return True
        # the last line of a file without a final newline: LibCST drops the newline after generating it
        last = tokens[-1]
        return (not self.module.has_trailing_newline and LINE_END.fullmatch(last) is not None
                and offset + len(generated) - len(last) == len(self.text)
                and self.text.endswith(generated[:-len(last)]))

    # -- pairing the two statement trees ---------------------------------------------------------------------
    def _block(self, body: Iterable[cst.BaseStatement], nodes: list[ast.stmt], indent: tuple[str, ...]) -> None:
        assert self.starts is not None
        i = 0
        for statement in body:
            if i >= len(nodes):
                raise _Mismatch
            if type(statement) is cst.SimpleStatementLine:
                smalls = statement.body
                if i + len(smalls) > len(nodes):
                    raise _Mismatch
                for small, node in zip(smalls, nodes[i:i + len(smalls)]):
                    if type(node) not in _SMALL.get(type(small), ()):
                        raise _Mismatch
                self.starts[statement] = (nodes[i].lineno - len(statement.leading_lines), indent, False)
                i += len(smalls)
            else:
                self._compound(statement, nodes[i], indent, False)
                i += 1
        if i != len(nodes):
            raise _Mismatch

    def _compound(self, statement: cst.CSTNode, node: ast.stmt, indent: tuple[str, ...], is_elif: bool) -> None:
        if type(node) not in _COMPOUND.get(type(statement), ()):
            raise _Mismatch
        first = node.lineno
        decorators = getattr(statement, "decorators", ())
        if decorators:
            if len(decorators) != len(node.decorator_list):
                raise _Mismatch
            first = node.decorator_list[0].lineno - len(decorators[0].leading_lines)
        self.starts[statement] = (first - len(statement.leading_lines), indent, is_elif)
        if not isinstance(statement, cst.Match):
            self._suite(statement.body, node.body, indent)
        if isinstance(statement, (cst.Try, cst.TryStar)):
            if len(statement.handlers) != len(node.handlers):
                raise _Mismatch
            for handler, ast_handler in zip(statement.handlers, node.handlers):
                self._suite(handler.body, ast_handler.body, indent)
            if statement.finalbody is not None:
                self._suite(statement.finalbody.body, node.finalbody, indent)
        elif isinstance(statement, cst.Match):
            if len(statement.cases) != len(node.cases):
                raise _Mismatch
            case_indent = indent + (self.module.default_indent if statement.indent is None else statement.indent,)
            for case, ast_case in zip(statement.cases, node.cases):
                self._suite(case.body, ast_case.body, case_indent)
        orelse = getattr(statement, "orelse", None)
        if isinstance(orelse, cst.If):
            if len(node.orelse) != 1:
                raise _Mismatch
            self._compound(orelse, node.orelse[0], indent, True)
        elif orelse is not None:
            self._suite(orelse.body, node.orelse, indent)

    def _suite(self, suite: cst.BaseSuite, nodes: list[ast.stmt], indent: tuple[str, ...]) -> None:
        """An indented block's statements; a one-line suite (`if x: a; b`) holds no statement to find."""
        if isinstance(suite, cst.IndentedBlock):
            block_indent = self.module.default_indent if suite.indent is None else suite.indent
            self._block(suite.body, nodes, indent + (block_indent,))


class Positions:
    """The positions of one file's nodes: the statements of the module last remembered, located on demand, and
    the whole module's positions once they were needed."""

    def __init__(self) -> None:
        self.source: _Located | None = None
        self.whole: tuple[cst.Module, Mapping[cst.CSTNode, CodeRange]] | None = None

    def remember(self, module: cst.Module, text: str, tree: ast.Module) -> None:
        """The source text and ast tree `module` was parsed from (the engine parses both)."""
        self.source = _Located(module, text, tree)

    def positions(self, module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
        if self.whole is None or self.whole[0] is not module:
            self.whole = (module, positions(module))
        return self.whole[1]

    def positions_of(self, module: cst.Module,
                     wanted: Iterable[tuple[cst.CSTNode, cst.CSTNode | None]]) -> Mapping[cst.CSTNode, CodeRange]:
        """Positions holding at least the wanted nodes, each given with its innermost statement (a
        SimpleStatementLine or a compound statement; None when there is none): the module must be the one
        remembered, else the whole module is computed."""
        if self.whole is not None and self.whole[0] is module:
            return self.whole[1]
        source = self.source
        found = source.positions(wanted) if source is not None and source.module is module and door.fast() else None
        return self.positions(module) if found is None else found


def _file_positions() -> Positions:
    state = door.current()
    if state is None:
        return Positions()  # outside a session nothing is kept
    if state.located is None:
        state.located = Positions()
    return state.located


def remember(module: cst.Module, text: str, tree: ast.Module) -> None:
    """`Positions.remember` for the file of the open session (outside one, nothing to keep it for)."""
    _file_positions().remember(module, text, tree)


def positions_of(module: cst.Module,
                 wanted: Iterable[tuple[cst.CSTNode, cst.CSTNode | None]]) -> Mapping[cst.CSTNode, CodeRange]:
    """`Positions.positions_of` for the file of the open session."""
    return _file_positions().positions_of(module, wanted)
