"""Positions of the requested statements only are LibCST's PositionProvider positions, node for node."""

from __future__ import annotations

import ast
import sysconfig
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from neuron_migrate.syntax import positions
from neuron_migrate.engine.python import process_python
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import SourceError, decode
from tests.helpers import FIXTURES, for_this_python

STDLIB_SAMPLE = 150
STDLIB_MAX_BYTES = 25_000


def with_statements(module: cst.Module) -> list[tuple[cst.CSTNode, cst.CSTNode | None]]:
    """Every node with its innermost statement (None outside statements: the module, its header and footer)."""
    out: list[tuple[cst.CSTNode, cst.CSTNode | None]] = []
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(module, None)]
    while stack:
        node, statement = stack.pop()
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            statement = node
        out.append((node, statement))
        stack.extend((child, statement) for child in node.children)
    return out


def provider_positions(module: cst.Module):
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


def assert_same_positions(text: str, fast: bool = True) -> None:
    """Every node of every statement has the provider's position, from each statement generated alone and from
    `positions_of`; `fast`: without the whole-module pass. (The provider has no position for a few nodes that
    generate no code, such as the empty whitespace of `{"a": 1}` as a match pattern; those are not asked for.)"""
    module = cst.parse_module(text)
    tree = ast.parse(text)
    expected = provider_positions(module)
    wanted = [(node, statement) for node, statement in with_statements(module)
              if statement is not None and node in expected]
    if fast:
        located = positions._Located(module, text, tree)
        by_statement: dict[cst.CSTNode, list[cst.CSTNode]] = {}
        for node, statement in wanted:
            by_statement.setdefault(statement, []).append(node)
        for statement, nodes in by_statement.items():
            found = located.statement_positions(statement)
            assert found is not None, f"statement at line {expected[statement].start.line} not found"
            assert all(node in found for node in nodes)
            assert [n for n, position in found.items() if position != expected.get(n)] == []
    file = positions.Positions()  # the state of one file
    file.remember(module, text, tree)
    found = file.positions_of(module, wanted)
    if fast:
        assert file.whole is None, "fell back to the whole module"
    assert [(type(n).__name__, found.get(n), expected[n]) for n, _ in wanted if found.get(n) != expected[n]] == []
    # a few nodes, as findings are: the others in their statements are not recorded, the few are still right
    few = wanted[::7]
    file = positions.Positions()
    file.remember(module, text, tree)
    found = file.positions_of(module, few)
    assert [(type(n).__name__, found.get(n), expected[n]) for n, _ in few if found.get(n) != expected[n]] == []
    if fast:
        assert file.whole is None, "fell back to the whole module"


def stdlib_sample() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py")
                   if "site-packages" not in p.parts and p.stat().st_size <= STDLIB_MAX_BYTES)
    step = max(1, len(files) // STDLIB_SAMPLE)
    return files[::step][:STDLIB_SAMPLE]


def readable(path: Path) -> str | None:
    """The file's text (decoded as the engine decodes it) where both parsers take it."""
    try:
        text = decode(path.read_bytes()).text
        ast.parse(text)
        cst.parse_module(text)
    except (SourceError, SyntaxError, ValueError, cst.ParserSyntaxError, RecursionError):
        return None
    return text


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.py")), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_positions(path):
    text = readable(path)
    if text is None:
        pytest.skip("not readable by both parsers")
    assert_same_positions(text)


@pytest.mark.slow
def test_stdlib_positions():
    checked = 0
    for path in stdlib_sample():
        text = readable(path)
        if text is None:
            continue
        try:
            assert_same_positions(text)
        except AssertionError as exc:
            raise AssertionError(f"{path}: {exc}") from None
        checked += 1
    assert checked >= 0.9 * STDLIB_SAMPLE


DECORATORS = """\
import functools

# a comment above the decorators

@functools.lru_cache(maxsize=None)
# between the decorators

@staticmethod  # trailing
# after the decorators
def f(
    a,  # the first argument
    b,
):
    return a + b


class C:
    @property

    # after a blank line
    def name(self):
        return 1
"""

ASYNC = """\
async def main(items):
    async for item in items:
        async with item as x:
            await x
    else:
        pass
"""

ELIF = """\
if a:
    x = 1
# before elif
elif b:
    x = 2
  # odd comment
elif c: x = 3; y = 4
else:
    x = 5
"""

TRY = """\
try:
    f()
except* ValueError as e:
    g(e)
except* (TypeError, KeyError):
    pass
else:
    h()
finally:
    k()
try:
    pass
except Exception:
    raise
"""

MATCH = """\
match command.split():
    case [action]:
        go(action)
    case [action, obj] if obj:
        go(action, obj)
    # comment between cases
    case Point(x=0, y=0) | {"a": 1}:
        pass
    case _:
        match inner:
            case 1: pass
"""

SEMICOLONS = "a = 1; b = 2;\nif x: a; b\nwhile y: c(); d()\nfor i in j: k()\nelse: m; n\n"

TABS = "if x:\n\tif y:\n\t\tz = 1\n\t\t# comment\n\t\tw = '\\t'\n\telse:\n\t  v = 2\n"

HEADER = '#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n"""Docstring."""\n\n\nimport os  # why\n'

DEEP = "".join("    " * i + f"if c{i}:\n" for i in range(40)) + "    " * 40 + "deep = 1\n"

UNICODE = ("naïve = 'ünïcödé ✓'; 变量 = f('日本語', x=1)\n"
           "if 名前 == '名': print('é' * 3, ok)\n"
           "emoji = '🐍🐍'; z = g(emoji)  # 🐍 comment\n")

CONTINUATION = ("x = 1 + \\\n    2\ny = (1,\n     2)\ns = '''multi\nline'''; t = 3\n"
                "def f():\n    return \\\n        1\n")

ODD_CHARACTERS = ("a = 'x\\x0b\x0by'\n# comment \x0c with form feed\nb =\x0c[1,\x0c2]\n"
                  "c = '\x1c\x1d\x1e\x85\u2028\u2029'  # \u2028 in a comment\nd = c\n")

EMPTY_BLOCK_FOOTER = "def f():\n    x = 1\n    # footer comment of the block\n\n# module footer\n"

CASES = {
    "decorators with comments between them": DECORATORS,
    "async def, for, with": ASYNC,
    "elif chain": ELIF,
    "try/except*/finally": TRY,
    "match statement": MATCH,
    "semicolons and one-line suites": SEMICOLONS,
    "tabs": TABS,
    "module header comment": HEADER,
    "deep nesting": DEEP,
    "unicode before the node on the same line": UNICODE,
    "backslash continuation and multi-line strings": CONTINUATION,
    "characters str.splitlines takes for line ends": ODD_CHARACTERS,
    "block and module footers": EMPTY_BLOCK_FOOTER,
    "CRLF newlines": DECORATORS.replace("\n", "\r\n"),
    "CR newlines": ELIF.replace("\n", "\r"),
    "mixed newlines": "a = 1\r\nif a:\r    b = 2\n    c = 3\r\n",
    "no final newline": "import os\nif x:\n    y = os.path  # last",
    "no final newline after a one-line suite": "if x: y = 1",
    "no final newline, CRLF file": "a = 1\r\nb = 2",
    "a form feed on a comment line": "a = 1\n\x0c# comment\nb = 2\n",
    "blank lines with trailing spaces": "a = 1\n    \n\t\nb = 2\n",
}

CASES = for_this_python(CASES)


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_hand_written_positions(text):
    assert_same_positions(text)


FALL_BACK = {
    # LibCST drops this form feed: the generated text is not the source, the check sees it
    "a form feed before a statement": "a = 1\n\x0cb = 2\nif a:\n    c = 3\n",
    # LibCST drops a line holding only a backslash continuation: its line numbers further on are one less
    "a backslash line before a statement": "x = 1\n\\\ny = 2\nz = 3\n",
    "a backslash line before a def": "\\\ndef f():\n    pass\n",
    "an indented backslash line": "if a:\n    x = 1\n    \\\n    y = 2\n",
    "a backslash line, CRLF": "x = 1\r\n\\\r\ny = 2\r\n",
}


@pytest.mark.parametrize("text", FALL_BACK.values(), ids=FALL_BACK.keys())
def test_falls_back_where_the_generated_text_is_not_the_source(text):
    module = cst.parse_module(text)
    assert module.code != text
    expected = provider_positions(module)
    wanted = [(node, statement) for node, statement in with_statements(module)
              if statement is not None and node in expected]
    assert positions._Located(module, text, ast.parse(text)).positions(wanted) is None
    assert_same_positions(text, fast=False)


def test_nodes_without_a_statement_fall_back_to_the_whole_module():
    file = positions.Positions()
    text = "# header\nx = 1\n# footer\n"
    module = cst.parse_module(text)
    file.remember(module, text, ast.parse(text))
    wanted = with_statements(module)
    assert file.source.positions(wanted) is None
    found = file.positions_of(module, wanted)
    expected = provider_positions(module)
    assert all(found[node] == expected[node] for node, _ in wanted)


def test_a_module_not_remembered_falls_back_to_the_whole_module():
    file = positions.Positions()
    module = cst.parse_module("x = 1\n")
    file.remember(cst.parse_module("x = 1\n"), "x = 1\n", ast.parse("x = 1\n"))
    found = file.positions_of(module, [(module.body[0], module.body[0])])
    assert found[module.body[0]] == provider_positions(module)[module.body[0]]


def test_a_wrong_statement_falls_back_to_the_whole_module():
    file = positions.Positions()
    text = "a = 1\nb = 2\n"
    module = cst.parse_module(text)
    file.remember(module, text, ast.parse(text))
    node = module.body[1].body[0]
    assert file.source.positions([(node, module.body[0])]) is None
    assert file.positions_of(module, [(node, module.body[0])])[node] == provider_positions(module)[node]


def test_trees_that_do_not_pair_up_fall_back_to_the_whole_module():
    file = positions.Positions()
    text = "a = 1\nb = 2\n"
    module = cst.parse_module(text)
    file.remember(module, text, ast.parse("a = 1\n"))
    statement = module.body[0]
    assert file.source.positions([(statement, statement)]) is None
    assert file.positions_of(module, [(statement, statement)])[statement] == \
        provider_positions(module)[statement]


def test_text_that_is_not_the_source_falls_back_to_the_whole_module():
    file = positions.Positions()
    text = "a = 1\nb = 2\n"
    module = cst.parse_module(text)
    file.remember(module, "a = 1\nb = 3\n", ast.parse(text))
    statement = module.body[1]
    assert file.source.positions([(statement, statement)]) is None


UNUSED_SUPPRESSIONS = """\
import torch
import torch_xla.core.xla_model as xm
x = torch.zeros(3)  # noqa: NM401
y = 1  # neuron-migrate: ignore


class C:
    @staticmethod  # neuron-migrate: ignore[NM301]
    def f():
        with open("f") as handle:  # noqa: NM320
            if handle: z = 2  # neuron-migrate: ignore
"""


def test_check_finds_the_positions_of_the_whole_module_pass(monkeypatch):
    """The engine and the import tidy-up pass each finding's statement (NM901 comments and unused legacy
    imports included): `check` reports what it reported with the whole-module pass, without that pass."""
    files = [(str(path), path.read_bytes())
             for path in sorted(FIXTURES.rglob("*.py")) + sorted((FIXTURES.parent / "examples").rglob("*.py"))]
    files.append(("unused_suppressions.py", UNUSED_SUPPRESSIONS.encode()))

    def findings() -> list[tuple]:
        out = []
        for path, data in files:
            try:
                result = process_python(path, data, Settings(), False)
            except SourceError:
                continue
            out.extend((path, f.line, f.col, f.end_line, f.end_col, f.code) for f in result.findings)
        return out

    whole = positions.positions
    calls = []
    monkeypatch.setattr(positions, "positions", lambda module: calls.append(module) or whole(module))
    fast = findings()
    assert calls == []
    assert {"NM190", "NM901"} <= {f[-1] for f in fast} and len({f[-1] for f in fast}) > 10
    assert len([f for f in fast if f[0] == "unused_suppressions.py" and f[-1] == "NM901"]) == 5
    monkeypatch.setattr(positions, "positions_of", lambda module, wanted: whole(module))
    assert findings() == fast
