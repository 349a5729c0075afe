"""Lowering of gathers and scalars from GM: `i = idx[r]` (one element into a scalar, S pipe),
`dsl.arange(n, dtype)` and `dsl.gather(x, index, axis)` (V pipe, within UB).

Windows indexed by such scalars (`w[i, :]`, `y[i, a:b] = tile`) need nothing new: a scalar GM index
gets its runtime bounds check (E404) in `WindowLowering.region`, whatever computed it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.frontend.values import RV, SV, Obj
from compiler.gathers import scalar_type
from compiler.ir import Buf, Check, LoadScalar, Stmt, VIndexed
from compiler.sexpr import I64, SExpr
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, boolean, f32, i8, i32
from simulator.isa import Instr

ONE = S.const(1)
ARANGE_DTYPES = (i32, f32)
INDEX_DTYPES = (i32, i8)


def err(code: str, msg: str, loc: SourceLoc | None, hint: str | None = None) -> KernelError:
    return KernelError(code, msg, loc, hint)


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
