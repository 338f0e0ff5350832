"""`check`'s lean parse: LibCST reads only the functions and classes that can hold a finding.

On real Neuron code almost every file passes the byte pre-filter (it mentions torch_xla somewhere), yet most of
its functions have nothing to do with XLA. Before LibCST parses a file that `check` only reads, Python's own tree
(parsed anyway: findings are placed by its lines) decides which `def` and `class` statements are *cold*, and those
are replaced, in the text LibCST parses, by a one-line stand-in that binds the same name (`def name(): pass`,
`class Name: pass`) followed by blank lines, so every other statement keeps its line and column.

The statements of a file are units: each top-level statement, and each method of a class (at any depth of
classes); a class with a hot method is kept, its cold methods still replaced. A unit is hot, and kept, when

- its text holds a needle: a trigger of a rule that runs on the file (for a rule whose byte pre-filter asks for
  names, `Rule.pattern` a `NamesPattern`: one of those names as a whole word, since each of its reports reads one
  spelled in the unit, or a name that a unit spelling it binds), a word a rule's decisions rest on far from its
  triggers (`Rule.words`, as a whole word: `jit`, a Neuron-only attribute; `Rule.project_words`, what the
  project gives: an attribute a base class in another module compiles), `torch_xla`, a word naming a backend
  (`xla`, `neuron`, `tpu`, `cuda`, `mps`, ... the words `engine/paths.py` classifies tests by; case-insensitive,
  as a word part), a suppression comment or a marker;
- or it is a function or class that imports anything (the file's facts read every scope's imports), or it
  declares `global` / `nonlocal` (it would change what names mean elsewhere);
- or it names something a hot unit binds (a module-level name, an attribute it assigns, a function), or a
  class that is hot for its own code or a method's (a model built from a part that holds a finding);
- or a hot unit reads it by its bare name (`xmp.spawn(_mp_fn)`, `torch.compile(step)`, `train(device)`: rules
  read the definition a call names, and follow values into its parameters), or passes it to a call as an
  attribute (`torch_xla.compile(self.step_fn)`: a method of that name).

Only `def` and `class` statements are ever replaced; everything else is kept as written. What the file's facts
count over the whole file is completed for the code left out: the quote style (facts.quote) counts the string
literals of each replaced definition, read from Python's tree and the text (`_quote_tally`); a definition whose
f-strings hold literals inside their braces is kept, for LibCST to count. Whether a name is bound anywhere in the
file (a name a fix brings in must be free: `dist`, the device variable) reads the whole file's scopes, from
Python's tree (`FileContext._name_taken`). `rewrite` parses the whole file (it
renders it). `tests/test_lean.py` holds the findings of the lean parse equal to the whole parse's
on every fixture, 150 standard-library modules and torch_xla's sources as plain code;
`NEURON_MIGRATE_LEAN=0` turns it off.
"""

from __future__ import annotations

import ast
import bisect
import functools
import os
import re
from typing import NamedTuple

from neuron_migrate.engine.scan import _CHILD_FIELDS, child_fields, nodes
from neuron_migrate.suppress import MAY_SUPPRESS_TEXT

ENABLED = os.environ.get("NEURON_MIGRATE_LEAN", "1") != "0"

# The backend words engine/paths.py reads tests by (strings, enum members, availability helpers, torch.<x> tests),
# and `neuron` (markers, suppressions, the native device): a unit holding one is hot.
# (`cpu` and `gloo` are left out: a test for the CPU fallback changes no fact of the file, only the path of the
# code it guards.)
_BACKENDS = "xla|neuron|tpu|cuda|gpu|nccl|mps|xpu|npu|hpu|mlu|musa|sdaa"
BACKEND_WORDS = re.compile(rf"(?<![A-Za-z])(?:{_BACKENDS})(?![A-Za-z])", re.I)
_BACKEND_LOWER = re.compile(_BACKENDS)  # for lower-cased text (`_Needles` checks the letters around a match apart)
LINE = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+\Z")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_SCOPE_CHANGERS = (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal)
_DECLARATIONS = (ast.Global, ast.Nonlocal)
# The lean parse is tried where definitions without a needle span at least this share of the file's lines.
MIN_SHARE = 0.25


class Lean(NamedTuple):
    """The text LibCST parses, and how many string literals of the code it leaves out open with `'` and with `"`
    (facts.quote counts the file's literals; the stand-ins hold none)."""

    text: str
    quotes: tuple[int, int]


class _Unit:
    __slots__ = ("node", "first", "last", "names", "refs", "binds", "defines", "hot", "parent", "children", "steps")

    def __init__(self, node: ast.stmt, first: int, last: int, parent: _Unit | None) -> None:
        self.node, self.first, self.last, self.parent = node, first, last, parent
        self.names: set[str] = set()  # every identifier it spells (names, attributes, parameters, keywords)
        self.refs: set[str] = set()  # the bare names it reads (a definition they name is looked up)
        self.binds: set[str] = set()  # what it binds for other units: module-level names, attributes it assigns
        self.defines = node.name if isinstance(node, _DEFS) else None
        self.hot = False
        self.children: list[_Unit] = []
        self.steps: list[_Step] = []  # its statements, for `_attribute_binds`


def lean_text(text: str, tree: ast.Module, needles: tuple[str, ...], words: tuple[str, ...] = ()) -> Lean | None:
    """`text` with its cold functions and classes replaced by stand-ins; None where nothing is replaced. `tree`,
    Python's tree of `text`, is changed in place to stand for the lean text where positions.py reads it (the
    replaced statements' first lines, no decorators), which saves parsing the lean text again."""
    if not ENABLED:
        return None
    lines = LINE.findall(text)
    found = _Needles(text, lines, needles, words)
    if _candidate_lines(tree.body, found) < MIN_SHARE * len(lines):
        return None  # too little to gain for the walks below (most definitions hold a needle themselves)
    units: list[_Unit] = []
    for node in tree.body:
        _units(node, None, units, module_level=True)
    if not any(isinstance(u.node, _DEFS) for u in units):
        return None
    hot_binds: set[str] = set()
    hot_refs: set[str] = set()
    for unit in units:
        if _has_needle(unit, lines, found):
            _heat(unit, hot_binds, hot_refs, found)
    changed = True
    while changed:
        changed = False
        for unit in units:
            if unit.hot:
                continue
            if unit.names & hot_binds:
                _heat(unit, hot_binds, hot_refs, found)
                changed = True
            elif unit.defines is not None and unit.defines in hot_refs:
                _heat(unit, hot_binds, hot_refs, found, named=True)
                changed = True
    cold = []
    quotes = [0, 0]
    for unit in units:
        if not unit.hot and isinstance(unit.node, _DEFS) and (unit.parent is None or unit.parent.hot) \
                and _replaceable(unit, lines):
            tally = _quote_tally(unit.node, lines)
            if tally is not None:  # else kept: LibCST counts the literals its f-strings hold
                cold.append(unit)
                quotes[0] += tally[0]
                quotes[1] += tally[1]
    if not cold:
        return None
    out = list(lines)
    for unit in cold:
        indent = lines[unit.first - 1][:unit.node.col_offset]
        end = _line_end(lines[unit.last - 1])
        if isinstance(unit.node, ast.ClassDef):
            head = f"class {unit.node.name}: pass"
        else:
            head = f"{'async ' if isinstance(unit.node, ast.AsyncFunctionDef) else ''}def {unit.node.name}(): pass"
        out[unit.first - 1] = indent + head + end
        for i in range(unit.first, unit.last):
            out[i] = _line_end(lines[i])
        # Python's tree of the lean text, as far as positions.py pairs it with LibCST's: the stand-in's one-line
        # body holds no statement to locate, and it has no decorators
        node = unit.node
        node.decorator_list = []
        node.lineno = node.end_lineno = unit.first
    return Lean("".join(out), (quotes[0], quotes[1]))


# A string literal: its prefix, then its quotes and body (each character matched one way only; a search over text
# that opens no literal fails at once at each place).
_STRING = re.compile(r"""([A-Za-z]{0,2})('\'\'(?:[^'\\]|\\.|'(?!''))*'\'\'|"\"\"(?:[^"\\]|\\.|"(?!""))*"\"\"|"""
                     r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", re.S)
_BETWEEN = re.compile(r"(?:[ \t\f\r\n\\]|#[^\r\n]*)*")  # what may stand between two literals joined implicitly


def _quote_tally(node: ast.AST, lines: list[str]) -> tuple[int, int] | None:
    """How many string literals `node` holds that open with `'` and with `"`, counted as facts.quote counts
    LibCST's: each literal of an implicit concatenation, not f-strings, not `\"\"\"` (docstrings have it whatever
    the file's style). None where the braces of an f-string hold a literal (LibCST counts those)."""
    single = double = 0
    stack = [node]
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind is ast.JoinedStr:
            if _literal_in_braces(current):
                return None
        elif kind is not ast.Constant or not isinstance(current.value, (str, bytes)):
            stack.extend(ast.iter_child_nodes(current))
            continue
        pieces = literals(segment(current, lines))
        if pieces is None:
            return None
        for prefix, quote in pieces:
            if "f" not in prefix and "F" not in prefix and quote != '"""':
                if quote[0] == "'":
                    single += 1
                else:
                    double += 1
    return single, double


def _literal_in_braces(joined: ast.JoinedStr) -> bool:
    """Whether a replacement field of the f-string, or of its format specification (`f"{x:{width}}"`), holds a
    string literal (`f"{d['key']}"`)."""
    for part in joined.values:
        if type(part) is not ast.FormattedValue:
            continue
        if any(type(n) is ast.JoinedStr or (type(n) is ast.Constant and isinstance(n.value, (str, bytes)))
               for n in nodes(part.value)):
            return True
        if type(part.format_spec) is ast.JoinedStr and _literal_in_braces(part.format_spec):
            return True
    return False


def segment(node: ast.expr, lines: list[str]) -> str:
    """The source text of an expression (ast's columns count UTF-8 bytes)."""
    return between(lines, (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset))


def between(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """The source text from `start` to `end`, each a line (from 1) and a UTF-8 offset in it, as ast gives them."""
    first, last = start[0] - 1, end[0] - 1
    a, b = column(lines[first], start[1]), column(lines[last], end[1])
    if first == last:
        return lines[first][a:b]
    return lines[first][a:] + "".join(lines[first + 1:last]) + lines[last][:b]


def column(line: str, offset: int) -> int:
    """The character column of a UTF-8 offset in a line (`ast` counts bytes)."""
    return offset if line.isascii() else len(line.encode("utf-8")[:offset].decode("utf-8", "replace"))


def literals(text: str) -> list[tuple[str, str]] | None:
    """(prefix, opening quote) of each literal of `text`, string literals joined implicitly; None where the text
    reads otherwise."""
    out = []
    at = 0
    while True:
        literal = _STRING.match(text, at)
        if literal is None:
            return None
        body = literal.group(2)
        out.append((literal.group(1), body[:3] if body[:3] in ('"""', "'''") else body[0]))
        at = _BETWEEN.match(text, literal.end()).end()
        if at >= len(text):
            return out


def _candidate_lines(body: list[ast.stmt], found: _Needles) -> int:
    """How many lines the definitions without a needle of their own span: what the lean parse could replace at
    most (found from the text alone, before any walk)."""
    count = 0
    for node in body:
        if isinstance(node, _DEFS):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            last = node.end_lineno or node.lineno
            if not found.within(first, last):
                count += last - first + 1
            elif isinstance(node, ast.ClassDef):
                count += _candidate_lines(node.body, found)
    return count


def _units(node: ast.stmt, parent: _Unit | None, out: list[_Unit], module_level: bool) -> _Unit:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    unit = _Unit(node, first, node.end_lineno or node.lineno, parent)
    out.append(unit)
    methods = []
    if isinstance(node, ast.ClassDef):
        for child in node.body:
            if isinstance(child, _DEFS):
                unit.children.append(_units(child, unit, out, module_level=False))
                methods.append(child)
    skip = set(map(id, methods))
    module_names = module_level and not isinstance(node, _DEFS)  # not locals, not class attributes
    names, binds, refs = unit.names, unit.binds, unit.refs
    if unit.defines is not None:
        names.add(unit.defines)
        if module_level and not isinstance(node, ast.ClassDef):
            binds.add(unit.defines)  # a helper others call (an availability test)
    # One walk of the unit's own code (its methods are units of their own) finds what it spells and reads, and
    # what each of its statements does with names in its header (the code outside the statement's blocks and
    # decorators): `_attribute_binds` follows values through those records when the unit turns hot.
    steps = unit.steps
    stack: list[tuple[ast.AST, _Step | None]] = [(node, None)]
    table = _CHILD_FIELDS  # no expression contexts nor operators: the walk reads a node's `ctx` from the node
    while stack:
        current, step = stack.pop()
        kind = type(current)
        fields = table.get(kind)
        if fields is None:
            fields = child_fields(kind)
        if isinstance(current, ast.stmt):
            step = _Step(current)
            steps.append(step)
            for field in fields:
                value = getattr(current, field, None)
                inside = None if field in _BLOCKS or field == "decorator_list" else step
                if type(value) is list:
                    stack.extend((c, inside) for c in value if isinstance(c, ast.AST) and id(c) not in skip)
                elif isinstance(value, ast.AST):
                    stack.append((value, inside))
            if current is node:
                continue
        else:
            for field in fields:  # ast.iter_child_nodes, without its two generators
                value = getattr(current, field, None)
                if type(value) is list:
                    stack.extend((c, step) for c in value if isinstance(c, ast.AST))
                elif isinstance(value, ast.AST):
                    stack.append((value, step))
        if kind is ast.Name:
            names.add(current.id)
            if type(current.ctx) is ast.Load:
                refs.add(current.id)
                if step is not None:
                    step.reads.add(current.id)
            else:
                if module_names:
                    binds.add(current.id)
                if step is not None:
                    step.stored.add(current.id)
        elif kind is ast.Attribute:
            names.add(current.attr)
            if step is not None and type(current.ctx) is not ast.Load:
                step.attrs.add(current.attr)
        elif kind is ast.arg:
            names.add(current.arg)
            if step is not None:
                step.stored.add(current.arg)
        elif kind is ast.alias:
            bound = current.asname or current.name.split(".")[0]
            names.add(bound)
            if module_names:
                binds.add(bound)
        elif kind is ast.keyword:
            if current.arg:
                names.add(current.arg)
        elif kind is ast.Call:
            # a bound method passed on (`torch_xla.compile(self.step_fn)`): rules read the method it names
            refs.update(a.attr for a in current.args if type(a) is ast.Attribute)
            if step is not None and type(current.func) is ast.Name:  # a class called by its name
                step.attrs.update(k.arg for k in current.keywords if k.arg)
        elif kind in _SCOPE_CHANGERS and (unit.defines is not None or kind in _DECLARATIONS):
            unit.hot = None  # a mark for _has_needle: always hot
        elif kind in _DEFS:
            names.add(current.name)
    return unit


_BLOCKS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


class _Step:
    """One statement of a unit's code, as `_attribute_binds` follows values: the lines of its header, and the
    names its header stores (a `def`'s parameters are the callers' values: none), the attributes it assigns and the
    keywords it passes to a callee named bare, the names it reads."""

    __slots__ = ("first", "last", "stored", "attrs", "reads", "function")

    def __init__(self, node: ast.stmt) -> None:
        body = getattr(node, "body", None)
        last = (body[0].lineno - 1 if isinstance(body, list) and body and isinstance(body[0], ast.stmt)
                else node.end_lineno or node.lineno)
        self.first, self.last = node.lineno, max(last, node.lineno)
        self.stored: set[str] = set()
        self.attrs: set[str] = set()
        self.reads: set[str] = set()
        self.function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))


def _attribute_binds(unit: _Unit, found: _Needles, hot_binds: set[str]) -> set[str]:
    """The attributes a hot unit gives a value that may come from XLA code, and the keywords it passes such a
    value by to a callee named bare (`Model(device=xm.xla_device())` sets `.device`): the statements that hold a
    needle, or read a name such a statement (or a hot unit) binds, in the unit's own code."""
    waiting = []
    tainted: set[str] = set()
    out: set[str] = set()
    for step in unit.steps:
        if found.within(step.first, step.last):
            if not step.function:
                tainted |= step.stored
            out |= step.attrs
        else:
            waiting.append(step)
    changed = True
    while changed:
        changed = False
        for i, step in enumerate(waiting):
            if step is not None and (step.reads & tainted or step.reads & hot_binds):
                waiting[i] = None
                changed = True
                if not step.function:
                    tainted |= step.stored
                out |= step.attrs
    return out


def _needle_in(text: str, needles: tuple[str, ...], words: tuple[str, ...] = ()) -> bool:
    return any(n in text for n in needles) or BACKEND_WORDS.search(text) is not None \
        or (bool(words) and _words(words).search(text) is not None)


@functools.lru_cache(maxsize=8)
def _words(words: tuple[str, ...]) -> re.Pattern[str]:
    """The names as whole words: not inside a longer identifier (`lu` in `value`, `det` in `detach`)."""
    return re.compile(r"(?<!\w)(?:%s)(?!\w)" % "|".join(map(re.escape, sorted(words))))


class _Needles:
    """Which lines of the file hold a needle, found in one pass over the text: `within(first, last)` tells whether
    lines first..last (1-based) hold one, as `_needle_in` over their text would (no needle spans two lines)."""

    def __init__(self, text: str, lines: list[str], needles: tuple[str, ...], words: tuple[str, ...] = ()) -> None:
        self.needles, self.words, self.lines = needles, words, lines
        self.counts: list[int] | None = None  # counts[i]: how many of the first i lines hold a needle
        if any("\n" in n or "\r" in n or not n for n in needles) or not all(w.isidentifier() for w in words):
            return  # `within` reads the lines' text instead
        starts = []
        at = 0
        for line in lines:
            starts.append(at)
            at += len(line)
        hits = []
        for needle in set(needles):
            at = text.find(needle)
            while at >= 0:
                hits.append(at)
                at = text.find(needle, at + 1)
        if text.isascii():  # the backend words in any case, as word parts: on lower-cased ASCII, a plain search
            low = text.lower()
            end = len(low)
            for match in _BACKEND_LOWER.finditer(low):
                at, after = match.span()
                if (at == 0 or low[at - 1] not in _ASCII_LOWER) and (after == end or low[after] not in _ASCII_LOWER):
                    hits.append(at)
        else:
            hits += [m.start() for m in BACKEND_WORDS.finditer(text)]
        if words:
            hits += [m.start() for m in _words(words).finditer(text)]
        found = bytearray(len(lines))
        for at in hits:
            found[bisect.bisect_right(starts, at) - 1] = 1
        counts = [0] * (len(lines) + 1)
        total = 0
        for i, hit in enumerate(found):
            total += hit
            counts[i + 1] = total
        self.counts = counts

    def within(self, first: int, last: int) -> bool:
        if self.counts is None:
            return _needle_in("".join(self.lines[first - 1:last]), self.needles, self.words)
        return self.counts[min(last, len(self.lines))] > self.counts[first - 1]


_ASCII_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")


def _has_needle(unit: _Unit, lines: list[str], found: _Needles) -> bool:
    if unit.hot is None:
        unit.hot = False
        return True
    return found.within(unit.first, unit.last) or \
        MAY_SUPPRESS_TEXT.search("".join(lines[unit.first - 1:unit.last])) is not None


def _heat(unit: _Unit, hot_binds: set[str], hot_refs: set[str], found: _Needles, named: bool = False) -> None:
    """Makes `unit` hot, and the classes around it (a kept method keeps its class). A class made hot by its own
    code or by a method's binds its name, so a unit that names it is hot too: a model's `__init__` that builds
    it as a part (`self.mlp = MLP(...)`, `nn.ModuleList(Block() for ...)`), which the rules read to find where
    the model's layers sit (sharding.TensorParallel's plan). `named`: `unit` is hot only because a hot unit
    reads its name (`model = Net()`), which binds nothing more."""
    start = unit
    while unit is not None:
        if unit.node.__class__ is ast.ClassDef and not (named and unit is start):
            hot_binds.add(unit.defines)
        if not unit.hot:
            unit.hot = True
            hot_binds |= unit.binds
            hot_binds |= _attribute_binds(unit, found, hot_binds)
            hot_refs |= unit.refs
        unit = unit.parent


def _replaceable(unit: _Unit, lines: list[str]) -> bool:
    """The statement owns its lines: only blanks before it on its first line (no `x = 1; class A: ...`)."""
    first = lines[unit.first - 1]
    col = unit.node.col_offset
    if unit.first != unit.node.lineno:  # decorated: the first decorator's `@` starts the first line
        stripped = first.lstrip(" \t")
        return len(first) - len(stripped) == col and stripped.startswith("@")
    return first[:col].strip(" \t") == "" and len(first) > col


def _line_end(line: str) -> str:
    if line.endswith("\r\n"):
        return "\r\n"
    if line.endswith(("\n", "\r")):
        return line[-1]
    return ""
