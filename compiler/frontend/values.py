"""What a name or expression denotes while lowering a kernel (compile-time values)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from compiler.ir import Buf, Fix, GMRef, ParamSpec
from compiler.sexpr import F64, SExpr
from dsl.types import DType


class BufOptions(TypedDict, total=False):
    """The `Buf` fields `Lowerer.new_buf` passes through (from dsl.alloc)."""

    explicit: bool
    offset: int | None
    buffers: int | None


@dataclass
class SV:
    """A scalar: an i64/f64 expression; `is_bool` marks comparison results."""

    e: SExpr
    is_bool: bool = False

    @property
    def is_float(self) -> bool:
        return self.e.ty == F64


@dataclass
class SW(SV):
    """A `dsl.range(start, stop, STEP)` index with a constant STEP > 1: a scalar in arithmetic, and
    the window [k, min(k + STEP, stop)) when it indexes a GM tensor (`a[m, k] @ b[k, n]`)."""

    len: SExpr = None  # type: ignore[assignment]
    cap: SExpr = None  # type: ignore[assignment]


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
    """A window of a GM tensor (`x[t]`, `x[r, :]`); loaded when used as a value.
    `transposed`: a window of `x.T` (the GM window is the transpose of the logical tile)."""

    gm: GV
    ref: GMRef
    rank: int
    cap: tuple[SExpr, SExpr]
    transposed: bool = False
    full: tuple[SExpr, SExpr] | None = None  # sizes of the tensor dimensions the window's rows/cols run along


@dataclass
class TGV:
    """`x.T` for a rank-2 (or batched) GM tensor: only usable as a matmul operand window."""

    gm: GV


@dataclass
class MV:
    """A product `A @ B` staged in L0A/L0B, not yet accumulated anywhere (m x n, summing k)."""

    a: Buf
    b: Buf
    m: SExpr
    n: SExpr
    k: SExpr
    acc: DType  # of the accumulator (f32 or i32)
    cap: tuple[SExpr, SExpr]


@dataclass
class FV:
    """An L0C tile with FIX-pipe epilogue ops pending (scale, relu, cast): fused into the move out."""

    buf: Buf
    fix: Fix


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
