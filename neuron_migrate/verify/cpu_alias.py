"""The CPU reference: the migrated program with the `neuron` device standing for the CPU.

Its tensors are the Python emulated device's (emulator.py): each holds a CPU tensor and every operator runs the
CPU kernel on it, so the program computes what it computes on the CPU, while a tensor placed on `neuron`
reports the `neuron` device, as on Neuron: a device check the migration wrote (`device.type != "neuron"`)
holds here as it does on the device. The target's device (the C++ emulated one, or Neuron itself) computes
through its own code; the comparison of the two is the device side of the migration.
"""

from __future__ import annotations

from neuron_migrate.verify import emulator, unsharded


def install() -> None:
    emulator.install_python()
    unsharded.install()
