"""Softmax and normalisations as DSL kernels (kernels: op_library.norm_kernels, op_library.norm_bn),
forward and backward, with torch's (and torch_npu's) names and signatures.

Ops: `softmax`, `log_softmax` (any dim), `layer_norm`, `rms_norm` (torch's F.rms_norm),
`npu_rms_norm`, `npu_add_rms_norm`, `npu_scaled_masked_softmax`, `batch_norm` (training with
running-stat update, and eval), `group_norm`; each with `<op>_backward`.

Dtypes: float32, float16, bfloat16. Kernels load the input dtype, compute every statistic in f32
and round once on the store (as torch's CPU kernels).

Dataflow.
- Last-dim softmax / norms run as rows: the input is made contiguous and viewed (N, D) (D = the
  product of normalized_shape for the norms). When R rows of D fit UB, one pass (`*_rows`: load,
  statistics and result in UB, store) with R chosen so each core gets several tiles; longer rows
  use the two-pass `*_rows_blocked` kernels (running per-row statistics over column blocks, then
  a store pass).
- softmax / log_softmax over another dim view the contiguous input as (O, R, I) (no transpose):
  tiles of R x C (C columns of the inner dimension) reduced along axis 0, one pass when R x C fits
  UB, else the two-pass online form over row blocks.
- Backward kernels need only the forward's arguments and outputs: softmax's from y
  (`gx = y * (g - sum(g * y))`, log_softmax `gx = g - exp(y) * sum(g)`); layer_norm, rms_norm,
  group_norm and batch_norm (training) recompute mean / rstd from x inside the backward kernel
  (no extra saved outputs); npu_rms_norm returns rstd as torch_npu does, its backward recomputes
  it the same way. Weight / bias gradients are f32 sums over rows: for narrow rows per-core UB
  accumulators added into a zeroed f32 GM buffer with atomic adds; for rows too wide to keep those
  accumulators in UB (D > 2560, e.g. the 4096 bench rows) the row kernel stores each row's
  (mean, rstd) (N x 2 f32) and `norm_param_grad_cols` sums g * xhat and g down the columns (64-
  column blocks over the cores). Then a kernel rounds them to the parameter's dtype. Rows too
  long for UB at all run the backward in three passes (`norm_bwd_rows_blocked`: statistics, the
  two row sums, gx) before the same column kernel.

- Small calls: softmax / log_softmax, layer_norm, rms_norm and npu_rms_norm on contiguous CPU
  tensors keep their host work per signature (dtypes, shapes, dim, normalized_shape, eps) as a
  plan (op_library._plan): outputs allocated, the same kernel launched with its argument block
  marshalled once (~9-11 us per call at 4 x 16 on Zen 3, bench/overhead.py).

Simulated (ascend910b1, 24 cores, 4096 x 4096 f32; `dsl.record`): softmax dim=-1 101.5k cycles
97.6% of roofline, dim=0 154.8k 88.4%, layer_norm 104.9k 95.0%, rms_norm 90.7k 97.0%;
backward: softmax 179.9k 97.3%, layer_norm 410.3k 95.5% (two kernels), rms_norm 394.6k 96.2%.

Known limits: `dtype=` of softmax / log_softmax sets the output dtype; the kernel computes in f32
from the input as given (torch first casts the input to `dtype`; the same result for a wider
dtype). rms_norm's `eps=None` is torch.finfo(float32).eps for every input dtype, which is what
torch's CPU kernel uses (it computes in f32). batch_norm: momentum=None (cumulative average) is
not supported; batch_norm / group_norm walk each channel / group in SB-element windows of one
channel row (fine for image shapes, slow per element when the spatial size is tiny).
npu_scaled_masked_softmax takes rows up to 8192 elements (torch_npu: up to 4096).
npu_scaled_masked_softmax follows torch_npu's documented reference
`softmax((x * scale).masked_fill(mask, -inf), -1)` (a fully masked row gives NaN); its mask is
broadcast to x's shape on the host (a contiguous int8 copy). fixed_triu_mask=True replaces the
mask with the upper triangle above the diagonal (torch.triu(ones, 1)) over the last two dims.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import torch

from op_library import norm_kernels as K
from op_library._cores import CORES
from op_library._plan import PLANS, Builder, scalar_sig, sigs, tensor_sig
from op_library.norm_bn import batch_norm, batch_norm_backward, group_norm, group_norm_backward

__all__ = ["softmax", "softmax_backward", "log_softmax", "log_softmax_backward", "layer_norm",
           "layer_norm_backward", "rms_norm", "rms_norm_backward", "npu_rms_norm", "npu_rms_norm_backward",
           "npu_add_rms_norm", "npu_add_rms_norm_backward", "npu_scaled_masked_softmax",
           "npu_scaled_masked_softmax_backward", "batch_norm", "batch_norm_backward", "group_norm",
           "group_norm_backward"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
# f32 elements of one R x D tile that a one-pass kernel keeps in UB (loads double-buffered, f32
# temporaries); above it the blocked kernels run. Measured against E301 for every kernel and dtype.
_ROW_ELEMS = {"softmax": 8192, "softmax_bwd": 6144, "masked": 8192, "layer_norm": 4608, "rms_norm": 4096,
              "layer_norm_bwd": 2560, "layer_norm_bwd_nowb": 4608, "rms_norm_bwd": 2560, "rms_norm_bwd_nowb": 4096,
              "rms_norm_bwd_add": 2560, "rms_norm_bwd_add_nowb": 3584}
_CB = 4096   # columns per block in the blocked row kernels (forward)
_CB_BWD = 2048   # and in the blocked backward
_C = 64      # inner columns per tile in the column kernels
_RB = 64     # rows per block in the blocked column kernels


def _check_float(x: torch.Tensor, what: str = "input") -> None:
    if x.dtype not in _FLOATS:
        raise RuntimeError(f"{what}: expected a floating point tensor (float32, float16 or bfloat16), "
                           f"got {x.dtype}")


def _rows(n: int, d: int, kind: str) -> int:
    """Rows per tile: as many as fit (power of two, at most 64) while leaving each of the cores
    about two tiles; 0 if one row does not fit (use the blocked kernel)."""
    limit = _ROW_ELEMS[kind]
    if d > limit:
        return 0
    r = 1
    while r < 64 and 2 * r * d <= limit and 2 * r * 2 * CORES <= n:
        r *= 2
    return r


def _wrap_dim(dim: int, ndim: int) -> int:
    lo, hi = -max(ndim, 1), max(ndim, 1) - 1
    if not lo <= dim <= hi:
        raise IndexError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
    return dim % max(ndim, 1)


def _softmax_dim(ndim: int) -> int:
    """torch's implicit dim (nn.functional._get_softmax_dim)."""
    return 0 if ndim in (0, 1, 3) else 1


def _ninf() -> float:
    return float("-inf")


def _split(shape: Sequence[int], dim: int) -> tuple[int, int, int]:
    o = math.prod(shape[:dim])
    return o, (shape[dim] if len(shape) else 1), math.prod(shape[dim + 1:])


_SECOND = operator.itemgetter(1)
_THIRD = operator.itemgetter(2)
_FOURTH = operator.itemgetter(3)


def _key(*parts: Any) -> Any:
    """A plan key from parts, tensors by `tensor_sig` (None if any tensor has none, or plans are off)."""
    out = []
    for p in parts:
        if isinstance(p, torch.Tensor):
            p = tensor_sig(p)
            if p is None:
                return None
        out.append(p)
    return tuple(out) if PLANS.enabled() else None


def _softmax_fwd(x: torch.Tensor, dim: int | None, dtype: Any, log: int) -> torch.Tensor:
    key = None
    if isinstance(x, torch.Tensor) and (dim is None or type(dim) is int) and \
            (dtype is None or isinstance(dtype, torch.dtype)):
        key = _key("softmax", log, dim, dtype, x)
        if key is not None:
            plan = PLANS.get(key)
            if plan is not None:
                return plan(x)
    _check_float(x)
    if dim is None:
        dim = _softmax_dim(x.dim())
    d = _wrap_dim(dim, x.dim())
    out_dtype = dtype if dtype is not None else x.dtype
    if out_dtype not in _FLOATS:
        raise RuntimeError(f"dtype: expected float32, float16 or bfloat16, got {out_dtype}")
    b = Builder(key, (x,), _SECOND)
    b.alloc(x.shape, out_dtype)
    if x.numel() == 0:
        return b.finish()
    o, r, i = _split(tuple(x.shape), d)
    if i == 1:
        x2, y2 = b.v(0, (o, r)), b.v(1, (o, r))
        rows = _rows(o, r, "softmax")
        if rows:
            b.run(K.softmax_rows, x2, y2, LOG=log, R=rows)
        else:
            b.run(K.softmax_rows_blocked, x2, y2, _ninf(), LOG=log, R=1, CB=_CB)
        return b.finish()
    x3, y3 = b.v(0, (o, r, i)), b.v(1, (o, r, i))
    c = _cols(i)
    if r * c <= _ROW_ELEMS["softmax"]:
        b.run(K.softmax_cols, x3, y3, LOG=log, C=c)
    else:
        b.run(K.softmax_cols_blocked, x3, y3, _ninf(), LOG=log, C=c, RB=_RB)
    return b.finish()


def _cols(i: int) -> int:
    c = 8
    while c < _C and c < i:
        c *= 2
    return c


def _softmax_bwd(g: torch.Tensor, y: torch.Tensor, dim: int, input_dtype: Any, log: int,
                 scale: float = 1.0) -> torch.Tensor:
    key = None
    if type(dim) is int and (input_dtype is None or isinstance(input_dtype, torch.dtype)) and \
            (type(scale) is float or type(scale) is int) and PLANS.enabled():
        s = sigs((g, y))
        if s is not None:
            key = ("softmax_bwd", log, dim, input_dtype, scalar_sig(scale), *s)
            plan = PLANS.get(key)
            if plan is not None:
                return plan(g, y)
    if tuple(g.shape) != tuple(y.shape):
        raise RuntimeError(f"grad_output: expected the shape of output {list(y.shape)}, got {list(g.shape)}")
    d = _wrap_dim(dim, y.dim())
    b = Builder(key, (g, y), _THIRD)
    b.alloc(y.shape, input_dtype or g.dtype)
    if y.numel() == 0:
        return b.finish()
    o, r, i = _split(tuple(y.shape), d)
    if i == 1:
        rows = _rows(o, r, "softmax_bwd")
        args = (b.v(0, (o, r)), b.v(1, (o, r)), b.v(2, (o, r)), float(scale))
        if rows:
            b.run(K.softmax_bwd_rows, *args, LOG=log, R=rows)
        else:
            b.run(K.softmax_bwd_rows_blocked, *args, LOG=log, R=1, CB=_CB)
        return b.finish()
    c = _cols(i)
    args3 = (b.v(0, (o, r, i)), b.v(1, (o, r, i)), b.v(2, (o, r, i)))
    if r * c <= _ROW_ELEMS["softmax_bwd"]:
        b.run(K.softmax_bwd_cols, *args3, LOG=log, C=c)
    else:
        b.run(K.softmax_bwd_cols_blocked, *args3, LOG=log, C=c, RB=_RB)
    return b.finish()


def softmax(input: torch.Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> torch.Tensor:
    """torch.nn.functional.softmax over any dim (module docstring: rows, columns, long rows)."""
    return _softmax_fwd(input, dim, dtype, 0)


def log_softmax(input: torch.Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype: Any = None) -> torch.Tensor:
    """torch.nn.functional.log_softmax over any dim."""
    return _softmax_fwd(input, dim, dtype, 1)


def softmax_backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                     input_dtype: Any = None) -> torch.Tensor:
    """Gradient of softmax from its output y (aten._softmax_backward_data): y * (g - sum(g * y))."""
    return _softmax_bwd(grad_output, output, dim, input_dtype, 0)


def log_softmax_backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                         input_dtype: Any = None) -> torch.Tensor:
    """Gradient of log_softmax from its output y (aten._log_softmax_backward_data): g - exp(y) * sum(g)."""
    return _softmax_bwd(grad_output, output, dim, input_dtype, 1)


# layer_norm / rms_norm -------------------------------------------------------------------------------


def _norm_shape(name: str, x: torch.Tensor, normalized_shape: Any, extra: str = "") -> tuple[int, int]:
    ns = [int(normalized_shape)] if isinstance(normalized_shape, int) else [int(s) for s in normalized_shape]
    k = len(ns)
    if k == 0 or x.dim() < k or list(x.shape[x.dim() - k:]) != ns:
        star = ", ".join(str(s) for s in ns)
        raise RuntimeError(f"Given normalized_shape={ns}, expected input with shape [*{extra}{star}], but got "
                           f"input of size{list(x.shape)}")
    d = math.prod(ns)
    return (x.numel() // d if d else 0), d


def _check_param(p: torch.Tensor | None, what: str, ns: Any) -> None:
    if p is None:
        return
    shape = [int(ns)] if isinstance(ns, int) else [int(s) for s in ns]
    if list(p.shape) != shape:
        raise RuntimeError(f"Expected {what} to be of same shape as normalized_shape, but got {what} of shape "
                           f"{list(p.shape)} and normalized_shape = {shape}")


def _row_param(p: torch.Tensor | None, d: int, x: torch.Tensor) -> torch.Tensor:
    """p as a contiguous (1, D) view (a 1-element placeholder when absent: the kernel never reads it)."""
    if p is None:
        return torch.empty((1, 1), dtype=x.dtype)
    return p.contiguous().view(1, d)


def _cast_to(acc: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The f32 (1, D) accumulator as a tensor of like's shape and dtype (rounded by a kernel)."""
    if like.dtype == torch.float32:
        return acc.view(like.shape)
    out = torch.empty(like.shape, dtype=like.dtype)
    K.cast_kernel(acc.view(-1), out.view(-1))
    return out


def _shape_key(ns: Any) -> Any:
    """normalized_shape as a key part: an int or a tuple of ints (None: no plan)."""
    if type(ns) is int or (type(ns) is tuple and len(ns) == 1 and type(ns[0]) is int):
        return ns   # the common cases, quickly
    if isinstance(ns, (tuple, list, torch.Size)) and all(type(v) is int for v in ns):
        return tuple(ns)
    return None


def _norm_key(name: str, ns: Any, eps: Any, ts: tuple[Any, ...]) -> Any:
    """The plan key of a norm call (None: the ordinary path); eps (None, an int or a float) by its
    exact value."""
    ek = None if eps is None else scalar_sig(eps)
    if not PLANS.enabled() or (eps is not None and ek is None):
        return None
    nk = _shape_key(ns)
    s = sigs(ts) if nk is not None else None
    return None if s is None else (name, nk, ek, *s)


def _param_ref(b: Builder, p: torch.Tensor | None, i: int, d: int, x: torch.Tensor) -> Any:
    """`_row_param` for a Builder: input i as (1, D), or a placeholder the kernel never reads."""
    if p is None:
        return b.v(b.const(torch.empty((1, 1), dtype=x.dtype)), (1, 1))
    return b.v(i, (1, d))


def layer_norm(input: torch.Tensor, normalized_shape: Any, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.layer_norm: statistics in f32 over the trailing normalized_shape dims."""
    ins = (input, weight, bias)
    key = _norm_key("layer_norm", normalized_shape, eps, ins)
    if key is not None:
        plan = PLANS.get(key)
        if plan is not None:
            return plan(*ins)
    _check_float(input)
    n, d = _norm_shape("layer_norm", input, normalized_shape, ", ")
    _check_param(weight, "weight", normalized_shape)
    _check_param(bias, "bias", normalized_shape)
    bl = Builder(key, ins, _FOURTH)
    bl.alloc(input.shape, input.dtype)
    if input.numel() == 0:
        return bl.finish()
    x2, y2 = bl.v(0, (n, d)), bl.v(3, (n, d))
    w = _param_ref(bl, weight, 1, d, input)
    b = _param_ref(bl, bias, 2, d, input)
    hw, hb = int(weight is not None), int(bias is not None)
    rows = _rows(n, d, "layer_norm")
    if rows:
        bl.run(K.layer_norm_rows, x2, w, b, y2, float(eps), HAS_W=hw, HAS_B=hb, R=rows)
    else:
        bl.run(K.layer_norm_rows_blocked, x2, w, b, y2, float(eps), HAS_W=hw, HAS_B=hb, R=1, CB=_CB)
    return bl.finish()


def layer_norm_backward(grad_output: torch.Tensor, input: torch.Tensor, normalized_shape: Any,
                        weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                        eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(grad_input, grad_weight, grad_bias) of layer_norm; mean and rstd are recomputed from input
    in the kernel. grad_weight / grad_bias are None where weight / bias are."""
    n, d = _norm_shape("layer_norm", input, normalized_shape, ", ")
    gx = torch.empty(input.shape, dtype=input.dtype)
    want = weight is not None or bias is not None
    gw = torch.zeros((1, max(d, 1)), dtype=torch.float32)
    gb = torch.zeros((1, max(d, 1)), dtype=torch.float32)
    if input.numel() and d:
        x2, g2 = input.contiguous().view(n, d), grad_output.contiguous().view(n, d)
        mode, rows, stats = _wb_mode(n, d, want, "layer_norm_bwd")
        if not rows:
            K.norm_bwd_rows_blocked(g2, x2, _row_param(weight, d, input), x2, gx.view(n, d), stats, float(eps), RMS=0,
                                    HAS_W=int(weight is not None), ADDG=0, R=1, CB=_CB_BWD)
        else:
            K.layer_norm_bwd_rows(g2, x2, _row_param(weight, d, input), gx.view(n, d), gw, gb, stats, float(eps),
                                  HAS_W=int(weight is not None), GRAD_WB=mode, R=rows)
        if mode == 2:
            K.norm_param_grad_cols(g2, x2, stats, gw, gb, WANT_B=int(bias is not None), C=_C, RB=_RB)
    return (gx, None if weight is None else _cast_to(gw[:, :d], weight),
            None if bias is None else _cast_to(gb[:, :d], bias))


def _wb_mode(n: int, d: int, want: bool, kind: str) -> tuple[int, int, torch.Tensor]:
    """(mode, rows per tile, stats) for the backward row kernel. mode 0: no weight / bias gradient;
    1: per-core UB accumulators (rows that fit with them); 2: per-row (mean, rstd) stored into
    stats (N, 2) for `norm_param_grad_cols`. rows 0: too long for UB, the blocked kernel runs (it
    always stores stats)."""
    if want:
        rows = _rows(n, d, kind)
        if rows:
            return 1, rows, torch.empty((1, 2), dtype=torch.float32)
    rows = _rows(n, d, kind + "_nowb")
    return (2 if want else 0), rows, torch.empty((n, 2) if want or not rows else (1, 2), dtype=torch.float32)


def _rms_planned(key: Any, x: torch.Tensor, w: torch.Tensor | None, n: int, d: int, eps: float,
                 rstd_shape: tuple[int, ...], both: bool) -> Any:
    """rms_norm / npu_rms_norm (no add) through a Builder: y of x's shape, rstd (f32) of rstd_shape;
    the same launch as `_rms` (which the add variant keeps)."""
    ins = (x, w)
    ny = 2
    get = operator.itemgetter(ny, ny + 1) if both else operator.itemgetter(ny)
    bl = Builder(key, ins, get)
    bl.alloc(x.shape, x.dtype)
    bl.alloc(rstd_shape, torch.float32)
    if n == 0 or d == 0:
        return bl.finish()
    xa, y = bl.v(0, (n, d)), bl.v(ny, (n, d))
    wt = _param_ref(bl, w, 1, d, x)
    rows = _rows(n, d, "rms_norm")
    args = (xa, xa, wt, y, bl.v(ny + 1, (n, 1)), y, float(eps))
    if rows:
        bl.run(K.rms_norm_rows, *args, R=rows, ADD=0, HAS_W=int(w is not None))
    else:
        bl.run(K.rms_norm_rows_blocked, *args, R=1, CB=_CB, ADD=0, HAS_W=int(w is not None))
    return bl.finish()


def _rms(x: torch.Tensor, x2: torch.Tensor | None, n: int, d: int, w: torch.Tensor | None, eps: float,
         add: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(y, rstd (N, 1) f32, x + x2 or None) over rows of D."""
    y = torch.empty((n, d), dtype=x.dtype)
    rstd = torch.empty((n, 1), dtype=torch.float32)
    xs = torch.empty((n, d), dtype=x.dtype) if add else None
    if n == 0 or d == 0:
        return y, rstd, xs
    xa = x.contiguous().view(n, d)
    xb = x2.contiguous().view(n, d) if x2 is not None else xa
    wt = _row_param(w, d, x)
    out_sum = xs if xs is not None else y
    rows = _rows(n, d, "rms_norm")
    kw = {"ADD": int(add), "HAS_W": int(w is not None)}
    if rows:
        K.rms_norm_rows(xa, xb, wt, y, rstd, out_sum, float(eps), R=rows, **kw)
    else:
        K.rms_norm_rows_blocked(xa, xb, wt, y, rstd, out_sum, float(eps), R=1, CB=_CB, **kw)
    return y, rstd, xs


def _rms_eps(eps: float | None) -> float:
    return torch.finfo(torch.float32).eps if eps is None else float(eps)


def rms_norm(input: torch.Tensor, normalized_shape: Any, weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """torch.nn.functional.rms_norm (eps None: torch.finfo(float32).eps, as torch's CPU kernel)."""
    ins = (input, weight)
    key = _norm_key("rms_norm", normalized_shape, eps, ins)
    if key is not None:
        plan = PLANS.get(key)
        if plan is not None:
            return plan(*ins)
    _check_float(input)
    n, d = _norm_shape("rms_norm", input, normalized_shape)
    _check_param(weight, "weight", normalized_shape)
    return _rms_planned(key, input, weight, n, d, _rms_eps(eps), (n, 1), False)


def _rms_bwd(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None, g2: torch.Tensor | None, n: int, d: int,
             eps: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    kind = "rms_norm_bwd_add" if g2 is not None else "rms_norm_bwd"
    gx = torch.empty(x.shape, dtype=x.dtype)
    gw = torch.zeros((1, max(d, 1)), dtype=torch.float32)
    if n and d:
        xa, ga = x.contiguous().view(n, d), g.contiguous().view(n, d)
        g2a = g2.contiguous().view(n, d) if g2 is not None else xa
        mode, rows, stats = _wb_mode(n, d, w is not None, kind)
        if not rows:
            K.norm_bwd_rows_blocked(ga, xa, _row_param(w, d, x), g2a, gx.view(n, d), stats, float(eps), RMS=1,
                                    HAS_W=int(w is not None), ADDG=int(g2 is not None), R=1, CB=_CB_BWD)
        else:
            K.rms_norm_bwd_rows(ga, xa, _row_param(w, d, x), g2a, gx.view(n, d), gw, stats, float(eps),
                                HAS_W=int(w is not None), GRAD_W=mode, ADDG=int(g2 is not None), R=rows)
        if mode == 2:
            K.norm_param_grad_cols(ga, xa, stats, gw, gw, WANT_B=0, C=_C, RB=_RB)
    return gx, None if w is None else _cast_to(gw[:, :d], w)


def rms_norm_backward(grad_output: torch.Tensor, input: torch.Tensor, normalized_shape: Any,
                      weight: torch.Tensor | None = None,
                      eps: float | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(grad_input, grad_weight) of rms_norm (rstd recomputed from input in the kernel)."""
    n, d = _norm_shape("rms_norm", input, normalized_shape)
    return _rms_bwd(grad_output, input, weight, None, n, d, _rms_eps(eps))


def _gamma_rows(name: str, x: torch.Tensor, gamma: torch.Tensor) -> tuple[int, int]:
    k = gamma.dim()
    if k == 0 or x.dim() < k or tuple(x.shape[x.dim() - k:]) != tuple(gamma.shape):
        raise RuntimeError(f"{name}: gamma's shape {list(gamma.shape)} must match the last dims of x "
                           f"{list(x.shape)}")
    d = gamma.numel()
    return (x.numel() // d if d else 0), d


def _rstd_shape(x: torch.Tensor, gamma: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape[:x.dim() - gamma.dim()]) + (1,) * gamma.dim()


def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """torch_npu.npu_rms_norm: (y, rstd) with rstd f32 of x's leading dims and 1 for each dim of gamma."""
    key = _norm_key("npu_rms_norm", 0, epsilon, (x, gamma))
    if key is not None:
        plan = PLANS.get(key)
        if plan is not None:
            return plan(x, gamma)
    _check_float(x, "x")
    n, d = _gamma_rows("npu_rms_norm", x, gamma)
    return _rms_planned(key, x, gamma, n, d, float(epsilon), _rstd_shape(x, gamma), True)


def npu_rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor, rstd: torch.Tensor | None = None,
                          epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dgamma) of npu_rms_norm. rstd is accepted as torch_npu's backward takes it; the kernel
    recomputes it from x with the forward's arithmetic."""
    n, d = _gamma_rows("npu_rms_norm", x, gamma)
    gx, gw = _rms_bwd(dy, x, gamma, None, n, d, float(epsilon))
    assert gw is not None
    return gx, gw.view(gamma.shape)


def npu_add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor,
                     epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torch_npu.npu_add_rms_norm: (rms_norm(x1 + x2) * gamma, rstd, x1 + x2); the sum is taken in
    f32, normalised from f32 and stored rounded to x's dtype."""
    _check_float(x1, "x1")
    if tuple(x1.shape) != tuple(x2.shape) or x1.dtype != x2.dtype:
        raise RuntimeError(f"npu_add_rms_norm: x2 must have x1's shape and dtype ({list(x1.shape)}, {x1.dtype}), "
                           f"got {list(x2.shape)}, {x2.dtype}")
    n, d = _gamma_rows("npu_add_rms_norm", x1, gamma)
    y, rstd, xs = _rms(x1, x2, n, d, gamma, float(epsilon), True)
    assert xs is not None
    return y.view(x1.shape), rstd.view(_rstd_shape(x1, gamma)), xs.view(x1.shape)


def npu_add_rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor,
                              dx_sum: torch.Tensor | None = None,
                              epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx1, dx2, dgamma) of npu_add_rms_norm, from x = the forward's x1 + x2 output, the gradient dy
    of y and dx_sum of that sum output (None: zero). dx1 and dx2 are the same tensor."""
    n, d = _gamma_rows("npu_add_rms_norm", x, gamma)
    gx, gw = _rms_bwd(dy, x, gamma, dx_sum, n, d, float(epsilon))
    assert gw is not None
    return gx, gx, gw.view(gamma.shape)


# npu_scaled_masked_softmax -----------------------------------------------------------------------------


def _mask_i8(x: torch.Tensor, mask: torch.Tensor | None, fixed_triu_mask: bool) -> torch.Tensor:
    if fixed_triu_mask:
        if x.dim() < 2:
            raise RuntimeError("npu_scaled_masked_softmax: fixed_triu_mask needs x with at least 2 dims")
        s1, s2 = x.shape[-2], x.shape[-1]
        return torch.ones((s1, s2), dtype=torch.bool).triu(1).view(torch.int8).expand(x.shape).contiguous()
    if mask is None:
        return torch.zeros(x.shape, dtype=torch.int8)
    if mask.dtype != torch.bool:
        raise RuntimeError(f"npu_scaled_masked_softmax: mask must be a bool tensor, got {mask.dtype}")
    try:
        m = mask.expand(x.shape)
    except RuntimeError:
        raise RuntimeError(f"npu_scaled_masked_softmax: mask of shape {list(mask.shape)} cannot be broadcast to "
                           f"x's shape {list(x.shape)}") from None
    return m.contiguous().view(torch.int8)


def npu_scaled_masked_softmax(x: torch.Tensor, mask: torch.Tensor | None, scale: float = 1.0,
                              fixed_triu_mask: bool = False) -> torch.Tensor:
    """torch_npu.npu_scaled_masked_softmax: softmax((x * scale).masked_fill(mask, -inf), dim=-1)
    (mask True = masked out, broadcast to x's shape)."""
    _check_float(x, "x")
    y = torch.empty(x.shape, dtype=x.dtype)
    if x.numel() == 0:
        return y
    mk = _mask_i8(x, mask, fixed_triu_mask)
    d = x.shape[-1]
    n = x.numel() // d
    rows = _rows(n, d, "masked")
    if not rows:
        raise NotImplementedError(f"npu_scaled_masked_softmax: rows of {d} elements do not fit UB (at most "
                                  f"{_ROW_ELEMS['masked']}; torch_npu takes up to 4096)")
    K.masked_softmax_rows(x.contiguous().view(n, d), mk.view(n, d), y.view(n, d), float(scale), _ninf(), R=rows)
    return y


def npu_scaled_masked_softmax_backward(grad_output: torch.Tensor, output: torch.Tensor,
                                       scale: float = 1.0) -> torch.Tensor:
    """Gradient w.r.t. x: scale * y * (g - sum(g * y)) (masked positions have y = 0)."""
    return _softmax_bwd(grad_output, output, -1, None, 0, float(scale))
