"""Lowering of the cube: `a[m, k] @ b[k, n]`, L0C accumulators and FIX-pipe epilogues.

A product stages each operand GM -> L1 (MTE2, ND -> NZ) -> L0A/L0B (MTE1, transposing when the
window is of `x.T`) and is an `MV` until it meets an accumulator: `acc += A @ B` becomes an mmad
into L0C (a `dsl.zeros` accumulator moves to L0C and the first mmad overwrites it instead of the
vector unit zeroing it). An L0C result leaves through the FIX pipe: scale, relu and casts are
fused there (`FV`); anything else moves it to UB for the vector unit.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.frontend.values import FV, MV, RV, TV
from compiler.ir import Buf, Check, Fix, Load, Mmad, Move, SetVar, Stmt, VOp
from compiler.sexpr import SExpr
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, Mem, bf16, f16, f32, i8, i32


def err(code: str, msg: str, loc: SourceLoc | None, hint: str | None = None) -> KernelError:
    return KernelError(code, msg, loc, hint)


class CubeLowering:
    """Mixed into `compiler.frontend.lower.Lowerer` (which provides emit, new_buf, tmp, new_var, ...)."""

    if TYPE_CHECKING:
        # provided by compiler.frontend.lower.Lowerer
        bodies: list[list[Stmt]]
        zero_cand: dict[int, tuple[VOp, str]]
        acc_init: dict[int, str]

        def emit(self, s: Stmt) -> None: ...
        def new_buf(self, name: str, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                    loc: SourceLoc, mem: Mem = Mem.UB) -> Buf: ...
        def tmp(self, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                loc: SourceLoc) -> Buf: ...
        def require_static_or_shape(self, c: SExpr, loc: SourceLoc) -> None: ...
        def stage_ub(self, b: Buf, role: str, loc: SourceLoc) -> Buf: ...

    def fixable(self, v: object) -> FV | None:
        """An L0C value the FIX pipe can still post-process, as an FV."""
        if isinstance(v, FV):
            return v
        if isinstance(v, TV) and v.buf.mem == Mem.L0C:
            return FV(v.buf, Fix(v.buf.dtype))
        return None

    def materialize(self, fv: FV, loc: SourceLoc) -> Buf:
        """L0C -> UB through the FIX pipe (applying its scale/relu/cast), for the vector unit."""
        src = fv.buf
        dst = self.tmp(fv.fix.dtype, src.rank, src.cap, src.ext, loc)
        self.emit(Move(dst, src, None, loc, False, fv.fix))
        return dst

    def operand(self, v: object, role: str, loc: SourceLoc) -> tuple[Buf, bool, SExpr, SExpr, tuple[SExpr, SExpr]]:
        """Stage a matmul operand in L1: (L1 buffer, transposed, rows, cols, logical capacity)."""
        if isinstance(v, RV):
            dt = v.ref.dtype
            self.cube_dtype(dt, loc)
            if v.ref.step is not None:
                raise err("E210", f"a stepped window of '{v.ref.name}' cannot feed the cube", loc,
                          "gather it into a GM buffer first (a vector kernel), then multiply that")
            if v.rank != 2 and not (v.rank == 1 and role == "A"):
                raise err("E205", f"the {role} operand of @ must be a 2-D window", loc)
            stored = (v.cap[1], v.cap[0]) if v.transposed else v.cap
            for c in stored:
                self.require_static_or_shape(c, loc)
            l1 = self.new_buf(f"{role.lower()}1", dt, 2, stored, (v.ref.rows, v.ref.cols), loc, Mem.L1)
            self.emit(Load(l1, v.ref, None, loc))
            rows, cols = (v.ref.cols, v.ref.rows) if v.transposed else (v.ref.rows, v.ref.cols)
            return l1, v.transposed, rows, cols, v.cap
        if isinstance(v, TV):
            b = v.buf
            if b.mem == Mem.UB:  # UB -> L1 on MTE3 (lower_l1), e.g. P @ V in attention
                self.cube_dtype(b.dtype, loc)
                b = self.stage_ub(b, role, loc)
            if b.mem != Mem.L1:
                raise err("E303", f"the cube reads its {role} operand from L0{role}, staged through L1; "
                          f"'{b.name.split('.')[0]}' is in {b.mem.value}", loc,
                          "matmul GM windows directly (a[m, k] @ b[k, n]) or dsl.copy them into an L1 buffer")
            self.cube_dtype(b.dtype, loc)
            return b, False, b.ext[0], b.ext[1], b.cap
        raise err("E209", f"the {role} operand of @ must be a GM window or an L1 tile", loc)

    def cube_dtype(self, dt: DType, loc: SourceLoc) -> None:
        if dt not in (f16, bf16, f32, i8):
            raise err("E502", f"the cube cannot multiply {dt} operands", loc,
                      "cube operands are f16, bf16, f32 or i8: cast first")

    def matmul(self, a: object, b: object, loc: SourceLoc) -> object:
        # check the inner dimensions before any operand moves (a mismatch would read out of bounds)
        ea, eb = _logical_extent(a), _logical_extent(b)
        if (isinstance(a, RV) and isinstance(b, RV) and a.full and b.full and ea is not None and eb is not None
                and ea[1] == eb[0] and not ea[1].is_const):
            # both K windows come from one walk over K: the walked dimensions themselves must agree
            ea, eb = a.full, b.full  # logical (rows, cols), transposed windows included
        if ea is not None and eb is not None and ea[1] != eb[0] and not (ea[1].is_const and eb[0].is_const):
            self.emit(Check(S.binary("==", ea[1], eb[0]), "E501",
                            "mismatched inner dimensions: A has %d columns, B %d rows", (ea[1], eb[0]),
                            "the columns of A must equal the rows of B", loc))
        la, ta, m, ka, capa = self.operand(a, "A", loc)
        lb, tb, kb, n, capb = self.operand(b, "B", loc)
        if la.dtype != lb.dtype:
            raise err("E502", f"the cube cannot multiply {la.dtype} by {lb.dtype}", loc,
                      f"cast both operands to one type, e.g. {la.dtype}")
        if capa[1].is_const and capb[0].is_const and capa[1].value != capb[0].value:
            raise err("E501", f"mismatched inner dimensions: [{_d(capa[0])}x{_d(capa[1])}] @ "
                      f"[{_d(capb[0])}x{_d(capb[1])}]", loc, "the columns of A must equal the rows of B")
        a0 = self.new_buf("a0", la.dtype, 2, capa, (m, ka), loc, Mem.L0A)
        self.emit(Move(a0, la, None, loc, ta))
        b0 = self.new_buf("b0", lb.dtype, 2, capb, (kb, n), loc, Mem.L0B)
        self.emit(Move(b0, lb, None, loc, tb))
        acc = i32 if la.dtype == i8 else f32
        return MV(a0, b0, m, n, ka, acc, (capa[0], capb[1]))

    def mmad_new(self, mv: MV, loc: SourceLoc, name: str) -> Buf:
        c = self.new_buf(name if name != "t" else "acc", mv.acc, 2, mv.cap, (mv.m, mv.n), loc, Mem.L0C)
        self.emit(Mmad(c, mv.a, mv.b, mv.m, mv.n, mv.k, S.const(1), loc))
        return c

    def accumulate(self, acc: Buf, mv: MV, loc: SourceLoc) -> Buf:
        """acc += A @ B: acc lives in L0C; a dsl.zeros accumulator moves there, zeroed by the first mmad."""
        init: SExpr = S.const(0)
        cand = self.zero_cand.pop(acc.id, None)
        if acc.mem == Mem.UB and cand is not None:
            stmt, var = cand
            for body in self.bodies:
                for i, s in enumerate(body):
                    if s is stmt:
                        body[i] = SetVar(var, S.const(1), stmt.loc)
            acc.mem = Mem.L0C
            acc.ext = (mv.m, mv.n)  # valid where the products land (short edge blocks included)
            self.acc_init[acc.id] = var
        if acc.mem != Mem.L0C:
            raise err("E303", f"'{acc.name.split('.')[0]}' is in {acc.mem.value}; the cube accumulates into L0C", loc,
                      "start the accumulator with dsl.zeros((BM, BN), f32) and only add products to it")
        if acc.dtype != mv.acc:
            raise err("E502", f"a {mv.a.dtype} product accumulates in {mv.acc}, but '{acc.name.split('.')[0]}' is "
                      f"{acc.dtype}", loc, f"make the accumulator {mv.acc}")
        for d, (x, y) in enumerate(((acc.cap[0], mv.cap[0]), (acc.cap[1], mv.cap[1]))):
            if x.is_const and y.is_const and x.value != y.value:
                raise err("E205", f"the product is [{_d(mv.cap[0])}x{_d(mv.cap[1])}] but the accumulator is "
                          f"[{_d(acc.cap[0])}x{_d(acc.cap[1])}]", loc)
        flag = self.acc_init.get(acc.id)
        if flag is not None:
            init = S.var(flag)
        self.emit(Mmad(acc, mv.a, mv.b, mv.m, mv.n, mv.k, init, loc))
        if flag is not None:
            self.emit(SetVar(flag, S.const(0), loc))
        return acc


def _logical_extent(v: object) -> tuple[SExpr, SExpr] | None:
    if isinstance(v, RV):
        return (v.ref.cols, v.ref.rows) if v.transposed else (v.ref.rows, v.ref.cols)
    if isinstance(v, TV):
        return v.buf.ext
    return None


def _d(e: SExpr) -> str:
    return str(e.value) if e.is_const else S.fmt(e)


def _fix_cast_ok(src: DType, dst: DType) -> bool:
    return (src == f32 and dst in (f32, f16, bf16)) or (src == i32 and dst == i32)


