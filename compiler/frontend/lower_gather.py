"""Lowering of gathers and scalars from GM: `i = idx[r]` (one element into a scalar, S pipe),
`dsl.arange(n, dtype)` and `dsl.gather(x, index, axis)` (V pipe, within UB), and GM windows picked
by a UB index tile (`XV`): `x[idx, :]` (rows; with an (R, C) index one row per element),
`x[t, idx]` (one element per row of t: torch.gather along the last dimension, the result has the
index tile's shape; a 1-D index tile pairs its elements with t's rows), loaded on MTE2 as a `GMGather` or added into by `dsl.atomic_add` (`GMScatter`).

Windows indexed by such scalars (`w[i, :]`, `y[i, a:b] = tile`) need nothing new: a scalar GM index
gets its runtime bounds check (E404) in `WindowLowering.region`, whatever computed it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.frontend.values import GV, RV, SV, Obj
from compiler.gathers import scalar_type
from compiler.ir import Buf, Check, GMGather, GMRef, Indexed, LoadScalar, Stmt, VIndexed
from compiler.sexpr import I64, SExpr
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, boolean, f32, i8, i32
from simulator.isa import Instr

ONE = S.const(1)
ARANGE_DTYPES = (i32, f32)
INDEX_DTYPES = (i32, i8)


def err(code: str, msg: str, loc: SourceLoc | None, hint: str | None = None) -> KernelError:
    return KernelError(code, msg, loc, hint)


@dataclass
class XV(RV):
    """A GM window whose rows or elements the index tile `by.index` picks (see `Indexed`)."""

    by: Indexed = None  # type: ignore[assignment]
    at: SourceLoc | None = None  # the subscript: where an index error points


class GatherLowering:
    """Mixed into `compiler.frontend.lower.Lowerer` (which provides emit, tmp, new_var, as_tile, ...)."""

    if TYPE_CHECKING:
        def emit(self, s: Stmt) -> None: ...
        def tmp(self, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                loc: SourceLoc) -> Buf: ...
        def new_var(self, hint: str, ty: str) -> str: ...
        def scalar(self, v: object, loc: SourceLoc, what: object = "value") -> SExpr: ...
        def static_int(self, v: object, loc: SourceLoc, what: str) -> int: ...
        def as_tile(self, v: object, loc: SourceLoc) -> Buf | None: ...
        def dtype_arg(self, v: object, loc: SourceLoc) -> DType: ...
        def new_buf(self, name: str, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                    loc: SourceLoc) -> Buf: ...
        def extent_check(self, a: SExpr, b: SExpr, capa: SExpr, capb: SExpr, loc: SourceLoc, what: str) -> None: ...
        def require_static_or_shape(self, c: SExpr, loc: SourceLoc) -> None: ...

    def read_element(self, r: RV, loc: SourceLoc) -> SV:
        """`idx[r]` with every subscript a scalar: the element, read by the scalar unit."""
        ty = scalar_type(r.ref.dtype)
        var = self.new_var(f"{r.ref.name}.elem", ty)
        self.emit(LoadScalar(var, r.ref, loc))
        return SV(S.var(var, ty), r.ref.dtype == boolean)

    def gather_builtin(self, name: str, args: dict, loc: SourceLoc) -> Buf:
        return self.arange(args, loc) if name == "arange" else self.gather(args, loc)

    def arange(self, args: dict, loc: SourceLoc) -> Buf:
        """dsl.arange(n, dtype=i32): the 1-D tile 0, 1, ..., n-1 (n static, or bounded by a static
        size such as `t.len` of `dsl.tiles`)."""
        n = self.scalar(args["n"], loc, "the length of dsl.arange")
        if n.ty != I64:
            raise err("E204", "dsl.arange(n) needs an integer length", loc)
        dtype = i32 if args.get("dtype") is None else self.dtype_arg(args["dtype"], loc)
        if dtype not in ARANGE_DTYPES:
            raise err("E204", f"dsl.arange makes i32 or f32 tiles, not {dtype}", loc,
                      f"cast the result: dsl.cast(dsl.arange(n, f32), {dtype})")
        cap = S.upper_bound(n)
        if not cap.is_const:
            raise err("E207", "the length of dsl.arange must be a compile-time integer or bounded by one", loc,
                      "use a Const[int] or a literal, or a tile length such as t.len of dsl.tiles(n, TILE)")
        if cap.value <= 0:
            raise err("E205", f"dsl.arange needs a positive length, got {cap.value}", loc)
        dst = self.tmp(dtype, 1, (ONE, cap), (ONE, n), loc)
        self.emit(VIndexed(Instr.VARANGE, dst, (), None, loc))
        return dst

    def gather(self, args: dict, loc: SourceLoc) -> Buf:
        """dsl.gather(x, index, axis) as torch.gather: out has index's shape; along `axis` it takes
        x's element at the index, along the other axis the same position (index may have fewer)."""
        x = self.as_tile(args["x"], loc)
        if x is None:
            raise err("E209", "dsl.gather() gathers from a tile", loc, "its first argument is a tile, e.g. x[r, :]")
        ix = self.as_tile(args["index"], loc)
        if ix is None:
            raise err("E209", "dsl.gather() needs an index tile", loc,
                      "for one element of GM read it into a scalar: i = idx[r]")
        if ix.dtype not in INDEX_DTYPES:
            raise err("E204", f"dsl.gather needs an integer index tile (i32 or i8), got {ix.dtype}", loc,
                      "cast it first: dsl.cast(index, i32)")
        if ix.rank != x.rank:
            raise err("E205", f"dsl.gather: the index tile has rank {ix.rank}, the tile rank {x.rank}", loc,
                      "as in torch.gather both have the same rank; for one index per row of a 2-D tile use an "
                      "(R, 1) index tile, e.g. tgt[r, 0:1] of an (N, 1) tensor")
        axis_v = args.get("axis")
        if axis_v is None or (isinstance(axis_v, Obj) and axis_v.value is None):
            if x.rank == 2:
                raise err("E203", "dsl.gather of a 2-D tile needs an axis", loc,
                          "dsl.gather(x, index, axis=1) picks a column per row, axis=0 a row per column")
            axis = 0
        else:
            axis = self.static_int(axis_v, loc, "axis")
        if not -x.rank <= axis < x.rank:
            raise err("E205", f"axis {axis} is out of range for a rank-{x.rank} tile", loc,
                      "a 1-D tile has axis 0; a 2-D tile axis 0 (rows) or 1 (columns)")
        mode = "cols" if x.rank == 1 or axis % 2 == 1 else "rows"
        other = 0 if mode == "cols" else 1  # the dimension along which index and x keep positions
        what = "rows" if other == 0 else "columns"
        a, b = ix.ext[other], x.ext[other]
        if a.is_const and b.is_const:
            if a.value > b.value:
                raise err("E205", f"dsl.gather: the index tile has {a.value} {what}, the tile only {b.value}", loc,
                          f"the index tile may have at most as many {what} as the tile (torch.gather's rule)")
        elif a != b:
            self.emit(Check(S.binary("<=", a, b), "E205", f"dsl.gather: the index tile has %d {what}, the tile only %d",
                            (a, b), f"the index tile may have at most as many {what} as the tile", loc))
        dst = self.tmp(x.dtype, x.rank, ix.cap, ix.ext, loc)
        self.emit(VIndexed(Instr.VGATHER, dst, (x, ix), mode, loc))
        return dst

    def index_region(self, g: GV, dims: list, steps: list[int], picked: tuple, loc: SourceLoc) -> XV:
        """The window of `x[..., idx, ...]` (`WindowLowering.region` with dimension `picked[0]` given
        by an index tile, entered in `dims` as the scalar 0): rows picked by the index when the last
        dimension is a window, else one element of the last dimension per index."""
        d_ix, v, iloc = picked
        name = g.p.name
        ix = self.as_tile(v, iloc)
        if ix is None:  # pragma: no cover (region passes only tiles and windows)
            raise err("E210", "a GM index tile must be a tile", iloc)
        if ix.dtype not in INDEX_DTYPES:
            raise err("E204", f"an index tile must be i32 or i8, got {ix.dtype}", iloc,
                      "cast it first: dsl.cast(idx, i32)")
        rank = g.p.rank
        last = rank - 1
        dim_strides = [ONE] * rank
        for d in range(rank - 2, -1, -1):
            dim_strides[d] = S.mul(dim_strides[d + 1], g.shape(d + 1))
        offset = S.const(0)
        for d, dm in enumerate(dims):
            offset = S.add(offset, S.mul(dm[0], dim_strides[d]))
        tiled = [d for d, dm in enumerate(dims) if not dm[3]]
        assert g.p.dtype is not None
        if d_ix == last:  # x[t, idx] / x[j, idx] / w[idx]: one element per index, the index's shape
            if len(tiled) > 1:
                raise err("E205", f"this window of '{name}' has {len(tiled) + 1} tiled dimensions; tiles have at most 2",
                          loc, "index the leading dimensions with integers")
            rstride = S.mul(dim_strides[tiled[0]], steps[tiled[0]]) if tiled else S.const(0)
            by = Indexed(ix, ONE, g.shape(last), last, False)
            if tiled:  # index element r (1-D) or row r (2-D) picks in row r of the window
                dm = dims[tiled[0]]
                k = 1 if ix.rank == 1 else 0
                self.extent_check(ix.ext[k], dm[1], ix.cap[k], dm[2], iloc,
                                  f"the index tile's {'length' if k else 'rows'} vs the rows of the window of '{name}'")
                if ix.rank == 1:  # a 1-D tile: element r from row r (the rows as its columns)
                    ref = GMRef(g.p.slot, name, g.p.dtype, offset, ONE, ix.ext[1], S.const(0), g.numel(), rstride)
                    return XV(g, ref, 1, ix.cap, by=by, at=loc)
            ref = GMRef(g.p.slot, name, g.p.dtype, offset, ix.ext[0], ix.ext[1], rstride, g.numel(), S.const(0))
            return XV(g, ref, ix.rank, ix.cap, by=by, at=loc)
        if not tiled or tiled[-1] != last or len(tiled) > 1:
            raise err("E205", f"x[idx, ...] picks rows of '{name}': the last dimension must be a window and the "
                      "others integers", loc, f"e.g. {name}[idx, :] or {name}[b, idx, c:c + n]")
        cols = dims[last]
        if ix.rank == 2 and not (ix.cap[1].is_const and ix.cap[1].value == 1):  # one index per element
            self.extent_check(ix.ext[1], cols[1], ix.cap[1], cols[2], iloc, f"the index tile's columns vs the window of '{name}'")
            per_row, rows, rcap = False, ix.ext[0], ix.cap[0]
        else:
            per_row = True
            rows, rcap = (ix.ext[1], ix.cap[1]) if ix.rank == 1 else (ix.ext[0], ix.cap[0])
        by = Indexed(ix, S.mul(dim_strides[d_ix], steps[d_ix]), g.shape(d_ix), d_ix, per_row)
        ref = GMRef(g.p.slot, name, g.p.dtype, offset, rows, cols[1], S.const(0), g.numel(), S.const(steps[last]))
        return XV(g, ref, 2, (rcap, cols[2]), by=by, at=loc)

    def gather_load(self, r: XV, loc: SourceLoc, name: str) -> Buf:
        """The window of `r` into a new UB tile: one GMGather (MTE2)."""
        for c in r.cap:
            self.require_static_or_shape(c, loc)
        b = self.new_buf(name, r.ref.dtype, r.rank, r.cap, (r.ref.rows, r.ref.cols), loc)
        self.emit(GMGather(b, r.ref, None, r.at or loc, by=r.by))
        return b
