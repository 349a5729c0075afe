"""Elementwise binary (and ternary) ops with torch's broadcasting and type promotion, forward and
backward, as DSL kernels (op_library.elementwise_kernels).

Ops (torch's names and signatures; `out=` is omitted everywhere):
  add(input, other, *, alpha=1), sub(input, other, *, alpha=1), mul, div(input, other, *,
  rounding_mode=None | "trunc" | "floor"), maximum, minimum, pow(input, exponent) (tensor or scalar
  exponent, scalar base), where(condition, input, other), masked_fill(input, mask, value),
  clamp(input, min=None, max=None) (scalar or tensor bounds); eq, ne, lt, le, gt, ge (bool out);
  logical_and, logical_or, logical_xor, logical_not (bool out, no backward);
  npu_dtype_cast(input, dtype) (torch_npu's name; `to_dtype` is the same) among f32 / f16 / bf16 /
  i32 / i8 / bool; sum_to_size(grad, shape) (sum a broadcast gradient back to an operand's shape, f32
  accumulation; the norm / loss modules reuse it).
Backward: `<op>_backward(grad, ...)` for add, sub, mul, div (rounding_mode None; a rounding mode
gives zeros as torch does), maximum, minimum, pow, where, masked_fill, clamp: the gradients of every
tensor operand, each summed back to that operand's shape (`sum_to_size`), in the operand's dtype.

Dtypes: float32, float16, bfloat16 everywhere; int32 (and int8 / bool where torch takes them) for
add, sub, mul, div (true division gives float32), maximum, minimum, clamp, where, masked_fill,
comparisons and logical ops. int64 / float64 tensors are refused (the DSL has neither): convert to
int32 / float32 first. Integer pow is not supported (the vector unit's pow is float only).

Dataflow. The host does shapes only: it broadcasts the shapes (torch's error text on a mismatch),
drops size-1 dimensions, merges neighbouring dimensions that broadcast alike for every operand and
views the output and each operand in the resulting frame of three dimensions (P, M, N) (more than
three after merging: the leading ones are looped on the host, one launch per index). One launch of
`ew_kernel` then computes the whole result: blocks of R x C elements of the (M, N) plane are dealt
over the cores; an operand broadcast along M is loaded as one (C,) row per block, along N as an
(R, 1) column, a Python scalar is a kernel scalar. Type promotion is torch.result_type on the host;
the kernel widens operands to f32 in UB where that is what torch computes (mixed float dtypes,
int -> float32, compound ops on f16/bf16 such as `a + alpha * b`), and int operands whose promoted
type is f16/bf16 go through `cast_kernel` first (torch rounds them to that dtype before computing).

Small calls: the host work above is done once per signature (the op, each operand's dtype and
shape or a Python number's type and exact value, alpha, rounding_mode) and kept as a plan
(op_library._plan) when the operands are contiguous CPU tensors and the call needs one launch and no
pre-cast; a later call with that signature allocates the output and launches `ew_kernel` with the
argument block marshalled once (~9 us per call on 64 elements, Zen 3, bench/overhead.py).

Blocks are R x C with C in 16 / 128 / 1024 / 4096 and R x C = 4096 elements (`_block`): few compiled
variants per op and dtype. Performance (4096 x 4096 f32, ascend910b1, 24 cores, dsl.record):
add 179.6k cycles at 97.5% of the roofline, add with a (4096,) row 117.8k at 96.2%, mul with a
(4096, 1) column 92.2k at 95.2%, where 203.5k at 96.8%, sum_to_size to (4096,) 138.9k at 95.1% (two
launches), to (4096, 1) 96.4k at 91.3%. Host time within ~1.1-1.25x of torch on one thread
for the binary ops (the host streams each block's loads, op and store in one pass).

Python numbers meet f16/bf16 tensors as torch's CPU kernels take them: converted to the tensor's
dtype (add / sub / comparisons / pow / where ..., and alpha), except in mul and div, which read them
(and 0-dim tensors) at f32. torch's vector add fuses a + alpha * b into one f32 FMA; here it is a
multiply and an add in f32 (results can differ by one ulp where alpha is not a power of two).

Numerics: f16/bf16 compute in f32 and round once, as torch's CPU kernels do. maximum/minimum/clamp
propagate NaN; comparisons with NaN are False (ne: True). div floor: floor(a / b), one step down
where a / b rounded up onto an integer, decided by the sign of the exact remainder a - q*b (Dekker's
product), which is what torch's fmod-based rule decides (1.0 // 0.1 == 9); inf // finite gives
+-inf where torch gives NaN, and values beyond ~1e34 skip the correction. Integer division by zero gives 0 here (torch raises ZeroDivisionError).
float -> int casts truncate toward zero; NaN, inf and values outside int32 give INT_MIN (and its low
byte, 0, for int8), exactly what torch's CPU cast gives on x86 (C++ leaves it undefined).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from op_library._plan import PLANS, Plan, Ref, scalar_sig, tensor_sig
from op_library.elementwise_kernels import cast_kernel, colsum_kernel, ew_kernel, rowsum_kernel

__all__ = [
    "add", "sub", "mul", "div", "maximum", "minimum", "pow", "where", "masked_fill", "clamp",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
    "npu_dtype_cast", "to_dtype", "sum_to_size",
    "add_backward", "sub_backward", "mul_backward", "div_backward", "maximum_backward", "minimum_backward",
    "pow_backward", "where_backward", "masked_fill_backward", "clamp_backward",
]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_HALF = (torch.float16, torch.bfloat16)
_SUPPORTED = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.bool)
_ELEMS = 4096        # elements per block (R x C); 3 operands + casts fit UB double-buffered at f32
_COMPOUND = {"add_alpha", "sub_alpha", "div_trunc", "div_floor"}   # f16/bf16 compute these in f32
_OPMATH_SCALARS = {"mul", "div"}
_ABSENT = 16
_SCALAR = 8


# ------------------------------------------------------------------ shapes
def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """torch's broadcast of the shapes, folded left to right, with torch's error text."""
    out: tuple[int, ...] = ()
    for i, s in enumerate(shapes):
        if i == 0:
            out = tuple(s)
            continue
        n = max(len(out), len(s))
        a = (1,) * (n - len(out)) + out
        b = (1,) * (n - len(s)) + tuple(s)
        res = []
        for d, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y and x != 1 and y != 1:
                raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at "
                                   f"non-singleton dimension {d}")
            res.append(y if x == 1 else x)
        out = tuple(res)
    return out


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


_WIDE = {"div_floor": 2048}   # ops whose temporaries need narrower blocks: div_floor's exact remainder
# (Veltkamp splits, Dekker's product) keeps ~14 live tiles, which at 4096 columns overflow UB (E301)


def _block(M: int, N: int, op: str = "") -> tuple[int, int]:
    """(C, R): a block of R x C elements of the (M, N) plane, from a few sizes only (each is a
    compiled variant): C the power of two in 16, 128, 1024, 4096 that covers N (or 4096; `_WIDE`
    caps it per op), R = 1 for a single row, else as many rows as make _ELEMS elements."""
    C = min(next((c for c in (16, 128, 1024) if N <= c), _ELEMS), _WIDE.get(op, _ELEMS))
    return C, (1 if M == 1 else _ELEMS // C)


def _frame(out_shape: tuple[int, ...], shapes: Sequence[tuple[int, ...] | None]) \
        -> tuple[list[tuple[int, tuple[bool, ...]]], int]:
    """The merged dimensions [(size, broadcast flag per operand)] of the broadcast (size-1 dims
    dropped, neighbours that broadcast alike merged) and the number of tensor operands."""
    n = len(out_shape)
    tens = [s for s in shapes if s is not None]
    dims: list[tuple[int, tuple[bool, ...]]] = []
    for d in range(n):
        size = out_shape[d]
        if size == 1:
            continue
        flags = []
        for s in tens:
            k = d - (n - len(s))
            flags.append(k < 0 or s[k] == 1)
        f = tuple(flags)
        if dims and dims[-1][1] == f:
            dims[-1] = (dims[-1][0] * size, f)
        else:
            dims.append((size, f))
    return dims, len(tens)


def _round_scalar(v: Any, dtype: torch.dtype) -> float:
    """A Python number as the f16 / bf16 value torch converts it to (one number, on the host)."""
    return float(torch.tensor(float(v), dtype=torch.float32).to(dtype))


def _check_dtype(t: torch.Tensor, what: str) -> None:
    if t.dtype not in _SUPPORTED:
        raise TypeError(f"{what}: dtype {t.dtype} is not supported by the DSL kernels (float32, float16, "
                        f"bfloat16, int32, int8, bool); convert it first (e.g. .to(torch.int32))")


def _cast_to(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else npu_dtype_cast(t, dtype)


def _launch(op: str, operands: Sequence[Any], out_dtype: torch.dtype, compute: torch.dtype | None,
            s1: float = 0.0, keep: tuple[int, ...] = (), key: Hashable | None = None) -> torch.Tensor:
    """Run ew_kernel for `op` over operands (tensors, Python numbers or None), broadcasting them;
    `compute` is the promoted dtype the op works in (None: each operand as loaded, for logical ops);
    operands at the indices `keep` (conditions, masks) are never converted. With a plan `key` (made
    by `_fast` from every fact this host work reads), a call that needs one launch and no cast is
    kept as a Plan for the next call with that key."""
    shapes = [tuple(o.shape) if isinstance(o, torch.Tensor) else None for o in operands]
    out_shape = _broadcast([s for s in shapes if s is not None])
    out = torch.empty(out_shape, dtype=out_dtype)
    if out.numel() == 0:
        return out
    # the dtype the kernel computes in: f16/bf16 compound ops in f32 (torch's opmath); mul and div
    # take a 0-dim tensor operand at its own precision (torch reads CPU scalars unconverted there)
    kern_compute = torch.float32 if compute in _HALF and op in _COMPOUND else compute
    keep_scalar = compute in _HALF and op in _OPMATH_SCALARS
    if keep_scalar and any(isinstance(o, torch.Tensor) and o.dim() == 0 and o.dtype != compute for o in operands):
        kern_compute = torch.float32
    ops: list[Any] = []
    codes: list[int] = []
    for i, o in enumerate(operands):
        code = 0
        if not isinstance(o, torch.Tensor) and o is not None and compute in _HALF and not keep_scalar:
            o = _round_scalar(o, compute)    # torch converts a Python number to the tensors' dtype
        if isinstance(o, torch.Tensor):
            if keep_scalar and kern_compute == torch.float32 and o.dtype.is_floating_point and i not in keep:
                code = int(o.dtype != torch.float32)
            elif compute is not None and i not in keep and o.dtype != kern_compute:
                if compute in _HALF and o.dtype != compute:
                    o = _cast_to(o, compute)          # torch rounds other dtypes to f16/bf16 first
                if kern_compute == torch.float32:
                    code = 1 if o.dtype != torch.float32 else 0
                elif kern_compute == torch.int32:
                    code = 2
                else:
                    o = _cast_to(o, kern_compute)
            o = o.contiguous()
        ops.append(o)
        codes.append(code)
    dims, _ = _frame(out_shape, shapes)
    lead, frame = dims[:-3], dims[-3:]
    frame = [(1, (True,) * len([s for s in shapes if s is not None]))] * (3 - len(frame)) + frame
    P, M, N = (d[0] for d in frame)
    C, R = _block(M, N, op)
    out_v = out.view(*[d[0] for d in lead], P, M, N)
    consts: dict[str, Any] = {"OP": op, "R": R, "C": C}
    scal = {"sa": 0.0, "sb": 0.0, "sc": 0.0, "ia": 0, "ib": 0, "ic": 0, "qa": 0, "qb": 0, "qc": 0}
    views: list[Any] = []
    vshapes: list[tuple[int, list[int]] | None] = []   # (tensor operand index, view shape) per slot
    is_int = kern_compute is not None and not kern_compute.is_floating_point
    ti = 0
    for name, o in zip("abc", list(ops) + [None] * (3 - len(ops)), strict=True):
        up = name.upper()
        if o is None:
            consts["L" + up] = _ABSENT
            views.append(None)
            vshapes.append(None)
        elif not isinstance(o, torch.Tensor):
            consts["L" + up] = _SCALAR
            scal["s" + name] = float(o)
            scal["i" + name] = int(o) if is_int else 0
            views.append(None)
            vshapes.append(None)
        else:
            fl = [frame[k][1][ti] for k in range(3)]
            lf = [d[1][ti] for d in lead]
            ti += 1
            consts["L" + up] = 2 * int(fl[1]) + 4 * int(fl[2])
            scal["q" + name] = int(not fl[0])
            shape = [1 if b else d[0] for b, d in zip(lf + fl, lead + frame, strict=True)]
            views.append((o.view(*shape), lf))
            vshapes.append((ti - 1, shape))
            consts["C" + up] = codes["abc".index(name)]
    if kern_compute is not None and out_dtype != torch.bool and kern_compute != out_dtype:
        consts["CO"] = 1
    consts["INT"] = int(is_int)
    tens = [o for o in operands if isinstance(o, torch.Tensor)]
    if key is not None and not lead and all(a is b for a, b in zip(ops, operands, strict=True)
                                            if isinstance(b, torch.Tensor)):
        # one launch on the operands as given: keep it as the plan for this key
        nt = len(tens)
        plan = Plan(tens, ret=lambda env: env[nt])
        plan.adopt(out_shape, out_dtype)   # `out`, allocated above
        pmn = (P, M, N)
        refs = [Ref(nt, pmn) if v is None else Ref(v[0], v[1]) for v in vshapes]
        words = [scal["sa"], scal["sb"], scal["sc"], scal["ia"], scal["ib"], scal["ic"], float(s1),
                 int(s1) if is_int else 0, scal["qa"], scal["qb"], scal["qc"]]
        plan.launch([*tens, out], ew_kernel, *refs, Ref(nt, pmn), *words, **consts)
        slot = next((i for i, o in enumerate(operands) if o is not None and not isinstance(o, torch.Tensor)), None)
        if slot is not None or op.endswith("_alpha"):   # the plan is keyed by these scalars' types
            plan.scalars_of = _scalar_words(words, slot, compute if compute in _HALF and not keep_scalar else None,
                                            is_int, compute)
        PLANS.put(key, plan)
        return out
    for idx in itertools.product(*[range(d[0]) for d in lead]):
        args = []
        for v in views:
            if v is None:
                args.append(out_v[idx])        # an unused operand slot: any tensor will do
            else:
                t, lf = v
                args.append(t[tuple(0 if b else i for b, i in zip(lf, idx, strict=True))])
        ew_kernel(args[0], args[1], args[2], out_v[idx], scal["sa"], scal["sb"], scal["sc"], scal["ia"],
                  scal["ib"], scal["ic"], float(s1), int(s1) if is_int else 0, scal["qa"], scal["qb"],
                  scal["qc"], **consts)
    return out


def _scalar_words(words: list[Any], slot: int | None, half: torch.dtype | None, is_int: bool,
                  compute: torch.dtype | None) -> Callable[[Any, Any], tuple[Any, ...]]:
    """For a plan keyed by the types of its Python-number operand and alpha (not their values): the
    kernel's scalar arguments for this call's values, converted as `_launch` and `_arith` convert them
    (an f16 / bf16 op rounds both to its dtype first, as torch does)."""
    def of(v: Any, alpha: Any) -> tuple[Any, ...]:
        w = list(words)
        if slot is not None:
            if half is not None:
                v = _round_scalar(v, half)
            w[slot] = float(v)
            w[3 + slot] = int(v) if is_int else 0
        if alpha is not None:
            a = _round_scalar(alpha, compute) if compute in _HALF else alpha
            w[6] = float(a)
            w[7] = int(a) if is_int else 0
        return tuple(w)
    return of


def _num_sig(v: Any) -> tuple[Any, ...] | None:
    """A Python number operand as part of a plan key: its type only (the value is passed per call)."""
    tp = type(v)
    return ("num", tp) if tp is float or tp is int else None


def _tensor_check(x: Any, what: str) -> None:
    if isinstance(x, torch.Tensor):
        _check_dtype(x, what)


def _promote(*xs: Any) -> torch.dtype:
    ts = [x for x in xs if x is not None]
    for i, x in enumerate(ts):
        _tensor_check(x, f"argument {i}")
    dt = torch.result_type(ts[0], ts[1]) if len(ts) > 1 else ts[0].dtype
    for x in ts[2:]:
        dt = torch.promote_types(dt, torch.result_type(ts[0], x))
    if dt not in _SUPPORTED:
        raise TypeError(f"the promoted dtype {dt} is not supported by the DSL kernels")
    return dt


def _need_tensor(*xs: Any, op: str) -> None:
    if not any(isinstance(x, torch.Tensor) for x in xs):
        raise TypeError(f"{op}(): expected at least one Tensor argument")


# ------------------------------------------------------------------ arithmetic
def _fast(op: str, a: Any, b: Any, extra: Any, alpha: Any = None) -> tuple[Hashable | None, Any]:
    """(plan key, result): the result of a cached plan, or None with the key to build one under (None
    too when an argument is not a contiguous CPU tensor or a Python number: no plan). A Python-number
    operand and `alpha` (not 1) enter the key by type; their values are the plan's per-call scalars,
    so `x.mul_(lr)` with a new lr each step reuses its plan."""
    num = None
    if isinstance(a, torch.Tensor):
        ka = tensor_sig(a)
        if isinstance(b, torch.Tensor):
            kb = tensor_sig(b)
            ts: tuple[torch.Tensor, ...] = (a, b)
        else:
            kb, num = _num_sig(b) or scalar_sig(b), b
            ts = (a,)
    elif isinstance(b, torch.Tensor):
        ka, kb, ts, num = _num_sig(a) or scalar_sig(a), tensor_sig(b), (b,), a
    else:
        return None, None
    if ka is None or kb is None:
        return None, None
    key = (op, ka, kb, extra)
    plan = PLANS.get(key)
    if plan is not None:
        of = plan.scalars_of
        return key, (plan(*ts) if of is None else plan.call_scalars(ts, of(num, alpha)))
    return (key if PLANS.enabled() else None), None


def _alpha_sig(alpha: Any) -> tuple[Any, ...] | None:
    """alpha in a plan key: 1 (no alpha term) apart from any other value, which goes by type."""
    if type(alpha) is bool:
        return scalar_sig(alpha)
    if alpha == 1:
        return ("one",)
    return _num_sig(alpha)


def _arith(op: str, input: Any, other: Any, alpha: Any = 1, key: Hashable | None = None) -> torch.Tensor:
    _need_tensor(input, other, op=op)
    dt = _promote(input, other)
    if dt == torch.bool:
        raise TypeError(f"{op}: bool arithmetic is not supported (use logical_or / logical_and)")
    if alpha != 1:
        if not dt.is_floating_point and isinstance(alpha, float):
            raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
        a = _round_scalar(alpha, dt) if dt in _HALF else alpha   # torch converts alpha to the dtype
        return _launch(f"{op}_alpha", (input, other), dt, dt, float(a), key=key)
    return _launch(op, (input, other), dt, dt, key=key)


def add(input: Any, other: Any, *, alpha: Any = 1) -> torch.Tensor:
    """torch.add: input + alpha * other, broadcast (out= omitted)."""
    ka = _alpha_sig(alpha)
    key, res = _fast("add", input, other, ka, None if alpha == 1 else alpha) if ka is not None else (None, None)
    return res if res is not None else _arith("add", input, other, alpha, key)


def sub(input: Any, other: Any, *, alpha: Any = 1) -> torch.Tensor:
    """torch.sub: input - alpha * other, broadcast (out= omitted)."""
    ka = _alpha_sig(alpha)
    key, res = _fast("sub", input, other, ka, None if alpha == 1 else alpha) if ka is not None else (None, None)
    return res if res is not None else _arith("sub", input, other, alpha, key)


def mul(input: Any, other: Any) -> torch.Tensor:
    """torch.mul, broadcast (out= omitted)."""
    key, res = _fast("mul", input, other, None)
    return res if res is not None else _arith("mul", input, other, 1, key)


def div(input: Any, other: Any, *, rounding_mode: str | None = None) -> torch.Tensor:
    """torch.div: true division (integers give float32), or rounded 'trunc' / 'floor' (out= omitted)."""
    key, res = _fast("div", input, other, rounding_mode) if rounding_mode in (None, "trunc", "floor") \
        else (None, None)
    if res is not None:
        return res
    if rounding_mode not in (None, "trunc", "floor"):
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                           f"'{rounding_mode}'")
    _need_tensor(input, other, op="div")
    dt = _promote(input, other)
    if dt == torch.bool:
        raise TypeError("div: bool operands are not supported")
    if rounding_mode is None:
        out_dt = dt if dt.is_floating_point else torch.float32
        return _launch("div", (input, other), out_dt, out_dt, key=key)
    if dt.is_floating_point:
        return _launch(f"div_{rounding_mode}", (input, other), dt, dt, key=key)
    return _launch(f"idiv_{rounding_mode}", (input, other), dt, dt, key=key)


def maximum(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """torch.maximum (NaN propagates)."""
    _check_pair(input, other, "maximum")
    return _launch("maximum", (input, other), _promote(input, other), _promote(input, other))


def minimum(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """torch.minimum (NaN propagates)."""
    _check_pair(input, other, "minimum")
    return _launch("minimum", (input, other), _promote(input, other), _promote(input, other))


def _check_pair(a: Any, b: Any, op: str) -> None:
    for i, x in enumerate((a, b)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{op}(): argument '{('input', 'other')[i]}' (position {i + 1}) must be Tensor, "
                            f"not {type(x).__name__}")


def pow(input: Any, exponent: Any) -> torch.Tensor:
    """torch.pow: tensor ** tensor, tensor ** scalar or scalar ** tensor (float dtypes)."""
    _need_tensor(input, exponent, op="pow")
    dt = _promote(input, exponent)
    if not dt.is_floating_point:
        raise TypeError("pow: integer pow is not supported by the DSL kernels (the vector pow is float only)")
    return _launch("pow", (input, exponent), dt, dt)


def where(condition: torch.Tensor, input: Any, other: Any) -> torch.Tensor:
    """torch.where(condition, input, other): input where condition else other (either may be a scalar)."""
    if condition.dtype != torch.bool:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{_torch_name(condition.dtype)}")
    if isinstance(input, torch.Tensor) or isinstance(other, torch.Tensor):
        dt = _promote(input, other)
    else:
        dt = torch.result_type(torch.tensor(input), other)
        if dt not in _SUPPORTED:
            raise TypeError(f"where: two scalars give {dt}, which the DSL kernels do not support (pass a tensor)")
    if not isinstance(input, torch.Tensor) and not isinstance(other, torch.Tensor):
        return _launch("where_ss", (condition, input, other), dt, dt, keep=(0,))
    return _launch("where", (condition, input, other), dt, dt, keep=(0,))


def _torch_name(dt: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.int32: "Int",
            torch.int8: "Char", torch.int64: "Long", torch.float64: "Double", torch.bool: "Bool",
            torch.uint8: "Byte", torch.int16: "Short"}.get(dt, str(dt))


def masked_fill(input: torch.Tensor, mask: torch.Tensor, value: Any) -> torch.Tensor:
    """torch.masked_fill: value where mask else input, the two broadcast together (out of place, as
    torch). value is a number or a 0-dim tensor."""
    _check_dtype(input, "masked_fill input")
    if mask.dtype != torch.bool:
        cname = {torch.float32: "float", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
                 torch.int32: "int", torch.int8: "signed char", torch.uint8: "unsigned char",
                 torch.int64: "long int", torch.float64: "double"}.get(mask.dtype, str(mask.dtype))
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {cname}")
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.dim()} dimension(s).")
    dt = input.dtype
    if not isinstance(value, torch.Tensor):
        value = value if dt.is_floating_point else (int(value) if dt != torch.bool else bool(value))
    return _launch("where", (mask, value, input), dt, dt, keep=(0,))


def clamp(input: torch.Tensor, min: Any = None, max: Any = None) -> torch.Tensor:
    """torch.clamp with scalar or tensor bounds (NaN propagates; min > max gives max, as torch)."""
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    dt = _promote(input, min, max)
    if max is None:
        return _launch("clamp_min", (input, min), dt, dt)
    if min is None:
        return _launch("clamp_max", (input, None, max), dt, dt)
    return _launch("clamp", (input, min, max), dt, dt)


# ------------------------------------------------------------------ comparisons and logic
def _compare(op: str, input: Any, other: Any) -> torch.Tensor:
    _need_tensor(input, other, op=op)
    return _launch(op, (input, other), torch.bool, _promote(input, other))


def eq(input: Any, other: Any) -> torch.Tensor:
    """torch.eq (bool out)."""
    return _compare("eq", input, other)


def ne(input: Any, other: Any) -> torch.Tensor:
    """torch.ne (bool out)."""
    return _compare("ne", input, other)


def lt(input: Any, other: Any) -> torch.Tensor:
    """torch.lt (bool out)."""
    return _compare("lt", input, other)


def le(input: Any, other: Any) -> torch.Tensor:
    """torch.le (bool out)."""
    return _compare("le", input, other)


def gt(input: Any, other: Any) -> torch.Tensor:
    """torch.gt (bool out)."""
    return _compare("gt", input, other)


def ge(input: Any, other: Any) -> torch.Tensor:
    """torch.ge (bool out)."""
    return _compare("ge", input, other)


def _logical(op: str, input: torch.Tensor, other: torch.Tensor | None) -> torch.Tensor:
    for i, x in enumerate((input, other)):
        if x is not None:
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{op}(): argument '{('input', 'other')[i]}' (position {i + 1}) must be Tensor, "
                                f"not {type(x).__name__}")
            _check_dtype(x, op)
    return _launch(op, (input, other) if other is not None else (input,), torch.bool, None)


def logical_and(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """torch.logical_and (bool out; any dtype, nonzero is True)."""
    return _logical("logical_and", input, other)


def logical_or(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """torch.logical_or (bool out)."""
    return _logical("logical_or", input, other)


def logical_xor(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """torch.logical_xor (bool out)."""
    return _logical("logical_xor", input, other)


def logical_not(input: torch.Tensor) -> torch.Tensor:
    """torch.logical_not (bool out)."""
    return _logical("logical_not", input, None)


# ------------------------------------------------------------------ casts
def npu_dtype_cast(input: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """torch_npu.npu_dtype_cast: input converted to dtype (f32 / f16 / bf16 / i32 / i8 / bool), with
    torch's semantics: floats round to nearest even, float -> int truncates toward zero (NaN, inf and
    out-of-range values give INT_MIN, as torch on x86), int -> int wraps, bool is != 0."""
    _check_dtype(input, "npu_dtype_cast input")
    if dtype not in _SUPPORTED:
        raise TypeError(f"npu_dtype_cast: dtype {dtype} is not supported (float32, float16, bfloat16, int32, "
                        f"int8, bool)")
    out = torch.empty(input.shape, dtype=dtype)
    if out.numel() == 0:
        return out
    x = input.contiguous().view(-1)
    mode = int(input.dtype.is_floating_point and not dtype.is_floating_point and dtype != torch.bool)
    cast_kernel(x, out.view(-1), MODE=mode)
    return out


to_dtype = npu_dtype_cast


# ------------------------------------------------------------------ sum_to_size
def sum_to_size(grad: torch.Tensor, size: Sequence[int], dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum `grad` (a broadcast result) back to `size` (a shape that broadcasts to grad's), as
    torch's Tensor.sum_to_size: f32 accumulation, result in `dtype` (default grad's dtype).
    Kernels: `rowsum_kernel` for a trailing summed dimension, `colsum_kernel` (chunks of rows, then
    the chunks) for a summed dimension followed by kept ones; at most a pass per summed dimension
    of the merged frame."""
    size = tuple(int(s) for s in size)
    dtype = dtype or grad.dtype
    gshape = tuple(grad.shape)
    tail = gshape[len(gshape) - len(size):] if len(size) <= len(gshape) else None
    if tail is None or any(s not in (1, g) for s, g in zip(size, tail, strict=True)):
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(gshape)}}}.")
    out = torch.empty(size, dtype=dtype)
    if out.numel() == 0:
        return out
    if grad.numel() == 0:
        return _fill_zero(out)
    dims, _ = _frame(gshape, [size])
    red = [(n, f[0]) for n, f in dims]          # (size, summed?)
    if not any(r for _, r in red):
        return _cast_to(grad.contiguous(), dtype).view(size) if grad.dtype != dtype else \
            grad.contiguous().view(size).clone()
    cur = grad.contiguous()
    while any(r for _, r in red):
        if red[-1][1]:   # trailing summed dim: row sums
            odt = torch.float32 if any(r for _, r in red[:-1]) else dtype
            rows = math.prod(n for n, _ in red[:-1])
            n = red[-1][0]
            nxt = torch.empty((rows, 1), dtype=odt)
            C = next((c for c in (16, 128, 1024) if n <= c), 1024)
            rowsum_kernel(cur.view(rows, n), nxt, WIDEN=int(cur.dtype != torch.float32), R=_ELEMS // C, C=C)
            red = red[:-1]
        else:            # ... summed dim (M), kept dims (N): column sums per plane P
            k = max(i for i, (_, r) in enumerate(red) if r)
            odt = torch.float32 if any(r for _, r in red[:k]) else dtype
            P = math.prod(n for n, _ in red[:k])
            M = red[k][0]
            N = math.prod(n for n, _ in red[k + 1:])
            nxt = _colsum(cur.view(P, M, N), odt)
            red = red[:k] + [(N, False)] if N > 1 else red[:k]
            red = _merge(red)
        cur = nxt
    return cur.view(size)


def _merge(red: list[tuple[int, bool]]) -> list[tuple[int, bool]]:
    out: list[tuple[int, bool]] = []
    for n, r in red:
        if out and out[-1][1] == r:
            out[-1] = (out[-1][0] * n, r)
        else:
            out.append((n, r))
    return out


def _colsum(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(P, M, N) -> (P, N): column sums in f32, in chunks of RC rows while M is large."""
    P, M, N = x.shape
    C = next((c for c in (16, 128, 1024) if N <= c), 1024)
    R = max(1, 2048 // C)
    RC = 512
    while True:
        K = -(-M // RC)
        nxt = torch.empty((P, K, N), dtype=dtype if K == 1 else torch.float32)
        colsum_kernel(x, nxt, WIDEN=int(x.dtype != torch.float32), RC=RC, R=R, C=C)
        if K == 1:
            return nxt.view(P, N)
        x, M = nxt, K


def _fill_zero(out: torch.Tensor) -> torch.Tensor:
    flat = out.view(1, 1, -1)
    C, R = _block(1, flat.shape[2])
    ew_kernel(flat, flat, flat, flat, 0.0, 0.0, 0.0, 0, 0, 0, 0.0, 0, 0, 0, 0, OP="fill", LA=_ABSENT, LB=_ABSENT,
              CO=int(out.dtype != torch.float32), R=R, C=C)
    return out


# ------------------------------------------------------------------ backward
def _reduce(g: torch.Tensor, like: Any) -> torch.Tensor | None:
    """g summed to the shape of operand `like` in its dtype (None for a scalar operand)."""
    if not isinstance(like, torch.Tensor):
        return None
    return sum_to_size(g, like.shape, like.dtype)


def _g32(op: str, operands: Sequence[Any], s1: float = 0.0, keep: tuple[int, ...] = ()) -> torch.Tensor:
    """A broadcast backward expression in f32 (operands widened in the kernel)."""
    return _launch(op, operands, torch.float32, torch.float32, s1, keep)


def add_backward(grad: torch.Tensor, input: Any, other: Any, alpha: Any = 1) -> tuple[Any, Any]:
    """Gradients of add(input, other, alpha=alpha) w.r.t. input and other (None for a scalar)."""
    gb = None
    if isinstance(other, torch.Tensor):
        gb = _reduce(grad if alpha == 1 else _g32("scale", (grad,), float(alpha)), other)
    return _reduce(grad, input), gb


def sub_backward(grad: torch.Tensor, input: Any, other: Any, alpha: Any = 1) -> tuple[Any, Any]:
    """Gradients of sub(input, other, alpha=alpha)."""
    gb = _reduce(_g32("neg_mul", (grad,), float(alpha)), other) if isinstance(other, torch.Tensor) else None
    return _reduce(grad, input), gb


def mul_backward(grad: torch.Tensor, input: Any, other: Any) -> tuple[Any, Any]:
    """Gradients of mul(input, other): grad * other, grad * input (each summed to its operand)."""
    ga = _reduce(_g32("mul", (grad, other)), input) if isinstance(input, torch.Tensor) else None
    gb = _reduce(_g32("mul", (grad, input)), other) if isinstance(other, torch.Tensor) else None
    return ga, gb


def div_backward(grad: torch.Tensor, input: Any, other: Any, rounding_mode: str | None = None) -> tuple[Any, Any]:
    """Gradients of div(input, other): grad / other, -grad * input / other**2 (zeros with a
    rounding mode, as torch)."""
    if rounding_mode is not None:
        z = _g32("scale", (grad,), 0.0)
        return (_reduce(z, input), _reduce(z, other))
    ga = _reduce(_g32("div", (grad, other)), input) if isinstance(input, torch.Tensor) else None
    gb = _reduce(_g32("div_grad_b", (grad, input, other)), other) if isinstance(other, torch.Tensor) else None
    return ga, gb


def maximum_backward(grad: torch.Tensor, input: torch.Tensor, other: torch.Tensor) -> tuple[Any, Any]:
    """Gradients of maximum: grad to the larger operand, split in halves on ties (torch's rule)."""
    return (_reduce(_g32("max_grad", (grad, input, other)), input),
            _reduce(_g32("max_grad", (grad, other, input)), other))


def minimum_backward(grad: torch.Tensor, input: torch.Tensor, other: torch.Tensor) -> tuple[Any, Any]:
    """Gradients of minimum: grad to the smaller operand, split in halves on ties."""
    return (_reduce(_g32("min_grad", (grad, input, other)), input),
            _reduce(_g32("min_grad", (grad, other, input)), other))


def pow_backward(grad: torch.Tensor, input: Any, exponent: Any, result: torch.Tensor | None = None) \
        -> tuple[Any, Any]:
    """Gradients of pow(input, exponent) w.r.t. input (grad * e * input**(e-1), 0 where e == 0) and
    exponent (grad * result * log(input), 0 where input == 0 and e >= 0), torch's rules. `result`
    (the forward's output) is needed for a scalar base."""
    ga = gb = None
    if isinstance(input, torch.Tensor):
        if isinstance(exponent, torch.Tensor):
            ga = _reduce(_g32("pow_grad_base", (grad, input, exponent)), input)
        elif float(exponent) == 0.0:
            ga = _reduce(_g32("scale", (grad,), 0.0), input)
        else:
            ga = _reduce(_g32("pow_grad_base_s", (grad, input), float(exponent)), input)
    if isinstance(exponent, torch.Tensor):
        if isinstance(input, torch.Tensor):
            gb = _reduce(_g32("pow_grad_exp", (grad, input, exponent)), exponent)
        else:
            res = result if result is not None else pow(input, exponent)
            base = float(input)
            lg = math.log(base) if base > 0 else (float("-inf") if base == 0 else float("nan"))
            op = "pow_grad_exp_s0" if base == 0 else "pow_grad_exp_s"
            gb = _reduce(_g32(op, (grad, res, exponent), lg), exponent)
    return ga, gb


def where_backward(grad: torch.Tensor, condition: torch.Tensor, input: Any, other: Any) -> tuple[Any, Any]:
    """Gradients of where(condition, input, other) w.r.t. input and other."""
    ga = _reduce(_g32("mask_keep", (grad, condition), keep=(1,)), input) if isinstance(input, torch.Tensor) else None
    gb = _reduce(_g32("mask_zero", (grad, condition), keep=(1,)), other) if isinstance(other, torch.Tensor) else None
    return ga, gb


def masked_fill_backward(grad: torch.Tensor, input: torch.Tensor, mask: torch.Tensor, value: Any = None) \
        -> tuple[Any, Any]:
    """Gradients of masked_fill(input, mask, value) w.r.t. input (grad where not mask, summed to
    input's shape) and a 0-dim tensor value (the sum of grad where mask)."""
    if tuple(input.shape) == tuple(grad.shape):
        gi = _launch("mask_zero", (grad, mask), input.dtype, torch.float32, keep=(1,))
    else:
        gi = _reduce(_g32("mask_zero", (grad, mask), keep=(1,)), input)
    gv = None
    if isinstance(value, torch.Tensor):
        gv = sum_to_size(_g32("mask_keep", (grad, mask), keep=(1,)), (), value.dtype)
    return gi, gv


def clamp_backward(grad: torch.Tensor, input: torch.Tensor, min: Any = None, max: Any = None) \
        -> tuple[Any, Any, Any]:
    """Gradients of clamp(input, min, max) w.r.t. input, min and max (tensor bounds), torch's rules:
    input gets grad where min <= input <= max; min where input < min (and min < max when both);
    max where input > max (or max < min)."""
    tmin, tmax = isinstance(min, torch.Tensor), isinstance(max, torch.Tensor)
    if not tmin and not tmax:
        lo = float("-inf") if min is None else float(min)
        hi = float("inf") if max is None else float(max)
        g = _launch("clamp_grad", (grad, input, hi), input.dtype, torch.float32, lo)
        return _reduce(g, input), None, None
    keep = ge(input, min) if min is not None else None
    if max is not None:
        k2 = le(input, max)
        keep = k2 if keep is None else logical_and(keep, k2)
    assert keep is not None
    gi = _reduce(_g32("mask_keep", (grad, keep), keep=(1,)), input)
    gmin = gmax = None
    if tmin:
        cond = lt(input, min)
        if max is not None:
            cond = logical_and(cond, lt(min, max))
        gmin = _reduce(_g32("mask_keep", (grad, cond), keep=(1,)), min)
    if tmax:
        cond = gt(input, max)
        if min is not None:
            cond = logical_or(cond, lt(max, min))
        gmax = _reduce(_g32("mask_keep", (grad, cond), keep=(1,)), max)
    return gi, gmin, gmax
