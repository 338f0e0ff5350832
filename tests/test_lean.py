"""`check`'s lean parse (engine/lean.py) reports exactly what the whole parse reports.

The whole parse is the oracle: every fixture, 150 standard-library modules with every rule running (the pre-filter
off, so every trigger is a needle) and torch_xla's own sources read as plain code (not set aside as a library:
`process_python` is called on each file) give the same findings, line, column, code and message, with the lean
parse on and off. The test fails where the lean parse replaced nothing, so the path is known to be exercised.
"""

from __future__ import annotations

import ast
import os
import zipfile
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import given, settings, strategies as st

from neuron_migrate.engine import facts, lean
from neuron_migrate.engine import python as engine
from neuron_migrate.engine.names import Analysis
from neuron_migrate.engine.sources import SourceError
from neuron_migrate.project_facts import FileProject
from neuron_migrate.rules import all_rules
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, ROOT
from tests.test_positions import stdlib_sample

CASES = sorted(p for p in FIXTURES.rglob("*.py") if not p.name.endswith(".expected.py"))
EXAMPLES = sorted((ROOT / "examples").rglob("*.py"))
# The torch_xla 2.9 wheel: where the real-code benchmark keeps it, or the bed's downloads.
WHEEL_FOLDERS = [Path(os.environ.get("NEURON_MIGRATE_BENCH_CACHE", Path.home() / ".cache/neuron-migrate/bench")),
                 Path("/work/bed/dl")]


def torch_xla_sources() -> list[tuple[str, bytes]]:
    for folder in WHEEL_FOLDERS:
        for wheel in sorted(folder.glob("torch_xla-2.9*.whl")) if folder.is_dir() else ():
            with zipfile.ZipFile(wheel) as whl:
                return [(n, whl.read(n)) for n in sorted(whl.namelist())
                        if n.startswith("torch_xla/") and n.endswith(".py")]
    return []


def _findings(path: str, data: bytes, on: bool, monkeypatch) -> list | str:
    with monkeypatch.context() as m:
        m.setattr(lean, "ENABLED", on)
        try:
            result = engine.process_python(path, data, Settings(), False)
        except SourceError as exc:
            return f"error: {exc}"
    return [(f.line, f.col, f.end_line, f.end_col, f.code, f.message, f.fixable) for f in result.findings]


def _replaced(data: bytes, rules) -> bool:
    text = data.decode("utf-8")
    return lean.lean_text(text, ast.parse(text), *engine.lean_needles(rules)) is not None


def _compare(files: list[tuple[str, bytes]], monkeypatch) -> int:
    """Asserts lean == whole for every file; returns how many files the lean parse shortened."""
    shortened = 0
    for path, data in files:
        whole = _findings(path, data, False, monkeypatch)
        assert _findings(path, data, True, monkeypatch) == whole, path
        try:
            shortened += _replaced(data, engine.active_rules(data, Settings(), path))
        except (SyntaxError, UnicodeDecodeError):
            pass
    return shortened


def test_fixtures_and_examples_give_the_same_findings_lean_and_whole(monkeypatch):
    files = [(str(p), p.read_bytes()) for p in CASES + EXAMPLES]
    assert _compare(files, monkeypatch) >= 10


@pytest.mark.slow
def test_stdlib_with_every_rule_gives_the_same_findings_lean_and_whole(monkeypatch):
    monkeypatch.setattr(engine, "active_rules", lambda data, settings, path, present=None: list(all_rules()))
    files = [(str(p), p.read_bytes()) for p in stdlib_sample()]
    assert len(files) == 150
    assert _compare(files, monkeypatch) >= 10


@pytest.mark.slow
def test_torch_xla_as_plain_code_gives_the_same_findings_lean_and_whole(monkeypatch):
    files = torch_xla_sources()
    if not files:
        pytest.skip(f"no torch_xla 2.9 wheel in {', '.join(map(str, WHEEL_FOLDERS))} (python -m bench.real fetches it)")
    assert _compare(files, monkeypatch) >= 20


# -- what the lean parse keeps and replaces -----------------------------------------------------------------

SOURCE = '''\
import os
import torch
import torch_xla.core.xla_model as xm

HAS_FLAG = os.environ.get("TORCH_XLA_HOME") is not None


def helper(x):
    return x + 1


def uses_alias(t):
    return xm.all_reduce("sum", [t])


def reads_flag():
    return HAS_FLAG


def spawned(index):
    data = torch.ones(3)
    return helper(data)


def unrelated(a, b):
    """Nothing here."""
    total = a
    for _ in range(b):
        total = total * 2
    return total


class Trainer:
    @property
    def name(self):
        return "trainer"

    def step(self):
        self.device = xm.xla_device()

    def move(self, t):
        return t.to(self.device)

    def size(self):
        return len(self.name)


def main():
    xmp.spawn(spawned, args=())
'''


def test_cold_definitions_are_stand_ins_on_their_own_lines():
    found = lean.lean_text(SOURCE, ast.parse(SOURCE), ("spawn", "xla_device"))
    assert found is not None
    lean_source = found.text
    before, after = SOURCE.splitlines(), lean_source.splitlines()
    assert len(before) == len(after)
    changed = {i + 1: line for i, (old, line) in enumerate(zip(before, after)) if old != line}
    # replaced: the function no XLA code reaches, and the method that reads nothing XLA code set
    assert "def unrelated(): pass" in changed.values()
    assert "    def size(): pass" in changed.values()
    assert "    def name(): pass" in changed.values()  # the decorator's line holds the stand-in
    kept = ["def uses_alias(t):", "def reads_flag():", "def spawned(index):", "def helper(x):", "def step(self):",
            "    def move(self, t):", "def main():"]
    for line in kept:
        assert any(a.strip() == line.strip() for a in after), line
    # what a replaced definition held is blank lines: every other line is where it was
    assert all(not line.strip() or line.endswith(": pass") for line in changed.values())
    ast.parse(lean_source)


WORDS = '''\
import torch
import torch_xla.core.xla_model as xm
from torch.linalg import det as determinant


def scale(weight, value):
    return weight.detach() * value + torch.ones(3).numel()


def volume(m):
    return determinant(m)


def inverse(m):
    return torch.linalg.inv(m)


def train():
    xm.mark_step()
'''


def test_names_a_pre_filter_asks_for_are_needles_as_whole_words(monkeypatch):
    """CpuFallbackOp (NM308) asks for `det`, `inv`, `lu`, `eigh` by name (`NamesPattern`): the lean parse keeps only
    the definitions that spell one as a word, or read a name bound to one (`determinant`); `weight.detach()` and
    `value` hold none. The findings are those of the whole parse."""
    rules = engine.active_rules(WORDS.encode(), Settings(), "words.py")
    needles, words = engine.lean_needles(rules)
    assert {"det", "inv", "lu", "eigh"} <= set(words) and not {"det", "lu", "eigh"} & set(needles)
    found = lean.lean_text(WORDS, ast.parse(WORDS), needles, words)
    assert found is not None
    assert "def scale(): pass" in found.text.splitlines()
    assert "def volume(m):" in found.text and "def inverse(m):" in found.text and "def train():" in found.text
    assert _findings("words.py", WORDS.encode(), True, monkeypatch) == \
        _findings("words.py", WORDS.encode(), False, monkeypatch)
    assert [f[4] for f in _findings("words.py", WORDS.encode(), True, monkeypatch)].count("NM308") == 2


def test_a_file_without_definitions_or_with_only_hot_ones_is_parsed_whole():
    assert lean.lean_text("import torch_xla\nx = 1\n", ast.parse("import torch_xla\nx = 1\n"), ()) is None
    hot = "import torch_xla.core.xla_model as xm\n\ndef f():\n    xm.mark_step()\n"
    assert lean.lean_text(hot, ast.parse(hot), ("mark_step",)) is None


# -- the file's quote style: the literals of the code left out count too ----------------------------------

def _quote_counts(module) -> tuple[int, int]:
    """facts.quote's count over a LibCST tree, of the literals the analysis records: those opening with ' and with
    " (not \"\"\")."""
    counts = [0, 0]
    for node in Analysis(module, record=True).strings:
        if node.quote != '"""':
            counts[node.quote[0] == '"'] += 1
    return counts[0], counts[1]


def _assert_counted_as_whole(text: str) -> bool:
    """The lean tree's literals and the left-out tally add up to the whole tree's; True where code was left out."""
    found = lean.lean_text(text, ast.parse(text), ())  # no needle but the backend words: the most is left out
    if found is None:
        return False
    whole, kept = _quote_counts(cst.parse_module(text)), _quote_counts(cst.parse_module(found.text))
    assert (kept[0] + found.quotes[0], kept[1] + found.quotes[1]) == whole
    return True


QUOTED = '''\
import torch_xla.core.xla_model as xm


def device():
    return xm.xla_device()


def labels(a):
    names = {'train': 1, 'eval': 2, rb'raw\\'s': 3, u'uni': 4}
    joined = ('one' "two"  # a comment between the parts
              'three' \\
              f"four{a}" 'five')
    doc = \'\'\'it's here\'\'\'
    return 'é' + "ü", names, joined, doc


def documented():
    """Docstrings say nothing of the style."""
    return f"{a!r:>10}"


def nested(a):
    return f"{a['key']}" + 'x'


def spec(a):
    return f"{a:{'>'}10}"
'''


def test_the_literals_left_out_are_counted_as_libcst_counts_them():
    found = lean.lean_text(QUOTED, ast.parse(QUOTED), ())
    assert found is not None
    assert "def labels(): pass" in found.text and "def documented(): pass" in found.text
    # the f-string whose braces hold a literal stays for LibCST to count: the tally could not vouch for it
    assert "def nested(): pass" not in found.text and "def spec(): pass" not in found.text  # a format spec's too
    assert found.quotes == (9, 2)
    assert _assert_counted_as_whole(QUOTED)


def test_the_quote_fact_reads_the_whole_file_under_the_lean_parse(monkeypatch):
    # most of the file's literals are in a function the lean parse leaves out; the code it keeps prefers `"`
    source = QUOTED + '\nLABELS = ("a", "b", "c", "d")\ndevice()\n'
    seen = []
    compute = facts._FACTS["quote"]
    monkeypatch.setitem(facts._FACTS, "quote", lambda ctx: seen.append((ctx.module.code, compute(ctx))) or seen[-1][1])
    for on in (True, False):
        monkeypatch.setattr(lean, "ENABLED", on)
        engine.process_python("m.py", source.encode(), Settings(), False)
    (lean_code, lean_quote), (whole_code, whole_quote) = seen
    assert "def labels(): pass" in lean_code and whole_code == source
    assert lean_quote == whole_quote == "'"


def test_fixtures_and_stdlib_literals_count_as_the_whole_tree():
    left_out = 0
    for path in CASES + EXAMPLES + stdlib_sample():
        try:
            text = path.read_bytes().decode("utf-8")
            ast.parse(text)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        left_out += _assert_counted_as_whole(text)
    assert left_out >= 50


# -- which lines hold a needle: one pass over the text answers what a search of the lines' text would ------------

# pieces of lines: backend words in several cases, letters and word parts around them, a non-ASCII letter (the
# index reads ASCII text lower-cased, other text with the pattern itself) and the Kelvin sign, which folds to `k`
PIECES = ["xla", "XLA", "Cuda", "tpus", "a", "Z", "_", "1", " ", ".", "(", "é", "\u212a", "neuron", "npu"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.lists(st.sampled_from(PIECES + ["lu", "det"]), max_size=6).map("".join), max_size=6),
       st.lists(st.sampled_from(["xla", ".cuda(", "Neuron", "pu", "é", "a_"]), max_size=2),
       st.lists(st.sampled_from(["lu", "det", "a"]), max_size=2, unique=True).map(tuple),
       st.sampled_from(["\n", "\r\n", "\r"]))
def test_the_needle_index_answers_as_searching_the_lines(parts, needles, words, newline):
    text = newline.join(parts) + newline
    lines = lean.LINE.findall(text)
    found = lean._Needles(text, lines, tuple(needles), words)
    assert found.counts is not None
    for first in range(1, len(lines) + 1):
        for last in range(first, len(lines) + 1):
            assert found.within(first, last) == \
                lean._needle_in("".join(lines[first - 1:last]), tuple(needles), words)


def test_a_word_needle_is_a_whole_identifier():
    pattern = lean._words(("det", "lu"))
    assert [m.group(0) for m in pattern.finditer("x.det(a); lu(b); 'det'; value; detach; élu; lu_x; _lu\n")] == \
        ["det", "lu", "det"]


ARTIFACTS = '''\
import torch
import torch_neuronx


class Server:
    def load(self, path):
        return torch.jit.load(path)


def export(model, example):
    traced = torch_neuronx.trace(model, example, compiler_args="-O2")
    save(traced)


def save(traced):
    torch.jit.save(traced, "model.pt")
'''


def test_a_rule_s_words_keep_the_definitions_that_spell_them(monkeypatch):
    """NeuronxTrace reports `torch.jit.save` / `torch.jit.load` in a file of the Neuron libraries (NM502), also in a
    function that spells no trigger: its word `jit` keeps such a function, and `check` reports what `rewrite` does."""
    rules = engine.active_rules(ARTIFACTS.encode(), Settings(), "serve.py")
    assert "jit" in engine.lean_needles(rules)[1]
    lean_found = _findings("serve.py", ARTIFACTS.encode(), True, monkeypatch)
    assert lean_found == _findings("serve.py", ARTIFACTS.encode(), False, monkeypatch)
    rewritten = engine.process_python("serve.py", ARTIFACTS.encode(), Settings(), True)
    assert [(f[0], f[4]) for f in lean_found] == [(f.line, f.code) for f in rewritten.findings] \
        == [(7, "NM502"), (11, "NM502"), (16, "NM502")]


PROCESS_GROUP = '''\
import torch.distributed as dist
import torch_xla.distributed.xla_backend


def setup(args):
    dist.init_process_group(args.dist_backend, world_size=args.world_size)
'''


def test_a_process_group_given_its_backend_from_elsewhere_keeps_its_function(monkeypatch):
    """A file that registered torch_xla's backend and gives `init_process_group` its backend from elsewhere is
    told the backend may still be "xla" there (NM201), in a function that spells no backend word too: its word
    `init_process_group` keeps the function, and `check` (Python's tree aside) reports what `rewrite` does."""
    monkeypatch.setattr(engine, "decide_on_tree", lambda *args, **kwargs: None)
    lean_found = _findings("setup.py", PROCESS_GROUP.encode(), True, monkeypatch)
    assert lean_found == _findings("setup.py", PROCESS_GROUP.encode(), False, monkeypatch)
    rewritten = engine.process_python("setup.py", PROCESS_GROUP.encode(), Settings(), True)
    assert [(f[0], f[4]) for f in lean_found] == [(f.line, f.code) for f in rewritten.findings] \
        == [(2, "NM190"), (6, "NM201")]


LEFT_OUT_NAME = '''\
import torch
import torch_xla.core.xla_model as xm


class Trainer:
    def finish(self):
        xm.rendezvous("done")


class Report:
    def write(self, rows):
        dist = len(rows)
        return dist
'''


def test_a_name_bound_only_in_a_left_out_definition_is_taken(monkeypatch):
    """`Report.write` holds no needle and is left out of the lean tree, but it binds `dist`: the barrier NM205 asks
    for is then `torch.distributed.barrier()`, in `check`'s message as in `rewrite`'s (not a `dist` the fix could
    not import as)."""
    monkeypatch.setattr(engine, "decide_on_tree", lambda *args, **kwargs: None)
    rules = engine.active_rules(LEFT_OUT_NAME.encode(), Settings(), "train.py")
    assert _replaced(LEFT_OUT_NAME.encode(), rules)
    lean_found = _findings("train.py", LEFT_OUT_NAME.encode(), True, monkeypatch)
    assert lean_found == _findings("train.py", LEFT_OUT_NAME.encode(), False, monkeypatch)
    rewritten = engine.process_python("train.py", LEFT_OUT_NAME.encode(), Settings(), True)
    assert [f[5] for f in lean_found] == [f.message for f in rewritten.findings]
    assert "torch.distributed.barrier()" in lean_found[-1][5]


EAGER_SUBCLASS = '''\
import torch_xla
from base import TrainBase


class TrainEager(TrainBase):
    def __init__(self):
        super().__init__()
        self.step = self.step_fn


if __name__ == "__main__":
    torch_xla.experimental.eager_mode(True)
    TrainEager().start_training()
'''


def test_the_words_the_project_gives_a_rule_keep_the_definitions_that_spell_them(monkeypatch):
    """NM259 reads a subclass that assigns its uncompiled step to an attribute that a base class in another module
    compiles (`FileProject.base_compiled`): the attribute is the rule's word in that file, where no trigger is near
    the subclass (here not even `compile`)."""
    project = FileProject(base_compiled=("step",))
    data = EAGER_SUBCLASS.encode()
    rules = engine.active_rules(data, Settings(project=project), "train_eager.py")
    assert "step" in engine.lean_needles(rules, project)[1] and "step" not in engine.lean_needles(rules)[1]
    found = {}
    for on in (True, False):
        with monkeypatch.context() as m:
            m.setattr(lean, "ENABLED", on)
            result = engine.process_python("train_eager.py", data, Settings(project=project), False)
        found[on] = [(f.line, f.code) for f in result.findings]
    assert found[True] == found[False] and (8, "NM259") in found[True]


PARTS = '''\
import torch
from neuronx_distributed.parallel_layers import layers, parallel_state


class MLP(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.up = layers.ColumnParallelLinear(hidden, 4 * hidden, gather_output=False)
        self.down = layers.RowParallelLinear(4 * hidden, hidden, input_is_parallel=True)


class Block(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.mlp = MLP(hidden)

    def forward(self, x):
        return self.mlp(x)


class Net(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(hidden) for _ in range(2))

    def extra_repr(self):
        return "net"


def main():
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=8)
    model = Net(1024)
'''


def test_a_model_built_from_parts_keeps_the_parts_that_build_it(monkeypatch):
    """TensorParallel reads where a model's layers sit through the `__init__` of each class that builds a part
    (`self.mlp = MLP(...)`, a ModuleList of blocks): those stay in the lean text, as a class holding the layers
    binds its name, and `check` reports the rewrite `rewrite` makes (NM233), not a layer of a model it could not
    find (NM230). The methods that build no part are still stand-ins."""
    rules = engine.active_rules(PARTS.encode(), Settings(), "model.py")
    text = lean.lean_text(PARTS, ast.parse(PARTS), *engine.lean_needles(rules)).text
    assert "self.mlp = MLP(hidden)" in text and "torch.nn.ModuleList(Block(hidden)" in text
    assert "def extra_repr(): pass" in text
    lean_found = _findings("model.py", PARTS.encode(), True, monkeypatch)
    assert lean_found == _findings("model.py", PARTS.encode(), False, monkeypatch)
    rewritten = engine.process_python("model.py", PARTS.encode(), Settings(), True)
    assert [(f[0], f[4]) for f in lean_found] == [(f.line, f.code) for f in rewritten.findings] \
        == [(2, "NM506"), (31, "NM233")]
