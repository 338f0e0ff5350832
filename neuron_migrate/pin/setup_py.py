"""setup.py: `install_requires`, `extras_require` and `python_requires` of the `setup()` call.

A second handler of the `python` kind that acts only on files named setup.py. LibCST finds the call
(resolved through the file's imports of setuptools or distutils) and the string literals of its lists,
directly or through a module-level name (`install_requires=REQUIRED`); edits are made on the text, so
everything else keeps its bytes.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from neuron_migrate.findings import FileResult
from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.document import TextDocument
from neuron_migrate.pin.lines import stale_comment_at
from neuron_migrate.pin.matrix import python_issue
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import SourceError, decode

SETUP_FUNCTIONS = frozenset({"setuptools.setup", "distutils.core.setup"})


@dataclass(frozen=True)
class Element:
    node: cst.BaseExpression
    start: int
    end: int


@dataclass(frozen=True)
class ListLiteral:
    elements: tuple[Element, ...]

    def texts(self) -> list[str | None]:
        out: list[str | None] = []
        for e in self.elements:
            value = e.node.evaluated_value if isinstance(e.node, cst.SimpleString) else None
            out.append(value if isinstance(value, str) else None)
        return out


def _imported_names(module: cst.Module) -> dict[str, str]:
    """Local name -> qualified name for the module-level imports."""
    out = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = cst.Module([]).code_for_node(alias.name)
                    local = alias.asname.name.value if alias.asname else full.split(".")[0]
                    out[local] = full if alias.asname else local
            elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
                base = cst.Module([]).code_for_node(small.module)
                if isinstance(small.names, cst.ImportStar):
                    out.update({"setup": f"{base}.setup"} if base in ("setuptools", "distutils.core") else {})
                    continue
                for alias in small.names:
                    name = alias.name.value
                    out[alias.asname.name.value if alias.asname else name] = f"{base}.{name}"
    return out


def _qualname(expr: cst.BaseExpression, imports: dict[str, str]) -> str | None:
    if isinstance(expr, cst.Name):
        return imports.get(expr.value)
    if isinstance(expr, cst.Attribute):
        head = _qualname(expr.value, imports)
        return f"{head}.{expr.attr.value}" if head else None
    return None


class _Finder(cst.CSTVisitor):
    def __init__(self, imports: dict[str, str]) -> None:
        self.imports = imports
        self.calls: list[cst.Call] = []
        self.assignments: dict[str, cst.BaseExpression] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if _qualname(node.func, self.imports) in SETUP_FUNCTIONS:
            self.calls.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self.assignments[node.targets[0].target.value] = node.value


def process_setup_py(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    if os.path.basename(path) != "setup.py" or b"setup" not in data:
        return FileResult(path, old_bytes=data)
    doc = TextDocument(path, decode(data), settings, rewrite, markers_reported_elsewhere=True, kind="python")
    try:
        module = cst.parse_module(doc.text)
    except cst.ParserSyntaxError:
        return FileResult(path, old_bytes=data)  # the Python handler reports syntax errors
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    finder = _Finder(_imported_names(module))
    module.visit(finder)

    def span(node: cst.CSTNode) -> tuple[int, int]:
        pos = positions[node]
        starts = doc.line_starts()
        return starts[pos.start.line - 1] + pos.start.column, starts[pos.end.line - 1] + pos.end.column

    lists: list[ListLiteral] = []  # install_requires first, then the extras
    extras: list[ListLiteral] = []
    python = []
    for call in finder.calls:
        for arg in call.args:
            keyword = arg.keyword.value if arg.keyword else None
            if keyword == "python_requires":
                python.append(arg.value)
            elif keyword == "install_requires":
                lists += _lists(arg.value, finder.assignments, span)
            elif keyword == "extras_require":
                value = _resolve(arg.value, finder.assignments)
                if isinstance(value, cst.Dict):
                    for element in value.elements:
                        if isinstance(element, cst.DictElement):
                            extras += _lists(element.value, finder.assignments, span)
    installed = [planning.names_of([t for t in lst.texts() if t]) for lst in lists + extras]
    if planning.python_in_scope(set().union(set(), *installed)):
        for value in python:
            _check_python(doc, value, span, planning.in_scope(set().union(set(), *installed)))
    if planning.in_scope(set().union(set(), *installed)):
        main = set().union(*installed[:len(lists)])
        for lst, names in zip(lists + extras, installed):
            added = _pin_list(doc, lst, main | names)
            if lst in lists:
                main |= added
    result = doc.result(data)
    if result.changed:
        try:
            ast.parse(doc.render())
        except SyntaxError as exc:
            raise SourceError(f"internal error: pinning gave setup.py code that does not parse ({exc.msg}); "
                              "the file was left alone. Please report this.") from None
    return result


def _resolve(value: cst.BaseExpression, assignments: dict[str, cst.BaseExpression]) -> cst.BaseExpression:
    if isinstance(value, cst.Name) and value.value in assignments:
        return assignments[value.value]
    return value


def _lists(value: cst.BaseExpression, assignments, span) -> list[ListLiteral]:
    value = _resolve(value, assignments)
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
        return _lists(value.left, assignments, span) + _lists(value.right, assignments, span)
    if not isinstance(value, (cst.List, cst.Tuple)):
        return []
    elements = tuple(Element(e.value, *span(e.value)) for e in value.elements if isinstance(e, cst.Element))
    return [ListLiteral(elements)]


def _check_python(doc: TextDocument, value: cst.BaseExpression, span, neuron: bool) -> None:
    if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
        issue = python_issue(value.evaluated_value, neuron)
        if issue is not None:
            start, end = span(value)
            doc.report(issue[0], start, end=end, text=f"python_requires={value.value}", **issue[1])


def _pin_list(doc: TextDocument, lst: ListLiteral, present: set[str]) -> set[str]:
    texts = lst.texts()
    result = planning.plan(texts, doc.family, present, instance=doc.settings.instance,
                           unsafe_fixes=doc.settings.unsafe_fixes)

    def report(index: int, code: str, fields: dict) -> bool:
        return doc.report(code, lst.elements[index].start, end=lst.elements[index].end, **fields)

    removed = []
    for index, outcome in planning.approve(result, texts, report).items():
        element = lst.elements[index]
        node = element.node
        assert isinstance(node, cst.SimpleString)
        extra = [_literal(node, t) for t in outcome.extra]
        if outcome.remove and not extra:
            removed.append(index)
            continue
        replacement = extra.pop(0) if outcome.remove else outcome.replacement
        if replacement is not None:
            doc.replace(element.start, element.end, replacement if outcome.remove else _literal(node, replacement))
            if not outcome.remove and (stale := stale_comment_at(doc, element.end)):
                doc.replace(*stale, "")  # `"torch==2.1.2",  # tested with 2.1.2`: it went with the old pin
        _insert_after(doc, element, extra)
    _remove(doc, lst, removed)
    return result.added


def _literal(like: cst.SimpleString, value: str) -> str:
    quote = like.quote if like.quote in ("'", '"') else '"'
    if quote in value or "\\" in value:
        quote = "'" if quote == '"' else '"'
    return f"{quote}{value}{quote}"


def _own_line(doc: TextDocument, element: Element) -> bool:
    before = doc.text[doc.line_start(element.start):element.start]
    after = doc.text[element.end:doc.line_end(element.start)]
    return not before.strip() and re.fullmatch(r"\s*,?\s*(#.*)?\s*", after) is not None


def _remove(doc: TextDocument, lst: ListLiteral, indices: list[int]) -> None:
    """Remove elements; inline ones take the comma after them, or before them at the end of the list."""
    inline = [i for i in indices if not _own_line(doc, lst.elements[i])]
    for index in set(indices) - set(inline):
        element = lst.elements[index]
        doc.replace(doc.line_start(element.start), doc.line_end(element.start), "")
    trailing = []
    for index in reversed(range(len(lst.elements))):
        if index not in inline:
            break
        trailing.insert(0, index)
    for index in inline:
        if index not in trailing:
            doc.replace(lst.elements[index].start, lst.elements[index + 1].start, "")
    if trailing and trailing[0] > 0:
        doc.replace(lst.elements[trailing[0] - 1].end, lst.elements[trailing[-1]].end, "")
    elif trailing:
        last = lst.elements[trailing[-1]]
        doc.replace(lst.elements[0].start, last.end + re.match(r"\s*,?", doc.text[last.end:]).end(), "")


def _insert_after(doc: TextDocument, element: Element, literals: list[str]) -> None:
    if not literals:
        return
    if _own_line(doc, element):
        indent = re.match(r"[ \t]*", doc.text[doc.line_start(element.start):]).group()
        if not doc.text[element.end:].lstrip(" \t").startswith(","):
            doc.replace(element.end, element.end, ",")
        line_end = doc.line_end(element.start)
        newline = doc.text[doc.line_start(line_end - 1):line_end]
        newline = newline[len(newline.rstrip("\r\n")):] or doc.newline
        doc.replace(line_end, line_end, "".join(f"{indent}{lit},{newline}" for lit in literals))
    else:
        doc.replace(element.end, element.end, "".join(f", {lit}" for lit in literals))
