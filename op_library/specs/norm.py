"""Registry entries (op_library.registry) for op_library.norm: softmax, log_softmax, layer_norm,
rms_norm, npu_rms_norm, npu_add_rms_norm, npu_scaled_masked_softmax, batch_norm, group_norm.

Cases: rows that are multiples of no tile (37, 1000, 1025), size-1 rows and dims, dims other than
the last (columns: one-pass and the blocked online form), rows too long for UB (the blocked row
kernels), a non-contiguous input, inf / -inf / NaN rows (softmax), and with quick=False one large
case at the bench shape 4096 x 4096. `k` is the row length (the longest sum behind an output),
or the number of rows for the weight / bias gradients when that is larger.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from op_library.registry import FLOATS, Case, OpSpec, Tol, register

N = sys.modules["op_library.norm"]   # (op_library.norm, the attribute, is reduce's torch.norm)


def _rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


# softmax / log_softmax ----------------------------------------------------------------------------

def _special_rows(dtype: torch.dtype) -> torch.Tensor:
    """Rows with inf, -inf, NaN and all -inf (torch: NaN rows except for -inf entries)."""
    x = torch.randn(6, 37)
    x[0, 3] = float("inf")
    x[1, 5] = float("-inf")
    x[2, :] = float("-inf")
    x[3, 7] = float("nan")
    x[4, 1:4] = float("-inf")
    return x.to(dtype)


def _softmax_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    r = _rand
    out = [
        Case((r(37, 1000, dtype=dtype), -1), label="37x1000 dim=-1", k=1000),
        Case((r(5, 1, dtype=dtype), 1), label="5x1 dim=1 (size-1 rows)", k=1),
        Case((r(3, 45, 7, dtype=dtype), 1), label="3x45x7 dim=1 (columns)", k=45),
        Case((r(70, 37, dtype=dtype), 0), label="70x37 dim=0 (columns)", k=70),
        Case((r(2, 300, 70, dtype=dtype), 1), label="2x300x70 dim=1 (blocked columns)", k=300),
        Case((r(3, 9000, dtype=dtype), -1), label="3x9000 (blocked rows)", k=9000),
        Case((r(45, 37, dtype=dtype).t(), -1), label="37x45 non-contiguous", k=45),
        Case((_special_rows(dtype), -1), label="inf / -inf / NaN rows", k=37),
        Case((_special_rows(dtype).t().contiguous(), 0), label="inf / -inf / NaN columns", k=37),
    ]
    if not quick:
        out += [
            Case((r(1, 1, dtype=dtype), 0), label="1x1", k=1),
            Case((r(0, 5, dtype=dtype), -1), label="0x5", k=1),
            Case((r(4, 3, 5, 6, dtype=dtype), -3), label="4x3x5x6 dim=-3", k=3),
            Case((r(2, 1025, 33, dtype=dtype), 1), label="2x1025x33 dim=1 blocked", k=1025),
            Case((r(2, 20000, dtype=dtype), 1), label="2x20000 blocked rows", k=20000),
            Case((r(64, 1025, dtype=dtype), -1), label="64x1025", k=1025),
            Case((r(4096, 4096, dtype=dtype), -1), label="4096x4096 dim=-1", k=4096, large=True),
            Case((r(4096, 4096, dtype=dtype), 0), label="4096x4096 dim=0", k=4096),
        ]
    return out


# The backward reads the forward's output rounded to the dtype (as torch's _softmax_backward_data and
# _log_softmax_backward_data do) and g - sum(g * y) / g - exp(y) * sum(g) cancel: the gradient is
# off by about one ulp of |g| in absolute terms where it is near 0 (exp(y) also turns the rounding
# of y into a relative error of |y| ulps).
SOFTMAX_TOL = {torch.float16: Tol(1e-3, 1e-3, "backward from the rounded output: |g| ulps absolute"),
               torch.bfloat16: Tol(1.6e-2, 8e-3, "backward from the rounded output: |g| ulps absolute")}


def _dim(args: tuple[Any, ...], kw: dict[str, Any]) -> int:
    return int(args[1] if len(args) > 1 else kw["dim"])


register(OpSpec("softmax", N.softmax, lambda x, dim, **kw: F.softmax(x, dim, **kw), FLOATS, _softmax_cases,
                lambda g, out, args, kw: (N.softmax_backward(g, out, _dim(args, kw)),), (0,), tol=SOFTMAX_TOL))
register(OpSpec("log_softmax", N.log_softmax, lambda x, dim, **kw: F.log_softmax(x, dim, **kw), FLOATS,
                _softmax_cases,
                lambda g, out, args, kw: (N.log_softmax_backward(g, out, _dim(args, kw)),), (0,), tol=SOFTMAX_TOL))


# layer_norm / rms_norm ---------------------------------------------------------------------------

def _norm_cases(quick: bool, dtype: torch.dtype, bias: bool) -> list[Case]:
    r = _rand

    def one(lead: tuple[int, ...], ns: tuple[int, ...], w: bool = True, b: bool = True, label: str = "",
            x: torch.Tensor | None = None) -> Case:
        d, n = math.prod(ns), math.prod(lead)
        xt = x if x is not None else r(*lead, *ns, dtype=dtype)
        args: tuple[Any, ...] = (xt, list(ns), r(*ns, dtype=dtype) if w else None)
        if bias:
            args += (r(*ns, dtype=dtype) if b else None,)
        return Case(args, label=label or f"{lead}x{ns}{'' if w else ' no weight'}{'' if b or not bias else ' no bias'}",
                    k=max(d, n))

    out = [one((37,), (1000,)), one((5, 3), (7, 9)), one((4,), (1,)), one((1,), (37,), w=False, b=False),
           one((3,), (6000,), label="3x6000 (blocked forward, stats backward)"),
           one((45,), (37,), x=r(37, 45, dtype=dtype).t(), label="37x45 non-contiguous")]
    if bias:
        out.append(one((6,), (33,), b=False))
    if not quick:
        out += [one((64,), (1025,)), one((2,), (20000,), w=False, b=False, label="2x20000 no weight (blocked)"),
                one((130,), (2600,), label="130x2600 (stats backward)")]
        big = one((4096,), (4096,))
        out.append(Case(big.args, label="4096x4096", k=big.k, large=True))
    return out


def _ln_bwd(g: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, ns, w, b = args
    return N.layer_norm_backward(g, x, ns, w, b, **kw)


def _rms_ref(x: Any, ns: Any, w: Any = None, eps: Any = None) -> Any:
    return F.rms_norm(x, ns, w, eps)


def _rms_bwd(g: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, ns, w = args
    return N.rms_norm_backward(g, x, ns, w, **kw)


register(OpSpec("layer_norm", N.layer_norm, F.layer_norm, FLOATS, lambda q, dt: _norm_cases(q, dt, True), _ln_bwd,
                (0, 2, 3)))
register(OpSpec("rms_norm", N.rms_norm, _rms_ref, FLOATS, lambda q, dt: _norm_cases(q, dt, False), _rms_bwd,
                (0, 2)))


# torch_npu fused ---------------------------------------------------------------------------------

def _npu_rms_ref(x: Any, gamma: Any, epsilon: float = 1e-6) -> Any:
    """y in x's dtype, rstd float32 (computed in float32, as torch_npu)."""
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.to(torch.promote_types(x.dtype, torch.float32))   # float64 stays (gradcheck)
    rstd = torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + epsilon)
    return (xf * rstd * gamma.to(xf.dtype)).to(x.dtype), rstd


def _npu_add_rms_ref(x1: Any, x2: Any, gamma: Any, epsilon: float = 1e-6) -> Any:
    s = x1 + x2
    y, rstd = _npu_rms_ref(s, gamma, epsilon)
    return y, rstd, s


def _npu_rms_cases(quick: bool, dtype: torch.dtype, add: bool) -> list[Case]:
    r = _rand

    def one(shape: tuple[int, ...], gshape: tuple[int, ...], label: str = "", x: Any = None, **kw: Any) -> Case:
        x1 = x if x is not None else r(*shape, dtype=dtype)
        xs = (x1,) + ((r(*x1.shape, dtype=dtype),) if add else ())
        return Case(xs + (r(*gshape, dtype=dtype),), kw, label=label or f"{shape} gamma {gshape}",
                    k=max(math.prod(gshape), math.prod(shape) // max(math.prod(gshape), 1)))

    # (6, 1): one element per row, epsilon large enough that y is not sign(x) (ill-conditioned)
    out = [one((37, 1000), (1000,)), one((2, 5, 7, 9), (7, 9), epsilon=1e-5), one((6, 1), (1,), epsilon=0.5),
           one((3, 5000), (5000,), label="3x5000 (blocked forward, stats backward)"),
           one((45, 37), (45,), x=r(45, 37, dtype=dtype).t(), label="37x45 non-contiguous")]
    if not quick:
        out += [one((64, 1025), (1025,)), one((2, 20000), (20000,), label="2x20000 (blocked)")
                ] if not add else [one((64, 1025), (1025,))]
        big = one((4096, 4096), (4096,))
        out.append(Case(big.args, label="4096x4096", k=big.k, large=True))
    return out


def _npu_rms_bwd(g: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, gamma = args
    return N.npu_rms_norm_backward(g, x, gamma, out[1], **kw)


def _npu_add_rms_bwd(g: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    gy, gs = g
    return N.npu_add_rms_norm_backward(gy, out[2], args[2], gs, **kw)


register(OpSpec("npu_rms_norm", N.npu_rms_norm, _npu_rms_ref, FLOATS, lambda q, dt: _npu_rms_cases(q, dt, False),
                _npu_rms_bwd, (0, 1)))
# the backward reads the forward's x1 + x2 output rounded to the dtype (as torch_npu's does), the
# reference differentiates the f32 sum: xhat's rounding is up to one ulp of |x|
ADD_RMS_TOL = {torch.float16: Tol(4e-3, 5e-4, "backward from the rounded x1 + x2 output"),
               torch.bfloat16: Tol(3.2e-2, 4e-3, "backward from the rounded x1 + x2 output")}
register(OpSpec("npu_add_rms_norm", N.npu_add_rms_norm, _npu_add_rms_ref, FLOATS,
                lambda q, dt: _npu_rms_cases(q, dt, True), _npu_add_rms_bwd, (0, 1, 2), grad_outputs=(0, 2),
                tol=ADD_RMS_TOL))


def _masked_ref(x: Any, mask: Any, scale: float = 1.0, fixed_triu_mask: bool = False) -> Any:
    if fixed_triu_mask:
        mask = torch.ones(x.shape[-2:], dtype=torch.bool).triu(1)
    return torch.softmax((x * scale).masked_fill(mask, float("-inf")), -1)


def _masked_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    r = _rand
    m1 = torch.rand(1, 1, 33, 40) < 0.3
    m1[..., 0] = False     # no fully masked row (NaN) in the random cases
    out = [Case((r(2, 3, 33, 40, dtype=dtype), m1, 0.125), label="2x3x33x40 mask 1x1x33x40", k=40),
           Case((r(2, 2, 32, 32, dtype=dtype), torch.zeros(2, 2, 32, 32, dtype=torch.bool)),
                {"scale": 2.0, "fixed_triu_mask": True}, label="fixed_triu_mask", k=32),
           Case((r(1, 1, 4, 7, dtype=dtype), torch.tensor([[[[True] * 6 + [False], [False] * 7,
                                                             [True, False] * 3 + [True], [False] * 7]]])),
                label="one unmasked element in a row", k=7)]
    if not quick:
        out.append(Case((r(4, 8, 256, 256, dtype=dtype), torch.rand(4, 1, 256, 256) < 0.1, 0.125),
                        label="4x8x256x256", k=256, large=True))
    return out


register(OpSpec("npu_scaled_masked_softmax", N.npu_scaled_masked_softmax, _masked_ref, FLOATS, _masked_cases,
                lambda g, out, args, kw: (N.npu_scaled_masked_softmax_backward(
                    g, out, args[2] if len(args) > 2 else kw.get("scale", 1.0)),), (0,), tol=SOFTMAX_TOL))


# batch_norm / group_norm -------------------------------------------------------------------------

def _bn_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    def one(shape: tuple[int, ...], training: bool, w: bool = True, label: str = "", x: Any = None) -> Case:
        c = shape[1]
        xt = x if x is not None else _rand(*shape, dtype=dtype)
        args = (xt, torch.randn(c).to(dtype), (torch.rand(c) + 0.5).to(dtype), _rand(c, dtype=dtype) if w else None,
                _rand(c, dtype=dtype) if w else None, training)
        n = math.prod(shape) // c
        return Case(args, label=label or f"{shape} {'training' if training else 'eval'}{'' if w else ' no affine'}",
                    k=n)

    out = [one((4, 5, 7, 9), True), one((4, 5, 7, 9), False), one((37, 3), True, w=False), one((2, 1, 1025), True),
           one((3, 4, 6), True, x=_rand(3, 6, 4, dtype=dtype).transpose(1, 2), label="(3, 4, 6) non-contiguous")]
    if not quick:
        out += [one((8, 16, 33, 33), True), one((2, 3, 1), False)]
        big = one((32, 64, 56, 56), True)
        out.append(Case(big.args, label=big.label, k=big.k, large=True))
    return out


def _bn_bwd(g: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    x, rm, rv, w, b, training = args
    # the matrix ran the forward (updating rm / rv in training): training's backward does not read them
    return N.batch_norm_backward(g, x, rm, rv, w, b, training, **{k: v for k, v in kw.items() if k == "eps"})


def _bn_ref(x: Any, rm: Any, rv: Any, w: Any = None, b: Any = None, training: bool = False, **kw: Any) -> Any:
    # copies: the reference must not move the running stats the op under test updates
    return F.batch_norm(x, rm.clone() if rm is not None else None, rv.clone() if rv is not None else None, w, b,
                        training, **kw)


register(OpSpec("batch_norm", N.batch_norm, _bn_ref, FLOATS, _bn_cases, _bn_bwd, (0, 3, 4)))


def _gn_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    def one(shape: tuple[int, ...], groups: int, w: bool = True, label: str = "", x: Any = None) -> Case:
        c = shape[1]
        xt = x if x is not None else _rand(*shape, dtype=dtype)
        args = (xt, groups, _rand(c, dtype=dtype) if w else None, _rand(c, dtype=dtype) if w else None)
        return Case(args, label=label or f"{shape} groups {groups}{'' if w else ' no affine'}",
                    k=max(math.prod(shape[2:]) * c // groups, shape[0] * math.prod(shape[2:])))

    out = [one((4, 6, 7, 9), 3), one((2, 4, 1000), 1, w=False), one((3, 10, 4), 5), one((2, 8, 37), 4),
           one((2, 4, 6), 2, x=_rand(2, 6, 4, dtype=dtype).transpose(1, 2), label="(2, 4, 6) non-contiguous")]
    if not quick:
        out += [one((2, 32, 33, 33), 8)]
        big = one((8, 64, 56, 56), 32)
        out.append(Case(big.args, label=big.label, k=big.k, large=True))
    return out


register(OpSpec("group_norm", N.group_norm, F.group_norm, FLOATS, _gn_cases,
                lambda g, out, args, kw: N.group_norm_backward(g, *args, **kw), (0, 2, 3)))
