"""Markers: short, one per (code, statement), directly above their statement, and recognised there on every later
run; repeated findings of one library become one marker at its import, with a count."""

from __future__ import annotations

import re

import libcst as cst
import pytest

from neuron_migrate.engine.edits import MARKER_LIMIT, EditSet, apply, marker_text
from neuron_migrate.engine.python import process_python
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, ROOT, rewrite_bytes, rewrite_text

MARKER = re.compile(r"#\s*TODO\(neuron-migrate (NM\d{3})\).*$")


def _findings(text: str):
    return process_python("t.py", text.encode(), Settings(), rewrite=False).findings


def _expected_outputs():
    for folder in (FIXTURES, ROOT / "examples"):
        yield from sorted(p for p in folder.rglob("*") if p.is_file() and (
            ".expected" in p.name or "expected" in p.relative_to(folder).parts[:-1]))


@pytest.mark.parametrize("path", list(_expected_outputs()), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_marker_written_fits_in_100_characters_and_says_where_to_read(path):
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = MARKER.search(line)
        if m:
            marker = m.group(0).rstrip('",\\n')  # notebooks hold their lines as JSON strings
            assert len(marker) <= MARKER_LIMIT, f"{path.name}: {marker}"
            assert marker.endswith(f"neuron-migrate explain {m.group(1)}"), f"{path.name}: {marker}"


def test_a_long_marker_is_cut_at_a_word_and_keeps_its_names_whole():
    text = marker_text("NM323", "`torch.cuda.memory.mem_get_info` (and `torch.cuda.memory.max_memory_reserved`) "
                                "are CUDA-specific and have no namesake on the native backend", "")
    assert len(text) <= MARKER_LIMIT and text.endswith("; neuron-migrate explain NM323")
    assert text.count("`") % 2 == 0 and "torch.cuda.memory." not in text


LICENSED = '''\
# Copyright 2024 The project authors.
# Licensed under the Apache License, Version 2.0
from neuronx_distributed.parallel_layers import ColumnParallelLinear


def build(size):
    return ColumnParallelLinear(size, size)
'''


def test_a_marker_above_the_first_statement_of_a_module_is_seen_on_the_next_run():
    out = rewrite_text(LICENSED)
    assert out.count("TODO(neuron-migrate NM506)") == 1
    assert out.splitlines()[2].startswith("# TODO(neuron-migrate NM506)")  # directly above the import
    assert rewrite_bytes(out.encode()) is None
    # the import's marker, and NM230's above the layer built outside a model definition: no finding again
    assert [f.code for f in _findings(out)] == ["NM900", "NM900"]


IN_BLOCKS = '''\
import torch
import torch_xla.core.xla_model as xm


def train(model, steps, report):
    for step in range(steps):
        if report:
            with torch.no_grad():
                print(torch.cuda.mem_get_info(0), xm.get_memory_info(xm.xla_device()))
        while step > 10:
            step = xm.get_ordinal_fn(step)
'''


def test_markers_in_if_while_with_bodies_sit_on_their_statement_and_are_not_repeated():
    out = rewrite_text(IN_BLOCKS)
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if "TODO(neuron-migrate" in line:
            below = next(x for x in lines[i + 1:] if "TODO(neuron-migrate" not in x)
            assert len(below) - len(below.lstrip()) == len(line) - len(line.lstrip())  # the statement's indent
            assert not below.lstrip().startswith(("if ", "with ", "while ", "for ")), (line, below)
    assert rewrite_bytes(out.encode()) is None


def test_a_marker_of_a_statement_whose_emptied_if_goes_stands_where_the_if_was_once():
    source = ("import os\n\n\ndef step(model):\n    if 'PORT' in os.environ:\n"
              "        port = int(os.environ['PORT'])\n        import torch_xla.debug.profiler as xp\n"
              "        server = xp.start_server(port)\n    return model()\n\n\n"
              "if __name__ == '__main__':\n    import torch_xla.debug.profiler as xp\n\n    xp.start_server(9012)\n")
    out = rewrite_text(source)
    assert "if 'PORT'" not in out and "__main__" not in out and "pass" not in out  # the emptied ifs went
    assert out.count("TODO(neuron-migrate NM257)") == 2
    assert "    # TODO(neuron-migrate NM257): `PORT` does nothing now; neuron-migrate explain NM257\n" \
           "    return model()\n" in out  # at the function's indentation, above what follows
    assert out.endswith("# TODO(neuron-migrate NM257): profiler server gone: use torch.profiler; "
                        "neuron-migrate explain NM257\n")  # the module's last statement went: at its end
    assert rewrite_bytes(out.encode()) is None


def test_a_marker_is_recognised_anywhere_in_the_comments_right_above_its_statement():
    out = rewrite_text(LICENSED)
    moved = out.replace("from neuronx_distributed", "# a comment a person added\nfrom neuronx_distributed")
    assert rewrite_bytes(moved.encode()) is None


def test_one_marker_per_code_and_statement():
    source = "import torch\nimport torch_xla\n\nfree = torch.cuda.mem_get_info(0)[0] + torch.cuda.mem_get_info(1)[0]\n"
    out = rewrite_text(source)
    assert out.count("TODO(neuron-migrate NM323)") == 1
    assert rewrite_bytes(out.encode()) is None


def test_a_marked_statement_keeps_its_marker_when_a_rule_inserts_code_before_it():
    module = cst.parse_module("x = 1\n# about y\ny = f(x)\n")
    statement = module.body[1]
    edits = EditSet()
    edits.before[statement] = list(cst.parse_module("prepare()\n").body)
    edits.add_marker(statement, marker_text("NM199", "`f`: no automatic rewrite"))
    edits.add_marker(statement, marker_text("NM199", "another text of the same code"))
    assert apply(module, edits).code == ("x = 1\n# about y\nprepare()\n"
                                         "# TODO(neuron-migrate NM199): `f`: no automatic rewrite; "
                                         "neuron-migrate explain NM199\ny = f(x)\n")


NKI = '''\
import torch
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    x = nl.load(a)
    y = nl.load(b)
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.add(x, y))
    return out
'''


def test_the_compiler_nki_namespace_is_one_finding_at_its_import_with_the_count_of_uses():
    found = [f for f in _findings(NKI) if f.code == "NM505"]
    assert len(found) == 1 and found[0].line == 2
    assert "XLA-era" not in found[0].message and "8 uses" in found[0].message
    assert "import nki.language as nl" in found[0].message
    out = rewrite_text(NKI)
    assert out.count("TODO(neuron-migrate NM505)") == 1 and rewrite_bytes(out.encode()) is None


def test_the_xla_era_nki_entry_point_keeps_its_own_message():
    source = "from torch_neuronx.xla_impl.ops import nki_jit\n\nadd = nki_jit()(kernel)\n"
    (found,) = [f for f in _findings(source) if f.code == "NM505"]
    assert "XLA-era" in found.message and "@nki_op" in found.message


NXD = '''\
import torch
from neuronx_distributed.parallel_layers import ColumnParallelLinear, RowParallelLinear
from neuronx_distributed.parallel_layers import parallel_state
from neuronx_distributed.pipeline import NxDPPModel
from transformers_neuronx import LlamaForSampling
'''


def test_the_imports_of_one_library_are_one_finding_with_their_count_and_hints():
    found = [f for f in _findings(NXD) if f.code == "NM506"]
    assert [(f.line, f.message.split(" ")[0]) for f in found] == [(2, "`neuronx_distributed`"),
                                                                 (5, "`transformers_neuronx`")]
    assert "3 imports" in found[0].message and "pipelining" in found[0].message and "DTensor" in found[0].message
    out = rewrite_text(NXD)
    assert out.count("TODO(neuron-migrate NM506)") == 2 and rewrite_bytes(out.encode()) is None


def test_the_imports_of_nxd_inference_are_one_finding_with_their_count():
    source = ("from neuronx_distributed_inference.models.config import NeuronConfig\n"
              "from neuronx_distributed_inference.models.llama.modeling_llama import NeuronLlamaForCausalLM\n"
              "import neuronx_distributed_inference.utils.hf_adapter as hf_adapter\n")
    found = [f for f in _findings(source) if f.code == "NM507"]
    assert [(f.line, f.message.split(":")[0]) for f in found] == [(1, "`neuronx_distributed_inference`")]
    assert "3 imports in this file" in found[0].message
    out = rewrite_text(source)
    assert out.count("TODO(neuron-migrate NM507)") == 1 and rewrite_bytes(out.encode()) is None


def test_a_marker_in_a_shell_script_is_recognised_under_a_comment_a_person_added():
    from neuron_migrate.files.envfiles import process_shell

    first = process_shell("run.sh", b"export XLA_USE_BF16=1\npython train.py\n", Settings(), True).new_bytes
    edited = first.replace(b"export XLA_USE_BF16", b"# kept for the old image\nexport XLA_USE_BF16")
    assert process_shell("run.sh", edited, Settings(), True).new_bytes is None


def test_other_xla_impl_apis_are_not_called_nki_entry_points():
    source = ("from torch_neuronx.xla_impl.hlo import xla_hlo_call\n\n\n"
              "@xla_hlo_call\ndef marker(x):\n    return x\n")
    (found,) = [f for f in _findings(source) if f.code == "NM505"]
    assert "XLA-era way to call an NKI kernel" not in found.message and "torch_neuronx.xla_impl" in found.message
