"""The op registry: one `OpSpec` per op, read by the op test matrix (`op_library.matrix`, `vinci
matrix`, tests/op_library/test_matrix.py) and meant to be read by the torch registration and the
device as well.

An entry names the op's forward (`fn`, torch tensors in and out), its backward and how to call it,
the torch reference, the dtypes it takes, its cases and, where it needs one, a tolerance override
with the reason next to it.

The tolerance rule (written once, `tolerance`): start from torch.testing's per-dtype defaults
(float32 rtol 1.3e-6 atol 1e-5, float16 1e-3 / 1e-5, bfloat16 1.6e-2 / 1e-5). A case whose
outputs (forward or backward) sum K products scales both by sqrt(K): rounding errors of a K-term
sum in a different order grow like sqrt(K) ulps, and the reference's order is not ours. A
`Tol` override on the entry replaces the defaults (then scaled the same way).

The reference runs on float32 copies of the floating inputs (the dtype torch's CPU kernels
accumulate in for float16 / bfloat16; integer and bool inputs as they are) and its result is
rounded to the dtype torch returns for the case's own inputs; the tolerance is the one of each
output's dtype, and integer and bool outputs (indices, comparisons, int arithmetic) must be exact.
Gradients are compared with torch autograd of the reference in float32, each in its input's dtype;
and, since that autograd is the yardstick, `torch.autograd.gradcheck` of the reference in float64
on the smallest finite case proves the reference itself (`fd_check=False` opts out, with a reason).

Dtypes an entry may list: FLOATS (float32, float16, bfloat16), INTS (int32, int8), torch.bool and,
where torch's op takes or returns it, torch.int64 (see op_library.matrix.DTYPE_NAMES).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from op_library.conv import conv2d, conv2d_backward
from op_library.matmul import bmm, bmm_backward, linear, linear_backward, matmul, matmul_backward
from op_library.pool import avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward


@dataclass(frozen=True)
class Tol:
    """A tolerance (before the sqrt(K) scaling) and why the op needs it."""
    rtol: float
    atol: float
    why: str = ""


# torch.testing.assert_close defaults
DEFAULT_TOL: dict[torch.dtype, Tol] = {
    torch.float32: Tol(1.3e-6, 1e-5, "torch.testing default"),
    torch.float16: Tol(1e-3, 1e-5, "torch.testing default"),
    torch.bfloat16: Tol(1.6e-2, 1e-5, "torch.testing default"),
}


@dataclass(frozen=True)
class Case:
    """One call: fn(*args, **kwargs). `k` is the longest sum (of products) behind any output or
    gradient, for the tolerance; `large` marks the case for timing."""
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    k: int = 1
    large: bool = False


@dataclass(frozen=True)
class OpSpec:
    """One op. `backward(grad, out, args, kwargs)` returns one gradient per index in `grad_args`
    (positional arguments; a None argument gets None), for `grad` the gradient of the first output
    (a tuple of gradients, one per index in `grad_outputs`, when that names more than one output);
    `out` is what `fn` returned. This is the one way every backward is reached (the matrix, autograd);
    `cases(quick, dtype)` builds the cases (tails, size-1 dims, a non-contiguous input, and with
    quick=False more shapes and one large case)."""
    name: str
    fn: Callable[..., Any]
    ref: Callable[..., Any]
    dtypes: tuple[torch.dtype, ...]
    cases: Callable[[bool, torch.dtype], list[Case]]
    backward: Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Sequence[Any]] | None = None
    grad_args: tuple[int, ...] = ()
    takes_cores: bool = False   # fn accepts cores=N
    bwd_dtypes: tuple[torch.dtype, ...] | None = None   # dtypes whose backward is checked (None: all)
    tol: dict[torch.dtype, Tol] = field(default_factory=dict)  # overrides, each with its why
    grad_outputs: tuple[int, ...] = (0,)   # outputs that carry a gradient; with more than one,
    # `backward` gets a tuple of grads (one per index, None where that output's grad is absent)
    fd_check: bool = True   # the f64 finite-difference check of the reference applies (not for
    # ops whose reference is not smooth at the sampled points, e.g. rounding)


def tolerance(spec: OpSpec, dtype: torch.dtype, k: int) -> tuple[float, float]:
    """(rtol, atol) for `spec` at `dtype` (an output's dtype) for a case whose longest sum has k terms
    (module docstring); integer and bool outputs are compared exactly: (0, 0)."""
    if not dtype.is_floating_point:
        return 0.0, 0.0
    t = spec.tol.get(dtype, DEFAULT_TOL.get(dtype, DEFAULT_TOL[torch.float32]))
    s = math.sqrt(max(k, 1))
    return t.rtol * s, t.atol * s


REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    """Add (or replace) the entry for spec.name."""
    REGISTRY[spec.name] = spec
    return spec


def get(name: str) -> OpSpec:
    if name not in REGISTRY:
        raise KeyError(f"no op {name!r} in the registry (ops: {', '.join(sorted(REGISTRY))})")
    return REGISTRY[name]


FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int8)   # the integer dtypes the DSL has (int64 indices are converted)


def _rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


# matmul / bmm / linear ------------------------------------------------------------------------

def _matmul_ref(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Any:
    return torch.matmul(a.mT if transpose_a else a, b.mT if transpose_b else b)


def _matmul_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    # tiles are 128 x 128 x 64: 37, 45, 70, 130 are multiples of none
    shapes = [(37, 70, 45), (1, 33, 1), (130, 64, 5)] if quick else \
        [(37, 70, 45), (1, 33, 1), (130, 64, 5), (200, 129, 257), (1, 1, 1), (128, 64, 128)]
    out = [Case((_rand(m, k, dtype=dtype), _rand(k, n, dtype=dtype)), label=f"{m}x{k}x{n}", k=max(k, m, n))
           for m, k, n in shapes]
    out.append(Case((_rand(70, 37, dtype=dtype).t(), _rand(70, 45, dtype=dtype)), label="37x70x45 a non-contiguous",
                    k=70))
    out.append(Case((_rand(37, 70, dtype=dtype), _rand(45, 70, dtype=dtype)), {"transpose_b": True},
                    label="37x70x45 transpose_b", k=70))
    if not quick:
        out.append(Case((_rand(512, 512, dtype=dtype), _rand(512, 512, dtype=dtype)), label="512x512x512",
                        k=512, large=True))
    return out


def _bmm_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    shapes = [(3, 37, 70, 45), (1, 1, 17, 1)] if quick else [(3, 37, 70, 45), (1, 1, 17, 1), (5, 130, 33, 129)]
    out = [Case((_rand(b, m, k, dtype=dtype), _rand(b, k, n, dtype=dtype)), label=f"{b}x{m}x{k}x{n}",
                k=max(b * m, k, b * n)) for b, m, k, n in shapes]
    out.append(Case((_rand(2, 33, 20, dtype=dtype).transpose(1, 2), _rand(2, 33, 9, dtype=dtype)),
                    label="2x20x33x9 a non-contiguous", k=33))
    if not quick:
        out.append(Case((_rand(8, 256, 256, dtype=dtype), _rand(8, 256, 256, dtype=dtype)), label="8x256x256x256",
                        k=256, large=True))
    return out


def _linear_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    def one(lead: tuple[int, ...], i: int, o: int, bias: bool = True, label: str = "") -> Case:
        rows = math.prod(lead)
        return Case((_rand(*lead, i, dtype=dtype), _rand(o, i, dtype=dtype), _rand(o, dtype=dtype) if bias else None),
                    label=label or f"{lead}x{i}->{o}{'' if bias else ' no bias'}", k=max(i, rows, o))

    out = [one((37,), 70, 45), one((1,), 1, 1), one((2, 5), 33, 17, bias=False)]
    if not quick:
        out += [one((3, 41), 129, 130), one((200,), 64, 1)]
    out.append(Case((_rand(70, 37, dtype=dtype).t(), _rand(45, 70, dtype=dtype), _rand(45, dtype=dtype)),
                    label="x non-contiguous", k=70))
    if not quick:
        big = one((1024,), 512, 512)
        out.append(Case(big.args, label=big.label, k=big.k, large=True))
    return out


def _matmul_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    a, b = args
    ta, tb = kw.get("transpose_a", False), kw.get("transpose_b", False)
    if not (ta or tb):
        return matmul_backward(grad, a, b)
    # c = op(a) @ op(b): d op(a) = grad @ op(b).T, d op(b) = op(a).T @ grad, transposed back where op is
    ga = matmul(grad, b, transpose_b=not tb)
    gb = matmul(a, grad, transpose_a=not ta)
    return (ga.t().contiguous() if ta else ga), (gb.t().contiguous() if tb else gb)


def _linear_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, w, b = args
    return linear_backward(grad, x, w, with_bias=b is not None)


register(OpSpec("matmul", matmul, _matmul_ref, FLOATS, _matmul_cases, _matmul_bwd, (0, 1), takes_cores=True))
register(OpSpec("bmm", bmm, _matmul_ref, FLOATS, _bmm_cases,
                lambda g, out, args, kw: bmm_backward(g, *args), (0, 1), takes_cores=True))
register(OpSpec("linear", linear, F.linear, FLOATS, _linear_cases, _linear_bwd, (0, 1, 2), takes_cores=True))


# conv2d -----------------------------------------------------------------------------------------

def _conv_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    # (N, C, H, W, CO, kernel, stride, padding, dilation, groups)
    geo: list[tuple[Any, ...]] = [(2, 3, 9, 9, 4, (3, 3), 1, 1, 1, 1), (2, 4, 9, 7, 6, (3, 3), 2, 1, 1, 2),
                                  (1, 1, 1, 1, 1, (1, 1), 1, 0, 1, 1)]
    if not quick:
        geo += [(2, 3, 9, 9, 4, (3, 3), 1, 1, 2, 1), (2, 3, 9, 9, 3, (3, 3), 1, 1, 1, 3),
                (2, 3, 9, 9, 4, (2, 3), (1, 2), (1, 0), 1, 1), (3, 16, 13, 11, 20, (3, 3), 1, 1, 1, 1)]
    out = []
    for i, (n, c, h, w, co, ks, s, p, d, g) in enumerate(geo):
        x = _rand(n, c, h, w, dtype=dtype)
        wt = _rand(co, c // g, *ks, dtype=dtype)
        b = _rand(co, dtype=dtype) if i % 2 == 0 else None
        k = max(c // g * ks[0] * ks[1], n * h * w, co * ks[0] * ks[1])
        out.append(Case((x, wt, b, s, p, d, g), label=f"{n}x{c}x{h}x{w} -> {co} k{ks} s{s} p{p} d{d} g{g}", k=k))
    x = _rand(2, 3, 8, 9, dtype=dtype).transpose(2, 3)
    out.append(Case((x, _rand(4, 3, 3, 3, dtype=dtype), _rand(4, dtype=dtype), 1, 1, 1, 1),
                    label="2x3x9x8 x non-contiguous", k=2 * 9 * 8))
    if not quick:
        out.append(Case((_rand(4, 32, 56, 56, dtype=dtype), _rand(64, 32, 3, 3, dtype=dtype), None, 1, 1, 1, 1),
                        label="4x32x56x56 -> 64 k3 p1", k=4 * 56 * 56, large=True))
    return out


def _conv_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, w, b, s, p, d, g = args
    return conv2d_backward(grad, x, w, s, p, d, g, with_bias=b is not None)


register(OpSpec("conv2d", conv2d, F.conv2d, FLOATS, _conv_cases, _conv_bwd, (0, 1, 2)))


# pooling ----------------------------------------------------------------------------------------

def _pool_cases(quick: bool, dtype: torch.dtype, avg: bool) -> list[Case]:
    # (N, C, H, W, kernel, stride, padding)
    geo: list[tuple[Any, ...]] = [(2, 3, 9, 9, 3, 2, 1), (1, 1, 1, 1, 1, 1, 0), (2, 2, 7, 10, (2, 3), (2, 1), (1, 0))]
    if not quick:
        geo += [(1, 5, 17, 13, 3, 1, 1), (2, 3, 8, 8, 2, None, 0)]
    # k: avg sums up to 9 taps per output (and the backward up to 9 per input)
    out = [Case((_rand(n, c, h, w, dtype=dtype), ks, s, p), label=f"{n}x{c}x{h}x{w} k{ks} s{s} p{p}", k=9)
           for n, c, h, w, ks, s, p in geo]
    out.append(Case((_rand(2, 3, 8, 9, dtype=dtype).transpose(2, 3), 3, 2, 1), label="2x3x9x8 non-contiguous", k=9))
    if not avg and not quick:
        out.append(Case((_rand(2, 3, 9, 9, dtype=dtype), 3, 2, 1), {"ceil_mode": True}, label="ceil_mode", k=9))
    if avg and not quick:
        out.append(Case((_rand(2, 3, 9, 9, dtype=dtype), 3, 2, 1), {"ceil_mode": True, "count_include_pad": False},
                        label="ceil_mode, count_include_pad=False", k=9))
    if not quick:
        out.append(Case((_rand(8, 64, 56, 56, dtype=dtype), 3, 2, 1), label="8x64x56x56 k3 s2 p1", k=9, large=True))
    return out


def _max_pool_ref(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                  ceil_mode: bool = False) -> Any:
    return F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)


def _max_pool_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, ks, s, p = args
    return (max_pool2d_backward(grad, x.shape, out[1], ks, s, p, ceil_mode=kw.get("ceil_mode", False)),)


def _avg_pool_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, ks, s, p = args
    return (avg_pool2d_backward(grad, x.shape, ks, s, p, **kw),)


register(OpSpec("max_pool2d", max_pool2d, _max_pool_ref, FLOATS, lambda q, dt: _pool_cases(q, dt, False),
                _max_pool_bwd, (0,)))
register(OpSpec("avg_pool2d", avg_pool2d, F.avg_pool2d, FLOATS, lambda q, dt: _pool_cases(q, dt, True),
                _avg_pool_bwd, (0,)))


# every other op's entries live next to their area (op_library/specs/<area>.py) and register here.
# An area whose module fails to import (a half-done edit) must not take the others down: the entries
# registered before the failure stay, and the error is kept for the matrix to report as a failure.
LOAD_ERRORS: dict[str, str] = {}
try:
    from op_library import specs  # noqa: E402,F401
except Exception as _e:  # noqa: BLE001
    import traceback as _tb

    _where = next((f"{f.filename}:{f.lineno}" for f in reversed(_tb.extract_tb(_e.__traceback__))
                   if "op_library" in f.filename), "op_library.specs")
    LOAD_ERRORS[_where] = f"{type(_e).__name__}: {_e}"
