"""Embedding, losses and dropout as DSL kernels (kernels in op_library/nn_kernels.py).

Ops (torch's names, arguments and defaults; CPU tensors in and out):
- `embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
  sparse=False)`: row input[j] of weight becomes row j of the result (`embedding_kernel`: the scalar
  unit reads each index, MTE2 / MTE3 move the row in windows of 8192 elements). Indices (int64 or
  int32) are range-checked on the host and converted to int32; out of range -> IndexError "index out
  of range in self" as torch (a kernel-side E404 is translated the same way). `max_norm` (which
  renormalises weight in place) and `sparse=True` raise NotImplementedError.
  `embedding_backward(grad, indices, num_weights, padding_idx=-1, scale_grad_by_freq=False)` (aten's
  embedding_dense_backward): atomic scatter-add (`dsl.atomic_add`) of each grad row into a zeroed f32
  accumulator, rows equal to padding_idx skipped; with scale_grad_by_freq the counts come from an
  atomic i32 count kernel and `scale_rows_kernel` divides; the result is cast to grad's dtype.
  Rows added by several cores to one weight row land in host-thread order (rounding-level
  differences between runs in f32).
- `cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
  reduction="mean", label_smoothing=0.0)` with class-index targets, input (N, C), (C,) or
  (N, C, d1, ...). Dataflow: `target_weight_kernel` writes each row's target weight (0 for
  ignore_index), `ce_rows_kernel` makes one pass over each row (online max / sum of exp per window of
  CB classes, the target logit by a gather, the smoothing sums) and writes the per-row loss, and for
  sum / mean `sum_kernel` adds the rows (and the weights, mean = their ratio, as torch). Spatial
  inputs are first transposed to (N, d, C) rows by `transpose3_kernel` (and the gradient back).
  `cross_entropy_backward(grad, input, target, weight=None, ignore_index=-100, reduction="mean",
  label_smoothing=0.0)` recomputes the logsumexp in `ce_backward_kernel` (softmax minus the one-hot,
  plus the smoothing term). Probability (float) targets are not supported (NotImplementedError).
- `nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
  reduction="mean")` and `nll_loss_backward(grad, input, target, weight=None, ignore_index=-100,
  reduction="mean")`: per block of rows the targets are loaded as a tile and the log-probabilities
  gathered from GM by it (`x[t, idx]`, one MTE2 burst per row; the weights by `w[idx]`). sum / mean:
  the products are added up per block in f32 on V (`nll_sum_kernel`, one store per block) and the
  block sums by `sum_kernel` on one core (a fixed order: deterministic); the targets' range check is
  the gather's own index check (E404 becomes torch's IndexError "Target t is out of bounds."), so the
  host only converts them to int32 (int64 ones past int32's range: the host check). Repeat calls on a
  contiguous (M, C) input take a launch plan (op_library._plan: no argument checks, two native
  launches). none:
  one value per row (`nll_rows_kernel`). The gradient is a one-hot row per target (`nll_backward_kernel`).
- `mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None)` and
  `mse_loss_backward(grad, input, target, reduction="mean") -> (grad_input, grad_target)`. Inputs of
  different shapes are broadcast as torch does (expanded and made contiguous on the host, a copy);
  `weight` raises NotImplementedError.
- `dropout(input, p=0.5, training=True, inplace=False)` and aten's `native_dropout(input, p, train)
  -> (output, mask)` with `native_dropout_backward(grad_output, mask, scale)`. The mask comes from
  the kernel RNG (`dsl.rand`, Philox 4x32-10): element i takes word i of the stream of a seed drawn
  from torch's default generator on the host, so `torch.manual_seed` makes runs reproducible and the
  result does not depend on the core count. p = 0 or training=False: a copy; p = 1: zeros (x * 0, so
  inf / NaN give NaN as in torch). `dropout` follows aten's formula x * (mask / (1 - p)) (the noise
  rounded to x's dtype), native_dropout x * mask * scale. The masks are not torch's bits (torch's
  CPU generator is MT19937); the statistics are.

The size_average / reduce arguments are torch's deprecated ones: only None is accepted.
Everything computes in f32 and rounds once to the input's dtype (f32, f16, bf16).
"""
from __future__ import annotations

import math
import operator
import re
from typing import Any

import torch

from dsl.errors import KernelError
from op_library import nn_kernels as K
from op_library._cores import CORES
from op_library._plan import PLANS, Builder, sigs

__all__ = ["embedding", "embedding_backward", "cross_entropy", "cross_entropy_backward", "nll_loss",
           "nll_loss_backward", "mse_loss", "mse_loss_backward", "dropout", "native_dropout",
           "native_dropout_backward"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_REDUCTIONS = ("none", "mean", "sum")
_MODE = {"none": 0, "sum": 1, "mean": 2}
_NINF = float("-inf")
_ROW_MAX = 8192   # embedding rows up to this many elements move whole (else in windows)


def _check_float(t: Any, name: str, op: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(t).__name__}")
    if t.dtype not in _FLOATS:
        raise RuntimeError(f"{op}(): expected '{name}' to be float32, float16 or bfloat16, but got {t.dtype}")


def _check_reduction(reduction: str, size_average: Any = None, reduce: Any = None, op: str = "") -> None:
    if size_average is not None or reduce is not None:
        raise NotImplementedError(f"{op}(): the deprecated size_average / reduce arguments are not supported; "
                                  f"use reduction=")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _run(kernel: Any, *args: Any, **kw: Any) -> None:
    """Launch; an out-of-range index found by the kernel (E404) is torch's IndexError."""
    try:
        kernel(*args, **kw)
    except KernelError as e:
        if e.code == "E404":
            raise IndexError(f"index out of range in self ({e.message})") from None
        raise


# embedding ---------------------------------------------------------------------------------------

def _indices32(indices: torch.Tensor, n: int, what: str = "index out of range in self") -> torch.Tensor:
    """int64 / int32 indices -> contiguous int32 after checking 0 <= i < n (IndexError)."""
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.type()} instead (while checking arguments for embedding)")
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= n):
        raise IndexError(what)
    return indices.contiguous().to(torch.int32).reshape(-1)


def embedding(input: torch.Tensor, weight: torch.Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> torch.Tensor:
    """torch.nn.functional.embedding: weight[input] (padding_idx only matters for the backward;
    scale_grad_by_freq is honoured by embedding_backward)."""
    if max_norm is not None:
        raise NotImplementedError("embedding(): max_norm (in-place renormalisation of weight) is not supported")
    if sparse:
        raise NotImplementedError("embedding(): sparse=True (a sparse gradient) is not supported")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    _check_float(weight, "weight", "embedding")
    _padding(padding_idx, weight.shape[0])
    idx = _indices32(input, weight.shape[0])
    w = weight.contiguous()
    y = torch.empty(idx.numel(), w.shape[1], dtype=w.dtype)
    if y.numel():
        _run(K.embedding_kernel, idx, w, y, SPLIT=int(w.shape[1] > _ROW_MAX))
    return y.reshape(*input.shape, w.shape[1])


def _padding(padding_idx: int | None, n: int) -> int:
    """torch's padding_idx rule: in [-n, n), negative counts from the end; None -> -1 (no row)."""
    if padding_idx is None:
        return -1
    if not -n <= padding_idx < n:
        raise AssertionError("Padding_idx must be within num_embeddings")
    return padding_idx + n if padding_idx < 0 else padding_idx


def embedding_backward(grad: torch.Tensor, indices: torch.Tensor, num_weights: int, padding_idx: int | None = -1,
                       scale_grad_by_freq: bool = False) -> torch.Tensor:
    """aten embedding_dense_backward: (num_weights, D) gradient of the table, in grad's dtype
    (padding_idx -1 or None: no padding row; a negative one counts from the end as in embedding)."""
    _check_float(grad, "grad", "embedding_backward")
    pad = -1 if padding_idx is None or padding_idx == -1 else _padding(padding_idx, num_weights)
    idx = _indices32(indices, num_weights)
    D = grad.shape[-1]
    g = grad.contiguous().reshape(-1, D)
    if g.shape[0] != idx.numel():
        raise RuntimeError(f"embedding_backward(): grad has {g.shape[0]} rows but indices has {idx.numel()} elements")
    gw = torch.zeros(num_weights, D, dtype=torch.float32)
    if g.numel():
        _run(K.embedding_backward_kernel, g, idx, gw, pad, SPLIT=int(D > _ROW_MAX))
    if scale_grad_by_freq and gw.numel():
        cnt = torch.zeros(num_weights, dtype=torch.int32)
        if idx.numel():
            _run(K.count_kernel, idx, cnt)
        out = torch.empty(num_weights, D, dtype=grad.dtype)
        _run(K.scale_rows_kernel, gw, cnt.reshape(-1, 1), out)
        return out
    return _cast(gw, grad.dtype)


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if x.dtype == dtype:
        return x
    y = torch.empty(x.shape, dtype=dtype)
    if x.numel():
        K.cast_kernel(x.reshape(-1), y.reshape(-1))
    return y


# losses: shared host plumbing --------------------------------------------------------------------

def _rows(x: torch.Tensor) -> torch.Tensor:
    """(N, C, d...) -> contiguous (N * d, C) rows (transpose3_kernel); (N, C) as is; (C,) -> (1, C)."""
    x = x.contiguous()
    if x.dim() == 1:
        return x.reshape(1, -1)
    if x.dim() == 2:
        return x
    N, C = x.shape[0], x.shape[1]
    S = math.prod(x.shape[2:])
    y = torch.empty(N, S, C, dtype=x.dtype)
    if y.numel():
        K.transpose3_kernel(x.reshape(N, C, S), y)
    return y.reshape(N * S, C)


def _unrows(g: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The inverse of _rows for a gradient in row layout."""
    if len(shape) <= 2:
        return g.reshape(shape)
    N, C = shape[0], shape[1]
    S = math.prod(shape[2:])
    y = torch.empty(N, C, S, dtype=g.dtype)
    if y.numel():
        K.transpose3_kernel(g.reshape(N, S, C), y)
    return y.reshape(shape)


def _check_loss_args(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, op: str) -> int:
    """Torch's checks for class-index losses; returns C."""
    _check_float(input, "input", op)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{op}(): argument 'target' must be Tensor, not {type(target).__name__}")
    if input.dim() == 0:
        raise ValueError(f"{op}(): input must have at least one dimension (got a 0-d tensor)")
    if target.is_floating_point():
        if op == "cross_entropy" and target.shape == input.shape:
            raise NotImplementedError("cross_entropy(): probability (float) targets are not supported")
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {_tname(target.dtype)}")
    if target.dtype not in (torch.int64, torch.int32, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {_tname(target.dtype)}")
    C = input.shape[0] if input.dim() == 1 else input.shape[1]
    if input.dim() == 1:
        if target.dim() != 0:
            raise RuntimeError(f"{op}(): a 1-D input (C,) takes a 0-D target, got target of shape {list(target.shape)}")
    elif input.dim() == 2:
        if target.dim() != 1 or target.shape[0] != input.shape[0]:
            if target.dim() == 1:
                raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                                 f"({target.shape[0]}).")
            raise RuntimeError(f"{op}(): expected a 1-D target of {input.shape[0]} class indices, got shape "
                               f"{list(target.shape)}")
    else:
        want = [input.shape[0], *input.shape[2:]]
        if list(target.shape) != want:
            raise RuntimeError(f"Expected target size {want}, got {list(target.shape)}")
    if weight is not None:
        _check_float(weight, "weight", op)
        if weight.dim() != 1 or weight.shape[0] != C:
            raise RuntimeError(f"weight tensor should be defined either for all {C} classes or no classes but got "
                               f"weight tensor of shape: {list(weight.shape)}")
    return C


def _tname(dt: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.int32: "Int",
            torch.int8: "Char", torch.float64: "Double", torch.bool: "Bool"}.get(dt, str(dt))


def _targets32(target: torch.Tensor, C: int, ignore_index: int) -> torch.Tensor:
    """Flat int32 targets after torch's range check (ignore_index may be anything)."""
    t = target.reshape(-1)
    if t.numel():
        bad = ((t < 0) | (t >= C)) & (t != ignore_index)
        if bool(bad.any()):
            raise IndexError(f"Target {int(t[bad.nonzero()[0, 0]])} is out of bounds.")
    return t.contiguous().to(torch.int32)


def _weight_arg(weight: torch.Tensor | None) -> torch.Tensor:
    return torch.zeros(1, dtype=torch.float32) if weight is None else weight.contiguous().float()


def _ign(ignore_index: int) -> int:
    return ignore_index if -2**31 <= ignore_index < 2**31 else -1


def _target_weights(tgt: torch.Tensor, w: torch.Tensor, has_w: bool, ignore_index: int) -> torch.Tensor:
    wt = torch.empty(tgt.numel(), dtype=torch.float32)
    if wt.numel():
        K.target_weight_kernel(tgt, w, wt, _ign(ignore_index), HAS_W=int(has_w))
    return wt


def _reduce(rows: torch.Tensor, reduction: str, den: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """f32 per-row values -> the 0-d result of sum / mean (mean divides by sum(den))."""
    out = torch.empty(1, dtype=dtype)
    mean = reduction == "mean"
    K.sum_kernel[1](rows.reshape(-1), out, rows.reshape(-1) if den is None else den.reshape(-1), MEAN=int(mean))
    return out.reshape(())


_SINGLE_MAX = 4096   # rows of up to this many classes are loaded whole (else CB-class windows)


def _ce_cb(C: int) -> int:
    """Class window for rows wider than _SINGLE_MAX; for narrower ones the whole row (rounded up to 64)."""
    return 2048 if C > _SINGLE_MAX else max(64, -(-C // 64) * 64)


def _ce_r(cb: int, budget: int = 8192) -> int:
    """Rows per block, a power of two up to 16: R x CB elements within `budget` (what fits UB with
    double buffering)."""
    r = 1
    while r < 16 and 2 * r * cb <= budget:
        r *= 2
    return r


# cross_entropy -----------------------------------------------------------------------------------

def _ce_prepare(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
                reduction: str, label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    C = _check_loss_args(input, target, weight, "cross_entropy")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    tgt = _targets32(target, C, ignore_index)
    return _rows(input), tgt, _weight_arg(weight), C


def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                  size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """torch.nn.functional.cross_entropy with class-index targets (module docstring)."""
    _check_reduction(reduction, size_average, reduce, "cross_entropy")
    x, tgt, w, C = _ce_prepare(input, target, weight, ignore_index, reduction, label_smoothing)
    M = x.shape[0]
    has_w, smooth = weight is not None, label_smoothing > 0
    wt = _target_weights(tgt, w, has_w, ignore_index)
    loss = torch.empty(M, 1, dtype=input.dtype if reduction == "none" else torch.float32)
    if M and C:
        cb = _ce_cb(C)
        K.ce_rows_kernel(x, tgt.reshape(-1, 1), w, wt.reshape(-1, 1), loss, _ign(ignore_index),
                         1.0 - label_smoothing, label_smoothing / C, _NINF, R=_ce_r(cb), CB=cb, HAS_W=int(has_w),
                         SMOOTH=int(smooth), SINGLE=int(C <= _SINGLE_MAX))
    elif M:
        raise RuntimeError("cross_entropy(): input has 0 classes")
    if reduction == "none":
        return loss.reshape(target.shape)
    return _reduce(loss, reduction, wt, input.dtype)


def cross_entropy_backward(grad: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
                           weight: torch.Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                           label_smoothing: float = 0.0) -> torch.Tensor:
    """d cross_entropy / d input for the incoming gradient `grad` (0-d for sum / mean, target's
    shape for none), in input's dtype and shape."""
    x, tgt, w, C = _ce_prepare(input, target, weight, ignore_index, reduction, label_smoothing)
    M = x.shape[0]
    has_w, smooth = weight is not None, label_smoothing > 0
    wt = _target_weights(tgt, w, has_w, ignore_index)
    gx = torch.empty(M, C, dtype=input.dtype)
    if M and C:
        gout, tot = _grad_and_total(grad, wt, reduction, M)
        cb = _ce_cb(C)
        K.ce_backward_kernel(x, tgt.reshape(-1, 1), w, wt.reshape(-1, 1), gout, tot, gx, _ign(ignore_index),
                             1.0 - label_smoothing, label_smoothing / C, _NINF, R=_ce_r(cb, 4096), CB=cb,
                             HAS_W=int(has_w), SMOOTH=int(smooth), MODE=_MODE[reduction],
                             SINGLE=int(C <= _SINGLE_MAX))
    return _unrows(gx, input.shape)


def _grad_and_total(grad: torch.Tensor, wt: torch.Tensor, reduction: str, M: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The incoming gradient as (M, 1) (none) or (1, 1), and the total target weight as (1, 1)
    (summed by sum_kernel for mean; unused otherwise)."""
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"argument 'grad' must be Tensor, not {type(grad).__name__}")
    tot = torch.zeros(1, 1, dtype=torch.float32)
    if reduction == "none":
        if grad.numel() != M:
            raise RuntimeError(f"grad must have the per-element loss's {M} elements, got shape {list(grad.shape)}")
        return grad.contiguous().reshape(M, 1), tot
    if grad.numel() != 1:
        raise RuntimeError(f"grad of a reduced loss must have one element, got shape {list(grad.shape)}")
    if reduction == "mean":
        K.sum_kernel(wt, tot.reshape(1), wt, MEAN=0)
    return grad.contiguous().reshape(1, 1), tot


# nll_loss ----------------------------------------------------------------------------------------

def nll_loss(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
             size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
             reduction: str = "mean") -> torch.Tensor:
    """torch.nn.functional.nll_loss: -weight[t] * input[t] per row (0 where t == ignore_index), reduced."""
    key = _nll_key(input, target, weight, size_average, reduce, ignore_index, reduction)
    if key is not None:
        plan = PLANS.get(key)
        if plan is not None:
            try:
                return plan(input, _nll_targets(target, input.shape[1], ignore_index), weight)
            except KernelError as e:
                _nll_index_error(e, target, input.shape[1], ignore_index)
    _check_reduction(reduction, size_average, reduce, "nll_loss")
    C = _check_loss_args(input, target, weight, "nll_loss")
    if reduction != "none" and -2**31 <= ignore_index < 2**31:
        return _nll_reduced(input, target, weight, ignore_index, reduction, C, key)
    tgt = _targets32(target, C, ignore_index)
    x = _rows(input)
    w = _weight_arg(weight)
    M = x.shape[0]
    loss = torch.empty(M, dtype=input.dtype if reduction == "none" else torch.float32)
    wt = torch.empty(M, dtype=torch.float32)
    if M:
        K.nll_rows_kernel(x, tgt, w, loss, wt, _ign(ignore_index), R=_nll_r(M), HAS_W=int(weight is not None))
    if reduction == "none":
        return loss.reshape(target.shape)
    return _reduce(loss, reduction, wt, input.dtype)


_E404_INDEX = re.compile(r"index (-?\d+) .*is outside")


def _nll_r(M: int) -> int:
    """Rows per block of the nll kernels: about M / CORES rounded up to a multiple of 8 (whole
    32-byte blocks of i32 / f32), from 64 to 2048: a block per core, every core busy."""
    return max(64, min(2048, -(-M // (8 * CORES)) * 8))


def _nll_key(input: Any, target: Any, weight: Any, size_average: Any, reduce: Any, ignore_index: Any,
             reduction: Any) -> tuple[Any, ...] | None:
    """The plan key of a reduced nll_loss on a contiguous (M, C) input, 1-D int64 / int32 targets and
    no weight or an f32 one (else None: the ordinary path). Looked up before the argument checks:
    everything they depend on is in the key, and a plan is only stored after they passed."""
    if size_average is not None or reduce is not None or type(reduction) is not str or reduction == "none" or \
            type(ignore_index) is not int or not -2**31 <= ignore_index < 2**31 or not PLANS.enabled():
        return None
    s = sigs((input, target, weight))
    if s is None or input.dim() != 2 or target.dtype not in (torch.int64, torch.int32) or \
            (weight is not None and weight.dtype != torch.float32):
        return None
    return ("nll_loss", reduction, ignore_index, *s)


def _nll_targets(target: torch.Tensor, C: int, ignore_index: int) -> torch.Tensor:
    """The targets as int32 for nll_sum_kernel (whose gathers check their range: E404). int64 ones
    that int32 cannot hold (they would wrap) get the full host check, which raises torch's error."""
    if target.dtype == torch.int64:
        if target.numel():
            lo, hi = torch.aminmax(target)
            if int(lo) < -2**31 or int(hi) >= 2**31:
                _targets32(target, C, ignore_index)
        return target.to(torch.int32)
    return target if target.dtype == torch.int32 else target.to(torch.int32)


def _nll_index_error(e: KernelError, target: torch.Tensor, C: int, ignore_index: int) -> None:
    """An E404 of nll_sum_kernel's gathers is a target outside [0, C): torch's IndexError, naming the
    first bad target as torch does (the host check, run on this error path only). Re-raises `e`
    otherwise."""
    if e.code == "E404" and _E404_INDEX.search(e.message):
        _targets32(target, C, ignore_index)
    raise e


def _nll_reduced(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
                 reduction: str, C: int, key: tuple[Any, ...] | None = None) -> torch.Tensor:
    """nll_loss with reduction sum / mean: nll_sum_kernel's per-block sums, then sum_kernel on one
    core (a fixed order: deterministic). With a key (`_nll_key`) the launches become a plan: later
    calls convert the targets, allocate, and make two native launches."""
    x = _rows(input)
    M = x.shape[0]
    mean = int(reduction == "mean")
    if M == 0:
        out = torch.empty(1, dtype=input.dtype)
        K.sum_kernel[1](torch.zeros(1), out, torch.zeros(1), MEAN=mean)
        return out.reshape(())
    t = _nll_targets(target.reshape(-1), C, ignore_index)
    wts = weight if key is not None or weight is None else _weight_arg(weight)
    bl = Builder(key, (x, t, wts), operator.itemgetter(3))
    out = bl.alloc((), input.dtype)
    r = _nll_r(M)
    nb = -(-M // r)
    ps, pw = bl.alloc((1, nb), torch.float32), bl.alloc((1, nb), torch.float32)
    w = bl.v(2, (C,)) if weight is not None else bl.v(bl.const(torch.zeros(1)), (1,))
    try:
        bl.run(K.nll_sum_kernel, bl.v(0, (M, C)), bl.v(1, (M,)), w, bl.v(ps, (1, nb)), bl.v(pw, (1, nb)),
               ignore_index, R=r, HAS_W=int(weight is not None))
    except KernelError as e:
        _nll_index_error(e, target, C, ignore_index)
    bl.run(K.sum_kernel, bl.v(ps, (nb,)), bl.v(out, (1,)), bl.v(pw, (nb,)), block_dim=1, MEAN=mean)
    return bl.finish()   # type: ignore[no-any-return]


def nll_loss_backward(grad: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
                      weight: torch.Tensor | None = None, ignore_index: int = -100,
                      reduction: str = "mean") -> torch.Tensor:
    """d nll_loss / d input (input's dtype and shape)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    C = _check_loss_args(input, target, weight, "nll_loss")
    tgt = _targets32(target, C, ignore_index)
    M = tgt.numel()
    wt = _target_weights(tgt, _weight_arg(weight), weight is not None, ignore_index)
    gx = torch.empty(M, C, dtype=input.dtype)
    if gx.numel():
        gout, tot = _grad_and_total(grad, wt, reduction, M)
        cb = _ce_cb(C)
        K.nll_backward_kernel(tgt.reshape(-1, 1), wt.reshape(-1, 1), gout, tot, gx, R=_ce_r(cb, 8192), CB=cb,
                              MODE=_MODE[reduction], SINGLE=int(C <= _SINGLE_MAX))
    return _unrows(gx, input.shape)


# mse_loss ----------------------------------------------------------------------------------------

def _broadcast_shape(a: torch.Size, b: torch.Size) -> torch.Size:
    """numpy / torch broadcasting, with torch's error text."""
    n = max(len(a), len(b))
    out = []
    for i in range(n):
        da = a[len(a) - n + i] if len(a) - n + i >= 0 else 1
        db = b[len(b) - n + i] if len(b) - n + i >= 0 else 1
        if da != db and da != 1 and db != 1:
            raise RuntimeError(f"The size of tensor a ({da}) must match the size of tensor b ({db}) at "
                               f"non-singleton dimension {i}")
        out.append(db if da == 1 else da)
    return torch.Size(out)


def _mse_args(input: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Size]:
    """Flat contiguous (input, target) in their broadcast shape, and that shape."""
    _check_float(input, "input", "mse_loss")
    _check_float(target, "target", "mse_loss")
    if input.dtype != target.dtype:
        raise RuntimeError(f"mse_loss(): expected input and target to have the same dtype, but got {input.dtype} "
                           f"and {target.dtype}")
    shape = _broadcast_shape(input.shape, target.shape)
    if input.shape != target.shape:   # materialise the broadcast (a copy, made by expand + contiguous)
        input, target = input.expand(shape), target.expand(shape)
    return input.contiguous().reshape(-1), target.contiguous().reshape(-1), shape


def mse_loss(input: torch.Tensor, target: torch.Tensor, size_average: bool | None = None,
             reduce: bool | None = None, reduction: str = "mean", weight: torch.Tensor | None = None) -> torch.Tensor:
    """torch.nn.functional.mse_loss: (input - target)^2, reduced (mean divides by the element count)."""
    _check_reduction(reduction, size_average, reduce, "mse_loss")
    if weight is not None:
        raise NotImplementedError("mse_loss(): weight is not supported")
    x, y, shape = _mse_args(input, target)
    if reduction == "none":
        out = torch.empty(x.shape, dtype=x.dtype)
        if x.numel():
            K.mse_kernel(x, y, out)
        return out.reshape(shape)
    tile = 8192
    part = torch.empty(-(-x.numel() // tile), dtype=torch.float32)
    if x.numel():
        K.mse_partial_kernel(x, y, part, TILE=tile)
    out = torch.empty(1, dtype=x.dtype)
    den = torch.full((1,), float(x.numel()), dtype=torch.float32)   # the element count (one number)
    K.sum_kernel(part, out, den, MEAN=2 if reduction == "mean" else 0)
    return out.reshape(())


def mse_loss_backward(grad: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
                      reduction: str = "mean") -> tuple[torch.Tensor, torch.Tensor]:
    """(d/d input, d/d target) of mse_loss, in the broadcast shape (sum a broadcast input's gradient
    over its expanded dims yourself; the matrix's cases do not broadcast)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    x, y, shape = _mse_args(input, target)
    n = x.numel()
    gx, gy = torch.empty(n, dtype=x.dtype), torch.empty(n, dtype=x.dtype)
    if n:
        scalar = reduction != "none"
        g = grad.contiguous().reshape(-1)
        if g.numel() != (1 if scalar else n):
            raise RuntimeError(f"mse_loss_backward(): grad has {g.numel()} elements, expected {1 if scalar else n}")
        norm = 2.0 / n if reduction == "mean" else 2.0
        K.mse_backward_kernel(x, y, g, gx, gy, norm, SCALAR_G=int(scalar))
    return gx.reshape(shape), gy.reshape(shape)


# dropout -----------------------------------------------------------------------------------------

def _seed() -> int:
    """A 63-bit Philox key from torch's default generator (torch.manual_seed makes it reproducible)."""
    return int(torch.empty((), dtype=torch.int64).random_())


def _dropout(input: torch.Tensor, p: float, noise: bool, want_mask: bool) -> tuple[torch.Tensor, torch.Tensor]:
    x = input.contiguous().reshape(-1)
    y = torch.empty(x.shape, dtype=x.dtype)
    mask = torch.empty(x.shape, dtype=torch.bool)
    if x.numel():
        scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
        K.dropout_kernel(x, y, mask.view(torch.int8), float(p), scale, _seed(), 0, NOISE=int(noise),
                         MASK=int(want_mask))
    return y.reshape(input.shape), mask.reshape(input.shape)


def _check_p(input: torch.Tensor, p: float, op: str) -> None:
    _check_float(input, "input", op)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    """torch.nn.functional.dropout: zeroes each element with probability p and scales the rest by
    1 / (1 - p); p = 0 or training=False: a copy (inplace: input itself). inplace=True writes the
    result into input and returns it."""
    _check_p(input, p, "dropout")
    if not training or p == 0:
        if inplace:
            return input
        y, _ = _copy(input)
        return y
    y, _ = _dropout(input, p, noise=True, want_mask=False)
    if inplace:
        _copy_into(y, input)
        return input
    return y


def _copy(x: torch.Tensor) -> tuple[torch.Tensor, None]:
    y = torch.empty(x.shape, dtype=x.dtype)
    if x.numel():
        K.cast_kernel(x.contiguous().reshape(-1), y.reshape(-1))
    return y, None


def _copy_into(src: torch.Tensor, dst: torch.Tensor) -> None:
    if dst.is_contiguous():
        if dst.numel():
            K.cast_kernel(src.reshape(-1), dst.reshape(-1))
    else:
        dst.copy_(src)   # a strided destination: torch scatters the kernel's result into it


def native_dropout(input: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """aten native_dropout: (input * mask * scale, mask) with scale = 1 / (1 - p) (0 for p = 1) and
    mask a bool tensor (True = kept); train=False: (a copy, all True)."""
    _check_p(input, p, "native_dropout")
    if train is False:
        y, _ = _copy(input)
        return y, torch.ones(input.shape, dtype=torch.bool)
    return _dropout(input, p, noise=False, want_mask=True)


def native_dropout_backward(grad_output: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """aten native_dropout_backward: grad_output * mask * scale."""
    _check_float(grad_output, "grad_output", "native_dropout_backward")
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise RuntimeError(f"Mask should be Bool Scalar Type {getattr(mask, 'dtype', type(mask).__name__)}")
    if mask.shape != grad_output.shape:
        raise RuntimeError(f"native_dropout_backward(): mask of shape {list(mask.shape)} does not match grad_output "
                           f"of shape {list(grad_output.shape)}")
    g = grad_output.contiguous().reshape(-1)
    gx = torch.empty(g.shape, dtype=g.dtype)
    if g.numel():
        K.dropout_backward_kernel(g, mask.contiguous().reshape(-1).view(torch.int8), gx, float(scale))
    return gx.reshape(grad_output.shape)
