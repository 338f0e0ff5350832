"""`neuron-migrate checkpoint inspect|convert` on the layouts the XLA stack writes (built by tests/checkpoint_layouts.py
the way torch_xla and neuronx-distributed write them), and on broken ones."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from neuron_migrate.cli import main  # noqa: E402
from tests import checkpoint_layouts as layouts  # noqa: E402


def run(*args):
    return CliRunner().invoke(main, ["checkpoint", *map(str, args)], catch_exceptions=False)


def converted(src, dst, *options):
    result = run("convert", src, dst, *options)
    assert result.exit_code == 0, result.output
    return result


def equal_states(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k], b[k]), k


def trained_net(seed=0):
    torch.manual_seed(seed)
    net = layouts.Net()
    net.train()
    net(torch.randn(6, 8))  # the BatchNorm's running stats move
    return net


# ---------------------------------------------------------------------------------------------------- plain, xser

def test_plain_file_with_xla_tensors_pickled_without_cpu(tmp_path):
    """A state dict saved from XLA tensors pickles `_rebuild_device_tensor_from_cpu_tensor(cpu, dtype, device, rg)`
    (what makes torch.load without torch_xla fail): the CPU copy is read, the XLA device forgotten."""
    weight = torch.randn(4, 3)

    class FromXla:  # reduces like an XLA tensor does in torch 2.x
        def __reduce_ex__(self, protocol):
            return torch._utils._rebuild_device_tensor_from_cpu_tensor, (weight, weight.dtype, "xla:0", False)

    torch.save({"w": FromXla(), "step": 3}, tmp_path / "x.pt")
    converted(tmp_path / "x.pt", tmp_path / "out.pt")
    out = torch.load(tmp_path / "out.pt", weights_only=True)
    assert out["step"] == 3 and torch.equal(out["w"], weight)


def xser_checkpoint(path: Path) -> tuple[torch.nn.Module, dict]:
    """A trained net's model and AdamW state with an epoch, saved as xser at `path`: the net and the data saved."""
    net = trained_net()
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.1)
    net(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    data = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 2}
    layouts.xser_save(data, path)
    return net, data


def test_xser_checkpoint_converts_to_one_file(tmp_path):
    net, data = xser_checkpoint(tmp_path / "model.ckpt")
    with pytest.raises(pickle.UnpicklingError, match="TensorReference"):
        torch.load(tmp_path / "model.ckpt", weights_only=True)  # what plain torch cannot read

    inspect = run("inspect", tmp_path / "model.ckpt", "--format", "json")
    assert inspect.exit_code == 0, inspect.output
    report = json.loads(inspect.output)
    assert report["kind"] == "xser"
    assert {t["key"] for t in report["tensors"]} >= {"model.fc1.weight", "optimizer.state.0.exp_avg"}

    converted(tmp_path / "model.ckpt", tmp_path / "model.pt")
    out = torch.load(tmp_path / "model.pt", weights_only=True)
    equal_states(out["model"], net.state_dict())
    assert out["epoch"] == 2
    fresh = torch.optim.AdamW(layouts.Net().parameters(), lr=0.1)
    fresh.load_state_dict(out["optimizer"])
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], data["optimizer"]["state"][0]["exp_avg"])


def test_safetensors_of_the_model_only(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    net = trained_net()
    layouts.xser_save({"model": net.state_dict(), "epoch": 1}, tmp_path / "m.ckpt")
    refused = run("convert", tmp_path / "m.ckpt", tmp_path / "m.safetensors")
    assert refused.exit_code == 2 and "--only" in refused.output
    assert not (tmp_path / "m.safetensors").exists()
    converted(tmp_path / "m.ckpt", tmp_path / "m.safetensors", "--only", "model")
    equal_states(dict(sorted(safetensors.load_file(tmp_path / "m.safetensors").items())),
                 dict(sorted(net.state_dict().items())))


# ---------------------------------------------------------------------------------------------------- XLA FSDP, ZeRO-1

@pytest.mark.parametrize("flatten", [True, False], ids=["flat-params", "per-param"])
def test_xla_fsdp_shards_consolidate_like_torch_xla(tmp_path, flatten):
    net = trained_net()
    paths = layouts.fsdp_shards(net, 2, tmp_path, flatten=flatten)
    report = json.loads(run("inspect", paths[1], "--format", "json").output)
    assert report["kind"] == "xla-fsdp" and len(report["files"]) == 2
    assert sorted(t["key"] for t in report["tensors"]) == sorted(f"model.{k}" for k in net.state_dict())

    converted(tmp_path, tmp_path / "full.pt")  # the folder of shards
    out = torch.load(tmp_path / "full.pt", weights_only=True)
    assert "shard_metadata" not in out and out["epoch"] == 4
    equal_states(dict(sorted(out["model"].items())), dict(sorted(net.state_dict().items())))
    fresh = layouts.Net()
    fresh.load_state_dict(out["model"])
    fresh.eval(), net.eval()
    x = torch.randn(5, 8)
    assert torch.equal(fresh(x), net(x))


@pytest.mark.parametrize("flatten", [True, False], ids=["flat-params", "per-param"])
def test_xla_fsdp_optimizer_state_is_unsharded_and_keyed_by_parameter_name(tmp_path, flatten):
    """The optimizer of the FSDP-wrapped model holds one entry per (flat) sharded parameter: its state tensors are
    joined and split like the parameter, each module parameter gets its own, named as get_optimizer_state_dict
    names it; a `step` tensor is copied, not shared (load_state_dict would step a shared one twice)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    net = trained_net()
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01)
    layouts.train(net, optimizer, 2, seed=3)
    layouts.fsdp_shards(net, 2, tmp_path, flatten=flatten, optimizer=optimizer)
    converted(tmp_path, tmp_path / "full.pt")
    out = torch.load(tmp_path / "full.pt", weights_only=True)["optimizer"]
    want = get_optimizer_state_dict(net, optimizer)
    assert out["param_groups"] == want["param_groups"]
    assert list(out["state"]) == list(want["state"])
    for name, entries in want["state"].items():
        equal_states(out["state"][name], entries)
    steps = [out["state"][n]["step"] for n in out["state"]]
    assert len({t.untyped_storage().data_ptr() for t in steps}) == len(steps)
    fresh = layouts.Net()
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.01)
    set_optimizer_state_dict(fresh, fresh_optimizer, out)
    equal_states(fresh_optimizer.state_dict()["state"][0], optimizer.state_dict()["state"][0])


def test_xla_fsdp_optimizer_of_other_parameters_is_refused(tmp_path):
    net = trained_net()
    optimizer = torch.optim.AdamW(net.fc1.parameters(), lr=0.01)
    net(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    paths = layouts.fsdp_shards(net, 2, tmp_path, flatten=False)
    for path in paths:  # the optimizer of fc1 alone beside the shards of the whole model
        ckpt = torch.load(path, weights_only=True)
        ckpt["optimizer"] = optimizer.state_dict()
        torch.save(ckpt, path)
    _refused(run("convert", tmp_path, tmp_path / "out.pt"), "holds the state of 2 parameters, the model 6 sharded")
    assert not (tmp_path / "out.pt").exists()


def test_xla_fsdp_optimizer_missing_from_one_rank_is_refused(tmp_path):
    net = trained_net()
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01)
    layouts.train(net, optimizer, 1, seed=3)
    paths = layouts.fsdp_shards(net, 2, tmp_path, flatten=True, optimizer=optimizer)
    ckpt = torch.load(paths[1], weights_only=True)
    del ckpt["optimizer"]
    torch.save(ckpt, paths[1])
    _refused(run("convert", tmp_path, tmp_path / "out.pt"), str(paths[1]), "no optimizer state `optimizer`")
    ckpt["optimizer"] = {"state": {}, "param_groups": torch.load(paths[0], weights_only=True)["optimizer"]["param_groups"]}
    torch.save(ckpt, paths[1])
    _refused(run("convert", tmp_path, tmp_path / "out.pt"), str(paths[1]), "has no state for parameter 0")
    assert not (tmp_path / "out.pt").exists()


def test_zero1_optimizer_shards_become_the_base_optimizer_state(tmp_path):
    net = trained_net()
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01)
    for _ in range(2):
        net(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    layouts.zero1_shards(net, optimizer, 3, tmp_path)  # 3 ranks: fc1's 17 rows are padded to 18
    report = json.loads(run("inspect", tmp_path / "zero1_rank-2-of-3.pt", "--format", "json").output)
    assert report["kind"] == "zero1"
    converted(tmp_path / "zero1_rank-0-of-3.pt", tmp_path / "resume.pt")
    out = torch.load(tmp_path / "resume.pt", weights_only=True)
    assert out["step"] == 7
    fresh_net = layouts.Net()
    fresh_net.load_state_dict(out["model"])
    fresh = torch.optim.AdamW(fresh_net.parameters(), lr=0.01)
    fresh.load_state_dict(out["optimizer"])
    want = optimizer.state_dict()["state"]
    got = fresh.state_dict()["state"]
    assert set(got) == set(want)
    for i in want:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(got[i][k], want[i][k]), (i, k)


# ---------------------------------------------------------------------------------------------------- NxD

def block_state(seed=0):
    torch.manual_seed(seed)
    block = layouts.Block()
    return block, block.state_dict()


@pytest.mark.parametrize("xser", [False, True], ids=["torch-save", "xser"])
def test_nxd_tp2_shards_join_on_each_layers_partition_dim(tmp_path, xser):
    _, state = block_state()
    layouts.nxd_save(state, tmp_path / "ckpt", tp=2, xser=xser, extra={"epoch": 5})
    report = json.loads(run("inspect", tmp_path / "ckpt", "--format", "json").output)
    assert report["kind"] == ("nxd+xser" if xser else "nxd") and report["sharding"] == "TP=2 PP=1"
    shapes = {t["key"]: t["shape"] for t in report["tensors"]}
    assert shapes["model.o_proj.weight"] == [8, 16] and shapes["model.embed_tokens.weight"] == [16, 8]
    converted(tmp_path / "ckpt", tmp_path / "full.pt")
    out = torch.load(tmp_path / "full.pt", weights_only=True)
    equal_states(out["model"], state)
    assert out["epoch"] == 5


def nxd_with_optimizer(tmp_path: Path, tp: int):
    torch.manual_seed(0)
    block = layouts.Block()
    optimizer = torch.optim.AdamW(block.parameters(), lr=0.01)
    layouts.train(block, optimizer, 2, seed=1)
    layouts.nxd_save(block.state_dict(), tmp_path / "ckpt", tp=tp, optimizer=(block, optimizer))
    return block, optimizer


def test_nxd_optimizer_state_joins_like_its_parameters(tmp_path):
    """The optimizer state saved beside NxD's TP shards is keyed by position; each state tensor has its parameter's
    shape on the rank, which at TP=4 names one split (column-parallel shards are 4 rows, row-parallel 4 columns)."""
    block, optimizer = nxd_with_optimizer(tmp_path, tp=4)
    converted(tmp_path / "ckpt", tmp_path / "full.pt")
    out = torch.load(tmp_path / "full.pt", weights_only=True)
    equal_states(out["model"], block.state_dict())
    fresh = torch.optim.AdamW(layouts.Block().parameters(), lr=0.01)
    fresh.load_state_dict(out["optimizer"])
    want = optimizer.state_dict()["state"]
    got = fresh.state_dict()["state"]
    assert set(got) == set(want)
    for i in want:
        equal_states(got[i], want[i])


def test_nxd_optimizer_state_of_an_ambiguous_shape_asks_for_partition(tmp_path):
    """At TP=2 the shards of q_proj (column-parallel, 16x8 -> 8x8) and o_proj (row-parallel, 8x16 -> 8x8) have one
    shape, and q_proj's bias (16 -> 8) that of the whole norm: the states of those shapes are not guessed;
    --partition gives them, globs on the position."""
    block, optimizer = nxd_with_optimizer(tmp_path, tp=2)
    refused = run("convert", tmp_path / "ckpt", tmp_path / "full.pt")
    _refused(refused, "optimizer.state.0.exp_avg differs between the tensor-parallel ranks", "--partition")
    assert not (tmp_path / "full.pt").exists()
    names = [n for n, _ in block.named_parameters()]
    assert [names[i] for i in (0, 1, 2, 3, 7)] == ["embed_tokens.weight", "q_proj.weight", "q_proj.bias",
                                                   "o_proj.weight", "lm_head.weight"]
    converted(tmp_path / "ckpt", tmp_path / "full.pt", "--partition", "optimizer.state.3.*=1",
              "--partition", "optimizer.state.[0127].*=0")
    out = torch.load(tmp_path / "full.pt", weights_only=True)
    for i, entries in optimizer.state_dict()["state"].items():
        equal_states(out["optimizer"]["state"][i], entries)


def test_nxd_optimizer_state_of_pipeline_stages_is_left_out_with_a_note(tmp_path):
    """Each pipeline stage numbers its optimizer's parameters from 0: joined by key, one stage's state would stand
    for the other's, so the optimizer is left out, and the note says so."""
    _, state = block_state()
    for pp, keys in enumerate((["embed_tokens", "q_proj", "o_proj"], ["norm", "lm_head"])):
        stage = {k: v for k, v in state.items() if k.split(".")[0] in keys}
        optimizer = {"state": {i: {"exp_avg": torch.full(v.shape, float(pp))} for i, v in enumerate(stage.values())},
                     "param_groups": [{"lr": 0.1, "params": list(range(len(stage)))}]}
        for rank in range(2):
            folder = tmp_path / "ckpt" / f"tp_rank_{rank:02d}_pp_rank_{pp:02d}"
            folder.mkdir(parents=True)
            shard = {k: v for k, v in layouts.tp_split(state, 2, rank).items() if k in stage}
            torch.save({"model": shard, "optimizer": optimizer}, folder / "checkpoint.pt")
    result = converted(tmp_path / "ckpt", tmp_path / "full.pt")
    assert "optimizer state of the 2 pipeline stages is keyed by position" in result.output
    out = torch.load(tmp_path / "full.pt", weights_only=True)
    assert "optimizer" not in out
    equal_states(dict(sorted(out["model"].items())), dict(sorted(state.items())))


def test_nxd_trainer_checkpoint_takes_the_newest_tag(tmp_path):
    _, state = block_state()
    layouts.nxd_trainer_save(block_state(1)[1], tmp_path, "step_10", tp=2)
    layouts.nxd_trainer_save(state, tmp_path, "step_20", tp=2)
    result = run("inspect", tmp_path)
    assert result.exit_code == 0 and "tag step_20" in result.output
    converted(tmp_path, tmp_path.parent / "trainer.pt")
    out = torch.load(tmp_path.parent / "trainer.pt", weights_only=True)
    equal_states(out["model"], state)
    assert out["scheduler"] == {"last_epoch": 3, "_step_count": 4}


def test_nxd_unknown_split_asks_for_partition(tmp_path):
    state = {"mixer.weight": torch.randn(8, 4), "mixer.bias": torch.zeros(8)}
    for rank in range(2):
        (tmp_path / f"tp_rank_{rank:02d}_pp_rank_00").mkdir()
        torch.save({"mixer.weight": state["mixer.weight"].chunk(2, 1)[rank].clone(), "mixer.bias": state["mixer.bias"]},
                   tmp_path / f"tp_rank_{rank:02d}_pp_rank_00" / "checkpoint.pt")
    refused = run("convert", tmp_path, tmp_path / "out.pt")
    assert refused.exit_code == 2
    assert "mixer.weight differs between the tensor-parallel ranks" in refused.output
    assert "--partition 'mixer.weight=DIM'" in refused.output and not (tmp_path / "out.pt").exists()
    converted(tmp_path, tmp_path / "out.pt", "--partition", "mixer.weight=1")
    equal_states(torch.load(tmp_path / "out.pt", weights_only=True), state)


# ---------------------------------------------------------------------------------------------------- DCP

@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_dcp_output_loads_into_a_plain_module(tmp_path):
    import torch.distributed.checkpoint as dcp

    block, state = block_state()
    layouts.nxd_save(state, tmp_path / "ckpt", tp=2)
    converted(tmp_path / "ckpt", tmp_path / "dcp", "--to", "dcp")
    fresh = layouts.Block()
    target = {"model": fresh.state_dict()}
    dcp.load(target, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    fresh.load_state_dict(target["model"])
    ids = torch.randint(0, 16, (2, 5))
    assert torch.equal(fresh(ids), block(ids))
    report = json.loads(run("inspect", tmp_path / "dcp", "--format", "json").output)
    assert report["kind"] == "dcp" and report["targets"] == ["torch"]


def _zeros_like(tree):
    if isinstance(tree, torch.Tensor):
        return torch.zeros_like(tree)
    if isinstance(tree, dict):
        return {str(k): _zeros_like(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_zeros_like(v) for v in tree]
    return None


def _same_tree(got, want, path="") -> None:
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), path
    elif isinstance(want, dict):
        assert list(got) == [str(k) for k in want], path
        for k, v in want.items():
            _same_tree(got[str(k)], v, f"{path}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            _same_tree(g, w, f"{path}.{i}")
    else:
        assert got == want, path


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_dcp_output_is_one_file_per_tensor_and_reads_back_bit_identical(tmp_path):
    """--to dcp writes each tensor into its own file as soon as it is loaded (dcp.save's single file per rank would
    keep them all in memory); dcp.load reads the model, the optimizer state and the plain values back unchanged."""
    import torch.distributed.checkpoint as dcp

    net, data = xser_checkpoint(tmp_path / "model.ckpt")
    converted(tmp_path / "model.ckpt", tmp_path / "dcp", "--to", "dcp")
    tensors = json.loads(run("inspect", tmp_path / "model.ckpt", "--format", "json").output)["tensors"]
    files = [p.name for p in (tmp_path / "dcp").iterdir()]
    assert ".metadata" in files and sum(f.endswith(".distcp") for f in files) >= len(tensors)
    state = _zeros_like(data)
    state["epoch"] = 0
    dcp.load(state, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    _same_tree(state, data)
    fresh = layouts.Net()
    fresh.load_state_dict(state["model"])
    equal_states(fresh.state_dict(), net.state_dict())


# How the programs these tests run end, once their results are written: without the interpreter's teardown, in
# which torch 2.13 now and then aborts in its own threads ("terminate called without an active exception", in
# two CI runs of one day, on a program that had written its losses). What is tested is what they wrote.
LEAVE = "import os as _os, sys as _sys\n_sys.stdout.flush()\n_sys.stderr.flush()\n_os._exit(0)\n"
FULLY_SHARD = r"""
import os, sys
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
sys.path.insert(0, sys.argv[3])
from tests.checkpoint_layouts import Block

if sys.argv[4] == "neuron":  # the emulated neuron device (verify's), as the migrated program runs
    from neuron_migrate.verify import emulator
    emulator.install()
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("neuron")
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    device = torch.device("neuron", int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("neuron", (dist.get_world_size(),))
else:
    dist.init_process_group("gloo")
    device, mesh = torch.device("cpu"), None
torch.manual_seed(123)  # other values than the checkpoint's
model = Block().to(device)
fully_shard(model, mesh=mesh)
state = {"model": get_model_state_dict(model)}
assert any(isinstance(v, DTensor) and v.device.type == device.type for v in state["model"].values())
dcp.load(state, checkpoint_id=sys.argv[1])
set_model_state_dict(model, state["model"])
torch.manual_seed(7)
ids = torch.randint(0, 16, (2, 5))
out = model(ids.to(device)).detach().cpu()
if dist.get_rank() == 0:
    torch.save(out, sys.argv[2])
dist.barrier()
dist.destroy_process_group()
""" + LEAVE + r"""
"""


@pytest.mark.slow
@pytest.mark.parametrize("device", ["neuron", "cpu"], ids=["emulated-neuron", "cpu-gloo"])
def test_dcp_output_loads_into_fully_shard_at_two_processes(tmp_path, device):
    block, state = block_state()
    layouts.nxd_save(state, tmp_path / "ckpt", tp=2)
    converted(tmp_path / "ckpt", tmp_path / "dcp", "--to", "dcp")
    script = tmp_path / "load.py"
    script.write_text(FULLY_SHARD)
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(tmp_path / "dcp"), str(tmp_path / "out.pt"), str(root), device],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    torch.manual_seed(7)
    ids = torch.randint(0, 16, (2, 5))
    assert torch.equal(torch.load(tmp_path / "out.pt"), block(ids).detach())


# ---------------------------------------------------------------------------------------------------- resume

RESUME = r"""
import sys
import torch
from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

sys.path.insert(0, sys.argv[3])
from tests.checkpoint_layouts import Block, Net, train

# the migrated program: its model on the neuron device, resumed from the converted checkpoint
device = torch.device("neuron")
state = torch.load(sys.argv[1], weights_only=True)
model = {"Net": Net, "Block": Block}[sys.argv[2]]().to(device)
model.load_state_dict(state["model"])
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
if all(isinstance(k, str) for k in state["optimizer"]["state"]):
    set_optimizer_state_dict(model, optimizer, state["optimizer"])  # XLA FSDP's: keyed by parameter name
else:
    optimizer.load_state_dict(state["optimizer"])  # NxD's: keyed by position
print("LOSSES", *train(model, optimizer, 4, seed=9, device=device))
"""
EMULATED = ("import sys, runpy, torch\nfrom neuron_migrate.verify import emulator\nemulator.install()\n"
            "torch.set_num_threads(1)\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
            + LEAVE)


def one_thread_train(*args, **kwargs) -> list[float]:
    """The original run continued on the CPU, with the resumed run's one thread (a reduction split over more
    threads can round differently)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return layouts.train(*args, **kwargs)
    finally:
        torch.set_num_threads(threads)


def resumed_losses(tmp_path: Path, checkpoint: Path, model: str) -> list[float]:
    """The migrated program's losses, run on the emulated neuron device from the converted checkpoint."""
    script = tmp_path / "resume.py"
    script.write_text(RESUME)
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", EMULATED, str(script), str(checkpoint), model, str(root)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [float(x) for x in next(ln for ln in proc.stdout.splitlines() if ln.startswith("LOSSES")).split()[1:]]


@pytest.mark.slow
@pytest.mark.parametrize("flatten", [True, False], ids=["flat-params", "per-param"])
def test_converted_xla_fsdp_checkpoint_resumes_training_with_the_same_losses(tmp_path, flatten):
    """Model and AdamW state of a 2-rank XLA FSDP run, converted, resume in the migrated program on the emulated
    device with the losses the original run has when it continues on the CPU."""
    torch.manual_seed(0)
    net = layouts.Net()
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01)
    layouts.train(net, optimizer, 3, seed=1)
    layouts.fsdp_shards(net, 2, tmp_path, flatten=flatten, optimizer=optimizer)
    converted(tmp_path, tmp_path / "resume.pt")
    out = torch.load(tmp_path / "resume.pt", weights_only=True)
    names = [n for n, _ in net.named_parameters()]
    assert sorted(out["optimizer"]["state"]) == sorted(names)
    assert out["optimizer"]["param_groups"][0]["params"] == names
    want = one_thread_train(net, optimizer, 4, seed=9)  # the original, continued
    assert resumed_losses(tmp_path, tmp_path / "resume.pt", "Net") == want


@pytest.mark.slow
def test_converted_nxd_tp2_checkpoint_resumes_training_with_the_same_losses(tmp_path):
    """Model and AdamW state of NxD TP=2 shards (the optimizer's ambiguous shapes given with --partition)."""
    block, optimizer = nxd_with_optimizer(tmp_path, tp=2)
    converted(tmp_path / "ckpt", tmp_path / "resume.pt", "--partition", "optimizer.state.3.*=1",
              "--partition", "optimizer.state.[0127].*=0")
    want = one_thread_train(block, optimizer, 4, seed=9)
    assert resumed_losses(tmp_path, tmp_path / "resume.pt", "Block") == want


FULLY_SHARD_RESUME = r"""
import sys
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard
sys.path.insert(0, sys.argv[3])
from tests.checkpoint_layouts import Net, train

torch.set_num_threads(1)
dist.init_process_group("gloo")
model = Net()
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
model_state, optimizer_state = get_state_dict(model, optimizer)
state = {"model": model_state, "optimizer": optimizer_state}
dcp.load(state, checkpoint_id=sys.argv[1])
set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
losses = train(model, optimizer, 4, seed=9)  # every rank the same batches: the averaged gradient is the whole one
if dist.get_rank() == 0:
    torch.save(losses, sys.argv[2])
dist.barrier()
dist.destroy_process_group()
""" + LEAVE + r"""
"""


@pytest.mark.slow
def test_converted_xla_fsdp_checkpoint_resumes_fully_shard_training_from_dcp(tmp_path):
    """XLA FSDP model and AdamW shards, converted to DCP, resume an FSDP2 (fully_shard) program at 2 processes
    through get_state_dict / dcp.load / set_state_dict, with the losses of the original continued."""
    torch.manual_seed(0)
    net = layouts.Net()
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01)
    layouts.train(net, optimizer, 3, seed=1)
    (tmp_path / "ckpt").mkdir()
    layouts.fsdp_shards(net, 2, tmp_path / "ckpt", flatten=True, optimizer=optimizer)
    converted(tmp_path / "ckpt", tmp_path / "dcp", "--to", "dcp")
    script = tmp_path / "resume.py"
    script.write_text(FULLY_SHARD_RESUME)
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(tmp_path / "dcp"), str(tmp_path / "losses.pt"), str(root)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert torch.load(tmp_path / "losses.pt") == one_thread_train(net, optimizer, 4, seed=9)


# ---------------------------------------------------------------------------------------------------- bad inputs

def _refused(result, *words):
    assert result.exit_code == 2, result.output
    for w in words:
        assert w in result.output, result.output


def test_truncated_file_is_refused_and_dst_untouched(tmp_path):
    net = trained_net()
    torch.save(net.state_dict(), tmp_path / "m.pt")
    data = (tmp_path / "m.pt").read_bytes()
    (tmp_path / "m.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "out.pt").write_bytes(b"previous")
    _refused(run("convert", tmp_path / "m.pt", tmp_path / "out.pt", "--force"), str(tmp_path / "m.pt"),
             "truncated", "nothing was written")
    assert (tmp_path / "out.pt").read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt", "out.pt"]  # no temporary folder left


def test_damaged_tensor_data_fails_midway_and_leaves_nothing(tmp_path):
    """The last tensor's bytes are cut out of the archive: the first tensors were already streamed out when the
    conversion fails, and still nothing reaches DST."""
    layouts.xser_save({"a": torch.randn(3), "b": torch.randn(4)}, tmp_path / "x.ckpt")
    last = tmp_path / "x.ckpt.tensors" / "tensor_1.pt"
    with zipfile.ZipFile(last) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    with zipfile.ZipFile(last, "w") as z:
        for n, b in entries.items():
            z.writestr(n, b[:-4] if "/data/" in n else b)
    _refused(run("convert", tmp_path / "x.ckpt", tmp_path / "out.pt"), str(last), "damaged")
    assert not (tmp_path / "out.pt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.ckpt", "x.ckpt.tensors"]


def test_missing_shards_are_named(tmp_path):
    net = trained_net()
    paths = layouts.fsdp_shards(net, 3, tmp_path, flatten=True)
    paths[1].unlink()
    _refused(run("convert", tmp_path, tmp_path / "out.pt"), "2 shard files", "3 ranks", "missing rank 1")
    _, state = block_state()
    layouts.nxd_save(state, tmp_path / "nxd", tp=2, xser=True)
    (tmp_path / "nxd" / "tp_rank_00_pp_rank_00.tensors" / "tensor_2.pt").unlink()
    _refused(run("inspect", tmp_path / "nxd"), "tensor_2.pt: missing", "incomplete")
    assert not (tmp_path / "out.pt").exists()


def test_mismatched_shard_metadata_is_refused(tmp_path):
    net = trained_net()
    paths = layouts.fsdp_shards(net, 2, tmp_path, flatten=False)
    ckpt = torch.load(paths[0], weights_only=False)
    info = ckpt["shard_metadata"]["shard_info"][""]
    first = next(iter(info))
    info[first]["_orig_size"] = torch.Size([99, 8])
    torch.save(ckpt, paths[0])
    _refused(run("convert", tmp_path, tmp_path / "out.pt"), "a shard is missing or the metadata does not match")


class Payload:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_unknown_global_is_refused_without_running_it(tmp_path):
    torch.save({"w": torch.ones(2), "evil": Payload()}, tmp_path / "evil.pt")
    for command in (("inspect", tmp_path / "evil.pt"), ("convert", tmp_path / "evil.pt", tmp_path / "o.pt")):
        result = CliRunner().invoke(main, ["checkpoint", *map(str, command)], catch_exceptions=False)
        _refused(result, str(tmp_path / "evil.pt"), "`posix.system`" if os.name == "posix" else "system")
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()
    assert not (tmp_path / "o.pt").exists()


def test_existing_dst_needs_force(tmp_path):
    torch.save({"a": torch.ones(1)}, tmp_path / "a.pt")
    (tmp_path / "out.pt").write_bytes(b"keep")
    _refused(run("convert", tmp_path / "a.pt", tmp_path / "out.pt"), "exists", "--force")
    assert (tmp_path / "out.pt").read_bytes() == b"keep"
    converted(tmp_path / "a.pt", tmp_path / "out.pt", "--force")
    assert torch.equal(torch.load(tmp_path / "out.pt", weights_only=True)["a"], torch.ones(1))


def test_not_a_checkpoint(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    _refused(run("inspect", tmp_path / "notes.txt"), "not a complete torch.save archive")
    _refused(run("inspect", tmp_path / "nothing"), "no such file")
    (tmp_path / "empty").mkdir()
    _refused(run("inspect", tmp_path / "empty"), "no checkpoint found")


# ---------------------------------------------------------------------------------------------------- memory

CONVERT_RSS = r"""
import resource, sys
from neuron_migrate.cli import main
try:
    main(["checkpoint", "convert", *sys.argv[1:]])
except SystemExit as exc:
    code = exc.code
print("PEAK_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code)
"""


def peak_rss_kb(src: Path, dst: Path, *options: str) -> int:
    proc = subprocess.run([sys.executable, "-c", CONVERT_RSS, str(src), str(dst), *options], capture_output=True,
                          text=True, timeout=1200)
    line = [x for x in proc.stdout.splitlines() if x.startswith("PEAK_KB")][-1].split()
    assert line[2] == "0", proc.stdout + proc.stderr
    return int(line[1])


@pytest.mark.slow
@pytest.mark.parametrize("target", ["torch", "safetensors", "dcp"])
def test_conversion_streams_one_tensor_at_a_time(tmp_path, target):
    """A checkpoint of 16 tensors of 32 MB (512 MB): the peak memory of the conversion stays near one tensor plus
    the interpreter and torch (measured against converting a single such tensor), not the checkpoint's size."""
    mb = 1 << 20
    small = {"t": torch.zeros(8 * mb, dtype=torch.float32)}
    torch.save(small, tmp_path / "one.pt")
    baseline = peak_rss_kb(tmp_path / "one.pt", tmp_path / "one.out", "--to", target)
    # written by another process: this one stays small (a forked child starts from its parent's peak memory)
    make = (f"import sys, torch; sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
            "from tests.checkpoint_layouts import xser_save\n"
            f"xser_save({{f'layer{{i}}.weight': torch.full(({8 * mb},), float(i)) for i in range(16)}}, "
            f"__import__('pathlib').Path({str(tmp_path / 'big.ckpt')!r}))\n")
    subprocess.run([sys.executable, "-c", make], check=True, timeout=600)
    peak = peak_rss_kb(tmp_path / "big.ckpt", tmp_path / "big.out", "--to", target)
    assert peak - baseline < 3 * 32 * 1024, (peak, baseline)  # under 3 tensors' worth above the baseline


def test_the_command_is_listed_and_loads_torch_only_when_it_runs():
    code = ("import sys\n"
            "from click.testing import CliRunner\n"
            "from neuron_migrate.cli import main\n"
            "import neuron_migrate.checkpoint.command\n"
            "out = CliRunner().invoke(main, ['--help']).output\n"
            "assert 'checkpoint' in out, out\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


REAL_XLA = r"""
import sys
import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser
from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP, consolidate_sharded_model_checkpoints
from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer

out = sys.argv[1]
dev = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 17), torch.nn.ReLU(), torch.nn.Linear(17, 3)).to(dev)
half = torch.randn(5, device=dev).to(torch.bfloat16)
xser.save({"model": model.state_dict(), "half": half, "epoch": 2}, f"{out}/xser.ckpt")
torch.save({"model": model.state_dict()}, f"{out}/raw_xla.pt")  # XLA tensors pickled without .cpu()
torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()}, "half": half.cpu()}, f"{out}/reference.pt")


def net():  # 17 rows: odd, so both FSDP and ZeRO-1 pad the shards of 2 ranks
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 17), torch.nn.ReLU(), torch.nn.Linear(17, 3), torch.nn.BatchNorm1d(3))


def with_grads():
    m = net().to(dev)
    torch.manual_seed(1)
    m(torch.randn(6, 8).to(dev)).square().sum().backward()
    return m


full = with_grads()
adamw = torch.optim.AdamW(full.parameters(), lr=0.01)
adamw.step()
torch_xla.sync()
names = [n for n, _ in full.named_parameters()]
torch.save({"model": {k: v.cpu() for k, v in net().state_dict().items()},
            "optimizer": {names[i]: {k: v.cpu() for k, v in s.items()} for i, s in adamw.state_dict()["state"].items()}},
           f"{out}/fsdp_reference.pt")
# XLA FSDP at 2 ranks in one process: each rank's wrapper built with its sharding_rank (construction and
# state_dict() run no collective); its AdamW steps the rank's gradient shard (what the reduce-scatter of a real
# step leaves); saved as torch_xla's examples do, then torch_xla's own consolidation
def held(key, meta):  # the module tensors a sharded parameter holds, by the metadata (to give it their gradients)
    parts = key.split(".")
    i = next(i for i, part in enumerate(parts) if part.startswith("_fsdp_shard"))
    prefix = ".".join(parts[:i])
    info = meta["shard_info"][prefix][".".join(parts[i:])]
    name = f"{prefix}.{info['_orig_name']}" if prefix else info["_orig_name"]
    names = [name]
    if "flat_param_" in name:
        outer = name.rpartition(".")[0]
        names = [f"{outer}.{n}" if outer else n for n in meta["flatten_info"][name][0]]
    return [n.replace("_fsdp_wrapped_module.", "").replace("_fpw_module.", "") for n in names]


grads = {n: p.grad.cpu().reshape(-1) for n, p in with_grads().named_parameters()}
for variant in ("flat", "per-param", "nested"):
    for rank in range(2):
        options = {"flatten_parameters": variant != "per-param", "sharding_groups": [[0, 1]],
                   "sharding_rank": rank, "sharding_world_size": 2}
        inner = net().to(dev)
        if variant == "nested":
            inner[2] = FSDP(inner[2], **options)
        wrapped = FSDP(inner, **options)
        meta, state = wrapped.get_shard_metadata(), wrapped.state_dict()
        optimizer = torch.optim.AdamW(wrapped.parameters(), lr=0.0)  # the state moves, the weights stay as saved
        for key, shard in zip([k for k in state if "_fsdp_shard" in k], wrapped.parameters()):
            g = torch.cat([grads[n] for n in held(key, meta)])
            shard.grad = F.pad(g, [0, 2 * shard.numel() - g.numel()]).chunk(2)[rank].to(dev)
        optimizer.step()
        torch_xla.sync()
        xm.save({"model": state, "shard_metadata": meta, "optimizer": optimizer.state_dict(), "epoch": 3},
                f"{out}/fsdp_{variant}/ckpt_rank-{rank:08d}-of-00000002.pth", master_only=False)
    consolidate_sharded_model_checkpoints(f"{out}/fsdp_{variant}/ckpt", "*.pth",
                                          save_path=f"{out}/fsdp_{variant}.pth")


# ZeRO-1 at 2 ranks: each rank's optimizer (its local rank from the sharding group) steps its base optimizer on
# its gradient shard; the reference: AdamW on the whole parameters (above)
masters = []
for rank in range(2):
    m = with_grads()
    zero = ZeroRedundancyOptimizer(m.parameters(), torch.optim.AdamW, lr=0.01, save_master_weights=True,
                                   sharding_groups=[[0, 1] if rank == 0 else [1, 0]])
    for param, shard in zip(m.parameters(), zero.base_optimizer.param_groups[0]["params"]):
        g = param.grad.cpu()
        shard.grad = F.pad(g, [0, 0] * (g.dim() - 1) + [0, -g.size(0) % 2]).chunk(2)[rank].to(dev)
    zero.base_optimizer.step()
    torch_xla.sync()
    state = zero.state_dict()
    masters.append({i: t.cpu() for i, t in state["sharded_master_weights"].items()})
    xm.save({"model": m.state_dict(), "optimizer": state, "step": 1}, f"{out}/zero1/zero1_rank-{rank}-of-2.pt",
            master_only=False)
torch.save({"state": {i: {k: v.cpu() for k, v in s.items()} for i, s in adamw.state_dict()["state"].items()},
            "masters": masters}, f"{out}/zero1_reference.pt")
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("NEURON_MIGRATE_XLA_PYTHON"),
                    reason="NEURON_MIGRATE_XLA_PYTHON (a python with torch_xla 2.9) is not set")
def test_real_torch_xla_checkpoints_convert_bit_identical(tmp_path):
    """Files written by torch_xla itself convert to the exact tensors: xser.save, torch.save of XLA tensors, XLA FSDP
    at 2 ranks (flat, per-parameter and nested wrappers: the same as torch_xla's consolidate_sharded_model_checkpoints
    and as the model before wrapping; its AdamW state the same as AdamW stepping the whole parameters), ZeRO-1 at 2
    ranks (the same)."""
    for folder in ("fsdp_flat", "fsdp_per-param", "fsdp_nested", "zero1"):
        (tmp_path / folder).mkdir()
    proc = subprocess.run([os.environ["NEURON_MIGRATE_XLA_PYTHON"], "-c", REAL_XLA, str(tmp_path)], capture_output=True,
                          text=True, timeout=900, env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = torch.load(tmp_path / "reference.pt", weights_only=True)
    converted(tmp_path / "xser.ckpt", tmp_path / "xser.pt")
    converted(tmp_path / "raw_xla.pt", tmp_path / "raw.pt")
    xser_out = torch.load(tmp_path / "xser.pt", weights_only=True)
    raw_out = torch.load(tmp_path / "raw.pt", weights_only=True)
    assert xser_out["epoch"] == 2 and torch.equal(xser_out["half"], reference["half"])
    equal_states(xser_out["model"], reference["model"])
    equal_states(raw_out["model"], reference["model"])

    unwrapped = torch.load(tmp_path / "fsdp_reference.pt", weights_only=True)
    for variant in ("flat", "per-param", "nested"):
        converted(tmp_path / f"fsdp_{variant}", tmp_path / f"fsdp_{variant}_out.pt")
        out = torch.load(tmp_path / f"fsdp_{variant}_out.pt", weights_only=True)
        assert out["epoch"] == 3
        equal_states(dict(sorted(out["model"].items())), dict(sorted(unwrapped["model"].items())))
        # by name (nested wrappers list the outer one's parameters first)
        assert sorted(out["optimizer"]["state"]) == sorted(unwrapped["optimizer"])
        for name, entries in unwrapped["optimizer"].items():
            equal_states(out["optimizer"]["state"][name], entries)
        consolidated = torch.load(tmp_path / f"fsdp_{variant}.pth", weights_only=True)["model"]
        equal_states(dict(sorted(out["model"].items())), dict(sorted(consolidated.items())))

    converted(tmp_path / "zero1", tmp_path / "zero1.pt")
    optimizer = torch.load(tmp_path / "zero1.pt", weights_only=True)["optimizer"]
    want = torch.load(tmp_path / "zero1_reference.pt", weights_only=True)
    assert set(optimizer["state"]) == set(want["state"]) == set(range(6))
    for i, entries in want["state"].items():
        for k, v in entries.items():
            got = optimizer["state"][i][k]
            assert got.dtype == v.dtype and got.shape == v.shape and torch.equal(got, v), (i, k)
    # the master weights are the shards the optimizer holds (XLA's AdamW update of a 9-row shard and of the whole
    # 17 rows can differ in the last bit, so the reference is the shards themselves, joined and unpadded)
    for i, whole in optimizer["master_weights"].items():
        parts = [m[i] for m in want["masters"]]
        assert torch.equal(whole, torch.cat(parts)[: whole.shape[0]]) and whole.shape == want["state"][i]["exp_avg"].shape
