"""Lowering of GM windows: subscripts of GM tensors (`x[t]`, `x[r, a:b:s]`, `x.T[m, k]`, shape
indices), their loads into UB and stores back, with the bounds checks each needs."""
from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

from compiler import sexpr as S
from compiler.frontend.lower_gather import XV
from compiler.frontend.lower_slices import slice_checks
from compiler.frontend.values import FV, GV, MV, RV, SV, SW, TGV, TR, TV, BufOptions, ShapeV, TupleV
from compiler.ir import Buf, Check, GMRef, Load, Stmt, Store, VOp
from compiler.sexpr import SExpr
from dsl import ast as A
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, Mem
from simulator.isa import Instr

ONE = S.const(1)


def err(code: str, msg: str, loc: SourceLoc | None, hint: str | None = None) -> KernelError:
    return KernelError(code, msg, loc, hint)


class WindowLowering:
    """Mixed into `compiler.frontend.lower.Lowerer` (which provides expr, emit, new_buf, scalar, ...)."""

    if TYPE_CHECKING:
        def emit(self, s: Stmt) -> None: ...
        def new_buf(self, name: str, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                    loc: SourceLoc, mem: Mem = Mem.UB, **kw: Unpack[BufOptions]) -> Buf: ...
        def tmp(self, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                loc: SourceLoc) -> Buf: ...
        def expr(self, e: A.Expr, stmt: bool = False) -> object: ...
        def scalar(self, v: object, loc: SourceLoc, what: object = "value") -> SExpr: ...
        def static_int(self, v: object, loc: SourceLoc, what: str) -> int: ...
        def scalar_for(self, v: SV, dtype: DType, loc: SourceLoc) -> SExpr: ...
        def extent_check(self, a: SExpr, b: SExpr, capa: SExpr, capb: SExpr, loc: SourceLoc, what: str) -> None: ...
        def fixable(self, v: object) -> FV | None: ...
        def mmad_new(self, mv: MV, loc: SourceLoc, name: str) -> Buf: ...
        def l1_window(self, buf: Buf, index: A.Expr, loc: SourceLoc) -> Buf: ...
        def load_transposed(self, r: RV, loc: SourceLoc, name: str = "t", dst: Buf | None = None) -> Buf: ...
        def store_transposed(self, r: RV, value: object, loc: SourceLoc) -> None: ...
        def read_element(self, r: RV, loc: SourceLoc) -> SV: ...
        def index_region(self, g: GV, dims: list, steps: list[int], picked: tuple, loc: SourceLoc) -> XV: ...
        def gather_load(self, r: XV, loc: SourceLoc, name: str) -> Buf: ...

    def subscript(self, e: A.Subscript) -> object:
        base = self.expr(e.value)
        if isinstance(base, GV):
            r = self.region(base, e.index, e.loc)
            return self.read_element(r, e.loc) if r.rank == 0 else r  # idx[r]: one element, a scalar
        if isinstance(base, TGV):
            idx = list(e.index.elts) if isinstance(e.index, A.Tuple) else [e.index]
            if len(idx) < 2:
                raise err("E205", "index a transposed tensor with at least two indices: x.T[m, k]", e.loc)
            idx[-1], idx[-2] = idx[-2], idx[-1]
            r = self.region(base.gm, A.Tuple(tuple(idx), e.index.loc), e.loc)
            if r.rank != 2:
                raise err("E205", "a window of x.T must keep both of its last two dimensions", e.loc)
            return RV(r.gm, r.ref, 2, (r.cap[1], r.cap[0]), transposed=True,
                      full=(r.full[1], r.full[0]) if r.full else None)
        if isinstance(base, ShapeV):
            i = self.static_int(self.expr(e.index), e.index.loc, "shape index")
            if isinstance(base.of, GV):
                rank = base.of.p.rank
                if not -rank <= i < rank:
                    raise err("E205", f"shape index {i} out of range for a rank-{rank} tensor", e.index.loc)
                return SV(base.of.shape(i % rank))
            buf = base.of.buf if isinstance(base.of, TV) else None
            if buf is not None:
                if not -buf.rank <= i < buf.rank:
                    raise err("E205", f"shape index {i} out of range for a rank-{buf.rank} tile", e.index.loc)
                return SV(buf.ext[2 - buf.rank + (i % buf.rank)])
            rv = base.of
            assert isinstance(rv, RV)
            dims = ((rv.ref.cols, rv.ref.rows) if rv.transposed else (rv.ref.rows, rv.ref.cols))[2 - rv.rank:]
            return SV(dims[i % rv.rank])
        if isinstance(base, TupleV):
            i = self.static_int(self.expr(e.index), e.index.loc, "tuple index")
            return base.items[i]
        if isinstance(base, TV) and base.buf.mem == Mem.L1:  # a sub-window of an L1 panel (lower_l1)
            return TV(self.l1_window(base.buf, e.index, e.loc))
        if isinstance(base, (TV, RV)):
            raise err("E210", "tiles cannot be subscripted", e.loc,
                      "index the GM tensor instead (x[t]), or reduce the tile with dsl.sum/max/min")
        raise err("E210", "this value cannot be subscripted", e.loc)

    def region(self, g: GV, index: A.Expr, loc: SourceLoc) -> RV:
        rank = g.p.rank
        idx = index.elts if isinstance(index, A.Tuple) else (index,)
        if len(idx) > rank:
            raise err("E205", f"too many indices: {len(idx)} for '{g.p.name}' of rank {rank}", index.loc)
        dims = []  # (start, len, cap, is_scalar)
        steps = [1] * rank
        picked = None  # (dimension, index tile, loc): a GM gather / scatter (lower_gather)
        for d in range(rank):
            shape = g.shape(d)
            if d >= len(idx):
                dims.append((S.const(0), shape, shape, False))
                continue
            ix = idx[d]
            if isinstance(ix, A.Slice):
                step = 1
                if ix.step is not None:
                    step = self.static_int(self.expr(ix.step), ix.step.loc, "slice step")
                    if step < 1:
                        raise err("E207", f"slice steps must be positive, got {step}", ix.step.loc)
                lo = self.scalar(self.expr(ix.lower), ix.loc) if ix.lower is not None else S.const(0)
                hi = self.scalar(self.expr(ix.upper), ix.loc) if ix.upper is not None else shape
                ln = S.sub(hi, lo) if step == 1 else S.ceil_div(S.sub(hi, lo), step)
                steps[d] = step
                if ix.lower is not None or ix.upper is not None:
                    for c in slice_checks(lo, hi, ln, step, shape, d, g.p.name, ix.loc):
                        self.emit(c)
                dims.append((lo, ln, S.upper_bound(ln), False))
                continue
            v = self.expr(ix)
            if isinstance(v, TR):
                dims.append((v.start, v.len, v.cap, False))
            elif isinstance(v, SW):
                dims.append((v.e, v.len, v.cap, False))
            elif isinstance(v, SV):
                if v.is_float:
                    raise err("E204", "GM indices must be integers", ix.loc)
                i = v.e
                self.emit(Check(S.binary("and", S.binary("<=", 0, i), S.binary("<", i, shape)), "E404",
                                f"index %d is outside dimension {d} of '{g.p.name}' (size %d)", (i, shape),
                                "an index runs from 0 to the dimension's size - 1: check the data or loop that gave it",
                                ix.loc))
                dims.append((i, ONE, ONE, True))
            elif isinstance(v, (TV, RV)) and picked is None:  # x[idx, :], x[t, idx]: indices from a tile
                picked = (d, v, ix.loc)
                dims.append((S.const(0), ONE, ONE, True))
            else:
                raise err("E210", "a GM index must be a tile range (from dsl.tiles), a slice, an integer or "
                          "one integer index tile", ix.loc)
        if picked is not None:
            return self.index_region(g, dims, steps, picked, loc)
        tiled = [k for k, dm in enumerate(dims) if not dm[3]]
        if len(tiled) > 2:
            raise err("E205", f"this window of '{g.p.name}' has {len(tiled)} tiled dimensions; tiles have at most 2",
                      loc, "index the leading dimensions with integers")
        if tiled and tiled[-1] != rank - 1:
            raise err("E205", f"the last dimension of '{g.p.name}' must be part of the tile (it is contiguous)", loc,
                      "take a row window instead, or transpose the tensor on the host")
        strides = [ONE] * rank
        for d in range(rank - 2, -1, -1):
            strides[d] = S.mul(strides[d + 1], g.shape(d + 1))
        dim_strides = list(strides)
        for d in range(rank):  # a stepped slice walks its dimension `step` elements at a time
            if steps[d] != 1:
                strides[d] = S.mul(strides[d], steps[d])
        offset = S.const(0)
        for d, dm in enumerate(dims):
            offset = S.add(offset, S.mul(dm[0], dim_strides[d]))
        assert g.p.dtype is not None  # a GM parameter always has a dtype
        if not tiled:  # every index a scalar (`idx[r]`): a 1 x 1 window of rank 0, one element
            return RV(g, GMRef(g.p.slot, g.p.name, g.p.dtype, offset, ONE, ONE, ONE, g.numel()), 0, (ONE, ONE))
        cols = dims[tiled[-1]]
        rows = dims[tiled[0]] if len(tiled) == 2 else (S.const(0), ONE, ONE, False)
        stride = strides[tiled[0]] if len(tiled) == 2 else cols[1]
        col_step = S.const(steps[tiled[-1]]) if steps[tiled[-1]] != 1 else None
        ref = GMRef(g.p.slot, g.p.name, g.p.dtype, offset, rows[1], cols[1], stride, g.numel(), col_step)
        full = (g.shape(tiled[0]) if len(tiled) == 2 else ONE, g.shape(tiled[-1]))
        return RV(g, ref, len(tiled), (rows[2], cols[2]), full=full)

    def load(self, r: RV, loc: SourceLoc, name: str = "t") -> Buf:
        if isinstance(r, XV):
            return self.gather_load(r, loc, name)
        if r.transposed:
            return self.load_transposed(r, loc, name)
        for c in r.cap:
            self.require_static_or_shape(c, loc)
        b = self.new_buf(name, r.ref.dtype, r.rank, r.cap, (r.ref.rows, r.ref.cols), loc)
        self.emit(Load(b, r.ref, None, loc))
        return b

    def require_static_or_shape(self, c: SExpr, loc: SourceLoc) -> None:
        """Capacities are fixed per launch: constants or tensor shapes, never loop variables."""
        if S.free_vars(c):
            raise err("E207", "the size of this tile depends on a loop variable", loc,
                      "tile sizes must be compile-time constants or tensor shapes; use dsl.tiles(n, TILE)")

    def store(self, r: RV, value: object, loc: SourceLoc) -> None:
        if r.rank == 0:
            raise err("E210", f"writing single elements of '{r.ref.name}' is not supported", loc,
                      f"store a one-element window: {r.ref.name}[i:i + 1] = dsl.full((1,), v, {r.ref.dtype})")
        if isinstance(r, XV):
            raise err("E210", f"a store through an index tile into '{r.ref.name}' is an atomic add", loc,
                      f"dsl.atomic_add({r.ref.name}[idx, ...], tile) (repeated indices add up)")
        if r.transposed:
            self.store_transposed(r, value, loc)
            return
        if isinstance(value, MV):
            value = TV(self.mmad_new(value, loc, "t"))
        fv = self.fixable(value)
        if fv is not None:
            b = fv.buf
            if fv.fix.dtype != r.ref.dtype:
                raise err("E204", f"cannot store a {fv.fix.dtype} result into '{r.ref.name}' of {r.ref.dtype}", loc,
                          f"cast it on the way out: dsl.cast(acc, {r.ref.dtype}) (done by the FIX pipe)")
            if r.rank != 2 and b.rank == 2:
                raise err("E205", f"cannot store a 2-D result into a rank-{r.rank} window of '{r.ref.name}'", loc)
            for d, what in ((0, "rows"), (1, "columns")):
                self.extent_check(b.ext[d], (r.ref.rows, r.ref.cols)[d], b.cap[d], r.cap[d], loc, f"store {what}")
            self.emit(Store(r.ref, b, None, loc, fv.fix))
            return
        if isinstance(value, RV):
            value = TV(self.load(value, loc))
        if isinstance(value, SV):
            for c in r.cap:
                self.require_static_or_shape(c, loc)
            b = self.tmp(r.ref.dtype, r.rank, r.cap, (r.ref.rows, r.ref.cols), loc)
            self.emit(VOp(Instr.VDUP, b, (self.scalar_for(value, r.ref.dtype, loc),), None, loc))
            value = TV(b)
        if not isinstance(value, TV):
            raise err("E210", "only tiles and scalars can be stored into a GM tensor", loc)
        b = value.buf
        if b.dtype != r.ref.dtype:
            raise err("E204", f"cannot store a {b.dtype} tile into '{r.ref.name}' of {r.ref.dtype}", loc,
                      f"cast it first: dsl.cast(..., {r.ref.dtype})")
        if b.rank != r.rank and not (b.rank == 1 and r.rank == 2 and S.lift(r.cap[0]) == ONE):
            raise err("E205", f"cannot store a rank-{b.rank} tile [{b.shape_str}] into a rank-{r.rank} window of "
                      f"'{r.ref.name}'", loc)
        for d, what in ((0, "rows"), (1, "columns")):
            self.extent_check(b.ext[d], (r.ref.rows, r.ref.cols)[d], b.cap[d], r.cap[d], loc, f"store {what}")
        self.emit(Store(r.ref, b, None, loc))
