"""npu kernels of aten ops that stock models reach (the CNN with BatchNorm2d, the GPT-style decoder
with nn.RMSNorm, Hugging Face GPT-2 and Llama) and torch_bridge.device.kernels does not cover, on the
op library's DSL kernels.

Same conventions as torch_bridge.device.kernels (`npu_kernel`): each function takes CPU aliases of
the npu arguments and returns CPU results (adopted as npu tensors); a call the op library cannot
take raises `Unsupported` and runs on the CPU fallback.

- `native_batch_norm` (+ backward): op_library.batch_norm, which updates the running statistics
  in place (in the npu tensors' memory, through the aliases); save_mean / save_invstd come from
  the mean / var / rsqrt kernels (the backward recomputes them in its kernel, as the op library's
  batch_norm_backward does).
- `_fused_rms_norm` (+ backward): torch's rms_norm (nn.RMSNorm, F.rms_norm) calls it on a device
  that has a kernel for it: op_library.npu_rms_norm, one kernel for y and rstd. The backward gets
  rstd but not eps, so it is composed of elementwise and reduction kernels on rstd:
  gx = rstd * (gh - xhat * mean(gh * xhat)), gh = g * w, xhat = x * rstd; gw = sum(g * xhat).
- activations and reductions composed of the op library's kernels: `elu` (scale / input_scale too, so
  celu and selu), `softplus`, `hardtanh`, `hardsigmoid`, `mish`, `logsumexp`, `linalg_vector_norm`
  (ord 1, 2, inf, -inf), `constant_pad_nd`; `dot` / `vdot` (real) / `mv` / `addmv` on the matmul kernel
  (an empty inner dimension gives zeros without a launch: op_library.matmul leaves its output
  unwritten then).
- int64 `arange`, `add`, `fill_`, comparisons (position ids, label padding, mask building,
  BatchNorm's num_batches_tracked): computed in int32 by the kernels and widened on the host, as the
  op library does for int64 results (op_library.data: arange, full); values outside int32 run on the
  CPU fallback. On bool tensors `bitwise_and / or / xor` are the logical kernels, and `sum` counts
  in f32 (exact below 2**24 elements).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import op_library
from torch_bridge.device.aten import KERNELS
from torch_bridge.device.kernels import COMPOSITE, FI, F, Unsupported, _mm, family, into, npu_kernel

_I32 = 2 ** 31


# ------------------------------------------------------------------ batch norm
def _channel_dims(x: torch.Tensor) -> list[int]:
    return [d for d in range(x.dim()) if d != 1]


def _bn_supported(input: torch.Tensor, *params: torch.Tensor | None) -> None:
    """The op library's batch norm takes (N, C, ...) inputs with parameters of the input's dtype."""
    if input.dim() < 2 or any(p is not None and p.dtype != input.dtype for p in params):
        raise Unsupported


@npu_kernel("native_batch_norm", check=(0,))
def native_batch_norm(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                      running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool,
                      momentum: float, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, save_mean, save_invstd): batch statistics in training (running ones updated in place),
    running statistics in eval (save_mean / save_invstd empty, as torch's CPU kernel)."""
    _bn_supported(input, weight, bias, running_mean, running_var)
    if training and any(t is not None and not t.is_contiguous() for t in (running_mean, running_var)):
        raise Unsupported       # updated in place: the op library writes them as contiguous memory
    if not training:            # only read: contiguous copies serve
        running_mean, running_var = (t if t is None else t.contiguous() for t in (running_mean, running_var))
    y = op_library.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
    if not training:
        return y, torch.empty(0, dtype=torch.float32), torch.empty(0, dtype=torch.float32)
    dims = _channel_dims(input)
    f32 = None if input.dtype == torch.float32 else torch.float32
    mean = op_library.mean(input, dims, dtype=f32)
    var = op_library.var(input if f32 is None else op_library.npu_dtype_cast(input, torch.float32), dims,
                         correction=0)
    return y, mean, op_library.rsqrt(op_library.add(var, eps))


@npu_kernel("native_batch_norm_backward", check=(0, 1))
def native_batch_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None,
                               running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                               save_mean: torch.Tensor | None, save_invstd: torch.Tensor | None, train: bool,
                               eps: float, output_mask: Sequence[bool]) -> tuple[Any, Any, Any]:
    """(grad_input, grad_weight, grad_bias); training recomputes the batch statistics from input."""
    _bn_supported(input, weight, running_mean, running_var)
    # op_library returns grad_bias for a given bias (only its size is read): a placeholder when asked for
    bias = torch.empty(input.shape[1], dtype=input.dtype if weight is None else weight.dtype) if output_mask[2] \
        else None
    gx, gw, gb = op_library.batch_norm_backward(grad_out, input, running_mean, running_var, weight, bias, train, eps)
    return (gx if output_mask[0] else None, gw if output_mask[1] else None, gb if output_mask[2] else None)


# ------------------------------------------------------------------ RMSNorm
def _rms_eps(eps: float | None) -> float:
    return torch.finfo(torch.float32).eps if eps is None else float(eps)


@npu_kernel("_fused_rms_norm", check=(0,))
def fused_rms_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                   eps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd): rstd f32 of input's leading dims and 1 for each normalised dim."""
    ns = tuple(normalized_shape)
    if not ns or tuple(input.shape[input.dim() - len(ns):]) != ns:
        raise Unsupported           # torch's error text comes from the CPU kernel
    if weight is not None and (tuple(weight.shape) != ns or weight.dtype != input.dtype):
        raise Unsupported
    gamma = weight if weight is not None else torch.ones(ns, dtype=input.dtype)
    y, rstd = op_library.npu_rms_norm(input, gamma, _rms_eps(eps))
    return y, rstd


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else op_library.npu_dtype_cast(t, torch.float32)


@npu_kernel("_fused_rms_norm_backward", check=(0, 1))
def fused_rms_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int],
                            rstd: torch.Tensor, weight: torch.Tensor | None,
                            output_mask: Sequence[bool]) -> tuple[Any, Any]:
    """(grad_input, grad_weight) from the forward's rstd, in f32."""
    k = len(normalized_shape)
    if rstd.dtype != torch.float32 or rstd.dim() != input.dim():
        raise Unsupported
    norm_dims = list(range(input.dim() - k, input.dim()))
    lead = list(range(input.dim() - k))
    g, x = _f32(grad_out), _f32(input)
    xhat = op_library.mul(x, rstd)
    gx = gw = None
    if output_mask[0]:
        gh = g if weight is None else op_library.mul(g, _f32(weight))
        dot = op_library.mean(op_library.mul(gh, xhat), norm_dims, True)
        gx = op_library.mul(op_library.sub(gh, op_library.mul(xhat, dot)), rstd)
        if input.dtype != torch.float32:
            gx = op_library.npu_dtype_cast(gx, input.dtype)
    if output_mask[1] and weight is not None:
        prod = op_library.mul(g, xhat)
        gw = op_library.sum(prod, lead) if lead else prod
        if weight.dtype != torch.float32:
            gw = op_library.npu_dtype_cast(gw, weight.dtype)
    return gx, gw


# ------------------------------------------------------------------ int64 and bool (index and mask bookkeeping)
def _narrow(t: Any, scalar: bool = False) -> tuple[Any, int]:
    """(int32 copy, max |value|) of an int64 tensor whose values fit int32 (the op library's index
    conversion), an int32 tensor as it is; with `scalar`, an int or a 0-dim tensor as an int.
    Unsupported otherwise."""
    if scalar:
        t = _scalar(t)
    if isinstance(t, int) and not isinstance(t, bool):
        return t, abs(t)
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.int64, torch.int32):
        raise Unsupported
    big = int(t.abs().max()) if t.numel() else 0
    if big >= _I32:
        raise Unsupported
    return (t.to(torch.int32) if t.dtype == torch.int64 else t), big


def _scalar(v: Any) -> Any:
    return v.item() if isinstance(v, torch.Tensor) and v.dim() == 0 and v.device.type == "cpu" else v


def _add_i64(self: torch.Tensor, other: Any, *, alpha: Any = 1) -> torch.Tensor:
    """int64 + int64 (or an int) with an int alpha, when the inputs and the result fit int32."""
    if isinstance(alpha, bool) or not isinstance(alpha, int):
        raise Unsupported
    a, amax = _narrow(self)
    b, bmax = _narrow(other, scalar=True)
    if amax + abs(alpha) * bmax >= _I32:
        raise Unsupported
    return op_library.add(a, b, alpha=alpha).to(torch.int64)


def _fill_i64(self: torch.Tensor, value: Any = 0) -> torch.Tensor:
    """An int64 tensor filled with an integral value (F.pad's value arrives as a float)."""
    value = _scalar(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not self.is_contiguous() or isinstance(value, bool) or not isinstance(value, int) or abs(value) >= _I32:
        raise Unsupported
    return into(self, op_library.full(self.shape, value, dtype=torch.int64))


def _sum_bool(self: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> torch.Tensor:
    """The count of True (an int64 result, as torch): summed in f32 on the kernels, exact below 2**24."""
    if self.dtype != torch.bool or dtype not in (None, torch.int64) or self.numel() >= 2 ** 24:
        raise Unsupported
    dims = None if dim is None or (isinstance(dim, (list, tuple)) and not dim) else list(dim)
    n = op_library.sum(op_library.npu_dtype_cast(self.contiguous(), torch.float32), dims, keepdim)
    return op_library.npu_dtype_cast(n, torch.int32).to(torch.int64)


def _extend(name: str, dtypes: tuple[torch.dtype, ...], fn: Callable[..., Any], keep: tuple[str, ...] = ()) -> None:
    """Calls of aten op `name` whose first argument has one of `dtypes` go to fn (of CPU aliases); every
    other call to the kernel registered for `name` before (torch_bridge.device.kernels), if any."""
    prev = KERNELS.get(name)
    npu_kernel(name, dtypes=dtypes, check=(0,), keep=keep)(fn)
    new = KERNELS[name]

    def k(*args: Any, **kwargs: Any) -> Any:
        if prev is None or args[0].dtype in dtypes:
            return new(*args, **kwargs)
        return prev(*args, **kwargs)
    k.__name__ = f"npu_{name.replace('.', '_')}"
    KERNELS[name] = k


_L = (torch.int64,)
_extend("add.Tensor", _L, _add_i64)
_extend("add_.Tensor", _L, lambda s, o, *, alpha=1: into(s, _add_i64(s, o, alpha=alpha)))
_extend("add.out", _L, lambda s, o, *, alpha=1, out: into(out, _add_i64(s, o, alpha=alpha)), keep=("out",))
for _fill in ("fill_.Scalar", "fill_.Tensor", "zero_"):
    _extend(_fill, _L, _fill_i64)
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    def _cmp_i64(s: torch.Tensor, o: Any, _f: Callable[..., Any] = getattr(op_library, _cmp)) -> torch.Tensor:
        return _f(_narrow(s)[0], _narrow(o, scalar=True)[0])
    for _ov in ("Tensor", "Scalar"):
        _extend(f"{_cmp}.{_ov}", _L, _cmp_i64)
        _extend(f"{_cmp}.{_ov}_out", _L, lambda s, o, *, out, _g=_cmp_i64: into(out, _g(s, o)), keep=("out",))
for _bw, _lg in (("bitwise_and", op_library.logical_and), ("bitwise_or", op_library.logical_or),
                 ("bitwise_xor", op_library.logical_xor)):   # on bool tensors these are the logical ops
    _extend(f"{_bw}.Tensor", (torch.bool,), lambda s, o, _g=_lg: _g(s, o))
    _extend(f"{_bw}_.Tensor", (torch.bool,), lambda s, o, _g=_lg: into(s, _g(s, o)))
    _extend(f"{_bw}.Tensor_out", (torch.bool,), lambda s, o, *, out, _g=_lg: into(out, _g(s, o)), keep=("out",))
_extend("sum", (torch.bool,), lambda s, *, dtype=None: _sum_bool(s, dtype=dtype))
_extend("sum.dim_IntList", (torch.bool,), _sum_bool)


@npu_kernel("arange.start_out", check=(), keep=("out",))
def arange_out(start: Any, end: Any, step: Any = 1, *, out: torch.Tensor) -> torch.Tensor:
    """torch.arange into `out` (f32 / f16 / bf16 / int32 / int8; int64 in int32, widened)."""
    if out.dtype not in FI + (torch.int64,):
        raise Unsupported
    try:
        r = op_library.arange(start, end, step, dtype=out.dtype)
    except RuntimeError:            # values outside int32, bad bounds: the CPU computes it (or raises torch's error)
        raise Unsupported from None
    return into(out, r)


# ------------------------------------------------------------------ activations, reductions, matrix-vector
def _elu(x: torch.Tensor, alpha: Any = 1, scale: Any = 1, input_scale: Any = 1) -> torch.Tensor:
    """scale * (x if x > 0 else alpha * expm1(x * input_scale)) (celu and selu are elu with scales)."""
    if scale == 1 and input_scale == 1:
        return op_library.elu(x, float(alpha))
    neg = op_library.mul(op_library.expm1(op_library.mul(x, input_scale)), alpha * scale)
    return op_library.where(op_library.gt(x, 0), op_library.mul(x, scale), neg)


family("elu", _elu, "", F)
family("softplus", lambda x, beta=1, threshold=20: op_library.softplus(x, beta, threshold), "", F, inplace=False)
family("hardtanh", lambda x, min_val=-1, max_val=1: op_library.clamp(x, min_val, max_val), "", F)
family("hardsigmoid", lambda x: op_library.div(op_library.clamp(op_library.add(x, 3), 0, 6), 6), "", F)
family("mish", lambda x: op_library.mul(x, op_library.tanh(op_library.log1p(op_library.exp(x)))), "", F)


def _all_dims(x: torch.Tensor, dim: Any) -> list[int]:
    return list(range(x.dim())) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else list(dim)


def _logsumexp(x: torch.Tensor, dim: Any, keepdim: bool = False) -> torch.Tensor:
    if x.numel() == 0:
        raise Unsupported           # an empty reduction: the CPU's result and errors
    if x.dim() == 0:                # a scalar: over its one element (a view as 1-D)
        if any(d not in (0, -1) for d in _all_dims(x, dim)) and dim:
            raise Unsupported
        return op_library.logsumexp(x.reshape(1), [0], False).reshape(())
    return op_library.logsumexp(x, _all_dims(x, dim), keepdim)


family("logsumexp", _logsumexp, "", F, inplace=False)


def _vector_norm(x: torch.Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,
                 dtype: Any = None) -> torch.Tensor:
    if ord not in (1, 2, float("inf"), float("-inf")) or dtype not in (None, x.dtype) or x.dim() == 0 \
            or x.numel() == 0:
        raise Unsupported
    return op_library.norm(x, ord, _all_dims(x, dim), keepdim)


family("linalg_vector_norm", _vector_norm, "", F, inplace=False)


@npu_kernel("constant_pad_nd", dtypes=FI)
def constant_pad_nd(x: torch.Tensor, pad: Sequence[int], value: Any = 0) -> torch.Tensor:
    if x.numel() == 0 or len(pad) > 2 * x.dim():
        raise Unsupported
    return op_library.pad(x, list(pad), "constant", value)


COMPOSITE.add("constant_pad_nd")   # other dtypes (int64 position ids, bool masks): torch's fill + copy


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() != 1 or b.dim() != 1 or a.shape != b.shape or a.dtype != b.dtype:
        raise Unsupported           # torch's error text comes from the CPU kernel
    return _mm(a.reshape(1, -1) if a.numel() else a.reshape(1, 0), b.reshape(-1, 1)).reshape(())


def _mv(m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if m.dim() != 2 or v.dim() != 1 or m.shape[1] != v.shape[0] or m.dtype != v.dtype:
        raise Unsupported
    return _mm(m, v.reshape(-1, 1)).reshape(m.shape[0])


def _addmv(s: torch.Tensor, m: torch.Tensor, v: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> torch.Tensor:
    r = _mv(m, v)
    if alpha != 1:
        r = op_library.mul(r, alpha)
    if beta == 0:
        return r
    return op_library.add(r, s if beta == 1 else op_library.mul(s, beta))


family("dot", _dot, "", F, (0, 1), inplace=False)
npu_kernel("vdot", check=(0, 1))(_dot)           # real tensors: no conjugate
family("mv", _mv, "", F, (0, 1), inplace=False)
family("addmv", _addmv, "", F, (0, 1, 2))
