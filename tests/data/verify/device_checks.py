"""Exercise the emulated `neuron` device the way migrated programs use it; every check asserts.

Run in its own process (the emulator registers the device for the whole process):
    python device_checks.py [strict]
"""

import io
import sys

import torch
import torch.nn as nn

from neuron_migrate.verify import emulator

emulator.install(strict="strict" in sys.argv)


def check_placement():
    device = torch.device("neuron")
    x = torch.randn(3, 4).to(device)
    assert x.device.type == "neuron" and x.is_neuron and str(x.device) == "neuron:0"
    for t in (torch.zeros(2, device="neuron"), torch.arange(5, device=device), torch.tensor([1.0], device=device),
              torch.full((2,), 3.0, device="neuron:0"), torch.randn(2, device="neuron")):
        assert t.device.type == "neuron", t
    assert torch.arange(5, device=device).cpu().tolist() == [0, 1, 2, 3, 4]
    assert x.cpu().device.type == "cpu" and torch.equal(x.cpu(), x.to("cpu"))
    assert repr(torch.ones(2, device=device)) == "tensor([1., 1.], device='neuron:0')"
    assert f"{torch.tensor(0.5, device=device):.2f}" == "0.50"
    assert torch.accelerator.current_accelerator().type == "neuron" and torch.accelerator.is_available()
    assert torch.neuron.is_available() and torch.neuron.device_count() >= 1
    torch.neuron.synchronize()


def check_training_matches_cpu():
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    neuron_model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    neuron_model.load_state_dict(cpu_model.state_dict())
    neuron_model.to("neuron")
    assert all(p.device.type == "neuron" for p in neuron_model.parameters())
    losses = {}
    for name, model, device in (("cpu", cpu_model, "cpu"), ("neuron", neuron_model, "neuron")):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
        torch.manual_seed(1)
        losses[name] = []
        for _ in range(4):
            x, y = torch.randn(8, 6).to(device), torch.randint(0, 3, (8,)).to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses[name].append(loss.item())
    assert losses["cpu"] == losses["neuron"], losses
    for a, b in zip(cpu_model.parameters(), neuron_model.parameters()):
        assert b.grad.device.type == "neuron" and torch.equal(a, b.cpu())
    return neuron_model


def check_save_load(model):
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    on_device = torch.load(buffer)  # weights_only=True, the default
    assert all(v.device.type == "neuron" for v in on_device.values())
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert all(torch.equal(on_cpu[k], v.cpu()) for k, v in model.state_dict().items())


def check_autocast():
    layer = nn.Linear(4, 4).to("neuron")
    x = torch.randn(2, 4, device="neuron")
    with torch.autocast(device_type="neuron", dtype=torch.bfloat16):
        y = layer(x)
        probabilities = torch.softmax(y, dim=-1)
    assert y.dtype == torch.bfloat16 and probabilities.dtype == torch.float32
    assert layer(x).dtype == torch.float32


def check_compile():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x).relu() + torch.ones(2, device=x.device)

    from neuron_migrate.verify import dynamo

    net = Net().to("neuron")
    reference = Net()
    reference.load_state_dict({k: v.cpu() for k, v in net.state_dict().items()})
    net.compile(backend="neuron", dynamic=False)
    before = len(dynamo.LOG.compilations)
    for rows in (3, 3, 5):
        x = torch.randn(rows, 4)
        out = net(x.to("neuron"))
        out.sum().backward()
        assert out.device.type == "neuron" and torch.allclose(out.cpu(), reference(x))
    compiled = dynamo.LOG.compilations[before:]
    assert len(compiled) == 2 and compiled[0].frame == compiled[1].frame, compiled  # a new shape recompiles
    assert net.fc.weight.grad.device.type == "neuron"


def check_generator():
    generator = torch.Generator(device="neuron")
    assert generator.device.type == "neuron" and isinstance(generator, torch.Generator)
    first = torch.randn(4, device="neuron", generator=generator.manual_seed(5))
    labels = torch.randint(0, 4, (8,), device="neuron", generator=generator)
    assert first.device.type == labels.device.type == "neuron"
    cpu = torch.Generator().manual_seed(5)  # the CPU's numbers, drawn in the same order
    assert torch.equal(first.cpu(), torch.randn(4, generator=cpu))
    assert torch.equal(labels.cpu(), torch.randint(0, 4, (8,), generator=cpu))
    # the generators PyTorch makes itself are still `torch.Generator`s, on the CPU
    assert isinstance(torch.default_generator, torch.Generator) and torch.Generator().device.type == "cpu"


def check_device_mixing():
    layer = nn.Linear(4, 2).to("neuron")
    before = sum(emulator.STATS.mixed.values())
    try:
        layer(torch.randn(3, 4))  # forgot .to(device)
    except RuntimeError as exc:
        assert "strict" in sys.argv and "neuron:0 and cpu" in str(exc), exc
    else:
        assert "strict" not in sys.argv
    assert sum(emulator.STATS.mixed.values()) == before + 1
    layer(torch.randn(3, 4, device="neuron")) * torch.tensor(2.0)  # a 0-dim CPU tensor is a scalar: allowed


def check_fallback_ops_are_counted():
    matrix = torch.randn(4, 4, device="neuron")
    torch.linalg.qr(matrix)
    torch.linalg.inv(matrix @ matrix.T + torch.eye(4, device="neuron"))
    assert emulator.STATS.ops["linalg_qr"] == 1 and emulator.STATS.ops["linalg_inv_ex"] == 1


check_placement()
check_save_load(check_training_matches_cpu())
check_autocast()
check_compile()
check_generator()
check_device_mixing()
check_fallback_ops_are_counted()
print("device checks passed")
