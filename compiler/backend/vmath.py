"""vmath: the vector unit's transcendental functions, written once, run twice.

Each function is a recipe (range reduction with rint and exponent bit operations, a polynomial,
selects for the edges) written against a tiny builder interface (compiler/backend/vmath_build.py). `IRB`
emits it as scalar LLVM IR into the element loop of a vector instruction, which LLVM's loop
vectoriser then widens for the host (no libm call, no runtime symbol); `NPB` evaluates the same
recipe on numpy arrays, operation for operation, for the reference interpreter. The two agree bit
for bit: f32 polynomials use `llvm.fmuladd`, which fuses into one rounding where the target has FMA
and is a multiply and an add elsewhere; `NPB` asks the same `compiler.host.target()` and does the
same. So results can differ between an FMA and a no-FMA host in the last bit, never between native
and interpreted runs on one host. sin, cos and pow work in f64 internally (plain mul/add there).

Most recipes are branch-free and inline. sin and cos are `GUARDED`: a cheap recipe valid for
|x| < 2^20 and an exact one for every x, guard ? fast : exact element by element. They are emitted
as internal functions with vector variants (`vector-function-abi-variant`) that the loop vectoriser
calls once per vector; a variant runs the exact recipe only if some lane needs it (a branch, which
inline code in a vectorised loop cannot have). Long polynomials are partly evaluated by Estrin's
scheme, and the loop around a `HEAVY` recipe asks the vectoriser to interleave two vectors
(`Gen.loop`): their speed is set by the length of the dependency chain, not the instruction count.

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
gelu (erf)      6 ulp      one tail Q(u) = 1 - Phi(u), u = |x|: exp(-u^2/2) t P(t), t = 1/(1 +
                           0.4375 u), u^2/2 split exactly; x - x Q for x >= 0, x Q for x < 0, so
                           the negative tail keeps its relative accuracy (torch's: ~1e7 ulp there)
gelu (tanh)     4 ulp      x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) formed in f64:
                           torch's 0.5 x (1 + tanh u) without its cancellation for x < 0
softplus        3 ulp      max(x, 0) + log1p(exp(-|x|)) (log1p as log(1+t) plus the rounding
                           error of 1+t); x > 20 gives x (torch's beta=1, threshold=20)
sin, cos        1 ulp      |x| < 2^20: Cody-Waite in f64, n = rint(x 2/pi), pi/2 in three parts;
                           else Payne-Hanek in f64: x 2/pi mod 4 from five 24-bit pieces of 2/pi
                           chosen by x's exponent (selects, no table); f64 polynomials
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
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.backend.vmath_build import F32, F64, IRB, NPB, V, estrin, horner, pow2i
from compiler.backend.vmath_trig import sincos_exact, sincos_fast, sincos_guard
from simulator.isa import Instr

if TYPE_CHECKING:
    from compiler.backend.gen import Gen


# ------------------------------------------------------------------ exp, log
# SLEEF's expf polynomial for exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2
EXP_P = [0.5, 0.166666671633720397949219, 0.0416664853692054748535156, 0.00833336077630519866943359,
         0.00139304355252534151077271, 0.000198527617612853646278381]
LN2_HI, LN2_LO = 0.693145751953125, 1.428606765330187045e-06  # LN2_HI * n is exact for |n| < 2^9


def exp_f32(b: Any, x: V, shift: int = 0, edges: bool = True) -> V:
    """exp(x) * 2^shift (shift keeps a result that would be subnormal exact for a later multiply).
    edges=False: the caller keeps x (no NaN) where 2^(rint(x / ln2) + shift) is normal; no clamps."""
    xc = x
    if edges:
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
    if not edges:  # the caller keeps n + shift in [-126, 127]: one factor
        return b.mul(p, pow2i(b, ni))
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
#: a erfc(a) exp(a^2) = Q(1/a - ERFC_T0), ERF_SMALL <= a <= 4 (fitted, relative)
ERFC_Q = [0.48180708289146423, -0.17129157483577728, 0.00753352977335453, 0.05903809145092964, -0.06715402752161026,
          0.046030350029468536, -0.017198357731103897, -0.01106953527778387, 0.039584968239068985,
          -0.037234265357255936]
ERFC_T0 = 0.67


def erf_f32(b: Any, x: V) -> V:
    """|x| < ERF_SMALL: x + x Q(x^2); else 1 - exp(-a^2) Q(1/a) / a, a = |x| clamped to [ERF_SMALL, 4]
    (erf(4) rounds to 1), sign restored. Both polynomials partly by Estrin (latency)."""
    a = b.abs(x)
    small = b.fma(x, estrin(b, b.mul(x, x), ERF_Q, 2), x)
    ac = b.sel(b.cmp("<", a, b.f32(4.0)), a, b.f32(4.0))  # NaN -> 4
    ac = b.sel(b.cmp(">=", ac, b.f32(ERF_SMALL)), ac, b.f32(1.0))
    t = b.div(b.f32(1.0), ac)
    aec = b.mul(exp_f32(b, b.neg(b.mul(ac, ac)), edges=False), estrin(b, b.sub(t, b.f32(ERFC_T0)), ERFC_Q, 3))
    big = b.sub(b.f32(1.0), b.mul(aec, t))
    big = b.from_bits(b.bor(b.bits(big), b.band(b.bits(x), b.i32(-0x80000000))))
    y = b.sel(b.cmp("<", a, b.f32(ERF_SMALL)), small, big)
    return b.sel(b.isnan(x), x, y)


def _two_prod(b: Any, x: V, y: V) -> tuple[V, V]:
    """x*y = hi + lo exactly: lo by a fused multiply-add where the target has one, else Dekker's split
    (both exact, so the two hosts agree)."""
    hi = b.mul(x, y)
    if b.fused:
        return hi, b.fma(x, y, b.neg(hi))
    c = b.f32(4097.0)
    xh = b.sub(b.mul(x, c), b.sub(b.mul(x, c), x))
    yh = b.sub(b.mul(y, c), b.sub(b.mul(y, c), y))
    xl, yl = b.sub(x, xh), b.sub(y, yh)
    return hi, b.add(b.add(b.add(b.sub(b.mul(xh, yh), hi), b.mul(xh, yl)), b.mul(xl, yh)), b.mul(xl, yl))


#: Q(u) = 1 - Phi(u) = exp(-u^2/2) t P(t - GELU_T0), t = 1 / (1 + GELU_P u), 0 <= u <= 14.5 (fitted, relative)
GELU_P, GELU_T0 = 0.4375, 0.5680851340293884
GELU_Q = [0.3276728093624115, 0.3639073967933655, 0.13281777501106262, -0.10880871117115021, -0.05573294684290886,
          0.07923047244548798, 0.0004199671093374491, -0.058890316635370255, 0.038684479892253876,
          0.024618059396743774, -0.03795814514160156]


def gelu_f32(b: Any, x: V) -> V:
    """x Phi(x) from one tail Q(u) = 1 - Phi(u), u = |x|: x - x Q for x >= 0, x Q for x < 0. u^2/2 is
    split exactly into hi + lo for exp, which is kept 2^26 up so the x < 0 tail stays exact until the
    last rounding. u is clamped at 14.5 (beyond, Phi rounds to 0 or 1), in x Q too, so +inf needs no
    select of its own; NaN and -inf share one."""
    u = b.abs(x)
    u = b.sel(b.cmp("<", u, b.f32(14.5)), u, b.f32(14.5))  # NaN -> 14.5
    hi, lo = _two_prod(b, b.mul(u, b.f32(0.5)), u)
    e = exp_f32(b, b.neg(hi), 26, edges=False)  # 2^26 exp(-hi); n = -152 at most
    t = b.div(b.f32(1.0), b.fma(b.f32(GELU_P), u, b.f32(1.0)))
    tp = b.mul(t, estrin(b, b.sub(t, b.f32(GELU_T0)), GELU_Q, 3))
    q = b.mul(e, b.fma(b.neg(lo), tp, tp))  # 2^26 Q(u): exp(-lo) = 1 - lo applied on the t side (shorter)
    sign = b.band(b.bits(x), b.i32(-0x80000000))
    xq = b.mul(b.mul(b.from_bits(b.bor(b.bits(u), sign)), q), b.f32(2.0 ** -26))  # x Q(u), |x| <= 14.5
    y = b.sel(b.cmp("<", b.bits(x), b.i32(0)), xq, b.sub(x, xq))  # by the sign bit: gelu(-0) = -0
    return b.sel(b.cmp(">", x, b.f32(-math.inf)), y, b.f32(math.nan))  # NaN, and -inf * 0 as torch


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


# ------------------------------------------------------------------ sin, cos (compiler.backend.vmath_trig)
def sin_f32(b: Any, x: V) -> V:
    return b.sel(sincos_guard(b, x), sincos_fast(b, x, False), sincos_exact(b, x, False))


def cos_f32(b: Any, x: V) -> V:
    return b.sel(sincos_guard(b, x), sincos_fast(b, x, True), sincos_exact(b, x, True))


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


#: unary functions with a cheap recipe valid where a guard holds and a dear one for the rest:
#: instr -> (guard, fast, exact). FUNCS has their meaning, guard ? fast : exact, element by element.
# long recipes (dependency chains of tens of instructions): their loops interleave two vectors
HEAVY = frozenset({Instr.VEXP, Instr.VLOG, Instr.VTANH, Instr.VSIGMOID, Instr.VERF, Instr.VGELU, Instr.VGELU_TANH,
                   Instr.VSOFTPLUS, Instr.VPOW})

GUARDED: dict[Instr, tuple[Callable[..., V], Callable[..., V], Callable[..., V]]] = {
    Instr.VSIN: (sincos_guard, lambda b, x: sincos_fast(b, x, False), lambda b, x: sincos_exact(b, x, False)),
    Instr.VCOS: (sincos_guard, lambda b, x: sincos_fast(b, x, True), lambda b, x: sincos_exact(b, x, True)),
}
LANES = (2, 4, 8, 16)  # the vector variants offered to the loop vectoriser
_FN_ATTRS = 'noinline nounwind willreturn memory(none) "prefer-vector-width"="512" "min-legal-vector-width"="512"'
_USED = "@llvm.compiler.used"


class _Body:
    """Collects one function's instructions (the part of Gen that IRB uses)."""

    def __init__(self, g: Gen) -> None:
        self.g = g
        self.lines: list[str] = []
        self.n = 0

    def op(self, text: str) -> str:
        self.n += 1
        self.lines.append(f"  %t{self.n} = {text}")
        return f"%t{self.n}"

    def intrinsic(self, decl: str) -> None:
        self.g.intrinsic(decl)


def _define(g: Gen, instr: Instr, name: str, lanes: int) -> None:
    """`name`(x) = guard ? fast : exact on a float or a <lanes x float>; the exact recipe runs only when
    some lane needs it (a branch: this is why these are functions, not inline code)."""
    guard, fast, exact = GUARDED[instr]
    body = _Body(g)
    b = IRB(body, lanes)
    t = b.ty("float")
    x = ("%x", "float")
    ok = guard(b, x)
    yf = fast(b, x)
    allok = body.op(f"icmp eq i{lanes} {body.op(f'bitcast <{lanes} x i1> {ok[0]} to i{lanes}')}, -1") if lanes else ok[0]
    body.lines += [f"  br i1 {allok}, label %done, label %slow", "slow:"]
    ye = exact(b, x)
    if lanes:
        ye = b.sel(ok, yf, ye)
    body.lines += ["  br label %done", "done:", f"  %y = phi {t} [{yf[0]}, %entry], [{ye[0]}, %slow]", f"  ret {t} %y"]
    g.intrinsic(f"define internal {t} @{name}({t} %x) {_FN_ATTRS} {{\nentry:\n" + "\n".join(body.lines) + "\n}")


def _call_guarded(g: Gen, instr: Instr, x: str) -> str:
    """A call of the guarded function; its vector variants (kept alive through llvm.compiler.used) let
    the loop vectoriser call one per vector of elements."""
    name = f"vinci_{instr.name.lower()}"
    variants = [f"{name}_v{n}" for n in LANES]
    old = next((d for d in g.decls if d.startswith(_USED)), None)
    used = [] if old is None else re.findall(r"ptr @(\w+)", old)
    if variants[0] not in used:
        _define(g, instr, name, 0)
        for n, v in zip(LANES, variants):
            _define(g, instr, v, n)
        used += variants
        if old is not None:
            g.decls.discard(old)
        g.intrinsic(f"{_USED} = appending global [{len(used)} x ptr] [{', '.join(f'ptr @{u}' for u in used)}], "
                    'section "llvm.metadata"')
    abi = ",".join(f"_ZGV_LLVM_N{n}v_{name}({v})" for n, v in zip(LANES, variants))
    return g.op(f'call float @{name}(float {x}) nounwind willreturn memory(none) "vector-function-abi-variant"="{abi}"')


def emit(g: Gen, instr: Instr, xs: list[str]) -> str:
    """LLVM IR for one element of `instr` on f32 operands xs (SSA names); returns the result's name."""
    if instr in GUARDED:
        return _call_guarded(g, instr, xs[0])
    if instr in HEAVY:
        g.heavy = True
    out = FUNCS[instr](IRB(g), *[(x, "float") for x in xs])
    return str(out[0])


def evaluate(instr: Instr, xs: list[Any]) -> np.ndarray:
    """The same element rule on numpy f32 arrays, bit-identical to the native code of this host."""
    from compiler.host import target

    args = [np.asarray(x, F32) for x in xs]
    if len(args) > 1:
        args = [np.ascontiguousarray(a) for a in np.broadcast_arrays(*args)]
    b = NPB(target().has("fma"))
    with np.errstate(all="ignore"):
        if instr in GUARDED:  # the exact recipe only where it is needed (the same values as FUNCS)
            guard, fast, exact = GUARDED[instr]
            x = args[0].ravel()
            ok = np.asarray(guard(b, x), bool)
            y = np.array(fast(b, x), F32)
            y[~ok] = exact(b, x[~ok])
            return y.reshape(args[0].shape)
        return np.asarray(FUNCS[instr](b, *args), F32)


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
    Instr.VEXP: 1, Instr.VLOG: 1, Instr.VTANH: 2, Instr.VSIGMOID: 2, Instr.VERF: 2, Instr.VGELU: 6,
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
