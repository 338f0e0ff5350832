"""The tree pre-filter (engine/scan.py) never changes a finding, and does keep LibCST away from files it clears.

Two oracles. `check` with the tree pre-filter must report what it reports without it, over every fixture, example,
catalogue example, the pre-filter's edge cases, a sample of the standard library (every rule running) and
torch_xla's sources read as plain code. And each finding, with every rule running on every file (no pre-filter of
either kind), must come from a rule whose tree predicate holds for the file: that is the predicate's contract,
checked where the rules actually fire, edge cases written against the predicates included.
"""

from __future__ import annotations

import ast

import pytest

from neuron_migrate.engine import leftovers
from neuron_migrate.engine.facts import MOVING_TO_NEURON_BYTES
from neuron_migrate.engine import python as engine
from neuron_migrate.engine.scan import Scan, nodes
from neuron_migrate.engine.sources import SourceError
from neuron_migrate.project_facts import FileProject
from neuron_migrate.rules import Present, Rule, all_rules
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, ROOT
from tests.test_lean import torch_xla_sources
from tests.test_positions import stdlib_sample
from tests.test_prefilter import CORPUS

# Spellings the predicates must see through: aliases, imports inside functions, module aliases, names imported
# by name, NumPy values, methods; and the look-alikes they must clear (`re.compile`, a convolution's `padding`).
EDGE_CASES = [
    # NM210 / NM211: torch_xla's device loader under a name of its own, and a ParallelLoader's per-device loader
    'import torch_xla.core.xla_model as xm\nfrom torch_xla.distributed.parallel_loader import MpDeviceLoader as DL\n'
    'def train(loader, model):\n    device = xm.xla_device()\n    for x, y in DL(loader, device):\n'
    '        model(x)\n',
    'import torch_xla.distributed.parallel_loader as pl\n\n\ndef run(loader, device, step):\n'
    '    para = pl.ParallelLoader(loader, [device])\n    for batch in para.per_device_loader(device):\n'
    '        step(batch)\n',
    # NM313: a DataLoader imported under another name, torch.compile through a module alias
    'import torch as th\nfrom torch.utils.data import DataLoader as DL\n'
    'model = th.compile(Net())\nloader = DL(ds, batch_size=8)\n',
    # ... compile imported by name, inside a function
    'def main():\n    from torch import compile as jit\n    import torch.utils.data as tud\n'
    '    step = jit(Net())\n    return tud.DataLoader(ds, 16, shuffle=True)\n',
    # ... a tokenizer padding to the longest sequence, compiled through a method with a backend
    'import torch\nmodel.compile(backend="neuron")\nbatch = tok(texts, padding=True, return_tensors="pt")\n',
    # NM401: float64 through a name imported from torch, a dtype string, .double(), a NumPy value
    'from torch import float64 as f8\nimport torch\nx = torch.zeros(3, dtype=f8)\n',
    'import torch\nx = torch.zeros(3, dtype="float64")\ny = x.double()\n',
    'import numpy as np\nimport torch\na = np.zeros(4)\nt = torch.from_numpy(a)\n',
    'import numpy\nimport torch\nt = torch.as_tensor(numpy.arange(4).astype("f8"))\n',
    # NM301: torch.sparse under an alias, a sparse conversion method, sparse gradients
    'import torch.sparse as sp\nimport torch\nsp.mm(a, b)\nb = a.to_sparse()\n'
    'emb = torch.nn.Embedding(10, 3, sparse=True)\n',
    # NM402 / NM322: CUDA autocast and torch.cuda in a file moving to neuron
    'import torch\nimport torch_neuronx\nwith torch.cuda.amp.autocast():\n    torch.cuda.synchronize()\n',
    'import torch\nx = y.to("neuron")\nfrom torch import cuda\ncuda.empty_cache()\nz = w.cuda()\n',
    # NM310-NM314: compile settings in a file moving to neuron
    'import torch\nx = t.to("neuron")\nm = torch.compile(model, mode="max-autotune", dynamic=True)\n',
    # NM307 / NM506: libraries named by their imports
    'import torchao.quantization as q\nfrom neuronx_distributed.parallel_layers import layers\n',
    # the XLA-stack ones (the NM199 step runs on such files: only the predicates that read no selection are asked there)
    'from torch_xla.utils import serialization as xser\nstate = xser.load("ckpt")\n',
    'import torch as th\nm = th.compile(model, backend="openxla")\n',
    'def step(opt):\n    from torch_xla.core import xla_model as xm\n    xm.optimizer_step(opt)\n',
    'import torch\nimport torch.neuron\nmodel = torch.neuron.trace(net, x)\n',
    'from optimum.neuron import NeuronTrainer as T\ntrainer = T(model=m)\n',
    'from torch.linalg import qr as factor\nimport torch\nq, r = factor(torch.ones(3, 3))\n',
    # NM617: a legacy SageMaker container for a program moving to neuron, the estimator imported under another name
    'import torch_neuronx\nfrom sagemaker.pytorch import PyTorch as Est\n'
    'job = Est(entry_point="train.py", instance_type="ml.trn2.48xlarge", framework_version="1.13.1")\n',
    # NM321: CUDA device names in a file moving to neuron, one of them spelled with an escape
    'import torch\nimport torch_neuronx\ndev = torch.device("cud\\x61:0")\n\ndef on_gpu(t):\n'
    '    return t.device == torch.device("cuda")\n',
    # the rules a torch_xla file runs only where their names are spelled (the NM199 step runs there): aliases, names
    # imported by name and inside functions, device literals as escapes and f-strings, functions passed on as values
    'import torch_xla.core.xla_model as xla\nimport torch_xla.distributed.xla_multiprocessing as mp\n'
    'def _mp_fn(i):\n    dev = xla.xla_device()\n    xla.master_print(xla.get_ordinal(), fd=sys.stderr)\n'
    '    xla.set_rng_state(1234 + i)\n    xla.mark_step()\nmp.spawn(_mp_fn, args=())\n',
    'import torch\nimport torch_xla\ndef run(model, i):\n'
    '    from torch_xla.core.xla_model import optimizer_step as step\n'
    '    model.to(f"xla:{i}")\n    torch.device("\\x78la")\n    step(opt)\n',
    'import torch_xla.core.xla_model as xm\nfrom torch_xla.debug import metrics as met\n'
    'trainer = Trainer(save_function=xm.save, sync=xm.wait_device_ops)\nprint(met.short_metrics_report())\n'
    'loss = xm.all_reduce(xm.REDUCE_SUM, loss)\n',
    'import torch_xla\nfrom torch_xla.distributed.spmd import Mesh as M\n'
    'from torch_xla.core.xla_model import wait_device_ops\n'
    'mesh = M(ids, (2, 1))\nconfigure(wait_device_ops=True)\nmodel = Net().to(torch_xla.device())\n',
    'from torch_xla.utils.checkpoint import checkpoint as ckpt\nimport torch_xla.core.xla_model as xm\n'
    'from torch import nn\n\n\nclass Net(nn.Module):\n    pass\n\n\nmodel = Net()\nmodel.to(xm.xla_device())\n'
    'y = ckpt(model, x)\n',
    # look-alikes: none of these reports anything, and LibCST never reads them
    'import re\nimport torch\nPATTERN = re.compile("padding")\n\ndef conv(x, padding=1):\n'
    '    return torch.nn.functional.pad(x, (padding, padding))\n',
    'import torch\n# float64 would be too slow here; see double-check below\nx = torch.ones(2)\n'
    'def load(serialization):\n    return serialization.load()\n',
    'import json\nimport torch\nconfig = json.load(open("optimum-Neuron.json"))\nresult = torch.ones(1).sum()\n',
    # ... the same estimator in a file that does not move to neuron (the launcher of a program that stays)
    'import sagemaker.pytorch\njob = sagemaker.pytorch.PyTorch(entry_point="train.py", '
    'instance_type="ml.trn2.48xlarge", framework_version="1.13.1")\n',
    # ... a GPU program whose comment names neuron, testing a tensor's CUDA device
    'import torch\n# the neuron version lives in ../trn2\ndef on_gpu(t):\n'
    '    return t.device == torch.device("cuda") and torch.cuda.is_available()\n',
    # ... a float64 dtype string a dataset's column is compared with, in a torch program
    'import torch\nregression = features["label"].dtype in ["float32", "float64"]\nloss = torch.nn.MSELoss()\n',
    # ... a migrated script's own rate tracker and summary writer, named as torch_xla's test utilities
    'from train_base import RateTracker, close_summary_writer\ntracker = RateTracker()\n'
    'close_summary_writer(writer)\n',
]
LOOK_ALIKES = EDGE_CASES[-7:]


# What a program set aside for Inf2 is still told (engine/handlers.py `_held`: its platform's notes, NM510 with the
# instance the program runs on): the predicates that read the selection must hold there too.
NOTES = Settings(select=frozenset({"NM510", "NM513", "NM520"}), instance="inf2")
# ... the notes' own spellings, and the look-alikes that selection clears without LibCST
NOTE_CASES = [
    'from torch_neuronx import trace as tr\nmodel = tr(net, example)\n',
    'import torch_neuronx as tnx\ndef export(net, x):\n    return tnx.trace(net, x)\n',
    'from optimum.neuron import NeuronModelForCausalLM\nm = NeuronModelForCausalLM.from_pretrained("x")\n',
    'import neuronx_distributed as nxd\nmodel = nxd.trace.parallel_model_trace(fn, inputs, tp_degree=2)\n',
    'from neuronx_distributed.trace import parallel_model_trace\n',
    'import neuronx_distributed_inference.models.config as cfg\n',
    'estimator = PyTorch(entry_point="train.py", instance_type="ml.trn1.32xlarge")\n',
]
NOTE_LOOK_ALIKES = [
    'import torch_neuronx\nimport torch\n# trace with torch_neuronx.trace on trn1.2xlarge\nx = torch.ones(2)\n',
    'from neuronx_distributed.parallel_layers import parallel_state\nparallel_state.initialize_model_parallel(2)\n',
    'import neuronx_distributed as nxd\nconfig = nxd.neuronx_distributed_config(tensor_parallel_size=2)\n',
]


def _findings(path: str, data: bytes, tree_filter: bool, monkeypatch, rewrite: bool = False,
              settings: Settings | None = None) -> list | str:
    with monkeypatch.context() as m:
        if not tree_filter:
            m.setattr(engine, "tree_filter", lambda rules, scan, settings, step=False: rules)
        try:
            result = engine.process_python(path, data, settings or Settings(), rewrite)
        except SourceError as exc:
            return f"error: {exc}"
    found = [(f.line, f.col, f.end_line, f.end_col, f.code, f.message, f.fixable, f.status) for f in result.findings]
    return [*found, result.new_bytes, result.applied] if rewrite else found


def _files() -> list[tuple[str, bytes]]:
    fixtures = [(str(p), p.read_bytes()) for p in sorted(FIXTURES.rglob("*.py"))]
    examples = [(str(p), p.read_bytes()) for p in sorted((ROOT / "examples").rglob("*.py"))]
    edges = [(f"scan-edge-{i}.py", text.encode()) for i, text in enumerate(EDGE_CASES)]
    return fixtures + examples + list(CORPUS) + edges


@pytest.mark.parametrize("rewrite", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["check", "rewrite"])
def test_the_tree_filter_changes_no_finding_and_no_rewrite(monkeypatch, rewrite):
    for path, data in _files():
        found = _findings(path, data, True, monkeypatch, rewrite)
        assert found == _findings(path, data, False, monkeypatch, rewrite), path
    for i, text in enumerate(LOOK_ALIKES):
        assert _findings(f"look-alike-{i}.py", text.encode(), True, monkeypatch) == []


def test_the_tree_filter_changes_no_note_of_a_set_aside_program(monkeypatch):
    files = _files() + [(f"note-{i}.py", text.encode()) for i, text in enumerate(NOTE_CASES)]
    noted = 0
    for path, data in files:
        found = _findings(path, data, True, monkeypatch, settings=NOTES)
        assert found == _findings(path, data, False, monkeypatch, settings=NOTES), path
        noted += path.startswith("note-") and bool(found)
    assert noted == len(NOTE_CASES)  # each case is a note: the predicates are not vacuous
    for i, text in enumerate(NOTE_LOOK_ALIKES):
        assert engine.active_rules(text.encode(), NOTES, "x.py"), "the byte pre-filter passes it on"
        with monkeypatch.context() as m:
            m.setattr(engine, "parse", _no_libcst)
            assert engine.process_python(f"note-look-alike-{i}.py", text.encode(), NOTES, False).findings == []


def _no_libcst(*args, **kwargs):
    raise AssertionError("LibCST parsed a file the tree pre-filter clears")


@pytest.mark.slow
def test_the_tree_filter_changes_no_finding_in_the_standard_library_and_torch_xla(monkeypatch):
    files = [(str(p), p.read_bytes()) for p in stdlib_sample()] + torch_xla_sources()
    for path, data in files:
        for rewrite in (False, True):
            assert _findings(path, data, True, monkeypatch, rewrite) == \
                _findings(path, data, False, monkeypatch, rewrite), path


def _owners() -> dict[str, list[type[Rule]]]:
    owners: dict[str, list[type[Rule]]] = {}
    for rule in all_rules():
        for code in rule.codes:
            owners.setdefault(code, []).append(rule)
    return owners


def _scan(data: bytes) -> Scan | None:
    try:
        text = data.decode("utf-8")
        return Scan(ast.parse(text), text)
    except (UnicodeDecodeError, SyntaxError, ValueError):
        return None


@pytest.mark.parametrize("settings", [Settings(), NOTES], ids=["every-code", "set-aside-notes"])
def test_every_finding_comes_from_a_rule_whose_tree_predicate_holds(monkeypatch, settings):
    """Every rule runs on every file (both pre-filters off); each finding of a rule code needs a rule owning the
    code whose predicate holds. The edge cases are not vacuous: each gives findings of a filtered rule."""
    monkeypatch.setattr(engine, "active_rules", lambda data, settings, path, present=None: list(all_rules()))
    monkeypatch.setattr(leftovers, "active", lambda present, settings, path: settings.enabled(leftovers.CODE, path))
    monkeypatch.setattr(engine, "tree_filter", lambda rules, scan, settings, step=False: rules)
    owners = _owners()
    filtered = {r for r in all_rules() if "may_match_tree" in vars(r)}
    assert len(filtered) >= 12
    edge_hits: set[str] = set()
    notes = [(f"note-{i}.py", text.encode()) for i, text in enumerate(NOTE_CASES)] if settings is NOTES else []
    for path, data in _files() + notes:
        scan = _scan(data)
        if scan is None:
            continue
        try:
            result = engine.process_python(path, data, settings, False)
        except SourceError:
            continue
        for finding in result.findings:
            rules = owners.get(finding.code)
            if not rules:
                continue  # an engine code (NM199, NM190, NM900, ...): not a rule's
            assert any(r.may_match_tree(scan, settings) for r in rules), \
                f"{path}:{finding.line}: {finding.code} from a rule whose tree predicate is false"
            if path.startswith(("scan-edge-", "note-")):
                edge_hits.update(r.__name__ for r in rules if r in filtered)
    assert len(edge_hits) >= (15 if settings is not NOTES else 5), sorted(edge_hits)


@pytest.mark.parametrize("rewrite", [False, True], ids=["check", "rewrite"])
def test_a_file_the_tree_filter_clears_is_never_parsed_by_libcst(monkeypatch, rewrite):
    parsed = []
    monkeypatch.setattr(engine, "parse_module", lambda text: parsed.append(text) or pytest.fail("parsed"))
    for i, text in enumerate(LOOK_ALIKES):
        assert engine.active_rules(text.encode(), Settings(), "x.py"), "the byte pre-filter passes it on"
        result = engine.process_python(f"look-alike-{i}.py", text.encode(), Settings(), rewrite)
        assert result.findings == [] and result.new_bytes is None
    assert parsed == []


def test_a_cleared_file_python_refuses_to_compile_is_still_an_error():
    text = "import re\nimport torch\nPATTERN = re.compile('padding')\nreturn PATTERN\n"
    with pytest.raises(SourceError, match="line 4:1: syntax error .*'return' outside function"):
        engine.process_python("bad.py", text.encode(), Settings(), True)


def test_the_scan_resolves_names_through_every_import_binding():
    text = ('import torch as th\nimport torch.utils.data\nfrom numpy import random as rnd\nfrom . import local\n'
            'def f():\n    from torch import compile as c\n    c(th.nn.Linear)\n'
            'x = torch.utils.data.DataLoader\ny = rnd.randn(3)\nz = local.thing\n')
    scan = Scan(ast.parse(text), text)
    assert {"torch.compile", "torch.nn", "torch.nn.Linear", "torch.utils.data.DataLoader", "numpy.random.randn",
            "torch.utils"} <= scan.quals
    assert not any(q.startswith("local") or q.startswith(".") for q in scan.quals)
    assert scan.any_qual_under({"torch.nn": 1}) and not scan.any_qual_under({"torch.sparse": 1})
    assert scan.modules == {"torch", "torch.utils.data", "numpy"}
    assert "c" in scan.called and "randn" in scan.called


LEAVES = (ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def _texts() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in stdlib_sample()[:40]] + EDGE_CASES + [
        "type Alias[T: int] = list[T]\n", "match p:\n    case Point(x=0, y=[*rest]) as q if not q: pass\n",
        "async def f():\n    return [x async for x in g() if await x] and {**d} or -a @ b\n",
        "x: 'int' = f'{a!r:>{w}}' ; del y[1:2], z.w\n", "from ..pkg import (a as b, c)\nglobal g\n"]


def _trees():
    for text in _texts():
        try:
            yield ast.parse(text)
        except SyntaxError:  # `type` and its parameters before Python 3.12
            continue


def test_nodes_gives_every_node_ast_walk_gives_but_contexts_and_operators():
    for tree in _trees():
        walked = [n for n in ast.walk(tree) if not isinstance(n, LEAVES)]
        found = list(nodes(tree))
        assert len(found) == len(walked) and {id(n) for n in found} == {id(n) for n in walked}


def test_the_fields_the_walks_leave_out_hold_no_node_but_contexts_and_operators():
    from neuron_migrate.engine.scan import child_fields

    for tree in _trees():
        for node in ast.walk(tree):
            for name in set(node._fields) - set(child_fields(type(node))):
                value = getattr(node, name, None)
                for item in value if isinstance(value, list) else [value]:
                    assert not isinstance(item, ast.AST) or isinstance(item, LEAVES), (type(node).__name__, name)


def _plain(value):
    """A walk's record with each node as its identity, for comparing two walks of one tree."""
    from neuron_migrate.engine.notes import _Binding

    if isinstance(value, ast.AST):
        return id(value)
    if isinstance(value, _Binding):
        return value.kind, value.qualname, value.fallback
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(map(repr, map(_plain, value)))
    return value


def test_the_notes_walk_finds_what_a_walk_of_every_field_finds(monkeypatch):
    from neuron_migrate.engine import notes

    for text in [*_texts(), *(d.decode("utf-8", "replace") for _, d in CORPUS)]:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lean = vars(notes._Tree(tree, text)).copy()
        with monkeypatch.context() as every_field:
            every_field.setattr(notes, "_CHILD_FIELDS", {})
            every_field.setattr(notes, "child_fields", lambda kind: kind._fields)
            full = vars(notes._Tree(tree, text)).copy()
        assert _plain(lean) == _plain(full)


# Helper modules of a program moving to neuron that never spell torch_xla: the byte pre-filter counts them as holding
# it (facts.MOVING_TO_NEURON_BYTES), for the rules that report CUDA code left there.
MOVING_HELPERS = [
    # nothing for any rule: a data module
    "import numpy as np\n\n\ndef batches(data, size):\n    return np.array_split(data, len(data) // size)\n",
    # CUDA left in a helper of the moving program, a device test, an optimizer step of its own
    "import torch\n\n\ndef to_gpu(batch):\n    return {k: v.cuda() for k, v in batch.items()}\n\n\n"
    "def step(model, optimizer, loss):\n    loss.backward()\n    optimizer.step()\n"
    "    if torch.cuda.is_available():\n        torch.cuda.synchronize()\n",
    # names spelled like torch_xla's own, bound to something else
    "from .utils import xm, mark_step\n\n\ndef sync():\n    mark_step()\n    xm.optimizer_step(None)\n"
    "    xm.master_print('done')\n",
    # ... and like its runtime's, profiler's and renamed functions
    "from .runtime import device_type, profiler, xla_checkpoint as ckpt\n\n\ndef on_neuron():\n"
    "    with profiler.Trace('step'):\n        ckpt.checkpoint(lambda: None)\n"
    "    return device_type() == 'NEURON'\n",
]


def test_a_helper_module_without_torch_xla_runs_no_nm199_step_and_loses_no_finding(monkeypatch):
    settings = Settings(project=FileProject(target="trn2", moving="train.py", imported_by="train.py"))
    step = leftovers.active

    def results() -> list:
        return [(r.findings, r.new_bytes) for text in MOVING_HELPERS for r in
                [engine.process_python(f"helper_{len(text)}.py", text.encode(), settings, rewrite) for rewrite in
                 (False, True)]]

    now = results()
    with monkeypatch.context() as m:  # as before: the step counted the moving program's bytes as the file's own
        m.setattr(leftovers, "active", lambda present, s, path: present.any(leftovers.TRIGGERS) and
                  s.enabled(leftovers.CODE, path))
        m.setattr(engine, "TREE_FILTER", False)
        before = results()
    assert now == before
    assert any(findings for findings, _ in now)  # the CUDA helper's findings stay
    assert not step(Present(MOVING_HELPERS[1].encode(), MOVING_TO_NEURON_BYTES), settings, "helper.py")
    parsed = []
    monkeypatch.setattr(engine, "parse_module", lambda text: parsed.append(text) or pytest.fail("parsed"))
    for i in (0, 2, 3):
        assert engine.process_python(f"helper_{i}.py", MOVING_HELPERS[i].encode(), settings, False).findings == []
    assert parsed == []


def test_torch_cuda_names_the_program_patches_itself_clear_the_file(monkeypatch):
    """NM322/NM323 leave the torch.cuda names a module of the program redefines (`project.cuda_patched`): a file
    that names only those is never parsed by LibCST; one more name brings it back."""
    settings = Settings(project=FileProject(target="trn2", moving="train.py", imported_by="train.py",
                                            cuda_patched=("LongTensor", "current_device")))
    patched = ("import torch\n\n\ndef batch(n):\n    t = torch.cuda.LongTensor(n)\n"
               "    return t.to(torch.cuda.current_device())\n")
    more = patched + "\n\ndef sync():\n    torch.cuda.synchronize()\n"
    found = engine.process_python("more.py", more.encode(), settings, False).findings
    assert [(f.line, f.code) for f in found] == [(10, "NM322")]
    parsed = []
    monkeypatch.setattr(engine, "parse_module", lambda text: parsed.append(text) or pytest.fail("parsed"))
    assert engine.process_python("patched.py", patched.encode(), settings, False).findings == []
    assert parsed == []


class _NoSelection:
    """Settings whose selection (which codes are enabled) cannot be read; the options and the project can."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def __getattr__(self, name):
        if name in ("select", "ignore", "per_file_ignores", "enabled"):
            raise AssertionError(f"a predicate asked where the NM199 step runs read the selection ({name})")
        return getattr(self._settings, name)


def test_the_predicates_asked_where_the_nm199_step_runs_read_no_selection():
    """Where the NM199 step runs, a rule takes over the nodes it reports on whatever the selection, so the engine
    asks only the predicates that read no selection (`tree_predicate_any_selection`). The class that says so is
    the one whose predicate it is: a subclass with a predicate of its own says it again, or not."""
    flagged = [r for r in all_rules() if r.tree_predicate_any_selection]
    assert len(flagged) >= 30
    projects = [Settings(), Settings(compile=False),
                Settings(project=FileProject(target="trn2", moving="train.py", launches_moving="train.py"))]
    for rule in all_rules():
        owner = next(c for c in rule.__mro__ if "may_match_tree" in vars(c))
        declared = next(c for c in rule.__mro__ if "tree_predicate_any_selection" in vars(c))
        assert not rule.tree_predicate_any_selection or owner is declared, rule
    for path, data in _files():
        scan = _scan(data)
        if scan is not None:
            for rule in flagged:
                for settings in projects:
                    rule.may_match_tree(scan, _NoSelection(settings))


def test_a_torch_xla_file_runs_the_rules_its_names_reach_under_any_selection(monkeypatch):
    """The passes over a file that imports torch_xla (Python's tree decides it here, with the rules LibCST's pass
    would get) get only the rules that may report there, and a rule gets it whether or not its codes are
    selected: its `xm.mark_step()` is no NM199 finding with NM103 left out."""
    passed = []
    decide = engine.decide_on_tree

    def recorded(path, text, tree, rules, settings, made=None, step=False):
        passed.append((step, {r.__name__ for r in rules}))
        return decide(path, text, tree, rules, settings, made, step)

    monkeypatch.setattr(engine, "decide_on_tree", recorded)
    text = ('import torch_xla.core.xla_model as xm\n\n\ndef train(loader, device):\n    for batch in loader:\n'
            '        batch.to(device)\n        xm.mark_step()\n')
    every = engine.process_python("train.py", text.encode(), Settings(), False).findings
    assert {f.code for f in every} == {"NM103", "NM190"}
    step_only = engine.process_python("train.py", text.encode(), Settings(select=frozenset({"NM199"})), False)
    assert step_only.findings == []
    assert passed[0] == passed[1] and passed[0][0]
    assert "MarkStep" in passed[0][1]
    assert not passed[0][1] & {"MasterPrint", "Seed", "Metrics", "Spawn", "Collectives", "XlaDeviceString",
                               "XlaDeviceCall", "CompilePlacedModel", "Save", "GradientAveraging", "Spmd"}


@pytest.mark.parametrize("tree_filter", [True, False], ids=["filtered", "every-rule"])
def test_an_import_that_names_xm_save_is_no_save_passed_on(monkeypatch, tree_filter):
    """LibCST resolves an import statement's dotted name as a name; `Save` reported it as `xm.save` passed on and
    wrote `import save_on_master`. Python's tree reads no name there, so `Save`'s predicate could not see it."""
    if not tree_filter:
        monkeypatch.setattr(engine, "tree_filter", lambda rules, scan, settings, step=False: rules)
    text = "import torch_xla.core.xla_model.save\n"
    result = engine.process_python("x.py", text.encode(), Settings(), True)
    assert [f.code for f in result.findings] == ["NM190"]
    assert b"save" not in result.new_bytes
