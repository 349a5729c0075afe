"""Scalar expressions: shapes, loop indices, offsets and scalar kernel arguments.

Scalars are i64 (integers, booleans as 0/1) or f64 (Python floats). Constructors fold constants,
so schedule decisions on static sizes are made at compile time and only truly runtime values
(shapes, core id, loop variables) reach the generated code.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# The run-time value of an expression, as the native code computes it (wrapping i64, x // 0 == 0,
# IEEE f64), is `compiler.interp.interpret.seval`: one set of rules for the interpreter and for tests.
from typing import Any, Callable, Union

I64 = "i64"
F64 = "f64"


@dataclass(frozen=True)
class SExpr:
    """op: const | var | arg | shape | core_id | num_cores | binary/unary op name | select."""

    op: str
    args: tuple = ()
    ty: str = I64

    # ---- constructors with folding
    @property
    def is_const(self) -> bool:
        return self.op == "const"

    @property
    def value(self) -> int | float:
        assert self.op == "const"
        return self.args[0]

    def __repr__(self) -> str:
        return fmt(self)


Scalar = Union[SExpr, int, float, bool]


def const(v: int | float | bool) -> SExpr:
    if isinstance(v, bool):
        return SExpr("const", (int(v),), I64)
    if isinstance(v, int):
        return SExpr("const", (v,), I64)
    return SExpr("const", (float(v),), F64)


def lift(v: Scalar) -> SExpr:
    return v if isinstance(v, SExpr) else const(v)


def var(name: str, ty: str = I64) -> SExpr:
    return SExpr("var", (name,), ty)


def arg(slot: int, ty: str = I64) -> SExpr:
    """Word `slot` of the launch argument block (shapes, scalars)."""
    return SExpr("arg", (slot,), ty)


CORE_ID = SExpr("core_id")
NUM_CORES = SExpr("num_cores")

_INT_FOLD: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b if b else None, "%": lambda a, b: a % b if b else None,
    "min": min, "max": max, "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b), "and": lambda a, b: int(bool(a) and bool(b)),
    "or": lambda a, b: int(bool(a) or bool(b)), "&": lambda a, b: a & b, "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b, "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
    "/": lambda a, b: a / b if b else None, "**": lambda a, b: a ** b,
}
COMPARE = ("<", "<=", ">", ">=", "==", "!=")
LOGIC = ("and", "or")


def binary(op: str, a: Scalar, b: Scalar) -> SExpr:
    a, b = lift(a), lift(b)
    if op == "/":
        a, b = to_float(a), to_float(b)
    elif a.ty != b.ty and op not in LOGIC:
        a, b = to_float(a), to_float(b)
    ty = I64 if op in COMPARE or op in LOGIC else a.ty
    if a.is_const and b.is_const:
        r = _INT_FOLD[op](a.value, b.value)
        if r is not None:
            return SExpr("const", (float(r) if ty == F64 else int(r),), ty)
    if ty == I64 and (op in ("+", "-") or (op == "*" and (a.is_const or b.is_const))):
        # integer sums of constant multiples: one affine normal form, whatever the association, so
        # ((j + 999 * C) + 1) - j is 999 * C + 1 and equal windows compare equal
        la, lb = _linear(a), _linear(b)
        assert la is not None and lb is not None  # every i64 expression is linear in its terms
        if op == "*":
            (terms, k), f = (lb, int(a.value)) if a.is_const else (la, int(b.value))
            return _affine({t: f * c for t, c in terms.items()}, f * k)
        sign = 1 if op == "+" else -1
        terms = dict(la[0])
        for t, c in lb[0].items():
            terms[t] = terms.get(t, 0) + sign * c
        return _affine(terms, la[1] + sign * lb[1])
    # identities on floats (not associative: only the exact ones)
    if op == "+" and b.is_const and b.value == 0:
        return a
    if op == "+" and a.is_const and a.value == 0:
        return b
    if op == "-" and b.is_const and b.value == 0:
        return a
    if op == "*" and ((b.is_const and b.value == 1)):
        return a
    if op == "*" and a.is_const and a.value == 1:
        return b
    if op == "*" and ((a.is_const and a.value == 0) or (b.is_const and b.value == 0)) and ty == I64:
        return const(0)
    if op == "//" and b.is_const and b.value == 1:
        return a
    return SExpr(op, (a, b), ty)


def _linear(e: SExpr) -> tuple[dict[SExpr, int], int] | None:
    """e as sum(coeff * term) + constant over +, -, neg and multiplication by a constant (i64 only),
    or None for f64. Terms are the maximal non-linear subexpressions (variables, shapes, x // 2, ...)."""
    if e.ty != I64:
        return None
    if e.is_const:
        return {}, int(e.value)
    if e.op in ("+", "-") or (e.op == "*" and (e.args[0].is_const or e.args[1].is_const)) or e.op == "neg":
        if e.op == "*":
            c, x = (e.args[0], e.args[1]) if e.args[0].is_const else (e.args[1], e.args[0])
            parts = [(_linear(x), int(c.value))]
        elif e.op == "neg":
            parts = [(_linear(e.args[0]), -1)]
        else:
            parts = [(_linear(e.args[0]), 1), (_linear(e.args[1]), 1 if e.op == "+" else -1)]
        terms: dict[SExpr, int] = {}
        k = 0
        for lin, f in parts:
            if lin is None:
                return None
            for t, c in lin[0].items():
                terms[t] = terms.get(t, 0) + f * c
            k += f * lin[1]
        return terms, k
    return {e: 1}, 0


_I64_MIN = -(1 << 63)


def wrap64(v: int) -> int:
    """v as a two's-complement i64, the way the generated code computes it."""
    if _I64_MIN <= v <= -_I64_MIN - 1:
        return v
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


_LEAF_RANK = {"var": 0, "arg": 1, "core_id": 2, "num_cores": 2}


def _key(e: SExpr) -> tuple[int, str]:
    """Order of terms in the affine normal form: loop variables, then arguments, then the rest,
    each by structure (never by display names)."""
    return _LEAF_RANK.get(e.op, 3), _skey(e)


def _skey(e: SExpr) -> str:
    if e.op in ("const", "var"):
        return f"{e.args[0]!r}:{e.ty}"
    if e.op == "arg":
        return f"#{e.args[0]:08d}:{e.ty}"
    return f"{e.op}({','.join(_skey(a) for a in e.args)})"


def _affine(terms: dict[SExpr, int], k: int) -> SExpr:
    """The normal form of sum(c * t) + k: like terms collected, zero terms dropped, positive terms
    first, each group in `_key` order, the constant last: `j + C * 999 + 1`, `x - y * 2 - 4`.
    Coefficients and the constant wrap as i64, as the generated code does."""
    items = [(t, c) for t, c in ((t, wrap64(c)) for t, c in terms.items()) if c]
    if len(items) > 1:
        items.sort(key=lambda tc: (tc[1] < 0 and tc[1] != _I64_MIN, _key(tc[0])))
    k = wrap64(k)

    def scaled(t: SExpr, c: int) -> SExpr:
        return t if c == 1 else SExpr("*", (t, SExpr("const", (c,), I64)), I64)

    acc: SExpr | None = None
    if items and k > 0 and all(c < 0 and c != _I64_MIN for _, c in items):  # 128 - k, not -k + 128
        acc, k = SExpr("const", (k,), I64), 0
    for t, c in items:
        if acc is None:
            acc = SExpr("neg", (t,), I64) if c == -1 else scaled(t, c)
        elif c > 0 or c == _I64_MIN:
            acc = SExpr("+", (acc, scaled(t, c)), I64)
        else:
            acc = SExpr("-", (acc, scaled(t, -c)), I64)
    if acc is None:
        return SExpr("const", (k,), I64)
    if k > 0 or k == _I64_MIN:
        return SExpr("+", (acc, SExpr("const", (k,), I64)), I64)
    if k < 0:
        return SExpr("-", (acc, SExpr("const", (-k,), I64)), I64)
    return acc


def normalize(e: SExpr, leaf: Callable[[SExpr], SExpr] | None = None) -> SExpr:
    """e rebuilt bottom-up through the folding constructors (affine normal form, constants folded);
    `leaf` may first replace variables and arguments (e.g. shapes by their values)."""
    if not e.args or e.op in ("const", "var", "arg"):
        return leaf(e) if leaf is not None else e
    args = [normalize(a, leaf) for a in e.args]
    if e.op == "select":
        return select(args[0], args[1], args[2])
    if len(args) == 2:
        return binary(e.op, args[0], args[1])
    return unary(e.op, args[0])


def unary(op: str, a: Scalar) -> SExpr:
    a = lift(a)
    if a.is_const:
        v = a.value
        if op == "neg":
            return const(-v)
        if op == "not":
            return const(int(not v))
        if op == "abs":
            return const(abs(v))
        if op == "i2f":
            return const(float(v))
        if op == "f2i":
            return const(int(v))
        if op in ("exp", "log", "sqrt"):
            return const(getattr(math, op)(v))
    if op == "neg" and a.ty == I64:
        terms, k = _linear(a) or ({a: 1}, 0)
        return _affine({t: -c for t, c in terms.items()}, -k)
    ty = {"i2f": F64, "f2i": I64, "not": I64}.get(op, a.ty)
    if op in ("exp", "log", "sqrt", "rsqrt"):
        a, ty = to_float(a), F64
    return SExpr(op, (a,), ty)


def to_float(a: Scalar) -> SExpr:
    a = lift(a)
    return a if a.ty == F64 else unary("i2f", a)


def select(c: Scalar, a: Scalar, b: Scalar) -> SExpr:
    c, a, b = lift(c), lift(a), lift(b)
    if a.ty != b.ty:
        a, b = to_float(a), to_float(b)
    if c.is_const:
        return a if c.value else b
    return SExpr("select", (c, a, b), a.ty)


def smin(a: Scalar, b: Scalar) -> SExpr:
    return binary("min", a, b)


def smax(a: Scalar, b: Scalar) -> SExpr:
    return binary("max", a, b)


def ceil_div(a: Scalar, b: Scalar) -> SExpr:
    return binary("//", binary("-", binary("+", a, b), 1), b)


def align_up(a: Scalar, b: int) -> SExpr:
    return binary("*", ceil_div(a, b), b)


def add(a: Scalar, b: Scalar) -> SExpr:
    return binary("+", a, b)


def sub(a: Scalar, b: Scalar) -> SExpr:
    return binary("-", a, b)


def mul(a: Scalar, b: Scalar) -> SExpr:
    return binary("*", a, b)


def upper_bound(e: SExpr) -> SExpr:
    """A static upper bound of e if one is evident (min(c, x) <= c; min(lo + c, n) - lo <= c), else e."""
    if e.is_const:
        return e
    if e.op == "min":
        for x in e.args:
            if x.is_const:
                return x
        return e
    lin = _linear(e)
    for t, c in (lin[0] if lin is not None else {}).items():
        if c == 1 and t.op == "min":  # e = min(x, y) + rest <= x + rest, constant for some x
            rest = binary("-", e, t)
            for x in t.args:
                d = binary("+", x, rest)
                if d.is_const:
                    return d
    return e


def free_vars(e: SExpr) -> set[str]:
    if e.op == "var":
        return {e.args[0]}
    out: set[str] = set()
    for a in e.args:
        if isinstance(a, SExpr):
            out |= free_vars(a)
    return out


#: argument word -> readable name ("x.shape[0]"), set while dumping a kernel
ARG_NAMES: dict[int, str] = {}
#: argument word -> value (shapes of the example arguments), set while dumping a kernel for them
ARG_VALUES: dict[int, int] = {}


def fmt(e: SExpr) -> str:
    """Readable text of e; while a dump has ARG_VALUES, with those arguments replaced and folded."""
    if ARG_VALUES:
        e = normalize(e, lambda x: const(ARG_VALUES[x.args[0]]) if x.op == "arg" and x.args[0] in ARG_VALUES else x)
    return _fmt(e)


def _size(e: SExpr) -> int:
    return 1 + sum(_size(a) for a in e.args if isinstance(a, SExpr))


def _fmt(e: SExpr) -> str:
    if e.op == "const":
        return repr(e.args[0])
    if e.op == "var":
        return e.args[0]
    if e.op == "arg":
        return ARG_NAMES.get(e.args[0], f"arg[{e.args[0]}]")
    if e.op in ("core_id", "num_cores"):
        return e.op + "()"
    if e.op == "select":
        return f"({_fmt(e.args[1])} if {_fmt(e.args[0])} else {_fmt(e.args[2])})"
    if e.op == "//" and e.ty == I64:  # (a + b - 1) // b is ceil(a / b)
        num, d = e.args
        a = binary("+", binary("-", num, d), 1)
        lin = _linear(num)
        folded = d.is_const and d.value > 1 and lin is not None and lin[0] and lin[1] >= d.value - 1
        if folded or _size(a) < _size(num):
            return f"cdiv({_fmt(a)}, {_fmt(d)})"
    if e.op == "neg":
        return f"-{_fmt(e.args[0])}"
    if len(e.args) == 2 and e.op not in ("min", "max"):
        return f"({_fmt(e.args[0])} {e.op} {_fmt(e.args[1])})"
    return f"{e.op}({', '.join(_fmt(a) for a in e.args)})"
