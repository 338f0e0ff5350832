"""A synthetic repository for the benchmark: legacy torch_xla code, ordinary PyTorch, and plain Python.

Deterministic for a seed. The legacy files use the idioms and import styles seen in real Neuron code
(module aliases, `from pkg import module as alias`, imports inside functions, `try/except ImportError`
guards, `torch_xla.sync()`, `xmp.spawn`, `MpDeviceLoader`); the others hold the words that make a byte
pre-filter work hard (`re.compile`, `async`, `"xla"` in a log message, a local `xm`), as real code does.
"""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ("alpha", "beta", "gamma", "delta", "epoch", "batch", "layer", "block", "encoder", "decoder", "head",
         "token", "vocab", "score", "metric", "reader", "writer", "cache", "shard", "chunk", "record", "state")

BACKEND_CHOICES = ('("cpu", "cuda")',) * 39 + ('("cpu", "cuda", "xla")',)
XLA_IMPORTS = (
    "import torch_xla.core.xla_model as xm\n",
    "from torch_xla.core import xla_model as xm\n",
    "import torch_xla\nimport torch_xla.core.xla_model as xm\n",
    "try:\n    import torch_xla.core.xla_model as xm\nexcept ImportError:\n    xm = None\n",
)


def _name(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"


def _cls(rng: random.Random) -> str:
    return rng.choice(WORDS).title() + rng.choice(WORDS).title()


def _model(rng: random.Random) -> str:
    name, width = _cls(rng), rng.choice((64, 128, 256, 512))
    return f'''

class {name}(nn.Module):
    """A small {rng.choice(WORDS)} network."""

    def __init__(self, width: int = {width}, depth: int = {rng.randint(2, 6)}) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.dropout = nn.Dropout(p={rng.choice((0.0, 0.1, 0.2))})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + self.dropout(torch.relu(layer(self.norm(x))))
        return x
'''


def _dataset(rng: random.Random) -> str:
    name = _cls(rng)
    return f'''

class {name}Dataset(torch.utils.data.Dataset):
    def __init__(self, size: int = {rng.randint(100, 10000)}, width: int = 128) -> None:
        self.inputs = torch.randn(size, width)
        self.labels = torch.randint(0, {rng.randint(2, 100)}, (size,))

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int):
        return self.inputs[index], self.labels[index]
'''


def _plain_function(rng: random.Random) -> str:
    name, field = _name(rng), rng.choice(WORDS)
    return f'''

def {name}(records, limit={rng.randint(1, 100)}):
    """Group records by {field} and keep the first `limit` of each group."""
    groups = {{}}
    for record in records:
        key = record.get("{field}", "unknown")
        bucket = groups.setdefault(key, [])
        if len(bucket) < limit:
            bucket.append(record)
    total = sum(len(v) for v in groups.values())
    if total == 0:
        raise ValueError("no {field} records")
    return {{k: sorted(v, key=lambda r: r.get("id", 0)) for k, v in groups.items()}}
'''


def _regex_helper(rng: random.Random) -> str:
    pattern, field = f"{_name(rng).upper()}_PATTERN", rng.choice(WORDS)
    return f'''

{pattern} = re.compile(r"^(?P<{field}>[a-z_]+)=(?P<value>.*)$")


def parse_{_name(rng)}(line: str) -> dict:
    match = {pattern}.match(line.strip())
    return {{"key": match.group("{field}"), "value": match.group("value")}} if match else {{}}
'''


def _async_helper(rng: random.Random) -> str:
    return f'''

async def fetch_{_name(rng)}(session, url: str, retries: int = {rng.randint(1, 5)}):
    for attempt in range(retries):
        try:
            async with session.get(url) as response:
                return await response.json()
        except TimeoutError:
            logger.warning("attempt %d for %s timed out", attempt, url)
    return None
'''


def _dataclass(rng: random.Random) -> str:
    return f'''

@dataclasses.dataclass
class {_cls(rng)}Config:
    name: str = "{rng.choice(WORDS)}"
    learning_rate: float = {rng.choice(("1e-3", "3e-4", "5e-5"))}
    batch_size: int = {rng.choice((8, 16, 32, 64))}
    backends: tuple = {rng.choice(BACKEND_CHOICES)}  # accepted on the command line, mapped elsewhere
    steps: int = {rng.randint(100, 100000)}

    def describe(self) -> str:
        return f"{{self.name}}: lr={{self.learning_rate}} batch={{self.batch_size}}"
'''


def _cuda_train(rng: random.Random) -> str:
    compile_line = "    model = torch.compile(model)\n" if rng.random() < 0.1 else ""
    return f'''

def train_{_name(rng)}(model, loader, epochs: int = {rng.randint(1, 10)}):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = model.to(device)
{compile_line}    optimizer = torch.optim.AdamW(model.parameters(), lr={rng.choice(("1e-3", "3e-4"))})
    for epoch in range(epochs):
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), labels)
            loss.backward()
            optimizer.step()
        logger.info("epoch %d loss %.4f", epoch, loss.item())
    return model
'''


def _xla_train(rng: random.Random) -> str:
    loader = rng.random() < 0.5
    step = rng.choice(("xm.mark_step()", "xm.mark_step()", "torch_xla.sync()"))
    opt_step = rng.choice(("xm.optimizer_step(optimizer)", "optimizer.step()"))
    lines = [f"\n\ndef train_{_name(rng)}(model, loader, epochs: int = {rng.randint(1, 10)}):\n",
             "    device = xm.xla_device()\n",
             "    model = model.to(device)\n",
             "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"]
    if loader:
        lines.append("    import torch_xla.distributed.parallel_loader as pl\n")
        lines.append("    loader = pl.MpDeviceLoader(loader, device)\n")
    lines += ["    for epoch in range(epochs):\n",
              "        for step, (inputs, labels) in enumerate(loader):\n",
              "            optimizer.zero_grad()\n",
              "            loss = nn.functional.cross_entropy(model(inputs), labels)\n",
              "            loss.backward()\n",
              f"            {opt_step}\n",
              f"            {step}\n",
              "            if step % 100 == 0:\n",
              "                xm.master_print(f\"epoch {epoch} step {step} loss {loss.item():.4f}\")\n",
              "    xm.rendezvous(\"training_done\")\n",
              "    return model\n"]
    return "".join(lines)


def _xla_distributed(rng: random.Random) -> str:
    return f'''

def _mp_fn(index, flags):
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # registers the backend
    import torch_xla.runtime as xr

    dist.init_process_group("xla", init_method="xla://")
    rank, world = xr.global_ordinal(), xr.world_size()
    device = torch.device("xla")
    total = torch.tensor([rank], device=device)
    total = xm.all_reduce(xm.REDUCE_SUM, total)
    if xm.is_master_ordinal():
        print("world", world, "sum", total.item())


def launch_{_name(rng)}(flags):
    import torch_xla.distributed.xla_multiprocessing as xmp

    xmp.spawn(_mp_fn, args=(flags,), nprocs={rng.choice(("None", "8", "32"))})
'''


def _xla_compile(rng: random.Random) -> str:
    return f'''

def build_{_name(rng)}(model):
    compiled = torch.compile(model, backend="openxla", dynamic={rng.choice(("True", "False"))})
    if xm.get_ordinal() == 0:
        xm.save(model.state_dict(), "/tmp/{rng.choice(WORDS)}.pt")
    xm.wait_device_ops()
    return compiled
'''


def _header(kind: str, rng: random.Random) -> str:
    doc = f'"""{rng.choice(WORDS).title()} {rng.choice(WORDS)} utilities ({kind})."""\n\n'
    common = "import dataclasses\nimport logging\nimport re\n"
    if kind == "plain":
        return doc + common + "\nlogger = logging.getLogger(__name__)\n"
    torch = "import torch\nimport torch.nn as nn\n"
    if kind == "xla":
        return doc + common + torch + rng.choice(XLA_IMPORTS) + "\nlogger = logging.getLogger(__name__)\n"
    return doc + common + torch + "\nlogger = logging.getLogger(__name__)\n"


BODIES = {
    "plain": (_plain_function, _dataclass),
    "torch": (_model, _dataset, _cuda_train, _plain_function, _dataclass),
    "xla": (_model, _dataset, _plain_function, _dataclass),
    "xla-idioms": (_xla_train, _xla_distributed, _xla_compile),
}
# Helpers that only some files have, with the share of files that have them.
OCCASIONAL = ((_regex_helper, 0.15), (_async_helper, 0.08))


def module(kind: str, rng: random.Random, blocks: int) -> str:
    """One file of `kind` ("plain", "torch" or "xla") made of `blocks` top-level definitions."""
    parts = [_header(kind, rng)]
    if kind == "xla":
        parts.append(rng.choice(BODIES["xla-idioms"])(rng))
        for _ in range(blocks - 1):
            pool = BODIES["xla-idioms"] if rng.random() < 0.4 else BODIES["xla"]
            parts.append(rng.choice(pool)(rng))
    else:
        parts += [rng.choice(BODIES[kind])(rng) for _ in range(blocks)]
    parts += [helper(rng) for helper, share in OCCASIONAL if rng.random() < share]
    return "".join(parts)


def generate(root: Path, files: int, seed: int = 0, legacy_share: float = 0.10) -> dict[str, list[Path]]:
    """Write `files` modules under `root` in package folders; returns the paths by kind."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Path]] = {"xla": [], "torch": [], "plain": []}
    for i in range(files):
        roll = rng.random()
        kind = "xla" if roll < legacy_share else "torch" if roll < legacy_share + (1 - legacy_share) / 2 else "plain"
        folder = root / f"pkg{i % 37:02d}" / f"sub{i % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{kind}_{i:05d}.py"
        path.write_text(module(kind, rng, rng.randint(2, 10)), encoding="utf-8")
        by_kind[kind].append(path)
    return by_kind


def sized_module(lines: int, seed: int = 0) -> str:
    """A legacy module of about `lines` lines (for the single-file start-up measurement)."""
    rng = random.Random(seed)
    text = _header("xla", rng)
    while text.count("\n") < lines:
        text += rng.choice(BODIES["xla-idioms"] + BODIES["xla"])(rng)
    return text
