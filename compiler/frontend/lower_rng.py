"""Lowering of `dsl.rand` / `dsl.randint`: counter-based random numbers (Philox 4x32-10).

The numbering every backend follows (`compiler.backend.codegen_rng`, `compiler.interp.interpret_rng`):
a seed names an endless stream of 32-bit words; word n (a u64) is word n % 4 of the Philox 4x32-10
block with key (seed low 32 bits, seed high 32 bits) and counter (b low, b high, 0, 0), b = n // 4.
`dsl.rand(shape, seed, offset, stride=C)` fills element (r, c) of an R x C tile with word
`offset + r * stride + c` (i64 arithmetic, wrapping, read as a u64), so an element's value depends on
(seed, its number) alone: not on the tile size, the core count or the host threads. `dsl.rand`
keeps the word's high 24 bits, `(w >> 8) * 2**-24` (f32 in [0, 1), never 1.0); `dsl.randint` gives
the word itself as an i32.

The result is one `VOp(VRAND | VRANDINT, dst, (seed, offset, stride))` on the V pipe.
"""
from __future__ import annotations

from typing import Protocol

from compiler import sexpr as S
from compiler.frontend.values import RV, SV, TV, Obj, ShapeV, TupleV
from compiler.ir import Buf, Stmt, VOp
from compiler.sexpr import F64, SExpr
from dsl import ast as A
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, f32, i32
from simulator.isa import Instr

INSTR = {"rand": Instr.VRAND, "randint": Instr.VRANDINT}
DTYPE: dict[str, DType] = {"rand": f32, "randint": i32}
ONE = S.const(1)


class _Lowerer(Protocol):
    """What this module needs of `compiler.frontend.lower.Lowerer`."""

    def emit(self, s: Stmt) -> None: ...
    def tmp(self, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
            loc: SourceLoc) -> Buf: ...


def _arg_loc(c: A.Call, index: int, name: str) -> SourceLoc:
    """Where argument `name` (positional `index`) is written, for error carets."""
    if index < len(c.args):
        return c.args[index].loc
    for kw in c.kwargs:
        if kw.name == name:
            return kw.value.loc
    return c.loc


def _shape(name: str, v: object, loc: SourceLoc) -> tuple[int, tuple[SExpr, SExpr], tuple[SExpr, SExpr]]:
    """(rank, capacity, extent) of the tile `dsl.<name>` makes."""
    if isinstance(v, ShapeV) and isinstance(v.of, TV):  # dsl.rand(t.shape, ...): the tile's own shape
        b = v.of.buf
        return b.rank, b.cap, b.ext
    if isinstance(v, ShapeV) and isinstance(v.of, RV):
        return v.of.rank, v.of.cap, (v.of.ref.rows, v.of.ref.cols)
    items = v.items if isinstance(v, TupleV) else (v,)
    if not 1 <= len(items) <= 2:
        raise KernelError("E205", f"dsl.{name}() makes tiles of one or two dimensions, got a {len(items)}-D shape",
                          loc, f"draw a 2-D tile per slice: dsl.{name}((R, C), seed, offset + i * R * C)")
    caps: list[SExpr] = []
    exts: list[SExpr] = []
    for x in items:
        if not isinstance(x, SV) or x.is_float:
            raise KernelError("E207", f"the shape of dsl.{name}() must be integers", loc,
                              f"e.g. dsl.{name}((TILE,), seed, offset) or dsl.{name}((t.len,), seed, offset)")
        bound = S.upper_bound(x.e)
        if not bound.is_const:
            raise KernelError("E207", f"the length of a dsl.{name}() tile must be a compile-time integer or "
                              "bounded by one", loc,
                              "use a Const[int] or a tile's length (t.len of dsl.tiles: at most the tile size)")
        if bound.value <= 0 or (x.e.is_const and x.e.value <= 0):
            raise KernelError("E205", f"tile dimensions must be positive, got {bound.value}", loc)
        caps.append(bound)
        exts.append(x.e)
    if len(items) == 1:
        return 1, (ONE, caps[0]), (ONE, exts[0])
    return 2, (caps[0], caps[1]), (exts[0], exts[1])


def _integer(name: str, what: str, v: object, loc: SourceLoc) -> SExpr:
    """A seed, offset or stride: an i64 scalar."""
    if isinstance(v, SV) and not v.is_float and not v.is_bool:
        return v.e
    if isinstance(v, SV) and v.is_bool:
        raise KernelError("E204", f"the {what} of dsl.{name}() must be an integer, got a comparison", loc)
    got = "a float" if isinstance(v, SV) else ("a tile" if isinstance(v, (TV, RV)) else
                                               repr(v.value) if isinstance(v, Obj) else "this value")
    raise KernelError("E204" if isinstance(v, SV) else "E209",
                      f"the {what} of dsl.{name}() must be an integer, got {got}", loc,
                      f"{what}s are 64-bit integers: declare the parameter as `{what}: int` "
                      f"(or convert with int(...))")


def lower_rng(lw: _Lowerer, name: str, args: dict[str, object], c: A.Call) -> Buf:
    """`dsl.rand` / `dsl.randint` -> a fresh UB tile filled by one VRAND / VRANDINT."""
    rank, cap, ext = _shape(name, args["shape"], _arg_loc(c, 0, "shape"))
    seed = _integer(name, "seed", args["seed"], _arg_loc(c, 1, "seed"))
    offset = _integer(name, "offset", args["offset"], _arg_loc(c, 2, "offset"))
    if args.get("stride") is None:
        stride = ext[1]
    else:
        stride = _integer(name, "stride", args["stride"], _arg_loc(c, 3, "stride"))
        if rank == 1:
            raise KernelError("E209", f"stride= of dsl.{name}() numbers the rows of a 2-D tile; this tile is 1-D",
                              _arg_loc(c, 3, "stride"), "leave it out: a 1-D tile takes words offset, offset + 1, ...")
    assert seed.ty != F64 and offset.ty != F64  # checked by _integer
    dst = lw.tmp(DTYPE[name], rank, cap, ext, c.loc)
    lw.emit(VOp(INSTR[name], dst, (seed, offset, stride), None, c.loc))
    return dst
