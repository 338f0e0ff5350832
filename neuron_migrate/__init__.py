"""neuron-migrate: move torch_xla training and inference code to the native PyTorch `neuron` device.

Importing this package never imports torch; only `neuron_migrate.verify` does.
"""

__version__ = "0.1.0"
