"""Lowering of `dsl.atomic_add(y[window], tile)`: GM += tile, element by element, atomically across
cores (Ascend C's SetAtomicAdd around a DataCopy UB -> GM on MTE3, or a Fixpipe L0C -> GM on FIX).

The window is any window a store accepts; the tile comes from UB (a vector result, a loaded
window) or from L0C (a cube accumulator, with the FIX pipe's scale / relu / cast applied before
the add). It becomes a `Store` with `atomic=True`, which the schedule routes to
`COPY_UB_GM_ATOMIC` / `COPY_L0C_GM_ATOMIC`. A window picked by an index tile (`y[idx, :]`,
`lower_gather.XV`) becomes a `GMScatter` from UB: rows (or elements) added where the indices say,
repeated indices adding up.
"""
from __future__ import annotations

from typing import Protocol

from compiler import sexpr as S
from compiler.frontend.lower_gather import XV
from compiler.frontend.values import FV, MV, RV, SV, TV
from compiler.ir import Buf, GMScatter, Stmt, Store
from dsl import ast as A
from dsl.errors import KernelError, SourceLoc
from dsl.types import Mem, bf16, f16, f32, i32


class Lowerer(Protocol):
    """What this uses of `compiler.frontend.lower.Lowerer`."""

    def emit(self, s: Stmt) -> None: ...
    def fixable(self, v: object) -> FV | None: ...
    def mmad_new(self, mv: MV, loc: SourceLoc, name: str) -> Buf: ...
    def load(self, r: RV, loc: SourceLoc, name: str = "t") -> Buf: ...
    def as_tile(self, v: object, loc: SourceLoc) -> Buf | None: ...
    def extent_check(self, a: S.SExpr, b: S.SExpr, capa: S.SExpr, capb: S.SExpr, loc: SourceLoc,
                     what: str) -> None: ...

#: the GM dtypes an atomic add works on (the L2's adders: f32, f16, bf16 and i32)
ATOMIC_DTYPES = (f32, f16, bf16, i32)


def _arg_loc(call: A.Call, i: int, name: str) -> SourceLoc:
    if i < len(call.args):
        return call.args[i].loc
    for kw in call.kwargs:
        if kw.name == name:
            return kw.value.loc
    return call.loc


def atomic_add(lw: Lowerer, dst: object, src: object, call: A.Call, loc: SourceLoc) -> None:
    """`dsl.atomic_add(dst, src)`: check both sides, then one atomic Store."""
    dloc, sloc = _arg_loc(call, 0, "dst"), _arg_loc(call, 1, "src")
    if not isinstance(dst, RV):
        if isinstance(dst, TV):
            raise KernelError("E303", f"dsl.atomic_add() adds into GM, but '{dst.buf.name.split('.')[0]}' is a tile "
                              f"in {dst.buf.mem.value}", dloc,
                              "give a window of a GM tensor, e.g. dsl.atomic_add(y[t], tile); "
                              "for a tile write acc = acc + tile")
        raise KernelError("E209", "dsl.atomic_add() adds into a window of a GM tensor", dloc,
                          "e.g. dsl.atomic_add(y[t], tile) or dsl.atomic_add(y[i, :], row)")
    ref = dst.ref
    if dst.transposed:
        raise KernelError("E210", f"cannot add into a window of {ref.name}.T", dloc,
                          f"add into {ref.name}'s own window")
    if ref.dtype not in ATOMIC_DTYPES:
        raise KernelError("E204", f"atomic add into '{ref.name}' of {ref.dtype} is not supported", dloc,
                          "atomic adds work on f32, f16, bf16 and i32 tensors: accumulate into an i32 "
                          "(or f32) tensor and convert it afterwards")
    xv = dst if isinstance(dst, XV) else None  # dsl.atomic_add(y[idx, :], tile): a scatter-add
    if xv is not None and (isinstance(src, MV) or lw.fixable(src) is not None):
        ub = lw.as_tile(src, sloc)  # through UB: an indexed add goes out on MTE3
        assert ub is not None, "a product or an L0C result always moves to UB"
        src = TV(ub)
    if isinstance(src, MV):  # a bare product: into L0C first
        src = TV(lw.mmad_new(src, sloc, "t"))
    fv = lw.fixable(src)
    if fv is not None:  # from L0C on the FIX pipe: scale, relu and the cast, then the add
        b = fv.buf
        if fv.fix.dtype != ref.dtype:
            raise KernelError("E204", f"cannot add a {fv.fix.dtype} result into '{ref.name}' of {ref.dtype}", sloc,
                              f"cast it on the way out: dsl.cast(acc, {ref.dtype}) (done by the FIX pipe)")
        _check_window(lw, dst, b.rank, b.ext, b.cap, loc)
        lw.emit(Store(ref, b, None, loc, fv.fix, atomic=True))
        return
    if isinstance(src, RV):
        if src.transposed:
            raise KernelError("E210", "a window of x.T can only be a matmul operand", sloc)
        src = TV(lw.load(src, sloc))
    if not isinstance(src, TV):
        what = "a scalar" if isinstance(src, SV) else "this value"
        raise KernelError("E209", f"dsl.atomic_add() adds a tile, got {what}", sloc,
                          "make a tile first, e.g. dsl.full((TILE,), 1.0, f32)")
    b = src.buf
    if b.mem != Mem.UB:
        raise KernelError("E303", f"atomic adds into GM come from UB (MTE3) or L0C (FIX); "
                          f"'{b.name.split('.')[0]}' is in {b.mem.value}", sloc,
                          "dsl.copy it to a UB buffer first")
    if b.dtype != ref.dtype:
        raise KernelError("E204", f"cannot add a {b.dtype} tile into '{ref.name}' of {ref.dtype}", sloc,
                          f"cast it first: dsl.cast(..., {ref.dtype})")
    _check_window(lw, dst, b.rank, b.ext, b.cap, loc)
    if xv is not None:
        lw.emit(GMScatter(ref, b, None, xv.at or dloc, atomic=True, by=xv.by))
        return
    lw.emit(Store(ref, b, None, loc, atomic=True))


def _check_window(lw: Lowerer, r: RV, rank: int, ext: tuple[S.SExpr, S.SExpr], cap: tuple[S.SExpr, S.SExpr],
                  loc: SourceLoc) -> None:
    """The tile's shape against the window's, as a store checks it (statically or at run time)."""
    if rank != r.rank and not (rank == 1 and r.rank == 2 and S.lift(r.cap[0]) == S.const(1)):
        raise KernelError("E205", f"cannot add a rank-{rank} tile into a rank-{r.rank} window of '{r.ref.name}'",
                          loc, "the tile and the window must have the same shape")
    for d, what in ((0, "rows"), (1, "columns")):
        lw.extent_check(ext[d], (r.ref.rows, r.ref.cols)[d], cap[d], r.cap[d], loc, f"atomic_add {what}")
