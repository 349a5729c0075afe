"""Runtime extents of tiles: when two extents are the same, and when a vector operand broadcasts at
run time.

A tile (`compiler.ir.Buf`) has a capacity `cap` (static, or fixed per launch by tensor shapes) and a
runtime extent `ext` <= cap. Broadcasting follows numpy per dimension: an operand whose capacity is
a static 1 broadcasts at compile time (`ir.broadcasts`); an operand whose extent is only known at run
time broadcasts when it is 1 at run time (`dyn_broadcasts`). Lowering guarantees, with a `Check`
before the instruction, that such an operand's extent is either the destination's or 1, and that an
operand with neither flag has exactly the destination's extent.

The lowering, the interpreter and codegen all decide with the functions here, so they agree.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.sexpr import I64, SExpr

if TYPE_CHECKING:
    from compiler.ir import Buf

ONE = S.const(1)

_Canon = object  # a hashable normal form (see `_canon`)


def _canon(e: SExpr, depth: int = 0) -> _Canon:
    """A normal form of an i64 size expression: sums as (sorted terms with coefficients, constant),
    min/max as the set of their arguments' forms, with `min(a, b) - c` read as `min(a - c, b - c)`.
    Only a few levels deep: sizes, not programs. Equal forms mean equal values (i64 wrap aside)."""
    if depth > 6 or e.ty != I64:
        return ("leaf", e)
    terms: dict[_Canon, int] = {}
    k = 0

    def add(x: SExpr, f: int) -> None:
        nonlocal k
        if x.is_const:
            k += f * int(x.value)
        elif x.op == "+":
            add(x.args[0], f)
            add(x.args[1], f)
        elif x.op == "-":
            add(x.args[0], f)
            add(x.args[1], -f)
        elif x.op == "neg":
            add(x.args[0], -f)
        elif x.op == "*" and (x.args[0].is_const or x.args[1].is_const):
            c, y = (x.args[0], x.args[1]) if x.args[0].is_const else (x.args[1], x.args[0])
            add(y, f * int(c.value))
        else:
            t = _leaf(x, depth)
            terms[t] = terms.get(t, 0) + f

    add(e, 1)
    # a min/max term with coefficient 1 absorbs the rest of the sum: min(a, b) - c == min(a - c, b - c)
    mins = [t for t, c in terms.items() if c == 1 and isinstance(t, tuple) and t[0] in ("min", "max")]
    if len(mins) == 1:
        m = mins[0]
        rest = {t: c for t, c in terms.items() if t != m and c}
        args = frozenset(_shift(a, rest, k) for a in m[1])
        return (m[0], args)
    return ("sum", frozenset((t, c) for t, c in terms.items() if c), k)


def _leaf(x: SExpr, depth: int) -> _Canon:
    if x.op in ("min", "max"):
        out: set[_Canon] = set()
        for a in x.args:  # flatten min(min(a, b), c)
            c = _canon(a, depth + 1)
            if isinstance(c, tuple) and c[0] == x.op:
                out |= set(c[1])
            else:
                out.add(c)
        return (x.op, frozenset(out))
    return ("leaf", x)


def _shift(form: _Canon, terms: dict[_Canon, int], k: int) -> _Canon:
    """form + sum(terms) + k, as a normal form."""
    if not terms and k == 0:
        return form
    if isinstance(form, tuple) and form[0] == "sum":
        acc = dict(form[1])
        for t, c in terms.items():
            acc[t] = acc.get(t, 0) + c
        return ("sum", frozenset((t, c) for t, c in acc.items() if c), form[2] + k)
    if isinstance(form, tuple) and form[0] in ("min", "max"):
        return (form[0], frozenset(_shift(a, terms, k) for a in form[1]))
    return ("sum", frozenset(list(terms.items()) + [(form, 1)]), k)


def same_extent(a: SExpr, b: SExpr) -> bool:
    """Whether two extents are equal for every value of their variables (as far as can be seen):
    `min(i + R, n) - i` and `min(R, n - i)` are, `c.len` and 64 are not."""
    if a == b:
        return True
    if a.is_const or b.is_const:
        return a.is_const and b.is_const and a.value == b.value
    d = S.binary("-", a, b)
    if d.is_const:
        return d.value == 0
    return _canon(a) == _canon(b)


def dyn_broadcasts(src: Buf, dst: Buf) -> tuple[bool, bool]:
    """Whether vector operand `src` may broadcast over `dst`'s rows / columns at run time: its extent
    there is a runtime value that is not evidently the destination's, so it broadcasts exactly when it
    is 1 at run time (and the destination's is not)."""
    out = []
    for d in (0, 1):
        se, de = src.ext[d], dst.ext[d]
        out.append(not src.cap[d] == ONE and not (se.is_const and se.value != 1)
                   and not (de.is_const and de.value == 1) and not same_extent(se, de))
    return out[0], out[1]
