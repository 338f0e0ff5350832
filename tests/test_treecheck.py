"""A CUDA helper's leftovers decided on Python's tree (engine/treecheck.py) are the LibCST pass's.

The LibCST pass is the oracle: every fixture and example, and the cases below, give the same findings (line,
column, end, code, message, fixable, held back) with the decision on Python's tree on and off: as a module a moving
program reaches, as a file of its own, and in the portable device style. Each case also says whether Python's
tree decides it or hands it back, so that both ways are known to be taken.
"""

from __future__ import annotations

import ast
import contextlib
import os
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from neuron_migrate.engine import python as engine
from neuron_migrate.engine import treecheck
from neuron_migrate.engine.sources import SourceError
from neuron_migrate.files.notebook import process_notebook
from neuron_migrate.project_facts import FileProject
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, ROOT
from tests.test_positions import stdlib_sample
from tests.test_treenames import ECOSYSTEM

HELPER = FileProject(target="trn2", moving="train.py", imported_by="train.py")
SETTINGS = {
    "helper": Settings(project=HELPER),
    "alone": Settings(),
    "portable": Settings(project=HELPER, device_style="accelerator"),
    "inf2": Settings(instance="inf2"),  # the XLA inference path is maintained there (NM510)
    "patched": Settings(project=FileProject(target="trn2", moving="train.py", imported_by="train.py",
                                            cuda_patched=("set_device",))),
    # a program set aside for Inf2, as its notes pass asks (engine/handlers.py `_held`): no NM190, NM191 or NM199,
    # so a file that imports torch_xla is decided on Python's tree too
    "notes": Settings(select=frozenset({"NM510", "NM513", "NM520"}), instance="inf2"),
}
FILES = sorted(p for p in FIXTURES.rglob("*.py") if not p.name.endswith(".expected.py")) \
    + sorted((ROOT / "examples").rglob("*.py"))
NOTEBOOKS = sorted(p for p in [*FIXTURES.rglob("*.ipynb"), *(ROOT / "examples").rglob("*.ipynb")]
                   if ".expected" not in p.name)


@contextlib.contextmanager
def _python_tree(on: bool, monkeypatch):
    """Python's tree decides what it can (`on`), or the LibCST pass decides alone; yields, for each time the engine
    asks, whether Python's tree decided."""
    decided: list[bool] = []
    decide = treecheck.decide

    def spy(*args, **kwargs):
        found = decide(*args, **kwargs) if on else None
        decided.append(found is not None)
        return found

    with monkeypatch.context() as m:
        m.setattr(engine, "decide_on_tree", spy)
        m.setattr(engine, "STRICT", False)  # a rule that fails on the way is isolated, as users run it
        yield decided


def _check(path: str, data: bytes, settings: Settings, on: bool, monkeypatch) -> tuple[list | str, bool]:
    """(the findings of a `check` of the file, whether Python's tree decided them)."""
    with _python_tree(on, monkeypatch) as decided:
        try:
            result = process_notebook(path, data, settings, False) if path.endswith(".ipynb") else \
                engine.process_python(path, data, settings, False)
            found = [(f.line, f.col, f.end_line, f.end_col, f.code, f.message, f.fixable, f.held_back, f.cell,
                      f.status) for f in result.findings]
        except SourceError as exc:
            found = f"error: {exc}"
    return found, any(decided)


def _same(path: str, data: bytes, settings: Settings, monkeypatch) -> tuple[list | str, bool]:
    on, decided = _check(path, data, settings, True, monkeypatch)
    off, _ = _check(path, data, settings, False, monkeypatch)
    assert on == off, (path, settings.device_style, settings.project)
    return on, decided


def test_fixtures_and_examples_give_the_same_findings_on_either_tree(monkeypatch):
    decided = 0
    for path in FILES:
        data = path.read_bytes()
        for settings in SETTINGS.values():
            found, on_tree = _same(str(path), data, settings, monkeypatch)
            decided += on_tree and bool(found) and not isinstance(found, str)
    assert decided >= 5, decided  # Python's tree decides real findings


def test_notebooks_give_the_same_findings_on_either_tree(monkeypatch):
    for path in NOTEBOOKS:
        for settings in SETTINGS.values():
            _same(str(path), path.read_bytes(), settings, monkeypatch)


# What a program set aside for Inf2 is told (NM510, NM513, NM520), added to each fixture that imports torch_xla
NOTE_SNIPPETS = ['\nimport torch_neuronx\ntraced = torch_neuronx.trace(model, example)\n',
                 '\nINSTANCE = "ml.trn1.32xlarge"\n',
                 '\nimport torch.neuron\nm = torch.neuron.trace(net, [x])\n',
                 '\ndef export(model, x):\n    import torch_neuronx\n    return torch_neuronx.trace(model, x)\n']


def test_the_notes_of_a_set_aside_file_that_imports_torch_xla_are_decided_on_python_s_tree(monkeypatch):
    """Where NM190, NM191 and NM199 are not asked for (a set-aside program's notes pass), a torch_xla import leaves
    nothing for the fix pass to report: the fixtures that import torch_xla, each with a note to find, give the same
    notes on either tree, and most are decided on Python's tree."""
    files = decided = 0
    for i, path in enumerate(FILES):
        data = path.read_bytes()
        if b"torch_xla" not in data:
            continue
        found, on_tree = _same(str(path), data + NOTE_SNIPPETS[i % len(NOTE_SNIPPETS)].encode(), SETTINGS["notes"],
                               monkeypatch)
        files += 1
        decided += on_tree and bool(found) and not isinstance(found, str)
    assert files > 100 and decided > files * 0.8, (files, decided)


def _case(source: str, which: str = "helper", monkeypatch=None, path: str = "utils.py"):
    return _same(path, textwrap.dedent(source).encode("utf-8"), SETTINGS[which], monkeypatch)


# A model whose parts hold NxD's tensor-parallel layers, built after the initialization: what the rule rewrites
# (NM233) as written; `up` is an argument given to the first layer, `more` code at the end of `main`.
TP_MODEL = """\
    import torch
    from neuronx_distributed.parallel_layers import layers, parallel_state


    class MLP(torch.nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.up = layers.ColumnParallelLinear(hidden, 4 * hidden, gather_output=False{up})
            self.down = layers.RowParallelLinear(4 * hidden, hidden, input_is_parallel=True)


    class Net(torch.nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.blocks = torch.nn.ModuleList(MLP(hidden) for _ in range(2))


    def main():
        {init}
        model = Net(1024).to("cpu"){more}
    """
INIT = "parallel_state.initialize_model_parallel(tensor_model_parallel_size=8)"


def tp_model(up: str = "", more: str = "", init: str = INIT) -> str:
    return TP_MODEL.format(up=up, more=more, init=init)


DECIDED = {
    "tensors and modules moved to the GPU": ("""\
        import torch

        def get_batch(data, model):
            images = data[0].cuda()
            labels = data[1].cuda(non_blocking=True)
            model.cuda(0)
            return images, labels
        """, ["NM320", "NM320", "NM320"]),
    "torch_neuronx imported inside a function of a helper (XLA optional: its CUDA code stays)": ("""\
        import torch

        def load():
            import torch_neuronx
            return torch_neuronx

        x = y.cuda()
        """, []),
    "PyTorch APIs the native backend does not run": ("""\
        import torch as th
        import torch.nn.functional as F
        from functorch import vmap
        from torch import nn


        class Embed(nn.Module):
            def __init__(self, sparse=False):
                super().__init__()
                self.sparse = sparse  # an attribute of that name: no API
                self.table = nn.Embedding(10, 3, sparse=True)
                self.rows = nn.Embedding(10, 3, sparse=self.sparse)

            def forward(self, x, weight):
                fft = th.fft.rfft(x)
                y = F.embedding(x, weight, sparse=True)
                return vmap(self.table)(x) + th.sparse.mm(y, fft), th.zeros(2, dtype=th.float8_e8m0fnu)
        """, ["NM301", "NM305", "NM301", "NM302", "NM301", "NM306"]),
    "CUDA device names in device positions": ("""\
        import torch
        from torch import zeros

        def place(model, batch, scaler_device="cpu"):
            model = model.to("cuda")
            a = torch.empty(4, dtype=torch.float32, device=torch.device('cuda:1'))
            b = zeros(4, device="cuda")
            with torch.autocast(device_type="cuda"):
                out = model(batch.to('cuda', non_blocking=True))
            return out, a, b
        """, ["NM321", "NM321", "NM321", "NM321", "NM321"]),
    "XLA device names in device positions": ("""\
        import torch
        from torch import ones

        def place(model, batch):
            model.to("xla")
            a = ones(4, device='xla:1')
            mask = torch.triu(torch.ones((1, 4), device="xla"), diagonal=1)
            cache = batch.to("xla_cache")  # no device name: stays as it is
            return model(batch.to(torch.device("xla:0"), non_blocking=True)), a, mask, cache
        """, ["NM102", "NM102", "NM102", "NM102"]),
    "XLA device names a rewrite left in comparisons (NM102, NM107 and NM201 have nothing to do)": ("""\
        import torch


        def initialize(args, init_method, model):
            if args.distributed_backend == 'xla':
                torch.neuron.set_device(0)
            torch.distributed.init_process_group(
                backend='neuron' if args.distributed_backend == 'xla' else args.distributed_backend,
                init_method=init_method)
            model = model.to(args.device or "xla")
            kinds = {"xla": "neuron"}
            return kinds["xla"], args.device in ("xla", "tpu")
        """, []),
    "torch.cuda functions patched with lambdas (the patches read nothing a fix touches)": ("""\
        import torch
        torch.cuda.device_count = lambda: 8
        torch.cuda.set_device = lambda x: None
        x = y.cuda()
        torch.cuda.synchronize()
        """, ["NM320", "NM322"]),
    "a starred setattr (no patch the fix pass reads)": ("""\
        import torch
        setattr(*patch)
        x = y.cuda()
        """, ["NM320"]),
    "CUDA device names in a program that uses two devices on purpose": ("""\
        import torch
        from .compat import xm
        dev = xm.xla_device()
        x = y.to("cuda:1")
        """, []),
    "comment lines above a node that opens its statement, or between it and its parentheses": ("""\
        import torch

        def get_batch(data, model):
            # TODO(neuron-migrate NM502): a marker a rewrite left
            # another line
            model.cuda(0)
            images = f(
                # the images
                data[0].cuda())
            labels = (
                # the labels

                data[1].cuda()
            )
            return images, labels
        """, ["NM900", "NM320", "NM320", "NM320"]),
    "a device index by name, torch imported under another name": ("""\
        import torch as th

        def place(x, rank):
            return x.cuda(rank), x.cuda(device=True)
        """, ["NM320", "NM320"]),
    "the torch.cuda API, with and without a namesake": ("""\
        import torch

        def sync():
            torch.cuda.synchronize()
            print(torch.cuda.memory_allocated() / 1e6)
            state = torch.cuda.get_rng_state_all()
            torch.cuda.set_device(0)
        """, ["NM322", "NM322", "NM323", "NM322"]),
    "a name the program patches stays": ("""\
        import torch

        torch.cuda.set_device(1)
        torch.cuda.synchronize()
        """, ["NM322"]),
    "module settings, which patch no function in": ("""\
        import torch

        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.deterministic = flags.deterministic and not flags.fast
        setattr(torch.backends.cuda.matmul, "allow_tf32", False)
        x = y.cuda()
        """, ["NM320"]),
    "trn1 instances in a file that tests for a backend": ("""\
        import torch

        INSTANCE = "ml.trn1.32xlarge"
        if torch.cuda.is_available():
            INSTANCE = "ml.trn1.2xlarge"
        else:
            LAUNCH = "--instance-type trn1.32xlarge"
        """, ["NM520", "NM520"]),
    "a value continued by backslashes (LibCST keeps those lines as written)": ("""\
        import torch

        def gather(args, query):
            if args.rank == 0:
                distance = torch.empty(len(query), \\
                                       dtype=torch.float32).cuda()
                index = torch.empty(len(query), \\
          dtype=torch.int64).cuda(non_blocking=\\
                    True)
        """, ["NM320", "NM320"]),
    "NxD's layers outside a model definition's __init__ (NM230)": ("""\
        from neuronx_distributed.parallel_layers import ColumnParallelLinear, ParallelEmbedding

        def build(hidden, vocab):
            up = ColumnParallelLinear(hidden, 4 * hidden, gather_output=False)
            return ParallelEmbedding(vocab, hidden), up
        """, ["NM506", "NM230", "NM230"]),
    "NxD's layers with an option the plain layers lack (NM230)": (
        tp_model(up=", stride=2"), ["NM506", "NM230", "NM230"]),
    "NxD's layers in a model built twice (NM230)": (
        tp_model(up=", stride=1", more="\n        other = Net(512)"), ["NM506", "NM230", "NM230"]),
    "NxD's embedding with options the plain layer lacks (NM230)": ("""\
        from neuronx_distributed.parallel_layers import ParallelEmbedding, parallel_state

        class Embed:
            def __init__(self, vocab, hidden):
                self.words = ParallelEmbedding(vocab, hidden, sparse=True)
                self.places = ParallelEmbedding(vocab, hidden, shard_across_embedding=across)

        parallel_state.initialize_model_parallel(8)
        model = Embed(10, 4)
        """, ["NM506", "NM230", "NM230"]),
    "a marker stands for its code's finding on the statement below it": ("""\
        # TODO(neuron-migrate NM322): a header's marker, above the module's first statement
        import torch


        def get(batch, stream):
            # TODO(neuron-migrate NM320): `batch.cuda()` left for a person
            # (their own note under it)

            x = batch.cuda()
            y = batch.cuda()
            # TODO(neuron-migrate NM401): another code's marker
            z = batch.cuda()
            # TODO(neuron-migrate NM320): above a decorator
            @stream.wrap(batch.cuda())
            def step():
                pass
            return x, y, z
        """, ["NM900", "NM900", "NM320", "NM900", "NM320", "NM900"]),
    "a marker above a name a finding is on": ("""\
        from optimum.neuron import NeuronTrainer

        # TODO(neuron-migrate NM508): swapped by hand later
        trainer = NeuronTrainer(model=model)
        other = NeuronTrainer(model=model)
        """, ["NM900", "NM508"]),
    "only markers": ("""\
        def get(batch):
            # TODO(neuron-migrate NM320): `batch.cuda()` left for a person
            return batch
        """, ["NM900"]),
    "the file's quote style": ("""\
        import torch
        names = ['a', 'b', 'c']
        x = y.cuda(); z = w.cuda(1)
        """, ["NM320", "NM320"]),
    "calls that only look alike": ("""\
        import torch
        import mylib

        a = torch.cuda(x)
        b = mylib.cuda()
        c = x.cuda(args.local_rank)
        d = x.cuda(0, 1)
        e = x.cuda(*devices)
        f = x.cuda(stream=s)
        g = cuda()
        """, []),
    "windows line ends": ("import torch\r\n\r\nx = y.cuda()\r\ntorch.cuda.empty_cache()\r\n", ["NM320", "NM322"]),
    "values in parentheses and over several lines (LibCST leaves out the block's indentation)": ("""\
        import torch

        def gather(data, keys, mask):
            flat = torch.cat(
                [data[key] for key in keys],
              dim=0).cuda()
            query_mask = (mask < 0.5).cuda()
            other = ( mask
                      + 1 ).cuda()
            model = torch.nn.DataParallel(model.cuda())
            fused = (
                Softmax(
                    scale=None,
                )
                .cuda()
                .half()
            )
            return flat
        """, ["NM320"] * 5),
    "reports inside reports": ("""\
        import torch
        x = torch.cuda.current_stream().cuda()
        y = f(a.cuda(), b.cuda(1)).cuda(non_blocking=True)
        """, ["NM320", "NM322", "NM320", "NM320", "NM320"]),
    "wide characters before the call": ("""\
        import torch
        label = "modèle"; x = y.cuda()
        """, ["NM320"]),
    "a GPU benchmark beside the XLA device (two devices: nothing)": ("""\
        import torch
        b = torch.randn(4).to(xla_device())
        c = b.cpu().cuda()
        """, []),
    "a CUDA test": ("""\
        import torch
        if torch.cuda.is_available():
            x = y.cuda()
        """, []),
    "torch bound in a function too": ("""\
        import torch

        def run(torch):
            torch.cuda.synchronize()
        """, []),
    "float64 types, conversions and dtypes": ("""\
        import torch

        x = torch.zeros(3, dtype="float64", device=dev)
        y = torch.ones(2, dtype = 'double' )
        z = x.double()

        class Model(torch.nn.Module):
            dtype = torch.double

            def forward(self, x: torch.DoubleTensor):
                return x.to(torch.float64), torch.float32
        """, ["NM401"] * 6),
    "tensors made from NumPy's float64 arrays": ("""\
        import numpy as np
        import torch

        a = np.zeros(3)
        t = torch.from_numpy(a)
        b = np.array([1.0, -2.0])
        c = torch.as_tensor(b).float()
        d = torch.tensor(data=np.random.rand(3))
        e = np.ones(4, dtype=float)
        f = torch.from_numpy(e)
        a = torch.from_numpy(a)

        def convert(arr):
            arr = np.asarray(arr, dtype="float64")
            return torch.from_numpy(arr), torch.tensor(arr.astype(np.float32)), torch.from_numpy(a)
        """, ["NM401"] * 4),
    "float64 in a CUDA helper": ("""\
        import torch

        def load(x):
            return x.double().cuda()
        """, ["NM320", "NM401"]),
    "the XLA stack's environment variables set and read": ('''\
        """Sets XLA_USE_BF16 for the run."""
        import os

        os.environ["XLA_USE_BF16"] = "1"
        os.environ["NEURON_CC_FLAGS"] = "--model-type=transformer"
        os.environ.setdefault("XLA_DOWNCAST_BF16", "0")
        os.environ["NEURON_FRAMEWORK_DEBUG"] = "1"; debug = os.environ["NEURON_FRAMEWORK_DEBUG"]
        if os.environ.get("XLA_USE_BF16"): half = os.getenv("XLA_DOWNCAST_BF16")
        del os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"]

        def setup():
            os.putenv("XLA_USE_BF16", "1")
        ''', ["NM403", "NM403", "NM405", "NM404", "NM405", "NM405", "NM403"]),
    "a bfloat16 switch read where the file does not set it": ("""\
        import os
        import torch

        use = os.environ.get("XLA_USE_BF16") == "1"
        dtype = torch.bfloat16 if "XLA_DOWNCAST_BF16" in os.environ else torch.float32
        env = {"XLA_USE_BF16": "1", "NEURON_CC_FLAGS": "-O1"}
        """, ["NM405", "NM403", "NM405"]),
    "the Neuron libraries imported, one finding per library": ("""\
        # the model's layers
        import os, neuronx_distributed.parallel_layers as pl, torch
        from neuronx_distributed.parallel_layers import parallel_state
        import transformers_neuronx
        import libneuronxla

        def build():
            from optimum.neuron import NeuronModelForSequenceClassification, NeuronStableDiffusionPipeline
            import neuronx_distributed.trainer
            return pl, libneuronxla
        """, ["NM506", "NM506", "NM506", "NM524"]),
    "optimum-neuron's inference classes beside its other names": ("""\
        from optimum.neuron import NeuronModelForCausalLM, pipeline
        from optimum.neuron import *
        model = NeuronModelForCausalLM.from_pretrained("x", export=True)
        """, ["NM506", "NM524"]),
    "NxD Core's inference tracing and NxD Inference": ('''\
        import neuronx_distributed as nxd
        from neuronx_distributed.trace import parallel_model_trace
        import os, neuronx_distributed_inference.models.config as config
        from neuronx_distributed_inference.utils.hf_adapter import load_pretrained_config

        traced = nxd.trace.parallel_model_trace(build, inputs, tp_degree=2)
        ''', ["NM506", "NM507", "NM507", "NM507"]),
    "Inf1 code beside float64, a trn1 instance asked for": ("""\
        import torch
        import torch.neuron

        model = torch.neuron.trace(net, example_inputs=[torch.zeros(1, dtype=torch.float64)])
        job = Estimator(instance_type="ml.trn1.32xlarge")
        """, ["NM513", "NM401", "NM520"]),
    "torch_neuronx's traces with options, its helpers, saved and loaded artifacts, the bundled NKI": ("""\
        import torch
        import torch_neuronx as tnx
        try:
            from torch_neuronx import DataParallel
        except ImportError:
            DataParallel = None  # bound here, not a read of the API
        from neuronxcc import nki
        import neuronxcc.nki.language as nl

        def build(model, example):
            traced = tnx.trace(model, example, compiler_args=["--auto-cast", "none"])
            torch.jit.save(traced, "model.pt")
            loaded = torch.jit.load("model.pt")
            tnx.lazy_load(loaded)
            if isinstance(loaded, DataParallel):
                return (DataParallel(loaded, device_ids=[0, 1]))
            return nl.program_id(0), tnx.xla_impl.ops.RmsNorm, tnx.nki_jit(kernel)
        """, ["NM505", "NM502", "NM502", "NM502", "NM504", "NM503", "NM503", "NM505", "NM505"]),
    "the bundled NKI named where it is read, no import of it": ("""\
        import neuronxcc as cc
        k = cc.nki.jit(kernel)
        grid = cc.nki.language.program_id(0)
        """, ["NM506", "NM505"]),
    "torch.jit's saves where torch_neuronx is only named stay": ("""\
        import torch
        import neuronx_distributed
        torch.jit.save(model, "m.pt")  # traced with torch_neuronx elsewhere
        """, ["NM506"]),
    "optimum-neuron's trainer classes, where the arguments carry over": ("""\
        from optimum.neuron import NeuronTrainer, NeuronTrainingArguments
        import optimum.neuron.trainers as ont

        args = NeuronTrainingArguments(output_dir="out", bf16=True)
        trainer = NeuronTrainer(model=model, args=args, train_dataset=ds)
        other = (ont.NeuronSFTTrainer)(model, args=args)
        """, ["NM506", "NM508", "NM508", "NM508"]),
    "optimum-neuron's trainer classes the program still needs": ("""\
        from dataclasses import dataclass
        from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer, NeuronHfArgumentParser

        @dataclass
        class Script:
            dp_size: int = 1  # the script's own field, not the Neuron class's

        class Holder:
            def __init__(self, tp):
                self.trn_config = tp

        def main():
            parser = NeuronHfArgumentParser((Script, NeuronSFTConfig))
            script, training_args = parser.parse_args_into_dataclasses()
            cfg = training_args.trn_config
            n = getattr(training_args, "tensor_parallel_size", 1)
            trainer = NeuronSFTTrainer(model=model, args=training_args, zero_1 = True)
            return script.dp_size, (training_args).world_size_as_dp_size
        """, ["NM506", "NM509", "NM509", "NM509", "NM509"]),
    "torch_neuronx and optimum-neuron imported inside functions": ("""\
        def export(model, example):
            import torch_neuronx
            traced = torch_neuronx.trace(model, example, compiler_workdir="/tmp/neuron")
            return torch_neuronx.DataParallel(traced)

        def train(model, data):
            from optimum.neuron import NeuronTrainer
            return NeuronTrainer(model=model, train_dataset=data)
        """, ["NM502", "NM503", "NM508"]),
    "the file's own classes named like optimum-neuron's and torch_neuronx's stay": ("""\
        import torch

        class NeuronTrainer:  # this project's own Neuron trainer, not optimum-neuron's
            def __init__(self, model, tensor_parallel_size=1):
                self.trn_config = {"tp": tensor_parallel_size}

        class DataParallel(torch.nn.Module):
            pass

        trainer = NeuronTrainer(model, tensor_parallel_size=8)
        print(trainer.trn_config, DataParallel, torch.jit.load("traced_for_torch_neuronx.pt"))
        """, []),
    "in parentheses (the message quotes them, the place leaves them out)": ("""\
        import torch
        x = (y.cuda())
        z = f(( a.double() ))
        w = (
            torch.ones(2)
            .cuda()
        )  # on the device
        v = y.to((torch.float64))
        """, ["NM320", "NM401", "NM320", "NM401"]),
}

HANDED_BACK = {
    "a marker that closes a block, above a statement of the code": ("""\
        import torch
        if ready:
            x = 1
            # TODO(neuron-migrate NM320): the block's last line, not the next statement's
        y = z.cuda()
        """, ["NM900", "NM320"]),
    "a marker above an elif": ("""\
        import torch
        if ready:
            x = 1
        # TODO(neuron-migrate NM320): above the elif
        elif w.cuda():
            pass
        """, ["NM900"]),
    "NxD's layers the rule rewrites (NM233 spells the plan)": (tp_model(), ["NM506", "NM233"]),
    "NxD's initialization sharing its line with another statement": (
        tp_model(init=INIT + "; ready = True"), ["NM506", "NM230", "NM230"]),
    "a function patched in by its name": ("""\
        import torch

        def _sync():
            torch.cuda.synchronize()

        torch.cuda.empty_cache = _sync
        x = y.cuda()
        """, ["NM322", "NM320"]),
    "a function patched in through setattr": ("""\
        import torch
        setattr(torch.cuda, "synchronize", lambda: torch.cuda.current_stream().synchronize())
        x = y.cuda()
        """, ["NM322", "NM320"]),
    "a function patched in for the class a fix writes (the fix would make it call itself)": ("""\
        import transformers
        from optimum.neuron import NeuronTrainer

        def make(model, args):
            return NeuronTrainer(model, args=args)

        transformers.Trainer = make
        """, ["NM508"]),
    "a patched value that a fix would replace whole": ("""\
        import torch
        torch.default_weights = weights.cuda()
        """, ["NM320"]),
    "a value in parentheses": ("""\
        import torch
        y = z.cuda(non_blocking=(True))
        """, ["NM320"]),
    "a device string compared (NM321 is LibCST's)": ("""\
        import torch
        if args.device == "cuda":
            x = y.cuda()
        """, []),
    "an identifier Python's parser reads otherwise": ("""\
        import torch
        \u00b5 = 1
        x = y.cuda()
        """, ["NM320"]),
    "another rule to run": ("""\
        import torch
        with torch.cuda.amp.autocast():
            x = y.cuda()
        """, ["NM402", "NM320"]),
    "torch.cuda imported by name": ("""\
        from torch.cuda import synchronize
        synchronize()
        """, ["NM322"]),
    "a dotted name across lines": ("""\
        import torch
        torch.cuda . synchronize()
        """, ["NM322"]),
    "a global rank's device": ("""\
        import torch
        torch.cuda.set_device(args.rank % torch.cuda.device_count())
        """, ["NM322"]),
    "a string over several lines in the value": ('''\
        import torch

        def gather(data, keys):
            return torch.tensor(f(
                """a
                b""")).cuda()
        ''', ["NM320"]),
    "inside an f-string": ("""\
        import torch
        label = f"{y.cuda()} on {torch.cuda.device_count()} devices"
        """, ["NM320"]),
    "a fix inside a lambda patched in (it would call itself)": ("""\
        import torch
        torch.neuron.synchronize = lambda: torch.cuda.synchronize()
        """, ["NM322"]),
    "a fix inside a function patched in by name": ("""\
        import torch

        def _sync():
            torch.cuda.synchronize()

        torch.neuron.synchronize = _sync
        """, ["NM322"]),
    "a fix in the decorator of a function patched in": ("""\
        import functools
        import torch

        @functools.lru_cache(maxsize=torch.cuda.memory_allocated())
        def _count():
            return 1

        torch.neuron.memory_allocated = _count
        """, ["NM322"]),
    "a string in an f-string's braces (the quote style)": ("""\
        import torch
        label = f"{d['key']}"
        x = y.cuda()
        """, ["NM320"]),
    "in parentheses after a keyword": ("""\
        import torch
        if (y.cuda()):
            pass
        """, ["NM320"]),
    "a comment before the node in its parentheses": ("""\
        import torch
        x = (  # moved
            y.cuda()
        )
        """, ["NM320"]),
    "a conversion to a sparse layout (reported on the attribute's name)": ("""\
        import torch
        x = torch.ones(3).to_sparse()
        """, ["NM301"]),
    "a CUDA device name held as data (a group of device names)": ("""\
        import torch
        device = "cuda"
        x = y.to(device)
        """, []),
    "a CUDA device name compared": ("""\
        import torch
        same = t.device == torch.device("cuda")
        """, ["NM321"]),
    "a CUDA device name given to the file's own function": ("""\
        import torch
        def make(device):
            return torch.ones(2).to(device)
        x = make(device="cuda")
        """, []),
    "a CUDA device name a dict holds": ("""\
        import torch
        config = dict(device="cuda")
        x = torch.ones(2, device="cuda")
        """, ["NM321", "NM321", "NM321"]),
    "a CUDA device name spelled with escapes": ("""\
        import torch
        x = y.to("cud\\x61")
        torch.cuda.synchronize()
        """, ["NM321", "NM322"]),
    "an XLA device name held in a variable (NM107 places the model there)": ("""\
        import torch


        class Net(torch.nn.Module):
            pass


        DEVICE = "xla"
        model = Net()
        model.to(DEVICE)
        """, ["NM107"]),
    "an XLA device name in an f-string": ("""\
        import torch
        x = y.to(f"xla:{rank}")
        """, ["NM102"]),
    "XLA autocast's device type (its fix writes XLA autocast's dtype)": ("""\
        import torch
        with torch.autocast("xla"):
            pass
        """, ["NM102"]),
    "an XLA device compared": ("""\
        import torch
        same = t.device == torch.device("xla")
        """, ["NM102"]),
    "torch_xla's process-group method given": ("""\
        import torch
        torch.distributed.init_process_group(backend, init_method="xla://")
        """, ["NM201"]),
    "a CUDA device name compared in a program that uses two devices on purpose (NM117 acts where XLA code does)": (
        """\
        import torch
        d = torch.device("neuron")
        x = y.to("cuda:1")

        def f(dev):
            if dev == "cuda":
                pass
        """, ["NM117"]),
    "a PyTorch API written with spaces": ("""\
        import torch
        y = torch . fft.rfft(x)
        """, ["NM305"]),
    "a string's line that looks like a comment before the node": ("""\
        import torch
        x = ("= (\\
        #",
             y.cuda())
        """, ["NM320"]),
    "a float64 type imported by name": ("""\
        import torch
        from torch import float64
        x = torch.zeros(3, dtype=float64)
        """, ["NM401"]),
    "a comment after a float64 dtype's comma": ("""\
        import torch
        x = torch.zeros(3, dtype="float64",  # precise
                        device=dev)
        """, ["NM401"]),
    "float64 asked for inside an f-string": ("""\
        import torch
        label = f"{torch.zeros(3, dtype='float64')}"
        """, ["NM401"]),
    "a variable named in strings joined implicitly": ("""\
        import os
        os.environ["XLA_USE_" "BF16"] = "1"
        """, []),
    "a variable named in an f-string": ("""\
        import os
        print(f"{os.environ['NEURON_CC_FLAGS']}")
        """, ["NM405"]),
    "libneuronxla's snapshot hook (NM258 removes it)": ("""\
        import libneuronxla
        libneuronxla.register_hlo_snapshot_callback(dump)
        """, ["NM506", "NM258"]),
    "a trace the rule rewrites (NM501's message is the rewritten code)": ("""\
        import torch, torch_neuronx
        traced = torch_neuronx.trace(model, torch.zeros(1, 8))
        traced = torch_neuronx.trace(model, example, compiler_args="-O2")
        """, ["NM501", "NM502"]),
    "torch_neuronx's API as a parameter's name": ("""\
        from torch_neuronx import DataParallel
        def serve(model, DataParallel=DataParallel):
            return DataParallel(model)
        """, []),
    "torch_neuronx's API in an f-string": ("""\
        import torch_neuronx
        print(f"{torch_neuronx.DataParallel}")
        """, ["NM503"]),
    "optimum-neuron's trainer swapped in a file that may patch a function": ("""\
        import transformers
        from optimum.neuron import NeuronTrainer
        transformers.Trainer.train = train_faster
        trainer = NeuronTrainer(model=model)
        """, ["NM508"]),
    "a Neuron-only attribute read through strings joined implicitly": ("""\
        from optimum.neuron import NeuronTrainingArguments
        args = NeuronTrainingArguments(output_dir="out")
        size = getattr(args, "tensor_parallel" "_size", 1)
        """, ["NM508"]),
    "torch_neuronx's API bound in a tuple": ("""\
        import torch_neuronx
        a, torch_neuronx.lazy_load = 1, 2
        """, ["NM504"]),
    "Inf1 code in a file that tests for a backend": ("""\
        import torch
        import torch.neuron

        if torch.cuda.is_available():
            model = torch.neuron.trace(net, [x])
        """, []),
}


# Files that move to neuron on their own (no project reaches them): `facts.moving_to_neuron` from the file, and the
# code paths that keep a neuron library's or a neuron switch's CUDA code, which need no test of a backend.
MOVING_ON_THEIR_OWN = {
    "torch_neuronx imported at module level": ("""\
        import torch
        import torch_neuronx
        x = y.cuda()
        """, ["NM320"]),
    "the neuron device used": ("""\
        import torch
        x = y.to("neuron")
        z = w.cuda()
        torch.cuda.synchronize()
        """, ["NM320", "NM322"]),
    "torch_neuronx imported in a function of a module": ("""\
        import torch

        def load():
            from torch_neuronx.xla_impl.ops import set_unload_prior_neuron_models_mode
            set_unload_prior_neuron_models_mode(True)

        x = y.cuda()
        """, ["NM505"]),
    "torch_neuronx imported in a function of a program": ("""\
        import torch

        def load():
            import torch_neuronx as nx
            return nx

        x = y.cuda()
        if __name__ == "__main__":
            load()
        """, ["NM320"]),
    "a neuron library (the device used only in its functions)": ("""\
        import torch

        def put(t):
            t = t.to("neuron")
            return t.cuda()
        """, []),
    "a neuron library whose module level uses the device": ("""\
        import torch

        x = y.to("neuron")

        def put(t):
            return t.cuda()
        """, ["NM320"]),
    "a neuron switch": ("""\
        import torch

        def run(model, on_neuron):
            if on_neuron:
                model = model.to("neuron")
            else:
                model = model.cuda()
            return model

        torch.cuda.synchronize()
        if __name__ == "__main__":
            run(None, True)
        """, []),
    "Inf1 code that spells torch.neuron": ("""\
        import torch
        import torch.neuron
        traced = torch.neuron.trace(model, [x])
        y = x.cuda()
        """, ["NM513"]),
    "a CUDA branch in a file that uses the neuron device": ("""\
        import torch

        x = y.to("neuron")
        if torch.cuda.is_available():
            z = w.cuda()
        torch.cuda.synchronize()
        """, ["NM322"]),
    "the neuron device and CUDA side by side": ("""\
        import torch

        DEVICE = torch.device("neuron")
        x = t.cuda()
        """, []),
}


# Files that do not move to neuron, though they may look so to the tree pre-filter (a torch_neuronx import inside a
# module's function, Inf1's `torch.neuron`): the CUDA family (CUDA device names too) reports nothing, whatever the
# file patches, binds or is written in.
STAYING_ON_THE_GPU = {
    "CUDA device names in a module that imports torch_neuronx inside a function": ("""\
        import torch

        def neuron_version():
            import torch_neuronx
            return torch_neuronx.__version__

        device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        x = y.to("cuda")
        torch.cuda.synchronize()
        """, []),
    "a patched CUDA function and a name bound to torch.cuda in Inf1 code": ("""\
        import torch
        import torch.neuron
        from torch.cuda import synchronize
        torch.cuda.synchronize = lambda: None
        model = torch.neuron.trace(net, [x])
        synchronize()
        x = y.to("cuda:1")
        """, ["NM513"]),
}


@pytest.mark.parametrize("name", sorted(STAYING_ON_THE_GPU))
@pytest.mark.parametrize("which", ["alone", "portable-alone"])
def test_python_tree_decides_that_a_file_that_stays_reports_no_cuda_leftover(name, which, monkeypatch):
    settings = SETTINGS["alone"] if which == "alone" else Settings(device_style="accelerator")
    source, codes = STAYING_ON_THE_GPU[name]
    found, decided = _same("utils.py", textwrap.dedent(source).encode(), settings, monkeypatch)
    assert decided and [f[4] for f in found] == codes


@pytest.mark.parametrize("name", sorted(MOVING_ON_THEIR_OWN))
def test_python_tree_decides_the_cuda_family_of_a_file_that_moves_to_neuron_on_its_own(name, monkeypatch):
    source, codes = MOVING_ON_THEIR_OWN[name]
    found, decided = _case(source, "alone", monkeypatch=monkeypatch)
    assert decided, name
    assert [f[4] for f in found] == codes


@pytest.mark.parametrize("name, on_tree", [(name, True) for name in sorted(DECIDED)]
                         + [(name, False) for name in sorted(HANDED_BACK)])
def test_python_tree_decides_the_common_forms_and_hands_back_what_it_cannot_be_sure_of(name, on_tree, monkeypatch):
    """The findings of each case, in the file's order, and which tree decided them."""
    source, codes = (DECIDED if on_tree else HANDED_BACK)[name]
    which = "patched" if "patches" in name else "helper"
    found, decided = _case(source, which, monkeypatch=monkeypatch)
    assert decided == on_tree, name
    assert [f[4] for f in found] == codes


def test_xla_device_names_in_the_portable_style_go_to_libcst(monkeypatch):
    """The portable style spells the device from a variable the fix defines: LibCST's rule writes it."""
    found, decided = _case(DECIDED["XLA device names in device positions"][0], "portable", monkeypatch=monkeypatch)
    assert not decided
    assert [f[4] for f in found] == ["NM102"] * 4


def test_a_trace_where_the_target_keeps_the_xla_inference_path_is_noted_on_python_s_tree(monkeypatch):
    found, decided = _case("""\
        import torch_neuronx
        m = torch_neuronx.trace(net, x)
        replicas = torch_neuronx.DataParallel(m)
        """, "inf2", monkeypatch=monkeypatch)
    assert decided
    assert [(f[0], f[4]) for f in found] == [(2, "NM510")] and "on inf2 that path is still maintained" in found[0][5]


# A torch_xla import nothing reads: the fix pass's NM190 (an import unused as it was) is decided on Python's tree,
# with the NM199 step or without it (a selection without NM199 still asks the fix pass for NM190 / NM191); a name
# of such an import spelled anywhere else in the file leaves it to LibCST.
UNREAD_IMPORTS = {
    "an alias in a helper that moves its tensors to the GPU": ("""\
        import torch
        import torch_xla.core.xla_model as xm


        def get_batch(batch):
            return batch.cuda()
        """, ["NM190", "NM320"]),
    "modules, and names imported from one over several lines": ("""\
        import torch_xla
        import torch_xla.distributed.xla_multiprocessing as xmp
        from torch_xla.core.xla_model import (
            xla_device,
            mark_step,  # after each step
        )
        """, ["NM190"] * 4),
    "beside another module, and joined by a semicolon": ("""\
        import os, torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics; import torch_xla.debug.profiler as xp
        print(os.sep)
        """, ["NM190"] * 3),
    "in a function and in a class": ("""\
        def main():
            import torch_xla.core.xla_model as xm
            return 1


        class Runner:
            from torch_xla.core import xla_model
        """, ["NM190"] * 2),
    "in a guard, beside torch_neuronx": ("""\
        try:
            import torch_neuronx
            import torch_xla
        except ImportError:
            torch_neuronx = None
        """, ["NM190"]),
    "named in a string and in comments, which read nothing": ("""\
        import torch_xla  # torch_xla for TPUs
        import torch_xla.core.xla_model as xm

        print('xm is gone')  # so is xm
        """, ["NM190", "NM190"]),
    "a file for TPUs or GPUs keeps its XLA code (multi-backend)": ("""\
        import torch
        try:
            import torch_xla.core.xla_model as xm
            XLA = True
        except ImportError:
            XLA = False


        def sync(x):
            if XLA:  # on a TPU
                return x.sum()
            return x
        """, []),
}
NAMED_ELSEWHERE = {
    "a read": ("import torch_xla.core.xla_model as xm\nmem = xm.get_memory_info(d)\n", ["NM199"]),
    "an attribute": ("import torch_xla.core.xla_model as xm\nstate.xm = 1\n", ["NM190"]),
    "a fallback in the guard": ("try:\n    import torch_xla.core.xla_model as xm\nexcept ImportError:\n"
                                "    xm = None\n", ["NM190"]),
    "the module's exports": ("import torch_xla.core.xla_model as xm\n__all__ = ['xm']\n", []),
    "a star import": ("from torch_xla.core.xla_model import *\nx = 1\n", []),
}
IMPORT_SETTINGS = {
    "helper": SETTINGS["helper"],
    "alone": SETTINGS["alone"],
    "--select NM190": Settings(select=frozenset({"NM190"})),
    "--select NM191": Settings(select=frozenset({"NM191"})),
    "--ignore NM199": Settings(project=HELPER, ignore=frozenset({"NM199"})),
}


@pytest.mark.parametrize("which", sorted(IMPORT_SETTINGS))
@pytest.mark.parametrize("name", sorted(UNREAD_IMPORTS))
def test_a_torch_xla_import_nothing_reads_is_decided_on_python_s_tree(name, which, monkeypatch):
    """The same findings as the LibCST pass (which runs the step and the fix pass), in every selection; and no
    LibCST tree is built for them."""
    source, codes = UNREAD_IMPORTS[name]
    settings = IMPORT_SETTINGS[which]
    data = textwrap.dedent(source).encode()
    found, decided = _same("utils.py", data, settings, monkeypatch)
    assert decided, name
    assert [f[4] for f in found] == [c for c in codes if settings.enabled(c)]
    monkeypatch.setattr(engine, "parse_module", lambda text: pytest.fail("LibCST parsed the file"))
    assert [f.code for f in engine.process_python("utils.py", data, settings, False).findings] == \
        [f[4] for f in found]


@pytest.mark.parametrize("name", sorted(NAMED_ELSEWHERE))
def test_a_torch_xla_import_named_elsewhere_goes_to_libcst(name, monkeypatch):
    source, codes = NAMED_ELSEWHERE[name]
    found, decided = _same("utils.py", source.encode(), SETTINGS["helper"], monkeypatch)
    assert not decided, name
    assert [f[4] for f in found] == codes


def test_a_selection_without_nm199_still_reports_and_removes_an_unused_torch_xla_import(monkeypatch):
    """The fix pass's NM190 does not wait for another rule: `--select NM190` (or `--ignore NM199`) on a file where
    no rule has anything to say reports the import, and `rewrite` removes it, as the default selection does."""
    data = b"import torch\nimport torch_xla.core.xla_model as xm\n\nx = torch.zeros(2)\n"
    for settings in (Settings(), *(IMPORT_SETTINGS[k] for k in ("--select NM190", "--ignore NM199"))):
        for on in (True, False):
            with _python_tree(on, monkeypatch), monkeypatch.context() as m:
                m.setattr(engine, "TREE_FILTER", on)
                found = engine.process_python("utils.py", data, settings, False).findings
                written = engine.process_python("utils.py", data, settings, True).new_bytes
            assert [(f.line, f.col, f.code) for f in found] == [(2, 8, "NM190")]
            assert written == b"import torch\n\nx = torch.zeros(2)\n"


# torch_xla's names read only where the rules' findings take them away or keep them handled: the device calls
# `XlaDeviceCall` replaces (NM101), the steps `MarkStep` removes or replaces (NM103, NM104, NM113), the xser saves and
# loads a converter chooses (NM222, kept with their import). Once fixed, an import nothing reads is reported unused
# "once the other fixes are made" (NM190); decided on Python's tree where the NM199 step or the fix pass runs.
# (codes in order)
LEGACY_READS = {
    "the device of a training script's helper": ("""\
        import torch
        import torch_xla.core.xla_model as xm


        def to_device(batch):
            return batch.to(xm.xla_device())
        """, ["NM190", "NM101"]),
    "indexes by name and by number, as a keyword too": ("""\
        import torch
        import torch_xla.core.xla_model as xm

        first = xm.xla_device(0)
        mine = xm.xla_device(n=rank)
        other = xm.xla_device(index = 1)
        """, ["NM190", "NM101", "NM101", "NM101"]),
    "torch_xla.device(), a name imported from the module, an import unread beside them": ("""\
        import torch
        import torch_xla
        import torch_xla.debug.metrics as met
        from torch_xla.core.xla_model import xla_device

        a = torch_xla.device()
        b = xla_device()
        """, ["NM190"] * 3 + ["NM101"] * 2),
    "an import inside the function that reads it": ("""\
        import torch


        def zeros():
            import torch_xla.core.xla_model as xm
            return torch.zeros(2, device=xm.xla_device())
        """, ["NM190", "NM101"]),
    "in lambdas patched in for CUDA's functions": ("""\
        import torch
        import torch_xla.core.xla_model as xm
        torch.cuda.current_device = lambda: xm.xla_device()
        torch.cuda.FloatTensor = lambda t: torch.FloatTensor(t).to(xm.xla_device())
        """, None),
    "a module's helpers, which cast and place tensors, not models (NM107 has nothing to compile)": ("""\
        import torch
        import torch.nn as nn
        import torch_xla.core.xla_model as xm


        class Block(nn.Module):
            def forward(self, x):
                x = x.to(dtype=torch.float32)
                return x.to(torch.float16)


        def place(t):
            return t.to(xm.xla_device())


        def set_attributes(tensor, values):
            for name, value in values.items():
                setattr(tensor, name, value)
        torch.cuda.current_device = lambda: xm.xla_device()
        """, ["NM190", "NM101", "NM101"]),
    "steps that go, a graph cut in a model's forward, a step that waits": ("""\
        import torch
        import torch.nn as nn
        import torch_xla
        import torch_xla.core.xla_model as xm
        from torch_xla.core.xla_model import mark_step


        class Stage(nn.Module):
            def forward(self, x):
                x = self.first(x)
                xm.mark_step()  # a graph cut on purpose
                return self.second(x)


        class Pipeline:  # a method named forward is a model's too
            def forward(self, x):
                mark_step()
                return x


        def train(loader, model):
            for batch in loader:
                loss = model(batch)
                loss.backward()
                xm.mark_step(reset_scope=False)
                torch_xla.sync()
            xm.mark_step(wait=True)
            xm.mark_step(True)
            if loader:
                xm.mark_step(False)
        """, ["NM190"] * 3 + ["NM113", "NM113", "NM103", "NM103", "NM104", "NM104", "NM103"]),
    "a step in a function patched in": ("""\
        import torch
        import torch_xla.core.xla_model as xm


        def _sync():
            xm.mark_step(wait=True)


        torch.cuda.empty_cache = _sync
        torch.cuda.current_device = lambda: xm.xla_device()
        """, ["NM190", "NM104", "NM101"]),
    "the module named in a comment and a string": ("""\
        import torch
        import torch_xla.core.xla_model as xm

        d = xm.xla_device()  # xm picks the core
        print("xm.xla_device() gave", d)
        """, ["NM190", "NM101"]),
    "a marker above a call, which keeps its read and its import": ("""\
        import torch
        import torch_xla.core.xla_model as xm

        # TODO(neuron-migrate NM101): pick the device
        d = xm.xla_device()
        e = xm.xla_device(1)
        """, ["NM900", "NM101"]),
    "a converter that writes and reads the xser layout it chooses (NM222), which keeps its import": ("""\
        import torch
        import torch_xla.utils.serialization as xser


        def load_partial_xser(path):
            return xser.load(path)


        def save(state, path, args):
            if args.save_xser:
                xser.save(state, path)
            else:
                torch.save(state, path)
            state = xser.load(path) if args.load_xser else torch.load(path)
            if options(keep_xser=True):
                xser.save(state, path + ".bak")
            parser.add_argument("--save_xser", help="save in the xser layout")
        """, ["NM222"] * 4),
    "a notebook's cells that import the module twice": ("""\
        import torch
        from torch_xla.core import xla_model as xm
        device = xm.xla_device()
        if device:
            import torch_xla.core.xla_model as xm
        xm.mark_step()
        """, ["NM190", "NM101", "NM190", "NM103"]),
    "rendezvous that become barriers where several processes run (NM205)": ("""\
        import os

        import torch
        import torch_xla.core.xla_model as xm


        def build_index(rank):
            if rank == 0:
                os.makedirs("cache", exist_ok=True)
            xm.rendezvous("cache made")  # every process waits for the folder
            if os.path.exists("cache/done"):
                xm.rendezvous(tag="done")
        """, ["NM190", "NM205", "NM205"]),
    "a rendezvous where the file names WORLD_SIZE and binds dist itself": ("""\
        import torch
        import torch_xla.core.xla_model as xm

        WORLD_SIZE = 8
        dist = None


        def wait():
            xm.rendezvous("x")
        """, ["NM190", "NM205"]),
    "a rendezvous at module level above os's import": ("""\
        import torch
        import torch_xla.core.xla_model as xm

        xm.rendezvous("x")
        import os
        """, ["NM190", "NM205"]),
    "ranks, the world size and the master test from torchrun's variables (NM203)": ("""\
        import torch
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr


        def report(loss):
            rank, size = xr.global_ordinal(), xm.xrt_world_size()
            if not xm.is_master_ordinal(local=False):
                return rank
            first = xm.is_master_ordinal() and size > 1
            log(loss, master=xm.is_master_ordinal(), local=xm.get_local_ordinal(defval=-1))
            keep(xm.is_master_ordinal())
            return [xm.is_master_ordinal(True)]
        """, ["NM190", "NM190"] + ["NM203"] * 8),
    "a process group whose backend comes from elsewhere, in a file that registered torch_xla's (NM201)": ("""\
        import torch
        import torch.distributed as dist
        import torch_xla.distributed.xla_backend  # registers the xla backend


        def setup(args, backend="nccl"):
            dist.init_process_group(args.dist_backend, world_size=args.world_size)
            group = torch.distributed.init_process_group(backend=backend)
            if args.again: dist.init_process_group("gloo")
            log(dist.init_process_group(args.other_backend))  # no statement of its own: nothing goes before it
            return group
        """, ["NM190", "NM201", "NM201", "NM201"]),
    "tensors placed on the device, a model on the CPU (NM107 finds no model on it)": ("""\
        import torch
        import torch.nn as nn
        import torch_xla.core.xla_model as xm


        class Net(nn.Module):
            pass


        def norms(model: nn.Module, net=Net()):
            t = torch.ones(2).to(xm.xla_device())
            torch.zeros(3).to(xm.xla_device())
            model.to("cpu")
            net.to(device="cpu")
            n = nn.Linear(2, 2).parameters()
            return t, model.parameters()
        """, ["NM190", "NM101", "NM101"]),
    "waits where torch is not imported (the fix imports it)": ("""\
        import torch_xla.core.xla_model as xm


        def sync():
            xm.wait_device_ops()
            xm.mark_step(wait=True)
        """, ["NM190", "NM104", "NM104"]),
    "torch_xla's CPU copies of checkpoints (NM243)": ("""\
        import torch
        import torch_xla.core.xla_model as xm
        from torch_xla.core.xla_model import _maybe_convert_to_cpu


        def host(state, keep, step=0):
            cpu = xm._maybe_convert_to_cpu(state)
            pair = (xm._maybe_convert_to_cpu(state, convert=keep), _maybe_convert_to_cpu(data=state, convert=True))
            torch.save(xm._maybe_convert_to_cpu(state, keep), "a.pt")
            plain = [xm._maybe_convert_to_cpu(state, False), xm._maybe_convert_to_cpu(step + 1, convert=False)]
            return cpu, pair, plain, xm._maybe_convert_to_cpu(1.5, False)
        """, ["NM190", "NM190"] + ["NM243"] * 7),
    "a CPU copy through a function's own import, beside a method of that name": ("""\
        import torch


        def later(state, cache):
            import torch_xla.core.xla_model as xla_model
            return xla_model._maybe_convert_to_cpu(state), cache._maybe_convert_to_cpu(state)  # the cache's own
        """, ["NM190", "NM243"]),
    "eager mode switched on and off, the device waited for": ("""\
        import torch
        import torch_xla
        import torch_xla.core.xla_model as xm
        from torch_xla.core.xla_model import wait_device_ops


        def run(step):
            torch_xla.experimental.eager_mode(True)
            step()
            xm.wait_device_ops()  # a comment may name wait_device_ops: LibCST's tree holds no name there
            if step: wait_device_ops()
            torch_xla.experimental.eager_mode(enable=False); xm.mark_step()
        """, ["NM190"] * 3 + ["NM103", "NM104", "NM104", "NM103", "NM103"]),
    "beside a CUDA leftover": ("""\
        import torch
        import torch_xla.core.xla_model as xm


        def step(batch):
            device = xm.xla_device()
            return batch.cuda(), device
        """, None),
}
# The same where the LibCST pass decides: a call the rule leaves to NM199 or compares, an index it may spell
# otherwise, a read that stays, a save or load the rules rewrite, a patch of what a fix spells, a name bound twice,
# an import that stays in a guard. (codes in order)
LEGACY_READS_TO_LIBCST = {
    "an argument the rule leaves to NM199": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                             "d = xm.xla_device(devkind='TPU')\n", ["NM199"]),
    "compared with a tensor's device": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                        "moved = p.device != xm.xla_device()\n", ["NM190", "NM101"]),
    "an index in parentheses": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                "d = xm.xla_device((rank))\n", ["NM190", "NM101"]),
    "an index that is an expression": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                       "d = xm.xla_device(rank % 8)\n", ["NM190", "NM101"]),
    "an API with no rewrite beside it": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                         "d = xm.xla_device()\nmem = xm.get_memory_info(d)\n",
                                         ["NM101", "NM199"]),
    "torch.device patched in a lambda": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                         "torch.device = lambda *a: xm.xla_device()\n", ["NM101"]),
    "a model placed on the device (NM107)": ("import torch\nimport torch.nn as nn\n"
                                              "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\n"
                                              "model = nn.Linear(2, 2).to(device)\n",
                                              ["NM190", "NM101", "NM107"]),
    "a model of the file's class placed (NM107)": ("import torch\nimport torch.nn as nn\n"
                                                   "import torch_xla.core.xla_model as xm\n\n\n"
                                                   "class Net(nn.Module):\n    pass\n\n\nclass Big(Net):\n    pass\n"
                                                   "\n\nnet = Big().eval().to(xm.xla_device())\n",
                                                   ["NM190", "NM107", "NM101"]),
    "a placed name used as a module (NM107)": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                               "m = build()\nm.to(xm.xla_device())\nm.train()\n",
                                               ["NM190", "NM107", "NM101"]),
    "a module annotated, placed (NM107)": ("import torch\nfrom torch import nn\nimport torch_xla.core.xla_model as xm\n"
                                           "\n\ndef place(model: nn.Module):\n    model.to(xm.xla_device())\n",
                                           ["NM190", "NM107", "NM101"]),
    "a pretrained model placed (NM107)": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                          "from transformers import AutoModelForCausalLM\n"
                                          "model = AutoModelForCausalLM.from_pretrained('x')\n"
                                          "model.to(xm.xla_device())\n", ["NM190", "NM107", "NM101"]),
    "a tensor placed where a step is compiled with torch_xla": ("import torch\nimport torch_xla\n"
                                                                "import torch_xla.core.xla_model as xm\n"
                                                                "t = torch.ones(2).to(xm.xla_device())\n"
                                                                "step = torch_xla.compile(f)\n", ["NM190", "NM101",
                                                                                                  "NM110"]),
    "torch.device set with setattr": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                      "setattr(torch, 'device', lambda *a: xm.xla_device())\n", ["NM101"]),
    "a step with devices (NM199)": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                   "xm.mark_step(devices=[d])\n", ["NM199"]),
    "a step that is no statement": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                    "done = xm.mark_step()\n", ["NM199"]),
    "a wait given as a number": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                 "xm.mark_step(0)\nxm.mark_step(wait=1)\n", ["NM199", "NM199"]),
    "a computed wait": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                        "xm.mark_step(wait=not fast)\n", ["NM199"]),
    "torch_xla's wait as a function": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                       "xm.mark_step()\nsync = xm.wait_device_ops\n", ["NM190", "NM103", "NM104"]),
    "a wait with devices (NM199)": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                    "xm.wait_device_ops(devices=[])\n", ["NM199"]),
    "torch_xla's wait imported under a name of its own": ("import torch\n"
                                                          "from torch_xla.core.xla_model import wait_device_ops as w\n"
                                                          "sync = w\n", ["NM190", "NM104"]),
    "a wait where a parameter is named torch": ("import torch_xla.core.xla_model as xm\n\n\n"
                                                 "def sync(torch):\n    xm.wait_device_ops()\n", ["NM199"]),
    "a CPU copy with another argument (NM199)": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                                 "c = xm._maybe_convert_to_cpu(s, True, 1)\n", ["NM199"]),
    "a CPU copy of a string": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                               "c = xm._maybe_convert_to_cpu('a' 'b', False)\n", ["NM190", "NM243"]),
    "a CPU copy's argument in parentheses": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                             "c = xm._maybe_convert_to_cpu((s), keep)\n", ["NM190", "NM243"]),
    "a CPU copy's arguments starred": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                       "c = xm._maybe_convert_to_cpu(*a)\n", ["NM199"]),
    "a CPU copy that reads torch_xla in its argument": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                                        "c = xm._maybe_convert_to_cpu(xm.get_memory_info(d))\n",
                                                        ["NM243", "NM199"]),
    "a parameter named as torch_xla's wait": ("import torch\nimport torch_xla.core.xla_model as xm\n\n\n"
                                              "def f(wait_device_ops=None):\n    xm.wait_device_ops()\n",
                                              ["NM190", "NM104"]),
    "a computed eager switch": ("import torch\nimport torch_xla\n\ntorch_xla.experimental.eager_mode(flag)\n",
                                ["NM199"]),
    "eager mode switched on as a value": ("import torch\nimport torch_xla\n\n"
                                          "done = torch_xla.experimental.eager_mode(True)\n", ["NM199"]),
    "eager mode's context": ("import torch\nimport torch_xla\n\n"
                             "with torch_xla.experimental.eager_mode_context(True):\n    f()\n",
                             ["NM190", "NM103"]),
    "torch_xla's step context": ("import torch\nimport torch_xla\n\nwith torch_xla.step():\n    torch_xla.sync()\n",
                                 ["NM190", "NM109", "NM103"]),
    "a step where torch.neuron.synchronize is patched": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                                         "torch.neuron.synchronize = lambda: xm.mark_step(True)\n",
                                                         ["NM104"]),
    "an xser save the rule rewrites": ("import torch\nimport torch_xla.utils.serialization as xser\n"
                                       "xser.save(state, path)\n", ["NM221"]),
    "xm.save passed on": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                          "model.save_pretrained(out, save_function=xm.save)\n", ["NM190", "NM220"]),
    "a chosen save whose import stays in a guard": ("import torch\ntry:\n    import torch_xla\n"
                                                    "    import torch_xla.utils.serialization as xser\n"
                                                    "except ImportError:\n    pass\n\n\ndef save_xser(s, p):\n"
                                                    "    xser.save(s, p)\n", ["NM190", "NM191", "NM222"]),
    "a rendezvous with a payload (NM199)": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                           "xm.rendezvous('x', b'payload')\n", ["NM199"]),
    "a rendezvous in a one-line block": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                         "if ready: xm.rendezvous('x')\n", ["NM190", "NM205"]),
    "an all-reduce": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                      "xm.all_reduce('sum', [t])\n", ["NM190", "NM204"]),
    "a reduction constant": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                             "op = xm.REDUCE_SUM\nxm.rendezvous('x')\n", ["NM199", "NM205"]),
    "a rank call in parentheses": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                   "n = (xm.get_ordinal())\n", ["NM190", "NM203"]),
    "a computed master test (NM199)": ("import torch\nimport torch_xla.core.xla_model as xm\n"
                                       "ok = xm.is_master_ordinal(local=flag)\n", ["NM199"]),
    "a process group on torch_xla's backend": ("import torch.distributed as dist\n"
                                               "import torch_xla.distributed.xla_backend\n"
                                               "dist.init_process_group('xla', init_method='xla://')\n",
                                               ["NM190", "NM201"]),
    "a backend a name of the file is assigned": ("import torch.distributed as dist\n"
                                                 "import torch_xla.distributed.xla_backend\nbackend = 'xla'\n"
                                                 "dist.init_process_group(backend)\n", ["NM190", "NM102", "NM201"]),
    "a backend a name of the file is assigned, not xla": ("import torch.distributed as dist\n"
                                                          "import torch_xla.distributed.xla_backend\n"
                                                          "backend = 'nccl'\ndist.init_process_group(backend)\n",
                                                          ["NM190"]),
    "a program that pins its own cores": ("import os\nimport torch.distributed as dist\n"
                                          "import torch_xla.distributed.xla_backend\n"
                                          "os.environ['NEURON_RT_VISIBLE_CORES'] = os.environ['LOCAL_RANK']\n"
                                          "dist.init_process_group(args.backend)\n", ["NM190", "NM201"]),
    "a name bound twice, once in a function": ("import torch\nimport torch_xla.core.xla_model as xm\n\n\n"
                                               "def f():\n    import torch_xla.core.xla_model as xm\n"
                                               "    return xm.xla_device()\n", ["NM190", "NM190", "NM101"]),
}
READS_SETTINGS = {k: IMPORT_SETTINGS[k] for k in ("helper", "alone", "--ignore NM199")}


@pytest.mark.parametrize("which", sorted(READS_SETTINGS))
@pytest.mark.parametrize("name", sorted(LEGACY_READS))
def test_torch_xla_reads_fixes_take_away_or_handled_calls_keep_are_decided_on_python_s_tree(name, which, monkeypatch):
    """The same findings and messages as the LibCST pass, NM190 "once the other fixes are made" at each import its
    fixes leave unread (but the one nothing read before), and no LibCST tree built for them."""
    source, codes = LEGACY_READS[name]
    settings = READS_SETTINGS[which]
    data = textwrap.dedent(source).encode()
    found, decided = _same("utils.py", data, settings, monkeypatch)
    assert decided, name
    if codes is not None:
        assert [f[4] for f in found] == [c for c in codes if settings.enabled(c)]
    unused = [f[5] for f in found if f[4] == "NM190"]
    never_read = ("debug.metrics", "xla_backend")  # imported for what importing does, or left behind
    assert all(m.count("once the other fixes are made") == all(n not in m for n in never_read) for m in unused)
    monkeypatch.setattr(engine, "parse_module", lambda text: pytest.fail("LibCST parsed the file"))
    assert [f.code for f in engine.process_python("utils.py", data, settings, False).findings] == \
        [f[4] for f in found]


def test_an_import_the_fixes_take_no_read_of_is_unused_as_it_was(monkeypatch):
    """A name imported from torch_xla and spelled only as an attribute of a call a fix takes away (`mark_step` of
    `xm.mark_step()`) was never read: its NM190 says so, the module's says the fixes leave it unused."""
    source = "import torch\nimport torch_xla.core.xla_model as xm\nfrom torch_xla.core.xla_model import mark_step\n" \
             "\n\ndef train():\n    xm.mark_step()\n"
    found, decided = _same("utils.py", source.encode(), SETTINGS["helper"], monkeypatch)
    assert decided
    assert [(f[0], f[4], "once the other fixes are made" in f[5]) for f in found] == \
        [(2, "NM190", True), (3, "NM190", False), (7, "NM103", False)]


@pytest.mark.parametrize("which", ["--select NM190", "--select NM191", "--ignore NM101", "portable"])
@pytest.mark.parametrize("name", sorted(LEGACY_READS))
def test_reads_no_fix_takes_away_leave_their_imports_to_libcst(name, which, monkeypatch):
    """Where the rules that take a file's torch_xla reads away are not asked for (`--select NM190`), NM101 is not,
    or its fix defines the portable style's device variable, the findings are the LibCST pass's, which decides
    where a read stays."""
    settings = {**IMPORT_SETTINGS, "--ignore NM101": Settings(project=HELPER, ignore=frozenset({"NM101"})),
                "portable": SETTINGS["portable"]}[which]
    source = textwrap.dedent(LEGACY_READS[name][0])
    found, decided = _same("utils.py", source.encode(), settings, monkeypatch)
    tree = ast.parse(source)
    legacy = [n for n in ast.walk(tree)
              if isinstance(n, (ast.Import, ast.ImportFrom)) and "torch_xla" in ast.unparse(n)]
    read = any(treecheck._legacy_spellings(tree, legacy)[1].values())
    assert not (decided and read and "NM190" in settings.select), name  # the rules that take the reads are not asked


@pytest.mark.parametrize("name", sorted(LEGACY_READS_TO_LIBCST))
def test_reads_python_s_tree_cannot_be_sure_of_go_to_libcst(name, monkeypatch):
    source, codes = LEGACY_READS_TO_LIBCST[name]
    found, decided = _same("utils.py", source.encode(), SETTINGS["helper"], monkeypatch)
    assert not decided, name
    assert [f[4] for f in found] == codes


@pytest.mark.parametrize("name", sorted({**LEGACY_READS_TO_LIBCST, **LEGACY_READS}))
def test_the_rules_findings_alone_are_the_libcst_pass_s(name, monkeypatch):
    """Asked for the rules' codes alone (no NM190, NM191, NM199: no read of a torch_xla name to follow), Python's
    tree still decides each call as the LibCST pass does, or hands the file back."""
    source = {**LEGACY_READS_TO_LIBCST, **LEGACY_READS}[name][0]
    settings = Settings(project=HELPER, select=frozenset({"NM101", "NM103", "NM104", "NM113", "NM220", "NM221",
                                                          "NM222"}))
    _same("utils.py", textwrap.dedent(source).encode(), settings, monkeypatch)


EAGER_BASE = Settings(project=FileProject(target="trn2", moving="train.py", imported_by="train.py",
                                          base_compiled=("compiled_step_fn",)))
EAGER_STEP = """\
import torch_xla
from base import Base


class Eager(Base):

    {kind} __init__(self):
        super().__init__()
        {assignment}
        self.other = self.step_fn


class Plain:
    def __init__(self):
        self.compiled_step_fn = self.step_fn


if __name__ == "__main__":
    torch_xla.experimental.eager_mode({switch})
"""


@pytest.mark.parametrize("kind, assignment, switch, codes", [
    ("def", "self.compiled_step_fn = self.step_fn", "True", ["NM190", "NM259", "NM103"]),
    ("async def", "self.compiled_step_fn   =  self .step_fn", "enable=True", ["NM190", "NM259", "NM103"]),
    ("def", "self.compiled_step_fn = self.step_fn", "False", ["NM190", "NM103"]),  # eager mode off
    ("def", "self.compiled = self.step_fn", "True", ["NM190", "NM103"]),  # no attribute the base compiles
    ("@staticmethod\n    def", "self.compiled_step_fn = self.step_fn", "True", ["NM190", "NM103"]),
])
def test_a_subclass_s_eager_step_is_decided_on_python_s_tree(kind, assignment, switch, codes, monkeypatch):
    """NM259 where a base class in another module compiles the step the subclass assigns eagerly (its message quotes
    the assignment on one line, its fix names torch, which the fix imports), on Python's tree; a class with no
    base, another attribute, a decorated method and eager mode off report nothing."""
    data = EAGER_STEP.format(kind=kind, assignment=assignment, switch=switch).encode()
    found, decided = _same("eager.py", data, EAGER_BASE, monkeypatch)
    assert decided and [f[4] for f in found] == codes
    assert all('use `torch.compiler.set_stance("force_eager")(self' in f[5] for f in found if f[4] == "NM259")


@pytest.mark.parametrize("assignment", [
    "self.compiled_step_fn = (self.step_fn)",  # LibCST's code of the value holds its parentheses
    "self.compiled_step_fn = self.step_fn; self.n = 0",  # its `;` is the assignment's to LibCST
    "self.compiled_step_fn = self.step_fn  # eager",
    "self.compiled_step_fn = self.step_fn\n        self.s = torch_xla.compile(self.step_fn)",  # a step compiled here
])
def test_an_eager_step_python_s_tree_may_spell_otherwise_goes_to_libcst(assignment, monkeypatch):
    data = EAGER_STEP.format(kind="def", assignment=assignment, switch="True").encode()
    settings = Settings(project=EAGER_BASE.project, select=frozenset({"NM259"}))  # no read of torch_xla to follow
    found, decided = _same("eager.py", data, settings, monkeypatch)
    assert not decided
    assert [f[4] for f in found] == ["NM259"]


@pytest.mark.parametrize("source", [
    "import sys\n\nXLA = 'torch_xla' in sys.modules\n\n\ndef get_batch(batch):\n    return batch.cuda()\n",
    "# torch_xla used to run this helper; the program moves to neuron\ndef get_batch(batch):\n"
    "    return batch.cuda()\n",
])
def test_a_file_that_names_torch_xla_without_importing_it_is_decided_as_any_other(source, monkeypatch):
    """The NM199 step reports only the names a file imports from torch_xla, and the fix pass only its torch_xla
    imports: a file that names torch_xla in a string or a comment is decided on Python's tree, with the findings
    of the LibCST pass that runs the step and the fix pass (the tree pre-filter off)."""
    data = source.encode()
    found, decided = _same("utils.py", data, SETTINGS["helper"], monkeypatch)
    assert decided and [f[4] for f in found] == ["NM320"]
    with monkeypatch.context() as m:
        m.setattr(engine, "TREE_FILTER", False)
        assert _check("utils.py", data, SETTINGS["helper"], True, monkeypatch)[0] == found
    for rewrite in (False, True):
        assert engine.process_python("utils.py", data, SETTINGS["helper"], rewrite).findings[0].code == "NM320"


def test_a_file_that_names_torch_xla_without_importing_it_and_holds_nothing_to_migrate_is_never_parsed_by_libcst(
        monkeypatch):
    data = b"import sys\n\n\ndef on_xla():\n    return 'torch_xla' in sys.modules  # a TPU run\n"
    monkeypatch.setattr(engine, "parse_module", lambda text: pytest.fail("LibCST parsed the file"))
    for settings in (SETTINGS["helper"], SETTINGS["alone"]):
        for rewrite in (False, True):
            result = engine.process_python("utils.py", data, settings, rewrite)
            assert result.findings == [] and result.new_bytes is None


def test_a_file_no_moving_program_reaches_reports_nothing_on_either_tree(monkeypatch):
    source = DECIDED["tensors and modules moved to the GPU"][0]
    assert _case(source, "alone", monkeypatch=monkeypatch)[0] == []


def test_the_portable_style_goes_to_libcst(monkeypatch):
    found, decided = _case(DECIDED["tensors and modules moved to the GPU"][0], "portable", monkeypatch=monkeypatch)
    assert not decided
    assert [f[4] for f in found] == ["NM320"] * 3


def test_a_node_in_parentheses_is_placed_without_them_and_quoted_with_them(monkeypatch):
    found, decided = _case("""\
        import torch
        y = ( torch.zeros(3).double() )
        """, monkeypatch=monkeypatch)
    assert decided
    assert found[0][:4] == (2, 7, 2, 30) and found[0][5].startswith("`( torch.zeros(3).double() )` converts")


def test_messages_quote_the_code_as_written(monkeypatch):
    found, decided = _case("""\
        import torch
        names = ['a', 'b']
        batch = data['text'].long().cuda(non_blocking = True)
        """, monkeypatch=monkeypatch)
    assert decided
    assert "`data['text'].long().to('neuron', non_blocking=True)`" in found[0][5]


# -- generated helpers: the pieces above and their look-alikes, in any order and nesting -----------------------
PIECES = [
    "x = y.cuda()", "x = y.cuda(1)", "x = y.cuda(dev)", "x = y.cuda(device=2, non_blocking=True)",
    "x = (y.cuda())", "x = (a + b).cuda()", "x = y.cuda(0x1)", "x = y.cuda(True)", "x = y.cuda(args.rank)",
    "torch.cuda.synchronize()", "n = torch.cuda.device_count()", "torch.cuda.set_device(local_rank)",
    "torch.cuda.set_device(rank % 8)", "torch.cuda.set_device(2)", "s = torch.cuda.Stream()",
    "m = torch.cuda.max_memory_allocated", "g = torch.cuda.get_rng_state_all()", "torch.cuda.foo.bar = 1",
    "torch.cuda.manual_seed(1)", "with torch.cuda.amp.autocast(): pass", "label = 'text'", 'label = "text"',
    "if torch.cuda.is_available(): z = w.cuda()", "import torch_neuronx", "import torch as th",
    "from torch import cuda", "del torch.cuda.x", "a, torch.cuda.y = 1, 2", "q = f\"{d['k']}\"",
    "torch.nn.Module.cuda(model)", "model = model.cuda() if gpu else model", "setattr(torch, 'x', 1)",
    "torch.backends.cudnn.benchmark = True", "torch.cuda.synchronize = sync", "torch.x = y.cuda()",
    "setattr(torch.cuda, 'synchronize', lambda: None)", "torch.y = torch.cuda.current_device()",
    "v = y.to('neuron')", "e = {'cuda': y.cuda()}", "x = torch.cat(\n    [a, b]).cuda()",
    "y = f(\n    z.cuda(),\n    w.cuda(non_blocking=\n        True))", "torch.cuda.synchronize(\n)",
    "print(torch.cuda.memory_allocated() / 2)", "models = [\n    m.cuda(),\n    (n.cuda()),\n]",
    "x = (\n    a  # note\n    + b\n).cuda()", "x = (a +\n  \n        b).cuda()", "x = ((a)\n ).cuda()",
    "if(y.cuda()): pass", "x = f((y.cuda()))", "x = (\n    f(y)\n    .cuda()\n    .half()\n)",
    "x = [a.cuda() for a in b]", "x = f(a.cuda()).cuda()", "s = f\"{y.cuda()} {torch.cuda.device_count()}\"",
    "x = torch.cuda.current_stream(y.cuda()).cuda()", "x = y.cuda() \\\n    .half()", "x = \\\n    y.cuda()",
    "x = torch.empty(a, \\\n    b).cuda()", "x = (a + \\\n     b).cuda()", "x = f(a,  # note \\\n  b).cuda()",
    "x = torch.zeros(2, \\\n\n    3).cuda()", "x = f(a,\n  b, \\\n      c).cuda(non_blocking=\\\n  True)",
    # backend tests and names bound in other scopes: the code paths and scopes of Python's tree decide them
    "from accelerate.utils import is_torch_xla_available", "if is_torch_xla_available():\n    x = y.cuda()",
    "if not is_torch_xla_available():\n    return y.cuda()", "if dev.type == 'xla':\n    z = w.cuda()",
    "ok = torch.cuda.is_available() and y.cuda()", "HAS = is_torch_xla_available()", "if HAS:\n    y.cuda()",
    "x = y.cuda() if torch.cuda.device_count() > 1 else y", "torch = load()", "import torch",
    # torch_xla's imports: nothing reads them (NM190 decided on Python's tree), or a name of one is spelled elsewhere
    "import torch_xla.core.xla_model as xm", "from torch_xla.core import xla_model", "import torch_xla",
    "from torch_xla.runtime import world_size", "n = world_size()", "xm.mark_step()", "print('xm', 1)",
    "f(world_size=2)", "xm = None", "x = 'TPU'  # or tpu",
    # torch_xla's device calls (NM101), which leave the imports unread once fixed, and their look-alikes
    "d = xm.xla_device()", "d = xm.xla_device(n=rank)", "d = xm.xla_device(1)", "d = xm.xla_device(devkind='TPU')",
    "d = torch_xla.device()", "ok = p.device == xm.xla_device()", "y.to(xm.xla_device((2)))", "d = dev.xla_device()",
    "torch.cuda.current_device = lambda: xm.xla_device()", "torch.device = lambda *a: xm.xla_device()",
    "from torch_xla.core.xla_model import xla_device", "d = xla_device(0)", "d = f'{xm.xla_device()}'",
    "model = nn.Linear(2, 2).to(xm.xla_device())", "x = y.to(dtype=torch.float16)", "n = model.parameters()",
    "setattr(t, name, v)", "setattr(torch, 'device', lambda: xm.xla_device())", "self.device = d", "y.to(d)",
    "xm.mark_step()", "xm.mark_step(wait=True)", "x = xm.mark_step()", "xm.mark_step(devices=[d])", "torch_xla.sync()",
    "xm.mark_step(0)", "xm.mark_step(wait=None)",
    "def forward(self, x):\n    xm.mark_step()", "torch.neuron.synchronize = lambda: xm.mark_step(True)",
    # xser saves and loads the program chooses (NM222, kept: their reads keep the import), and names in strings
    "import torch_xla.utils.serialization as xser", "def save_xser(s, p):\n    xser.save(s, p)", "s = xser.load(p)",
    "if args.load_xser:\n    s = xser.load(p)", "x = xser.load(p) if use_xser else torch.load(p)", "h = 'xm'",
    "print('xser and xm')  # xm", "__all__ = ['xm']",
    # rendezvous (NM205), their look-alikes, and what their message reads (torchrun's variables, os, dist)
    "xm.rendezvous('x')", "xm.rendezvous(tag='y')", "xm.rendezvous('z', b'data')", "if a:\n    xm.rendezvous('w')",
    "WORLD_SIZE = 2", "import os", "import torch.distributed as dist", "dist = None", "os.environ['RANK'] = '0'",
    "r = xm.get_ordinal()", "ok = not xm.is_master_ordinal()", "x = [xm.is_master_ordinal(False)]", "LOCAL_RANK = 1",
    "import torch_xla.distributed.xla_backend", "dist.init_process_group(args.backend)", "backend = 'nccl'",
    "dist.init_process_group(backend=backend)", "g = dist.init_process_group('xla')", "dist.init_process_group(*a)",
    "n = xm.xrt_world_size() + xm.get_local_ordinal(defval=1)", "f(*xm.get_ordinal())", "q = xm.get_ordinal(d, e)",
    # float64 (NM401): its types, conversions, dtypes and NumPy arrays made into tensors, and their look-alikes
    "import numpy as np", "a = np.zeros(3)", "a = np.array([1, 2])", "a = np.array([1.5, 2])", "a = load()",
    "t = torch.from_numpy(a)", "t = torch.tensor(a).half()", "t = torch.as_tensor(a, dtype=torch.float32)",
    "t = torch.tensor(np.ones(2, dtype=float))", "t = torch.tensor(a.astype('float64'))", "float = int",
    "x = y.double()", "x = y.double(1)", "x = torch.double", "x = torch.float64.itemsize", "torch.double = 1",
    "x = torch.zeros(2, dtype='float64')", "x = torch.zeros(2, dtype='f' 'loat64')", "x = f(dtype='double')",
    "x = torch.ones(2,\n    dtype='double',\n    device=d)", "x = torch.ones(2, dtype='double' )",
    "def g(x: torch.DoubleTensor): return x", "x = torch.cuda.DoubleTensor(2)", "np = None",
    # the XLA stack's environment variables (NM403-NM405): set, read, removed, and their look-alikes
    "import os", "os.environ['XLA_USE_BF16'] = '1'", "os.environ['XLA_USE_BF16'] = '0'", "os = None",
    "v = os.environ.get('XLA_USE_BF16')", "v = os.getenv('XLA_DOWNCAST_BF16', '0')", "del os.environ['XLA_USE_BF16']",
    "if 'XLA_USE_BF16' in os.environ: v = os.environ['XLA_USE_BF16']", "os.putenv(key='XLA_USE_BF16', value='1')",
    "os.environ.setdefault('NEURON_CC_FLAGS', '-O1')", "a, os.environ['XLA_USE_BF16'] = 1, '1'", "w = ('XLA_USE_BF16')",
    "x = os.environ['XLA_USE_BF16'] = '1'", "os.environ['XLA_USE_BF16'] += '1'", "e = {'NEURON_CC_FLAGS': '-O1'}",
    "f(os.environ['XLA_DOWNCAST_BF16'])", "s = 'XLA_USE_BF16'; t = 'XLA_USE_BF16'", "os.environ[1:2] = 'XLA_USE_BF16'",
    '"""Reads NEURON_CC_FLAGS."""', "s = 'XLA_USE_BF16 and NEURON_CC_FLAGS'",
    "os.environ['NEURON_FRAMEWORK_DEBUG'] = '1'",
    # the Neuron libraries (NM506) and optimum-neuron's inference classes (NM524), and their look-alikes
    "import neuronx_distributed", "import neuronx_distributed.parallel_layers as pl, os",
    "from neuronx_distributed.parallel_layers import parallel_state", "import transformers_neuronx",
    "from optimum.neuron import NeuronModelForCausalLM", "from optimum.neuron import NeuronModelForCausalLM, pipeline",
    "from optimum.neuron import (\n    NeuronModelForCausalLM,\n)", "from optimum.neuron import *",
    "import libneuronxla", "from optimum.neuron import NeuronTrainer", "from . import neuronx_distributed",
    "import neuronx_distributed_x", "from neuronx_distributed.trace import parallel_model_trace", "import optimum",
    "import neuronx_distributed as nxd", "m = nxd.trace.parallel_model_trace(f, x)", "m = nxd.trace.other(f)",
    "import neuronx_distributed_inference", "from neuronx_distributed_inference.models import config as c",
    "from neuronx_distributed.trace import *", "m = (nxd.trace.parallel_model_trace(f, x))",
    # Inf1 code (NM513) and trn1 instances (NM520)
    "import torch.neuron", "import torch_neuron", "m = torch.neuron.trace(net, [x])", "t = 'trn1 is the old one'",
    "job = Estimator(instance_type='ml.trn1.32xlarge')", "d = {'trn1.2xlarge': 1.34}",
    "cmd = '--instance-type trn1.2xlarge'",
    # torch_neuronx's traces, artifacts and APIs (NM502-NM505), and the trace the rule rewrites (NM501: LibCST's)
    "m = torch_neuronx.trace(net, x, compiler_args='-O2')", "m = torch_neuronx.trace(net, x)", "m = tnx.trace(*a)",
    "torch.jit.save(m, 'a.pt')", "m = torch.jit.load('a.pt')", "from torch_neuronx import DataParallel",
    "d = DataParallel(m)", "torch_neuronx.lazy_load(m)", "import torch_neuronx as tnx", "DataParallel = None",
    "import neuronxcc.nki.language as nl", "g = nl.program_id(0)", "from neuronxcc import nki", "import neuronxcc",
    "k = tnx.nki_jit(f)", "x = torch_neuronx.xla_impl.ops.X", "k = neuronxcc.nki.jit(f)", "nki = load()",
    # optimum-neuron's trainer classes (NM508), what keeps them (NM509), and their look-alikes
    "from optimum.neuron import NeuronTrainer, NeuronTrainingArguments", "import optimum.neuron.trainers as ont",
    "a = NeuronTrainingArguments(output_dir='o', bf16=True)", "t = NeuronTrainer(model, args=a)",
    "t = ont.NeuronSFTTrainer(model, tensor_parallel_size = 8)", "t = NeuronTrainer(**kw)", "a.dp_size = 2",
    "n = a.trn_config", "n = getattr(a, 'tensor_parallel_size', 1)", "self.dp_size = 2", "dp_size: int = 1",
    "from optimum.neuron import NeuronHfArgumentParser", "p = NeuronHfArgumentParser((A,))", "NeuronTrainer = None",
    "n = hasattr(a, 'zero' '_1')", "from optimum.neuron.distributed import lazy_load_for_parallelism",
    # markers a person left, above the next piece, at its indentation or closing a block
    "# TODO(neuron-migrate NM320): move it", "# TODO(neuron-migrate NM322): left", "# TODO(neuron-migrate NM230): tp",
    "if y:\n    pass\n    # TODO(neuron-migrate NM320): closes the block",
    "x = '''\n# TODO(neuron-migrate NM320): text\n'''",
    # NxD's tensor-parallel layers (NM230 on Python's tree; NM233, the rewrite, is LibCST's)
    "from neuronx_distributed.parallel_layers import ColumnParallelLinear, RowParallelLinear, parallel_state",
    "from neuronx_distributed.parallel_layers import layers as nl", "import torch.nn as nn",
    "self.up = ColumnParallelLinear(4, 8, gather_output=False)", "self.down = RowParallelLinear(8, 4)",
    "self.fc = nl.ColumnParallelLinear(4, 8, stride=(1))", "self.emb = nl.ParallelEmbedding(10, 4, pad=False)",
    "self.out = RowParallelLinear(8, 4, True, input_is_parallel=True)", "self.x = ColumnParallelLinear(*a)",
    "self.y = ColumnParallelLinear(4, output_size=8, bias=False, dtype=d)", "up = ColumnParallelLinear(4, 8)",
    "self.blocks = nn.ModuleList([Net(2), Net(3)])", "self.more = nn.ModuleList(Net(y) for _ in range(2))",
    "parallel_state.initialize_model_parallel(tensor_model_parallel_size=8)", "model = Net(1)",
    "model = Net(2).to(dev)", "parallel_state.initialize_model_parallel(8, 1)", "self.z = nl.ParallelEmbedding(*b)",
]
WRAPPERS = ["{}", "def f(dev, rank):\n    {}", "class C:\n    def m(self, y):\n        {}",
            "class Net:\n    def __init__(self, y):\n        {}",
            "for y in ys:\n    {}", "try:\n    {}\nexcept ImportError:\n    pass", "lam = lambda y: ({})"]


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(WRAPPERS)), min_size=1, max_size=6),
       which=st.sampled_from(sorted(SETTINGS)))
def test_generated_helpers_give_the_same_findings_on_either_tree(parts, which, monkeypatch):
    lines = ["import torch"]
    for piece, wrapper in parts:
        if wrapper.startswith("lam"):
            if "=" in piece.replace("==", "") or ":" in piece or piece.startswith(("import", "from", "del")):
                wrapper = "{}"
        indent = wrapper[wrapper.rfind("\n") + 1:wrapper.find("{}")] if "\n" in wrapper else ""
        lines.append(wrapper.format(piece.replace("\n", "\n" + indent)))
    source = "\n".join(lines) + "\n"
    try:
        compile(source, "<generated>", "exec")
    except SyntaxError:
        return
    _same("utils.py", source.encode("utf-8"), SETTINGS[which], monkeypatch)


PROGRAM = {
    "train.py": """\
        import torch
        import torch_xla.core.xla_model as xm

        from utils import get_batch, report


        def main():
            device = xm.xla_device()
            model = torch.nn.Linear(4, 4).to(device)
            for batch in range(3):
                images, labels = get_batch([torch.rand(4), torch.rand(4)], model)
                xm.mark_step()
            report()


        if __name__ == "__main__":
            main()
        """,
    "utils.py": """\
        import torch


        def get_batch(data, model):
            images = data[0].cuda()
            labels = data[1].cuda(non_blocking=True)
            return images, labels


        def report():
            torch.cuda.synchronize()
            print(torch.cuda.max_memory_allocated() / 1e6)
        """,
}


@pytest.mark.parametrize("output", ["text", "json"])
def test_a_program_s_cuda_helper_is_decided_on_python_s_tree_with_the_same_report(output, tmp_path, monkeypatch):
    """Through the command line: the project model tells the helper it moves with the program, Python's tree
    decides it (the one file of the two) and the report is the LibCST pass's, byte for byte. A JSON report holds
    each finding's fix, which a rewrite pass on LibCST's tree makes: there Python's tree decides nothing."""
    from click.testing import CliRunner

    from neuron_migrate.cli import main

    for name, source in PROGRAM.items():
        (tmp_path / name).write_text(textwrap.dedent(source))
    decided: list[str] = []

    def spy(path, *args, **kwargs):
        found = decide(path, *args, **kwargs) if on else None
        if found is not None:
            decided.append(os.path.basename(path))
        return found

    decide = treecheck.decide
    monkeypatch.setattr(engine, "decide_on_tree", spy)
    monkeypatch.chdir(tmp_path)
    reports = []
    for on in (True, False):
        result = CliRunner().invoke(main, ["check", "--no-cache", "-j", "1", "--format", output, "."],
                                    catch_exceptions=False)
        assert result.exit_code == 1, result.output
        reports.append(result.stdout)
    assert reports[0] == reports[1]
    assert decided == (["utils.py"] if output == "text" else [])
    assert reports[0].count("NM320") >= 2 and reports[0].count("NM322") >= 2


def test_a_set_aside_file_s_probe_gives_the_same_answer_on_either_tree(monkeypatch):
    """A file of a program set aside for another platform: whether it would report more than its notes
    (`handlers._would_change`, which stops at the first other finding) is the same when Python's tree decides."""
    from neuron_migrate.engine import handlers

    sources = [textwrap.dedent(source).encode("utf-8") for source, _ in (*DECIDED.values(), *HANDED_BACK.values())]
    sources += [p.read_bytes() for p in FILES]
    sources.append(b"import numpy as np\nimport torch\n\nt = torch.tensor(np.ones(2, dtype=np.float32))\n")
    answers, decided = [], 0
    for data in sources:
        pair = []
        for on in (True, False):
            with _python_tree(on, monkeypatch) as seen:
                pair.append(handlers._would_change("utils.py", data, "python", Settings()))
            decided += on and any(seen)
        assert pair[0] == pair[1], data.decode("utf-8")[:300]
        answers.append(pair[0])
    assert decided >= 5 and True in answers and False in answers


def _sweep(paths: list, monkeypatch) -> tuple[int, int]:
    """(files Python's tree decided with findings, files compared): every file as a helper of a moving program
    and as a file of its own, with the same findings either way."""
    decided = compared = 0
    for path in paths:
        data = path.read_bytes()
        for which in ("helper", "alone"):
            found, on_tree = _same(str(path), data, SETTINGS[which], monkeypatch)
            decided += on_tree and bool(found) and not isinstance(found, str)
        compared += 1
    return decided, compared


@pytest.mark.slow
@pytest.mark.skipif(not ECOSYSTEM.is_dir(), reason="the ecosystem's files are beside the checkout only")
def test_ecosystem_gives_the_same_findings_on_either_tree(monkeypatch):
    """Real user code: its Python files and notebooks, each decided both ways."""
    decided, compared = _sweep(sorted([*ECOSYSTEM.rglob("*.py"), *ECOSYSTEM.rglob("*.ipynb")]), monkeypatch)
    assert compared >= 450 and decided >= 40, (compared, decided)


@pytest.mark.slow
def test_standard_library_sample_gives_the_same_findings_on_either_tree(monkeypatch):
    decided, compared = _sweep(stdlib_sample(), monkeypatch)
    assert compared >= 140, compared
