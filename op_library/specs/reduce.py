"""Registry entries (op_library.registry) for op_library.reduce.

Every entry's cases cover a row reduction with a tail (37 x 1000 along the last dim), a column
reduction (5 x 37 x 33 along the middle dim), non-adjacent dims, a full reduction, keepdim, size-1
and size-0 dims, a non-contiguous input, NaN / inf inputs, and with quick=False a 1025-column tail,
a long row (1M elements) and one large case (4096 x 4096 along the last dim). `k` is the reduced
length (the longest sum behind an output; the backward's sums are no longer).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

import op_library.reduce as R
from op_library.registry import FLOATS, Case, OpSpec, register

INF, NAN = float("inf"), float("nan")


def _rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def _special(dtype: torch.dtype) -> torch.Tensor:
    """Rows with NaN, +-inf, ties and zeros (torch propagates NaN and inf through reductions)."""
    t = torch.randn(6, 9)
    t[0, 3] = NAN
    t[1, 2] = INF
    t[2, 5] = -INF
    t[3, :] = 0.0
    t[4, 1] = t[4, 6] = 5.0
    t[5, 0], t[5, 4] = INF, NAN
    return t.to(dtype)


def _numel_k(shape: Sequence[int], dim: Any) -> int:
    if dim is None or dim == ():
        return math.prod(shape)
    ds = [dim] if isinstance(dim, int) else list(dim)
    return math.prod(shape[d] for d in ds) or 1


def _cases(quick: bool, dtype: torch.dtype, *, dims: str = "many", empty: bool = True, special: bool = True,
           full: bool = True, extra: dict[str, Any] | None = None) -> list[Case]:
    """dims: 'many' (int, tuple, None), 'one' (a single int dim or None), 'req' (a dim is required),
    'int' (exactly one int dim)."""
    kw = dict(extra or {})
    nokeep = kw.pop("nokeep", False)

    def c(x: torch.Tensor, dim: Any, label: str, keepdim: bool | None = None, large: bool = False) -> Case:
        k = _numel_k(list(x.shape), dim)
        more = {} if keepdim is None or nokeep else {"keepdim": keepdim}
        return Case((x, dim), dict(kw, **more), label=label, k=k, large=large)

    out = [c(_rand(37, 1000, dtype=dtype), -1, "37x1000 dim -1"),
           c(_rand(5, 37, 33, dtype=dtype), 1, "5x37x33 dim 1 (columns)", keepdim=True),
           c(_rand(1, 1, dtype=dtype), 0, "1x1 dim 0"),
           c(_rand(70, 37, dtype=dtype).t(), 1, "37x70 non-contiguous dim 1"),
           c(_rand(3, 17, dtype=dtype), 0, "3x17 dim 0")]
    if dims in ("many", "one") and full:
        out.append(c(_rand(13, 77, dtype=dtype), None, "13x77 all"))
    if dims == "many":
        out.append(c(_rand(4, 6, 7, dtype=dtype), (0, 2), "4x6x7 dims (0, 2)", keepdim=True))
        out.append(c(_rand(4, 6, 7, dtype=dtype), (-1, -2), "4x6x7 dims (-1, -2)"))
    if special:
        out.append(c(_special(dtype), 1, "NaN / inf / ties dim 1"))
        out.append(c(_special(dtype), 0, "NaN / inf / ties dim 0"))
    if empty:
        out.append(c(_rand(3, 0, dtype=dtype), 1, "3x0 dim 1 (empty)"))
    out.append(c(_rand(0, 5, dtype=dtype), 1, "0x5 dim 1"))
    if not quick:
        out.append(c(_rand(3, 1025, 17, dtype=dtype), 1, "3x1025x17 dim 1"))
        out.append(c(_rand(7, 1025, dtype=dtype), -1, "7x1025 dim -1", keepdim=True))
        out.append(c(_rand(2, 3, 5, 7, dtype=dtype), 2, "2x3x5x7 dim 2"))
        if dims != "int":
            out.append(c(torch.randn(1 << 20).add_(1).to(dtype), 0, "1M row"))
        out.append(c(_rand(4096, 4096, dtype=dtype), -1, "4096x4096 dim -1", large=True))
        out.append(c(_rand(4096, 4096, dtype=dtype), 0, "4096x4096 dim 0"))
    return out


def _bwd(fn: Any, needs_out: bool = False) -> Any:
    def backward(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
        x, dim = args
        if needs_out:
            return (fn(grad, x, out, dim, **kw),)
        return (fn(grad, x, dim, **kw),)
    return backward


def _max_ref(x: Any, dim: Any, keepdim: bool = False) -> Any:
    return tuple(torch.max(x, dim, keepdim))


def _min_ref(x: Any, dim: Any, keepdim: bool = False) -> Any:
    return tuple(torch.min(x, dim, keepdim))


def _max_fn(x: Any, dim: Any, keepdim: bool = False) -> Any:
    r = R.max(x, dim, keepdim)
    return tuple(r) if dim is not None else r


def _min_fn(x: Any, dim: Any, keepdim: bool = False) -> Any:
    r = R.min(x, dim, keepdim)
    return tuple(r) if dim is not None else r


def _maxmin_bwd(fn: Any) -> Any:
    def backward(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
        x, dim = args
        return (fn(grad, x, out, dim, **kw),)
    return backward


def _cumsum_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    return (R.cumsum_backward(grad, args[1], dtype=args[0].dtype),)


def _norm_cases(p: Any) -> Any:
    def cases(quick: bool, dtype: torch.dtype) -> list[Case]:
        out = []
        for cs in _cases(quick, dtype, empty=p in (1, 2)):
            x, dim = cs.args
            out.append(Case((x, p, dim), cs.kwargs, label=f"p={p} {cs.label}", k=cs.k, large=cs.large))
        return out
    return cases


def _norm_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, p, dim = args
    return (R.norm_backward(grad, x, out, p, dim, **kw),)


def _norm_case_all(quick: bool, dtype: torch.dtype) -> list[Case]:
    out: list[Case] = []
    for p in (2, 1, INF, -INF):
        out += _norm_cases(p)(quick, dtype)
    return out


def _std_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, dim = args
    return (R.std_backward(grad, x, out, dim, **kw),)


def _lse_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    out = _cases(quick, dtype, dims="req")
    allinf = torch.full((2, 5), -INF)
    allinf[1, 2] = INF
    out.append(Case((allinf.to(dtype), 1), label="rows of -inf / +inf", k=5))
    return out


def _var_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    # no single-element reductions: var is nan there, which the reference's f64 gradcheck cannot take
    # (tests/op_library/test_reduce.py checks them)
    out = [c for c in _cases(quick, dtype) if c.label != "1x1 dim 0"]
    out.append(Case((_rand(6, 50, dtype=dtype) + 100.0, 1), {"correction": 0}, label="offset 100, correction=0",
                    k=50))
    return out


register(OpSpec("sum", R.sum, torch.sum, FLOATS, lambda q, dt: _cases(q, dt), _bwd(R.sum_backward), (0,)))
register(OpSpec("mean", R.mean, torch.mean, FLOATS, lambda q, dt: _cases(q, dt), _bwd(R.mean_backward), (0,)))
register(OpSpec("amax", R.amax, torch.amax, FLOATS, lambda q, dt: _cases(q, dt, empty=False, full=False),
                _bwd(R.amax_backward, True), (0,)))
register(OpSpec("amin", R.amin, torch.amin, FLOATS, lambda q, dt: _cases(q, dt, empty=False, full=False),
                _bwd(R.amin_backward, True), (0,)))
register(OpSpec("max", _max_fn, _max_ref, FLOATS, lambda q, dt: _cases(q, dt, dims="int", empty=False),
                _maxmin_bwd(R.max_backward), (0,)))
register(OpSpec("min", _min_fn, _min_ref, FLOATS, lambda q, dt: _cases(q, dt, dims="int", empty=False),
                _maxmin_bwd(R.min_backward), (0,)))
register(OpSpec("argmax", R.argmax, torch.argmax, FLOATS, lambda q, dt: _cases(q, dt, dims="one", empty=False)))
register(OpSpec("argmin", R.argmin, torch.argmin, FLOATS, lambda q, dt: _cases(q, dt, dims="one", empty=False)))
register(OpSpec("var", R.var, torch.var, FLOATS, _var_cases, _bwd(R.var_backward), (0,)))
register(OpSpec("std", R.std, torch.std, FLOATS, _var_cases, _std_bwd, (0,)))
register(OpSpec("logsumexp", R.logsumexp, torch.logsumexp, FLOATS, _lse_cases, _bwd(R.logsumexp_backward, True),
                (0,)))
register(OpSpec("norm", R.norm, torch.norm, FLOATS, _norm_case_all, _norm_bwd, (0,)))
register(OpSpec("cumsum", R.cumsum, torch.cumsum, FLOATS, lambda q, dt: _cases(q, dt, dims="int", extra={"nokeep": True}),
                _cumsum_bwd, (0,)))
