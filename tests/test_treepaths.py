"""The code paths of Python's tree (engine/treepaths.py) are engine/paths.py's.

`Paths`, on LibCST's tree, is the oracle. For every file: the same file-wide answers (XLA optional, multi-backend,
two devices, a neuron library, the kinds tested, guarded and unguarded imports, a backend's own switch), the same
flags and availability functions, the same detections and conditions evaluated on another path; and for every name,
attribute and call of Python's tree, the node at the same place in LibCST's tree on the same path, in a detection
or not, and allowed or not for each family of codes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from libcst.metadata import MetadataWrapper, PositionProvider

from neuron_migrate.engine import lean, paths as P
from neuron_migrate.engine.context import FileContext
from neuron_migrate.engine.facts import MAIN_BLOCK
from neuron_migrate.engine.names import Analysis
from neuron_migrate.engine.sources import decode
from neuron_migrate.engine.treenames import TreeNames
from neuron_migrate.engine.treepaths import TreePaths
from neuron_migrate.settings import Settings
from tests.helpers import for_this_python
from tests.test_positions import stdlib_sample
from tests.test_treenames import ECOSYSTEM, FILES, compare_files

FAMILIES = (P.XLA_REWRITE, P.XLA_QUERY, P.CUDA_LEFTOVER)


def _place(kind: str, start, end) -> tuple:
    return kind, start[0], start[1], end[0], end[1]


def _libcst(text: str):
    module = cst.parse_module(text)
    analysis = Analysis(module, wanted=(cst.Name, cst.Attribute, cst.Call))
    ctx = FileContext("case.py", decode(text.encode()), module, analysis, Settings())
    found = ctx.facts.paths
    where = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)

    def place(node):
        span = where[node]
        return _place(type(node).__name__, (span.start.line, span.start.column), (span.end.line, span.end.column))

    def scope_key(scope):
        node = scope.node
        return ("module",) if scope.kind == "module" else (scope.kind, node.name.value, where[node.name].start.line)

    nodes = {place(occ.node): occ.node for occ in analysis.occurrences}
    return found, place, scope_key, nodes, analysis


def _tree(text: str):
    tree = ast.parse(text)
    names = TreeNames(tree, text)
    found = TreePaths(names, MAIN_BLOCK.search(text) is not None)  # `facts.program` of a file no project runs
    lines = lean.LINE.findall(text)

    def place(node):
        return _place(type(node).__name__, (node.lineno, lean.column(lines[node.lineno - 1], node.col_offset)),
                      (node.end_lineno, lean.column(lines[node.end_lineno - 1], node.end_col_offset)))

    def scope_key(scope):
        node = scope.node
        return ("module",) if scope.kind == "module" else (scope.kind, node.name, node.lineno)

    nodes = {place(n): n for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute, ast.Call))}
    return found, place, scope_key, nodes, names


def _facts(found, place, scope_key, names_of, function_name) -> dict:
    scopes = {id(s): s for s in names_of.scopes}
    return {
        "xla_optional": found.xla_optional, "multi_backend": found.multi_backend, "two_devices": found.two_devices,
        "neuron_library": found.neuron_library, "kinds": found.kinds, "unguarded": found.unguarded,
        "conditional": found.conditional, "own_switch": found.own_switch,
        "flags": {(scope_key(scopes[owner]), name): kind for (owner, name), kind in found.flags.items()},
        "functions": {function_name(node): kind for node, kind in found.functions.items()},
        "guarded imports": sorted(place(node)[1] for node in found.guarded_imports),
        # by place: the two trees name some node kinds apart (`UnaryOp`, LibCST's `UnaryOperation`)
        "detections": sorted(place(node)[1:] for node in found.detections),
        "evaluated on": sorted((place(node)[1:], path) for node, path in found.evaluated_on.items()),
    }


def compare(text: str, where: str = "<text>") -> int:
    """Asserts the two agree on `text`; returns how many nodes were compared."""
    theirs, their_place, their_scope, their_nodes, analysis = _libcst(text)
    ours, our_place, our_scope, our_nodes, names = _tree(text)
    if not ours.exact:
        return 0
    mine = _facts(ours, our_place, our_scope, names, lambda node: (node.name, node.lineno))
    its = _facts(theirs, their_place, their_scope, analysis,
                 lambda node: (node.name.value, their_place(node.name)[1]))
    for key in mine:
        assert mine[key] == its[key], f"{where}: {key}"
    for place, node in our_nodes.items():
        assert place in their_nodes, f"{where}: no LibCST node at {place}"
        other = their_nodes[place]
        assert ours.path_of(node) == theirs.path_of(other), f"{where}: path at {place}"
        assert ours.in_detection(node) == theirs.in_detection(other), f"{where}: detection at {place}"
        for family in FAMILIES:
            assert ours.allows(family, node) == theirs.allows(family, other), f"{where}: {family} at {place}"
    return len(our_nodes)


def _compare_files(paths: list[Path]) -> tuple[int, int]:
    return compare_files(paths, compare)


def test_fixtures_and_examples_give_the_same_paths():
    files, nodes = _compare_files(FILES)
    assert files >= 300 and nodes >= 30000, (files, nodes)


@pytest.mark.slow
def test_standard_library_sample_gives_the_same_paths():
    files, _ = _compare_files(stdlib_sample())
    assert files >= 140, files


@pytest.mark.slow
@pytest.mark.skipif(not ECOSYSTEM.is_dir(), reason="the ecosystem's files are beside the checkout only")
def test_ecosystem_gives_the_same_paths():
    files, _ = _compare_files(sorted(ECOSYSTEM.rglob("*.py")))
    assert files >= 300, files


# -- written cases, one per signal or quirk --------------------------------------------------------------------------
GUARD = ("import torch\ntry:\n    import torch_xla.core.xla_model as xm\n    HAS_XLA = True\nexcept ImportError:\n"
         "    HAS_XLA = False\n    xm = None\n")
CASES = {
    "a guard, its flag and the branches": GUARD + "def dev():\n    if HAS_XLA:\n        return xm.xla_device()\n"
                                                  "    elif torch.cuda.is_available():\n        return x.cuda()\n"
                                                  "    else:\n        if torch.backends.mps.is_available():\n"
                                                  "            return 'mps'\n    return torch.device('cpu')\n",
    "boolean operations of three and more": GUARD + "if HAS_XLA and ready and torch.cuda.is_available():\n"
                                                     "    x.cuda()\nok = a or torch.cuda.is_available() or b\n"
                                                     "y = torch.cuda.is_available() and x.cuda() and z.cuda()\n"
                                                     "w = not HAS_XLA or xm is None or t.device.type == 'xla'\n",
    "one-line blocks": "try: import torch_xla.core.xla_model as xm\nexcept ImportError: xm = None\n"
                       "if xm is not None: xm.mark_step(); x.cuda()\nelse: y.cuda()\n"
                       "def on_xla(): return xm is not None\nclass K: flag = torch.cuda.is_available()\n"
                       "for i in r: import torch_xla\n",
    "the rest of a function after a test that returns": GUARD + "def step(m):\n    if not HAS_XLA:\n"
                                                                "        return m.cuda()\n    xm.mark_step()\n"
                                                                "def value(t):\n    if t.device.type == 'xla':\n"
                                                                "        return t\n    return t.cuda()\n",
    "except star and finally": "try:\n    import torch_xla\nexcept* ImportError:\n    x.cuda()\nfinally:\n"
                               "    y.cuda()\ntry:\n    import torch_xla\nexcept ImportError:\n    pass\nelse:\n"
                               "    xm.mark_step()\nfinally:\n    z.cuda()\n",
    "availability functions": "def _xla():\n    '''Whether torch_xla is there.'''\n    try:\n        import torch_xla\n"
                              "        return True\n    except ImportError:\n        return False\n"
                              "def gpu():\n    return torch.cuda.device_count() > 0\n"
                              "if _xla():\n    a.to('xla')\nif gpu():\n    a.cuda()\n",
    "probes and helpers": "from importlib.util import find_spec\nfrom transformers import is_torch_tpu_available\n"
                          "from .utils import is_torch_xla_available, _XLA_AVAILABLE\n"
                          "HAS = find_spec(name='torch_xla') is not None\nif HAS:\n    a()\n"
                          "if is_torch_tpu_available(check_is_tpu=True):\n    b()\nif is_torch_xla_available():\n"
                          "    c()\nif _XLA_AVAILABLE:\n    d()\n",
    "a backend's own enumeration": "from .state import DistributedType\nif s.distributed_type == DistributedType.XLA:"
                                   "\n    s.sync()\nelif s.distributed_type in (DistributedType.MULTI_GPU, 'cuda'):\n"
                                   "    s.cuda()\n",
    "tests of device strings and arms": "dev = xm.xla_device() if HAS_XLA else 'cuda'\n"
                                        "if device.type == 'xla':\n    a()\nif d in ('cuda', 'gpu'):\n    b()\n"
                                        "if xm.xla_device_hw(d) == 'TPU':\n    c()\n",
    "an import in a program's function": "def main():\n    import torch_xla.core.xla_model as xm\n    x.cuda()\n"
                                         "    for i in r:\n        pass\n    else:\n        import torch_xla\n"
                                         "if __name__ == '__main__':\n    main()\n",
    "a switch to the neuron device": "import torch\ndef place(m, use):\n    if use:\n        return m.to('neuron')\n"
                                     "    return m.cuda()\n",
    "an elif chain on the neuron device in every arm": "import torch\ndef place(m, kind):\n    if kind == 1:\n"
                                                       "        return m.to('neuron')\n    elif kind == 2:\n"
                                                       "        return m.to('neuron')\n",
    "a one-line arm, its test on the neuron device": "import torch\ndef place(m):\n"
                                                     "    if m.device == torch.neuron.current_device(): m.cuda()\n"
                                                     "    else: return m.to('neuron')\n",
    "a library that uses the neuron device in functions": "import torch\nDEFAULT = 1\n"
                                                           "def place(m):\n    return m.to('neuron')\n",
    "a module that uses it at module level": "import torch\nm = M().to('neuron')\ndef f():\n    return 1\n",
    "two devices": "import torch_xla.core.xla_model as xm\nd = xm.xla_device()\nx = y.to('cuda')\n",
    "a tpu program": "import os\ntry:\n    import torch_xla\nexcept ImportError:\n    pass\n"
                     "if os.environ.get('PJRT_DEVICE') == 'TPU':\n    a()\n",
}

CASES = for_this_python(CASES)


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_written_cases_give_the_same_paths(text):
    assert compare(text) > 0


def test_a_comment_spelling_the_neuron_device_or_a_continued_header_makes_the_paths_inexact():
    text = "import torch\n# m.to('neuron') in a comment\ndef place(m):\n    return m.to('neuron')\n"
    assert not TreePaths(TreeNames(ast.parse(text), text), False).exact
    assert compare(text) == 0
    continued = "if x: \\\n    y = 1\n"  # a header continued over a line: its one-line block is not told by its text
    assert not TreePaths(TreeNames(ast.parse(continued), continued), False).exact
    assert TreePaths(TreeNames(ast.parse(CASES["a switch to the neuron device"]),
                               CASES["a switch to the neuron device"]), False).exact


@pytest.mark.parametrize("method", ["_one_line", "_elif"])
def test_a_walk_that_forgets_a_quirk_fails_the_comparison(method, monkeypatch):
    """The comparison sees the walk go wrong: one-line blocks read as blocks, `elif` read as `else: if`."""
    monkeypatch.setattr(TreePaths, method, lambda self, node: False)
    with pytest.raises(AssertionError):
        for text in CASES.values():
            compare(text)


# -- generated modules -----------------------------------------------------------------------------------------------
PIECES = [
    "import torch_xla.core.xla_model as xm", "HAS_XLA = True", "HAS_XLA = False", "xm = None", "x.cuda()",
    "d = xm.xla_device()", "t = torch.cuda.is_available()", "return x.cuda()", "return HAS_XLA",
    "y = a if HAS_XLA else b.cuda()", "z = HAS_XLA and xm.mark_step() or x.cuda()", "m.to('neuron')",
    "ok = t.device.type == 'xla'", "import torch", "from importlib.util import find_spec", "pass",
]
HEADS = ["if HAS_XLA:", "if torch.cuda.is_available():", "if not HAS_XLA:", "if xm is not None:",
         "if dev.type == 'cuda':", "if find_spec('torch_xla'):", "while w:", "for i in r:", "with ctx() as c:"]
BLOCKS = ["try:\n{body}except ImportError:\n{body}", "def f():\n{body}", "{head}\n{body}",
          "{head}\n{body}else:\n{body}", "{head}\n{body}elif torch.backends.mps.is_available():\n{body}"]


@st.composite
def modules(draw, depth: int = 2) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        if depth and draw(st.booleans()):
            inner = draw(modules(depth - 1))
            body = "".join("    " + line + "\n" for line in inner.splitlines())
            block = draw(st.sampled_from(BLOCKS)).format(head=draw(st.sampled_from(HEADS)), body=body)
            lines.append(block.rstrip("\n"))
        else:
            lines.append(draw(st.sampled_from(PIECES)))
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_generated_modules_give_the_same_paths(text):
    try:
        compile(text, "<generated>", "exec")  # `return` outside a function: not Python
    except SyntaxError:
        return
    compare(text)
