"""`check`'s lean parse: LibCST reads only the functions and classes that can hold a finding.

On real Neuron code almost every file passes the byte pre-filter (it mentions torch_xla somewhere), yet most of
its functions have nothing to do with XLA. Before LibCST parses a file that `check` only reads, Python's own tree
(parsed anyway: findings are placed by its lines) decides which `def` and `class` statements are *cold*, and those
are replaced, in the text LibCST parses, by a one-line stand-in that binds the same name (`def name(): pass`,
`class Name: pass`) followed by blank lines, so every other statement keeps its line and column.

The statements of a file are units: each top-level statement, and each method of a class (at any depth of
classes); a class with a hot method is kept, its cold methods still replaced. A unit is hot, and kept, when

- its text holds a needle: a trigger of a rule that runs on the file, `torch_xla`, a word naming a backend
  (`xla`, `neuron`, `tpu`, `cuda`, `mps`, ... the words `engine/paths.py` classifies tests by; case-insensitive,
  as a word part), a suppression comment or a marker;
- or it is a function or class that imports anything (the file's facts read every scope's imports), or it
  declares `global` / `nonlocal` (it would change what names mean elsewhere);
- or it names something a hot unit binds (a module-level name, an attribute it assigns, a function or class);
- or a hot unit reads it by its bare name (`xmp.spawn(_mp_fn)`, `torch.compile(step)`, `train(device)`: rules
  read the definition a call names, and follow values into its parameters), or passes it to a call as an
  attribute (`torch_xla.compile(self.step_fn)`: a method of that name).

Only `def` and `class` statements are ever replaced; everything else is kept as written. What the file's facts
count over the whole file is completed for the code left out: the quote style (facts.quote) counts the string
literals of each replaced definition, read from Python's tree and the text (`_quote_tally`); a definition whose
f-strings hold literals inside their braces is kept, for LibCST to count. `rewrite` parses the whole file (it
renders it). `tests/test_lean.py` holds the findings of the lean parse equal to the whole parse's
on every fixture, 150 standard-library modules and torch_xla's sources as plain code;
`NEURON_MIGRATE_LEAN=0` turns it off.
"""

from __future__ import annotations

import ast
import os
import re
from typing import NamedTuple

from neuron_migrate.suppress import MAY_SUPPRESS_TEXT

ENABLED = os.environ.get("NEURON_MIGRATE_LEAN", "1") != "0"

# The backend words engine/paths.py reads tests by (strings, enum members, availability helpers, torch.<x> tests),
# and `neuron` (markers, suppressions, the native device): a unit holding one is hot.
# (`cpu` and `gloo` are left out: a test for the CPU fallback changes no fact of the file, only the path of the
# code it guards.)
BACKEND_WORDS = re.compile(r"(?<![A-Za-z])(?:xla|neuron|tpu|cuda|gpu|nccl|mps|xpu|npu|hpu|mlu|musa|sdaa)(?![A-Za-z])",
                           re.I)
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
    __slots__ = ("node", "first", "last", "names", "refs", "binds", "defines", "hot", "parent", "children")

    def __init__(self, node: ast.stmt, first: int, last: int, parent: _Unit | None) -> None:
        self.node, self.first, self.last, self.parent = node, first, last, parent
        self.names: set[str] = set()  # every identifier it spells (names, attributes, parameters, keywords)
        self.refs: set[str] = set()  # the bare names it reads (a definition they name is looked up)
        self.binds: set[str] = set()  # what it binds for other units: module-level names, attributes it assigns
        self.defines = node.name if isinstance(node, _DEFS) else None
        self.hot = False
        self.children: list[_Unit] = []


def lean_text(text: str, tree: ast.Module, needles: tuple[str, ...]) -> Lean | None:
    """`text` with its cold functions and classes replaced by stand-ins; None where nothing is replaced. `tree`,
    Python's tree of `text`, is changed in place to stand for the lean text where positions.py reads it (the
    replaced statements' first lines, no decorators), which saves parsing the lean text again."""
    if not ENABLED:
        return None
    lines = LINE.findall(text)
    if _candidate_lines(tree.body, lines, needles) < MIN_SHARE * len(lines):
        return None  # too little to gain for the walks below (most definitions hold a needle themselves)
    units: list[_Unit] = []
    for node in tree.body:
        _units(node, None, units, module_level=True)
    if not any(isinstance(u.node, _DEFS) for u in units):
        return None
    hot_binds: set[str] = set()
    hot_refs: set[str] = set()
    for unit in units:
        if _has_needle(unit, lines, needles):
            _heat(unit, hot_binds, hot_refs, lines, needles)
    changed = True
    while changed:
        changed = False
        for unit in units:
            if not unit.hot and ((unit.names & hot_binds) or (unit.defines is not None and unit.defines in hot_refs)):
                _heat(unit, hot_binds, hot_refs, lines, needles)
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


# The rest of a string literal after its opening quote, to its closing one: each character matched one way only.
_STRING_REST = {
    "'": re.compile(r"(?:[^'\\]|\\.)*'", re.S),
    '"': re.compile(r'(?:[^"\\]|\\.)*"', re.S),
    "'''": re.compile(r"(?:[^'\\]|\\.|'(?!''))*'''", re.S),
    '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""', re.S),
}
_STRING_OPEN = re.compile(r"""[A-Za-z]{0,2}('''|\"\"\"|'|")""")
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
            for part in current.values:
                if type(part) is ast.FormattedValue and any(
                        type(n) is ast.JoinedStr or (type(n) is ast.Constant and isinstance(n.value, (str, bytes)))
                        for n in ast.walk(part.value)):
                    return None
        elif kind is not ast.Constant or not isinstance(current.value, (str, bytes)):
            stack.extend(ast.iter_child_nodes(current))
            continue
        pieces = _pieces(_segment(current, lines))
        if pieces is None:
            return None
        for prefix, quote in pieces:
            if "f" not in prefix and "F" not in prefix and quote != '"""':
                if quote[0] == "'":
                    single += 1
                else:
                    double += 1
    return single, double


def _segment(node: ast.expr, lines: list[str]) -> str:
    """The source text of an expression (ast's columns count UTF-8 bytes)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    start, end = _column(lines[first], node.col_offset), _column(lines[last], node.end_col_offset)
    if first == last:
        return lines[first][start:end]
    return lines[first][start:] + "".join(lines[first + 1:last]) + lines[last][:end]


def _column(line: str, offset: int) -> int:
    return offset if line.isascii() else len(line.encode("utf-8")[:offset].decode("utf-8", "replace"))


def _pieces(text: str) -> list[tuple[str, str]] | None:
    """(prefix, opening quote) of each literal of `text`, string literals joined implicitly; None where the text
    reads otherwise."""
    out = []
    at = 0
    while True:
        opening = _STRING_OPEN.match(text, at)
        if opening is None:
            return None
        quote = opening.group(1)
        rest = _STRING_REST[quote].match(text, opening.end())
        if rest is None:
            return None
        out.append((text[at:opening.start(1)], quote))
        at = _BETWEEN.match(text, rest.end()).end()
        if at >= len(text):
            return out


def _candidate_lines(body: list[ast.stmt], lines: list[str], needles: tuple[str, ...]) -> int:
    """How many lines the definitions without a needle of their own span: what the lean parse could replace at
    most (found from the text alone, before any walk)."""
    count = 0
    for node in body:
        if isinstance(node, _DEFS):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            last = node.end_lineno or node.lineno
            if not _needle_in("".join(lines[first - 1:last]), needles):
                count += last - first + 1
            elif isinstance(node, ast.ClassDef):
                count += _candidate_lines(node.body, lines, needles)
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
    stack = [c for c in ast.iter_child_nodes(node) if id(c) not in skip]
    names, binds, refs = unit.names, unit.binds, unit.refs
    if unit.defines is not None:
        names.add(unit.defines)
        if module_level and not isinstance(node, ast.ClassDef):
            binds.add(unit.defines)  # a helper others call (an availability test)
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind is ast.Name:
            names.add(current.id)
            if type(current.ctx) is ast.Load:
                refs.add(current.id)
            elif module_names:
                binds.add(current.id)
        elif kind is ast.Attribute:
            names.add(current.attr)
        elif kind is ast.arg:
            names.add(current.arg)
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
        elif kind in _SCOPE_CHANGERS and (unit.defines is not None or kind in _DECLARATIONS):
            unit.hot = None  # a mark for _has_needle: always hot
        elif kind in _DEFS:
            names.add(current.name)
        stack.extend(ast.iter_child_nodes(current))
    return unit


_BLOCKS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


def _attribute_binds(unit: _Unit, lines: list[str], needles: tuple[str, ...], hot_binds: set[str]) -> set[str]:
    """The attributes a hot unit gives a value that may come from XLA code, and the keywords it passes such a
    value by to a callee named bare (`Model(device=xm.xla_device())` sets `.device`): the statements that hold a needle, or read a name
    such a statement (or a hot unit) binds, in the unit's own code."""
    skip = {id(c.node) for c in unit.children}
    steps = []  # (text, stored names, attributes and keywords, read names)
    for node in ast.walk(unit.node) if not skip else _walk_skipping(unit.node, skip):
        if not isinstance(node, ast.stmt) or id(node) in skip:
            continue
        parts = [v for f, v in ast.iter_fields(node) if f not in _BLOCKS and f != "decorator_list"]
        body = getattr(node, "body", None)
        last = (body[0].lineno - 1 if isinstance(body, list) and body and isinstance(body[0], ast.stmt)
                else node.end_lineno or node.lineno)
        stored, attrs, reads = set(), set(), set()
        todo = [p for part in parts for p in (part if isinstance(part, list) else [part]) if isinstance(p, ast.AST)]
        while todo:
            current = todo.pop()
            kind = type(current)
            if kind is ast.Name:
                (reads if type(current.ctx) is ast.Load else stored).add(current.id)
            elif kind is ast.Attribute and type(current.ctx) is not ast.Load:
                attrs.add(current.attr)
            elif kind is ast.Call and type(current.func) is ast.Name:  # a class called by its name
                attrs.update(k.arg for k in current.keywords if k.arg)
            elif kind is ast.arg:
                stored.add(current.arg)
            if not isinstance(current, ast.stmt):
                todo.extend(ast.iter_child_nodes(current))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stored = set()  # parameters: their values are the callers'
        steps.append(["".join(lines[node.lineno - 1:max(last, node.lineno)]), stored, attrs, reads, False])
    tainted: set[str] = set()
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for step in steps:
            if not step[4] and (_needle_in(step[0], needles) or step[3] & tainted or step[3] & hot_binds):
                step[4] = changed = True
                tainted |= step[1]
                out |= step[2]
    return out


def _walk_skipping(node: ast.AST, skip: set[int]):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(c for c in ast.iter_child_nodes(current) if id(c) not in skip)


def _needle_in(text: str, needles: tuple[str, ...]) -> bool:
    return any(n in text for n in needles) or BACKEND_WORDS.search(text) is not None


def _has_needle(unit: _Unit, lines: list[str], needles: tuple[str, ...]) -> bool:
    if unit.hot is None:
        unit.hot = False
        return True
    text = "".join(lines[unit.first - 1:unit.last])
    return _needle_in(text, needles) or MAY_SUPPRESS_TEXT.search(text) is not None


def _heat(unit: _Unit, hot_binds: set[str], hot_refs: set[str], lines: list[str], needles: tuple[str, ...]) -> None:
    """Makes `unit` hot, and the classes around it (a kept method keeps its class)."""
    while unit is not None and not unit.hot:
        unit.hot = True
        hot_binds |= unit.binds
        hot_binds |= _attribute_binds(unit, lines, needles, hot_binds)
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
