"""Property tests: generated programs that mix legacy idioms with ordinary code.

Whatever the mix, the rewrite must give code that parses, a second run must change nothing, and every line
that holds no idiom must come back byte-identical and in order (the rewrite may only insert lines around
them: imports, compile calls, TODO markers).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst
from hypothesis import HealthCheck, given, settings, strategies as st

from neuron_migrate.engine.python import process_python
from neuron_migrate.settings import Settings
from tests.helpers import assert_other_lines_kept, rewrite_bytes

# How a program reaches torch_xla's model module, and how it then spells each API.
IMPORT_STYLES = {
    "alias": (["import torch_xla.core.xla_model as xm"], "xm.xla_device", "xm.mark_step", "xm.optimizer_step"),
    "from-module": (["from torch_xla.core import xla_model as xm"], "xm.xla_device", "xm.mark_step",
                    "xm.optimizer_step"),
    "dotted": (["import torch_xla.core.xla_model"], "torch_xla.core.xla_model.xla_device",
               "torch_xla.core.xla_model.mark_step", "torch_xla.core.xla_model.optimizer_step"),
    "names": (["from torch_xla.core.xla_model import xla_device, mark_step, optimizer_step"], "xla_device",
              "mark_step", "optimizer_step"),
    "renamed": (["from torch_xla.core.xla_model import xla_device as get_dev, mark_step as step_graph",
                 "from torch_xla.core.xla_model import optimizer_step as opt_step"],
                "get_dev", "step_graph", "opt_step"),
    "guarded": (["try:", "    import torch_xla.core.xla_model as xm", "except ImportError:", "    xm = None"],
                "xm.xla_device", "xm.mark_step", "xm.optimizer_step"),
    "top-level": (["import torch_xla"], "torch_xla.device", "torch_xla.sync", None),
    "feature-test": (["if is_torch_xla_available():", "    import torch_xla.core.xla_model as xm"],
                     "xm.xla_device", "xm.mark_step", "xm.optimizer_step"),
}


@dataclass
class Line:
    text: str  # without indentation
    idiom: bool


def _idioms(style: str) -> list[st.SearchStrategy[list[Line]]]:
    _, device, step, opt_step = IMPORT_STYLES[style]
    out = [
        st.sampled_from(["device", "dev", "xla_dev"]).map(lambda n: [Line(f"{n} = {device}()", True)]),
        st.just([Line(f"{step}()", True)]),
        st.sampled_from(['"xla"', "'xla:0'", '"xla:1"']).map(
            lambda s: [Line(f"model = Net().to({s})", True)]),
        st.sampled_from(['"xla"', "'xla:0'"]).map(lambda s: [Line(f"dev = torch.device({s})", True)]),
        st.sampled_from(['"openxla"', "'openxla'"]).map(
            lambda s: [Line(f"compiled = torch.compile(model, backend={s})", True)]),
    ]
    if opt_step is not None:
        out.append(st.sampled_from(["optimizer", "self.opt", "opts[0]"]).map(
            lambda o: [Line(f"{opt_step}({o})", True)]))
    return out


def _ordinary(counter: list[int]) -> st.SearchStrategy[list[Line]]:
    """Code that must never change: look-alikes of the idioms included."""
    def fresh(template: str) -> list[Line]:
        counter[0] += 1
        n = counter[0]
        return [Line(t.format(n=n), False) for t in template.split("\n")]
    templates = [
        "value_{n} = compute({n}) * 2",
        "# a comment about mark_step and xla, number {n}\nnoted_{n} = True",
        "table_{n} = {{\"xla\": {n}, 'cpu': 0}}",
        "pattern_{n} = re.compile(r\"xla_device\\d+\")",
        "text_{n} = 'xm.mark_step() in a string {n}'",
        "helpers.mark_step({n})",
        "result_{n} = other.optimizer_step(optimizer, {n})",
        "if flag_{n}:\n    counter_{n} = {n}",
        "for item_{n} in range({n}):\n    total_{n} = item_{n}",
        "def local_{n}(xm):\n    xm.mark_step()\n    return xm.xla_device()",
        "class Thing{n}:\n    device = 'cpu'\n    def sync_{n}(self):\n        return {n}",
        "async def fetch_{n}():\n    await asyncio.sleep({n})",
        "long_{n} = [" + ", ".join(str(i) for i in range(40)) + "]  # {n}",
        "name_{n} = f\"xla-{{{n}}}\"  ",
        "with open('f{n}') as fh_{n}:\n    data_{n} = fh_{n}.read()",
        "lambda_{n} = lambda x: x + {n}",
    ]
    return st.sampled_from(templates).map(fresh)


WRAPPERS = ("if flag_{n}:", "for step_{n} in range(3):", "with context_{n}():", "while running_{n}:",
            "try:")


def _indented(lines: list[Line]) -> list[Line]:
    return [Line("    " + line.text, line.idiom) for line in lines]


@st.composite
def _wrapped(draw, inner, counter: list[int]) -> list[Line]:
    """Items inside a compound statement, so idioms sit in nested blocks too."""
    counter[0] += 1
    header = draw(st.sampled_from(WRAPPERS)).format(n=counter[0])
    body = [x for block in draw(st.lists(inner, min_size=1, max_size=3)) for x in block]
    # an `if` whose body is all idioms goes with them when they are all removed (its test reads a name)
    lines = [Line(header, header.startswith("if ") and all(line.idiom for line in body)), *_indented(body)]
    if header == "try:":
        lines += [Line("except ValueError:", False), Line("    pass", False)]
    return lines


@st.composite
def programs(draw):
    style = draw(st.sampled_from(sorted(IMPORT_STYLES)))
    counter = [0]
    imports, *_ = IMPORT_STYLES[style]
    # the detection helper goes with the `if is_torch_xla_available():` guard that is its only reader (no import is
    # left unused); in the other styles nothing reads it and it stays
    lines = [Line('"""A training script."""', False), Line("import re", False), Line("import torch", False),
             Line("from transformers.utils import is_torch_xla_available", style == "feature-test")]
    # Function-local imports: each function imports what it uses, the module level holds no idiom.
    local = style not in ("guarded", "feature-test") and draw(st.booleans())
    header = [Line(t, True) for t in imports]
    ordinary = _ordinary(counter)
    simple = st.one_of(*_idioms(style), ordinary)
    item = st.one_of(simple, _wrapped(simple, counter), _wrapped(_wrapped(simple, counter), counter))
    module_item = st.one_of(ordinary, _wrapped(ordinary, counter)) if local else item
    if not local:
        lines += header
    for _ in range(draw(st.integers(0, 4))):
        lines += draw(module_item)
    for _ in range(draw(st.integers(1 if local else 0, 3))):
        counter[0] += 1
        lines.append(Line(f"def func_{counter[0]}(model, optimizer):", False))
        body = [x for block in draw(st.lists(item, min_size=1, max_size=4)) for x in block]
        lines += _indented((header if local else []) + body)
    lines += draw(st.lists(module_item, max_size=3).map(lambda blocks: [x for b in blocks for x in b]))
    indent = draw(st.sampled_from(["    ", "\t", "  "]))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    final_newline = draw(st.booleans())
    return _render(lines, indent, newline, final_newline)


def _render(lines: list[Line], indent: str, newline: str, final_newline: bool) -> tuple[bytes, list[bool]]:
    texts = []
    for line in lines:
        stripped = line.text.lstrip(" ")
        depth = (len(line.text) - len(stripped)) // 4
        texts.append(indent * depth + stripped)
    data = newline.join(texts) + (newline if final_newline else "")
    return data.encode(), [line.idiom for line in lines]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_rewrite_parses_is_idempotent_and_keeps_other_lines(program):
    data, idiom = program
    out = rewrite_bytes(data)
    if out is None:
        assert not any(idiom), "a program with idioms was left unchanged"
        return
    text = out.decode()
    cst.parse_module(text)
    ast.parse(text)
    assert rewrite_bytes(out) is None, "a second run changed the file again"
    left = process_python("case.py", out, Settings(), False).findings
    assert {f.code for f in left} <= {"NM900"}, f"check after rewrite reports more than the manual items: {left}"
    assert_other_lines_kept(data, idiom, out)
