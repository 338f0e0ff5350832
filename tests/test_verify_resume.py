"""`verify` on a program started on a legacy checkpoint: the original runs read it as it is, the migrated runs get
what the migrated code reads (an xser checkpoint, or a file of XLA tensors, as one torch.save file at the same
path), sharded layouts whose reader the migration marks are reported with the command to run, and anything
else an argument names is left alone. The checkpoints are written by tests/checkpoint_layouts.py, without
torch_xla."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from neuron_migrate.verify import resume  # noqa: E402
from tests import checkpoint_layouts as layouts  # noqa: E402
from tests.helpers import ROOT  # noqa: E402

PROGRAM = ROOT / "tests" / "data" / "verify" / "resume" / "train.py"


def saved_net(path: Path, epoch: int = 2) -> torch.nn.Module:
    """A trained net with its AdamW state and the epoch, written with xser.save's layout at `path`."""
    torch.manual_seed(0)
    net = layouts.Net()
    net.train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01)
    net(torch.randn(4, 8)).square().mean().backward()
    optimizer.step()
    path.parent.mkdir(parents=True, exist_ok=True)
    layouts.xser_save({"model": net.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    return net


def project(tmp_path: Path) -> Path:
    """The legacy trainer with its checkpoint and the look-alikes: a folder of images, a text file, a text file
    named like a rank's, a plain torch.save file (CPU tensors)."""
    top = tmp_path / "job"
    top.mkdir()
    shutil.copy2(PROGRAM, top / "train.py")
    saved_net(top / "ckpt" / "model.xser")
    (top / "images").mkdir()
    for i in range(3):
        (top / "images" / f"{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(i, i + 64)))
    (top / "notes.txt").write_text("run 2 of the sweep\n")
    (top / "rank0.txt").write_text("loss 0.5\n")
    torch.save({"w": torch.ones(3)}, top / "plain.pt")
    return top


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class FromXla:
    """Reduces as an XLA tensor does in torch 2.x: its CPU copy, rebuilt on the XLA device."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __reduce_ex__(self, protocol):
        return torch._utils._rebuild_device_tensor_from_cpu_tensor, (self.tensor, self.tensor.dtype, "xla:0", False)


# ---------------------------------------------------------------------------------------------------- what is found

def test_xser_argument_is_found_and_lookalikes_are_left_alone(tmp_path):
    top = project(tmp_path)
    args = ["--resume", "ckpt/model.xser", "--data", "images", "--notes", "notes.txt", "--log=rank0.txt",
            "--init", "plain.pt", "--steps", "3"]
    found = resume.find(args, top, top)
    assert [(c.shown, c.option, c.kind, c.action, c.argument) for c in found] == [
        ("ckpt/model.xser", "--resume", "xser", resume.CONVERTED, 1)]
    assert found[0].tensors == 27  # the model's 6 tensors and AdamW's 3 for each of its 6 parameters, and more
    # the same checkpoint is not found a second time in the project
    assert [c.shown for c in resume.find([], top, top)] == ["ckpt/model.xser"]


def test_equals_form_and_absolute_path_of_an_argument(tmp_path):
    top = project(tmp_path)
    found = resume.find([f"--load={top / 'ckpt' / 'model.xser'}"], top / "images", top)
    assert [(c.option, c.prefix, c.argument) for c in found] == [("--load", "--load=", 0)]


def test_file_of_xla_tensors_in_the_project_is_converted(tmp_path):
    top = tmp_path / "job"
    top.mkdir()
    weight = torch.randn(4, 3)
    torch.save({"w": FromXla(weight), "step": 3}, top / "state.pt")
    torch.save({"w": weight, "step": 3}, top / "cpu.pt")  # the same on the CPU: torch.load reads it as it is
    found = resume.find([], top, top)
    assert [(c.shown, c.kind, c.action) for c in found] == [("state.pt", "plain", resume.CONVERTED)]
    resume.convert(found, tmp_path / "work")
    assert torch.equal(torch.load(found[0].converted, weights_only=True)["w"], weight)


def test_sharded_layouts_are_reported_with_the_command_to_run(tmp_path):
    top = tmp_path / "job"
    (top / "fsdp").mkdir(parents=True)
    net = layouts.Net()
    layouts.fsdp_shards(net, 2, top / "fsdp", flatten=True)
    layouts.nxd_save(layouts.Block().state_dict(), top / "nxd", tp=2)
    (top / "zero1").mkdir()
    layouts.zero1_shards(net, torch.optim.AdamW(net.parameters()), 2, top / "zero1")
    found = resume.find(["--resume", "fsdp/"], top, top)
    assert [(c.shown, c.kind, c.action) for c in found] == [
        ("fsdp/", "xla-fsdp", resume.MANUAL), ("nxd", "nxd", resume.MANUAL), ("zero1", "zero1", resume.MANUAL)]
    fsdp, nxd, zero1 = found
    assert fsdp.command == "neuron-migrate checkpoint convert fsdp fsdp.pt" and "(NM230)" in fsdp.detail
    assert nxd.command == "neuron-migrate checkpoint convert nxd nxd.pt" and "(NM235)" in nxd.detail
    assert (fsdp.sharding, nxd.sharding, zero1.sharding) == ("2 ranks (xla-fsdp)", "TP=2 PP=1", "2 ranks (zero1)")
    resume.convert(found, tmp_path / "work")
    assert all(c.converted is None for c in found)  # a person converts them


def test_broken_xser_checkpoint_is_reported_not_converted(tmp_path):
    top = tmp_path / "job"
    saved_net(top / "ckpt" / "model.xser")
    (top / "ckpt" / "model.xser.tensors" / "tensor_3.pt").unlink()
    found = resume.find(["--resume", "ckpt/model.xser"], top, top)
    assert [(c.action, c.option) for c in found] == [(resume.UNREADABLE, "--resume")]
    assert "tensor_3.pt: missing" in found[0].detail


def test_unforeseen_error_in_a_checkpoint_like_folder_is_reported_not_raised(tmp_path):
    """An NxD trainer folder whose `newest` file is not text: verify goes on and says why it left it."""
    top = tmp_path / "job"
    (top / "ckpt" / "step_10" / "model").mkdir(parents=True)
    (top / "ckpt" / "newest").write_bytes(b"\xff\xfe\x00")
    found = resume.find(["--resume", "ckpt"], top, top)
    assert [(c.shown, c.action) for c in found] == [("ckpt", resume.UNREADABLE)]
    assert "UnicodeDecodeError" in found[0].detail


# ---------------------------------------------------------------------------------------------------- placing

def staged_copy(top: Path, folder: Path) -> None:
    """A run's copy as verify makes it: files copied, links kept as links."""
    shutil.copytree(top, folder, symlinks=True)


def test_placed_in_the_copy_at_the_same_path_never_in_the_users_files(tmp_path):
    top = project(tmp_path)
    before = snapshot(top)
    args = ["--resume", "ckpt/model.xser"]
    found = resume.find(args, top, top)
    resume.convert(found, tmp_path / "work")
    copy = tmp_path / "work" / "runs" / "target"
    staged_copy(top, copy)
    assert resume.place(found, "target", copy, top, tmp_path / "work", args) == args
    state = torch.load(copy / "ckpt" / "model.xser", weights_only=True)  # what the migration's torch.load reads
    assert state["epoch"] == 2 and set(state) == {"model", "optimizer", "epoch"}
    assert found[0].runs == ["target"]
    assert snapshot(top) == before


def test_linked_folder_in_the_copy_is_made_its_own(tmp_path):
    """The project links its checkpoint folder (kept as a link in the copy): the converted file goes into a
    folder of links in the copy, not through the link into the user's folder."""
    top = tmp_path / "job"
    top.mkdir()
    saved_net(top / "store" / "model.xser")
    os.symlink(top / "store", top / "ckpt")
    before = snapshot(top / "store")
    args = ["--resume", "ckpt/model.xser"]
    found = resume.find(args, top, top)
    assert len(found) == 1 and found[0].shown == "ckpt/model.xser"
    resume.convert(found, tmp_path / "work")
    copy = tmp_path / "copy"
    staged_copy(top, copy)
    resume.place(found, "target", copy, top, tmp_path / "work", args)
    assert not (copy / "ckpt").is_symlink() and (copy / "ckpt" / "model.xser.tensors").is_symlink()
    assert torch.load(copy / "ckpt" / "model.xser", weights_only=True)["epoch"] == 2
    assert snapshot(top / "store") == before


def test_checkpoint_outside_the_project_goes_to_the_runs_own_folder(tmp_path):
    outside = tmp_path / "data" / "model.xser"
    saved_net(outside)
    top = tmp_path / "job"
    top.mkdir()
    args = ["--resume", str(outside), "--steps", "3"]
    found = resume.find(args, top, top)
    resume.convert(found, tmp_path / "work")
    placed = resume.place(found, "plain migration", tmp_path / "copy", top, tmp_path / "work", args)
    assert placed[0] == "--resume" and placed[2:] == ["--steps", "3"]
    assert Path(placed[1]).is_relative_to(tmp_path / "work" / "checkpoints" / "plain-migration")
    assert torch.load(placed[1], weights_only=True)["epoch"] == 2 and found[0].outside


# ---------------------------------------------------------------------------------------------------- verify

def first_loss(net: torch.nn.Module, epoch: int) -> float:
    """The trainer's first loss after resuming at `epoch` (its batch is drawn from a generator seeded with it)."""
    g = torch.Generator().manual_seed(epoch)
    return net(torch.randn(6, 8, generator=g)).square().mean().item()


@pytest.mark.needs_torch
@pytest.mark.slow
def test_verify_resumes_from_an_xser_checkpoint(tmp_path):
    from neuron_migrate.verify.report import RENDERERS, to_json
    from neuron_migrate.verify.session import Options, verify_script

    top = project(tmp_path)
    before = snapshot(top)
    args = ["--resume", "ckpt/model.xser", "--data", "images", "--notes", "notes.txt", "--steps", "5"]
    work = tmp_path / "work"
    work.mkdir()
    report = verify_script(top / "train.py", Options(args=args, max_steps=3), work, cwd=top)
    text = RENDERERS["text"](report)
    assert report.exit_code == 0 and report.verdict == "equivalent", text
    data = to_json(report)
    assert data["checkpoints"] == [{
        "path": "ckpt/model.xser", "argument": "--resume", "kind": "xser", "action": "converted",
        "sharding": "not sharded", "tensors": 27, "bytes": data["checkpoints"][0]["bytes"],
        "runs": ["reference", "target", "plain migration"], "outside_project": False, "detail": None,
        "command": None}]
    said = ("ckpt/model.xser (--resume): torch_xla serialization (xser), 27 tensors, ")
    assert said in text and "converted to one torch.save file at the same path in each one's copy" in text
    assert f"- {said}" in RENDERERS["markdown"](report)
    assert json.loads(RENDERERS["json"](report))["checkpoints"] == data["checkpoints"]
    # both runs started where the checkpoint left off: the first loss is the saved model's on epoch 2's batch
    want = first_loss(saved_net(tmp_path / "again" / "model.xser"), 2)
    for run in report.runs:
        assert run.records[0]["losses"][0] == pytest.approx(want, rel=1e-5), run.program.name
        assert "resumed at epoch 2" in run.stdout and "run 2 of the sweep" in run.stdout
    assert snapshot(top) == before  # the user's checkpoint, images and notes as they were
