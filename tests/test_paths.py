"""Code paths (engine/paths.py): the XLA path is rewritten, every other hardware path stays as written.

Properties over every fixture: each line the paths fact puts on a TPU, CUDA, MPS, XPU or CPU-fallback path is
unchanged in the rewrite output (lines mapped by a diff); a second rewrite of any output changes nothing; no
`torch.neuron.` is reached on a path that runs without Neuron. Then tables of small cases for the signals.
"""

from __future__ import annotations

import difflib

import libcst as cst
import pytest
from hypothesis import given, settings, strategies as st

from neuron_migrate.engine import paths as P
from neuron_migrate.engine.context import FileContext
from neuron_migrate.engine.names import Analysis
from neuron_migrate.engine.sources import decode
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, rewrite_bytes, rewrite_text

CASES = sorted(p for p in FIXTURES.glob("*/*.py") if not p.name.endswith(".expected.py"))


def _paths(text: str) -> tuple[P.Paths, cst.metadata.MetadataWrapper]:
    module = cst.parse_module(text)
    wrapper = cst.metadata.MetadataWrapper(module, unsafe_skip_copy=True)
    ctx = FileContext("case.py", decode(text.encode()), module, Analysis(module), Settings())
    return ctx.facts.paths, wrapper


def line_paths(text: str, guards: list | None = None) -> dict[int, str]:
    """{line: path} for the lines the paths fact puts on a path (the innermost node that covers a line wins);
    `guards` receives the line spans of the guarded torch_xla imports (`try` statements)."""
    found, wrapper = _paths(text)
    where = wrapper.resolve(cst.metadata.PositionProvider)
    if guards is not None:
        parents = found.ctx.analysis.parents
        for small in found.guarded_imports:
            guard = parents.get(parents.get(parents.get(small)))
            if isinstance(guard, cst.Try) and guard in where:
                guards.append(range(where[guard].start.line, where[guard].end.line + 1))
    parents = found.ctx.analysis.parents

    def depth(node):
        n = 0
        while node is not None:
            node, n = parents.get(node), n + 1
        return n

    spans = []
    for node, (path, _branch) in found._path.items():
        pos = where.get(node)
        # the condition of a branch for another backend runs on the path that holds the `if` (NM239 rewrites a
        # torch_xla query there): its lines are that path's
        path = found.evaluated_on.get(node, path)
        if pos is not None:
            spans.append((-(pos.end.line - pos.start.line), depth(node), pos.start.line, pos.end.line, path))
    out: dict[int, str] = {}
    for _size, _depth, start, end, path in sorted(spans):  # widest (then outermost) first: inner nodes overwrite
        for line in range(start, end + 1):
            out[line] = path
    return out


def unchanged_lines(old: str, new: str) -> set[int]:
    """Lines of `old` (1-based) that the diff to `new` keeps as they are."""
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    kept: set[int] = set()
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            kept.update(range(i1 + 1, i2 + 1))
    return kept


@pytest.mark.parametrize("style", ["neuron", "accelerator"])
@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_line_on_a_non_xla_path_is_unchanged(case, style):
    data = case.read_bytes()
    try:
        text = data.decode("utf-8")
        cst.parse_module(text)
    except (UnicodeDecodeError, cst.ParserSyntaxError):
        pytest.skip("not a parseable UTF-8 case (encoding and syntax fixtures)")
    out = rewrite_bytes(data, path=str(case), device_style=style)
    if out is None:
        return
    kept = unchanged_lines(text, out.decode("utf-8"))
    guards: list[range] = []
    lines = line_paths(text, guards)
    gone = {line for span in guards if not kept.intersection(span) for line in span}  # a guard nothing needed
    if style == "neuron":
        gone |= _folded_arms(text, kept)
    changed = sorted(line for line, path in lines.items() if path in P.OTHER_PATHS and line not in kept | gone)
    assert not changed, f"{case.name}: lines on a non-XLA path were changed: {changed}"


def _folded_arms(text: str, kept: set[int]) -> set[int]:
    """The lines of the `if` statements that test `xr.device_type()` (NM248) and that the rewrite replaced by the
    arm that runs: in the default device style the test is a constant after the move, so the other arm is dead
    (the fix is unsafe for that reason). The `if` line itself went; the arm that runs is checked by the diff."""
    module = cst.parse_module(text)
    wrapper = cst.metadata.MetadataWrapper(module, unsafe_skip_copy=True)
    where = wrapper.resolve(cst.metadata.PositionProvider)
    out: set[int] = set()
    for node in where:
        if type(node) is cst.If and "device_type()" in cst.Module(body=[]).code_for_node(node.test):
            start, end = where[node].start.line, where[node].end.line
            if start not in kept:
                out.update(range(start, end + 1))
    return out


@pytest.mark.parametrize("style", ["neuron", "accelerator"])
@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_second_rewrite_changes_nothing(case, style):
    out = rewrite_bytes(case.read_bytes(), path=str(case), device_style=style)
    if out is not None:
        assert rewrite_bytes(out, path=str(case), device_style=style) is None


@pytest.mark.parametrize("style", ["neuron", "accelerator"])
@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_neuron_call_on_a_path_without_neuron(case, style):
    out = rewrite_bytes(case.read_bytes(), path=str(case), device_style=style)
    if out is None:
        return
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError:
        pytest.skip("not a UTF-8 case")
    lines = line_paths(text)
    bad = [n for n, line in enumerate(text.splitlines(), 1)
           if "torch.neuron." in line.split("#")[0] and lines.get(n) in P.OTHER_PATHS]
    assert not bad, f"{case.name}: `torch.neuron.` on a path that runs without Neuron, lines {bad}"


# -- the signals -----------------------------------------------------------------------------------------------

GUARD = "import torch\ntry:\n    import torch_xla.core.xla_model as xm\nexcept ImportError:\n    xm = None\n"


def path_of_line(text: str, needle: str) -> str:
    lines = line_paths(text)
    number = next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)
    return lines.get(number, P.COMMON)


@pytest.mark.parametrize("code, needle, path", [
    (GUARD + "if xm is not None:\n    a = 1\nelse:\n    b = 2\n", "a = 1", P.XLA),
    (GUARD + "if xm is not None:\n    a = 1\nelse:\n    b = 2\n", "b = 2", P.FALLBACK),
    (GUARD + "if xm is None:\n    b = 2\nelif torch.cuda.is_available():\n    c = 3\n", "c = 3", P.CUDA),
    (GUARD + "if xm is not None:\n    a = 1\nelif torch.cuda.is_available():\n    c = 3\nelse:\n    d = 4\n",
     "d = 4", P.FALLBACK),
    ("import torch\nif torch.cuda.is_available():\n    c = 3\nelse:\n    d = 4\n", "d = 4", P.COMMON),
    ("import torch\nif torch.cuda.is_available():\n    c = 3\nelse:\n    d = 4\n", "c = 3", P.CUDA),
    ("import torch as th\nx = th.device(\n    'cuda' if th.cuda.is_available()\n    else 'cpu'\n)\n", "'cuda' if", P.CUDA),
    ("import torch as th\nx = th.device(\n    'cuda' if th.cuda.is_available()\n    else 'cpu'\n)\n", "else 'cpu'", P.COMMON),
    ("try:\n    import torch_xla\n    HAS_XLA = True\nexcept ImportError:\n    HAS_XLA = False\n"
     "def f():\n    if not HAS_XLA:\n        return 0\n    x = 1\n", "x = 1", P.XLA),
    ("try:\n    import torch_xla\n    HAS_XLA = True\nexcept ImportError:\n    HAS_XLA = False\n"
     "def f():\n    if not HAS_XLA:\n        return 0\n    x = 1\n", "HAS_XLA = False", P.FALLBACK),
    ("def avail():\n    try:\n        import torch_xla\n        return True\n    except ImportError:\n"
     "        return False\nif avail():\n    a = 1\n", "a = 1", P.XLA),
    ("from accelerate.utils import is_torch_xla_available as xla_ok\nif xla_ok(check_is_tpu=True):\n    t = 1\n",
     "t = 1", P.TPU),
    ("import torch_xla.runtime as xr\nif xr.device_type() == 'TPU':\n    t = 1\n", "t = 1", P.TPU),
    ("import os\nif os.environ.get('PJRT_DEVICE') == 'TPU':\n    t = 1\n", "t = 1", P.TPU),
    ("import os\nif os.environ['DEVICE'] == 'xla':\n    a = 1\n", "a = 1", P.XLA),
    ("def f(device):\n    if 'xla' in str(device):\n        a = 1\n", "a = 1", P.XLA),
    ("import torch\nif torch.backends.mps.is_available():\n    m = 1\nelif torch.xpu.is_available():\n    x = 2\n",
     "x = 2", P.XPU),
    ("from lightning.fabric.accelerators.xla import _XLA_AVAILABLE\nif _XLA_AVAILABLE:\n    a = 1\n", "a = 1", P.XLA),
    ("import importlib.util\nHAS = importlib.util.find_spec('torch_xla') is not None\nif HAS:\n    a = 1\n",
     "a = 1", P.XLA),
    # a value's device, not what is installed: the function goes on for every device
    ("def f(t):\n    if t.device.type == 'xla':\n        return t\n    x = 1\n", "x = 1", P.COMMON),
    # a look-alike: a local `xm` that is no torch_xla import
    ("xm = object()\nif xm is not None:\n    a = 1\n", "a = 1", P.COMMON),
])
def test_paths_signals(code, needle, path):
    assert path_of_line(code, needle) == path


def test_an_availability_call_outside_a_condition_is_on_its_backend_path():
    code = "import torch\ndef env():\n    cuda_ok = torch.cuda.is_available()\n    return cuda_ok\n"
    assert path_of_line(code, "cuda_ok =") == P.CUDA


def test_the_right_operand_of_and_is_on_the_tested_path():
    code = "import torch\nok = (torch.cuda.is_available()\n      and torch.cuda.is_bf16_supported())\n"
    assert path_of_line(code, "is_bf16_supported") == P.CUDA


@pytest.mark.parametrize("code, optional, multi", [
    (GUARD, True, False),
    ("import torch_xla.core.xla_model as xm\nimport torch\nif torch.cuda.is_available():\n    pass\n", False, False),
    (GUARD + "if torch.cuda.is_available():\n    pass\nif torch.backends.mps.is_available():\n    pass\n", True, True),
    (GUARD + "import os\nif os.environ.get('PJRT_DEVICE') == 'TPU':\n    pass\n", True, True),
    # the package's own backend switch: accelerate's relative helper import, Lightning's private flag
    ("from .utils import is_torch_xla_available\nif is_torch_xla_available():\n    import torch_xla\n", True, True),
    ("from lightning.fabric.accelerators.xla import _XLA_AVAILABLE\ndef f():\n    if _XLA_AVAILABLE:\n"
     "        import torch_xla\n", True, True),
    ("from accelerate.utils import is_torch_xla_available\nif is_torch_xla_available():\n    import torch_xla\n",
     True, False),
])
def test_file_facts(code, optional, multi):
    found, _ = _paths(code)
    assert (found.xla_optional, found.multi_backend) == (optional, multi)


# -- detection keeps working -------------------------------------------------------------------------------------

def test_a_collapsed_detection_imports_torch_neuronx_where_torch_xla_was():
    code = ("import torch\n\n\ndef get_device():\n    try:\n        import torch_xla.core.xla_model as xm\n"
            "        return xm.xla_device()\n    except ImportError:\n        return torch.device('cpu')\n")
    out = rewrite_text(code)
    assert "        import torch_neuronx  # noqa: F401\n        return torch.device('neuron')\n" in out
    assert "    except ImportError:\n        return torch.device('cpu')\n" in out


def test_an_alias_tested_as_a_flag_is_kept():
    code = GUARD + "\n\ndef dev():\n    if xm is not None:\n        return xm.xla_device()\n    return None\n"
    out = rewrite_text(code)
    assert "    import torch_neuronx as xm\nexcept ImportError:\n    xm = None\n" in out
    assert "NM199" not in out


def test_an_alias_still_used_keeps_torch_xla():
    code = GUARD + "\n\ndef mem(d):\n    if xm is not None:\n        return xm.get_memory_info(d)\n"
    out = rewrite_text(code)
    assert "import torch_xla.core.xla_model as xm" in out


def test_a_guard_nothing_depends_on_goes_whole():
    code = GUARD + "\ndevice = xm.xla_device()\n"
    out = rewrite_text(code)
    assert "torch_xla" not in out and "torch_neuronx" not in out and "try:" not in out


def test_a_probe_follows_the_migrated_import():
    code = ("import importlib.util\nimport torch\nHAS_XLA = importlib.util.find_spec('torch_xla') is not None\n"
            "def dev():\n    if HAS_XLA:\n        import torch_xla.core.xla_model as xm\n        return xm.xla_device()\n"
            "    return torch.device('cpu')\n")
    out = rewrite_text(code)
    assert "find_spec('torch_neuronx')" in out


def test_in_a_multi_backend_file_the_xla_branch_gets_one_marker_and_stays():
    code = (GUARD + "\n\ndef sync():\n    if xm is not None:\n        xm.mark_step()\n        xm.wait_device_ops()\n"
            "    elif torch.cuda.is_available():\n        torch.cuda.synchronize()\n"
            "    elif torch.backends.mps.is_available():\n        torch.mps.synchronize()\n")
    out = rewrite_text(code)
    assert out.count("TODO(neuron-migrate NM111)") == 1
    assert out.replace(next(l for l in out.splitlines(True) if "NM111" in l), "") == code


_DEVICE_SPELLINGS = [".to(", ".to( ", "device=", "device_type =", ".device(", "autocast(\n", "torch.", "'", '"',
                     "neuron", "neuron:1", "Neuron", "neur", "on", " ", "#", "\n", "x"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_DEVICE_SPELLINGS), max_size=12).map("".join) | st.text(max_size=40))
def test_the_word_neuron_stands_before_the_device_regex(text):
    """`uses_neuron_device` asks the regex only where the text holds "neuron": the same answer, on texts made of
    the regex's own pieces and on any text."""
    from neuron_migrate.engine.facts import NEURON_DEVICE_USE, uses_neuron_device

    assert uses_neuron_device(text) == (NEURON_DEVICE_USE.search(text) is not None)


def test_every_spelling_of_the_device_regex_holds_the_word_neuron():
    """What makes the word a safe look-out: each alternative of the regex, as Python's own regex parser reads it,
    holds "neuron" among its literal characters (a new spelling without the word fails here)."""
    try:
        import re._parser as parser
    except ImportError:  # Python 3.10
        import sre_parse as parser

    from neuron_migrate.engine.facts import NEURON_DEVICE_USE

    def literal_runs(items) -> list[str]:
        runs, current = [], ""
        for op, value in items:
            if op is parser.LITERAL:
                current += chr(value)
            else:
                runs.append(current)
                current = ""
        return [*runs, current]

    (op, (_, branches)), = parser.parse(NEURON_DEVICE_USE.pattern)[:]
    assert op is parser.BRANCH and len(branches) >= 2
    assert all(any("neuron" in run for run in literal_runs(list(branch))) for branch in branches)
