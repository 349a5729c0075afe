"""The two builders the vmath recipes are written against, and the helpers they share.

`IRB` emits LLVM IR into a `Gen` (or anything with `op` and `intrinsic`): scalar IR, or with
`lanes` the same operations on `<lanes x T>` vectors (the vector variants of `vmath.GUARDED`
functions). `NPB` evaluates a recipe on numpy arrays, operation for operation. f32 multiply-adds
(`fma`) are `llvm.fmuladd`, fused where the target has FMA, and `NPB` rounds them the same way; f64
ones are a plain multiply and add on every host (numpy has no fused f64 multiply-add).
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

V = Any  # an IR value (text, type) or a numpy array


def _hexd(v: float) -> str:
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


class IRB:
    """Emits LLVM IR into g. Values are (text, type) pairs, type one of float/double/i32/i1 (the
    element type: with lanes > 0 every value is a <lanes x type> vector)."""

    def __init__(self, g: Any, lanes: int = 0) -> None:
        from compiler.host import target

        self.g = g
        self.lanes = lanes
        self.fused = target().has("fma")  # llvm.fmuladd fuses

    def ty(self, t: str) -> str:
        return f"<{self.lanes} x {t}>" if self.lanes else t

    def _op(self, text: str, ty: str) -> V:
        return (self.g.op(text), ty)

    def _call(self, name: str, ty: str, *xs: V) -> V:
        sfx = {"float": "f32", "double": "f64"}[ty]
        if self.lanes:
            sfx = f"v{self.lanes}{sfx}"
        t = self.ty(ty)
        self.g.intrinsic(f"declare {t} @llvm.{name}.{sfx}({', '.join([t] * len(xs))})")
        return self._op(f"call {t} @llvm.{name}.{sfx}({', '.join(f'{t} {x[0]}' for x in xs)})", ty)

    def _const(self, text: str, ty: str) -> V:
        return (f"splat ({ty} {text})" if self.lanes else text, ty)

    # constants
    def f32(self, v: float) -> V:
        return self._const(_hexd(float(np.float32(v))), "float")

    def f64(self, v: float) -> V:
        return self._const(_hexd(v), "double")

    def i32(self, v: int) -> V:
        return self._const(str(int(v)), "i32")

    # arithmetic (type from the operands)
    def _bin(self, fop: str, iop: str, a: V, b: V) -> V:
        ty = a[1]
        return self._op(f"{fop if ty in ('float', 'double') else iop} {self.ty(ty)} {a[0]}, {b[0]}", ty)

    def add(self, a: V, b: V) -> V:
        return self._bin("fadd", "add", a, b)

    def sub(self, a: V, b: V) -> V:
        return self._bin("fsub", "sub", a, b)

    def mul(self, a: V, b: V) -> V:
        return self._bin("fmul", "mul", a, b)

    def div(self, a: V, b: V) -> V:
        return self._op(f"fdiv {self.ty(a[1])} {a[0]}, {b[0]}", a[1])

    def fma(self, a: V, b: V, c: V) -> V:
        """a * b + c: in f32 fused where the target has FMA (llvm.fmuladd); in f64 never fused."""
        if a[1] == "double":
            return self.add(self.mul(a, b), c)
        return self._call("fmuladd", a[1], a, b, c)

    def neg(self, a: V) -> V:
        return self._op(f"fneg {self.ty(a[1])} {a[0]}", a[1])

    def abs(self, a: V) -> V:
        return self._call("fabs", a[1], a)

    def sqrt(self, a: V) -> V:
        return self._call("sqrt", a[1], a)

    def rint(self, a: V) -> V:
        return self._call("rint", a[1], a)

    def floor(self, a: V) -> V:
        return self._call("floor", a[1], a)

    def _ibin(self, op: str, a: V, b: V) -> V:
        return self._op(f"{op} {self.ty(a[1])} {a[0]}, {b[0]}", a[1])

    def band(self, a: V, b: V) -> V:
        return self._ibin("and", a, b)

    def bor(self, a: V, b: V) -> V:
        return self._ibin("or", a, b)

    def bxor(self, a: V, b: V) -> V:
        return self._ibin("xor", a, b)

    def shl(self, a: V, k: int) -> V:
        return self._ibin("shl", a, self.i32(k))

    def ashr(self, a: V, k: int) -> V:
        return self._ibin("ashr", a, self.i32(k))

    def lshr(self, a: V, k: int) -> V:
        return self._ibin("lshr", a, self.i32(k))

    # comparisons: ordered for floats (false on NaN), signed for ints
    def cmp(self, op: str, a: V, b: V) -> V:
        if a[1] == "i32":
            cc = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}[op]
            return self._op(f"icmp {cc} {self.ty('i32')} {a[0]}, {b[0]}", "i1")
        cc = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "one"}[op]
        return self._op(f"fcmp {cc} {self.ty(a[1])} {a[0]}, {b[0]}", "i1")

    def isnan(self, a: V) -> V:
        return self._op(f"fcmp uno {self.ty(a[1])} {a[0]}, {a[0]}", "i1")

    def sel(self, c: V, a: V, b: V) -> V:
        t = self.ty(a[1])
        return self._op(f"select {self.ty('i1')} {c[0]}, {t} {a[0]}, {t} {b[0]}", a[1])

    # conversions
    def _conv(self, op: str, a: V, to: str) -> V:
        return self._op(f"{op} {self.ty(a[1])} {a[0]} to {self.ty(to)}", to)

    def bits(self, a: V) -> V:
        return self._conv("bitcast", a, "i32")

    def from_bits(self, a: V) -> V:
        return self._conv("bitcast", a, "float")

    def to_i32(self, a: V) -> V:
        """Truncating conversion; the caller keeps a in range (out of range is poison in LLVM)."""
        return self._conv("fptosi", a, "i32")

    def i2f(self, a: V) -> V:
        return self._conv("sitofp", a, "float")

    def i2d(self, a: V) -> V:
        return self._conv("sitofp", a, "double")

    def ext(self, a: V) -> V:
        return self._conv("fpext", a, "double")

    def trunc(self, a: V) -> V:
        return self._conv("fptrunc", a, "float")


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


def horner(b: Any, x: V, coefs: list[float]) -> V:
    """c0 + x (c1 + x (c2 + ...)), coefficients highest last, f32 or f64 by x's type."""
    const = b.f64 if _is64(b, x) else b.f32
    acc = const(coefs[-1])
    for c in reversed(coefs[:-1]):
        acc = b.fma(acc, x, const(c))
    return acc


def estrin(b: Any, x: V, coefs: list[float], tail: int = 0) -> V:
    """The polynomial of horner, its high part (from coefs[tail]) evaluated in pairs, (c + c' x) +
    x^2 (...) + x^4 (...): a shorter dependency chain than Horner's (the vectorised loops are
    latency-bound), then the last `tail` steps by Horner, which keeps most of its accuracy."""
    const = b.f64 if _is64(b, x) else b.f32
    hi = coefs[tail:]
    terms = [b.fma(const(hi[i + 1]), x, const(hi[i])) if i + 1 < len(hi) else const(hi[i]) for i in range(0, len(hi), 2)]
    p = x
    while len(terms) > 1:
        p = b.mul(p, p)
        terms = [b.fma(terms[i + 1], p, terms[i]) if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    acc = terms[0]
    for c in reversed(coefs[:tail]):
        acc = b.fma(acc, x, const(c))
    return acc


def _is64(b: Any, x: V) -> bool:
    return x[1] == "double" if isinstance(b, IRB) else np.asarray(x).dtype == F64


def pow2i(b: Any, n: V) -> V:
    """2**n as f32 for an i32 n in [-126, 127]."""
    return b.from_bits(b.shl(b.add(n, b.i32(127)), 23))

