"""Bounds checks of GM slices `x[a:b]` and stepped slices `x[a:b:s]`, per dimension.

A plain slice must lie inside its dimension. A stepped slice is checked on the elements it
touches, as numpy would take them: with x of length 10, `x[0:12:3]` touches 0, 3, 6, 9 and is
legal although its stop lies past the end; `x[0:13:3]` would touch 12 and fails with E404 naming
that index and the bound. Both are runtime `Check`s, run before any DMA of the window.
"""
from __future__ import annotations

from compiler import sexpr as S
from compiler.ir import Check
from compiler.sexpr import SExpr
from dsl.errors import SourceLoc


def slice_checks(lo: SExpr, hi: SExpr, length: SExpr, step: int, shape: SExpr, dim: int, name: str,
                 loc: SourceLoc) -> list[Check]:
    """The guards of the slice [lo:hi:step] of dimension `dim` (size `shape`) of tensor `name`;
    `length` is its element count (ceil((hi - lo) / step))."""
    ordered = S.binary("and", S.binary("<=", 0, lo), S.binary("<=", lo, hi))
    if step == 1:
        return [Check(S.binary("and", ordered, S.binary("<=", hi, shape)), "E404",
                      f"slice [%d:%d] is outside dimension {dim} of '{name}' (size %d)", (lo, hi, shape), "", loc)]
    last = S.add(lo, S.mul(S.sub(length, 1), step))  # the last element touched
    return [
        Check(ordered, "E404", f"slice [%d:%d:{step}] is outside dimension {dim} of '{name}' (size %d)",
              (lo, hi, shape), "a slice runs upwards from an index >= 0", loc),
        Check(S.binary("or", S.binary("==", lo, hi), S.binary("<", last, shape)), "E404",
              f"slice [%d:%d:{step}] touches index %d, outside dimension {dim} of '{name}' (size %d)",
              (lo, hi, last, shape),
              "a stepped slice may stop past the end, but every element it touches must be inside", loc),
    ]
