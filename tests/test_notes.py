"""A set-aside program's notes decided on Python's tree (engine/notes.py) are the LibCST pass's, and the probe
that asks whether a held file reports more gives the same answer without the rules that only write notes.

The LibCST pass is the oracle: every fixture and example, and the cases below, give the same notes (line, column,
end, code, message) with the decision on Python's tree on and off, for a target that keeps the XLA inference path
(Inf2, Trn1: NM510) and for one that does not. Each case also says whether Python's tree decides it or hands it
back, so that both ways are known to be taken; the tests fail where Python's tree decides too few files.
"""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings, strategies as st

from neuron_migrate.engine import notes
from neuron_migrate.engine import python as engine
from neuron_migrate.engine.context import PROBE, Reported
from neuron_migrate.engine.handlers import SET_ASIDE_NOTES
from neuron_migrate.engine.sources import SourceError
from neuron_migrate.files.notebook import process_notebook
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, ROOT

CODES = frozenset(SET_ASIDE_NOTES)
TARGETS = (None, "inf2", "trn1")  # the default (Trn2: no NM510), and the two that keep XLA inference
FILES = sorted(p for p in FIXTURES.rglob("*.py") if not p.name.endswith(".expected.py")) \
    + sorted((ROOT / "examples").rglob("*.py"))
NOTEBOOKS = sorted(p for p in [*FIXTURES.rglob("*.ipynb"), *(ROOT / "examples").rglob("*.ipynb")]
                   if ".expected" not in p.name)


def _notes(path: str, data: bytes, instance: str | None, on: bool, monkeypatch) -> tuple[list | str, bool]:
    """(the notes pass's findings, whether Python's tree decided them)."""
    decided = []

    def spy(*args, **kwargs):
        found = decide(*args, **kwargs)
        decided.append(found is not None)
        return found

    decide = notes.decide
    token = notes.NOTES_ONLY.set(CODES) if on else None
    with monkeypatch.context() as m:
        m.setattr(engine, "decide_notes", spy)
        if not on:  # the LibCST pass alone: no rule decided on Python's tree (engine/treecheck.py) either
            m.setattr(engine, "decide_on_tree", lambda *args: None)
        # a rule that fails on the way is isolated, as users run it (the suite's strict mode would raise where a
        # disabled code's fix cannot be made: NM501's import of `torch` beside `for torch in ...`)
        m.setattr(engine, "STRICT", False)
        try:
            settings = Settings(select=CODES, instance=instance)
            result = process_notebook(path, data, settings, False) if path.endswith(".ipynb") else \
                engine.process_python(path, data, settings, False)
            found = [(f.line, f.col, f.end_line, f.end_col, f.code, f.message, f.fixable, f.held_back, f.cell)
                     for f in result.findings]
        except SourceError as exc:
            found = f"error: {exc}"
        finally:
            if token is not None:
                notes.NOTES_ONLY.reset(token)
    return found, any(decided)


def _same(path: str, data: bytes, instance: str | None, monkeypatch) -> tuple[list | str, bool]:
    on, decided = _notes(path, data, instance, True, monkeypatch)
    off, _ = _notes(path, data, instance, False, monkeypatch)
    assert on == off, (path, instance)
    return on, decided


def test_fixtures_and_examples_give_the_same_notes_on_either_tree(monkeypatch):
    decided_with_notes = handed_back = 0
    for path in FILES:
        data = path.read_bytes()
        for instance in TARGETS:
            found, decided = _same(str(path), data, instance, monkeypatch)
            decided_with_notes += decided and bool(found) and not isinstance(found, str)
            handed_back += not decided and "torch_neuron" in data.decode("utf-8", "replace")
    assert decided_with_notes >= 30  # Python's tree decides real notes
    assert handed_back >= 3, handed_back  # and hands files back (backend tests, guarded imports, local names)


def test_notebooks_give_the_same_notes_on_either_tree(monkeypatch):
    """A notebook's Python cells are decided as one module (files/notebook.py), its findings placed in its cells."""
    decided = 0
    for path in NOTEBOOKS:
        for instance in TARGETS:
            decided += _same(str(path), path.read_bytes(), instance, monkeypatch)[1]
    assert decided >= 5


def test_a_notebook_s_notes_land_in_their_cells(monkeypatch):
    import json

    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
             for source in (["!pip install torch-neuronx\n", "import torch_neuronx\n"],
                            ["traced = torch_neuronx.trace(model, x)\n"],
                            ["job = Estimator(instance_type='ml.trn1.32xlarge')\n"])]
    data = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode("utf-8")
    found, decided = _same("serve.ipynb", data, "inf2", monkeypatch)
    assert decided
    assert [(f[8], f[0], f[4]) for f in found] == [(2, 1, "NM510"), (3, 1, "NM520")]


def _case(source: str, instance: str | None = "inf2", monkeypatch=None, path: str = "serve.py"):
    return _same(path, textwrap.dedent(source).encode("utf-8"), instance, monkeypatch)


DECIDED = {
    "trace through the module": ("""\
        import torch
        import torch_neuronx

        model = torch.nn.Linear(4, 4)
        traced = torch_neuronx.trace(model, torch.rand(1, 4))
        torch.jit.save(traced, "model.pt")
        """, ["NM510"]),
    "trace imported by name, under another name": ("""\
        from torch_neuronx import trace as aot

        def build(model, example):
            traced = aot(model, example)
            return traced
        """, ["NM510"]),
    "the first argument of a call": ("""\
        import torch_neuronx
        print(torch_neuronx.trace(model, x))
        models[0] (torch_neuronx.trace(model, x))
        """, ["NM510", "NM510"]),
    "trace on a line that holds non-ASCII text before it": ("""\
        import torch_neuronx
        label = "modèle"; traced = torch_neuronx.trace(model, example)
        """, ["NM510"]),
    "NxD inference, imported twice and called through the module": ("""\
        import neuronx_distributed as nxd
        import neuronx_distributed_inference.models as models
        from neuronx_distributed_inference.utils import hf_adapter
        from neuronx_distributed.trace import parallel_model_trace, parallel_model_load

        traced = nxd.trace.parallel_model_trace(build, inputs, tp_degree=2)
        """, ["NM510", "NM510", "NM510"]),
    "optimum-neuron's inference classes": ("""\
        from optimum.neuron import NeuronModelForCausalLM, NeuronTrainer
        from optimum.neuron import (
            NeuronModelForSequenceClassification,
        )
        """, ["NM510", "NM510"]),
    "Inf1 code: one note, at its first place": ("""\
        import torch

        def compile(model, x):
            return torch.neuron.trace(model, x)

        import torch_neuron
        parallel = torch.neuron.DataParallel(model)
        """, ["NM513"]),
    "trn1 instances asked for, and mentions that are not": ('''\
        """Runs on ml.trn1.32xlarge (a mention: the docstring)."""
        PRICES = {"ml.trn1.2xlarge": 1.34}
        estimator = Estimator(instance_type="ml.trn1.32xlarge", role=role)
        command = """torchrun train.py
            --instance-type trn1.2xlarge"""
        note = f"trn1.2xlarge {estimator}"
        blob = b"--instance-type trn1.2xlarge"
        ''', ["NM520", "NM520"]),
    "windows line ends": ("import torch_neuronx\r\n\r\ntraced = torch_neuronx.trace(model, x)\r\n", ["NM510"]),
}

HANDED_BACK = {
    "in parentheses after a keyword": ("""\
        import torch_neuronx
        assert(torch_neuronx.trace(model, x))
        """, ["NM510"]),
    "in parentheses inside a call's": ("""\
        import torch_neuronx
        print((torch_neuronx.trace(model, x)))
        """, ["NM510"]),
    "in parentheses": ("""\
        import torch_neuronx
        traced = (torch_neuronx.trace(model, x))
        """, ["NM510"]),
    "a call that opens its line inside a statement": ("""\
        import torch_neuronx
        models = [
            torch_neuronx.trace(model, x),
        ]
        """, ["NM510"]),
    "a parameter named as the module": ("""\
        import torch_neuronx

        def build(torch_neuronx, model, x):
            return torch_neuronx.trace(model, x)
        """, []),
    "imported inside a function": ("""\
        def build(model, x):
            import torch_neuronx
            return torch_neuronx.trace(model, x)
        """, ["NM510"]),
    "a guarded import": ("""\
        try:
            import torch_neuronx
        except ImportError:
            torch_neuronx = None
        traced = torch_neuronx.trace(model, x)
        """, ["NM510"]),
    "a CUDA branch": ("""\
        import torch
        import torch_neuronx
        if torch.cuda.is_available():
            traced = torch_neuronx.trace(model, x)
        """, []),
    "a device string compared": ("""\
        import torch_neuronx
        if args.device == "cuda":
            model = model.cuda()
        else:
            traced = torch_neuronx.trace(model, x)
        """, ["NM510"]),
    "the module's name tested": ("""\
        import torch_neuronx
        traced = torch_neuronx.trace(model, x) if torch_neuronx else model
        """, ["NM510"]),
    "TPU text in a file that imports torch_xla in a function only (its common code's notes are held)": ("""\
        def tpu_device():
            import torch_xla.core.xla_model as xm
            return xm.xla_device()

        job = Estimator(instance_type="ml.trn1.32xlarge")
        """, []),
    "the traced model tested": ("""\
        from torch_neuronx import trace
        traced = trace(model, x)
        ready = traced
        if not ready:
            job = Estimator(instance_type="ml.trn1.32xlarge")
        """, ["NM510"]),  # the paths put the `if` body on the path without XLA: no note there
    "a string literal in parts": ("""\
        estimator = Estimator(instance_type="ml." "trn1.32xlarge")
        other = Estimator(instance_type="trn1.2xlarge" " ")
        """, ["NM520", "NM520"]),
    "a string in an f-string's braces": ("""\
        label = f"{'trn1.2xlarge'}"
        """, ["NM520"]),
    "global declared": ("""\
        import torch_neuronx

        def reset():
            global torch_neuronx
            torch_neuronx = None

        traced = torch_neuronx.trace(model, x)
        """, ["NM510"]),
}


@pytest.mark.parametrize("name", sorted(DECIDED))
def test_python_tree_decides_the_common_forms(name, monkeypatch):
    source, codes = DECIDED[name]
    found, decided = _case(source, monkeypatch=monkeypatch)
    assert decided, name
    assert [f[4] for f in found] == codes


@pytest.mark.parametrize("name", sorted(HANDED_BACK))
def test_what_python_tree_cannot_be_sure_of_goes_to_libcst(name, monkeypatch):
    source, codes = HANDED_BACK[name]
    found, decided = _case(source, monkeypatch=monkeypatch)
    assert not decided, name
    assert [f[4] for f in found] == codes


def test_placement_matches_libcst_inside_a_long_string_and_after_wide_characters(monkeypatch):
    found, decided = _case('''\
        é = "ü"; job = Estimator(instance_type="ml.trn1.32xlarge")
        command = """torchrun train.py
            --instance-type trn1.2xlarge --nproc 32"""
        ''', monkeypatch=monkeypatch)
    assert decided
    assert [(f[0], f[1], f[2], f[3]) for f in found] == [(1, 40, 1, 58), (3, 21, 3, 33)]


def test_without_the_kept_xla_inference_path_only_inf1_and_trn1_notes(monkeypatch):
    found, decided = _case("""\
        import torch_neuronx
        traced = torch_neuronx.trace(model, x)
        job = Estimator(instance_type="ml.trn1.32xlarge")
        """, instance=None, monkeypatch=monkeypatch)
    assert decided
    assert [f[4] for f in found] == ["NM520"]


def test_a_test_file_asks_for_no_instance(monkeypatch):
    found, decided = _case('job = Estimator(instance_type="ml.trn1.32xlarge")\n', monkeypatch=monkeypatch,
                           path="tests/test_launch.py")
    assert decided and found == []


# -- the probe -------------------------------------------------------------------------------------------------

def _probe(path: str, data: bytes, narrowed: bool, monkeypatch) -> bool | str:
    """Whether the file reports more than its notes (as `handlers._would_change` asks)."""
    token = PROBE.set(CODES | {"NM900"})
    with monkeypatch.context() as m:
        if not narrowed:
            m.setattr(engine, "probed", lambda rules, *args: (rules, None))
            m.setattr(engine, "decide_on_tree", lambda *args: None)
        try:
            result = engine.process_python(path, data, Settings(), False)
        except Reported:
            return True
        except SourceError as exc:
            return f"error: {exc}"
        finally:
            PROBE.reset(token)
    return any(f.code not in CODES and f.code != "NM900" for f in result.findings)


PROBED = {
    "Inf1 code only": ("import torch\nmodel = torch.neuron.trace(net, [x])\n", False),
    "a trn1 instance only": ('job = Estimator(instance_type="ml.trn1.32xlarge")\n', False),
    "Inf1 code on the XLA branch of a multi-backend file (its NM111)": ("""\
        import torch
        try:
            import torch_xla.core.xla_model as xm
        except ImportError:
            xm = None

        def run(model, x):
            if xm is not None:
                return torch.neuron.trace(model, [x])
            if torch.cuda.is_available():
                return model.cuda()(x.cuda())
            return model(x)
        """, None),
    "a suppression Inf1 code uses": ("""\
        import torch
        model = torch.neuron.trace(net, [x])  # neuron-migrate: ignore[NM513]
        """, False),
    "a suppression nothing uses": ("""\
        import torch
        model = torch.neuron.trace(net, [x])  # neuron-migrate: ignore[NM101]
        """, True),
    # NM403-NM405, certain from Python's tree where a literal spells the variable
    "a variable of the XLA stack set": ("""\
        import os
        import torch
        os.environ["NEURON_CC_FLAGS"] = "--model-type=transformer"
        model = torch.neuron.trace(net, [x])
        """, True),
    "a variable named in a docstring": ('"""Set NEURON_RT_VISIBLE_CORES=0-1 and XLA_USE_BF16=1 first."""\n', None),
    "a bfloat16 switch read (reported at the end, unless the file sets it)": ("""\
        import os
        dtype = "bf16" if os.environ.get("XLA_USE_BF16") else "fp32"
        """, None),
    "a bfloat16 switch read and set": ("""\
        import os
        os.environ["XLA_USE_BF16"] = "1"
        dtype = "bf16" if os.environ.get("XLA_USE_BF16") else "fp32"
        """, True),
    "a variable spelled with an escape (no needle for the lean parse)": (
        'import os\nflags = os.environ.get("NEURON\\x5fCC_FLAGS")\n', None),
    "a variable split over two literals": ('import os\nflags = os.environ.get("NEURON_CC_" "FLAGS")\n', None),
    "a variable in an f-string": ('import os\nprint(f"NEURON_CC_FLAGS={os.environ.get(key)}")\n', None),
    "a variable on the XLA branch of a multi-backend file": ("""\
        import os
        try:
            import torch_xla
        except ImportError:
            torch_xla = None
        if torch_xla is not None:
            os.environ["XLA_USE_BF16"] = "1"
        elif os.environ.get("ACCELERATOR") == "tpu":
            pass
        """, None),
}


@pytest.mark.parametrize("name", sorted(PROBED))
def test_the_probe_answers_the_same_without_the_rules_that_only_write_notes(name, monkeypatch):
    source, expected = PROBED[name]
    data = textwrap.dedent(source).encode("utf-8")
    answer = _probe("serve.py", data, True, monkeypatch)
    assert answer == _probe("serve.py", data, False, monkeypatch)
    if expected is not None:
        assert answer is expected


def test_a_probe_sure_of_an_environment_finding_parses_no_libcst_tree(monkeypatch):
    """A literal naming a variable of the XLA stack answers the probe from Python's tree; a marker in the file (it may
    stand for that finding) leaves the answer to the LibCST pass. With the code turned off, the rule finds nothing,
    decided on Python's tree too (engine/treecheck.py)."""
    data = b'import os\nimport torch\nos.environ["NEURON_CC_FLAGS"] = "-O1"\nm = torch.neuron.trace(net, [x])\n'
    parsed = []
    parse_module = engine.parse_module
    monkeypatch.setattr(engine, "parse_module", lambda text: parsed.append(text) or parse_module(text))
    assert _probe("serve.py", data, True, monkeypatch) is True and parsed == []
    marked = data.replace(b"os.environ", b"# TODO(neuron-migrate NM405): see above\nos.environ")
    assert _probe("serve.py", marked, True, monkeypatch) == _probe("serve.py", marked, False, monkeypatch)
    assert len(parsed) == 2
    token = PROBE.set(CODES | {"NM900"})
    try:
        result = engine.process_python("serve.py", data, Settings(ignore=frozenset({"NM405"})), False)
    finally:
        PROBE.reset(token)
    assert [f.code for f in result.findings] == [] and len(parsed) == 2


def test_the_probe_answers_the_same_on_every_fixture(monkeypatch):
    for path in FILES:
        data = path.read_bytes()
        assert _probe(str(path), data, True, monkeypatch) == _probe(str(path), data, False, monkeypatch), path


def test_a_held_program_s_notes_parse_no_libcst_tree(tmp_path, monkeypatch):
    """Through the whole run: the entry of a Trn1 program reports its note, and LibCST parses nothing for it (the
    probe that asks whether it would report more, and so be told it is held, finds no rule that can)."""
    from neuron_migrate.engine.runner import run

    (tmp_path / "README.md").write_text("Train on a trn1.32xlarge instance.\n")
    (tmp_path / "launch.py").write_text("import boto3\n\nINSTANCE = 'ml.trn1.32xlarge'\n\n"
                                        "if __name__ == '__main__':\n    boto3.client('sagemaker').create(INSTANCE)\n")
    parsed: list[str] = []
    parse_module = engine.parse_module
    monkeypatch.setattr(engine, "parse_module", lambda text: parsed.append(text) or parse_module(text))
    found = run([str(tmp_path)], Settings(), rewrite=False, jobs=1).findings
    assert [(f.path.rpartition("/")[2], f.line, f.code) for f in found] == [("launch.py", 3, "NM520")]
    assert parsed == []
    monkeypatch.setattr(engine, "probed", lambda rules, *args: (rules, None))
    monkeypatch.setattr(engine, "decide_notes", lambda *args: None)
    monkeypatch.setattr(engine, "decide_on_tree", lambda *args: None)
    assert run([str(tmp_path)], Settings(), rewrite=False, jobs=1).findings == found
    assert len(parsed) == 1  # the LibCST pass: one tree, shared by the notes and the probe


# -- generated programs ------------------------------------------------------------------------------------------

_HEADS = ["import os", "import torch_neuronx", "import torch_neuronx as tnx", "from torch_neuronx import trace",
          "from torch_neuronx import trace as aot", "import torch", "import torch_neuron",
          "from torch import neuron", "import neuronx_distributed as nxd",
          "from neuronx_distributed.trace import parallel_model_trace",
          "import neuronx_distributed_inference.models as nxdi",
          "from optimum.neuron import NeuronModelForCausalLM", "import torch_xla.core.xla_model as xm",
          "from .utils import is_torch_xla_available"]
_LINES = ["traced = torch_neuronx.trace(model, x)", "traced = tnx.trace(model, x)", "traced = trace(model, x)",
          "traced = aot(model, x)", "traced = (torch_neuronx.trace(model, x))", "f(torch_neuronx.trace(model, x))",
          "print(torch_neuronx.trace(model, x))", "assert(tnx.trace(model, x))", "f((torch_neuronx.trace(model, x)))",
          "m = g(x)(torch.neuron.trace(model, [x]))", "m = d['k'] (aot(model, x))", "m = f(a, tnx.trace(model, x))",
          "m = torch.neuron.trace(model, [x])", "m = neuron.DataParallel(model)",
          "m = nxd.trace.parallel_model_trace(build, x)", "job = Estimator(instance_type='ml.trn1.32xlarge')",
          "doc = 'runs on ml.trn1.2xlarge'", "'trn1.2xlarge'", "cmd = '--instance-type ' 'trn1.2xlarge'",
          "label = f\"{'trn1.2xlarge'}\"", "prices = {'trn1.2xlarge': 1}", "kind = 'trn1.2xlarge' if a else b",
          "ready = traced", "torch_neuronx = None", "trace = None", "global torch_neuronx", "torch = load()",
          "x = [torch_neuronx.trace(m, x) for m in models]", "use_tpu = True", "pass",
          "from torch_neuronx import *", "del torch_neuronx", "import torch_neuronx as torch",
          "y = (tnx := torch_neuronx)", "g = lambda torch_neuronx: torch_neuronx.trace(m, x)",
          "traced = torch_neuronx.trace(model,\n    x)", "s = '''\n  --instance-type trn1.2xlarge'''",
          "import torch_neuronx; traced = torch_neuronx.trace(model, x)", "é = 'ü'; t = tnx.trace(m, x)",
          "os.environ['NEURON_CC_FLAGS'] = '-O1'", "flags = os.environ.get('NEURON_CC_FLAGS', '')",
          "bf16 = os.environ.get('XLA_USE_BF16')", "os.environ['XLA_USE_BF16'] = '1'",
          "doc = 'export NEURON_RT_VISIBLE_CORES=0'", "key = 'NEURON_' 'CC_FLAGS'", "del os.environ['XLA_FLAGS']"]
_OPENERS = ["if ready:", "if device == 'cuda':", "if torch.cuda.is_available():", "if xm is not None:",
            "if is_torch_xla_available():", "def run(model, x):", "def build(torch_neuronx):", "class Model:",
            "for torch in items:", "with open(p) as trace:"]
_STATEMENT = st.recursive(
    st.sampled_from(_LINES).map(lambda line: [line]),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(_OPENERS), st.lists(inner, min_size=1, max_size=3)).map(
            lambda block: [block[0], *("    " + line for lines in block[1] for line in lines)]),
        st.tuples(st.lists(inner, min_size=1, max_size=2), st.lists(inner, min_size=1, max_size=2)).map(
            lambda arms: ["try:", *("    " + line for lines in arms[0] for line in lines), "except ImportError:",
                          *("    " + line for lines in arms[1] for line in lines)])),
    max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_HEADS), max_size=4), st.lists(_STATEMENT, max_size=6),
       st.sampled_from(["\n", "\r\n"]))
def test_generated_programs_give_the_same_notes_on_either_tree(heads, statements, newline):
    """Programs put together from the forms above, nested in the blocks above, give the same notes on Python's
    tree as through LibCST, for each target."""
    lines = [line for statement in statements for line in statement]
    data = newline.join([*heads, *lines, ""]).encode("utf-8")
    monkeypatch = pytest.MonkeyPatch()
    try:
        for instance in TARGETS:
            _same("gen.py", data, instance, monkeypatch)
        assert _probe("gen.py", data, True, monkeypatch) == _probe("gen.py", data, False, monkeypatch)
    finally:
        monkeypatch.undo()
