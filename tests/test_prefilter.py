"""Shortcuts that must never change a result: the byte pre-filter, the fast tree walk, pruned edit application.

The pre-filter skips a rule when none of its trigger byte strings occurs in the file. It is exact when every
finding a rule can make needs one of its triggers in the file; this holds for rules that match on
qualified names as long as a trigger is a component of each name, because the last component of a name
resolved through imports is always spelled in the file (in the import or in the attribute chain). The tests
run every rule on every file of a corpus with the pre-filter off and check that nothing changes.
"""

from __future__ import annotations

import inspect
import random
import re
import sysconfig
from pathlib import Path

import libcst as cst
import pytest

from bench.generate import module
from neuron_migrate import catalogue, suppress
from neuron_migrate import syntax
from neuron_migrate.syntax import codegen
from neuron_migrate.syntax import parse as cstparse
from neuron_migrate.engine import edits, leftovers, paths
from neuron_migrate.engine import python as engine
from neuron_migrate.engine.imports import LEGACY_ROOTS, STRANDED_CODE, UNUSED_CODE
from neuron_migrate.engine.names import Analysis, Collector
from neuron_migrate.rules import Present, all_rules
from neuron_migrate.settings import Settings
from neuron_migrate.syntax.walk import children, walk, wants_tokens
from tests.helpers import FIXTURES


def _corpus() -> list[tuple[str, bytes]]:
    python = [info for info in catalogue.catalogue().values() if info.example_file.endswith(".py")]
    out = [(f"{info.code}-before.py", info.before.encode()) for info in python]
    out += [(f"{info.code}-after.py", info.after.encode()) for info in python]
    rng = random.Random(7)
    out += [(f"synthetic-{kind}-{i}.py", module(kind, rng, 6).encode())
            for i in range(8) for kind in ("xla", "torch", "plain")]
    if FIXTURES.is_dir():
        out += [(str(p), p.read_bytes()) for p in sorted(FIXTURES.rglob("*.py"))]
    return out


# Spellings a byte pattern could miss: comments, continuations and line breaks between the parts of a device
# position or a module attribute, imports after `:` or `;`, parenthesised and continued name lists.
EDGE_CASES = [
    'import torch\nimport torch_xla\nx = torch.ones(2).to(\n    # the accelerator\n    "xla")\n',
    'import torch\nx = torch.ones(2).to(  # where\n    "xla:1")\n',
    'import torch\ndev = torch.device(\\\n    \'xla\')\nmodel = Net().to(dev)\n',
    'import torch\nwith torch.autocast(device_type = "xla", dtype=torch.bfloat16):\n    pass\n',
    'import torch\nrank = 0\nx = torch.randn(2, device=f"xla:{rank}")\n',
    'import torch\nx = torch.randn(2, device=("xla"))\n',
    'import torch\nmodel = Net()\nmodel = model.to(\'\'\'xla\'\'\')\n',
    'import torch\nBACKENDS = ("cpu", "cuda", "xla")\nx = torch.ones(2).to(BACKENDS[0])\n',
    'import torch.distributed as dist\ndist.init_process_group(backend="xla")\n',
    'from torch.distributed import init_process_group as ipg\nipg("nccl", "xla://")\n',
    'import torch\nfrom torch import \\\n    sparse\nsparse.mm(a, b)\n',
    'import torch\ny = torch. sparse.mm(a, b)\nz = (torch\n     .sparse.mm(a, b))\n',
    'import torch\ntry: from torch import sparse\nexcept ImportError: sparse = None\n',
    'import torch; from torch.func import vmap\nvmap(f)(x)\n',
    'import torch\nfrom torch.linalg import (\n    norm,\n    inv,\n)\ninv(a)\n',
]


CORPUS = _corpus() + [(f"edge-{i}.py", text.encode()) for i, text in enumerate(EDGE_CASES)]


def test_edge_cases_have_findings():
    """The edge cases are not vacuous: the rules find something in most of them (with the pre-filter on)."""
    found = [bool(engine.process_python(f"edge-{i}.py", text.encode(), Settings(), False).findings)
             for i, text in enumerate(EDGE_CASES)]
    assert sum(found) >= len(EDGE_CASES) - 2, found
# Codes the engine reports itself, and what must be in the file for each.
ENGINE_CODES = {
    leftovers.CODE: lambda data: any(t in data for t in leftovers.TRIGGERS),
    UNUSED_CODE: lambda data: any(r.encode() in data for r in LEGACY_ROOTS),
    STRANDED_CODE: lambda data: any(r.encode() in data for r in LEGACY_ROOTS),  # a torch_xla import that stays
    engine.MARKER_CODE: lambda data: edits.MARKER_PREFIX.encode() in data,
    suppress.UNUSED_CODE: lambda data: suppress.MAY_SUPPRESS.search(data) is not None,
    paths.NATIVE_BRANCH: lambda data: any(t in data for t in (b"xla", b"XLA", b"torch_neuronx")),  # XLA code held
}


def _result(path: str, data: bytes, rewrite: bool):
    try:
        r = engine.process_python(path, data, Settings(), rewrite)
    except Exception as exc:  # the same error must come with and without the pre-filter
        return type(exc).__name__, str(exc)
    return [f.to_json() for f in r.findings], r.new_bytes, r.applied


def _without_prefilter(monkeypatch) -> None:
    """Every rule and the NM199 step run on every file (NM199 is enabled, so every rule runs, enabled or not)."""
    monkeypatch.setattr(engine, "active_rules", lambda data, settings, path, present=None: list(all_rules()))
    monkeypatch.setattr(leftovers, "active", lambda present, settings, path: settings.enabled(leftovers.CODE, path))


@pytest.mark.parametrize("rewrite", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["check", "rewrite"])
def test_the_prefilter_changes_no_result(monkeypatch, rewrite):
    filtered = [_result(path, data, rewrite) for path, data in CORPUS]
    _without_prefilter(monkeypatch)
    for (path, data), expected in zip(CORPUS, filtered):
        assert _result(path, data, rewrite) == expected, path


def test_every_finding_comes_from_a_rule_whose_trigger_is_in_the_file(monkeypatch):
    owners: dict[str, list] = {}
    for rule in all_rules():
        for code in rule.codes:
            owners.setdefault(code, []).append(rule)
    present = {**{code: (lambda data, rules=rules: any(r.may_match(data) for r in rules))
                  for code, rules in owners.items()}, **ENGINE_CODES}
    _without_prefilter(monkeypatch)
    for path, data in CORPUS:
        try:
            result = engine.process_python(path, data, Settings(), False)
        except Exception:
            continue
        for finding in result.findings:
            assert present[finding.code](data), f"{path}: {finding.code} without its trigger"


def test_every_rule_declares_byte_triggers():
    for rule in all_rules():
        assert rule.triggers and all(isinstance(t, bytes) and t for t in (*rule.triggers, *rule.context)), \
            rule.__name__


def test_rules_declare_every_code_they_report():
    """A rule runs only when one of its declared codes is enabled: an undeclared code is missed by --select."""
    for rule in all_rules():
        reported = set(re.findall(r"report\(\s*[\"'](NM\d{3})[\"']", inspect.getsource(rule)))
        assert reported <= set(rule.codes), f"{rule.__name__} reports {sorted(reported - set(rule.codes))}"


def _stdlib_sample() -> list[bytes]:
    folder = Path(sysconfig.get_paths()["stdlib"])
    return [(folder / name).read_bytes() for name in ("argparse.py", "dataclasses.py", "inspect.py", "typing.py")]


@pytest.mark.slow  # LibCST's own walk, parse and rendering as the oracle: the slow part (about 5 s each)
def test_fast_walk_visits_like_libcst():
    wanted = tuple({t for r in all_rules() for t in r.node_types()}) + (cst.Name, cst.Comment, cst.Param)
    for data in [d for _, d in CORPUS] + _stdlib_sample():
        try:
            tree = cst.parse_module(data)
        except cst.ParserSyntaxError:
            continue
        theirs, ours = Collector(wanted), Collector(wanted)
        tree.visit(theirs)
        ours.collect(tree)
        assert [(o.node, o.parent, o.statement, o.small, o.block, o.in_loop, o.scope.node) for o in ours.occurrences] \
            == [(o.node, o.parent, o.statement, o.small, o.block, o.in_loop, o.scope.node) for o in theirs.occurrences]
        assert [(s.node, {k: [(b.kind, b.qualname) for b in v] for k, v in s.bindings.items()}, s.reads)
                for s in ours.scopes] == \
            [(s.node, {k: [(b.kind, b.qualname) for b in v] for k, v in s.bindings.items()}, s.reads)
             for s in theirs.scopes]


@pytest.mark.slow  # LibCST's own walk, parse and rendering as the oracle: the slow part (about 5 s each)
def test_a_walk_without_tokens_finds_the_same_scopes_and_nodes():
    """Whitespace, comments and punctuation hold no binding, read or node a rule asks for."""
    wanted = tuple({t for r in all_rules() for t in r.node_types()})
    assert not wants_tokens(wanted) and wants_tokens((cst.Comment,)) and wants_tokens((cst.CSTNode,))
    for data in [d for _, d in CORPUS] + _stdlib_sample():
        try:
            tree = cst.parse_module(data)
        except cst.ParserSyntaxError:
            continue
        full, lean, fused = Collector(wanted), Collector(wanted), Collector(wanted)
        walk(tree, full)
        walk(tree, lean, tokens=False)
        fused.collect(tree, tokens=False)
        assert fused.parents == lean.parents
        assert [(o.node, o.parent, o.statement, o.small, o.block, o.in_loop, o.scope.node) for o in fused.occurrences] \
            == [(o.node, o.parent, o.statement, o.small, o.block, o.in_loop, o.scope.node) for o in lean.occurrences]
        assert [(o.node, o.parent, o.statement, o.small, o.block, o.in_loop, o.scope.node) for o in lean.occurrences] \
            == [(o.node, o.parent, o.statement, o.small, o.block, o.in_loop, o.scope.node) for o in full.occurrences]
        assert [(s.node, {k: [(b.kind, b.qualname, b.fallback, b.conditional) for b in v] for k, v in s.bindings.items()},
                 s.reads, s.globals, s.nonlocals) for s in lean.scopes] == \
            [(s.node, {k: [(b.kind, b.qualname, b.fallback, b.conditional) for b in v] for k, v in s.bindings.items()},
              s.reads, s.globals, s.nonlocals) for s in full.scopes]
        assert len(lean.parents) < len(full.parents) or not tree.body


def _scope_table(analysis: Analysis) -> list:
    return [(s.kind, s.node, s.parent.node if s.parent else None, s.reads, s.globals, s.nonlocals,
             {k: [(b.kind, b.qualname, b.node, b.alias, b.fallback, b.conditional) for b in v]
              for k, v in s.bindings.items()}) for s in analysis.scopes]


def test_an_analysis_that_replays_untouched_statements_equals_a_full_one():
    """The import tidy-up analyses the edited module reusing the first analysis for the statements left alone."""
    for data in [d for _, d in CORPUS] + _stdlib_sample():
        try:
            module = cst.parse_module(data)
        except cst.ParserSyntaxError:
            continue
        first = Analysis(module, wanted=(cst.Call,), record=True)
        body = []
        for i, statement in enumerate(module.body):  # every other statement replaced by a fresh copy
            body.extend([statement] if i % 2 else cst.parse_module(module.code_for_node(statement)).body)
        edited = module.with_changes(body=body)
        full, replayed = Analysis(edited), Analysis(edited, reuse=first)
        assert _scope_table(replayed) == _scope_table(full)
        for node, parent in full.parents.items():
            assert replayed.parents[node] is parent


def test_a_cached_expression_is_shared_across_files_never_within_one():
    text = "torch.neuron.synchronize()"
    with syntax.session():  # one file
        first, again = cstparse.expression(text), cstparse.expression(text)
    assert first is not again and first.deep_equals(again)
    with syntax.session():  # the next file
        assert cstparse.expression(text) is first
        assert cstparse.expression(text) is again  # the second copy, parsed before
        third = cstparse.expression(text)
    assert third is not first and third is not again
    assert cstparse.expression(text) not in (first, again, third)  # outside a file: a node of its own


def test_a_rewritten_tree_holds_every_node_once(monkeypatch):
    """The engine keys its maps by node: a replacement node shared between two places would be mistaken. And the
    code of each tree is what LibCST gives, though statements left alone are not generated twice."""
    seen_trees = []
    real_render = codegen.Renderer.code

    def render(self, module):
        seen_trees.append(module)
        text = real_render(self, module)
        assert text == module.code  # statements remembered from the tree before the edits give the same code
        return text

    monkeypatch.setattr(codegen.Renderer, "code", render)
    for path, data in CORPUS:
        seen_trees.clear()
        _result(path, data, True)
        for tree in seen_trees:
            nodes, stack = [], [tree]
            while stack:
                node = stack.pop()
                nodes.append(node)
                stack.extend(children(node))
            assert len({id(n) for n in nodes}) == len(nodes), path


def test_the_renderer_writes_what_libcst_writes():
    """Statements remembered at any depth, the hooks skipped: the same text as `module.code`, also for a copy of
    the module with its statements reordered (remembered code reused at other places). The oracle is stock
    LibCST: `module.code` runs outside the session, where none of LibCST's methods is replaced."""
    assert syntax.fast()
    for data in [d for _, d in CORPUS] + _stdlib_sample():
        try:
            module = cst.parse_module(data)
        except cst.ParserSyntaxError:
            continue
        reordered = module.with_changes(body=list(reversed(module.body)))
        with syntax.session():
            assert syntax.patched()
            renderer = codegen.Renderer()
            texts = renderer.code(module), renderer.code(reordered)
        assert not syntax.patched()
        assert texts == (module.code, reordered.code)


@pytest.mark.slow  # LibCST's own walk, parse and rendering as the oracle: the slow part (about 5 s each)
def test_the_unchecked_parse_builds_the_same_trees_and_leaves_checks_on():
    for data in [d for _, d in CORPUS] + _stdlib_sample():
        text = data.decode("utf-8", "replace")
        try:
            expected = cst.parse_module(text)
        except cst.ParserSyntaxError:
            with syntax.session(), pytest.raises(cst.ParserSyntaxError):
                cstparse.parse_module(text)
            continue
        with syntax.session():
            parsed = cstparse.parse_module(text)
        assert parsed.deep_equals(expected)
    with syntax.session(), pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")  # nodes built after the parse are checked again, also inside the session


@pytest.mark.slow  # LibCST's own walk, parse and rendering as the oracle: the slow part (about 5 s each)
def test_applying_edits_only_along_their_paths_changes_no_rewrite(monkeypatch):
    pruned = [_result(path, data, True) for path, data in CORPUS]

    def everything(root, nodes, parents=None):
        out, stack = set(), [root]
        while stack:
            node = stack.pop()
            out.add(node)
            stack.extend(children(node))
        return out

    monkeypatch.setattr(edits, "with_ancestors", everything)
    assert [_result(path, data, True) for path, data in CORPUS] == pruned


@pytest.mark.parametrize("settings", [
    Settings(), Settings(select=frozenset({"NM510", "NM513", "NM520"})), Settings(select=frozenset({"NM3"})),
    Settings(ignore=frozenset({"NM1", "NM32"})), Settings(select={"NM4"}),  # a set, as a caller of the API may pass
    Settings(per_file_ignores=(("*_test.py", frozenset({"NM3"})), ("serve.py", frozenset({"NM5"})))),
])
def test_the_rules_a_selection_enables_are_found_once_and_are_those_of_every_file(settings):
    """`active_rules` takes the rules a selection enables from a table found once per selection, where no per-file
    ignores apply; the rules and their order are those each file's own question gives."""
    # every rule's trigger words, less those that hold the NM199 step's (which then runs every rule)
    everything = b" ".join(sorted({t for r in all_rules() for t in (*r.triggers, *r.context)
                                   if not any(step in t for step in leftovers.TRIGGERS)}))
    assert not leftovers.active(Present(everything), Settings(), "train.py")
    for path in ("train.py", "model_test.py", "serve.py"):
        expected = [r for r in all_rules() if any(settings.enabled(c, path) for c in r.codes)
                    and r.may_match(everything)]
        assert engine.active_rules(everything, settings, path) == expected
        assert engine.active_rules(everything, settings, path) == expected  # the second time from the table
    if settings.per_file_ignores:
        assert len(engine.active_rules(everything, settings, "model_test.py")) < len(
            engine.active_rules(everything, settings, "train.py"))
