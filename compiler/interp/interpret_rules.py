"""Rules of the reference interpreter: scalar expressions as the native code computes them (`seval`),
vector elements (`elem`, `cast`), the cube's mmad and FIX conversions, each mirroring codegen /
compiler.backend.cube rule for rule. `compiler.interp.interpret` runs Core IR with them.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.backend import vmath
from compiler.ir import (
    Fix,
    VOp,
)
from compiler.sexpr import F64, I64, SExpr
from dsl.types import DType, Mem, bf16, boolean, f16, f32, i8, i32
from simulator.isa import Instr

CUBE_MEMS = (Mem.L1, Mem.L0A, Mem.L0B, Mem.L0C)
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

#: how each dtype sits in memory (bool as its byte, so ~ and ^ work on it as the native i8 does)
STORAGE: dict[str, np.dtype] = {**{d.name: d.np for d in (f32, f16, bf16, i32, i8)}, "bool": np.dtype(np.int8)}


def storage(d: DType) -> np.dtype:
    return STORAGE[d.name]


def compute(d: DType) -> np.dtype:
    """The type arithmetic happens in (codegen.compute_ty): f32 for every float, else the integer."""
    return np.dtype(np.float32) if d.is_float else storage(d)


# ------------------------------------------------------------------ scalars (Gen.sval)
def wrap(v: int, bits: int = 64) -> int:
    """v modulo 2**bits as a signed integer (LLVM's add/sub/mul/shl)."""
    m = 1 << bits
    v &= m - 1
    return v - m if v >> (bits - 1) else v


def f2i(x: float) -> int:
    """fptosi.sat: truncate toward zero, clamp to i64, NaN -> 0."""
    if x != x:
        return 0
    if x >= 2.0 ** 63:
        return I64_MAX
    if x < -(2.0 ** 63):
        return I64_MIN
    return int(x)


def idivmod(op: str, x: int, y: int, bits: int = 64) -> int:
    """codegen.int_divmod: Python floor division / modulo, but x // 0 == x % 0 == 0."""
    if y == 0:
        return 0
    if y == -1:
        return wrap(-x, bits) if op == "//" else 0
    return x // y if op == "//" else x % y


def fmax(a: Any, b: Any) -> Any:
    """llvm.maximum: NaN if either is NaN, and +0 > -0 (np.maximum alone returns its first zero)."""
    r = np.maximum(a, b)
    return np.where((a == 0) & (b == 0), a + b, r)[()]  # +0 unless both are -0


def fmin(a: Any, b: Any) -> Any:
    """llvm.minimum: NaN if either is NaN, and -0 < +0."""
    r = np.minimum(a, b)
    return np.where((a == 0) & (b == 0), -((-a) + (-b)), r)[()]  # -0 unless both are +0


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
        "!=": np.not_equal}  # numpy's != is true for NaN, like fcmp une; the rest are ordered


def _ieee(fn: Callable[[np.float64, np.float64], Any]) -> Callable[[float, float], float]:
    """An f64 operation with IEEE results (x / 0 is inf, not ZeroDivisionError)."""
    def op(x: float, y: float) -> float:
        with np.errstate(all="ignore"):
            return float(fn(np.float64(x), np.float64(y)))
    return op


def _fmax64(x: float, y: float) -> float:
    if x != x or y != y:
        return math.nan
    return x + y if x == 0 == y else max(x, y)  # llvm.maximum: +0 unless both are -0


def _fmin64(x: float, y: float) -> float:
    if x != x or y != y:
        return math.nan
    return -((-x) + (-y)) if x == 0 == y else min(x, y)


#: comparisons give i64 0/1; Python's float comparisons are IEEE (ordered; != true for NaN)
_COMPARE: dict[str, Callable[[Any, Any], int]] = {
    op: (lambda f: lambda x, y: int(f(x, y)))(f) for op, f in (
        ("<", operator.lt), ("<=", operator.le), (">", operator.gt), (">=", operator.ge), ("==", operator.eq),
        ("!=", operator.ne))}

#: f64 scalar operations, as `Gen.sbinary` emits them
F64_OPS: dict[str, Callable[[float, float], int | float]] = {
    **_COMPARE, "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _ieee(np.divide),
    "min": _fmin64, "max": _fmax64, "**": _ieee(np.power),
    "//": _ieee(lambda a, b: np.floor(a / b)), "%": _ieee(lambda a, b: a - np.floor(a / b) * b)}

#: i64 scalar operations; results of the arithmetic ones wrap (`wrap` is applied by the caller)
I64_OPS: dict[str, Callable[[int, int], int]] = {
    **_COMPARE, "+": operator.add, "-": operator.sub, "*": operator.mul, "&": operator.and_,
    "|": operator.or_, "^": operator.xor, "min": min, "max": max,
    # shifts by >= 64 are poison in LLVM; x86 masks the count, so do we
    "<<": lambda x, y: x << (y & 63), ">>": lambda x, y: x >> (y & 63),
    "//": lambda x, y: idivmod("//", x, y), "%": lambda x, y: idivmod("%", x, y),
    "**": lambda x, y: f2i(_ieee(np.power)(float(x), float(y))),  # via double, as codegen does
}


def _funary(op: str, x: float) -> float:
    """exp / log / sqrt from the C library (as the native code calls them), IEEE at the edges."""
    if op == "exp":
        try:
            return math.exp(x)
        except OverflowError:
            return math.inf
    if op == "log":
        return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    if op == "sqrt":
        return math.sqrt(x) if not x < 0 else math.nan
    with np.errstate(all="ignore"):
        if op == "rint":
            return float(np.rint(np.float64(x)))
        if op == "rsqrt":
            return float(np.float64(1.0) / np.sqrt(np.float64(x)))
    raise AssertionError(f"scalar op {op}")


def seval(e: SExpr, env: dict[str, int | float], argv: Sequence[int | float], core: int = 0,
          ncores: int = 1) -> int | float:
    """Value of a scalar expression as the native code computes it (`Gen.sval`).

    i64 wraps around, x // 0 and x % 0 are 0, f64 follows IEEE (1.0 / 0 is inf, not an exception)
    and f2i saturates.
    """
    op = e.op
    if op == "const":
        return e.args[0]
    if op == "var":
        return env[e.args[0]]
    if op == "arg":
        return argv[e.args[0]]
    if op == "core_id":
        return core
    if op == "num_cores":
        return ncores

    def ev(a: SExpr) -> int | float:
        return seval(a, env, argv, core, ncores)

    if op == "select":
        return ev(e.args[1]) if ev(e.args[0]) != 0 else ev(e.args[2])
    if len(e.args) == 2:
        a, b = e.args
        if op in ("and", "or"):
            xa, xb = ev(a) != 0, ev(b) != 0  # != 0 is true for NaN, like fcmp une
            return int(xa and xb) if op == "and" else int(xa or xb)
        if a.ty == F64:
            return F64_OPS[op](float(ev(a)), float(ev(b)))
        return wrap(I64_OPS[op](int(ev(a)), int(ev(b))))
    a = e.args[0]
    x = ev(a)
    if op == "neg":
        return wrap(-int(x)) if e.ty == I64 else -x
    if op == "not":
        return int(x == 0)
    if op == "abs":
        return wrap(abs(int(x))) if e.ty == I64 else math.fabs(x)
    if op == "i2f":
        return float(x)
    if op == "f2i":
        return f2i(x)
    return _funary(op, float(x))


def as_i64(e: SExpr, v: int | float) -> int:
    """codegen._i64: an f64 value becomes an integer by truncation."""
    return f2i(v) if e.ty == F64 else int(v)


# ------------------------------------------------------------------ vector element rules
def _load_libm() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("m")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


_LIBM = _load_libm()
_LIBM_FNS: dict[str, Any] = {}


def libm(name: str, *xs: Any) -> np.ndarray:
    """The C library's f32 function `name` ("exp", "log", "tanh", "pow") elementwise.

    The native code calls these very functions (LLVM turns llvm.exp.f32 into a call to expf,
    never vectorised), so calling them too keeps results bit-identical, at ~0.3 us per element.
    Without a C math library, numpy in f64 rounded to f32 (almost always the same value).
    """
    arrs = np.broadcast_arrays(*(np.asarray(x, np.float32) for x in xs))
    fn = _LIBM_FNS.get(name)
    if fn is None and _LIBM is not None:
        fn = _LIBM_FNS[name] = getattr(_LIBM, name + "f")
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float] * len(xs)
    if fn is None:
        with np.errstate(all="ignore"):
            return getattr(np, {"pow": "power"}.get(name, name))(*(a.astype(np.float64) for a in arrs)) \
                .astype(np.float32)
    out = np.array(list(map(fn, *(a.ravel().tolist() for a in arrs))), np.float32)
    return out.reshape(arrs[0].shape)


def scalar_as(v: int | float, ty: str, d: DType) -> Any:
    """codegen.scalar_as: a scalar operand converted once to the compute type of d."""
    if d.is_float:  # f32 for every float type: with f16/bf16 tiles too, as torch's CPU kernels do
        return np.float32(float(v))
    i = f2i(v) if ty == F64 else int(v)
    return compute(d).type(wrap(i, 8 * d.itemsize))


def int_divmod(op: str, x: Any, y: Any, t: np.dtype) -> Any:
    """codegen.int_divmod on arrays: floor division / modulo; by 0 gives 0; by -1 wraps."""
    x, y = np.broadcast_arrays(np.asarray(x, t), np.asarray(y, t))
    zero, m1 = y == 0, y == -1
    d = np.where(zero | m1, t.type(1), y)
    if op == "//":
        return np.where(zero, t.type(0), np.where(m1, np.negative(x), np.floor_divide(x, d))).astype(t)
    return np.where(zero | m1, t.type(0), np.remainder(x, d)).astype(t)


_FBIN = {Instr.VADD: np.add, Instr.VSUB: np.subtract, Instr.VMUL: np.multiply, Instr.VDIV: np.divide}
_IBIN = {Instr.VADD: np.add, Instr.VSUB: np.subtract, Instr.VMUL: np.multiply, Instr.VAND: np.bitwise_and,
         Instr.VOR: np.bitwise_or, Instr.VXOR: np.bitwise_xor,
         # shl/ashr by >= the bit width are poison in LLVM; numpy gives 0 / the sign, as x86 vectors do
         Instr.VSHL: np.left_shift, Instr.VSHR: np.right_shift}
ONE, ZERO = np.float32(1.0), np.float32(0.0)
_ROUNDING = {Instr.VFLOOR: np.floor, Instr.VCEIL: np.ceil, Instr.VRINT: np.rint, Instr.VTRUNC: np.trunc}


def elem(s: VOp, xs: list[Any], src_types: list[DType]) -> Any:
    """codegen.elem_op on whole arrays: s.dst's values from operands already in compute type."""
    ins, d = s.instr, s.dst.dtype
    t = compute(src_types[-1] if ins == Instr.VSEL else src_types[0])
    fl = t == np.float32
    if ins in _FBIN and fl:
        return _FBIN[ins](xs[0], xs[1])
    if ins in _IBIN and not fl:
        return _IBIN[ins](xs[0], xs[1])
    if ins in (Instr.VMAX, Instr.VMIN):
        if fl:
            return (fmax if ins == Instr.VMAX else fmin)(xs[0], xs[1])
        return (np.maximum if ins == Instr.VMAX else np.minimum)(xs[0], xs[1])
    if ins in (Instr.VFLOORDIV, Instr.VMOD):
        if fl:
            q = np.floor(xs[0] / xs[1])
            return q if ins == Instr.VFLOORDIV else xs[0] - q * xs[1]
        return int_divmod("//" if ins == Instr.VFLOORDIV else "%", xs[0], xs[1], t)
    if ins in vmath.FUNCS:  # the very recipe the native code runs (compiler.backend.vmath)
        return vmath.evaluate(ins, xs)
    if ins in _ROUNDING:
        return _ROUNDING[ins](xs[0])
    if ins == Instr.VABS:
        return np.abs(xs[0])
    if ins == Instr.VNEG:
        return np.negative(xs[0])
    if ins == Instr.VRELU:
        return fmax(xs[0], ZERO) if fl else np.maximum(xs[0], t.type(0))
    if ins == Instr.VNOT:
        return xs[0] ^ np.int8(1) if d == boolean else np.invert(xs[0])
    if ins == Instr.VCMP:
        assert isinstance(s.arg, str)  # the comparison operator
        return _CMP[s.arg](xs[0], xs[1]).astype(np.int8)
    if ins == Instr.VSEL:
        return np.where(xs[0] != 0, xs[1], xs[2]).astype(t)
    if ins in (Instr.VCOPY, Instr.VDUP):
        return xs[0]
    if ins == Instr.VCAST:
        return cast(xs[0], src_types[0], d)
    raise AssertionError(f"no element rule for {ins.name} on {d}")


def cast(x: Any, src: DType, dst: DType) -> Any:
    """codegen.cast_value: x in src's compute type -> dst's compute type."""
    if dst == boolean:
        return (x != 0).astype(np.int8)  # != 0 holds for NaN (fcmp une)
    if src.is_float and dst.is_float:
        return x  # rounding to f16/bf16 happens at the store
    if src.is_float:  # rint, then fptosi.sat: clamp to the integer range, NaN -> 0
        info = np.iinfo(compute(dst))
        r = np.rint(np.asarray(x, np.float64))
        return np.where(np.isnan(r), 0, np.clip(r, info.min, info.max)).astype(compute(dst))
    if dst.is_float:
        if src == boolean:
            return np.asarray(x).astype(np.uint8).astype(np.float32)  # uitofp
        # sitofp to half/bfloat is legalised through f32 (two roundings for |x| > 2**24, as torch does)
        return np.asarray(x).astype(np.float32)
    if src == boolean and dst.itemsize > 1:
        return np.asarray(x).astype(np.uint8).astype(compute(dst))  # zext
    return np.asarray(x).astype(compute(dst))  # sext / trunc / same width


# ------------------------------------------------------------------ the cube (compiler/backend/cube.py)
def _sum_round_odd(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y in f64 rounded to odd: rounding that to f32 then gives the correctly rounded f32 sum
    (53 >= 24 + 2 bits), where plain f64 rounding could round twice."""
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)  # TwoSum: s + err == x + y exactly
    bits = s.view(np.int64)
    inexact = (err != 0) & np.isfinite(err) & ((bits & 1) == 0)
    step = np.where(np.signbit(err) == np.signbit(s), 1, -1)  # toward the exact sum
    return np.where(inexact, bits + step, bits).view(np.float64)


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """llvm.fma.f32: a * b + c rounded once (a * b of two f32 values is exact in f64)."""
    p = a.astype(np.float64) * b.astype(np.float64)
    return _sum_round_odd(p, c.astype(np.float64)).astype(np.float32)


_F32_TINY = np.float32(2.0 ** -126)


def _ftz(x: np.ndarray) -> np.ndarray:
    """f32 subnormals to a zero of the same sign (the BF16 instructions' DAZ / FTZ)."""
    return np.where(np.abs(x) < _F32_TINY, np.copysign(ZERO, x), x).astype(np.float32)


def mmad_values(a: np.ndarray, b: np.ndarray, c: np.ndarray, isa: str) -> np.ndarray:
    """c + a @ b as `cube.gen_mmad` computes it on `isa` (a: m x k, b: k x n, c: m x n f32 / i32).

    i8: exact, wrapping in i32. Floats: one f32 fma per k in order (the vector micro-kernel; fmul
    then fadd on a target without FMA), except bf16 with BF16 instructions: vdpbf16ps adds the pair
    (2p+1, 2p) odd element first, rounding after each, with subnormal inputs and results flushed;
    AMX is approximated by the same rule."""
    if a.dtype == np.int8:
        return (c.astype(np.int64) + a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    if a.dtype == storage(bf16) and isa in ("avx512", "amx"):
        k = a32.shape[1]
        a32 = _ftz(np.pad(a32, ((0, 0), (0, k % 2))))  # past k: zeros (A masked, B pair rows zeroed)
        b32 = _ftz(np.pad(b32, ((0, k % 2), (0, 0))))
        for p in range(0, k, 2):
            for kk in (p + 1, p):
                c = _ftz(fma32(a32[:, kk, None], b32[None, kk, :], c))
        return c
    from compiler.backend.cube_micro import fused_f32

    fused = fused_f32()
    for kk in range(a32.shape[1]):  # without FMA (x86-64-v2): the product rounded, then the sum
        c = fma32(a32[:, kk, None], b32[None, kk, :], c) if fused else c + a32[:, kk, None] * b32[None, kk, :]
    return c


def fix_values(acc: np.ndarray, fix: Fix, scale: np.float32 | None) -> np.ndarray:
    """`cube.gen_fix` on a matrix of accumulators: out(relu(acc * scale)) in the output's storage type."""
    out = storage(fix.dtype)
    if acc.dtype == np.int32 and scale is None:  # integer all the way
        v = np.maximum(acc, np.int32(0)) if fix.relu else acc
        if fix.dtype.is_float:  # (lowering never asks for this) through f32, as gen_fix
            return v.astype(np.float32).astype(out)
        return v if fix.dtype == i32 else np.clip(v, -128, 127).astype(out)
    v = acc.astype(np.float32)
    if scale is not None:
        v = v * scale
    if fix.relu:
        v = fmax(v, ZERO)
    if fix.dtype.is_float:
        return v.astype(out)  # round to nearest even, keeping bf16 subnormals (as torch and the native do)
    x = cast(v, f32, i32)  # rint, then saturate
    return x if fix.dtype == i32 else np.clip(x, -128, 127).astype(out)


@functools.lru_cache(maxsize=None)
def host_isa() -> str:
    """The Mmad path the native code takes on this host (`cube.host_isa`)."""
    from compiler.backend import cube

    return cube.host_isa()


# ------------------------------------------------------------------ memory views
