"""Registry entries (op_library.registry) for op_library.activations: unary math and activations.

Every op gets the same shapes: 1-D tails (37, 1000; with --full 1025 and 8193, past one tile of
8192), 2-D and 3-D blocks, size-0 and size-1 dims, a non-contiguous (transposed) input, and a
case of special values (NaN, +-inf, +-0, the op's domain edges); with --full one large case,
4096 x 4096 (the bench shape). Inputs are drawn in each op's domain (`_DOMAIN`), so the
gradients compared are finite where torch's are. k = 1 throughout: no output sums anything.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import op_library.activations as A
from op_library.registry import FLOATS, INTS, Case, OpSpec, Tol, register

Gen = Callable[[torch.Tensor], torch.Tensor]

_DOMAIN: dict[str, Gen] = {
    "log": lambda x: x.abs() * 2 + 0.05,
    "sqrt": lambda x: x.abs() * 2 + 0.05,
    "rsqrt": lambda x: x.abs() * 2 + 0.05,
    "log1p": lambda x: x.abs() * 2 - 0.9,
    "reciprocal": lambda x: x.sign() * (x.abs() + 0.2),
    "exp": lambda x: x * 3, "expm1": lambda x: x * 3, "sin": lambda x: x * 3, "cos": lambda x: x * 3,
    "tanh": lambda x: x * 2, "erf": lambda x: x * 1.5, "elu": lambda x: x * 3, "softplus": lambda x: x * 3,
    "hardswish": lambda x: x * 3, "gelu": lambda x: x * 3, "npu_gelu": lambda x: x * 3, "silu": lambda x: x * 3,
    # rounding: spread out, a quarter of them exact halves (ties go to even)
    "floor": lambda x: x * 5, "ceil": lambda x: x * 5, "trunc": lambda x: x * 5,
    "round": lambda x: torch.where(torch.arange(x.numel()).view(x.shape) % 4 == 0, (x * 8).round() / 2, x * 5),
}
_SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -3.0, 3.0, 20.5,
            -20.5, 100.0, -100.0, 1e-30, -1e-30, 1e-7, -1e-7, 89.0, -89.0]


def _input(op: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(*shape)
    if dtype.is_floating_point:
        return _DOMAIN.get(op, lambda v: v * 2)(x).to(dtype)
    return (x * 50).round().clamp(-128, 127).to(dtype)


def _cases(op: str, kwargs: dict[str, Any] | None = None) -> Callable[[bool, torch.dtype], list[Case]]:
    kw = kwargs or {}

    def cases(quick: bool, dtype: torch.dtype) -> list[Case]:
        shapes: list[tuple[int, ...]] = [(37,), (1000,), (3, 37), (2, 0, 5), (1,), (1, 1)]
        if not quick:
            shapes += [(1025,), (8193,), (2, 3, 129), (4, 1, 1000)]
        out = [Case((_input(op, s, dtype),), dict(kw), label="x".join(map(str, s))) for s in shapes]
        out.append(Case((_input(op, (33, 40), dtype).t(),), dict(kw), label="40x33 non-contiguous"))
        if dtype.is_floating_point:
            out.append(Case((torch.tensor(_SPECIAL).to(dtype),), dict(kw), label="NaN, inf, zeros, edges"))
        else:
            info = torch.iinfo(dtype)
            out.append(Case((torch.tensor([0, 1, -1, info.max, info.min + 1, 5, -7], dtype=dtype),), dict(kw),
                            label="integer edges"))
        if not quick:
            out.append(Case((_input(op, (4096, 4096), dtype),), dict(kw), label="4096x4096", large=True))
        return out
    return cases


def _bwd(fn: Callable[..., Any], saved: str = "input", params: tuple[str, ...] = ()) -> Callable[..., Any]:
    """OpSpec.backward from `fn(grad, saved, *params)`; saved is the op's input or its output."""
    def backward(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> list[Any]:
        s = out if saved == "output" else args[0]
        return [fn(grad, s, *(kw[p] for p in params if p in kw))]
    return backward


def _scalar_path(ref: Callable[..., Any]) -> Callable[..., Any]:
    """`ref` one element at a time on small inputs (the special values, size-1 cases): torch's scalar
    CPU path, which is the definition. Its vectorised kernels differ at the edges, and by ISA: gelu(+inf)
    is NaN in AVX-512 lanes and +inf in the scalar path; elu / hardswish backward at a NaN input are
    NaN in AVX2 lanes and grad in AVX-512 lanes and the scalar path. Autograd goes through the slices."""
    def scalar_ref(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or not 0 < x.numel() <= 64:
            return ref(x, *args, **kwargs)
        flat = x.reshape(-1)
        return torch.cat([ref(flat[i:i + 1], *args, **kwargs) for i in range(flat.numel())]).reshape(x.shape)
    scalar_ref.__name__ = getattr(ref, "__name__", "ref")
    return scalar_ref


def _reg(name: str, fn: Callable[..., Any], ref: Callable[..., Any], bwd: Callable[..., Any] | None,
         ints: bool = False, kwargs: dict[str, Any] | None = None, case_op: str | None = None,
         tol: dict[torch.dtype, Tol] | None = None, fd: bool = True) -> None:
    register(OpSpec(name, fn, _scalar_path(ref), FLOATS + (INTS if ints else ()), _cases(case_op or name, kwargs), bwd,
                    (0,) if bwd is not None else (), tol=tol or {}, fd_check=fd))


# the saved tensor per torch's derivative formula: the result for these, the input for the rest
_FROM_OUTPUT = {"exp", "expm1", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "relu"}
_TORCH = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "expm1": torch.expm1, "log": torch.log,
          "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
          "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid,
          "relu": F.relu, "silu": F.silu, "hardswish": F.hardswish}
_INT_OPS = {"neg", "abs", "relu"}

# A backward from the saved output (torch's formula, and what torch's own f16 / bf16 autograd does)
# in f16 / bf16 starts from an output already rounded to the dtype, while the matrix's yardstick is
# float32 autograd. Measured on the quick and full cases (grad ~ randn, |grad| < 6):
# - tanh (1 - y^2), sigmoid ((1 - y) y), expm1 (y + 1) cancel where y -> +-1 / 0 / -1: the rounding of
#   y (half an ulp of 1: 2.4e-4 f16, 2e-3 bf16) becomes an absolute error of up to ~2 |grad| of it
#   (worst seen 1.1e-3 f16, 1e-2 bf16), and the true gradient there may be ~0 (rel error 1);
# - rsqrt (y^3) and reciprocal (y^2) multiply y's relative rounding by 3 and 2 (worst seen rel
#   1.9e-3 f16, 1.6e-2 bf16).
# tests/op_library/test_activations.py checks that these gradients match torch's own f16 / bf16
# autograd to an ulp, and that the forward stays within the default tolerance.
_FROM_OUTPUT_TOL = {
    torch.float16: Tol(4e-3, 4e-3, "backward from the saved f16 output (torch's formula): 1 - y^2, 1 - y, y + 1 "
                       "cancel and y^3 triples y's rounding; matches torch's own f16 autograd"),
    torch.bfloat16: Tol(3.2e-2, 3.2e-2, "backward from the saved bf16 output (torch's formula): 1 - y^2, 1 - y, "
                        "y + 1 cancel and y^3 triples y's rounding; matches torch's own bf16 autograd"),
}
_LOOSE_BWD = {"tanh", "sigmoid", "expm1", "rsqrt", "reciprocal"}

for _name, _ref in _TORCH.items():
    _reg(_name, getattr(A, _name), _ref,
         _bwd(getattr(A, f"{_name}_backward"), "output" if _name in _FROM_OUTPUT else "input"),
         ints=_name in _INT_OPS, tol=_FROM_OUTPUT_TOL if _name in _LOOSE_BWD else None)

# piecewise constant: torch's gradient is zero; the backward returns zeros from a fill kernel. The
# f64 finite-difference check is off: the reference is not differentiable at the integers (halves
# for round) that the cases include on purpose.
for _name, _ref in {"sign": torch.sign, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
                    "trunc": torch.trunc}.items():
    _reg(_name, getattr(A, _name), _ref, _bwd(getattr(A, f"{_name}_backward")), ints=True, fd=False)


def _round_ref(x: Any, decimals: int = 0) -> Any:
    return torch.round(x, decimals=decimals)


def _round_dec(decimals: int) -> Callable[[bool, torch.dtype], list[Case]]:
    base = _cases("round")

    def cases(quick: bool, dtype: torch.dtype) -> list[Case]:
        return [Case(c.args, {"decimals": decimals}, c.label, c.k, c.large) for c in base(quick, dtype)]
    return cases


register(OpSpec("round_decimals", lambda x, decimals=0: A.round(x, decimals=decimals), _round_ref, FLOATS,
                _round_dec(2), _bwd(A.round_backward), (0,), fd_check=False))
register(OpSpec("round_decimals_neg", lambda x, decimals=0: A.round(x, decimals=decimals), _round_ref, FLOATS,
                _round_dec(-1), _bwd(A.round_backward), (0,), fd_check=False))

_reg("leaky_relu", A.leaky_relu, F.leaky_relu, _bwd(A.leaky_relu_backward, params=("negative_slope",)),
     kwargs={"negative_slope": 0.2})
_reg("elu", A.elu, F.elu, _bwd(A.elu_backward, params=("alpha",)), kwargs={"alpha": 1.5})
_reg("gelu", A.gelu, F.gelu, _bwd(A.gelu_backward, params=("approximate",)))
_reg("gelu_tanh", A.gelu, F.gelu, _bwd(A.gelu_backward, params=("approximate",)), kwargs={"approximate": "tanh"},
     case_op="gelu")
_reg("softplus", A.softplus, F.softplus, _bwd(A.softplus_backward, params=("beta", "threshold")))
_reg("softplus_beta", A.softplus, F.softplus, _bwd(A.softplus_backward, params=("beta", "threshold")),
     kwargs={"beta": 2.0, "threshold": 5.0}, case_op="softplus")
_reg("npu_gelu", A.npu_gelu, F.gelu, _bwd(A.npu_gelu_backward, params=("approximate",)))


# npu_swiglu ----------------------------------------------------------------------------------------

def _swiglu_ref(x: Any, dim: int = -1) -> Any:
    a, b = x.chunk(2, dim=dim)
    return F.silu(a) * b


def _swiglu_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    def r(*s: int) -> torch.Tensor:
        return (torch.randn(*s) * 2).to(dtype)

    out = [Case((r(37, 74),), label="37x74"), Case((r(3, 2000),), label="3x2000"),
           Case((r(4, 6, 5),), {"dim": 1}, label="4x6x5 dim=1"), Case((r(6, 3),), {"dim": 0}, label="6x3 dim=0"),
           Case((r(1, 2),), label="1x2"), Case((r(0, 8),), label="0x8"),
           Case((r(40, 34).t(),), {"dim": 0}, label="34x40 non-contiguous dim=0"),
           Case((torch.tensor([[float("nan"), 1.0, float("inf"), -float("inf"), 2.0, float("nan"), 3.0, 0.0]])
                 .to(dtype),), label="NaN, inf")]
    if not quick:
        out += [Case((r(5, 8194),), label="5x8194"), Case((r(2, 3, 4, 10),), {"dim": -2}, label="2x3x4x10 dim=-2")]
        out.append(Case((r(4096, 8192),), label="4096x8192", large=True))
    return out


register(OpSpec("npu_swiglu", A.npu_swiglu, _swiglu_ref, FLOATS, _swiglu_cases,
                lambda g, out, args, kw: [A.npu_swiglu_backward(g, args[0], kw.get("dim", -1))], (0,)))
