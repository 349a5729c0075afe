"""What a name or expression denotes while lowering a kernel (compile-time values)."""
from __future__ import annotations

from dataclasses import dataclass

from compiler.ir import Buf, GMRef, ParamSpec
from compiler.sexpr import F64, SExpr


@dataclass
class SV:
    """A scalar: an i64/f64 expression; `is_bool` marks comparison results."""

    e: SExpr
    is_bool: bool = False

    @property
    def is_float(self) -> bool:
        return self.e.ty == F64


@dataclass
class TV:
    """A tile (on-chip buffer)."""

    buf: Buf


@dataclass
class GV:
    """A GM tensor argument."""

    p: ParamSpec

    def shape(self, i: int) -> SExpr:
        from compiler.sexpr import arg

        return arg(self.p.slot + 2 + i)

    def numel(self) -> SExpr:
        from compiler.sexpr import arg

        return arg(self.p.slot + 1)


@dataclass
class RV:
    """A window of a GM tensor (`x[t]`, `x[r, :]`); loaded when used as a value."""

    gm: GV
    ref: GMRef
    rank: int
    cap: tuple[SExpr, SExpr]


@dataclass
class TR:
    """A tile range from `dsl.tiles`: elements [start, start + len), at most `cap`."""

    start: SExpr
    len: SExpr
    cap: SExpr
    index: SExpr


@dataclass
class ShapeV:
    of: object  # GV or TV


@dataclass
class Obj:
    """Any other compile-time object: the dsl module, a builtin, a dtype, a memory, a string."""

    value: object


@dataclass
class TupleV:
    items: tuple
