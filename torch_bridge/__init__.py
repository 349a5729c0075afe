"""Vinci for PyTorch: the op library as `torch.ops.npu.*`, the torch_npu-like module.

`import torch_bridge` registers every op (torch_bridge.ops: schema, CPU impl on the DSL kernels,
fake kernel, autograd through `torch.ops.npu.<op>_backward`) and copies each `torch.ops.npu.*` op
onto this module, as torch_npu does: `torch_bridge.npu_rms_norm(x, gamma)`,
`torch_bridge.softmax(x, -1)`. See docs/torch_ops.md.
"""
import torch as _torch

from torch_bridge import device, ops  # noqa: F401  (ops: torch.ops.npu.*; device: npu and torch.npu, docs/device.md)
from torch_bridge.custom import custom_op  # noqa: F401  (your DSL kernels as torch ops: docs/custom_ops.md)
from torch_bridge.device import _cpu_alias, fallback_ops  # noqa: F401
from torch_bridge.profiler import profile, record_function  # noqa: F401  (docs/profiling.md)

for _qual in ops.OPS:
    _name = _qual.split(".", 1)[0]
    globals().setdefault(_name, getattr(_torch.ops.npu, _name))
del _qual, _name

from torch_bridge import nn, optim  # noqa: E402,F401  (torch.nn modules on npu ops, fused optimizers)
from torch_bridge.convert import convert  # noqa: E402,F401  (swap a stock model onto npu ops)
