"""Reductions with torch's names and signatures: sum, mean, amax, amin, max / min, argmax, argmin,
var, std, logsumexp, norm (p = 1, 2 / 'fro', inf, -inf), cumsum, and their backwards
(`<op>_backward`). Every value is computed by the DSL kernels in op_library.reduce_kernels.

Dataflow. The reduced dims are normalised (negative dims, tuples, None / () = all). If they form
one contiguous block the input is viewed, without a copy, as (O, R, I): O the product of the dims
before the block, R of the block, I of the dims after; non-adjacent reduced dims are moved to the
end (permute, then `.contiguous()`: one host copy) so that I = 1.
- I == 1 is a row reduction (`rows_kernel`): (BR, C) blocks of the (O, R) view over the cores, each
  reducing C columns of BR rows to one partial per row. A row longer than C gives several f32
  partials per row, reduced by a second launch of the same kernel (and so on): a blocked sum, so a
  1M-element row is C-element sums (16 f32 lanes each, then a tree) added in a short second pass.
  A full reduction to a scalar is the row case with O = 1: its chunks spread over all cores.
- I > 1 is a column reduction (`cols_kernel`): (1, C) column blocks of each o over the cores; BR
  rows at a time are accumulated into a (BR, C) f32 panel (NB row blocks into a sub-panel first),
  the panel is reduced at the end. C is chosen so that every core gets a block when it can.
- f16 / bf16 inputs are cast to f32 in the kernel and accumulate in f32; the result is rounded once
  to the output dtype. max / min / argmax compare in the input's values and propagate NaN as torch
  (the first NaN wins, argmax of a row with NaN is the NaN's index); ties give the first index.
- var / std: the mean (a sum launch), then the sum of squared deviations (two-pass, exact for
  any offset of the data) scaled by 1 / (N - correction); std takes the sqrt in the same launch.
- logsumexp: amax, then sum(exp(x - m)) with torch's rule m = 0 where m is +-inf, log(s) + m.
- argmax / max-with-dim indices are produced as int32 by the kernels and widened to int64 (torch's
  dtype) on return.

Backward (`bwd_rows_kernel` / `bwd_cols_kernel`, elementwise over x's (O, R, I) view with the per-output
values broadcast along R): sum / mean spread the grad; amax / amin share it evenly among the tied
maxima (torch's formula (g / count) * mask, so a NaN result gives NaN grads as torch; max / min
without dim give it to the NaNs); max / min with dim and argmax-style routes go to the index;
var / std use the mean (recomputed from x); logsumexp g * exp(x - out); norm as torch's
norm_backward (p = 2 masks zero norms, p = inf shares among |x| == norm or NaN); cumsum is a
reversed cumsum of the grad.
cumsum: a blocked scan on the cube (op_library.reduce_kernels), no host copy: along the last dim
(I == 1) (BM, 32) blocks of each row block times the 32 x 32 upper triangle of ones, plus the carried
row sums on V; along an inner dim the lower triangle times (32, BN) blocks of each (R, I) slab.

Limits: float inputs only (f32, f16, bf16; torch's integer sums give int64, not provided);
`out=` is not taken; `sum(dtype=)` and `cumsum(dtype=)` pick the output dtype (floats only);
`norm` takes p in 1, 2, 'fro', inf, -inf and no `dtype`.
"""
from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Sequence
from typing import Any

import torch

from op_library._cores import CORES
from op_library._plan import PLANS, Builder, tensor_sig
from op_library.reduce_kernels import (
    bwd_cols_kernel,
    bwd_rows_kernel,
    cols_kernel,
    cumsum_cube_cols_kernel,
    cumsum_rows_kernel,
    rows_kernel,
    tri_ones_kernel,
)

__all__ = ["sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "logsumexp", "norm",
           "cumsum", "sum_backward", "mean_backward", "amax_backward", "amin_backward", "max_backward",
           "min_backward", "var_backward", "std_backward", "logsumexp_backward", "norm_backward",
           "cumsum_backward"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_INF = float("inf")
_SCALAR_NAMES = {torch.int32: "Int", torch.int64: "Long", torch.int16: "Short", torch.int8: "Char",
                 torch.uint8: "Byte", torch.bool: "Bool"}   # c10's ScalarType names, as torch's messages use
_BUDGET = 8192          # elements of one (BR, C) block: 32 KiB of f32 in UB
_I32 = torch.int32
_bmax, _bmin = builtins.max, builtins.min   # max / min / sum are the ops in this module


def _dummy(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros((1, 1), dtype=dtype)


def _p2(n: int) -> int:
    return 1 << _bmax(int(n) - 1, 0).bit_length()


# ----------------------------------------------------------------------------- argument handling
def _check_float(x: Any, name: str, fn: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise RuntimeError(f"{fn}(): {name} must be a floating point tensor (float32, float16 or bfloat16) "
                           f"in op_library, got {x.dtype}")


def _wrap(d: int, ndim: int) -> int:
    n = _bmax(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n


def _dims(x: torch.Tensor, dim: Any) -> list[int]:
    """The reduced dims of x, sorted; None or () is every dim."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return list(range(x.dim()))
    ds = [dim] if isinstance(dim, int) else list(dim)
    out = []
    for d in ds:
        w = _wrap(int(d), x.dim())
        if w in out:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        out.append(w)
    return sorted(d for d in out if d < x.dim())


def _out_shape(shape: Sequence[int], dims: list[int], keepdim: bool) -> list[int]:
    return [1 if i in dims else s for i, s in enumerate(shape) if keepdim or i not in dims]


class _View:
    """x as (O, R, I) for the reduced dims (module docstring); `perm` is set when dims were moved."""

    def __init__(self, x: torch.Tensor, dims: list[int]):
        shape = list(x.shape)
        self.shape, self.dims = shape, dims
        self.perm: list[int] | None = None
        if dims and dims != list(range(dims[0], dims[-1] + 1)):
            kept = [i for i in range(len(shape)) if i not in dims]
            self.perm = kept + dims
            x = x.permute(self.perm)
            self.O, self.R, self.I = math.prod(shape[i] for i in kept), math.prod(shape[i] for i in dims), 1
        elif dims:
            self.O = math.prod(shape[:dims[0]])
            self.R = math.prod(shape[dims[0]:dims[-1] + 1])
            self.I = math.prod(shape[dims[-1] + 1:])
        else:
            self.O, self.R, self.I = math.prod(shape), 1, 1
        self.x = x.contiguous()

    @property
    def x2(self) -> torch.Tensor:
        """(O, R) when I == 1, else (O * R, I)."""
        return self.x.reshape(self.O, self.R) if self.I == 1 else self.x.reshape(self.O * self.R, self.I)

    def to_input(self, g: torch.Tensor) -> torch.Tensor:
        """A tensor in the (permuted) layout of self.x back to the input's shape and order."""
        if self.perm is None:
            return g.reshape(self.shape)
        pshape = [self.shape[i] for i in self.perm]
        inv = [self.perm.index(i) for i in range(len(self.shape))]
        return g.reshape(pshape).permute(inv).contiguous()


def _row_tiles(O: int, R: int) -> tuple[int, int]:
    """(BR, C) of rows_kernel: three shapes only (each is a compiled specialisation)."""
    C = 128 if R <= 128 else 1024 if R <= 1024 else _BUDGET
    return _BUDGET // C, C


def _col_tiles(O: int, R: int, I: int, itemsize: int) -> tuple[int, int]:
    """(BR, C) of cols_kernel: C a power of two (16 .. 1024) that gives every core a column block when
    the shape allows, BR rows so that a block is ~4096 elements."""
    want = _bmax(1, -(-CORES // _bmax(O, 1)))
    C = _bmin(_bmax(16, _p2(-(-I // want))), 1024)
    if _p2(-(-I // want)) > -(-I // want) and C > 16:
        C //= 2     # round down: more blocks than cores rather than fewer
    return _bmax(1, _bmin(_BUDGET // 2 // C, 64)), C


_COMBINE = {"max": "max", "absmax": "max", "min": "min", "absmin": "min", "argmax": "argmax2", "argmin": "argmin2"}


def _reduce(v: _View, mode: str, out_dtype: torch.dtype, post: str = "none", scale: float = 1.0,
            aux: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The (O, I) result of MODE over R (and the int32 indices for arg modes). aux: (O, I) f32."""
    O, R, I = v.O, v.R, v.I
    arg = mode in ("argmax", "argmin")
    auxt = aux if aux is not None else _dummy()
    out = torch.empty((O, I), dtype=out_dtype)
    idx = torch.empty((O, I), dtype=_I32) if arg else None
    if out.numel() == 0:
        return out, idx
    if I > 1:
        BR, C = _col_tiles(O, R, I, v.x.element_size())
        iota = torch.arange(BR, dtype=_I32).reshape(BR, 1)
        cols_kernel(v.x2, out, idx if idx is not None else _dummy(_I32), auxt, iota, R, float(scale), _INF,
                    MODE=mode, POST=post, BR=BR, C=C, NB=64)
        return out, idx
    x2, m = v.x2, mode
    xidx = _dummy(_I32)
    while True:
        BR, C = _row_tiles(O, x2.shape[1])
        nch = -(-x2.shape[1] // C)
        final = nch == 1
        part = out if final else torch.empty((O, nch), dtype=torch.float32)
        pidx = (idx if final else torch.empty((O, nch), dtype=_I32)) if arg else _dummy(_I32)
        rows_kernel(x2, part, pidx if pidx is not None else _dummy(_I32), auxt, xidx,
                    float(scale) if final else 1.0, _INF, MODE=m, POST=post if final else "none", BR=BR, C=C)
        if final:
            return out, idx
        x2, xidx = part, pidx
        m = _COMBINE.get(m, "sum")
        if m in ("argmax2", "argmin2"):
            arg = True


def _finish(t: torch.Tensor, v: _View, keepdim: bool) -> torch.Tensor:
    return t.reshape(_out_shape(v.shape, v.dims, keepdim))


def _aux_of(t: torch.Tensor, v: _View) -> torch.Tensor:
    """A result of the forward (any dtype, keepdim or not) as the (O, I) f32 aux of the kernels."""
    t = t.reshape(v.O, v.I)
    return t if t.dtype == torch.float32 else t.float()  # (a dtype cast of the saved result only)


# ----------------------------------------------------------------------------- planned sum / mean
def _sum_fast(name: str, input: Any, dim: Any, keepdim: Any, dtype: Any) -> tuple[Any, Any]:
    """(plan key, result) of sum / mean on a contiguous CPU tensor: a cached plan's result, or None
    and the key to build one under (key None: no plan for these arguments)."""
    if not isinstance(input, torch.Tensor) or type(keepdim) is not bool or \
            not (dtype is None or isinstance(dtype, torch.dtype)):
        return None, None
    if dim is None or type(dim) is int:
        dk: Any = dim
    elif isinstance(dim, (tuple, list)) and all(type(d) is int for d in dim):
        dk = ("dims", *dim)
    else:
        return None, None
    sig = tensor_sig(input)
    if sig is None or not PLANS.enabled():
        return None, None
    key = (name, dk, keepdim, dtype, sig)
    plan = PLANS.get(key)
    return key, (plan(input) if plan is not None else None)


def _sum_planned(key: Any, input: torch.Tensor, v: _View, keepdim: bool, out_dtype: torch.dtype,
                 scale: float) -> torch.Tensor:
    """`_reduce(v, "sum", ...)` then `_finish` as a plan (the same launches): the result is allocated
    in its final shape and viewed (O, I) by the kernels. The index / aux placeholders are plan
    constants: MODE "sum" never writes them."""
    O, R, I = v.O, v.R, v.I
    b = Builder(key, (input,), operator.itemgetter(1))
    b.alloc(_out_shape(v.shape, v.dims, keepdim), out_dtype)
    if O * I == 0:
        return b.finish()
    aux = b.v(b.const(_dummy()), (1, 1))
    dummy_idx = b.v(b.const(_dummy(_I32)), (1, 1))
    if I > 1:
        BR, C = _col_tiles(O, R, I, input.element_size())
        iota = b.v(b.const(torch.arange(BR, dtype=_I32).reshape(BR, 1)), (BR, 1))
        b.run(cols_kernel, b.v(0, (O * R, I)), b.v(1, (O, I)), dummy_idx, aux, iota, R, float(scale), _INF,
              MODE="sum", POST="none", BR=BR, C=C, NB=64)
        return b.finish()
    x2, width = b.v(0, (O, R)), R
    while True:
        BR, C = _row_tiles(O, width)
        nch = -(-width // C)
        final = nch == 1
        part = b.v(1, (O, I)) if final else b.v(b.alloc((O, nch), torch.float32), (O, nch))
        b.run(rows_kernel, x2, part, dummy_idx, aux, dummy_idx, float(scale) if final else 1.0, _INF, MODE="sum",
              POST="none", BR=BR, C=C)
        if final:
            return b.finish()
        x2, width = part, nch


# ----------------------------------------------------------------------------- forward ops
def sum(input: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None
        ) -> torch.Tensor:
    """torch.sum(input, dim=None, keepdim=False, *, dtype=None): f32 accumulation, blocked (module doc).
    No `out=`."""
    key, res = _sum_fast("sum", input, dim, keepdim, dtype)
    if res is not None:
        return res
    _check_float(input, "input", "sum")
    v = _View(input, _dims(input, dim))
    out_dtype = dtype or input.dtype
    if out_dtype not in _FLOATS:
        raise RuntimeError(f"sum(): dtype must be float32, float16 or bfloat16 in op_library, got {out_dtype}")
    if v.R == 0:
        return _finish(torch.zeros((v.O, v.I), dtype=out_dtype), v, keepdim)
    if key is not None and v.perm is None:
        return _sum_planned(key, input, v, keepdim, out_dtype, 1.0)
    return _finish(_reduce(v, "sum", out_dtype)[0], v, keepdim)


def mean(input: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None
         ) -> torch.Tensor:
    """torch.mean(input, dim=None, keepdim=False, *, dtype=None) (the sum's kernel, scaled by 1/N). No `out=`."""
    key, res = _sum_fast("mean", input, dim, keepdim, dtype)
    if res is not None:
        return res
    if isinstance(input, torch.Tensor) and input.dtype not in _FLOATS and dtype is None:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {_SCALAR_NAMES.get(input.dtype, str(input.dtype))}")
    _check_float(input, "input", "mean")
    v = _View(input, _dims(input, dim))
    out_dtype = dtype or input.dtype
    if v.R == 0:
        return _finish(torch.full((v.O, v.I), float("nan"), dtype=out_dtype), v, keepdim)
    if key is not None and v.perm is None:
        return _sum_planned(key, input, v, keepdim, out_dtype, 1.0 / v.R)
    return _finish(_reduce(v, "sum", out_dtype, scale=1.0 / v.R)[0], v, keepdim)


def _nonempty(v: _View, fn: str, dim: Any) -> None:
    """torch's errors for a max-like reduction over an empty extent (it has no identity)."""
    if v.R != 0:
        return
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        arg = fn in ("argmax", "argmin")
        raise (IndexError if arg else RuntimeError)(
            f"{fn}(): Expected reduction dim to be specified for input.numel() == 0."
            + ("" if arg else " Specify the reduction dim with the 'dim' argument."))
    bad = next(d for d in v.dims if v.shape[d] == 0)
    raise IndexError(f"{fn}(): Expected reduction dim {bad} to have non-zero size.")


def _amax(input: torch.Tensor, dim: Any, keepdim: bool, fn: str, big: bool) -> torch.Tensor:
    _check_float(input, "input", fn)
    v = _View(input, _dims(input, dim))
    _nonempty(v, fn, dim)
    return _finish(_reduce(v, "max" if big else "min", input.dtype)[0], v, keepdim)


def amax(input: torch.Tensor, dim: Any = (), keepdim: bool = False) -> torch.Tensor:
    """torch.amax(input, dim=(), keepdim=False): NaN propagates. No `out=`."""
    return _amax(input, dim, keepdim, "amax", True)


def amin(input: torch.Tensor, dim: Any = (), keepdim: bool = False) -> torch.Tensor:
    """torch.amin(input, dim=(), keepdim=False): NaN propagates. No `out=`."""
    return _amax(input, dim, keepdim, "amin", False)


def _arg(input: torch.Tensor, dim: Any, keepdim: bool, fn: str, big: bool) -> tuple[torch.Tensor, torch.Tensor, _View]:
    _check_float(input, "input", fn)
    if dim is None:
        v = _View(input.reshape(-1), [0])
        _nonempty(v, fn, None)
        vals, idx = _reduce(v, "argmax" if big else "argmin", input.dtype)
        shape = [1] * input.dim() if keepdim else []
        assert idx is not None
        return vals.reshape(shape), idx.to(torch.int64).reshape(shape), v
    v = _View(input, _dims(input, int(dim)))
    _nonempty(v, fn, dim)
    vals, idx = _reduce(v, "argmax" if big else "argmin", input.dtype)
    assert idx is not None
    return _finish(vals, v, keepdim), _finish(idx.to(torch.int64), v, keepdim), v


def argmax(input: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """torch.argmax(input, dim=None, keepdim=False): int64 (int32 from the kernel, widened); the first
    index of the max, the first NaN if any."""
    return _arg(input, dim, keepdim, "argmax", True)[1]


def argmin(input: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """torch.argmin(input, dim=None, keepdim=False): as argmax."""
    return _arg(input, dim, keepdim, "argmin", False)[1]


def _maxmin(input: torch.Tensor, dim: Any, keepdim: bool, fn: str, big: bool) -> Any:
    if dim is None:
        _check_float(input, "input", fn)
        v = _View(input, _dims(input, None))
        _nonempty(v, fn, None)
        return _finish(_reduce(v, "max" if big else "min", input.dtype)[0], v, False)
    vals, idx, _ = _arg(input, dim, keepdim, fn, big)
    rt = torch.return_types.max if big else torch.return_types.min
    return rt((vals, idx))


def max(input: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """torch.max(input) (0-d value) / torch.max(input, dim, keepdim=False) -> torch.return_types.max
    (values, indices int64). The elementwise torch.max(input, other) is op_library.maximum."""
    return _maxmin(input, dim, keepdim, "max", True)


def min(input: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """torch.min(input) / torch.min(input, dim, keepdim=False) -> torch.return_types.min."""
    return _maxmin(input, dim, keepdim, "min", False)


def _correction(correction: Any, unbiased: Any) -> float:
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


def _var(input: torch.Tensor, dim: Any, correction: float, keepdim: bool, fn: str, sqrt: bool
         ) -> tuple[torch.Tensor, _View, torch.Tensor]:
    _check_float(input, "input", fn)
    v = _View(input, _dims(input, dim))
    if v.R == 0:
        nan = torch.full((v.O, v.I), float("nan"), dtype=input.dtype)
        return _finish(nan, v, keepdim), v, nan.float()
    mu = _reduce(v, "sum", torch.float32, scale=1.0 / v.R)[0]
    dof = v.R - correction
    scale = 1.0 / dof if dof > 0 else _INF
    out = _reduce(v, "dev", input.dtype, post="sqrt" if sqrt else "none", scale=scale, aux=mu)[0]
    return _finish(out, v, keepdim), v, mu


def var(input: torch.Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> torch.Tensor:
    """torch.var(input, dim=None, *, correction=1, keepdim=False) (two-pass, f32). No `out=`."""
    return _var(input, dim, _correction(correction, unbiased), keepdim, "var", False)[0]


def std(input: torch.Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> torch.Tensor:
    """torch.std(input, dim=None, *, correction=1, keepdim=False). No `out=`."""
    return _var(input, dim, _correction(correction, unbiased), keepdim, "std", True)[0]


def logsumexp(input: torch.Tensor, dim: Any, keepdim: bool = False) -> torch.Tensor:
    """torch.logsumexp(input, dim, keepdim=False): log(sum(exp(x - m))) + m, m = amax (0 where +-inf)."""
    _check_float(input, "input", "logsumexp")
    v = _View(input, _dims(input, dim))
    if v.R == 0:
        return _finish(torch.full((v.O, v.I), -_INF, dtype=input.dtype), v, keepdim)
    m = _reduce(v, "max", torch.float32)[0]
    return _finish(_reduce(v, "exp", input.dtype, post="log", aux=m)[0], v, keepdim)


def _p(p: Any) -> str:
    if p is None or p == "fro" or p == 2:
        return "2"
    if p == 1:
        return "1"
    if p == _INF:
        return "inf"
    if p == -_INF:
        return "-inf"
    raise ValueError(f"norm(): p={p!r} is not supported by op_library (1, 2, 'fro', inf, -inf)")


def norm(input: torch.Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, out: Any = None,
         dtype: Any = None) -> torch.Tensor:
    """torch.norm(input, p='fro', dim=None, keepdim=False) for p = 1, 2 / 'fro', inf, -inf (vector norms
    over dim; `out` and `dtype` are not taken)."""
    if out is not None or dtype is not None:
        raise ValueError("norm(): out= and dtype= are not supported by op_library")
    _check_float(input, "input", "norm")
    pk = _p(p)
    v = _View(input, _dims(input, dim))
    if v.R == 0:
        if pk in ("inf", "-inf") and v.O * v.I > 0:
            bad = next(d for d in v.dims if v.shape[d] == 0)
            raise RuntimeError(f"linalg.vector_norm cannot compute the {p} norm on the dimension {bad}because "
                               "this dimension is empty and the operation does not have an identity")
        return _finish(torch.zeros((v.O, v.I), dtype=input.dtype), v, keepdim)
    mode, post = {"1": ("abs", "none"), "2": ("sq", "sqrt"), "inf": ("absmax", "none"),
                  "-inf": ("absmin", "none")}[pk]
    return _finish(_reduce(v, mode, input.dtype, post=post)[0], v, keepdim)


def cumsum(input: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """torch.cumsum(input, dim, *, dtype=None): running f32 sums along dim, rounded once per output."""
    _check_float(input, "input", "cumsum")
    out_dtype = dtype or input.dtype
    if out_dtype not in _FLOATS:
        raise RuntimeError(f"cumsum(): dtype must be float32, float16 or bfloat16 in op_library, got {out_dtype}")
    return _cumsum(input, dim, out_dtype, rev=False)


def _cumsum(x: torch.Tensor, dim: int, out_dtype: torch.dtype, rev: bool) -> torch.Tensor:
    d = _wrap(int(dim), x.dim())
    if x.dim() == 0:
        x = x.reshape(1)
        res = _cumsum(x, 0, out_dtype, rev)
        return res.reshape(())
    shape = list(x.shape)
    O, R, I = math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:])
    y = torch.empty(shape, dtype=out_dtype)
    if y.numel() == 0:
        return y
    xc = x.contiguous()
    if I == 1:
        _cumsum_rows(xc.reshape(O, R), y.reshape(O, R), rev)
    else:
        _cumsum_cols(xc.reshape(O * R, I), y.reshape(O * R, I), O, R, rev)
    return y


# scan block: x blocks of BK columns meet a BK x BK triangle of ones on the cube. 32, not 64: the
# same simulated time within ~1% (the cube is not the bound) and half the multiply-adds per element
# on the host (4096 x 4096 f32: 48 -> 33 ms for the kernel); 16 doubles the simulated time.
_SCAN_BK = 32
_TRI: dict[tuple[torch.dtype, int, bool], torch.Tensor] = {}


def _tri(dtype: torch.dtype, lower: bool) -> torch.Tensor:
    """The (BK, BK) triangle of ones in dtype (made by tri_ones_kernel once per process and kept)."""
    u = _TRI.get((dtype, _SCAN_BK, lower))
    if u is None:
        u = torch.empty((_SCAN_BK, _SCAN_BK), dtype=dtype)
        tri_ones_kernel(u, LOWER=int(lower), BK=_SCAN_BK)
        _TRI[(dtype, _SCAN_BK, lower)] = u
    return u


def _scan_block(n: int, blocks_per: int, esize: int) -> int:
    """Block rows (columns) of the cube scan: a multiple of 16 (up to what L0 holds double-buffered for
    the full and the tail block) for n items split in blocks over the cores (blocks_per independent
    groups of them): the largest block whose busiest core has within 10% of the fewest items (small
    blocks cost per-block overhead on the host)."""
    cap = 64 if esize >= 4 else 96
    loads = {b: -(-(blocks_per * -(-n // b)) // CORES) * b for b in range(16, cap + 1, 16)}
    best = _bmin(loads.values())
    return _bmax(b for b, v in loads.items() if v <= best * 1.1)


def _cumsum_rows(x2: torch.Tensor, y2: torch.Tensor, rev: bool) -> None:
    """Running sums along the rows of (O, R): cumsum_rows_kernel, (BM, BK) blocks times the upper
    (REV: lower) triangle of ones on the cube, the carried row sums added on V."""
    O, R = x2.shape
    bm = _scan_block(O, 1, x2.element_size())
    flag = torch.empty((-(-O // bm), 8), dtype=torch.float32)
    cumsum_rows_kernel(x2, _tri(x2.dtype, rev), y2, flag, REV=int(rev), BM=bm, BK=_SCAN_BK)


def _cumsum_cols(x2: torch.Tensor, y2: torch.Tensor, O: int, R: int, rev: bool) -> None:
    """Running sums down the columns of each (R, I) slab of the (O * R, I) view: cumsum_cube_cols_kernel,
    the lower (REV: upper) triangle of ones times (BK, BN) blocks on the cube, the carried row added on V."""
    I = x2.shape[1]
    bn = _scan_block(I, O, x2.element_size())
    flag = torch.empty((O * -(-I // bn), 8), dtype=torch.float32)
    cumsum_cube_cols_kernel(x2, _tri(x2.dtype, not rev), y2, flag, R, REV=int(rev), BN=bn, BK=_SCAN_BK)


# ----------------------------------------------------------------------------- backward
def _grad_view(grad: torch.Tensor, v: _View) -> torch.Tensor:
    return grad.contiguous().reshape(v.O, v.I)


def _bwd(v: _View, mode: str, grad: torch.Tensor, out: torch.Tensor | None = None, aux: torch.Tensor | None = None,
         idx: torch.Tensor | None = None, scale: float = 1.0, dtype: torch.dtype | None = None) -> torch.Tensor:
    """d/dx of the reduction behind (O, I) values, times grad (O, I), in x's (possibly permuted) layout."""
    g = _grad_view(grad, v)
    gx = torch.empty(v.x.shape, dtype=dtype or g.dtype)
    if gx.numel() == 0:
        return v.to_input(gx)
    o = out.contiguous().reshape(v.O, v.I) if out is not None else _dummy()
    a = aux.reshape(v.O, v.I) if aux is not None else _dummy()
    ix = idx.to(_I32).contiguous().reshape(v.O, v.I) if idx is not None else _dummy(_I32)
    if v.I == 1:
        BR, C = _row_tiles(v.O, v.R)
        bwd_rows_kernel(v.x2, g, o, a, ix, gx.reshape(v.O, v.R), float(scale), MODE=mode, BR=BR, C=C)
    else:
        _, C = _col_tiles(v.O, v.R, v.I, v.x.element_size())
        bwd_cols_kernel(v.x2, g, o, a, ix, gx.reshape(v.O * v.R, v.I), v.R, float(scale), MODE=mode, C=C)
    return v.to_input(gx)


def sum_backward(grad: torch.Tensor, input: torch.Tensor, dim: Any = None, keepdim: bool = False) -> torch.Tensor:
    """Gradient of sum(input, dim, keepdim) w.r.t. input: grad broadcast over the reduced dims."""
    v = _View(input, _dims(input, dim))
    return _bwd(v, "sum", grad, dtype=input.dtype)


def mean_backward(grad: torch.Tensor, input: torch.Tensor, dim: Any = None, keepdim: bool = False) -> torch.Tensor:
    """Gradient of mean: grad / N broadcast over the reduced dims."""
    v = _View(input, _dims(input, dim))
    return _bwd(v, "sum", grad, scale=1.0 / v.R if v.R else _INF, dtype=input.dtype)


def _count(v: _View, out: torch.Tensor, mode: str) -> torch.Tensor:
    return _reduce(v, mode, torch.float32, aux=_aux_of(out, v))[0]


def amax_backward(grad: torch.Tensor, input: torch.Tensor, out: torch.Tensor, dim: Any = (),
                  keepdim: bool = False) -> torch.Tensor:
    """Gradient of amax / amin (out is the forward's result): shared evenly among the elements equal to
    it, (grad / count) * mask as torch."""
    v = _View(input, _dims(input, dim))
    return _bwd(v, "amax", grad, out, _count(v, out, "eq"), dtype=input.dtype)


def amin_backward(grad: torch.Tensor, input: torch.Tensor, out: torch.Tensor, dim: Any = (),
                  keepdim: bool = False) -> torch.Tensor:
    """Gradient of amin: as amax_backward."""
    return amax_backward(grad, input, out, dim, keepdim)


def max_backward(grad: torch.Tensor, input: torch.Tensor, out: Any, dim: int | None = None,
                 keepdim: bool = False) -> torch.Tensor:
    """Gradient of max: with dim, grad goes to the index (out = (values, indices)); without, shared
    evenly among the elements equal to the max (among the NaNs if it is NaN), as torch."""
    if dim is None:
        v = _View(input, _dims(input, None))
        return _bwd(v, "amaxn", grad, out, _count(v, out, "eqn"), dtype=input.dtype)
    v = _View(input, _dims(input, int(dim)))
    return _bwd(v, "index", grad, idx=out[1], dtype=input.dtype)


def min_backward(grad: torch.Tensor, input: torch.Tensor, out: Any, dim: int | None = None,
                 keepdim: bool = False) -> torch.Tensor:
    """Gradient of min: as max_backward."""
    return max_backward(grad, input, out, dim, keepdim)


def _var_bwd(grad: torch.Tensor, input: torch.Tensor, out: torch.Tensor | None, dim: Any, correction: float,
             is_std: bool) -> torch.Tensor:
    v = _View(input, _dims(input, dim))
    if v.R == 0:
        return torch.empty(input.shape, dtype=input.dtype)
    mu = _reduce(v, "sum", torch.float32, scale=1.0 / v.R)[0]
    dof = v.R - correction
    scale = 1.0 / dof if dof > 0 else _INF
    return _bwd(v, "std" if is_std else "var", grad, out, mu, scale=scale, dtype=input.dtype)


def var_backward(grad: torch.Tensor, input: torch.Tensor, dim: Any = None, keepdim: bool = False, *,
                 correction: Any = None) -> torch.Tensor:
    """Gradient of var: 2 / (N - correction) * grad * (x - mean)."""
    return _var_bwd(grad, input, None, dim, _correction(correction, None), False)


def std_backward(grad: torch.Tensor, input: torch.Tensor, out: torch.Tensor, dim: Any = None,
                 keepdim: bool = False, *, correction: Any = None) -> torch.Tensor:
    """Gradient of std (out the forward's result): var's with grad / (2 std), 0 where std == 0 (torch)."""
    return _var_bwd(grad, input, out, dim, _correction(correction, None), True)


def logsumexp_backward(grad: torch.Tensor, input: torch.Tensor, out: torch.Tensor, dim: Any,
                       keepdim: bool = False) -> torch.Tensor:
    """Gradient of logsumexp: grad * exp(x - out)."""
    v = _View(input, _dims(input, dim))
    return _bwd(v, "lse", grad, out, dtype=input.dtype)


def norm_backward(grad: torch.Tensor, input: torch.Tensor, out: torch.Tensor, p: Any = "fro", dim: Any = None,
                  keepdim: bool = False) -> torch.Tensor:
    """Gradient of norm as torch's norm_backward: p=1 sgn(x) * g; p=2 x * g / norm (0 where norm == 0);
    p=+-inf sgn(x) * (g / count) * mask, mask = |x| == norm or NaN."""
    pk = _p(p)
    v = _View(input, _dims(input, dim))
    if pk == "1":
        return _bwd(v, "norm1", grad, dtype=input.dtype)
    if pk == "2":
        return _bwd(v, "norm2", grad, out, dtype=input.dtype)
    return _bwd(v, "norminf", grad, out, _count(v, out, "eqabs"), dtype=input.dtype)


def cumsum_backward(grad: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Gradient of cumsum: the reversed cumsum of grad along dim (in dtype, default grad's)."""
    return _cumsum(grad, dim, dtype or grad.dtype, rev=True)
