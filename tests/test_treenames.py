"""The scope table of Python's tree (engine/treenames.py) is the LibCST analysis's (engine/names.py).

LibCST's analysis is the oracle. For every file: the same scopes, each with the same bindings (kind, import path,
fallback, conditional), reads, `global` and `nonlocal` names and enclosing scope; and for every name and attribute
of Python's tree, the node at the same place in LibCST's tree, in the same scope, resolved to the same scope and the
same qualified name. The files: every fixture and example, a sample of the standard library (slow), the ecosystem's
files where `../shared/ecosystem` is beside the checkout (slow), written cases for each quirk of the table, and
generated modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from libcst.metadata import MetadataWrapper, PositionProvider

from neuron_migrate.engine import lean
from neuron_migrate.engine.names import Analysis, Scope
from neuron_migrate.engine.treenames import TreeNames
from tests.helpers import FIXTURES, ROOT, for_this_python
from tests.test_positions import readable, stdlib_sample

FILES = sorted(FIXTURES.rglob("*.py")) + sorted((ROOT / "examples").rglob("*.py"))
ECOSYSTEM = ROOT.parent / "shared" / "ecosystem"


# -- the two tables, in one form -----------------------------------------------------------------------------------
def _libcst_side(text: str):
    module = cst.parse_module(text)
    analysis = Analysis(module, wanted=(cst.Name, cst.Attribute))
    where = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)

    def start(node):
        found = where[node].start
        return found.line, found.column

    def key(scope: Scope):
        node = scope.node
        if scope.kind == "module":
            return ("module",)
        if scope.kind in ("function", "class"):
            return scope.kind, node.name.value, start(node.name)[0]
        if scope.kind == "lambda":
            return "lambda", start(node)
        # the first name of its first target: a tuple's place differs in the two trees (Python's holds its
        # parentheses), and so does a generator's that is a call's one argument
        return "comprehension", min(start(n) for n in _libcst_names(node.for_in.target))

    nodes = {}
    for occ in analysis.occurrences:
        span = where[occ.node]
        nodes[(type(occ.node).__name__, span.start.line, span.start.column, span.end.line, span.end.column)] = (
            occ.node, occ.scope)
    return analysis, key, nodes


def _libcst_names(node: cst.CSTNode) -> list[cst.Name]:
    found = [node] if isinstance(node, cst.Name) else []
    for child in node.children:
        found += _libcst_names(child)
    return found


def _tree_side(text: str):
    tree = ast.parse(text)
    table = TreeNames(tree, text)
    lines = lean.LINE.findall(text)

    def start(node):
        return node.lineno, lean.column(lines[node.lineno - 1], node.col_offset)

    def key(scope: Scope):
        node = scope.node
        if scope.kind == "module":
            return ("module",)
        if scope.kind in ("function", "class"):
            return scope.kind, node.name, node.lineno
        if scope.kind == "lambda":
            return "lambda", start(node)
        return "comprehension", min(start(n) for n in ast.walk(node.generators[0].target) if isinstance(n, ast.Name))

    nodes = {}
    for node, scope in table.names:
        nodes[(type(node).__name__, *start(node), node.end_lineno,
               lean.column(lines[node.end_lineno - 1], node.end_col_offset))] = (node, scope)
    return table, key, nodes


def _scopes(table, key) -> dict:
    out: dict = {}
    for scope in table.scopes:
        k = key(scope)
        assert k not in out, f"two scopes at {k}"
        out[k] = {
            "parent": None if scope.parent is None else key(scope.parent),
            "bindings": {name: sorted(((b.kind, b.qualname, b.fallback, b.conditional) for b in bindings), key=repr)
                         for name, bindings in scope.bindings.items()},
            "reads": dict(scope.reads), "globals": set(scope.globals), "nonlocals": set(scope.nonlocals),
        }
    return out


def compare(text: str, where: str = "<text>") -> int:
    """Asserts the two tables agree on `text`; returns how many names and attributes were compared."""
    analysis, libcst_key, libcst_nodes = _libcst_side(text)
    table, tree_key, tree_nodes = _tree_side(text)
    if not table.exact:
        return 0  # an identifier Python's parser normalized: the table says it is not LibCST's
    ours, theirs = _scopes(table, tree_key), _scopes(analysis, libcst_key)
    assert ours.keys() == theirs.keys(), where
    for k in ours:
        assert ours[k] == theirs[k], f"{where}: scope {k}"
    for place, (node, scope) in tree_nodes.items():
        assert place in libcst_nodes, f"{where}: no LibCST node at {place}"
        other, other_scope = libcst_nodes[place]
        assert tree_key(scope) == libcst_key(other_scope), f"{where}: scope of {place}"
        parts = TreeNames._dotted(node)
        if parts:
            mine, its = table.lookup(parts[0], scope), analysis.lookup(parts[0], other_scope)
            assert (mine and tree_key(mine)) == (its and libcst_key(its)), f"{where}: {parts[0]} at {place}"
        assert table.qualname(node, scope) == analysis.qualname(other, other_scope), f"{where}: {place}"
    return len(tree_nodes)


def compare_files(paths: list[Path], compare=compare) -> tuple[int, int]:
    """(how many of the files were compared, how many nodes) with `compare` over the files both parsers read."""
    files = nodes = 0
    for path in paths:
        text = readable(path)
        if text is not None:
            compared = compare(text, str(path))
            nodes += compared
            files += compared > 0
    return files, nodes


# -- the files ------------------------------------------------------------------------------------------------------
def test_fixtures_and_examples_give_the_same_table():
    files, names = compare_files(FILES)
    assert files >= 300 and names >= 20000, (files, names)


@pytest.mark.slow
def test_standard_library_sample_gives_the_same_table():
    files, names = compare_files(stdlib_sample())
    assert files >= 140, files


@pytest.mark.slow
@pytest.mark.skipif(not ECOSYSTEM.is_dir(), reason="the ecosystem's files are beside the checkout only")
def test_ecosystem_gives_the_same_table():
    files, _ = compare_files(sorted(ECOSYSTEM.rglob("*.py")))
    assert files >= 300, files


# -- the table's quirks, one by one ----------------------------------------------------------------------------------
CASES = {
    "imports": "import os.path\nimport torch_xla.core.xla_model as xm\nfrom torch import nn as n, cuda\n"
               "from . import sibling\nfrom .pkg import thing\nfrom os import *\nxm.xla_device(); os.path.join; n\n",
    "guarded import with fallbacks": "try:\n    import torch_xla as tx\n    HAS = True\nexcept ImportError:\n"
                                     "    tx = None\n    HAS = False\n    other: int = 3\n    name = 'x'\n"
                                     "    joined = 'a' 'b'\n    neg = -1\n    fl = 1.5\n    call = make.it()\n"
                                     "    ell = ...\ntx.device()\n",
    "none anywhere is a fallback": "import torch_xla as tx\nif cond:\n    tx = None\ntx.sync()\n",
    "globals and nonlocals": "import torch\ndef f():\n    global torch, late\n    import numpy as torch\n"
                             "    late = 1\n    def g():\n        nonlocal x\n        x = 2\n    x = 1\n"
                             "    torch.ones\ntorch.zeros\n",
    "class scopes are skipped": "import torch as t\nclass A:\n    t = 1\n    def m(self):\n        return t.ones()\n"
                                "    x = [t for _ in range(2)]\n",
    "decorators, defaults and annotations in the function's scope":
        "import functools as ft\n@ft.wraps(g)\ndef f(a: ft.T = ft.x, *args: int, b=lambda q=ft: q, **kw) -> ft.R:\n"
        "    return a\nclass C(ft.Base, metaclass=ft.Meta):\n    pass\n",
    "comprehensions and the walrus": "import torch\nys = [y := torch.ones(i) for i in range(3) if (z := i)]\n"
                                     "d = {k: v for k, v in torch.items()}\ng = (torch for torch in [1])\n"
                                     "def f():\n    return [(w := 1) for _ in []]\ns = {n for n in ns}\n",
    "reads that LibCST counts": "x = 1\nx += 2\ndel x\na.b = 1\nc[0] = 2\nprint(f'{x} {y!r:>{w}}')\n",
    "all spells reads": "from m import a, b, c, d\n__all__ = ['a', \"b\" 'c', f'{\"d\"}']\n__all__ += ['e']\n"
                        "__all__.extend(['f'])\n__all__ = [n for n in 'gh']\n",
    "loops, withs and handlers make bindings conditional":
        "for i, (j, *k) in x:\n    pass\nelse:\n    e = 1\nwhile True:\n    w = 1\nwith o as (p, q), r as s:\n"
        "    pass\ntry:\n    pass\nexcept E as err:\n    pass\nfinally:\n    fin = 1\nif a:\n    pass\nelif b:\n"
        "    el = 1\nelse:\n    if c:\n        nested = 1\n",
    "async": "import asyncio as aio\nasync def f():\n    async for a in aio.x():\n        pass\n"
             "    async with aio.lock() as l:\n        await aio.sleep(l)\n",
    "match": "match command:\n    case [x, *rest]:\n        pass\n    case {'k': v, **others}:\n        pass\n"
             "    case Point(x=0, y=yy) as pt:\n        pass\n    case _:\n        pass\n",
    "except star": "try:\n    import torch_xla as tx\nexcept* ImportError as group:\n    tx = None\n"
                   "    print(group)\nelse:\n    done = 1\n",
    "lambdas": "import torch as t\nf = lambda a, b=t.x: (lambda: a + t.y)\n",
}

CASES = for_this_python(CASES)


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_written_cases_give_the_same_table(text):
    assert compare(text) > 0


def test_an_identifier_python_normalizes_makes_the_table_inexact():
    assert not TreeNames(ast.parse("\u00b5 = 2\n"), "\u00b5 = 2\n").exact  # MICRO SIGN, read as GREEK SMALL MU
    assert TreeNames(ast.parse("\u00e4 = 1\n"), "\u00e4 = 1\n").exact  # already in its normal form
    assert compare("\u00e4 = 1\nprint(\u00e4)\n") == 3


def test_a_mismatch_fails_the_comparison(monkeypatch):
    """The comparison sees a table that differs: the walk made to forget that handlers hold fallbacks."""
    from neuron_migrate.engine import treenames

    text = CASES["guarded import with fallbacks"]
    monkeypatch.setattr(treenames.TreeNames, "_stand_in", lambda self, value: False)
    with pytest.raises(AssertionError):
        compare(text)


# -- generated modules -----------------------------------------------------------------------------------------------
PIECES = [
    "import torch_xla.core.xla_model as xm", "import torch", "from torch import cuda as cu", "xm = None", "xm = 1",
    "global xm", "nonlocal_name = xm.xla_device()", "torch.ones(1)", "cu.is_available()", "del torch",
    "torch += 1", "v = [xm for xm in range(2)]", "w = (q := torch)", "__all__ = ['xm', 'torch']",
    "f = lambda xm=xm: xm.sync()", "x: int = xm", "print(f'{torch.x}')", "a, *b = xm, torch",
]
BLOCKS = ["def f(a=torch):\n{body}", "class C:\n{body}", "if c:\n{body}", "try:\n    pass\nexcept ImportError:\n{body}",
          "for i in xs:\n{body}", "with m as n:\n{body}", "@xm.deco\ndef g():\n{body}", "while w:\n{body}"]


@st.composite
def modules(draw, depth: int = 2) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 5))):
        if depth and draw(st.booleans()):
            inner = draw(modules(depth - 1))
            body = "".join("    " + line + "\n" for line in inner.splitlines())
            lines.append(draw(st.sampled_from(BLOCKS)).format(body=body).rstrip("\n"))
        else:
            lines.append(draw(st.sampled_from(PIECES)))
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_generated_modules_give_the_same_table(text):
    try:
        compile(text, "<generated>", "exec")  # `global` after a use, `nonlocal` outside a function: not Python
    except SyntaxError:
        return
    compare(text)
