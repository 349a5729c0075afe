"""Unary math and activations, forward and backward, as DSL kernels (op_library.activations_kernels).

Ops (torch's names, arguments and defaults; CPU tensors in and out):
    neg, abs, sign, exp, expm1, log, log1p, sqrt, rsqrt, reciprocal, sin, cos, tanh, erf, sigmoid,
    floor, ceil, round(input, decimals=0), trunc                          (torch.X; `out=` omitted)
    relu(input, inplace=False), leaky_relu(input, negative_slope=0.01, inplace=False),
    elu(input, alpha=1.0, inplace=False), gelu(input, approximate='none'), silu(input, inplace=False),
    softplus(input, beta=1.0, threshold=20.0), hardswish(input, inplace=False)  (torch.nn.functional.X)
    npu_gelu(input, approximate='none'), npu_swiglu(input, dim=-1)            (torch_npu's)

Dtypes: float32, float16, bfloat16 for all (computed in f32 inside the kernel, rounded once to the
input's dtype, as torch's CPU kernels do). int32 / int8 where torch takes integers: neg, abs, sign,
relu and floor / ceil / round / trunc keep the integer dtype (computed on the integer tile; the
rounding ones return a copy, as torch does); exp ... erf and sigmoid promote an integer input to a
float32 result, as torch does. int64 / float64 / bool inputs are refused (the DSL has no 64-bit
types): NotImplementedError, the type torch uses for a dtype an op lacks.

Backward: `<op>_backward(grad_output, saved, ...)` for every op, also DSL kernels. `saved` is what
torch's own formula keeps: the result for exp, expm1, sqrt, rsqrt, reciprocal, tanh, sigmoid and
relu (`exp_backward(grad, result)`), the input for the others (`log_backward(grad, input)`).
sign, floor, ceil, round and trunc have zero gradient in torch: their backward returns zeros from
a fill kernel (they are differentiable ops whose gradient is 0, as autograd has them).

Dataflow. The input is made contiguous and viewed flat; one launch of `unary_kernel` (or
`unary_backward_kernel`, which reads grad and the saved tensor) streams it GM -> UB -> V -> GM in
double-buffered tiles over all cores: one GM read per input and one write, nothing else. npu_swiglu
views x as (outer, 2, L) (L = half the size of `dim` times the sizes after it) and reads both
halves of a row block in one pass (`swiglu_kernel`); its backward writes both halves of dx.

Small calls: for a contiguous CPU input the launch (tile, output dtype, the marshalled argument
block) is kept per (op, arguments, dtype, shape) as a plan (op_library._plan); `inplace=True` takes
the ordinary path.

Accuracy (f32, against torch on the same inputs): the vector math is within a few ulp (the table of
compiler/backend/vmath.py), inside torch.testing's float32 tolerance except where an entry of
op_library/specs/activations.py says otherwise. expm1 and log1p are composed so they stay accurate
near 0 (Kahan's expm1 = (u - 1) x / log(u), u = exp(x); log1p = log(u) - ((u - 1) - x) / u, u = 1 + x):
within 2 ulp of torch over [-20, 20] and 1e-30 ... 1e-3 (tests/op_library/test_activations.py).
round is half to even (dsl.round), decimals != 0 as torch: nearbyint(x * 10^d) / 10^d in f32.
NaN and inf follow torch (log(-1), sqrt(-1) NaN; exp(inf) inf; tanh(+-inf) +-1; sign(NaN) 0;
relu(-0) = -0). Where torch's vectorised and scalar CPU paths disagree (hardswish's gradient at NaN)
the vectorised one, which real tensors take, is followed.

Known limits: the vector math gives tanh(-0) = sin(-0) = +0 (torch: -0) and flushes results below
~1e-38 that torch returns as subnormals (sigmoid(-100), silu(-100)); `inplace=True` writes the result into a contiguous input's own memory; a
non-contiguous input is computed into a new tensor and copied back (torch's copy_).
"""
from __future__ import annotations

import builtins
import operator
from typing import Any

import torch

from dsl.errors import KernelError
from op_library._plan import PLANS, Plan, Ref, scalar_sig, sigs, tensor_sig
from op_library.activations_kernels import (
    swiglu_backward_kernel,
    swiglu_kernel,
    unary_backward_kernel,
    unary_kernel,
    zeros_kernel,
)

__all__ = [
    "neg", "abs", "sign", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh",
    "erf", "sigmoid", "relu", "leaky_relu", "elu", "gelu", "silu", "softplus", "hardswish", "floor", "ceil",
    "round", "trunc", "npu_gelu", "npu_swiglu",
    "neg_backward", "abs_backward", "sign_backward", "exp_backward", "expm1_backward", "log_backward",
    "log1p_backward", "sqrt_backward", "rsqrt_backward", "reciprocal_backward", "sin_backward", "cos_backward",
    "tanh_backward", "erf_backward", "sigmoid_backward", "relu_backward", "leaky_relu_backward", "elu_backward",
    "gelu_backward", "silu_backward", "softplus_backward", "hardswish_backward", "floor_backward",
    "ceil_backward", "round_backward", "trunc_backward", "npu_gelu_backward", "npu_swiglu_backward",
]

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int8)
_TORCH_NAME = {torch.int32: "Int", torch.int8: "Char", torch.int64: "Long", torch.int16: "Short",
               torch.bool: "Bool", torch.uint8: "Byte", torch.float64: "Double"}
#: ops that keep an integer dtype (computed on the integer tile) / that promote an integer input to f32
INT_OPS = frozenset({"neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc"})
PROMOTE_OPS = frozenset({"exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh",
                         "erf", "sigmoid"})
#: the largest tile (elements) tried first; an op whose buffers do not all fit UB double-buffered at
#: that size (E301 at compile time, before anything runs) takes the next power of two down, once
#: per specialisation (`_fit`)
MAX_TILE = 8192
_TILES: dict[tuple[Any, ...], int] = {}


def _fit(kern: Any, args: tuple[Any, ...], key: tuple[Any, ...], **consts: Any) -> None:
    """kern(*args, TILE=t, **consts) with the largest t <= MAX_TILE whose buffers fit UB."""
    key = (kern.__name__, *key,
           tuple(a.dtype for a in args if isinstance(a, torch.Tensor)))
    tile = _TILES.get(key, MAX_TILE)
    while True:
        try:
            kern(*args, TILE=tile, **consts)
        except KernelError as e:
            if e.code != "E301" or tile <= 512:
                raise
            tile //= 2
            continue
        _TILES[key] = tile
        return


def _check_tensor(fname: str, x: Any, arg: str = "input", pos: int = 1) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fname}(): argument '{arg}' (position {pos}) must be Tensor, not {type(x).__name__}")
    if x.device.type != "cpu":
        raise RuntimeError(f"{fname}(): expected a CPU tensor for '{arg}', got device {x.device}")


def _kernel_dtype(fname: str, kname: str, x: torch.Tensor, ints: bool) -> None:
    """Refuse dtypes the kernels do not take, in torch's words ('"silu_cpu" not implemented for 'Int'')."""
    if x.dtype in FLOATS or (ints and x.dtype in INTS):
        return
    what = _TORCH_NAME.get(x.dtype, str(x.dtype).removeprefix("torch."))
    extra = " (the DSL has no 64-bit or bool tensors)" if x.dtype in (torch.int64, torch.float64, torch.bool) \
        else ""
    raise NotImplementedError(f"\"{kname}_cpu\" not implemented for '{what}'{extra}")


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(-1)


def _launch_unary(op: str, x: torch.Tensor, a: float = 0.0, b: float = 0.0, out: torch.Tensor | None = None,
                  kop: str | None = None) -> torch.Tensor:
    """One launch of unary_kernel: OP `kop or op` over x's elements into out (new if None)."""
    kop = kop or op
    floating = x.dtype in FLOATS or op in PROMOTE_OPS
    dtype = x.dtype if x.dtype in FLOATS or op in INT_OPS else torch.float32
    y = torch.empty(x.shape, dtype=dtype) if out is None else out
    if x.numel():
        _fit(unary_kernel, (_flat(x), y.view(-1), float(a), float(b)), (kop, floating), OP=kop, FLOAT=floating)
    return y


def _fit_plan(plan: Plan, env: list[torch.Tensor], kern: Any, args: tuple[Any, ...], key: tuple[Any, ...],
              **consts: Any) -> None:
    """`_fit` for a planned launch: the same tile choice (and the same `_TILES` memo), kept in the plan."""
    key = (kern.__name__, *key, tuple(a.resolve(env).dtype for a in args if isinstance(a, Ref)))
    tile = _TILES.get(key, MAX_TILE)
    while True:
        try:
            plan.launch(env, kern, *args, TILE=tile, **consts)
        except KernelError as e:
            if e.code != "E301" or tile <= 512:
                raise
            tile //= 2
            continue
        _TILES[key] = tile
        return


def _plan_unary(key: tuple[Any, ...], op: str, x: torch.Tensor, a: float, b: float, kop: str | None) \
        -> torch.Tensor:
    """`_launch_unary` for a contiguous input, kept as the plan for `key` (the same launch)."""
    kop = kop or op
    floating = x.dtype in FLOATS or op in PROMOTE_OPS
    dtype = x.dtype if x.dtype in FLOATS or op in INT_OPS else torch.float32
    plan = Plan((x,), ret=_SECOND)
    env = [x, plan.alloc(x.shape, dtype)]
    n = x.numel()
    if n:
        _fit_plan(plan, env, unary_kernel, (Ref(0, (n,)), Ref(1, (n,)), float(a), float(b)), (kop, floating),
                  OP=kop, FLOAT=floating)
    PLANS.put(key, plan)
    return env[1]


_SECOND = operator.itemgetter(1)
_THIRD = operator.itemgetter(2)


def _unary(op: str, x: Any, a: float = 0.0, b: float = 0.0, kop: str | None = None, fname: str | None = None,
           inplace: bool = False) -> torch.Tensor:
    if not inplace and isinstance(x, torch.Tensor):
        # a contiguous CPU input: the plan for this (op, arguments, dtype, shape), or a new one
        sig, ka, kb = tensor_sig(x), scalar_sig(a), scalar_sig(b)
        if sig is not None and ka is not None and kb is not None:
            key = ("unary", op, kop, ka, kb, sig)
            plan = PLANS.get(key)
            if plan is not None:
                return plan(x)
            if PLANS.enabled():
                _kernel_dtype(fname or op, op, x, op in INT_OPS or op in PROMOTE_OPS)
                return _plan_unary(key, op, x, a, b, kop)
    fname = fname or op
    _check_tensor(fname, x)
    _kernel_dtype(fname, op, x, op in INT_OPS or op in PROMOTE_OPS)
    if not inplace:
        return _launch_unary(op, x, a, b, kop=kop)
    if x.is_contiguous():   # the kernel reads each element before it writes it: in place is safe
        return _launch_unary(op, x, a, b, out=x, kop=kop)
    return x.copy_(_launch_unary(op, x, a, b, kop=kop))


def _backward(op: str, grad: Any, saved: Any, a: float = 0.0, b: float = 0.0, saved_name: str = "input",
              kname: str | None = None) -> torch.Tensor:
    """One launch of unary_backward_kernel: the input's gradient, in saved's dtype (grad's if saved's
    is an integer one)."""
    key = None
    ka, kb = scalar_sig(a), scalar_sig(b)
    if ka is not None and kb is not None and PLANS.enabled():
        s = sigs((grad, saved))
        if s is not None:
            key = ("unary_bwd", op, kname, saved_name, ka, kb, *s)
            plan = PLANS.get(key)
            if plan is not None:
                return plan(grad, saved)
    fname = f"{kname or op}_backward"
    _check_tensor(fname, grad, "grad_output", 1)
    _check_tensor(fname, saved, saved_name, 2)
    if tuple(grad.shape) != tuple(saved.shape):
        raise RuntimeError(f"{fname}(): grad_output of shape {list(grad.shape)} does not match {saved_name} of "
                           f"shape {list(saved.shape)}")
    _kernel_dtype(fname, fname, grad, False)
    _kernel_dtype(fname, fname, saved, True)
    dt = saved.dtype if saved.dtype in FLOATS else grad.dtype
    if key is not None:   # contiguous inputs: the same launch, kept as the plan for this key
        plan = Plan((grad, saved), ret=_THIRD)
        env = [grad, saved, plan.alloc(saved.shape, dt)]
        n = saved.numel()
        if n:
            _fit_plan(plan, env, unary_backward_kernel, (Ref(0, (n,)), Ref(1, (n,)), Ref(2, (n,)), float(a), float(b)),
                      (op,), OP=op)
        PLANS.put(key, plan)
        return env[2]
    dx = torch.empty(saved.shape, dtype=dt)
    if dx.numel():
        _fit(unary_backward_kernel, (_flat(grad), _flat(saved), dx.view(-1), float(a), float(b)), (op,), OP=op)
    return dx


def _zeros_like(fname: str, grad: Any, x: Any) -> torch.Tensor:
    _check_tensor(fname, grad, "grad_output", 1)
    _check_tensor(fname, x, "input", 2)
    if tuple(grad.shape) != tuple(x.shape):
        raise RuntimeError(f"{fname}(): grad_output of shape {list(grad.shape)} does not match input of "
                           f"shape {list(x.shape)}")
    dx = torch.empty(x.shape, dtype=x.dtype if x.dtype in FLOATS else grad.dtype)
    if dx.numel():
        zeros_kernel(dx.view(-1))
    return dx


# ------------------------------------------------------------------ torch.X (unary math)

def neg(input: Any) -> torch.Tensor:
    """torch.neg: -input (float and int32 / int8)."""
    if isinstance(input, torch.Tensor) and input.dtype == torch.bool:
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                           "invert a mask, use the `~` or `logical_not()` operator instead.")
    return _unary("neg", input)


def abs(input: Any) -> torch.Tensor:
    """torch.abs (float and int32 / int8)."""
    return _unary("abs", input)


def sign(input: Any) -> torch.Tensor:
    """torch.sign: 1, 0 or -1 (sign(NaN) = 0, as torch's CPU kernel; float and int32 / int8)."""
    return _unary("sign", input)


def exp(input: Any) -> torch.Tensor:
    """torch.exp (an int input gives float32)."""
    return _unary("exp", input)


def expm1(input: Any) -> torch.Tensor:
    """torch.expm1: exp(x) - 1, accurate near 0 (module docstring)."""
    return _unary("expm1", input)


def log(input: Any) -> torch.Tensor:
    """torch.log (log(0) = -inf, log(x < 0) = NaN)."""
    return _unary("log", input)


def log1p(input: Any) -> torch.Tensor:
    """torch.log1p: log(1 + x), accurate near 0 (module docstring)."""
    return _unary("log1p", input)


def sqrt(input: Any) -> torch.Tensor:
    """torch.sqrt."""
    return _unary("sqrt", input)


def rsqrt(input: Any) -> torch.Tensor:
    """torch.rsqrt: 1 / sqrt(x)."""
    return _unary("rsqrt", input)


def reciprocal(input: Any) -> torch.Tensor:
    """torch.reciprocal: 1 / x."""
    return _unary("reciprocal", input)


def sin(input: Any) -> torch.Tensor:
    """torch.sin."""
    return _unary("sin", input)


def cos(input: Any) -> torch.Tensor:
    """torch.cos."""
    return _unary("cos", input)


def tanh(input: Any) -> torch.Tensor:
    """torch.tanh."""
    return _unary("tanh", input)


def erf(input: Any) -> torch.Tensor:
    """torch.erf."""
    return _unary("erf", input)


def sigmoid(input: Any) -> torch.Tensor:
    """torch.sigmoid."""
    return _unary("sigmoid", input)


def floor(input: Any) -> torch.Tensor:
    """torch.floor (an integer input is returned as a copy, as torch does)."""
    return _unary("floor", input)


def ceil(input: Any) -> torch.Tensor:
    """torch.ceil."""
    return _unary("ceil", input)


def trunc(input: Any) -> torch.Tensor:
    """torch.trunc."""
    return _unary("trunc", input)


def round(input: Any, *, decimals: int = 0) -> torch.Tensor:
    """torch.round: to nearest, ties to even. decimals != 0 as torch: nearbyint(x * 10^d) / 10^d
    (d > 0) or nearbyint(x / 10^-d) * 10^-d (d < 0), in f32; float inputs only then (torch too)."""
    _check_tensor("round", input)
    if isinstance(decimals, bool) or not isinstance(decimals, int):
        raise TypeError(f"round() received an invalid combination of arguments - got (Tensor, "
                        f"decimals={type(decimals).__name__}), but expected (Tensor input, *, int decimals)")
    if decimals == 0:
        return _unary("round", input)
    _kernel_dtype("round", "round", input, False)
    scale = float(torch.tensor(10.0 ** builtins.abs(decimals), dtype=torch.float32))  # opmath pow(10, |d|)
    return _unary("round", input, scale, kop="round_up" if decimals > 0 else "round_down")


# ------------------------------------------------------------------ torch.nn.functional.X (activations)

def relu(input: Any, inplace: bool = False) -> torch.Tensor:
    """F.relu (float and int32 / int8)."""
    if isinstance(input, torch.Tensor) and input.dtype == torch.bool:
        raise RuntimeError("Boolean inputs not supported for relu")
    return _unary("relu", input, inplace=inplace)


def leaky_relu(input: Any, negative_slope: float = 0.01, inplace: bool = False) -> torch.Tensor:
    """F.leaky_relu: x > 0 ? x : x * negative_slope."""
    return _unary("leaky_relu", input, float(negative_slope), inplace=inplace)


def elu(input: Any, alpha: float = 1.0, inplace: bool = False) -> torch.Tensor:
    """F.elu: x > 0 ? x : alpha * expm1(x)."""
    return _unary("elu", input, float(alpha), inplace=inplace)


def _approximate(fname: str, approximate: Any) -> str:
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    return "gelu" if approximate == "none" else "gelu_tanh"


def gelu(input: Any, approximate: str = "none") -> torch.Tensor:
    """F.gelu: x Phi(x) (approximate='none', the erf form) or the tanh approximation."""
    return _unary("gelu", input, kop=_approximate("gelu", approximate))


def silu(input: Any, inplace: bool = False) -> torch.Tensor:
    """F.silu: x * sigmoid(x)."""
    return _unary("silu", input, inplace=inplace)


def softplus(input: Any, beta: float = 1.0, threshold: float = 20.0) -> torch.Tensor:
    """F.softplus: x * beta > threshold ? x : log1p(exp(x * beta)) / beta."""
    beta, threshold = float(beta), float(threshold)
    return _unary("softplus", input, beta, threshold, kop="softplus1" if beta == 1.0 else "softplus")


def hardswish(input: Any, inplace: bool = False) -> torch.Tensor:
    """F.hardswish: x * min(max(x + 3, 0), 6) / 6."""
    return _unary("hardswish", input, inplace=inplace)


def npu_gelu(input: Any, approximate: str = "none") -> torch.Tensor:
    """torch_npu.npu_gelu: the same as F.gelu."""
    return _unary("gelu", input, kop=_approximate("npu_gelu", approximate), fname="npu_gelu")


def _swiglu_view(fname: str, x: Any, dim: int) -> tuple[torch.Tensor, list[int], int]:
    """(x as (outer, 2, L), the output's shape, dim normalised)."""
    _check_tensor(fname, x, "input")
    _kernel_dtype(fname, fname, x, False)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{fname}(): argument 'dim' must be int, not {type(dim).__name__}")
    nd = max(x.dim(), 1)
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
    if x.dim() == 0:
        raise RuntimeError(f"{fname}(): x must have at least one dimension")
    d = dim % nd
    n = x.shape[d]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    outer = 1
    for s in x.shape[:d]:
        outer *= s
    inner = 1
    for s in x.shape[d + 1:]:
        inner *= s
    shape = list(x.shape)
    shape[d] = n // 2
    return x.contiguous().view(outer, 2, (n // 2) * inner), shape, d


def _swiglu_tile(L: int) -> int:
    c = 256
    while c < L and c < 4096:
        c *= 2
    return c


def npu_swiglu(input: Any, dim: int = -1) -> torch.Tensor:
    """torch_npu.npu_swiglu: silu(a) * b with a, b the first and second halves of x along dim."""
    x3, shape, _ = _swiglu_view("npu_swiglu", input, dim)
    y = torch.empty(shape, dtype=input.dtype)
    if y.numel():
        swiglu_kernel(x3, y.view(x3.shape[0], x3.shape[2]), C=_swiglu_tile(x3.shape[2]))
    return y


# ------------------------------------------------------------------ backward

def neg_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """-grad_output."""
    return _backward("neg", grad_output, input)


def abs_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """grad_output * sgn(input)."""
    return _backward("abs", grad_output, input)


def sign_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """Zeros (sign is piecewise constant; torch's gradient is 0)."""
    return _zeros_like("sign_backward", grad_output, input)


def floor_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """Zeros (torch's gradient of floor)."""
    return _zeros_like("floor_backward", grad_output, input)


def ceil_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """Zeros (torch's gradient of ceil)."""
    return _zeros_like("ceil_backward", grad_output, input)


def round_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """Zeros (torch's gradient of round, any decimals)."""
    return _zeros_like("round_backward", grad_output, input)


def trunc_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """Zeros (torch's gradient of trunc)."""
    return _zeros_like("trunc_backward", grad_output, input)


def exp_backward(grad_output: Any, result: Any) -> torch.Tensor:
    """grad_output * result."""
    return _backward("exp", grad_output, result, saved_name="result")


def expm1_backward(grad_output: Any, result: Any) -> torch.Tensor:
    """grad_output * (result + 1)."""
    return _backward("expm1", grad_output, result, saved_name="result")


def log_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """grad_output / input."""
    return _backward("log", grad_output, input)


def log1p_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """grad_output / (input + 1)."""
    return _backward("log1p", grad_output, input)


def sqrt_backward(grad_output: Any, result: Any) -> torch.Tensor:
    """grad_output / (2 result)."""
    return _backward("sqrt", grad_output, result, saved_name="result")


def rsqrt_backward(grad_output: Any, result: Any) -> torch.Tensor:
    """-0.5 grad_output result^3."""
    return _backward("rsqrt", grad_output, result, saved_name="result")


def reciprocal_backward(grad_output: Any, result: Any) -> torch.Tensor:
    """-grad_output result^2."""
    return _backward("reciprocal", grad_output, result, saved_name="result")


def sin_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """grad_output cos(input)."""
    return _backward("sin", grad_output, input)


def cos_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """-grad_output sin(input)."""
    return _backward("cos", grad_output, input)


def tanh_backward(grad_output: Any, output: Any) -> torch.Tensor:
    """grad_output (1 - output^2) (torch's tanh_backward)."""
    return _backward("tanh", grad_output, output, saved_name="output")


def erf_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """2 / sqrt(pi) exp(-input^2) grad_output."""
    return _backward("erf", grad_output, input)


def sigmoid_backward(grad_output: Any, output: Any) -> torch.Tensor:
    """grad_output (1 - output) output (torch's sigmoid_backward)."""
    return _backward("sigmoid", grad_output, output, saved_name="output")


def relu_backward(grad_output: Any, result: Any) -> torch.Tensor:
    """result <= 0 ? 0 : grad_output (torch's threshold_backward on the result)."""
    return _backward("relu", grad_output, result, saved_name="result")


def leaky_relu_backward(grad_output: Any, input: Any, negative_slope: float = 0.01) -> torch.Tensor:
    """input > 0 ? grad_output : grad_output * negative_slope."""
    return _backward("leaky_relu", grad_output, input, float(negative_slope))


def elu_backward(grad_output: Any, input: Any, alpha: float = 1.0) -> torch.Tensor:
    """input > 0 ? grad_output : grad_output * alpha * exp(input)."""
    return _backward("elu", grad_output, input, float(alpha))


def gelu_backward(grad_output: Any, input: Any, approximate: str = "none") -> torch.Tensor:
    """torch's gelu_backward: grad (Phi(x) + x phi(x)), or the derivative of the tanh form."""
    return _backward(_approximate("gelu_backward", approximate), grad_output, input, kname="gelu")


def npu_gelu_backward(grad_output: Any, input: Any, approximate: str = "none") -> torch.Tensor:
    """torch_npu.npu_gelu_backward: as gelu_backward."""
    return _backward(_approximate("npu_gelu_backward", approximate), grad_output, input, kname="npu_gelu")


def silu_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """grad_output s (1 + x (1 - s)), s = sigmoid(x)."""
    return _backward("silu", grad_output, input)


def softplus_backward(grad_output: Any, input: Any, beta: float = 1.0, threshold: float = 20.0) -> torch.Tensor:
    """x beta > threshold ? grad : grad z / (z + 1), z = exp(x beta)."""
    return _backward("softplus", grad_output, input, float(beta), float(threshold))


def hardswish_backward(grad_output: Any, input: Any) -> torch.Tensor:
    """x <= -3 ? 0 : x < 3 ? grad (x / 3 + 0.5) : grad, as torch's scalar CPU kernel (grad at a NaN input;
    torch's vectorised kernel gives NaN there with AVX2 and grad with AVX-512)."""
    return _backward("hardswish", grad_output, input)


def npu_swiglu_backward(grad_output: Any, input: Any, dim: int = -1) -> torch.Tensor:
    """The gradient of npu_swiglu with respect to x (both halves): with a, b the halves and
    s = sigmoid(a), da = grad b s (1 + a (1 - s)), db = grad silu(a)."""
    x3, shape, _ = _swiglu_view("npu_swiglu_backward", input, dim)
    _check_tensor("npu_swiglu_backward", grad_output, "grad_output", 1)
    if list(grad_output.shape) != shape:
        raise RuntimeError(f"npu_swiglu_backward(): grad_output of shape {list(grad_output.shape)} does not match "
                           f"the output's shape {shape}")
    _kernel_dtype("npu_swiglu_backward", "npu_swiglu_backward", grad_output, False)
    dx = torch.empty(input.shape, dtype=input.dtype)
    if dx.numel():
        swiglu_backward_kernel(grad_output.contiguous().view(x3.shape[0], x3.shape[2]), x3, dx.view(x3.shape),
                               C=_swiglu_tile(x3.shape[2]))
    return dx
