"""Per-line suppression: `# neuron-migrate: ignore[NM301]`, `# neuron-migrate: ignore`, `# noqa: NM301`.

The same comments in every file kind that has `#` comments. In Python a suppression comment sits on the
line of the statement it silences: after a simple statement (on any of its lines, for a statement that spans
several), or after the header of a compound statement (`with ...:`, `def ...:`, a decorator line). In the
other kinds it sits at the end of the line the finding is on (any line of a shell command, Dockerfile
instruction or requirements line continued with `\\`). A suppressed finding is neither reported nor fixed.
A comment that suppressed nothing is itself reported (NM901), so stale suppressions do not pile up. `# noqa`
without codes and `# noqa` codes of other tools are left to those tools.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

import libcst as cst

UNUSED_CODE = "NM901"
ALL = frozenset({"*"})  # a bare `# neuron-migrate: ignore`

_DIRECTIVE = re.compile(
    r"#\s*(?:neuron-migrate\s*:\s*ignore(?:\[(?P<ours>[^\]]*)\])?(?![\w-])|noqa\s*:\s*(?P<noqa>[\w\s,]+))",
    re.I)
_CODE = re.compile(r"\bNM\d{3}\b", re.I)
# Cheap test on the raw bytes: could the file hold a suppression at all?
MAY_SUPPRESS = re.compile(rb"neuron-migrate\s*:\s*ignore|noqa\s*:[\w\s,]*NM\d", re.I)
MAY_SUPPRESS_TEXT = re.compile(MAY_SUPPRESS.pattern.decode(), re.I)


def codes_in(comment: str) -> frozenset[str]:
    """The codes a comment suppresses: ALL for a bare `# neuron-migrate: ignore`, empty for none of ours."""
    out: set[str] = set()
    for m in _DIRECTIVE.finditer(comment):
        if m.group("noqa") is not None:
            out.update(c.upper() for c in _CODE.findall(m.group("noqa")))
        elif m.group("ours") is None:
            return ALL
        else:
            out.update(c.upper() for c in _CODE.findall(m.group("ours")))
    return frozenset(out)


def line_comments(statement: cst.CSTNode) -> list[cst.Comment]:
    """The comments on the line(s) a statement occupies (not the comment lines above it, not its body)."""
    if isinstance(statement, cst.SimpleStatementLine):
        return [c for part in (*statement.body, statement.trailing_whitespace) for c in _comments(part)]
    out: list[cst.Comment] = []
    for decorator in getattr(statement, "decorators", ()):
        out.extend(_comments(decorator.trailing_whitespace))
    body = getattr(statement, "body", None)
    if isinstance(body, cst.IndentedBlock) and body.header.comment is not None:
        out.append(body.header.comment)
    elif isinstance(body, cst.SimpleStatementSuite):
        out.extend(c for part in (*body.body, body.trailing_whitespace) for c in _comments(part))
    return out


def _comments(node: cst.CSTNode) -> list[cst.Comment]:
    if isinstance(node, cst.Comment):
        return [node]
    return [c for child in node.children for c in _comments(child)]


class Suppressions:
    """Which statements carry which suppressions, and which of them were used."""

    def __init__(self) -> None:
        self._codes: dict[cst.CSTNode, frozenset[str]] = {}
        self._used: set[tuple[cst.CSTNode, str]] = set()

    def codes(self, statement: cst.CSTNode) -> frozenset[str]:
        found = self._codes.get(statement)
        if found is None:
            found = frozenset().union(*(codes_in(c.value) for c in line_comments(statement)))
            self._codes[statement] = found
        return found

    def suppresses(self, statement: cst.CSTNode | None, code: str) -> bool:
        if statement is None:
            return False
        codes = self.codes(statement)
        if code in codes or "*" in codes:
            self._used.add((statement, code if code in codes else "*"))
            return True
        return False

    def unused(self, module: cst.Module) -> list[tuple[cst.Comment, str, cst.CSTNode]]:
        """(comment, code, statement) for every suppressed code that silenced nothing; code "*" for a bare
        ignore."""
        collector = _Statements()
        module.visit(collector)
        out = []
        for statement in collector.statements:
            codes = self.codes(statement)
            comments = [c for c in line_comments(statement) if codes_in(c.value)]
            for code in sorted(codes):
                if (statement, code) not in self._used:
                    comment = next((c for c in comments if code in codes_in(c.value)), comments[0])
                    out.append((comment, code, statement))
        return out


class _Statements(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.statements: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and any(
                codes_in(c.value) for c in line_comments(node)):
            self.statements.append(node)
        return True


# -- text files: each file kind's comment syntax ----------------------------------------------------------------

@dataclass(frozen=True)
class Syntax:
    """Where a `#` comment starts on a line of one file kind, and which lines continue a line."""

    quotes: str  # characters that open a string in which `#` is text ("": none)
    word_start: bool  # `#` starts a comment only at the start of a word (line start, after a space)
    continues: bool  # a line ending in `\` continues on the next one
    comment_lines_inside: bool = False  # Docker: a comment line inside a continued instruction does not end it
    python: bool = False  # Python's own tokenizer finds the comments
    trailing: str = ""  # what may follow the backslash of a continued line (Docker: spaces)


SHELL = Syntax("'\"", True, True)
SYNTAX: dict[str, Syntax] = {
    "shell": SHELL,
    "dockerfile": Syntax("'\"", True, True, comment_lines_inside=True, trailing=" \t"),
    "requirements": Syntax("", True, True),  # pip: `#` at the line start or after whitespace
    "setup-cfg": Syntax("", True, False),
    "conda-env": Syntax("'\"", True, False),  # YAML
    "pyproject": Syntax("'\"", False, False),  # TOML
    "lockfile": Syntax("'\"", False, False),
    "python": Syntax("'\"", False, False, python=True),  # setup.py pins (the engine reads statements itself)
}
_WORD_BREAKS = " \t;&|()"


def _comment_start(line: str, syntax: Syntax) -> int:
    """The offset of the comment on one physical line, -1 for none."""
    quote = ""
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch == "#" and (not syntax.word_start or i == 0 or line[i - 1] in _WORD_BREAKS):
            return i
        elif ch == "\\" and syntax.quotes:
            i += 2
            continue
        elif ch in syntax.quotes:
            quote = ch
        i += 1
    return -1


def _python_comments(text: str) -> dict[int, tuple[int, str]]:
    out: dict[int, tuple[int, str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                out[token.start[0]] = (token.start[1], token.string)
    except (tokenize.TokenError, SyntaxError):
        pass  # the Python engine reports the syntax error
    return out


class LineSuppressions:
    """The suppression comments of a text file, by line (1-based), for handlers that find idioms by line."""

    def __init__(self, text: str, kind: str) -> None:
        syntax = SYNTAX.get(kind, SHELL)
        lines = re.split(r"\r\n|\r|\n", text)
        self.codes: dict[int, frozenset[str]] = {}
        self.columns: dict[int, tuple[int, int]] = {}  # the comment's first and past-last column (1-based)
        self.used: set[tuple[int, str]] = set()
        comments = _python_comments(text) if syntax.python else {}
        self._first = list(range(len(lines) + 1))  # the first and last line of each line's logical line
        self._last = list(range(len(lines) + 1))
        continued = False  # the line before continues on this one
        for number, line in enumerate(lines, start=1):
            if syntax.python:
                start, comment = comments.get(number, (-1, ""))
            else:
                start = _comment_start(line, syntax)
                comment = line[start:] if start >= 0 else ""
            codes = codes_in(comment) if comment else frozenset()
            if codes:
                self.codes[number] = codes
                self.columns[number] = (start + 1, start + len(comment.rstrip()) + 1)
            if continued:
                self._first[number] = self._first[number - 1]
            if not (continued and syntax.comment_lines_inside and start >= 0 and not line[:start].strip()):
                # a `\` inside a comment continues nothing
                continued = syntax.continues and start < 0 and line.rstrip(syntax.trailing).endswith("\\")
        for number in range(len(lines), 0, -1):
            first = self._first[number]
            self._last[number] = self._last[number + 1] if number < len(lines) and self._first[number + 1] == first \
                else number

    def suppresses(self, line: int, code: str) -> bool:
        if not 0 < line < len(self._first):
            return False
        found = [n for n in range(self._first[line], self._last[line] + 1) if n in self.codes]
        for n in found:
            if code in self.codes[n]:
                self.used.add((n, code))
                return True
        for n in found:
            if "*" in self.codes[n]:
                self.used.add((n, "*"))
                return True
        return False

    def unused(self, used: set[tuple[int, str]]) -> list[tuple[int, int, int, str]]:
        """(line, column, end column, code) of every suppressed code that silenced nothing ("*": a bare ignore)."""
        return [(n, *self.columns[n], code) for n, codes in sorted(self.codes.items()) for code in sorted(codes)
                if (n, code) not in used]


def line_suppressions(text: str, kind: str) -> LineSuppressions | None:
    """The file's suppressions; None when it holds none (most files: no lookups then)."""
    return LineSuppressions(text, kind) if MAY_SUPPRESS_TEXT.search(text) else None
