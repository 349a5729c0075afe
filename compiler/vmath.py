"""vmath: the vector unit's transcendental functions, written once, run twice.

Each function is a straight-line, branch-free recipe (range reduction with rint and exponent bit
operations, a polynomial, selects for the edges) written against a tiny builder interface. `IRB`
emits it as scalar LLVM IR into the element loop of a vector instruction, which LLVM's loop
vectoriser then widens for the host (no libm call, no runtime symbol); `NPB` evaluates the same
recipe on numpy arrays, operation for operation, for the reference interpreter. The two agree bit
for bit: polynomials use `llvm.fmuladd`, which fuses into one rounding where the target has FMA and
is a multiply and an add elsewhere; `NPB` asks the same `compiler.host.target()` and does the same.
So results can differ between an FMA and a no-FMA host in the last bit, never between native and
interpreted runs on one host. sin, cos and pow work in f64 internally (plain mul/add there).

Accuracy, in f32 ulps of the exact result (measured by tests/compiler/test_vmath.py on a strided
sweep of all f32 bit patterns plus the edges, against float64; torch's CPU kernels on the same
sweep are printed by bench/vmath.py). The bounds hold with and without FMA.

==============  =========  ======================================================================
function        bound      method
==============  =========  ======================================================================
exp             1 ulp      n = rint(x/ln2), Cody-Waite r = x - n ln2 (two parts), degree-6
                           polynomial, 2^n applied as two exact power-of-two factors
log             1 ulp      x = 2^k m, m in [sqrt(1/2), sqrt(2)), s = f/(2+f), even polynomial
                           in s (fdlibm's logf); subnormals pre-scaled
tanh            2 ulp      |x| < 0.55: odd polynomial; else 1 - 2/(exp(2|x|) + 1), sign restored
sigmoid         2 ulp      e = exp(-|x|); (x >= 0 ? 1 : e) / (1 + e): no cancellation either side
erf             2 ulp      |x| < 0.921875: x + x Q(x^2); else 1 - exp(-x^2) Q(1/|x|) / |x|
gelu (erf)      4 ulp      x Phi(x) with Phi from the same erf / erfc pieces (erfc for x < 0, x^2
                           split exactly), so the negative tail keeps full relative accuracy
gelu (tanh)     4 ulp      x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) formed in f64:
                           torch's 0.5 x (1 + tanh u) without its cancellation for x < 0
softplus        3 ulp      max(x, 0) + log1p(exp(-|x|)) (log1p as log(1+t) plus the rounding
                           error of 1+t); x > 20 gives x (torch's beta=1, threshold=20)
sin, cos        1 ulp      Payne-Hanek in f64 for every x: x 2/pi mod 4 from five 24-bit pieces
                           of 2/pi chosen by x's exponent (selects, no table), f64 polynomials
pow             1 ulp      exp(y log|x|) in f64, C99 powf edge cases (signs, zeros, infinities)
sqrt            0.5 ulp    IEEE (llvm.sqrt)
rsqrt           1.5 ulp    1 / sqrt(x) (two roundings, as torch's CPU kernel)
reciprocal      0.5 ulp    IEEE division
==============  =========  ======================================================================

Results are exact at the edges: NaN in, NaN out; +-0, +-inf and overflow/underflow give IEEE
results (exp(-inf) = 0, log(0) = -inf, tanh(+-inf) = +-1, ...); subnormal inputs and outputs are
kept (no flush to zero). Where torch's kernel gives NaN for a limit (gelu(-inf) = -inf * 0), so do
these. Subnormal results are measured in units of 2^-149.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.isa import Instr

if TYPE_CHECKING:
    from compiler.codegen import Gen

V = Any  # an IR value (text, type) or a numpy array


def _hexd(v: float) -> str:
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


# ------------------------------------------------------------------ builders
class IRB:
    """Emits LLVM IR into a Gen. Values are (text, type) pairs, type one of float/double/i32/i1."""

    def __init__(self, g: Gen) -> None:
        self.g = g

    def _op(self, text: str, ty: str) -> V:
        return (self.g.op(text), ty)

    def _call(self, name: str, ty: str, *xs: V) -> V:
        sfx = {"float": "f32", "double": "f64"}[ty]
        self.g.intrinsic(f"declare {ty} @llvm.{name}.{sfx}({', '.join([ty] * len(xs))})")
        return self._op(f"call {ty} @llvm.{name}.{sfx}({', '.join(f'{ty} {x[0]}' for x in xs)})", ty)

    # constants
    def f32(self, v: float) -> V:
        return (_hexd(float(np.float32(v))), "float")

    def f64(self, v: float) -> V:
        return (_hexd(v), "double")

    def i32(self, v: int) -> V:
        return (str(int(v)), "i32")

    # arithmetic (type from the operands)
    def _bin(self, fop: str, iop: str, a: V, b: V) -> V:
        ty = a[1]
        return self._op(f"{fop if ty in ('float', 'double') else iop} {ty} {a[0]}, {b[0]}", ty)

    def add(self, a: V, b: V) -> V:
        return self._bin("fadd", "add", a, b)

    def sub(self, a: V, b: V) -> V:
        return self._bin("fsub", "sub", a, b)

    def mul(self, a: V, b: V) -> V:
        return self._bin("fmul", "mul", a, b)

    def div(self, a: V, b: V) -> V:
        return self._op(f"fdiv {a[1]} {a[0]}, {b[0]}", a[1])

    def fma(self, a: V, b: V, c: V) -> V:
        """a * b + c, fused where the target has FMA (llvm.fmuladd)."""
        return self._call("fmuladd", a[1], a, b, c)

    def neg(self, a: V) -> V:
        return self._op(f"fneg {a[1]} {a[0]}", a[1])

    def abs(self, a: V) -> V:
        return self._call("fabs", a[1], a)

    def sqrt(self, a: V) -> V:
        return self._call("sqrt", a[1], a)

    def rint(self, a: V) -> V:
        return self._call("rint", a[1], a)

    def floor(self, a: V) -> V:
        return self._call("floor", a[1], a)

    def band(self, a: V, b: V) -> V:
        return self._op(f"and {a[1]} {a[0]}, {b[0]}", a[1])

    def bor(self, a: V, b: V) -> V:
        return self._op(f"or {a[1]} {a[0]}, {b[0]}", a[1])

    def bxor(self, a: V, b: V) -> V:
        return self._op(f"xor {a[1]} {a[0]}, {b[0]}", a[1])

    def shl(self, a: V, k: int) -> V:
        return self._op(f"shl i32 {a[0]}, {k}", "i32")

    def ashr(self, a: V, k: int) -> V:
        return self._op(f"ashr i32 {a[0]}, {k}", "i32")

    def lshr(self, a: V, k: int) -> V:
        return self._op(f"lshr i32 {a[0]}, {k}", "i32")

    # comparisons: ordered for floats (false on NaN), signed for ints
    def cmp(self, op: str, a: V, b: V) -> V:
        if a[1] == "i32":
            cc = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}[op]
            return self._op(f"icmp {cc} i32 {a[0]}, {b[0]}", "i1")
        cc = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "one"}[op]
        return self._op(f"fcmp {cc} {a[1]} {a[0]}, {b[0]}", "i1")

    def isnan(self, a: V) -> V:
        return self._op(f"fcmp uno {a[1]} {a[0]}, {a[0]}", "i1")

    def sel(self, c: V, a: V, b: V) -> V:
        return self._op(f"select i1 {c[0]}, {a[1]} {a[0]}, {b[1]} {b[0]}", a[1])

    # conversions
    def bits(self, a: V) -> V:
        return self._op(f"bitcast float {a[0]} to i32", "i32")

    def from_bits(self, a: V) -> V:
        return self._op(f"bitcast i32 {a[0]} to float", "float")

    def to_i32(self, a: V) -> V:
        """Truncating conversion; the caller keeps a in range (out of range is poison in LLVM)."""
        return self._op(f"fptosi {a[1]} {a[0]} to i32", "i32")

    def i2f(self, a: V) -> V:
        return self._op(f"sitofp i32 {a[0]} to float", "float")

    def i2d(self, a: V) -> V:
        return self._op(f"sitofp i32 {a[0]} to double", "double")

    def ext(self, a: V) -> V:
        return self._op(f"fpext float {a[0]} to double", "double")

    def trunc(self, a: V) -> V:
        return self._op(f"fptrunc double {a[0]} to float", "float")

    def table(self, name: str, values: list[float], i: V) -> V:
        """values[i] (an f32 constant table; i in range)."""
        n = len(values)
        body = ", ".join(f"float {_hexd(v)}" for v in values)
        self.g.intrinsic(f"@vinci.{name} = internal unnamed_addr constant [{n} x float] [{body}], align 4")
        ix = self.g.op(f"sext i32 {i[0]} to i64")
        p = self.g.op(f"getelementptr inbounds [{n} x float], ptr @vinci.{name}, i64 0, i64 {ix}")
        return self._op(f"load float, ptr {p}, align 4", "float")


F32, F64, I32 = np.float32, np.float64, np.int32


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c rounded once to f32: a * b is exact in f64, the f64 sum is rounded to odd, so
    the final rounding to f32 is the only one that counts (53 >= 24 + 2)."""
    p = np.asarray(a, F64) * np.asarray(b, F64)
    y = np.asarray(c, F64)
    s = p + y
    bb = s - p
    err = (p - (s - bb)) + (y - bb)  # TwoSum: s + err == p + y exactly
    sb = s.view(np.int64)
    fix = (err != 0) & np.isfinite(err) & ((sb & 1) == 0)
    step = np.where(np.signbit(err) == np.signbit(s), 1, -1)
    return np.where(fix, sb + step, sb).view(F64).astype(F32)


class NPB:
    """Evaluates the same recipes on numpy arrays, operation for operation."""

    def __init__(self, fused: bool) -> None:
        self.fused = fused

    def f32(self, v: float) -> V:
        return F32(v)

    def f64(self, v: float) -> V:
        return F64(v)

    def i32(self, v: int) -> V:
        return I32(v)

    def add(self, a: V, b: V) -> V:
        return np.add(a, b)

    def sub(self, a: V, b: V) -> V:
        return np.subtract(a, b)

    def mul(self, a: V, b: V) -> V:
        return np.multiply(a, b)

    def div(self, a: V, b: V) -> V:
        return np.divide(a, b)

    def fma(self, a: V, b: V, c: V) -> V:
        if np.asarray(a).dtype == F64 or not self.fused:
            return np.add(np.multiply(a, b), c)
        return fma_f32(a, b, c)

    def neg(self, a: V) -> V:
        return np.negative(a)

    def abs(self, a: V) -> V:
        return np.abs(a)

    def sqrt(self, a: V) -> V:
        return np.sqrt(a)

    def rint(self, a: V) -> V:
        return np.rint(a)

    def floor(self, a: V) -> V:
        return np.floor(a)

    def band(self, a: V, b: V) -> V:
        return np.bitwise_and(a, b)

    def bor(self, a: V, b: V) -> V:
        return np.bitwise_or(a, b)

    def bxor(self, a: V, b: V) -> V:
        return np.bitwise_xor(a, b)

    def shl(self, a: V, k: int) -> V:
        return np.left_shift(np.asarray(a, I32), k)

    def ashr(self, a: V, k: int) -> V:
        return np.right_shift(np.asarray(a, I32), k)

    def lshr(self, a: V, k: int) -> V:
        return np.right_shift(np.asarray(a, I32).view(np.uint32), k).view(I32)

    def cmp(self, op: str, a: V, b: V) -> V:
        if op == "!=":  # ordered: false on NaN
            return np.less(a, b) | np.greater(a, b)
        fn: Callable[..., V] = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                                "==": np.equal}[op]
        return fn(a, b)

    def isnan(self, a: V) -> V:
        return np.isnan(a)

    def sel(self, c: V, a: V, b: V) -> V:
        return np.where(c, a, b)

    def bits(self, a: V) -> V:
        return np.asarray(a, F32).view(I32)

    def from_bits(self, a: V) -> V:
        return np.asarray(a, I32).view(F32)

    def to_i32(self, a: V) -> V:
        return np.asarray(a).astype(I32)

    def i2f(self, a: V) -> V:
        return np.asarray(a).astype(F32)

    def i2d(self, a: V) -> V:
        return np.asarray(a).astype(F64)

    def ext(self, a: V) -> V:
        return np.asarray(a).astype(F64)

    def trunc(self, a: V) -> V:
        return np.asarray(a).astype(F32)

    def table(self, name: str, values: list[float], i: V) -> V:
        return np.asarray(values, F32)[i]


def horner(b: Any, x: V, coefs: list[float]) -> V:
    """c0 + x (c1 + x (c2 + ...)), coefficients highest last, f32 or f64 by x's type."""
    const = b.f64 if _is64(b, x) else b.f32
    acc = const(coefs[-1])
    for c in reversed(coefs[:-1]):
        acc = b.fma(acc, x, const(c))
    return acc


def _is64(b: Any, x: V) -> bool:
    return x[1] == "double" if isinstance(b, IRB) else np.asarray(x).dtype == F64


def pow2i(b: Any, n: V) -> V:
    """2**n as f32 for an i32 n in [-126, 127]."""
    return b.from_bits(b.shl(b.add(n, b.i32(127)), 23))


# ------------------------------------------------------------------ exp, log
# SLEEF's expf polynomial for exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2
EXP_P = [0.5, 0.166666671633720397949219, 0.0416664853692054748535156, 0.00833336077630519866943359,
         0.00139304355252534151077271, 0.000198527617612853646278381]
LN2_HI, LN2_LO = 0.693145751953125, 1.428606765330187045e-06  # LN2_HI * n is exact for |n| < 2^9


def exp_f32(b: Any, x: V, shift: int = 0) -> V:
    """exp(x) * 2^shift (shift keeps a result that would be subnormal exact for a later multiply)."""
    low = -104.0 - 0.6931471805599453 * shift  # exp(low) 2^shift rounds to 0
    xc = b.sel(b.cmp(">", x, b.f32(low)), x, b.f32(low))  # NaN -> low: kept in range, restored below
    xc = b.sel(b.cmp("<", xc, b.f32(89.0)), xc, b.f32(89.0))
    n = b.rint(b.mul(xc, b.f32(1.4426950408889634)))
    r = b.fma(n, b.f32(-LN2_HI), xc)
    r = b.fma(n, b.f32(-LN2_LO), r)
    p = b.add(b.f32(1.0), b.fma(b.mul(r, r), horner(b, r, EXP_P), r))
    ni = b.to_i32(n)
    if shift:
        ni = b.add(ni, b.i32(shift))
    n1 = b.ashr(ni, 1)
    y = b.mul(b.mul(p, pow2i(b, n1)), pow2i(b, b.sub(ni, n1)))
    return b.sel(b.isnan(x), x, y)


# fdlibm / musl logf: log(1+f) = f - hfsq + s (hfsq + R(s^2)), s = f / (2 + f)
LG = [0.66666662693, 0.40000972152, 0.28498786688, 0.24279078841]
LOG_LN2_HI, LOG_LN2_LO = 6.9313812256e-01, 9.0580006145e-06


def log_f32(b: Any, x: V) -> V:
    tiny = b.cmp("<", x, b.f32(2.0 ** -126))
    xs = b.sel(tiny, b.mul(x, b.f32(2.0 ** 25)), x)  # subnormals (and <= 0, fixed below) scaled up
    ix = b.add(b.bits(xs), b.i32(0x3F800000 - 0x3F3504F3))
    k = b.sub(b.ashr(ix, 23), b.i32(0x7F))
    k = b.sel(tiny, b.sub(k, b.i32(25)), k)
    m = b.from_bits(b.add(b.band(ix, b.i32(0x007FFFFF)), b.i32(0x3F3504F3)))
    f = b.sub(m, b.f32(1.0))
    s = b.div(f, b.add(b.f32(2.0), f))
    z = b.mul(s, s)
    w = b.mul(z, z)
    t1 = b.mul(w, b.fma(w, b.f32(LG[3]), b.f32(LG[1])))
    t2 = b.mul(z, b.fma(w, b.f32(LG[2]), b.f32(LG[0])))
    r = b.add(t2, t1)
    hfsq = b.mul(b.mul(b.f32(0.5), f), f)
    dk = b.i2f(k)
    y = b.add(b.add(b.sub(b.fma(s, b.add(hfsq, r), b.mul(dk, b.f32(LOG_LN2_LO))), hfsq), f),
              b.mul(dk, b.f32(LOG_LN2_HI)))
    y = b.sel(b.cmp("==", x, b.f32(0.0)), b.f32(-math.inf), y)
    y = b.sel(b.cmp("==", x, b.f32(math.inf)), x, y)
    return b.sel(b.cmp(">=", x, b.f32(0.0)), y, b.f32(math.nan))  # x < 0 and NaN give NaN


def log1p_f32(b: Any, t: V) -> V:
    """log(1 + t) for t >= 0: log of the rounded 1 + t plus that rounding's error / (1 + t)."""
    w = b.add(b.f32(1.0), t)
    c = b.sub(t, b.sub(w, b.f32(1.0)))  # exact (Fast2Sum, 1 >= t or w >= t)
    return b.add(log_f32(b, w), b.div(c, w))


# ------------------------------------------------------------------ tanh, sigmoid, softplus
# tanh(x) = x + x^3 T(x^2) on |x| < 0.55 (fitted minimax, relative)
TANH_P = [-0.33333316445350647, 0.13332585990428925, -0.05385230854153633, 0.021071668714284897,
          -0.0062742228619754314]
TANH_SMALL = 0.55


def tanh_f32(b: Any, x: V) -> V:
    a = b.abs(x)
    x2 = b.mul(x, x)
    small = b.fma(b.mul(x2, x), horner(b, x2, TANH_P), x)
    e = exp_f32(b, b.add(a, a))
    big = b.sub(b.f32(1.0), b.div(b.f32(2.0), b.add(e, b.f32(1.0))))
    big = b.from_bits(b.bor(b.bits(big), b.band(b.bits(x), b.i32(-0x80000000))))  # copysign
    return b.sel(b.cmp("<", a, b.f32(TANH_SMALL)), small, big)


def sigmoid_f32(b: Any, x: V) -> V:
    e = exp_f32(b, b.neg(b.abs(x)))
    pos = b.cmp(">=", x, b.f32(0.0))
    d = b.add(b.f32(1.0), e)
    dl = b.sub(e, b.sub(d, b.f32(1.0)))  # 1 + e = d + dl exactly
    r = b.div(b.sel(pos, b.f32(1.0), e), d)
    inv = b.sel(pos, r, b.sub(b.f32(1.0), r))  # 1 / d
    return b.fma(b.neg(r), b.mul(dl, inv), r)  # r / (1 + dl / d)


def softplus_f32(b: Any, x: V) -> V:
    t = exp_f32(b, b.neg(b.abs(x)))
    y = b.add(b.sel(b.cmp(">", x, b.f32(0.0)), x, b.f32(0.0)), log1p_f32(b, t))
    return b.sel(b.cmp(">", x, b.f32(20.0)), x, y)


# ------------------------------------------------------------------ erf, gelu
#: erf(x) = x + x Q(x^2), |x| < ERF_SMALL (fitted minimax, relative)
ERF_Q = [0.12837916612625122, -0.37612634897232056, 0.11283695697784424, -0.026859397068619728,
         0.00520103145390749, -0.0008142697042785585, 8.370069554075599e-05]
ERF_SMALL = 0.921875
ERFC_Q = [0.4938124716281891, -0.17138081789016724, -0.007002412807196379, 0.08022531121969223,
          -0.08433323353528976, 0.050535812973976135, -0.0046112509444355965, -0.0315060093998909,
          0.05263442546129227, -0.07746275514364243, 0.059896115213632584, 0.06054498627781868,
          -0.09838422387838364]
ERFC_T0 = 0.6  # a erfc(a) exp(a^2) = Q(1/a - ERFC_T0), ERF_SMALL <= a <= 10.25 (fitted, relative)
#: the same on the range erf needs (a <= 4): fewer terms
ERFC_Q4 = [0.48180708289146423, -0.17129157483577728, 0.00753352977335453, 0.05903809145092964, -0.06715402752161026,
           0.046030350029468536, -0.017198357731103897, -0.01106953527778387, 0.039584968239068985,
           -0.037234265357255936]
ERFC_T04 = 0.67


def _erfc_tail(b: Any, a: V, a2hi: V, a2lo: V, shift: int = 0, upto4: bool = False) -> tuple[V, V]:
    """(a erfc(a) 2^shift, 1/a) for a >= ERF_SMALL (and a <= 4 if upto4), a^2 = a2hi + a2lo."""
    t = b.div(b.f32(1.0), a)
    e = exp_f32(b, b.neg(a2hi), shift)
    q = horner(b, b.sub(t, b.f32(ERFC_T04)), ERFC_Q4) if upto4 else horner(b, b.sub(t, b.f32(ERFC_T0)), ERFC_Q)
    return b.mul(b.fma(b.neg(a2lo), e, e), q), t


def erf_f32(b: Any, x: V) -> V:
    a = b.abs(x)
    x2 = b.mul(x, x)
    small = b.fma(x, horner(b, x2, ERF_Q), x)
    ac = b.sel(b.cmp("<", a, b.f32(4.0)), a, b.f32(4.0))  # erf(4) rounds to 1; NaN -> 4
    ac = b.sel(b.cmp(">=", ac, b.f32(ERF_SMALL)), ac, b.f32(1.0))
    aec, t = _erfc_tail(b, ac, b.mul(ac, ac), b.f32(0.0), upto4=True)
    big = b.sub(b.f32(1.0), b.mul(aec, t))
    big = b.from_bits(b.bor(b.bits(big), b.band(b.bits(x), b.i32(-0x80000000))))
    y = b.sel(b.cmp("<", a, b.f32(ERF_SMALL)), small, big)
    return b.sel(b.isnan(x), x, y)


def _two_sqr(b: Any, x: V) -> tuple[V, V]:
    """x*x = hi + lo exactly (Dekker's split: plain operations, the same on every host)."""
    c = b.mul(x, b.f32(4097.0))
    xh = b.sub(c, b.sub(c, x))
    xl = b.sub(x, xh)
    hi = b.mul(x, x)
    lo = b.add(b.add(b.sub(b.mul(xh, xh), hi), b.mul(b.add(xh, xh), xl)), b.mul(xl, xl))
    return hi, lo


def gelu_f32(b: Any, x: V) -> V:
    """x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2."""
    a = b.mul(b.abs(x), b.f32(0.7071067811865476))
    half_x = b.mul(x, b.f32(0.5))
    e_small = b.fma(a, horner(b, b.mul(a, a), ERF_Q), a)  # erf(a), a small
    neg = b.cmp("<", x, b.f32(0.0))
    small = b.mul(half_x, b.add(b.f32(1.0), b.sel(neg, b.neg(e_small), e_small)))
    xc = b.sel(b.cmp("<", b.abs(x), b.f32(14.5)), x, b.f32(14.5))  # beyond, Phi rounds to 0 or 1; NaN too
    ac = b.mul(b.abs(xc), b.f32(0.7071067811865476))
    ac = b.sel(b.cmp(">=", ac, b.f32(ERF_SMALL)), ac, b.f32(1.0))
    hi, lo = _two_sqr(b, xc)  # a^2 = x^2 / 2, exactly as hi/2 + lo/2
    aec, t = _erfc_tail(b, ac, b.mul(hi, b.f32(0.5)), b.mul(lo, b.f32(0.5)), 24)
    # x < 0: x erfc(a) / 2 = -a erfc(a) / sqrt 2 (as x = -sqrt(2) a), kept 2^24 up until the last step
    tail = b.mul(b.mul(aec, b.f32(-0.7071067811865476)), b.f32(2.0 ** -24))
    big = b.sel(neg, tail, b.mul(half_x, b.sub(b.f32(2.0), b.mul(b.mul(aec, b.f32(2.0 ** -24)), t))))
    y = b.sel(b.cmp("<", a, b.f32(ERF_SMALL)), small, big)
    y = b.sel(b.cmp(">", x, b.f32(14.5)), x, y)
    y = b.sel(b.cmp("==", x, b.f32(-math.inf)), b.f32(math.nan), y)  # -inf * 0, as torch
    return b.sel(b.isnan(x), x, y)


def gelu_tanh_f32(b: Any, x: V) -> V:
    """0.5 x (1 + tanh u) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3). 2u is formed in f64
    and split into hi + lo, so exp(-2|u|) stays accurate where 2|u| is large."""
    xd = b.ext(x)
    c1 = 2 * math.sqrt(2 / math.pi)
    u2 = b.mul(xd, b.add(b.f64(c1), b.mul(b.mul(xd, xd), b.f64(c1 * 0.044715))))
    u2 = b.sel(b.cmp("<", u2, b.f64(200.0)), u2, b.f64(200.0))  # NaN stays NaN
    u2 = b.sel(b.cmp(">", u2, b.f64(-200.0)), u2, b.f64(-200.0))
    hi = b.trunc(u2)
    lo = b.trunc(b.sub(u2, b.ext(hi)))
    pos = b.cmp(">=", hi, b.f32(0.0))
    es = exp_f32(b, b.sel(pos, b.neg(hi), hi), 24)  # 2^24 exp(-|hi|): never subnormal
    es = b.fma(b.sel(pos, b.neg(lo), lo), es, es)  # exp(-|2u|) = exp(-|hi|) (1 -+ lo)
    e = b.mul(es, b.f32(2.0 ** -24))
    q = b.div(b.sel(pos, x, b.mul(x, es)), b.add(b.f32(1.0), e))
    return b.sel(pos, q, b.mul(q, b.f32(2.0 ** -24)))


# ------------------------------------------------------------------ sin, cos
def _two_over_pi_bits(nbits: int) -> int:
    """floor(2/pi * 2**nbits), from Machin's formula in integers (20 guard bits)."""
    prec = nbits + 20
    one = 1 << prec

    def arctan_inv(k: int) -> int:
        total, term, n, sign = 0, one // k, 1, 1
        while term:
            total += sign * (term // n)
            term //= k * k
            n += 2
            sign = -sign
        return total

    pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))
    return (2 * one << nbits) // pi


_TWO_OVER_PI = _two_over_pi_bits(240)


def _chunk(j0: int) -> int:
    """The 24 bits j0 .. j0+23 of 2/pi = sum b_j 2^-j, as an integer (bits at j < 1 are 0)."""
    return (_TWO_OVER_PI >> (240 - j0 - 23)) & 0xFFFFFF


#: 2/pi = sum_j K_j, K_j = (bits 24j+1 .. 24j+24 of 2/pi) 2^(-24j-24): x K_j is exact in f64
REMPI_K = [_chunk(1 + 24 * j) * 2.0 ** (-24 - 24 * j) for j in range(9)]
# glibc's sinf/cosf polynomials on |r| <= pi/4, in f64
SIN_P = [float.fromhex(h) for h in ("-0x1.555545995a603p-3", "0x1.1107605230bc4p-7", "-0x1.994eb3774cf24p-13")]
COS_P = [float.fromhex(h) for h in ("0x1p0", "-0x1.ffffffd0c621cp-2", "0x1.55553e1068f19p-5", "-0x1.6c087e89a359dp-10",
                                   "0x1.99343027bf8c3p-16")]


def _sincos(b: Any, x: V, cos: bool) -> V:
    """sin or cos: |x| 2/pi = n + f exactly enough (f in [-1/2, 1/2]), r = f pi/2, quadrant n mod 4."""
    # |x| = m 2^e (m < 2^24): the terms x K_j with j < (e - 2) / 24 are multiples of 4 and drop out
    # of x 2/pi mod 4; the next five (products exact in f64) leave an error below 2^-70. The first
    # two can reach 2^49 and 2^25: each is reduced mod 4 exactly before they are added. Selects, not
    # a table, so the loop stays vectorisable without gathers.
    be = b.lshr(b.band(b.bits(x), b.i32(0x7FFFFFFF)), 23)
    ad = b.ext(b.abs(x))
    p = []
    for k in range(5):
        kk = b.f64(REMPI_K[k])
        for j in range(1, 5):  # e >= 24 j + 2, e = be - 150
            kk = b.sel(b.cmp(">=", be, b.i32(24 * j + 152)), b.f64(REMPI_K[j + k]), kk)
        p.append(b.mul(ad, kk))
    a = b.add(*[b.sub(v, b.mul(b.f64(4.0), b.floor(b.mul(v, b.f64(0.25))))) for v in p[:2]])  # exact
    n = b.rint(b.add(a, p[2]))
    f = b.add(b.add(b.sub(a, n), p[2]), b.add(p[3], p[4]))
    r = b.mul(f, b.f64(math.pi / 2))
    r2 = b.mul(r, r)
    sn = b.add(r, b.mul(b.mul(r2, r), horner(b, r2, SIN_P)))
    cs = horner(b, r2, COS_P)
    q = b.to_i32(n)
    if cos:
        q = b.add(q, b.i32(1))
    odd = b.cmp("!=", b.band(q, b.i32(1)), b.i32(0))
    y = b.trunc(b.sel(odd, cs, sn))
    flip = b.band(b.shl(q, 30), b.i32(-0x80000000))  # quadrants 2, 3 negate
    if not cos:
        flip = b.bxor(flip, b.band(b.bits(x), b.i32(-0x80000000)))  # sin is odd
    y = b.from_bits(b.bxor(b.bits(y), flip))
    return b.sel(b.cmp("<", b.abs(x), b.f32(math.inf)), y, b.f32(math.nan))


def sin_f32(b: Any, x: V) -> V:
    return _sincos(b, x, False)


def cos_f32(b: Any, x: V) -> V:
    return _sincos(b, x, True)


# ------------------------------------------------------------------ pow
# fdlibm's log polynomial (double): log(1+f) = f - hfsq + s (hfsq + R), R = sum Lg_k s^2k
LG64 = [6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01, 2.222219843214978396e-01,
        1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01]
EXP64 = [1.0 / math.factorial(k) for k in range(12)]


def pow_f32(b: Any, x: V, y: V) -> V:
    """x**y as C's powf: exp(y log|x|) in f64 (one rounding to f32), then the C99 edge cases."""
    ax = b.abs(x)
    tiny = b.cmp("<", ax, b.f32(2.0 ** -126))
    ix = b.add(b.bits(b.sel(tiny, b.mul(ax, b.f32(2.0 ** 25)), ax)), b.i32(0x3F800000 - 0x3F3504F3))
    k = b.sub(b.ashr(ix, 23), b.sel(tiny, b.i32(0x7F + 25), b.i32(0x7F)))
    f = b.sub(b.ext(b.from_bits(b.add(b.band(ix, b.i32(0x7FFFFF)), b.i32(0x3F3504F3)))), b.f64(1.0))
    s = b.div(f, b.add(b.f64(2.0), f))
    z = b.mul(s, s)
    w = b.mul(z, z)
    r = b.add(b.mul(z, horner(b, w, LG64[0::2])), b.mul(w, horner(b, w, LG64[1::2])))
    hfsq = b.mul(b.mul(b.f64(0.5), f), f)
    lg = b.add(b.mul(b.i2d(k), b.f64(math.log(2))), b.sub(f, b.sub(hfsq, b.mul(s, b.add(hfsq, r)))))
    lg = b.sel(b.cmp("==", ax, b.f32(0.0)), b.f64(-math.inf), lg)
    lg = b.sel(b.cmp("==", ax, b.f32(math.inf)), b.f64(math.inf), lg)
    t = b.mul(b.ext(y), lg)
    t = b.sel(b.cmp("<", t, b.f64(90.0)), t, b.f64(90.0))  # NaN -> 90, restored below
    t = b.sel(b.cmp(">", t, b.f64(-110.0)), t, b.f64(-110.0))
    n = b.rint(b.mul(t, b.f64(1.4426950408889634)))
    rr = b.sub(b.sub(t, b.mul(n, b.f64(6.93147180369123816490e-01))), b.mul(n, b.f64(1.90821492927058770002e-10)))
    ni = b.to_i32(n)
    n1 = b.ashr(ni, 1)
    mag = b.mul(b.mul(horner(b, rr, EXP64), b.ext(pow2i(b, n1))), b.ext(pow2i(b, b.sub(ni, n1))))
    mag = b.trunc(mag)
    ay = b.abs(y)
    yint = b.cmp("==", b.rint(y), y)
    yi = b.to_i32(b.sel(b.band(yint, b.cmp("<", ay, b.f32(2.0 ** 24))), y, b.f32(0.0)))
    sign = b.band(b.band(b.shl(yi, 31), b.bits(x)), b.i32(-0x80000000))  # x negative, y an odd integer
    res = b.from_bits(b.bxor(b.bits(mag), sign))
    bad = b.bor(b.bor(b.isnan(x), b.isnan(y)),
                b.band(b.band(b.cmp("<", x, b.f32(0.0)), b.cmp(">", x, b.f32(-math.inf))), b.bxor(yint, b.cmp("==", y, y))))
    res = b.sel(bad, b.f32(math.nan), res)
    one = b.bor(b.bor(b.cmp("==", x, b.f32(1.0)), b.cmp("==", y, b.f32(0.0))),
                b.band(b.cmp("==", x, b.f32(-1.0)), b.cmp("==", ay, b.f32(math.inf))))
    return b.sel(one, b.f32(1.0), res)


# ------------------------------------------------------------------ dispatch
def sqrt_f32(b: Any, x: V) -> V:
    return b.sqrt(x)


def rsqrt_f32(b: Any, x: V) -> V:
    return b.div(b.f32(1.0), b.sqrt(x))


def recip_f32(b: Any, x: V) -> V:
    return b.div(b.f32(1.0), x)


#: vector instruction -> its recipe (f32 operands in, f32 out)
FUNCS: dict[Instr, Callable[..., V]] = {
    Instr.VEXP: exp_f32, Instr.VLOG: log_f32, Instr.VTANH: tanh_f32, Instr.VSIGMOID: sigmoid_f32,
    Instr.VERF: erf_f32, Instr.VGELU: gelu_f32, Instr.VGELU_TANH: gelu_tanh_f32, Instr.VSOFTPLUS: softplus_f32,
    Instr.VSIN: sin_f32, Instr.VCOS: cos_f32, Instr.VPOW: pow_f32, Instr.VSQRT: sqrt_f32,
    Instr.VRSQRT: rsqrt_f32, Instr.VRECIP: recip_f32,
}


def emit(g: Gen, instr: Instr, xs: list[str]) -> str:
    """LLVM IR for one element of `instr` on f32 operands xs (SSA names); returns the result's name."""
    out = FUNCS[instr](IRB(g), *[(x, "float") for x in xs])
    return str(out[0])


def evaluate(instr: Instr, xs: list[Any]) -> np.ndarray:
    """The same element rule on numpy f32 arrays, bit-identical to the native code of this host."""
    from compiler.host import target

    args = [np.asarray(x, F32) for x in xs]
    if len(args) > 1:
        args = [np.ascontiguousarray(a) for a in np.broadcast_arrays(*args)]
    with np.errstate(all="ignore"):
        return np.asarray(FUNCS[instr](NPB(target().has("fma")), *args), F32)


# ------------------------------------------------------------------ accuracy (tests, bench)
def _ref_erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), F64)


def _ref_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * np.asarray(np.frompyfunc(math.erfc, 1, 1)(-x / math.sqrt(2)), F64)


def _ref_gelu_tanh(x: np.ndarray) -> np.ndarray:
    u2 = 2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    return x / (1 + np.exp(-u2))


def _ref_softplus(x: np.ndarray) -> np.ndarray:
    return np.where(x > 20, x, np.logaddexp(0.0, x))


#: float64 references of the unary functions (x already f64)
REFERENCE: dict[Instr, Callable[[np.ndarray], np.ndarray]] = {
    Instr.VEXP: np.exp, Instr.VLOG: np.log, Instr.VTANH: np.tanh, Instr.VSIGMOID: lambda x: 1 / (1 + np.exp(-x)),
    Instr.VERF: _ref_erf, Instr.VGELU: _ref_gelu, Instr.VGELU_TANH: _ref_gelu_tanh, Instr.VSOFTPLUS: _ref_softplus,
    Instr.VSIN: np.sin, Instr.VCOS: np.cos, Instr.VSQRT: np.sqrt, Instr.VRSQRT: lambda x: 1 / np.sqrt(x),
    Instr.VRECIP: lambda x: 1 / x,
}

#: the stated bounds in f32 ulps (the table of the module docstring); pow's is for both operands
BOUND: dict[Instr, float] = {
    Instr.VEXP: 1, Instr.VLOG: 1, Instr.VTANH: 2, Instr.VSIGMOID: 2, Instr.VERF: 2, Instr.VGELU: 4,
    Instr.VGELU_TANH: 4, Instr.VSOFTPLUS: 3, Instr.VSIN: 1, Instr.VCOS: 1, Instr.VPOW: 1, Instr.VSQRT: 0.5,
    Instr.VRSQRT: 1.5, Instr.VRECIP: 0.5,
}


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the f32 spacing at ref (2^-149 for subnormal results). An infinite or
    out-of-range ref must be matched by an infinity of its sign, a NaN by a NaN (else the error is inf)."""
    g = np.asarray(got, F64)
    with np.errstate(all="ignore"):
        a = np.abs(ref)
        e = np.clip(np.floor(np.log2(np.where(a > 0, a, 1.0))), -126, 127)
        err = np.abs(g - ref) / np.exp2(e - 23)
        over = np.isinf(ref) | (a >= float(np.finfo(F32).max) * (1 + 2.0 ** -25))
        err = np.where(over, np.where(np.isinf(g) & (np.sign(g) == np.sign(ref)), 0.0, np.inf), err)
        err = np.where(np.isnan(ref), np.where(np.isnan(g), 0.0, np.inf), np.where(np.isnan(g), np.inf, err))
    return err


def sweep(step: int = 997) -> np.ndarray:
    """Every step-th f32 bit pattern (both signs, subnormals, infinities, NaNs) plus the edges."""
    x = np.arange(0, 1 << 32, step, dtype=np.uint64).astype(np.uint32).view(F32)
    edges = [0.0, -0.0, 2.0 ** -149, -2.0 ** -149, 2.0 ** -126, -2.0 ** -126, float(np.finfo(F32).max),
             -float(np.finfo(F32).max), math.inf, -math.inf, math.nan, 88.72283, 88.72284, -87.33654, -103.97208,
             -104.0, 1.0, -1.0, 0.5, 20.0, 20.000002, 1.5707964, -1.5707964, 3.1415927, 0.55, 0.921875, 14.5]
    return np.concatenate([x, np.asarray(edges, F32)])
