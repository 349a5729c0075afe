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
    # algebraic identities that keep static sizes static
    if op == "-" and a.op == "+" and a.args[0] == b:  # (x + c) - x
        return a.args[1]
    if op == "-" and a.op == "+" and a.args[1] == b:
        return a.args[0]
    if op == "-" and ty == I64:  # ((x + c1) + c2) - x, (x + 5) - (x + 2), ...: a constant difference
        d = _const_difference(a, b)
        if d is not None:
            return const(d)
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
    or None if it is not of that form. Terms are the maximal non-linear subexpressions."""
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


def _const_difference(a: SExpr, b: SExpr) -> int | None:
    """a - b if it is the same constant for every value of the variables in it (both linear in the
    same terms, e.g. ((h + c) + 1) - h), else None. Only a few levels deep: sizes, not programs."""
    la, lb = _linear(a), _linear(b)
    if la is None or lb is None:
        return None
    terms = dict(la[0])
    for t, c in lb[0].items():
        terms[t] = terms.get(t, 0) - c
    if any(terms.values()):
        return None
    return la[1] - lb[1]


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
    if e.op == "-" and e.args[0].op == "min":
        lo = e.args[1]
        for x in e.args[0].args:
            d = binary("-", x, lo)
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


def fmt(e: SExpr) -> str:
    if e.op == "const":
        return repr(e.args[0])
    if e.op == "var":
        return e.args[0]
    if e.op == "arg":
        return ARG_NAMES.get(e.args[0], f"arg[{e.args[0]}]")
    if e.op in ("core_id", "num_cores"):
        return e.op + "()"
    if e.op == "select":
        return f"({fmt(e.args[1])} if {fmt(e.args[0])} else {fmt(e.args[2])})"
    if len(e.args) == 2 and e.op == "//" and e.args[0].op == "-" and e.args[0].args[1] == const(1) \
            and e.args[0].args[0].op == "+" and e.args[0].args[0].args[1] == e.args[1]:
        return f"cdiv({fmt(e.args[0].args[0].args[0])}, {fmt(e.args[1])})"  # ceil((a + b - 1) // b)
    if len(e.args) == 2 and e.op not in ("min", "max"):
        return f"({fmt(e.args[0])} {e.op} {fmt(e.args[1])})"
    return f"{e.op}({', '.join(fmt(a) for a in e.args)})"
