"""What the scope analysis records on its one walk (engine/names.py `Collector.strings` and the rest) is what a
walk of its own finds: the file facts and the monkeypatch check read it instead of walking the tree again."""

from __future__ import annotations

import warnings
from pathlib import Path

import libcst as cst
import pytest

from neuron_migrate.engine import patches
from neuron_migrate.engine.names import Analysis
from neuron_migrate.syntax import parse_module
from neuron_migrate.syntax.walk import walk

ROOT = Path(__file__).resolve().parents[1]
CASES = sorted(p for p in (ROOT / "fixtures").rglob("*.py"))

PATCHING = '''\
import builtins
import torch
import torch_xla.core.xla_model as xm

torch.save = xm.save
setattr(torch.distributed, "barrier", lambda *a: xm.rendezvous("b"))
setattr(obj, name, value)
builtins.print, x = xm.master_print, 1
quote = 'single' + "double" + """doc""" + f"{xm}" + b'bytes'
'''


class _Walk(cst.CSTVisitor):
    def __init__(self) -> None:
        self.strings, self.attributes = [], []

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.strings.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.attributes.append(node)


def _module(text: str) -> cst.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, "<fixture>", "exec", dont_inherit=True)
        return parse_module(text)
    except (SyntaxError, ValueError, cst.ParserSyntaxError):
        return None


def _texts() -> dict[str, str]:
    """The sample above and every fixture Python and LibCST read (the fixtures of bad input are left out)."""
    out = {"patching": PATCHING}
    for path in CASES:
        try:
            out[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return out


TEXTS = _texts()


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_the_analysis_records_what_a_walk_of_the_tree_finds(name):
    module = _module(TEXTS[name])
    if module is None:
        return  # a fixture of bad input: the engine reports it before any analysis
    _assert_as_walked(Analysis(module), module)


def _assert_as_walked(analysis: Analysis, module: cst.Module) -> _Walk:
    """The analysis's records of `module` are what a walk of their own finds (the walk is returned)."""
    found = _Walk()
    walk(module, found, tokens=False)
    assert [id(n) for n in analysis.strings] == [id(n) for n in found.strings]
    assert [id(n) for n in analysis.attributes] == [id(n) for n in found.attributes]
    finder = patches._Assignments()
    walk(module, finder, tokens=False)
    assert sorted(map(_key, patches._recorded(analysis))) == sorted(map(_key, finder.found))
    return found


def _key(found) -> tuple:
    target, value, node = found
    return (id(target[0]), target[1]) if isinstance(target, tuple) else (id(target), None), id(value), id(node)


def test_the_patching_sample_records_each_kind():
    analysis = Analysis(parse_module(PATCHING))
    recorded = patches._recorded(analysis)
    # `torch.save = ...` and the setattr with a literal name; not `setattr(obj, name, ...)` nor a tuple target
    assert [(t[1] if isinstance(t, tuple) else t.attr.value) for t, _, _ in recorded] == ["save", "barrier"]
    assert [s.value for s in analysis.strings] == ['"barrier"', '"b"', "'single'", '"double"', '"""doc"""', "b'bytes'"]


def test_an_analysis_that_replays_statements_records_them_as_a_walk_finds_them():
    """The analysis of a fixed module replays the top-level statements the edits left as they were (`reuse`):
    what the first analysis recorded of them joins what the new walk of the replaced ones finds, in file order."""
    module = parse_module(PATCHING)
    first = Analysis(module, record=True)
    body = list(module.body)
    body[3] = parse_module('setattr(torch, "load", xm.load)\n').body[0]  # `torch.save = xm.save` replaced
    fixed = module.with_changes(body=body)
    again = Analysis(fixed, reuse=first)
    found = _assert_as_walked(again, fixed)
    assert [t[1] if isinstance(t, tuple) else t.attr.value for t, _, _ in patches._recorded(again)] == \
        ["load", "barrier"]
    unrecorded = Analysis(fixed, reuse=Analysis(module))  # a first analysis that did not record: no replay
    assert unrecorded.strings is not None and len(unrecorded.strings) == len(found.strings)
