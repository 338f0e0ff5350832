"""Peak memory of `neuron-migrate checkpoint convert` on a large checkpoint, against converting one tensor.

    python -m bench.checkpoint_memory --size-gb 4                 # xser and XLA FSDP (2 shards), --to torch and dcp
    python -m bench.checkpoint_memory --size-gb 0.5 --layouts xser --targets torch

Writes each legacy layout (the files torch_xla writes, built without torch_xla: `tests/checkpoint_layouts.py`'s
xser module, XLA FSDP's per-rank `{"model": ..., "shard_metadata": ...}`) of `--size-gb` in tensors of
`--tensor-mb`, converts it in a fresh process and reads that process's peak resident memory
(`getrusage(RUSAGE_SELF).ru_maxrss`). The baseline is the same conversion of a checkpoint of one such tensor, in
the same run. Prints, per layout and target: checkpoint size, peak RSS, the ratio against the baseline and the
memory above the baseline in tensors. Every file is written under `--dir` (default: a temporary folder in /tmp)
and deleted at the end; check the free disk first (the layout and one converted copy at a time: 2 x size).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = ("xser", "fsdp")
TARGETS = ("torch", "dcp")

# Written in a child process, so that the writer's memory is its own (a fork starts from its parent's peak).
WRITE = r"""
import sys
from collections import OrderedDict
from pathlib import Path
import torch
sys.path.insert(0, {root!r})
from tests.checkpoint_layouts import SEP, fake_xser_module

layout, out, count, numel = {layout!r}, Path({out!r}), {count}, {numel}
names = [f"layers.{{i}}.weight" for i in range(count)]
if layout == "plain":  # the baseline: one tensor, torch.save
    torch.save({{names[0]: torch.full((numel,), 1.0)}}, out)
elif layout == "xser":  # xser.save: each tensor to its own file, the references to `out`
    folder = Path(str(out) + ".tensors")
    folder.mkdir()
    with fake_xser_module() as TensorReference:
        refs = OrderedDict()
        for i, name in enumerate(names):
            torch.save(torch.full((numel,), float(i)), folder / f"tensor_{{i}}.pt")
            refs[name] = TensorReference(i)
        torch.save(refs, out)
else:  # XLA FSDP, 2 ranks, one shard of every parameter per rank (numel odd: the shards are padded)
    out.mkdir()
    world = 2
    size = numel  # odd: the last shard ends in one padding element
    info = {{f"_fsdp_shard._fsdp_wrapped_module.{{n}}".replace(".", SEP):
            {{"_orig_size": torch.Size([size]), "_orig_name": f"_fsdp_wrapped_module.{{n}}"}} for n in names}}
    for rank in range(world):
        state = OrderedDict()
        for i, name in enumerate(names):
            half = (size + world - 1) // world
            shard = torch.full((half,), float(i))
            if rank == world - 1:
                shard[size - half * (world - 1):] = 0  # the padding torch_xla adds
            state[f"_fsdp_shard._fsdp_wrapped_module.{{name}}".replace(".", SEP)] = shard
        meta = {{"shard_info": {{"": info}}, "flatten_info": {{}}, "buffer_info": {{}}, "world_size": world,
                 "rank": rank}}
        torch.save({{"model": state, "shard_metadata": meta}}, out / f"ckpt_rank-{{rank:08d}}-of-{{world:08d}}.pth")
        del state
"""

CONVERT = r"""
import resource, sys, time
from neuron_migrate.cli import main
start = time.perf_counter()
try:
    main(["checkpoint", "convert", *sys.argv[1:]])
    code = 0
except SystemExit as exc:
    code = exc.code
print("PEAK_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code, time.perf_counter() - start)
"""


def _write(layout: str, out: Path, count: int, numel: int) -> None:
    code = WRITE.format(root=str(ROOT), layout=layout, out=str(out), count=count, numel=numel)
    subprocess.run([sys.executable, "-c", code], check=True)


def _convert(src: Path, dst: Path, target: str) -> tuple[int, float]:
    """Peak RSS (KB) and seconds of converting SRC to DST in a fresh process."""
    proc = subprocess.run([sys.executable, "-c", CONVERT, str(src), str(dst), "--to", target], check=False,
                          capture_output=True, text=True, cwd=ROOT)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("PEAK_KB")]
    if not lines or lines[-1].split()[2] != "0":
        raise SystemExit(f"conversion of {src} failed:\n{proc.stdout}{proc.stderr}")
    _, peak, _, seconds = lines[-1].split()
    return int(peak), float(seconds)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _mb(kb: float) -> str:
    return f"{kb / 1024:.0f} MB"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=4.0, help="checkpoint size (default 4)")
    parser.add_argument("--tensor-mb", type=int, default=64, help="size of each tensor (default 64)")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="xser,fsdp")
    parser.add_argument("--targets", default=",".join(TARGETS), help="torch,dcp (or safetensors)")
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary folder in /tmp)")
    args = parser.parse_args(argv)
    numel = args.tensor_mb * (1 << 20) // 4 - 1  # float32; odd, so FSDP pads its last shard
    count = max(1, round(args.size_gb * 1024 / args.tensor_mb))
    work = Path(tempfile.mkdtemp(prefix="nm-ckpt-memory-", dir=args.dir))
    rows = []
    try:
        baseline = {}
        _write("plain", work / "one.pt", 1, numel)
        for target in args.targets.split(","):
            baseline[target], _ = _convert(work / "one.pt", work / f"one.{target}", target)
            _remove(work / f"one.{target}")
        for layout in args.layouts.split(","):
            src = work / ("big.xser" if layout == "xser" else "big_fsdp")
            started = time.perf_counter()
            _write(layout, src, count, numel)
            written = time.perf_counter() - started
            size = _size(src) + (_size(Path(str(src) + ".tensors")) if layout == "xser" else 0)
            print(f"{layout}: {count} tensors of {args.tensor_mb} MB, {size / (1 << 30):.2f} GB on disk "
                  f"(written in {written:.0f} s)", flush=True)
            for target in args.targets.split(","):
                dst = work / f"out.{target}"
                peak, seconds = _convert(src, dst, target)
                base = baseline[target]
                row = {"layout": layout, "target": target, "size_bytes": size, "peak_kb": peak, "baseline_kb": base,
                       "ratio": peak / base, "above_tensors": (peak - base) / (args.tensor_mb * 1024),
                       "seconds": seconds}
                rows.append(row)
                print(f"  --to {target:<6} peak RSS {_mb(peak)} (one {args.tensor_mb} MB tensor: {_mb(base)}), "
                      f"ratio {row['ratio']:.2f}, above the baseline {_mb(peak - base)} = "
                      f"{row['above_tensors']:.1f} tensors; {seconds:.0f} s", flush=True)
                _remove(dst)
            _remove(src)
            _remove(Path(str(src) + ".tensors"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    worst = max(rows, key=lambda r: r["peak_kb"])
    print(f"largest peak: {_mb(worst['peak_kb'])} ({worst['layout']} --to {worst['target']}), "
          f"{'under' if worst['peak_kb'] < 1 << 20 else 'OVER'} 1 GB")
    return rows


if __name__ == "__main__":
    main()
