"""--device-style accelerator: the migrated program runs wherever it lands (Trainium, GPU, CPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT, cli



@pytest.mark.needs_torch
@pytest.mark.slow
def test_bundled_example_in_accelerator_style_trains_on_the_plain_cpu(tmp_path):
    example = tmp_path / "xla_mnist"
    shutil.copytree(ROOT / "examples" / "xla_mnist", example)
    out = cli("rewrite", "--unsafe-fixes", "--device-style", "accelerator", str(example))  # the README's command
    assert out.returncode == 1 and " NM405 " in out.stdout and out.stderr == "", out.stderr  # a note is left
    train = (example / "train.py").read_text()
    assert "torch.accelerator.current_accelerator(check_available=True)" in train
    assert '"neuron"' not in train.replace('backend="neuron" if DEVICE.type == "neuron"', "")
    run = subprocess.run([sys.executable, "train.py", "--steps", "3", "--batch-size", "8"], cwd=example,
                         capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "trained 3 steps" in run.stdout
    assert cli("rewrite", "--diff", "--unsafe-fixes", "--device-style", "accelerator", str(example)).stdout == ""


def test_styles_differ_only_where_a_device_is_named(tmp_path):
    source = "import torch_xla.core.xla_model as xm\n\nx = 1\ndevice = xm.xla_device()\nxm.mark_step()\n"
    (tmp_path / "a.py").write_text(source)
    neuron = cli("rewrite", "--diff", str(tmp_path / "a.py")).stdout
    accelerator = cli("rewrite", "--diff", "--device-style", "accelerator", str(tmp_path / "a.py")).stdout
    assert '+device = torch.device("neuron")' in neuron
    assert "+device = DEVICE" in accelerator
    assert "-xm.mark_step()" in neuron and "-xm.mark_step()" in accelerator


@pytest.mark.needs_torch
@pytest.mark.slow
def test_accelerator_style_computes_the_same_losses_on_the_emulated_neuron_device(tmp_path):
    """The accelerator-style migration, run on the emulated `neuron` device, against the default migration on the CPU."""
    example = tmp_path / "xla_mnist"
    shutil.copytree(ROOT / "examples" / "xla_mnist", example)
    assert cli("rewrite", "--unsafe-fixes", "--device-style", "accelerator", str(example)).returncode == 1  # a note
    out = cli("verify", "train.py", "--migrated", str(example / "train.py"), "--target", "emulated",
              "--max-steps", "3", "--format", "json", "--", "--steps", "3", cwd=ROOT / "examples" / "xla_mnist")
    report = json.loads(out.stdout)
    assert out.returncode == 0, out.stdout[-3000:]
    reference, target = report["runs"]
    assert (reference["device"], target["device"]) == ("cpu", "emulated")
    assert len(target["losses"]) == 3 and target["losses"] == reference["losses"]
