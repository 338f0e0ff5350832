"""LibCST behind one door (neuron_migrate/syntax/door.py): the tool's speed-ups change no result, are in place only
during the tool's own calls, and are left out for a LibCST release outside the tested range.

The comparison runs every fixture, 150 standard-library modules (every rule, the pre-filter off) and, where the bed
has it, torch_xla's own sources, once with LibCST unpatched (its public API only) and once patched: `check`
findings and `rewrite` outputs must be byte for byte the same. The oracle of the patched run is therefore stock
LibCST, not the patched classes (which a release that gave `If` its own `_codegen` would change unnoticed).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import given, strategies as st
from libcst._nodes.expression import _BaseParenthesizedNode
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from neuron_migrate import syntax
from neuron_migrate.engine import handlers
from neuron_migrate.engine import python as engine
from neuron_migrate.engine.discover import discover
from neuron_migrate.rules import all_rules
from neuron_migrate.settings import Settings
from neuron_migrate.syntax import codegen, door
from neuron_migrate.syntax import parse as cstparse
from tests.helpers import FIXTURES, cli
from tests.test_positions import stdlib_sample

TORCH_XLA = Path("/work/bed/corpus/torch_xla")
# (`check` of it runs the LibCST pass too: Python's tree decides no optimizer step)
LEGACY = b"import torch\nimport torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nxm.optimizer_step(opt)\n"

# What LibCST's classes hold of the methods the tool replaces: as `(module, qualified name)` per class and name.
DESCRIBE = """
import libcst as cst

NAMES = ("__hash__", "__init__", "__post_init__", "_codegen", "_parenthesize")


def describe():
    out, stack, seen = {}, [cst.CSTNode], set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
        held = {name: [getattr(cls.__dict__[name], "__module__", None), cls.__dict__[name].__qualname__]
                for name in NAMES if name in cls.__dict__}
        out[f"{cls.__module__}.{cls.__qualname__}"] = held
    return out
"""
_namespace: dict = {}
exec(DESCRIBE, _namespace)
describe = _namespace["describe"]


def stock_libcst() -> dict:
    """The description of LibCST as released, from a process that never imported the tool."""
    code = DESCRIBE + "\nimport json\nprint(json.dumps(describe()))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)


def test_libcst_is_stock_outside_the_tools_calls_and_patched_inside(monkeypatch):
    stock = stock_libcst()
    assert describe() == stock  # after importing the tool, before any call
    seen_inside = []
    real_transform = engine.transform

    def transform(*args, **kwargs):
        seen_inside.append((syntax.patched(), cst.CSTNode.__dict__["_codegen"] is codegen._codegen,
                            cst.If.__dict__.get("_codegen") is codegen._remembered_codegen,
                            _BaseParenthesizedNode.__dict__["_parenthesize"] is codegen._parenthesize,
                            cst.Name.__dict__["__hash__"] is object.__hash__))
        return real_transform(*args, **kwargs)

    monkeypatch.setattr(engine, "transform", transform)
    for rewrite in (False, True):
        result = engine.process_python("train.py", LEGACY, Settings(), rewrite)
        assert result.findings or result.new_bytes
        with pytest.raises(Exception):  # a call that ends by an exception takes its replacements out too
            engine.process_python("broken.py", b"import torch_xla\ndef f(:\n", Settings(), rewrite)
    assert seen_inside == [(True, True, True, True, True)] * 2
    assert describe() == stock
    assert not syntax.patched()
    node = cst.Name("x")
    assert hash(node) == id(node)  # LibCST's own Python hash, not the C one the tool uses inside
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")
    module = cst.parse_module("if a:\n    b = (1)\nelif c:\n    pass\n")
    assert module.code == "if a:\n    b = (1)\nelif c:\n    pass\n"  # stock code generation


def test_other_threads_build_checked_nodes_during_a_session():
    errors = []

    def build() -> None:
        try:
            cst.Name("not a name")
        except cst.CSTValidationError as exc:
            errors.append(exc)

    with syntax.session():
        assert syntax.patched()
        cstparse.parse_module("x = 1\n")
        thread = threading.Thread(target=build)
        thread.start()
        thread.join()
        with pytest.raises(cst.CSTValidationError):
            cst.Name("not a name")  # this thread, after the parse
    assert len(errors) == 1


def _built() -> list[cst.CSTNode]:
    return [cst.Name("x"), cst.Call(cst.Name("f"), [cst.Arg(cst.Integer("1"))]), cst.SimpleWhitespace(" "),
            cst.Comparison(cst.Name("a"), [cst.ComparisonTarget(cst.Is(), cst.Name("b"))])]


SAMPLES = [
    "import torch_xla.core.xla_model as xm\n\n\ndef f(a, *b, c=1, **d) -> int:  # c\n    if a is not b:\n"
    "        return xm.xla_device()[0][1:2]\n    x: int = a + b\n    return [y for y in d if y]\n",
    'class C(B, metaclass=M):\n    """doc"""\n    @property\n    def p(self):\n        return f"{self!r:>4}"\n',
    "try:\n    import a\nexcept (ImportError, OSError) as e:\n    a = None\nelse:\n    pass\n"
    "with open(p) as f, g:\n    async def h():\n        await x\nwhile not a: break\n",
]


def test_the_fast_constructors_build_the_same_nodes_and_still_check_the_ones_code_builds():
    stock_init = cst.Name.__dict__["__init__"]
    with syntax.session():
        cstparse._make_constructors()  # what a process does once it has parsed enough
        made = {cls.__name__ for cls, name, _, _ in door._PATCHES if name == "__init__"}
        assert made == set(cstparse._MOST_BUILT)  # every one of them, on the tested releases
        assert cst.Name.__dict__["__init__"] is not stock_init
        inside = _built()
        with pytest.raises(cst.CSTValidationError):
            cst.Name("not a name")  # built by code, not by the parser: checked
        with pytest.raises(TypeError):
            cst.Name()  # a required field
        with pytest.raises(TypeError):
            cst.Name("x", (), (), "extra")
        parsed = [cstparse.parse_module(text) for text in SAMPLES]
        first, second = cst.Call(cst.Name("f")), cst.Call(cst.Name("f"))
        assert first.whitespace_after_func is not second.whitespace_after_func  # a factory's default, new each time
    assert cst.Name.__dict__["__init__"] is stock_init
    outside = _built()
    assert all(a.deep_equals(b) for a, b in zip(inside, outside))  # every field, nested nodes too
    stock = [cst.parse_module(text) for text in SAMPLES]
    assert all(a.deep_equals(b) and a.code == b.code == text for a, b, text in zip(parsed, stock, SAMPLES))


def test_two_threads_of_the_tool_take_turns():
    inside, order = threading.Event(), []
    release = threading.Event()

    def first() -> None:
        with syntax.session():
            order.append("first in")
            inside.set()
            release.wait(10)
            order.append("first out")

    def second() -> None:
        inside.wait(10)
        with syntax.session():
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    inside.wait(10)
    threads[1].join(0.3)  # the second waits for the first to finish its file
    assert order == ["first in"]
    release.set()
    for t in threads:
        t.join(10)
    assert order == ["first in", "first out", "second in"]
    assert describe() == stock_libcst()


def test_a_nested_session_keeps_the_replacements_until_the_outer_one_ends():
    with syntax.session() as outer:
        with syntax.session() as inner:
            assert syntax.current() is inner and inner is not outer
        assert syntax.patched() and syntax.current() is outer
    assert not syntax.patched() and syntax.current() is None


def _packaging_says(version: str) -> bool:
    try:
        return Version(version) in SpecifierSet(syntax.TESTED)
    except InvalidVersion:
        return False


@given(st.lists(st.integers(0, 12), min_size=1, max_size=5).map(lambda parts: ".".join(map(str, parts))))
def test_the_tested_range_is_read_as_packaging_reads_it(version):
    """door._tested compares a release in numbers only without packaging: the same answer as packaging's."""
    assert door._tested(version) == _packaging_says(version)


@pytest.mark.parametrize("version", ["1.9.0rc1", "1.10.0rc1", "1.1.0.dev1", "1.9.0.post1", "1.9.0+local", "1.09",
                                     "v1.8.2", "1..2", "", "unknown", "1.8.2 ", "1.\u0668"])
def test_any_other_spelling_of_the_libcst_release_is_left_to_packaging(version):
    assert door._tested(version) == _packaging_says(version)


def test_a_release_outside_the_tested_range_runs_unpatched(monkeypatch):
    expected = engine.process_python("train.py", LEGACY, Settings(), True).new_bytes
    monkeypatch.setattr(door, "_libcst_version", lambda: "1.0.1")
    try:
        installed = syntax.install()
        assert not installed.fast
        assert "outside the tested range" in installed.reason and syntax.TESTED in installed.reason
        monkeypatch.setattr(door, "_put_in", lambda: pytest.fail("a method of LibCST's was replaced"))
        assert engine.process_python("train.py", LEGACY, Settings(), True).new_bytes == expected
    finally:
        monkeypatch.undo()
        assert syntax.install().fast


def test_doctor_says_whether_the_speed_ups_are_on():
    on = cli("doctor", "--no-device")
    assert f"info  neuron-migrate itself: LibCST {door._libcst_version()}, tested ({syntax.TESTED}): speed-ups on" \
        in on.stdout
    off = cli("doctor", "--no-device", env={door.STOCK_ENV: "1"})
    assert f"info  neuron-migrate itself: LibCST unpatched ({door.STOCK_ENV} is set)" in off.stdout


def test_the_tested_range_is_the_pin_in_pyproject():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"libcst{syntax.TESTED}"' in text


# -- unpatched and patched, side by side ----------------------------------------------------------------------

def _outcome(path: str, data: bytes, kind: str, rewrite: bool):
    try:
        result = handlers.process(path, data, kind, Settings(), rewrite)
    except Exception as exc:  # the same error both ways
        return type(exc).__name__, str(exc)
    return ([f.to_json() for f in result.findings], [f.to_json() for f in result.manual], result.new_bytes,
            result.applied, result.error)


def _outcomes(files: list[tuple[str, bytes, str]], patched: bool, monkeypatch) -> list:
    with monkeypatch.context() as m:
        if not patched:
            m.setattr(door, "_put_in", lambda: pytest.fail("a method of LibCST's was replaced"))
        assert syntax.install(patched=patched).fast is patched
        try:
            return [_outcome(path, data, kind, rewrite) for path, data, kind in files for rewrite in (False, True)]
        finally:
            syntax.install()


def _fixture_files() -> list[tuple[str, bytes, str]]:
    targets, _ = discover([str(FIXTURES)], frozenset(handlers.HANDLERS))
    return [(t.path, Path(t.path).read_bytes(), t.kind) for t in targets]


def _compare(files: list[tuple[str, bytes, str]], monkeypatch) -> None:
    unpatched = _outcomes(files, False, monkeypatch)
    patched = _outcomes(files, True, monkeypatch)
    labels = [(path, rewrite) for path, _, _ in files for rewrite in ("check", "rewrite")]
    assert [label for label, a, b in zip(labels, unpatched, patched) if a != b] == []
    assert any(isinstance(o, tuple) and len(o) == 5 and o[2] for o in patched)  # some rewrites were compared


def test_fixtures_give_the_same_findings_and_rewrites_unpatched_and_patched(monkeypatch):
    files = _fixture_files()
    assert len(files) > 200
    _compare(files, monkeypatch)


# Appended to each standard-library module, so that its findings are placed and the whole module is generated.
EPILOGUE = b"\n\ndef _migrated():\n    import torch_xla.core.xla_model as xm\n    xm.mark_step()\n"


@pytest.mark.slow
def test_stdlib_with_every_rule_gives_the_same_results_unpatched_and_patched(monkeypatch):
    monkeypatch.setattr(engine, "active_rules", lambda data, settings, path, present=None: list(all_rules()))
    files = [(str(p), p.read_bytes().rstrip(b"\n") + EPILOGUE, "python") for p in stdlib_sample()]
    assert len(files) == 150
    unpatched = _outcomes(files, False, monkeypatch)
    patched = _outcomes(files, True, monkeypatch)
    assert [(files[i // 2][0], i % 2) for i, (a, b) in enumerate(zip(unpatched, patched)) if a != b] == []
    complete = [o for o in patched if len(o) == 5 and not o[4]]
    assert len(complete) > 250 and all(o[0] or o[2] for o in complete)  # findings placed, modules generated


@pytest.mark.skipif(not TORCH_XLA.is_dir(), reason=f"torch_xla's sources are not at {TORCH_XLA}")
def test_torch_xla_sources_give_the_same_results_unpatched_and_patched(monkeypatch):
    targets, _ = discover([str(TORCH_XLA)], frozenset(handlers.HANDLERS))
    files = [(t.path, Path(t.path).read_bytes(), t.kind) for t in targets]
    assert len(files) > 100
    _compare(files, monkeypatch)


# `type(node) is cst.Call`, `type(x) is not cst.Name`, `type(x) in (cst.Name, cst.Attribute)`: the tool's exact type
# tests (an `isinstance` against LibCST's classes, which are ABCs, runs a Python `__instancecheck__` when it fails)
_EXACT_TEST = re.compile(r"type\([^()]*\) (?:is(?: not)?|(?:not )?in) (\(?cst\.\w+(?:, cst\.\w+)*\)?)")


def test_every_class_the_tool_tests_by_exact_type_has_no_subclass():
    """An exact type test means `isinstance` only while LibCST derives no class from the one tested: the tested
    release's classes named in every such test have no subclass."""
    package = Path(syntax.__file__).parent.parent
    named: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        for m in _EXACT_TEST.finditer(path.read_text(encoding="utf-8")):
            for name in re.findall(r"cst\.(\w+)", m.group(1)):
                named.setdefault(name, f"{path.relative_to(package)}: {m.group(0)}")
    assert len(named) > 30
    for name, where in named.items():
        cls = getattr(cst, name)
        assert isinstance(cls, type) and cls.__subclasses__() == [], where


def test_the_code_of_a_node_is_stock_libcsts_for_every_node():
    """`syntax.code(node)` skips LibCST's no-op hooks inside a session; the engine compares arms, tests and
    import names by it: it must be `Module([]).code_for_node(node)` for every node of every kind, parentheses,
    comments and continuations included, and a module's `.code` for a module."""
    sources = [p.read_text(errors="replace") for p in sorted(FIXTURES.rglob("*.py"))] + \
        [p.read_text() for p in stdlib_sample()[:8]] + \
        ['x = ((a)  .b (c ,)) # note\nif (y):  # why\n    pass\nelif z: w = \\\n    1\nelse:\n\tv = [\n  1, # one\n]\n']
    compared = 0
    for text in sources:
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError:
            continue  # the fixtures of bad input
        stock = [(node, _stock_code(node)) for node in _nodes(module)]
        with syntax.session():
            assert syntax.code(cst.Module(body=module.body)) == cst.Module(body=module.body).code
            for node, expected in stock:
                if isinstance(expected, type):  # a node that cannot be generated alone fails the same way
                    with pytest.raises(expected):
                        syntax.code(node)
                    continue
                assert syntax.code(node) == expected, type(node).__name__
                compared += 1
    assert compared > 100_000


def _stock_code(node: cst.CSTNode) -> str | type:
    try:
        return cst.Module([]).code_for_node(node)
    except Exception as exc:  # noqa: BLE001 - what stock LibCST raises is the expectation
        return type(exc)


def _nodes(module: cst.Module) -> list[cst.CSTNode]:
    out, stack = [], [module]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children)
    return out
