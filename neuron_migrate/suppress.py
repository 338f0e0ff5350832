"""Per-line suppression: `# neuron-migrate: ignore[NM301]`, `# neuron-migrate: ignore`, `# noqa: NM301`.

A suppression comment sits on the line of the statement it silences: after a simple statement (on any of
its lines, for a statement that spans several), or after the header of a compound statement (`with ...:`,
`def ...:`, a decorator line). A suppressed finding is neither reported nor fixed. A comment that
suppressed nothing is itself reported (NM901), so stale suppressions do not pile up. `# noqa` without codes
and `# noqa` codes of other tools are left to those tools.
"""

from __future__ import annotations

import re

import libcst as cst

UNUSED_CODE = "NM901"
ALL = frozenset({"*"})  # a bare `# neuron-migrate: ignore`

_DIRECTIVE = re.compile(
    r"#\s*(?:neuron-migrate\s*:\s*ignore(?:\[(?P<ours>[^\]]*)\])?(?![\w-])|noqa\s*:\s*(?P<noqa>[\w\s,]+))",
    re.I)
_CODE = re.compile(r"\bNM\d{3}\b", re.I)
# Cheap test on the raw bytes: could the file hold a suppression at all?
MAY_SUPPRESS = re.compile(rb"neuron-migrate\s*:\s*ignore|noqa\s*:[\w\s,]*NM\d", re.I)


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
