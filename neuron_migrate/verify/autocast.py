"""`torch.autocast(device_type="neuron")` on the emulated device: autocast kernels on AutocastPrivateUse1.

The op lists follow PyTorch's CUDA autocast policy (aten/src/ATen/autocast_mode.cpp), which the native
backend registers for PrivateUse1 too: matrix products and convolutions run in the autocast dtype, numerically
sensitive operators in float32, and operators with several inputs at the widest input type.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten, tree_map

KEY = "AutocastPrivateUse1"

LOWER_PRECISION = (
    "_convolution", "_convolution.deprecated", "conv1d", "conv2d", "conv3d", "conv1d.padding", "conv2d.padding",
    "conv3d.padding", "conv_tbc", "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input",
    "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear",
    "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell", "scaled_dot_product_attention",
)
FLOAT32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "softmax.int", "log_softmax.int", "cross_entropy_loss", "cumsum", "cumprod", "prod", "sum", "norm.Scalar",
    "linalg_vector_norm",
)
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put", "scatter_add",
           "tensordot", "cat", "stack")
BANNED = ("binary_cross_entropy",)


def _eligible(value) -> bool:
    return (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype is not torch.float64
            and value.device.type != "cpu")


def _cast(args, kwargs, dtype):
    def cast(v):
        return v.to(dtype) if _eligible(v) and v.dtype != dtype else v
    return tree_map(cast, args), tree_map(cast, kwargs)


def _widest(args, kwargs):
    dtypes = [v.dtype for v in tree_flatten((args, kwargs))[0] if _eligible(v)]
    return max(dtypes, key=lambda d: torch.finfo(d).bits) if dtypes else None


def _kernel(op, policy):
    def kernel(*args, **kwargs):
        if policy == "lower":
            dtype = torch.get_autocast_dtype("neuron")
        elif policy == "fp32":
            dtype = torch.float32
        else:
            dtype = _widest(args, kwargs)
        if dtype is not None:
            args, kwargs = _cast(args, kwargs, dtype)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)):
            return op(*args, **kwargs)
    return kernel


def _banned(name):
    def kernel(*args, **kwargs):
        raise RuntimeError(
            f"torch.nn.functional.{name} and torch.nn.{name.title().replace('_', '')}Loss are unsafe to autocast "
            "(as on CUDA); use binary_cross_entropy_with_logits / BCEWithLogitsLoss instead")
    return kernel


def _overload(name: str):
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


def install() -> list[torch.library.Library]:
    """Register the autocast kernels; every other operator falls through to the device."""
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, KEY)
    kernels = torch.library.Library("aten", "IMPL")
    for policy, names in (("lower", LOWER_PRECISION), ("fp32", FLOAT32), ("promote", PROMOTE)):
        for name in names:
            op = _overload(name)
            if op is not None:
                kernels.impl(name, _kernel(op, policy), KEY)
    for name in BANNED:
        kernels.impl(name, _banned(name), KEY)
    return [fallthrough, kernels]
