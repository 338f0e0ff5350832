"""The emulated `neuron` device against the CPU over a table of operators: shapes, strides, dtypes and values.

Run as a script (the emulator registers a backend in the process): prints one line per difference, then
"N operators compared". Each case builds its inputs on the given device from CPU tensors made with one seed.
"""

import sys

import torch

from neuron_migrate.verify import emulator


def data(device, *shape, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator).to(dtype).to(device)


def inplace(fn):
    def case(device):
        x = data(device, 4, 6)
        fn(x)
        return x
    return case


def out_case(fn, out_shape, dtype=torch.float32):
    def case(device):
        out = torch.empty(out_shape, dtype=dtype, device=device)
        fn(device, out)
        return out
    return case


def seeded(fn):
    def case(device):
        torch.manual_seed(7)
        return fn(device)
    return case


CASES = {
    # factories
    "zeros": lambda d: torch.zeros(2, 3, device=d),
    "ones int": lambda d: torch.ones(4, dtype=torch.int64, device=d),
    "full": lambda d: torch.full((2, 2), 3.5, device=d),
    "empty shape": lambda d: torch.empty(3, 5, device=d).zero_(),
    "arange": lambda d: torch.arange(7, device=d),
    "arange start step": lambda d: torch.arange(1, 10, 2, device=d),
    "arange float": lambda d: torch.arange(0, 1, 0.25, device=d),
    "range": lambda d: torch.range(0, 3, device=d) if hasattr(torch, "range") else torch.arange(4, device=d),
    "linspace": lambda d: torch.linspace(0, 1, 5, device=d),
    "logspace": lambda d: torch.logspace(0, 2, 3, device=d),
    "eye": lambda d: torch.eye(3, device=d),
    "eye rectangular": lambda d: torch.eye(2, 4, device=d),
    "tril_indices": lambda d: torch.tril_indices(3, 3, device=d),
    "triu_indices": lambda d: torch.triu_indices(3, 4, 1, device=d),
    "tensor": lambda d: torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=d),
    "randperm": seeded(lambda d: torch.randperm(6, device=d)),
    "rand": seeded(lambda d: torch.rand(3, device=d)),
    "randn": seeded(lambda d: torch.randn(2, 3, device=d)),
    "randint": seeded(lambda d: torch.randint(0, 10, (5,), device=d)),
    "zeros_like": lambda d: torch.zeros_like(data(d, 2, 3)),
    "full_like": lambda d: torch.full_like(data(d, 2, 3), 2.0),
    # views
    "view": lambda d: data(d, 4, 6).view(6, 4),
    "reshape": lambda d: data(d, 4, 6).reshape(2, -1),
    "transpose": lambda d: data(d, 4, 6).transpose(0, 1),
    "permute": lambda d: data(d, 2, 3, 4).permute(2, 0, 1),
    "t": lambda d: data(d, 4, 6).t(),
    "narrow": lambda d: data(d, 4, 6).narrow(1, 2, 3),
    "select": lambda d: data(d, 4, 6).select(0, 2),
    "unsqueeze": lambda d: data(d, 4, 6).unsqueeze(1),
    "expand": lambda d: data(d, 4, 1).expand(4, 5),
    "as_strided": lambda d: data(d, 4, 6).as_strided((3, 3), (6, 2), 1),
    "unfold": lambda d: data(d, 10).unfold(0, 3, 2),
    "diagonal": lambda d: data(d, 4, 6).diagonal(),
    "split": lambda d: data(d, 4, 6).split(4, dim=1),
    "chunk": lambda d: data(d, 4, 6).chunk(3, dim=0),
    "contiguous": lambda d: data(d, 4, 6).t().contiguous(),
    "flatten": lambda d: data(d, 2, 3, 4).flatten(1),
    # resize
    "resize_ grow": lambda d: data(d, 2, 3).resize_(3, 4)[:2].zero_(),
    "resize_ shrink": lambda d: data(d, 4, 6).resize_(2, 3),
    "resize_ to zero": lambda d: data(d, 4, 6).resize_(0),
    "resize_as_": lambda d: data(d, 2, 2).resize_as_(data(d, 3, 1)).zero_(),
    # in-place
    "add_": inplace(lambda x: x.add_(1.5)),
    "mul_ on a view": inplace(lambda x: x[1:3].mul_(2)),
    "clamp_": inplace(lambda x: x.clamp_(-0.5, 0.5)),
    "zero_ on a column": inplace(lambda x: x[:, 2].zero_()),
    "fill_": inplace(lambda x: x.fill_(4.0)),
    "copy_ from cpu": inplace(lambda x: x.copy_(torch.ones(4, 6))),
    "index_fill_": inplace(lambda x: x.index_fill_(1, torch.tensor([0, 3]).to(x.device), -1.0)),
    "masked_fill_": inplace(lambda x: x.masked_fill_(x > 0, 0.0)),
    # out=
    "add out": out_case(lambda d, out: torch.add(data(d, 3, 4), data(d, 3, 4, seed=1), out=out), (3, 4)),
    "add out resized from empty": out_case(lambda d, out: torch.add(data(d, 3, 4), 1, out=out), (0,)),
    "mm out resized": out_case(lambda d, out: torch.mm(data(d, 3, 4), data(d, 4, 2, seed=1), out=out), (0,)),
    "cat out": out_case(lambda d, out: torch.cat([data(d, 2, 3), data(d, 1, 3, seed=1)], out=out), (0,)),
    "arange out": out_case(lambda d, out: torch.arange(5, out=out), (0,), torch.int64),
    "sum out": out_case(lambda d, out: torch.sum(data(d, 3, 4), 1, out=out), (3,)),
    # indexing
    "index int": lambda d: data(d, 4, 6)[1],
    "index slice": lambda d: data(d, 4, 6)[:, 1:5:2],
    "index mask": lambda d: (lambda x: x[x > 0])(data(d, 4, 6)),
    "index tensor": lambda d: data(d, 4, 6)[torch.tensor([3, 0, 3]).to(d)],
    "index_put_": inplace(lambda x: x.__setitem__(torch.tensor([0, 2]).to(x.device), 9.0)),
    "setitem slice": inplace(lambda x: x.__setitem__((slice(None), slice(0, 2)), 1.0)),
    "gather": lambda d: data(d, 4, 6).gather(1, torch.tensor([[0], [5], [2], [1]]).to(d)),
    "scatter": lambda d: torch.zeros(3, 5, device=d).scatter(1, torch.tensor([[0], [4], [2]]).to(d), 1.0),
    "index_select": lambda d: data(d, 4, 6).index_select(1, torch.tensor([5, 0]).to(d)),
    "nonzero": lambda d: (data(d, 4, 6) > 0).nonzero(),
    "where": lambda d: torch.where(data(d, 4, 6) > 0, data(d, 4, 6), 0.0),
    "take": lambda d: data(d, 4, 6).take(torch.tensor([0, 23, 7]).to(d)),
    "argmax": lambda d: data(d, 4, 6).argmax(dim=1),
    "topk": lambda d: data(d, 4, 6).topk(2, dim=1),
}


def tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for v in value for t in tensors(v)]


def describe(t: torch.Tensor):
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


def main() -> int:
    emulator.install(strict="strict" in sys.argv[1:])
    problems = []
    for name, case in CASES.items():
        cpu = tensors(case("cpu"))
        try:
            neuron = tensors(case("neuron"))
        except Exception as exc:  # a case the emulator cannot run at all
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if len(cpu) != len(neuron):
            problems.append(f"{name}: {len(cpu)} results on the CPU, {len(neuron)} on neuron")
            continue
        for index, (a, b) in enumerate(zip(cpu, neuron)):
            where = f"{name}[{index}]" if len(cpu) > 1 else name
            if b.device.type != "neuron":
                problems.append(f"{where}: the result is on {b.device}, not on neuron")
            if describe(a) != describe(b):
                problems.append(f"{where}: cpu {describe(a)}, neuron {describe(b)}")
            elif not torch.equal(a, b.cpu()):
                problems.append(f"{where}: values differ: cpu {a.flatten()[:6].tolist()}, "
                                f"neuron {b.cpu().flatten()[:6].tolist()}")
    print("\n".join(problems))
    print(f"{len(CASES)} operators compared")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
