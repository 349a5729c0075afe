"""Lowering of transposes: `t.T` / `dsl.transpose(t)` on 2-D UB tiles, `x[r, c].T` and `x.T[c, r]`
windows outside a matmul, and stores into a window of `y.T`.

A UB tile is transposed by the vector unit (`VTRANSPOSE`, Ascend's Transpose: 16 x 16 blocks of
16-bit lanes; its cost is `simulator.isa.TRANSPOSE_BLOCK`). A GM window stays a window when it is
transposed (`RV.transposed` flips), so `x.T[m, k]` and `x[k, m].T` are still matmul operands that
the cube transposes on the L1 -> L0A/L0B move; anywhere else such a window is loaded as it is
stored (MTE2) and transposed on V (`load_transposed`). A store into `y.T[c, r]` is a store of the
transposed tile into `y[r, c]`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

from compiler.frontend.values import FV, GV, MV, RV, SV, TGV, TV, BufOptions
from compiler.ir import Buf, Load, Move, Stmt, VOp
from compiler.sexpr import SExpr
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, Mem
from simulator.isa import Instr


def err(code: str, msg: str, loc: SourceLoc | None, hint: str | None = None) -> KernelError:
    return KernelError(code, msg, loc, hint)


def swapped(r: RV) -> RV:
    """The same GM window seen transposed (or back)."""
    return RV(r.gm, r.ref, r.rank, (r.cap[1], r.cap[0]), not r.transposed,
              (r.full[1], r.full[0]) if r.full else None)


class TransposeLowering:
    """Mixed into `compiler.frontend.lower.Lowerer` (which provides emit, tmp, as_tile, store, ...)."""

    if TYPE_CHECKING:
        def emit(self, s: Stmt) -> None: ...
        def new_buf(self, name: str, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                    loc: SourceLoc, mem: Mem = Mem.UB, **kw: Unpack[BufOptions]) -> Buf: ...
        def tmp(self, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                loc: SourceLoc) -> Buf: ...
        def as_tile(self, v: object, loc: SourceLoc) -> Buf | None: ...
        def require_static_or_shape(self, c: SExpr, loc: SourceLoc) -> None: ...
        def store(self, r: RV, value: object, loc: SourceLoc) -> None: ...
        def set_ext(self, dst: Buf, ext: tuple[SExpr, SExpr], loc: SourceLoc) -> None: ...
        def extent_check(self, a: SExpr, b: SExpr, capa: SExpr, capb: SExpr, loc: SourceLoc, what: str) -> None: ...

    def transpose_value(self, v: object, loc: SourceLoc, what: str) -> object:
        """`v.T` / `dsl.transpose(v)`: a window stays a (transposed) window, a tile is transposed on V."""
        if isinstance(v, TGV):
            return GV(v.gm.p)  # x.T.T
        if isinstance(v, GV):
            rank = v.p.rank or 0
            if rank > 2:
                raise err("E205", f"{what} works on 2-D tiles; '{v.p.name}' has rank {rank}", loc,
                          f"tiles have at most 2 dimensions: transpose a 2-D window of it, e.g. "
                          f"{v.p.name}.T[i, c, r] or dsl.transpose({v.p.name}[i, r, c])")
            raise err("E205", f"{what} works on tiles, and '{v.p.name}' is a whole GM tensor", loc,
                      f"transpose a window: {v.p.name}.T[c, r] or {v.p.name}[r, c].T")
        if isinstance(v, RV):
            if v.rank != 2:
                raise err("E205", f"{what} needs a 2-D tile; this window of '{v.ref.name}' is 1-D", loc,
                          f"a 1-D tile has no rows to swap with its columns: take a 2-D window, "
                          f"e.g. {v.ref.name}[r, c] or {v.ref.name}[i:i + 1, :]")
            return swapped(v)
        if isinstance(v, (TV, MV, FV)):
            t = self.as_tile(v, loc)
            assert t is not None  # every tile value has a vector-unit form
            return TV(self.transpose_tile(t, loc, what))
        raise err("E209", f"{what} needs a 2-D tile", loc, "transpose a tile or a GM window: t.T, x[r, c].T")

    def transpose_tile(self, t: Buf, loc: SourceLoc, what: str = "'.T'", dst: Buf | None = None) -> Buf:
        """One VTRANSPOSE of UB tile `t` into `dst` (a new tile by default)."""
        if t.mem != Mem.UB:
            raise err("E303", f"{what} runs on the vector unit, which works on UB; "
                      f"'{t.name.split('.')[0]}' is in {t.mem.value}", loc,
                      "transpose the GM window instead (x.T[m, k] as a matmul operand is transposed on the "
                      "L1 -> L0A move), or copy the tile into UB first")
        if t.rank != 2:
            raise err("E205", f"{what} needs a 2-D tile; '{t.name.split('.')[0]}' is 1-D [{t.shape_str}]", loc,
                      "a 1-D tile has no rows to swap with its columns: load a 2-D window (x[r, c]), or keep "
                      "the reduced axis (dsl.sum(x, axis=1, keepdims=True) is a column)")
        if dst is None:
            dst = self.tmp(t.dtype, 2, (t.cap[1], t.cap[0]), (t.ext[1], t.ext[0]), loc)
        self.emit(VOp(Instr.VTRANSPOSE, dst, (t,), None, loc))
        return dst

    def load_transposed(self, r: RV, loc: SourceLoc, name: str = "t", dst: Buf | None = None) -> Buf:
        """A window of x.T outside a matmul: the stored block GM -> UB (MTE2), then transposed on V
        (into `dst` if given)."""
        stored = (r.cap[1], r.cap[0])
        for c in stored:
            self.require_static_or_shape(c, loc)
        raw = self.tmp(r.ref.dtype, 2, stored, (r.ref.rows, r.ref.cols), loc)
        self.emit(Load(raw, r.ref, None, loc))
        if dst is None:
            dst = self.new_buf(name, r.ref.dtype, 2, r.cap, (r.ref.cols, r.ref.rows), loc)
        return self.transpose_tile(raw, loc, "a window of x.T", dst)

    def copy_transposed(self, dst: Buf, r: RV, loc: SourceLoc) -> None:
        """dsl.copy(buf, x.T[c, r]): loaded and transposed in UB, then moved on if `buf` lives elsewhere."""
        self.set_ext(dst, (r.ref.cols, r.ref.rows), loc)
        if dst.mem == Mem.UB:
            self.load_transposed(r, loc, dst=dst)
        else:
            self.emit(Move(dst, self.load_transposed(r, loc), None, loc))

    def store_transposed(self, r: RV, value: object, loc: SourceLoc) -> None:
        """y.T[c, r] = v: v's transpose stored into y[r, c] (a scalar fills the window as it is)."""
        plain = swapped(r)
        if isinstance(value, SV):
            self.store(plain, value, loc)
            return
        t = self.as_tile(value, loc)
        if t is None:
            raise err("E210", "only tiles and scalars can be stored into a GM tensor", loc)
        if t.rank != 2:
            raise err("E205", f"cannot store a 1-D tile [{t.shape_str}] into a window of {r.ref.name}.T", loc,
                      f"store a 2-D tile, or store into {r.ref.name}'s own window")
        if t.dtype != r.ref.dtype:
            raise err("E204", f"cannot store a {t.dtype} tile into '{r.ref.name}' of {r.ref.dtype}", loc,
                      f"cast it first: dsl.cast(..., {r.ref.dtype})")
        for d, what in ((0, "rows"), (1, "columns")):  # in the user's terms, before transposing
            self.extent_check(t.ext[d], (r.ref.cols, r.ref.rows)[d], t.cap[d], r.cap[d], loc, f"store {what}")
        self.store(plain, TV(self.transpose_tile(t, loc, f"a store into {r.ref.name}.T")), loc)
