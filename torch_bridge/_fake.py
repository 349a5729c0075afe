"""Fake kernels (`torch.library.register_fake`) for the ops in torch_bridge.schemas.

Each one computes the output metadata from the inputs' (fake) shapes: stock torch on FakeTensors
where torch's op has the same meaning (`FAKES` names the function; the default is the function of
the same name in torch.nn.functional or torch), then every output is replaced by a fresh contiguous
tensor of the same shape and dtype (ops here never return views; the CPU impls return contiguous
tensors), so the fake output matches the real one in shape, dtype and strides.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F


def _fresh(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        return torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return t


def fresh(out: Any) -> Any:
    """Outputs as new contiguous tensors (tuples / return_types as tuples)."""
    if isinstance(out, (tuple, list)):
        return tuple(_fresh(t) for t in out)
    return _fresh(out)


def _stride_or_none(stride: Sequence[int]) -> Any:
    return stride if len(stride) else None


def _npu_rms_norm(self: Any, gamma: Any, epsilon: float = 1e-6) -> Any:
    k = gamma.dim()
    rstd_shape = tuple(self.shape[: self.dim() - k]) + (1,) * k
    return torch.empty_like(self), self.new_empty(rstd_shape, dtype=torch.float32)


def _npu_add_rms_norm(x1: Any, x2: Any, gamma: Any, epsilon: float = 1e-6) -> Any:
    y, rstd = _npu_rms_norm(x1, gamma, epsilon)
    return y, rstd, torch.empty_like(x1)


def _npu_swiglu(self: Any, dim: int = -1) -> Any:
    return self.chunk(2, dim)[0]


def _matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Any:
    return torch.matmul(a.mT if transpose_a else a, b.mT if transpose_b else b)


def _max_pool2d(input: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False) -> Any:
    return F.max_pool2d(input, kernel_size, _stride_or_none(stride), padding, dilation, ceil_mode=ceil_mode,
                        return_indices=True)


def _avg_pool2d(input: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
                count_include_pad: bool = True, divisor_override: Any = None) -> Any:
    return F.avg_pool2d(input, kernel_size, _stride_or_none(stride), padding, ceil_mode, count_include_pad,
                        divisor_override)


def _bnsd(query: Any, key: Any, head_num: int, layout: str) -> tuple[Any, Any, Any, Any]:
    if layout == "BNSD":
        return query.shape[0], query.shape[1], query.shape[2], key.shape[2]
    if layout == "BSND":
        return query.shape[0], query.shape[2], query.shape[1], key.shape[1]
    if layout == "BSH":
        return query.shape[0], head_num, query.shape[1], key.shape[1]
    if layout == "SBH":
        return query.shape[1], head_num, query.shape[0], key.shape[0]
    raise RuntimeError(f"npu_fusion_attention: input_layout must be BNSD, BSND, BSH or SBH, got {layout!r}")


def _npu_fusion_attention(query: Any, key: Any, value: Any, head_num: int, input_layout: str, *args: Any,
                          **kwargs: Any) -> Any:
    B, N, L, S = _bnsd(query, key, head_num, input_layout)
    stats = query.new_empty((B, N, L, 8), dtype=torch.float32)
    return (torch.empty_like(query), stats, stats.new_empty(stats.shape), query.new_empty((0,)), 0, 0,
            B * N * L * S)


def _npu_fusion_attention_grad(query: Any, key: Any, value: Any, dy: Any, *args: Any, **kwargs: Any) -> Any:
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value), query.new_empty((0,))


def _embedding(input: Any, weight: Any, *args: Any, **kwargs: Any) -> Any:
    return weight.new_empty(tuple(input.shape) + tuple(weight.shape[1:]))


def _cross_entropy(input: Any, target: Any, weight: Any = None, ignore_index: int = -100, reduction: str = "mean",
                   label_smoothing: float = 0.0) -> Any:
    return F.cross_entropy(input, target, weight, ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=label_smoothing)


def _nll_loss(input: Any, target: Any, weight: Any = None, ignore_index: int = -100, reduction: str = "mean") -> Any:
    return F.nll_loss(input, target, weight, ignore_index=ignore_index, reduction=reduction)


def _mse_loss(input: Any, target: Any, reduction: str = "mean", weight: Any = None) -> Any:
    return F.mse_loss(input, target, reduction=reduction)


def _var(input: Any, dim: Any = None, keepdim: bool = False, *, correction: Any = None) -> Any:
    return torch.var(input, dim, keepdim=keepdim, correction=correction)


def _std(input: Any, dim: Any = None, keepdim: bool = False, *, correction: Any = None) -> Any:
    return torch.std(input, dim, keepdim=keepdim, correction=correction)


def _arange(start: Any = 0, end: Any = None, step: Any = 1, *, dtype: Any = None) -> Any:
    if end is None:
        start, end = 0, start
    return torch.arange(start, end, step, dtype=dtype)


def _sum_to_size(grad: Any, size: Sequence[int], dtype: Any = None) -> Any:
    return grad.new_empty(tuple(size), dtype=dtype or grad.dtype)


def _native_dropout(input: Any, p: float, train: Any) -> Any:
    return torch.empty_like(input), torch.empty_like(input, dtype=torch.bool)


def _batch_norm(input: Any, *args: Any, **kwargs: Any) -> Any:
    return torch.empty_like(input)


def _max_dim(input: Any, dim: int, keepdim: bool = False) -> Any:
    return tuple(torch.max(input, dim, keepdim))


def _min_dim(input: Any, dim: int, keepdim: bool = False) -> Any:
    return tuple(torch.min(input, dim, keepdim))


def _none(*args: Any, **kwargs: Any) -> None:
    return None


def _npu_apply_adam_w(*args: Any, var: Any, m: Any, v: Any) -> Any:
    return var, m, v


# op -> function of the schema's arguments giving outputs of the right shapes and dtypes
FAKES: dict[str, Callable[..., Any]] = {
    "npu_gelu": lambda self, *, approximate="none": F.gelu(self, approximate=approximate),
    "npu_swiglu": _npu_swiglu,
    "npu_dtype_cast": lambda self, dtype: self.to(dtype),
    "sum_to_size": _sum_to_size,
    "max.dim": _max_dim, "min.dim": _min_dim,
    "var": _var, "std": _std,
    "npu_rms_norm": _npu_rms_norm, "npu_add_rms_norm": _npu_add_rms_norm,
    "npu_scaled_masked_softmax": lambda x, mask, scale=1, fixed_triu_mask=False: x,
    "batch_norm": _batch_norm,
    "matmul": _matmul, "npu_linear": F.linear,
    "max_pool2d": _max_pool2d, "avg_pool2d": _avg_pool2d,
    "npu_rotary_mul": lambda self, r1, r2, rotary_mode="half": self,
    "npu_fusion_attention": _npu_fusion_attention, "npu_fusion_attention_grad": _npu_fusion_attention_grad,
    "embedding": _embedding, "cross_entropy": _cross_entropy, "nll_loss": _nll_loss, "mse_loss": _mse_loss,
    "native_dropout": _native_dropout,
    "permute": lambda input, dims: input.permute(dims),
    "arange": _arange,
    "fill_": _none, "adamw": _none, "adam": _none, "sgd": _none, "adamw_": _none, "adam_": _none, "sgd_": _none,
}
# ops whose fake returns its inputs (mutated in place and returned, `Tensor(a!)` results)
ALIASING = {"npu_apply_adam_w.out": _npu_apply_adam_w}


def check_devices(op: str, names: Sequence[str], args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """torch's error for tensors on different devices (0-dim CPU tensors mix, as in torch), naming
    the argument: reached on meta tensors mixed with CPU ones (the fake kernel is the Meta kernel)."""
    first: Any = None
    for name, v in list(zip(names, args, strict=False)) + list(kwargs.items()):
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if not isinstance(t, torch.Tensor) or (t.dim() == 0 and t.device.type == "cpu"):
                continue
            if first is None:
                first = t.device
            elif t.device != first:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"{first} and {t.device}! (when checking argument for argument {name} in method "
                                   f"npu::{op})")


def fake_for(qual: str, name: str, names: Sequence[str] = ()) -> Callable[..., Any]:
    """The fake kernel of op `qual` (`name` without the overload; `names` its positional
    arguments' names, for error messages)."""
    if qual in ALIASING:
        return ALIASING[qual]
    ref = FAKES.get(qual) or getattr(F, name, None) or getattr(torch, name)

    def fake(*args: Any, **kwargs: Any) -> Any:
        check_devices(qual, names, args, kwargs)
        return fresh(ref(*args, **kwargs))
    fake.__name__ = f"{name}_fake"
    return fake


def backward_fake(diff: Sequence[int]) -> Callable[..., Any]:
    """Fake kernel of a `<op>_backward` op: one gradient per differentiable input (positions `diff`
    in the forward's arguments, which follow `n_lead` leading grad / result arguments): the input's
    shape and dtype, an empty tensor for a None input, a list for a Tensor[] input."""
    def fake(n_lead: int, *args: Any) -> Any:
        grads: list[Any] = []
        ref = args[0]
        for i in diff:
            a = args[n_lead + i]
            if a is None:
                grads.append(ref.new_empty((0,)))
            elif isinstance(a, (list, tuple)):
                grads.append([torch.empty_like(t, memory_format=torch.contiguous_format) for t in a])
            else:
                grads.append(torch.empty_like(a, memory_format=torch.contiguous_format))
        return grads[0] if len(grads) == 1 else tuple(grads)
    return fake
