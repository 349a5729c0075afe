"""`torch_bridge.convert(model)`: run a stock torch model on torch.ops.npu.

Two parts:

1. Modules. Every submodule whose class is exactly a torch.nn class with a torch_bridge.nn version
   (`torch_bridge.nn.SWAPS`: Linear, Conv2d, LayerNorm, RMSNorm, BatchNorm, pools, activations,
   Dropout, Embedding, MultiheadAttention, the losses ...) has its class switched to that version in
   place: the module object, its parameters and buffers (the very same tensors: nothing is copied),
   hooks and references held elsewhere (an optimizer built before) all stay. A module whose settings
   the npu version cannot run (e.g. Conv2d with padding_mode='reflect', Embedding with max_norm) is
   left as it is and listed with the reason, and so is every other torch.nn leaf module with compute
   (LSTM, Conv1d, ...). Subclasses of torch.nn classes are not swapped (their forward is theirs);
   they, user modules and torch.nn composites (TransformerEncoderLayer) are listed as running their
   own forward as written (their submodules swapped, their F.* calls redirected, plain tensor
   arithmetic such as residual adds left on torch).

2. Functional calls (functional=True). The model's own `forward` is wrapped (an instance attribute on
   the root module) so that while it runs, a `torch.overrides.TorchFunctionMode` sends
   `F.scaled_dot_product_attention`, `F.softmax` / `log_softmax`, `F.gelu`, `F.silu`, `F.relu`,
   `torch.sigmoid` / `tanh`, `F.layer_norm`, `F.rms_norm`, `F.linear`, `F.embedding`, `F.dropout`,
   `F.cross_entropy` / `nll_loss` / `mse_loss` and their Tensor-method forms to torch.ops.npu. The mode is
   scoped to that forward: other code in the process, and the backward pass (already npu ops through
   their autograd), are untouched. A call whose arguments the op does not take (an integer tensor, a
   probability target for cross_entropy, ...) runs on stock torch and is counted in
   `report.fallbacks` (name -> calls), so what still runs on torch is visible after a step.

`convert(model)` returns `(model, report)`; `print(report)` lists what was swapped and what was not.
"""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["convert", "ConvertReport", "NpuFunctionMode"]

# torch.nn modules that compute nothing (containers, views) or whose npu version would be the same code
_PASSIVE = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.ParameterList,
            torch.nn.ParameterDict, torch.nn.Identity, torch.nn.Flatten, torch.nn.Unflatten)


@dataclass
class ConvertReport:
    """What `convert` did: swapped modules (name, stock class -> npu class), modules left on stock torch
    with the reason, user modules whose own forward runs as written, and, filled while the model runs,
    functional calls that fell back to stock torch (name -> count)."""
    swapped: list[tuple[str, str]] = field(default_factory=list)
    not_swapped: list[tuple[str, str, str]] = field(default_factory=list)
    custom: list[tuple[str, str]] = field(default_factory=list)
    functional: bool = False
    fallbacks: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        lines = [f"convert: {len(self.swapped)} modules swapped to torch_bridge.nn, "
                 f"{len(self.not_swapped)} left on stock torch"]
        counts = Counter(cls for _, cls in self.swapped)
        if counts:
            lines.append("  swapped: " + ", ".join(f"{c} x{n}" for c, n in sorted(counts.items())))
        for name, cls, why in self.not_swapped:
            lines.append(f"  NOT swapped: {name or '(root)'} ({cls}): {why}")
        if self.custom:
            lines.append(f"  own forward, run as written: {', '.join(sorted({c for _, c in self.custom}))}")
        lines.append("  functional calls: " + ("redirected to torch.ops.npu while forward runs" if self.functional
                                                 else "not redirected (functional=False)"))
        for name, n in sorted(self.fallbacks.items()):
            lines.append(f"  functional call on stock torch: {name} x{n}")
        return "\n".join(lines)


def convert(model: torch.nn.Module, functional: bool = True) -> tuple[torch.nn.Module, ConvertReport]:
    """Swap `model`'s modules for torch_bridge.nn ones in place (sharing parameters) and, with
    `functional`, redirect F.* calls made during its forward to torch.ops.npu (module docstring).
    Returns (model, report). Converting a converted model again changes nothing."""
    import torch_bridge.nn as tnn

    report = ConvertReport(functional=functional)
    swapped_to = set(tnn.SWAPS.values())
    for name, m in model.named_modules():
        cls = type(m)
        if cls in swapped_to:
            continue
        target = tnn.SWAPS.get(cls)
        if target is not None:
            why = target.unsupported(m) if hasattr(target, "unsupported") else None
            if why:
                report.not_swapped.append((name, cls.__name__, why))
                continue
            m.__class__ = target   # same object, same parameters; only forward changes
            report.swapped.append((name, cls.__name__))
        elif isinstance(m, _PASSIVE):
            continue
        elif cls.__module__.startswith("torch.nn.") and not any(True for _ in m.children()):
            report.not_swapped.append((name, cls.__name__, "no torch_bridge.nn version"))
        else:   # a user module or a torch.nn composite (TransformerEncoderLayer): its forward runs as written
            report.custom.append((name, cls.__name__))
    if functional and not getattr(model.forward, "_npu_converted", False):
        inner = model.forward

        @functools.wraps(inner)
        def forward(*args: Any, **kwargs: Any) -> Any:
            with NpuFunctionMode(report.fallbacks):
                return inner(*args, **kwargs)

        forward._npu_converted = True  # type: ignore[attr-defined]
        model.forward = forward
    return model, report


# functional redirects -----------------------------------------------------------------------------

def _floating(*ts: Any) -> bool:
    return all(isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float16, torch.bfloat16)
               for t in ts)


def _bind(fn: Callable[..., Any], names: tuple[str, ...], defaults: dict[str, Any]) -> Callable[..., Any]:
    """Adapter: bind a torch function's (args, kwargs) by name (its own argument names), then call
    fn(**bound)."""
    def call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        bound = dict(defaults)
        bound.update(zip(names, args))
        bound.update(kwargs)
        return fn(**bound)
    return call


class _Skip(Exception):
    """The call's arguments are not what the npu op takes: run the stock function."""


def _need(cond: bool) -> None:
    if not cond:
        raise _Skip


def _softmax(log: bool) -> Callable[..., Any]:
    def f(input: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
        _need(_floating(input) and dim is not None)
        op = torch.ops.npu.log_softmax if log else torch.ops.npu.softmax
        return op(input, dim, dtype)
    return f


def _gelu(input: Any, approximate: str = "none") -> Any:
    _need(_floating(input))
    return torch.ops.npu.gelu(input, approximate)


def _unary(op_name: str) -> Callable[..., Any]:
    def f(input: Any, inplace: bool = False) -> Any:
        _need(_floating(input) and not inplace)
        return getattr(torch.ops.npu, op_name)(input)
    return f


def _layer_norm(input: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:
    _need(_floating(input))
    return torch.ops.npu.layer_norm(input, list(normalized_shape), weight, bias, eps)


def _rms_norm(input: Any, normalized_shape: Any, weight: Any = None, eps: Any = None) -> Any:
    _need(_floating(input))
    return torch.ops.npu.rms_norm(input, list(normalized_shape), weight, eps)


def _linear(input: Any, weight: Any, bias: Any = None) -> Any:
    _need(_floating(input, weight) and input.dtype == weight.dtype)
    return torch.ops.npu.linear(input, weight, bias)


def _embedding(input: Any, weight: Any, padding_idx: Any = None, max_norm: Any = None, norm_type: float = 2.0,
               scale_grad_by_freq: bool = False, sparse: bool = False) -> Any:
    _need(_floating(weight) and max_norm is None and not sparse)
    return torch.ops.npu.embedding(input, weight, padding_idx, None, norm_type, scale_grad_by_freq, False)


def _dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
    _need(_floating(input) and not inplace)
    return torch.ops.npu.dropout(input, p, training)


def _sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
          scale: Any = None, enable_gqa: bool = False) -> Any:
    _need(_floating(query, key, value))
    return torch.ops.npu.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                                      scale=scale, enable_gqa=enable_gqa)


def _legacy_ok(size_average: Any, reduce: Any) -> None:
    _need(size_average is None and reduce is None)


def _cross_entropy(input: Any, target: Any, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                   reduce: Any = None, reduction: str = "mean", label_smoothing: float = 0.0) -> Any:
    _legacy_ok(size_average, reduce)
    _need(_floating(input) and isinstance(target, torch.Tensor) and not target.is_floating_point())
    return torch.ops.npu.cross_entropy(input, target, weight, ignore_index=ignore_index, reduction=reduction,
                                       label_smoothing=label_smoothing)


def _nll_loss(input: Any, target: Any, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
              reduce: Any = None, reduction: str = "mean") -> Any:
    _legacy_ok(size_average, reduce)
    _need(_floating(input))
    return torch.ops.npu.nll_loss(input, target, weight, ignore_index=ignore_index, reduction=reduction)


def _mse_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
              weight: Any = None) -> Any:
    _legacy_ok(size_average, reduce)
    _need(_floating(input, target) and input.shape == target.shape)
    return torch.ops.npu.mse_loss(input, target, reduction=reduction, weight=weight)


def _table() -> dict[Any, tuple[str, Callable[[tuple[Any, ...], dict[str, Any]], Any]]]:
    """torch callable -> (its name for the report, adapter(args, kwargs))."""
    sm = ("input", "dim", "_stacklevel", "dtype")
    T = torch.Tensor
    rows: list[tuple[tuple[Any, ...], str, Callable[..., Any], tuple[str, ...]]] = [
        ((F.softmax, torch.softmax, T.softmax), "softmax", _softmax(False), sm),
        ((F.log_softmax, torch.log_softmax, T.log_softmax), "log_softmax", _softmax(True), sm),
        ((F.gelu,), "gelu", _gelu, ("input", "approximate")),
        ((F.silu,), "silu", _unary("silu"), ("input", "inplace")),
        ((F.relu, torch.relu, T.relu), "relu", _unary("relu"), ("input", "inplace")),
        ((F.sigmoid, torch.sigmoid, T.sigmoid), "sigmoid", _unary("sigmoid"), ("input",)),
        ((F.tanh, torch.tanh, T.tanh), "tanh", _unary("tanh"), ("input",)),
        ((F.layer_norm,), "layer_norm", _layer_norm, ("input", "normalized_shape", "weight", "bias", "eps")),
        ((F.rms_norm,), "rms_norm", _rms_norm, ("input", "normalized_shape", "weight", "eps")),
        ((F.linear,), "linear", _linear, ("input", "weight", "bias")),
        ((F.embedding,), "embedding", _embedding,
         ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")),
        ((F.dropout,), "dropout", _dropout, ("input", "p", "training", "inplace")),
        ((F.scaled_dot_product_attention,), "scaled_dot_product_attention", _sdpa,
         ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")),
        ((F.cross_entropy,), "cross_entropy", _cross_entropy,
         ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")),
        ((F.nll_loss,), "nll_loss", _nll_loss,
         ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction")),
        ((F.mse_loss,), "mse_loss", _mse_loss, ("input", "target", "size_average", "reduce", "reduction", "weight")),
    ]
    out = {}
    for funcs, name, fn, names in rows:
        for f in funcs:
            out[f] = (name, _bind(fn, names, {}))
    return out


_REDIRECTS: dict[Any, tuple[str, Callable[[tuple[Any, ...], dict[str, Any]], Any]]] = {}


def _redirects() -> dict[Any, tuple[str, Callable[[tuple[Any, ...], dict[str, Any]], Any]]]:
    if not _REDIRECTS:   # built on first use (a plain dict, not a cache wrapper: dynamo traces this)
        _REDIRECTS.update(_table())
    return _REDIRECTS


class NpuFunctionMode(TorchFunctionMode):
    """While active, the functional calls in the module docstring run as torch.ops.npu ops; calls whose
    arguments the op does not take run on stock torch and are counted in `fallbacks`."""

    def __init__(self, fallbacks: Counter[str] | None = None) -> None:
        super().__init__()
        self.fallbacks: Counter[str] = fallbacks if fallbacks is not None else Counter()

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        hit = _redirects().get(func)
        if hit is not None:
            name, call = hit
            try:
                return call(args, kwargs)
            except _Skip:
                self.fallbacks[name] += 1
        return func(*args, **kwargs)
