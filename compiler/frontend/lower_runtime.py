"""Lowering of runtime tiles: tile shapes whose length is only known at run time, and numpy
broadcasting of operands whose size-1 dimensions are only known at run time.

- `dsl.zeros((c.len,), f32)`, `dsl.full((dsl.min(R, n - i), C), v, f32)`: a dimension may be a
  runtime length with a static bound (`S.upper_bound`: `t.len` of `dsl.tiles`, `dsl.min(R, ...)`,
  `dsl.min(i + R, n) - i`) or a tensor shape. The bound is the tile's capacity (what placement
  reserves), the runtime length its extent (what computes and moves). A length outside
  0..bound fails at run time (E205) before anything is written.
- Broadcasting (`broadcast_tiles`), per dimension as numpy: a static 1 broadcasts (compile time); a
  runtime extent broadcasts when it is 1 at run time (`compiler.extents.dyn_broadcasts` tells codegen
  and the interpreter which operands to read that way); two extents that are evidently equal need
  nothing; anything else gets one run-time check per instruction naming both shapes (E205).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.extents import same_extent
from compiler.frontend.values import TupleV
from compiler.ir import Buf, Check, SetVar, Stmt, walk
from compiler.sexpr import I64, SExpr
from dsl.errors import KernelError, SourceLoc
from dsl.types import Mem

if TYPE_CHECKING:
    from compiler.ir import Kernel

ONE = S.const(1)


def err(code: str, msg: str, loc: SourceLoc | None, hint: str | None = None) -> KernelError:
    return KernelError(code, msg, loc, hint)


def _shape_text(b: Buf) -> tuple[str, list[SExpr]]:
    """'(%d, %d)' / '(%d,)' and the extents that fill it, for a check's message."""
    if b.rank == 2:
        return "(%d, %d)", [b.ext[0], b.ext[1]]
    return "(%d,)", [b.ext[1]]


class RuntimeTileLowering:
    """Mixed into `compiler.frontend.lower.Lowerer` (which provides emit, new_var, scalar, ...)."""

    if TYPE_CHECKING:
        kernel: Kernel
        bodies: list[list[Stmt]]

        def emit(self, s: Stmt) -> None: ...
        def new_var(self, hint: str, ty: str) -> str: ...
        def scalar(self, v: object, loc: SourceLoc, what: object = "value") -> SExpr: ...

    # ---------------------------------------------------------- shapes of dsl.zeros / dsl.full
    def tile_shape(self, v: object, loc: SourceLoc, mem: Mem) -> tuple[int, tuple[SExpr, SExpr], tuple[SExpr, SExpr]]:
        """(rank, capacity, extent) of a `dsl.zeros` / `dsl.full` shape: each dimension a positive
        compile-time integer, or (in UB) a runtime length with a static bound or a tensor shape."""
        items = v.items if isinstance(v, TupleV) else (v,)
        if not 1 <= len(items) <= 2:
            raise err("E205", "tile shapes have one or two dimensions", loc)
        caps, exts = [], []
        for x in items:
            e = self.scalar(x, loc, "tile shape")
            if e.ty != I64:
                raise err("E207", "a tile shape must be an integer", loc, "use int(...) or an integer expression")
            if e.is_const:
                if e.value <= 0:
                    raise err("E205", f"tile dimensions must be positive, got {e.value}", loc)
                caps.append(e)
                exts.append(e)
                continue
            bound = S.upper_bound(e)
            if mem != Mem.UB or S.free_vars(bound) or (bound.is_const and bound.value <= 0):
                where = "" if mem == Mem.UB else f" in {mem.value}"
                raise err("E207", f"the tile shape{where} must be a compile-time integer, or a runtime length with a "
                          "static bound", loc,
                          "use t.len of dsl.tiles(n, TILE), dsl.min(R, n - i), dsl.min(i + R, n) - i, a tensor's "
                          "shape, or a Const[int]" if mem == Mem.UB else "give cube tiles constant shapes")
            caps.append(bound)
            exts.append(self.stable(e, loc))
        cap = (caps[0], caps[1]) if len(caps) == 2 else (ONE, caps[0])
        ext = (exts[0], exts[1]) if len(exts) == 2 else (ONE, exts[0])
        for d in (0, 1):
            if ext[d].is_const:
                continue
            ok = S.binary("<=", 0, ext[d])  # a tensor's shape too: placement sizes buffers by it
            if ext[d] != cap[d]:
                ok = S.binary("and", ok, S.binary("<=", ext[d], cap[d]))
            self.emit(Check(ok, "E205", "this tile's length is %d at run time, outside its static bound 0..%d",
                            (ext[d], cap[d]), "bound the length with dsl.min(BOUND, ...)", loc))
        return len(items), cap, ext

    def stable(self, e: SExpr, loc: SourceLoc) -> SExpr:
        """`e` itself if no variable in it is ever reassigned (loop indices, shapes, arguments), else its
        value now, kept in a fresh variable: a tile's extent must not change under it."""
        free = S.free_vars(e)
        if not free:
            return e
        assigned = {s.name for body in self.bodies for s in walk(tuple(body)) if isinstance(s, SetVar)}
        if not free & assigned:
            return e
        v = self.new_var("len", I64)
        self.emit(SetVar(v, e, loc))
        return S.var(v)

    # ---------------------------------------------------------- broadcasting
    def broadcast_tiles(self, bufs: list[Buf], loc: SourceLoc,
                        sym: str) -> tuple[int, tuple[SExpr, SExpr], tuple[SExpr, SExpr]]:
        """The (rank, capacity, extent) of an elementwise result over `bufs` (one or two tiles)."""
        rank = max(b.rank for b in bufs)
        if len(bufs) == 1:
            return rank, bufs[0].cap, bufs[0].ext
        a, b = bufs
        cap: list[SExpr] = []
        ext: list[SExpr] = []
        checks: list[tuple[SExpr, SExpr, SExpr]] = []  # (ok, a's extent, b's extent) per dimension
        for d in (0, 1):
            ca, cb, ea, eb = a.cap[d], b.cap[d], a.ext[d], b.ext[d]
            if ca == ONE and cb != ONE:  # a static 1
                cap.append(cb)
                ext.append(eb)
            elif cb == ONE and ca != ONE:
                cap.append(ca)
                ext.append(ea)
            elif same_extent(ea, eb):
                cap.append(cb if cb.is_const and not ca.is_const else ca)
                ext.append(ea)
            elif ea.is_const and eb.is_const:
                raise err("E205", f"shape mismatch: [{a.shape_str}] {sym} [{b.shape_str}]", loc,
                          "tiles must have equal shapes, or size 1 where one is broadcast")
            elif ea.is_const or eb.is_const:  # one side is known: the other must equal it or be 1
                (kc, ke), (rc, re) = ((ca, ea), (cb, eb)) if ea.is_const else ((cb, eb), (ca, ea))
                if ke.value == 1:
                    cap.append(rc)
                    ext.append(re)
                else:
                    cap.append(kc)
                    ext.append(ke)
                    checks.append((S.binary("or", S.binary("==", re, ke), S.binary("==", re, ONE)), ea, eb))
            else:  # both only known at run time: whichever is 1 broadcasts
                cap.append(S.smax(ca, cb))
                ext.append(S.select(S.binary("==", ea, ONE), eb, ea))
                ok = S.binary("or", S.binary("==", ea, eb), S.binary("or", S.binary("==", ea, ONE),
                                                                    S.binary("==", eb, ONE)))
                checks.append((ok, ea, eb))
        if checks:
            self.broadcast_check(a, b, checks, loc, sym)
        return rank, (cap[0], cap[1]), (ext[0], ext[1])

    def broadcast_check(self, a: Buf, b: Buf, checks: list[tuple[SExpr, SExpr, SExpr]], loc: SourceLoc,
                        sym: str) -> None:
        """One run-time check for the instruction: the first failing dimension's extents, then both shapes."""
        ok, va, vb = checks[-1]
        for c_ok, ca, cb in reversed(checks[:-1]):  # report the first dimension that fails
            va, vb = S.select(c_ok, va, ca), S.select(c_ok, vb, cb)
            ok = S.binary("and", c_ok, ok)
        ta, xa = _shape_text(a)
        tb, xb = _shape_text(b)
        self.emit(Check(ok, "E205", f"shape mismatch in '{sym}': %d vs %d (shapes {ta} and {tb})",
                        (va, vb, *xa, *xb), "a dimension broadcasts only where its length is 1; "
                        "other lengths must be equal", loc))
