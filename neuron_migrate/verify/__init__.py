"""`neuron-migrate verify`: run the original and the migrated program side by side and compare them.

Only the `verify` command imports this package's torch-dependent modules; importing the package itself
does not import torch.
"""
