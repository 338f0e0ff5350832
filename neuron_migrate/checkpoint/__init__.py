"""`neuron-migrate checkpoint`: read the checkpoints the XLA stack wrote and convert them for the native program.

`reader` reads one `torch.save` file with a restricted unpickler (nothing from the file is executed; the
classes of torch_xla and NxD map to plain data) and loads its tensors one at a time; `layouts` recognises
the layouts (plain, xser, XLA FSDP shards, ZeRO-1 shards, NxD TP/PP shards, DCP) and describes each as one
tree whose leaves load a whole tensor on demand; `writers` stream the leaves out (torch.save zip,
safetensors, a torch.distributed.checkpoint folder) into a temporary folder that is renamed at the end.
torch is imported by this package only; `check`, `rewrite` and `pin` never load it.
"""
