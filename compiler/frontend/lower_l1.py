"""Lowering of L1 panels: sub-windows of L1 buffers (`a1[:, k]`, `a1[:, k:k + BK]`, `b1[k, :]`) as
matmul operands and copy destinations, and UB tiles staged into L1 for the cube (`p @ v[j, :]`).

A sub-window is a `Buf` with `parent` and `origin` set: the parent's storage from (row, col)
`origin` on (placed by `compiler.passes.views`). Its origin must lie on a fractal boundary (a
multiple of 16, 32 for i8), so it is an NZ matrix of its own, and it must lie inside what the
parent holds: both are checked at compile time when static, by a run-time check otherwise
(E302 alignment, E404 bounds), before any data moves.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

from compiler import sexpr as S
from compiler.frontend.values import SV, SW, TR, BufOptions, TupleV
from compiler.ir import Buf, Check, Load, Move, SetVar, Stmt
from compiler.sexpr import SExpr
from dsl import ast as A
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, Mem

if TYPE_CHECKING:
    from compiler.ir import GMRef

ONE = S.const(1)


def err(code: str, msg: str, loc: SourceLoc | None, hint: str | None = None) -> KernelError:
    return KernelError(code, msg, loc, hint)


def fractal_step(dtype: DType) -> int:
    """Sub-window origins lie on multiples of this (the fractal padding of `place.fractal_pad`)."""
    return max(16, 32 // dtype.itemsize)


class L1Lowering:
    """Mixed into `compiler.frontend.lower.Lowerer` (which provides expr, emit, new_buf, scalar, ...)."""

    if TYPE_CHECKING:
        depth: int

        def emit(self, s: Stmt) -> None: ...
        def new_buf(self, name: str, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                    loc: SourceLoc, mem: Mem = Mem.UB, **kw: Unpack[BufOptions]) -> Buf: ...
        def expr(self, e: A.Expr, stmt: bool = False) -> object: ...
        def scalar(self, v: object, loc: SourceLoc, what: object = "value") -> SExpr: ...
        def require_static_or_shape(self, c: SExpr, loc: SourceLoc) -> None: ...
        def extent_check(self, a: SExpr, b: SExpr, capa: SExpr, capb: SExpr, loc: SourceLoc, what: str) -> None: ...

    # ---------------------------------------------------------- a1[r, c]
    def l1_window(self, buf: Buf, index: A.Expr, loc: SourceLoc) -> Buf:
        """The sub-window `buf[index]` of an L1 buffer, as a Buf viewing buf's storage."""
        name = buf.name.split(".")[0]
        idx = index.elts if isinstance(index, A.Tuple) else (index,)
        if buf.rank != 2 or len(idx) != 2:
            raise err("E205", f"index the L1 buffer '{name}' with two windows, e.g. {name}[:, k]", loc,
                      "rows then columns: ':' for all of them, a dsl.range window k, or a slice k:k + BK")
        step = fractal_step(buf.dtype)
        starts: list[SExpr] = []
        lens: list[SExpr] = []
        caps: list[SExpr] = []
        for d, ix in enumerate(idx):
            what = "rows" if d == 0 else "columns"
            start, ln, cap, where = self._l1_dim(buf, d, ix)
            # alignment first: an origin inside a fractal cannot be addressed as NZ
            aligned = S.binary("==", S.binary("%", start, step), 0)
            if aligned.is_const:
                if not aligned.value:
                    raise err("E302", f"the {what} of this window of '{name}' start at {start.value}, inside a "
                              f"fractal", where, f"L1 sub-windows start on multiples of {step} "
                              f"({buf.dtype} fractals are {step} wide)")
            else:
                self.emit(Check(aligned, "E302", f"the {what} of this window of '{name}' start at %d, inside a "
                                f"fractal", (start,), f"L1 sub-windows start on multiples of {step}: "
                                "step the loop by a multiple of it", where))
            self._l1_bounds(buf, d, start, ln, cap, where)
            starts.append(start)
            lens.append(ln)
            caps.append(cap)
            self.require_static_or_shape(cap, where)
        v = self.new_buf(name, buf.dtype, 2, (caps[0], caps[1]), (lens[0], lens[1]), loc, buf.mem)
        if buf.parent is not None and buf.origin is not None:  # a window of a window: one origin in the root
            v.parent, v.origin = buf.root, (S.add(buf.origin[0], starts[0]), S.add(buf.origin[1], starts[1]))
        else:
            v.parent, v.origin = buf, (starts[0], starts[1])
        return v

    def _l1_dim(self, buf: Buf, d: int, ix: A.Expr) -> tuple[SExpr, SExpr, SExpr, SourceLoc]:
        """(start, runtime length, static capacity, location) of one index of an L1 window."""
        where = getattr(ix, "loc", None) or buf.loc
        if isinstance(ix, A.Slice):
            if ix.step is not None:
                raise err("E210", "L1 sub-windows cannot be stepped", ix.step.loc, "use a contiguous slice lo:hi")
            if ix.lower is None and ix.upper is None:
                return S.const(0), buf.ext[d], buf.cap[d], where
            lo = self.scalar(self.expr(ix.lower), ix.loc, "slice start") if ix.lower is not None else S.const(0)
            hi = self.scalar(self.expr(ix.upper), ix.loc, "slice stop") if ix.upper is not None else buf.ext[d]
            for e in (lo, hi):
                if e.ty != S.I64:
                    raise err("E204", "L1 window bounds must be integers", ix.loc)
            ln = S.sub(hi, lo)
            cap = S.upper_bound(ln) if ix.upper is not None else buf.cap[d]
            return lo, ln, cap, where
        v = self.expr(ix)
        if isinstance(v, SW):  # a dsl.range(start, stop, STEP) index: the window [k, min(k + STEP, stop))
            return v.e, v.len, v.cap, where
        if isinstance(v, TR):
            return v.start, v.len, v.cap, where
        if isinstance(v, SV):
            raise err("E210", f"single {'rows' if d == 0 else 'columns'} of an L1 buffer are not windows", where,
                      "index with ':', a dsl.range window (for k in dsl.range(0, K, BK)) or a slice k:k + BK")
        raise err("E210", "an L1 window index must be ':', a dsl.range window, a tile range or a slice", where)

    def _l1_bounds(self, buf: Buf, d: int, start: SExpr, ln: SExpr, cap: SExpr, where: SourceLoc) -> None:
        """start >= 0 and start + len within what `buf` holds (its extent; its capacity when static)."""
        if start == S.const(0) and ln == buf.ext[d]:
            return  # ':' - all of what the buffer holds
        name = buf.name.split(".")[0]
        dim = "rows" if d == 0 else "columns"
        hint = f"'{name}' holds {S.fmt(buf.cap[d])} {dim}; keep the window inside what was copied into it"
        if start.is_const and start.value < 0:
            raise err("E404", f"this window of '{name}' starts at {dim[:-1]} {start.value}", where, hint)
        end = S.add(start, ln)
        if buf.cap[d].is_const:
            past = S.binary(">", end, buf.cap[d])
            if past.is_const and past.value:
                raise err("E404", f"this window of '{name}' covers {dim} [{S.fmt(start)}, {S.fmt(end)}), past its "
                          f"{buf.cap[d].value} {dim}", where, hint)
            if start.is_const and cap.is_const and start.value >= buf.cap[d].value and cap.value > 0:
                raise err("E404", f"this window of '{name}' starts at {dim[:-1]} {start.value}, past its "
                          f"{buf.cap[d].value} {dim}", where, hint)
        ok = S.binary("and", S.binary("<=", 0, start), S.binary("<=", end, buf.ext[d]))
        if ok.is_const:
            if not ok.value:
                raise err("E404", f"this window of '{name}' covers {dim} [{S.fmt(start)}, {S.fmt(end)}), outside the "
                          f"{S.fmt(buf.ext[d])} it holds", where, hint)
            return
        self.emit(Check(ok, "E404", f"window {dim} [%d, %d) of L1 buffer '{name}' are outside the %d it holds",
                        (start, end, buf.ext[d]), hint, where))

    # ---------------------------------------------------------- dsl.alloc(dsl.L1, (BM, a.shape[1]), f16)
    def l1_shape(self, v: object, loc: SourceLoc) -> tuple[int, tuple[SExpr, SExpr]]:
        """The shape of an L1 buffer: each dimension a positive compile-time integer or a tensor shape
        (a panel as long as K); runtime sizes are checked against L1 at launch (E301)."""
        items = v.items if isinstance(v, TupleV) else (v,)
        if not 1 <= len(items) <= 2:
            raise err("E205", "tile shapes have one or two dimensions", loc)
        dims = []
        for x in items:
            e = self.scalar(x, loc, "tile shape")
            if e.ty != S.I64 or S.free_vars(e) or (e.is_const and e.value <= 0):
                raise err("E207", "an L1 buffer's shape must be positive compile-time integers or tensor shapes",
                          loc, "e.g. dsl.alloc(dsl.L1, (BM, a.shape[1]), a.dtype) for a panel of all of K")
            dims.append(e)
        return len(dims), ((dims[0], dims[1]) if len(dims) == 2 else (ONE, dims[0]))

    # ---------------------------------------------------------- dsl.copy(a1[:, k], a[m, k])
    def copy_into_window(self, dst: Buf, ref: GMRef, loc: SourceLoc) -> None:
        """GM -> a sub-window of an L1 buffer. A ':' dimension takes the source's extent (as a copy
        into the whole buffer does); a windowed one must match it."""
        root = dst.root
        name = root.name.split(".")[0]
        if dst.dtype != ref.dtype:
            raise err("E204", f"dtype mismatch in copy: {dst.dtype} buffer <- {ref.dtype} tensor", loc)
        src = (ref.rows, ref.cols)
        for d in (0, 1):
            whole = dst.origin is not None and dst.origin[d] == S.const(0) and dst.ext[d] == root.ext[d]
            if whole and root.explicit and root.ext[d].op == "var":
                fits = S.binary("<=", src[d], root.cap[d])
                if fits.is_const and not fits.value:
                    raise err("E301", f"{S.fmt(src[d])} {'rows' if d == 0 else 'columns'} do not fit buffer "
                              f"'{name}' of [{root.shape_str}]", loc)
                if not fits.is_const:
                    self.emit(Check(fits, "E301", f"%d {'rows' if d == 0 else 'columns'} do not fit buffer "
                                    f"'{name}' (capacity %d)", (src[d], root.cap[d]),
                                    "allocate a larger buffer or use smaller tiles", loc))
                self.emit(SetVar(root.ext[d].args[0], src[d], loc))
            else:
                self.extent_check(dst.ext[d], src[d], dst.cap[d], dst.cap[d], loc, f"copy into '{name}'")
        self.emit(Load(dst, ref, None, loc))

    # ---------------------------------------------------------- UB tiles as cube operands
    def stage_ub(self, b: Buf, role: str, loc: SourceLoc) -> Buf:
        """A UB tile as a matmul operand: copied UB -> L1 (MTE3, ND -> NZ) for the L1 -> L0 move."""
        if b.rank != 2 and not (b.rank == 1 and role == "A"):
            raise err("E205", f"the {role} operand of @ must be a 2-D tile", loc)
        for c in b.cap:
            self.require_static_or_shape(c, loc)
        l1 = self.new_buf(f"{role.lower()}1", b.dtype, 2, b.cap, b.ext, loc, Mem.L1)
        self.emit(Move(l1, b, None, loc))
        return l1
