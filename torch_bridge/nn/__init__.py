"""torch.nn modules whose forward runs on torch.ops.npu.* kernels.

Each class subclasses its torch.nn counterpart and overrides only `forward` (and what forward needs):
the constructor arguments, parameters, buffers, initialisation, state_dict keys and extra_repr are
torch.nn's own, so a state_dict loads both ways and `isinstance(m, torch.nn.Linear)` still holds.
`torch_bridge.convert(model)` swaps a stock model's modules for these in place.

The containers and pure-view modules (Module, Sequential, ModuleList, ModuleDict, Parameter,
Identity, Flatten, Unflatten) are torch.nn's, re-exported so that `torch_bridge.nn` can stand in for
`torch.nn` when building a model (`build(nn=torch_bridge.nn)`).

Differences from torch.nn: `inplace=True` flags compute out of place (the same values; the input is
left as it was); settings the ops cannot run raise NotImplementedError at construction, naming the
setting (Embedding max_norm / sparse, Conv2d padding_mode other than 'zeros', MultiheadAttention
add_bias_kv / add_zero_attn); Dropout draws its mask from the kernel's own generator. docs/models.md
has the table of modules and the ops each calls.
"""
import torch.nn as _torch_nn
from torch.nn import Flatten, Identity, Module, ModuleDict, ModuleList, Parameter, Sequential, Unflatten

from torch_bridge.nn.activation import (
    ELU,
    GELU,
    Dropout,
    Hardswish,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from torch_bridge.nn.attention import MultiheadAttention
from torch_bridge.nn.conv import AdaptiveAvgPool2d, AvgPool2d, Conv2d, MaxPool2d
from torch_bridge.nn.linear import Embedding, Linear
from torch_bridge.nn.loss import CrossEntropyLoss, MSELoss, NLLLoss
from torch_bridge.nn.norm import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm

__all__ = [
    "Module", "Sequential", "ModuleList", "ModuleDict", "Parameter", "Identity", "Flatten", "Unflatten",
    "Linear", "Embedding", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d",
    "Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "LeakyReLU", "ELU", "Hardswish", "Softplus", "Softmax", "LogSoftmax",
    "Dropout", "MultiheadAttention", "CrossEntropyLoss", "MSELoss", "NLLLoss",
    "SWAPS",
]

# stock class -> its torch_bridge.nn replacement (read by torch_bridge.convert); exact classes only, so a
# user's subclass of torch.nn.Linear with its own forward is not swapped behind its back
SWAPS: dict[type, type] = {
    next(b for b in cls.__mro__[1:] if b.__module__.startswith("torch.nn.")): cls
    for cls in (Linear, Embedding, LayerNorm, RMSNorm, GroupNorm, BatchNorm1d, BatchNorm2d, Conv2d, MaxPool2d,
                AvgPool2d, AdaptiveAvgPool2d, ReLU, GELU, SiLU, Sigmoid, Tanh, LeakyReLU, ELU, Hardswish, Softplus,
                Softmax, LogSoftmax, Dropout, MultiheadAttention, CrossEntropyLoss, MSELoss, NLLLoss)
}
# MultiheadAttention's out_proj class (a Linear that quantization leaves alone)
SWAPS[_torch_nn.modules.linear.NonDynamicallyQuantizableLinear] = Linear
