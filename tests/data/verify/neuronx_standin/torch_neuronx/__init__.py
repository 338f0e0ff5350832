"""A stand-in for the legacy torch-neuronx in a torch_xla environment without Neuron hardware or compiler.

`trace` is torch.jit.trace on the CPU: the traced model computes what the model computes, which is what the
ahead-of-time compiled Neuron model is meant to compute. Give it to the torch_xla reference only:
`verify infer.py --reference-python PY --reference-env PYTHONPATH=tests/data/verify/neuronx_standin`.
"""

import torch

__version__ = "2.9.0+standin"


def trace(func, example_inputs, *_, compiler_args=None, compiler_workdir=None, **__):
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    return torch.jit.trace(func, example_inputs)
