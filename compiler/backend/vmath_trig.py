"""sin and cos for `vmath`: a cheap Cody-Waite reduction where it is exact enough (|x| < 2^20,
nearly every input) and Payne-Hanek for every other x.

Both work in f64 with plain multiplies and adds (the same bits on every host). `sincos_fast` is valid
for |x| < SINCOS_FAST; `sincos_exact` for every x. vmath runs them as a guarded pair: the exact recipe
is computed only for a vector that holds an element outside the fast range.
"""
from __future__ import annotations

import math
from typing import Any

from compiler.backend.vmath_build import V, horner


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
#: pi/2 = PIO2[0] + PIO2[1] + PIO2[2] + O(2^-120) (fdlibm's pio2_1, pio2_2, pio2_2t): the first two have
#: 33 significant bits, so n PIO2[k] is exact for |n| < 2^20
PIO2 = [float.fromhex("0x1.921fb544p+0"), float.fromhex("0x1.0b4611a6p-34"), 2.02226624879595063154e-21]
SINCOS_FAST = 2.0 ** 20


def _finish(b: Any, x: V, n: V, r: V, cos: bool) -> V:
    """sin or cos of x from x = n pi/2 + r (n an f64 integer, |r| <= pi/4 in f64)."""
    r2 = b.mul(r, r)
    sn = b.add(r, b.mul(b.mul(r2, r), horner(b, r2, SIN_P)))
    cs = horner(b, r2, COS_P)
    q = b.to_i32(n)
    if cos:
        q = b.add(q, b.i32(1))
    odd = b.cmp("!=", b.band(q, b.i32(1)), b.i32(0))
    y = b.trunc(b.sel(odd, cs, sn))
    flip = b.band(b.shl(q, 30), b.i32(-0x80000000))  # quadrants 2, 3 negate
    return b.from_bits(b.bxor(b.bits(y), flip))


def sincos_fast(b: Any, x: V, cos: bool) -> V:
    """|x| < 2^20: n = rint(x 2/pi) (|n| < 2^20), r = x - n pi/2 with pi/2 in three parts. x - n PIO2[0]
    is exact (Sterbenz), n PIO2[1] is exact, and the one rounding after it is relative to what is left,
    |r| + 2^-49 with |r| > 2^-35 here: r has a relative error below 2^-50."""
    xd = b.ext(x)
    n = b.rint(b.mul(xd, b.f64(2 / math.pi)))
    r = b.sub(xd, b.mul(n, b.f64(PIO2[0])))
    r = b.sub(r, b.mul(n, b.f64(PIO2[1])))
    r = b.sub(r, b.mul(n, b.f64(PIO2[2])))
    return _finish(b, x, n, r, cos)


def sincos_exact(b: Any, x: V, cos: bool) -> V:
    """Any x: Payne-Hanek, |x| 2/pi = n + f exactly enough (f in [-1/2, 1/2]), r = f pi/2, sign by hand."""
    # |x| = m 2^e (m < 2^24): the terms x K_j with j < (e - 2) / 24 are multiples of 4 and drop out
    # of x 2/pi mod 4; the next five (products exact in f64) leave an error below 2^-70. The first
    # two can reach 2^49 and 2^25: each is reduced mod 4 exactly before they are added. Selects, not
    # a table, so the code stays vectorisable without gathers.
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
    y = _finish(b, x, n, b.mul(f, b.f64(math.pi / 2)), cos)
    if not cos:  # sin is odd: the reduction was of |x|
        y = b.from_bits(b.bxor(b.bits(y), b.band(b.bits(x), b.i32(-0x80000000))))
    return b.sel(b.cmp("<", b.abs(x), b.f32(math.inf)), y, b.f32(math.nan))


def sincos_guard(b: Any, x: V) -> V:
    """Where sincos_fast is valid (false for NaN and infinities)."""
    return b.cmp("<", b.abs(x), b.f32(SINCOS_FAST))
