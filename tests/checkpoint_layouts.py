"""The files the XLA stack writes, written here without torch_xla or neuronx-distributed.

Each builder follows the library's own code (torch_xla's `utils/serialization.py`, `distributed/fsdp/
xla_fully_sharded_data_parallel.py` and `state_dict_utils.py`, `distributed/zero_redundancy_optimizer.py`;
neuronx-distributed's `parallel_layers/checkpointing.py` and `trainer/checkpoint.py`): the same names, the
same pickled classes (the xser `TensorReference` under its own module name), the same padding and splits.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections import OrderedDict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

XSER = "torch_xla.utils.serialization"
SEP = "_FSDP_SHARD_SEPARATOR_"


@contextlib.contextmanager
def fake_xser_module():
    """`torch_xla.utils.serialization.TensorReference` importable for pickle, for the length of a save."""
    names = ("torch_xla", "torch_xla.utils", XSER)
    saved = {n: sys.modules.get(n) for n in names}
    mods = {n: types.ModuleType(n) for n in names}

    class TensorReference:
        def __init__(self, tid):
            self.tid = tid

    TensorReference.__module__ = XSER
    TensorReference.__qualname__ = "TensorReference"
    mods[XSER].TensorReference = TensorReference
    sys.modules.update(mods)
    try:
        yield TensorReference
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def xser_save(data, path: Path) -> None:
    """torch_xla's `xser.save(data, path)`: each tensor to `path.tensors/tensor_<i>.pt`, the references to path."""
    folder = Path(str(path) + ".tensors")
    folder.mkdir(parents=True)
    with fake_xser_module() as TensorReference:
        count = 0

        def convert(value):
            nonlocal count
            if isinstance(value, torch.Tensor):
                torch.save(value.cpu(), folder / f"tensor_{count}.pt")
                count += 1
                return TensorReference(count - 1)
            if isinstance(value, dict):
                return value.__class__((k, convert(v)) for k, v in value.items())
            if isinstance(value, (list, tuple)):
                return value.__class__(convert(v) for v in value)
            return value

        torch.save(convert(data), path)


class Net(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width + 1)  # an odd row count: the FSDP shards are padded
        self.norm = nn.BatchNorm1d(2 * width + 1)
        self.fc2 = nn.Linear(2 * width + 1, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.norm(self.fc1(x))))


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int, device: str = "cpu") -> list[float]:
    """`steps` steps of one training loop on batches drawn from `seed` (the same batches on every device); the
    losses. A `Block` gets token ids, a `Net` features."""
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        if isinstance(model, Block):
            batch = torch.randint(0, 16, (4, 6), generator=g)
            target = torch.randint(0, 16, (4, 6), generator=g)
            loss = F.cross_entropy(model(batch.to(device)).flatten(0, 1), target.to(device).flatten())
        else:
            loss = model(torch.randn(6, 8, generator=g).to(device)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _pad_flat(t: torch.Tensor, world: int) -> torch.Tensor:
    t = t.reshape(-1)
    return F.pad(t, [0, -t.numel() % world])


def fsdp_shards(model: nn.Module, world: int, folder: Path, flatten: bool, prefix: str = "ckpt",
                optimizer: torch.optim.Optimizer | None = None) -> list[Path]:
    """torch_xla FSDP's per-rank `{"model": model.state_dict(), "shard_metadata": model.get_shard_metadata()}`,
    saved as its examples do: `{prefix}_rank-{rank:08d}-of-{world:08d}.pth`. With `optimizer` (built on `model`'s
    parameters), also `"optimizer": optimizer.state_dict()` as the optimizer of the wrapped model holds it: one
    entry per sharded (flat) parameter, each state tensor flattened, padded and chunked like the parameter."""
    params = list(model.named_parameters())
    buffers = list(model.named_buffers())
    if flatten:
        flat = torch.cat([p.detach().reshape(-1) for _, p in params])
        full = [("_fsdp_wrapped_module.flat_param_0", flat, flat.shape)]
        flatten_info = {"_fsdp_wrapped_module.flat_param_0": (
            [f"_fpw_module.{n}" for n, _ in params], [p.shape for _, p in params], [p.numel() for _, p in params])}
    else:
        full = [(f"_fsdp_wrapped_module.{n}", p.detach(), p.shape) for n, p in params]
        flatten_info = {}
    shard_info = {"": {f"_fsdp_shard.{orig}".replace(".", SEP): {"_orig_size": size, "_orig_name": orig}
                       for orig, _, size in full}}
    paths = []
    for rank in range(world):
        sd = OrderedDict()
        for orig, t, _ in full:
            sd[f"_fsdp_shard.{orig}".replace(".", SEP)] = _pad_flat(t, world).chunk(world)[rank].clone()
        for n, b in buffers:
            sd[f"_fsdp_wrapped_module._fpw_module.{n}" if flatten else f"_fsdp_wrapped_module.{n}"] = b.clone()
        meta = {"shard_info": shard_info, "flatten_info": flatten_info, "buffer_info": {}, "world_size": world,
                "rank": rank}
        path = folder / f"{prefix}_rank-{rank:08d}-of-{world:08d}.pth"
        ckpt = {"model": sd, "shard_metadata": meta, "epoch": 4}
        if optimizer is not None:
            ckpt["optimizer"] = _fsdp_optimizer_state(optimizer, world, rank, flatten)
        torch.save(ckpt, path)
        paths.append(path)
    return paths


def _fsdp_optimizer_state(optimizer: torch.optim.Optimizer, world: int, rank: int, flatten: bool) -> dict:
    full = optimizer.state_dict()
    groups = [[full["state"][i] for i in range(len(g["params"]))] for g in full["param_groups"]]
    assert len(groups) == 1, "one parameter group (FSDP flattens a module's parameters into one)"
    entries = [groups[0]] if flatten else [[e] for e in groups[0]]
    state = {}
    for i, members in enumerate(entries):
        shard = {}
        for k, v in members[0].items():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                whole = torch.cat([m[k].reshape(-1) for m in members])
                shard[k] = _pad_flat(whole, world).chunk(world)[rank].clone()
            else:
                shard[k] = v.clone() if isinstance(v, torch.Tensor) else v
        state[i] = shard
    return {"state": state, "param_groups": [{**full["param_groups"][0], "params": list(range(len(entries)))}]}


def zero1_shards(model: nn.Module, optimizer: torch.optim.Optimizer, world: int, folder: Path) -> list[Path]:
    """torch_xla ZeroRedundancyOptimizer's `state_dict()` on each rank (base_state rows padded to the world size
    and chunked), beside the replicated model, one file per rank."""
    full = optimizer.state_dict()
    params = [p for g in optimizer.param_groups for p in g["params"]]
    paths = []
    for rank in range(world):
        base_state = {}
        for idx, entries in full["state"].items():
            shard = {}
            for k, v in entries.items():
                if isinstance(v, torch.Tensor) and v.dim() > 0:
                    padded = F.pad(v, [0, 0] * (v.dim() - 1) + [0, -v.size(0) % world])
                    shard[k] = padded.chunk(world)[rank].clone()
                else:
                    shard[k] = v.clone() if isinstance(v, torch.Tensor) else v
            base_state[idx] = shard
        state = {"state": {}, "param_groups": full["param_groups"], "base_state": base_state,
                 "shape_info": {i: p.shape for i, p in enumerate(params)}}
        path = folder / f"zero1_rank-{rank}-of-{world}.pt"
        torch.save({"model": model.state_dict(), "optimizer": state, "step": 7}, path)
        paths.append(path)
    return paths


class Block(nn.Module):
    """A transformer-like block with NxD's usual parallel layers' names."""

    def __init__(self, vocab: int = 16, dim: int = 8) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.q_proj = nn.Linear(dim, 2 * dim)
        self.o_proj = nn.Linear(2 * dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        h = self.embed_tokens(ids)
        h = h + self.o_proj(torch.tanh(self.q_proj(h)))
        return self.lm_head(self.norm(h))


def tp_split(state: dict, tp: int, rank: int) -> OrderedDict:
    """The state dict NxD's parallel layers hold on TP rank `rank` (column-parallel split on dim 0, the
    row-parallel weight on dim 1, its bias and the norms whole)."""
    out = OrderedDict()
    for k, v in state.items():
        module = k.split(".")[-2]
        if module in ("embed_tokens", "q_proj", "lm_head"):
            v = v.chunk(tp, 0)[rank]
        elif module == "o_proj" and k.endswith("weight"):
            v = v.chunk(tp, 1)[rank]
        out[k] = v.clone()
    return out


def nxd_save(state: dict, folder: Path, tp: int, xser: bool = False, extra: dict | None = None,
             optimizer: tuple[nn.Module, torch.optim.Optimizer] | None = None) -> None:
    """`neuronx_distributed.parallel_layers.checkpointing.save({"model": ...}, folder, save_xser=xser)`; with
    `optimizer` (a model and its optimizer), also `"optimizer"`: the state_dict() of the optimizer each rank
    built on its parallel layers' parameters (keyed by position, each state tensor split like its parameter)."""
    for rank in range(tp):
        ckpt = {"model": tp_split(state, tp, rank), **(extra or {})}
        if optimizer is not None:
            ckpt["optimizer"] = _tp_split_optimizer(*optimizer, tp, rank)
        name = folder / f"tp_rank_{rank:02d}_pp_rank_00"
        if xser:
            folder.mkdir(parents=True, exist_ok=True)
            xser_save(ckpt, name)
        else:
            name.mkdir(parents=True)
            torch.save(ckpt, name / "checkpoint.pt")


def _tp_split_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, tp: int, rank: int) -> dict:
    full = optimizer.state_dict()
    names = [n for n, _ in model.named_parameters()]
    state = {i: {k: tp_split({names[i]: v}, tp, rank)[names[i]] if isinstance(v, torch.Tensor) and v.dim() else v
                 for k, v in entries.items()} for i, entries in full["state"].items()}
    return {"state": state, "param_groups": full["param_groups"]}


def nxd_trainer_save(state: dict, root: Path, tag: str, tp: int, done: bool = True) -> Path:
    """`neuronx_distributed.trainer.save_checkpoint(root, tag, model=...)`: `<tag>/model/dp_rank_00_tp_rank_XX_
    pp_rank_00.pt`, the `done` marker, the `newest` file."""
    model = root / tag / "model"
    model.mkdir(parents=True)
    for rank in range(tp):
        torch.save(tp_split(state, tp, rank), model / f"dp_rank_00_tp_rank_{rank:02d}_pp_rank_00.pt")
    torch.save({"last_epoch": 3, "_step_count": 4}, root / tag / "scheduler.pt")
    if done:
        (root / tag / "done").write_text("1")
    (root / "newest").write_text(tag)
    return root / tag
