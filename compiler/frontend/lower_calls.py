"""Lowering of calls: the dsl builtins (elementwise math, reductions, casts, where, fills, alloc,
copy, print) and the Python builtins kernels may use on scalars (min, max, abs, int, float).

Each builtin's arity and keywords come from `dsl.builtins.SPECS`, so arity errors (E203) name the
real signature.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

from compiler import sexpr as S
from compiler.frontend.lower_cube import _fix_cast_ok
from compiler.frontend.lower_gather import XV
from compiler.frontend.values import FV, MV, RV, SV, TV, BufOptions, Obj, TupleV
from compiler.ir import Buf, Check, Fix, GMRef, Load, Move, Print, SetVar, Stmt, VOp
from compiler.sexpr import F64, I64, SExpr
from dsl import ast as A
from dsl.builtins import SPECS, UNARY, Builtin
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, Mem, boolean
from simulator.isa import Instr

UNARY_INSTR = {"exp": Instr.VEXP, "log": Instr.VLOG, "sqrt": Instr.VSQRT, "rsqrt": Instr.VRSQRT,
               "abs": Instr.VABS, "neg": Instr.VNEG, "relu": Instr.VRELU, "sigmoid": Instr.VSIGMOID,
               "tanh": Instr.VTANH, "gelu": Instr.VGELU, "reciprocal": Instr.VRECIP, "erf": Instr.VERF,
               "sin": Instr.VSIN, "cos": Instr.VCOS, "softplus": Instr.VSOFTPLUS, "floor": Instr.VFLOOR,
               "ceil": Instr.VCEIL, "round": Instr.VRINT, "trunc": Instr.VTRUNC}
GELU_INSTR = {"none": Instr.VGELU, "tanh": Instr.VGELU_TANH}
REDUCE_INSTR = {"sum": Instr.VREDUCE_SUM, "max": Instr.VREDUCE_MAX, "min": Instr.VREDUCE_MIN}
ONE = S.const(1)


def err(code: str, msg: str, loc: SourceLoc | None, hint: str | None = None) -> KernelError:
    return KernelError(code, msg, loc, hint)


class CallLowering:
    """Mixed into `compiler.frontend.lower.Lowerer` (which provides expr, emit, as_tile, vbinary, ...)."""

    if TYPE_CHECKING:
        # provided by compiler.frontend.lower.Lowerer (and its other mixin, compiler.frontend.lower_cube.CubeLowering)
        zero_cand: dict[int, tuple[VOp, str]]
        acc_init: dict[int, str]

        def emit(self, s: Stmt) -> None: ...
        def new_buf(self, name: str, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                    loc: SourceLoc, mem: Mem = Mem.UB, **kw: Unpack[BufOptions]) -> Buf: ...
        def tmp(self, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                loc: SourceLoc) -> Buf: ...
        def new_var(self, hint: str, ty: str) -> str: ...
        def expr(self, e: A.Expr, stmt: bool = False) -> object: ...
        def scalar(self, v: object, loc: SourceLoc, what: object = "value") -> SExpr: ...
        def static_int(self, v: object, loc: SourceLoc, what: str) -> int: ...
        def scalar_for(self, v: SV, dtype: DType, loc: SourceLoc) -> SExpr: ...
        def as_tile(self, v: object, loc: SourceLoc) -> Buf | None: ...
        def store(self, r: RV, value: object, loc: SourceLoc) -> None: ...
        def vunary(self, instr: Instr, t: Buf, loc: SourceLoc, sym: str) -> Buf: ...
        def vbinary(self, instr: Instr, a: object, b: object, loc: SourceLoc, sym: str, arg: object = None,
                    out_dtype: DType | None = None) -> Buf: ...
        def broadcast(self, bufs: list[Buf], loc: SourceLoc,
                      sym: str) -> tuple[int, tuple[SExpr, SExpr], tuple[SExpr, SExpr]]: ...
        def fixable(self, v: object) -> FV | None: ...
        def matmul(self, a: object, b: object, loc: SourceLoc) -> object: ...
        def mmad_new(self, mv: MV, loc: SourceLoc, name: str) -> Buf: ...
        def load(self, r: RV, loc: SourceLoc, name: str = "t") -> Buf: ...
        def extent_check(self, a: SExpr, b: SExpr, capa: SExpr, capb: SExpr, loc: SourceLoc, what: str) -> None: ...
        def gather_builtin(self, name: str, args: dict, loc: SourceLoc) -> Buf: ...
        def copy_into_window(self, dst: Buf, ref: GMRef, loc: SourceLoc) -> None: ...
        def l1_shape(self, v: object, loc: SourceLoc) -> tuple[int, tuple[SExpr, SExpr]]: ...
        def tile_shape(self, v: object, loc: SourceLoc,
                       mem: Mem) -> tuple[int, tuple[SExpr, SExpr], tuple[SExpr, SExpr]]: ...
        def transpose_value(self, v: object, loc: SourceLoc, what: str) -> object: ...
        def copy_transposed(self, dst: Buf, r: RV, loc: SourceLoc) -> None: ...

    def call_args(self, name: str, c: A.Call) -> dict[str, object]:
        req, opt, _ = SPECS[name]
        names = list(req) + list(opt)
        out: dict[str, object] = dict(opt)
        if name == "print":
            return {"items": [self.expr(a) for a in c.args]}
        if len(c.args) > len(names):
            raise err("E203", f"dsl.{name}() takes at most {len(names)} arguments ({len(c.args)} given)", c.loc,
                      f"dsl.{name}({', '.join(req + tuple(f'{k}=...' for k in opt))})")
        for n, a in zip(names, c.args):
            out[n] = self.expr(a)
        for kw in c.kwargs:
            if kw.name not in names:
                raise err("E203", f"dsl.{name}() has no parameter '{kw.name}'", kw.loc,
                          f"parameters: {', '.join(names)}")
            out[kw.name] = self.expr(kw.value)
        missing = [n for n in req if n not in out]
        if missing:
            raise err("E203", f"dsl.{name}() missing argument '{missing[0]}'", c.loc,
                      f"dsl.{name}({', '.join(req)})")
        return out

    def call(self, c: A.Call, stmt: bool) -> object:
        fn = self.expr(c.func)
        if not isinstance(fn, Obj):
            raise err("E210", "this value cannot be called", c.func.loc)
        f = fn.value
        if isinstance(f, tuple) and f and f[0] == "method-cast":
            if len(c.args) != 1:
                raise err("E203", ".astype() takes one dtype", c.loc)
            return self.cast(f[1], self.expr(c.args[0]), c.loc)
        if isinstance(f, Builtin):
            return self.builtin(f.name, c, stmt)
        import builtins as py

        if f in (py.min, py.max, py.abs, py.int, py.float):
            if c.kwargs:
                raise err("E203", f"{f.__name__}() takes no keywords in kernels", c.loc)
            vals = [self.expr(a) for a in c.args]
            if any(isinstance(v, (TV, RV)) for v in vals):
                raise err("E209", f"Python's {f.__name__}() works on scalars", c.loc,
                          f"use dsl.{'maximum' if f is py.max else 'minimum' if f is py.min else f.__name__}() for tiles")
            es = [self.scalar(v, c.loc) for v in vals]
            if f in (py.min, py.max):
                if len(es) < 2:
                    raise err("E203", f"{f.__name__}() needs at least two scalars", c.loc)
                out = es[0]
                for x in es[1:]:
                    out = S.binary(f.__name__, out, x)
                return SV(out)
            if len(es) != 1:
                raise err("E203", f"{f.__name__}() takes one argument", c.loc)
            return SV({py.abs: lambda x: S.unary("abs", x), py.int: lambda x: S.unary("f2i", x) if x.ty == F64 else x,
                       py.float: S.to_float}[f](es[0]))
        if f is py.range:
            raise err("E202", "Python's range() is not available in kernels", c.loc, "use dsl.range(...)")
        if f is py.print:
            raise err("E202", "print() is not available in kernels", c.loc, "use dsl.print(...)")
        raise err("E202", f"'{getattr(f, '__name__', f)}' cannot be called in a kernel", c.loc)

    def builtin(self, name: str, c: A.Call, stmt: bool) -> object:
        args = self.call_args(name, c)
        loc = c.loc
        if name == "core_id":
            return SV(S.CORE_ID)
        if name == "num_cores":
            return SV(S.NUM_CORES)
        if name in ("tiles", "tiles2d", "range"):
            raise err("E210", f"dsl.{name}() can only be iterated by a for loop", loc)
        if name in UNARY:
            v = args["x"]
            fv = self.fixable(v)
            if name == "relu" and fv is not None and not fv.fix.relu and fv.fix.dtype == fv.buf.dtype:
                return FV(fv.buf, Fix(fv.buf.dtype, True, fv.fix.scale))
            t = self.as_tile(v, loc)
            if t is None:
                x = self.scalar(v, loc)
                if name in ("exp", "log", "sqrt", "rsqrt", "abs", "neg"):
                    return SV(S.unary(name, x))
                if name == "relu":
                    return SV(S.smax(x, S.const(0.0) if x.ty == F64 else 0))
                raise err("E209", f"dsl.{name}() works on tiles", loc)
            instr = UNARY_INSTR[name]
            if name == "gelu":
                mode = args["approximate"]
                mode = mode.value if isinstance(mode, Obj) else mode
                if mode not in GELU_INSTR:
                    raise err("E209", f"dsl.gelu(approximate={mode!r}): expected 'none' or 'tanh'", loc,
                              "approximate='none' is the erf form (torch's default), 'tanh' the tanh approximation")
                instr = GELU_INSTR[mode]
            return TV(self.vunary(instr, t, loc, f"dsl.{name}"))
        if name in ("rand", "randint"):  # Philox random numbers
            from compiler.frontend.lower_rng import lower_rng

            return TV(lower_rng(self, name, args, c))
        if name == "pow":
            a, b = args["x"], args["y"]
            ta, tb = self.as_tile(a, loc), self.as_tile(b, loc)
            if ta is None and tb is None:
                return SV(S.binary("**", self.scalar(a, loc), self.scalar(b, loc)))
            return TV(self.vbinary(Instr.VPOW, ta if ta is not None else a, tb if tb is not None else b, loc, "dsl.pow"))
        if name in ("maximum", "minimum") or (name in ("max", "min") and args.get("y") is not None):
            a, b = args["x"], args["y"]
            ta, tb = self.as_tile(a, loc), self.as_tile(b, loc)
            if ta is None and tb is None:
                return SV(S.binary(name[:3], self.scalar(a, loc), self.scalar(b, loc)))
            instr = Instr.VMAX if name.startswith("max") else Instr.VMIN
            return TV(self.vbinary(instr, ta if ta is not None else a, tb if tb is not None else b, loc, name))
        if name in ("sum", "max", "min"):
            return TV(self.reduce(name, args, loc))
        if name == "cast":
            return self.cast(args["x"], args["dtype"], loc)
        if name == "where":
            return TV(self.where(args, loc))
        if name in ("zeros", "full"):
            return TV(self.fill(name, args, loc))
        if name == "alloc":
            return TV(self.alloc(args, loc))
        if name == "copy":
            self.copy(args["dst"], args["src"], loc)
            return Obj(None)
        if name in ("arange", "gather"):
            return TV(self.gather_builtin(name, args, loc))
        if name == "atomic_add":
            from compiler.frontend.lower_atomic import atomic_add

            atomic_add(self, args["dst"], args["src"], c, loc)
            return Obj(None)
        if name == "print":
            items: list = []
            vals = args["items"]
            assert isinstance(vals, list)  # call_args("print", ...) gives the list of arguments
            for v in vals:
                if isinstance(v, Obj) and isinstance(v.value, str):
                    items.append(v.value)
                elif isinstance(v, SV):
                    items.append(v.e)
                elif isinstance(v, (TV, RV)):
                    items.append(self.as_tile(v, loc))
                else:
                    raise err("E209", "dsl.print() prints strings, scalars and tiles", loc)
            self.emit(Print(tuple(items), loc))
            return Obj(None)
        if name == "matmul":
            return self.matmul(args["a"], args["b"], loc)
        if name == "transpose":
            return self.transpose_value(args["x"], loc, "dsl.transpose()")
        raise err("E202", f"unknown builtin 'dsl.{name}'", loc)  # pragma: no cover

    def dtype_arg(self, v: object, loc: SourceLoc) -> DType:
        if isinstance(v, Obj) and isinstance(v.value, DType):
            return v.value
        raise err("E209", "expected a dtype (f32, f16, bf16, i32, i8)", loc)

    def cast(self, v: object, dt: object, loc: SourceLoc) -> object:
        dtype = self.dtype_arg(dt, loc)
        fv = self.fixable(v)
        if fv is not None and fv.fix.dtype == fv.buf.dtype and _fix_cast_ok(fv.buf.dtype, dtype):
            return FV(fv.buf, Fix(dtype, fv.fix.relu, fv.fix.scale))
        t = self.as_tile(v, loc)
        if t is None:
            x = self.scalar(v, loc)
            return SV(S.to_float(x) if dtype.is_float else (S.unary("f2i", S.unary("rint", x)) if x.ty == F64 else x))
        if t.dtype == dtype:
            return TV(t)
        dst = self.tmp(dtype, t.rank, t.cap, t.ext, loc)
        self.emit(VOp(Instr.VCAST, dst, (t,), "rint", loc))
        return TV(dst)

    def where(self, args: dict, loc: SourceLoc) -> Buf:
        c = self.as_tile(args["cond"], loc)
        if c is None or c.dtype != boolean:
            raise err("E204", "dsl.where() needs a condition tile (a comparison of tiles)", loc)
        a, b = args["a"], args["b"]
        ta, tb = self.as_tile(a, loc), self.as_tile(b, loc)
        tiles = [x for x in (ta, tb) if x is not None]
        if not tiles:
            raise err("E209", "dsl.where() needs at least one tile among its values", loc,
                      "for two scalars, fill a tile first with dsl.full")
        dtype = tiles[0].dtype
        if ta is not None and tb is not None and ta.dtype != tb.dtype:
            raise err("E204", f"dtype mismatch in dsl.where: {ta.dtype} vs {tb.dtype}", loc)
        srcs = tuple(x if x is not None else self.scalar_for(v, dtype, loc) for x, v in ((ta, a), (tb, b)))
        rank, cap, ext = self.broadcast([c, tiles[0]], loc, "where")
        if len(tiles) == 2:
            probe = Buf(0, "probe", dtype, rank, cap, ext)
            rank, cap, ext = self.broadcast([probe, tiles[1]], loc, "where")
        dst = self.tmp(dtype, rank, cap, ext, loc)
        self.emit(VOp(Instr.VSEL, dst, (c, *srcs), None, loc))
        return dst

    def reduce(self, name: str, args: dict, loc: SourceLoc) -> Buf:
        t = self.as_tile(args["x"], loc)
        if t is None:
            raise err("E209", f"dsl.{name}() reduces a tile", loc)
        axis_v, keep_v = args.get("axis"), args.get("keepdims", False)
        axis = None if axis_v is None or (isinstance(axis_v, Obj) and axis_v.value is None) else \
            self.static_int(axis_v, loc, "axis")
        keep = keep_v if isinstance(keep_v, bool) else bool(self.static_int(keep_v, loc, "keepdims"))
        if axis is not None and not -t.rank <= axis < t.rank:
            raise err("E205", f"axis {axis} is out of range for a rank-{t.rank} tile", loc)
        if t.rank == 1 or axis is None:
            rank, cap, ext, mode = (t.rank if keep else 1), (ONE, ONE), (ONE, ONE), "all"
        elif axis % 2 == 1:  # along columns: one value per row
            mode = "rows"
            rank, cap, ext = (2, (t.cap[0], ONE), (t.ext[0], ONE)) if keep else (1, (ONE, t.cap[0]), (ONE, t.ext[0]))
        else:
            mode = "cols"
            rank, cap, ext = (2 if keep else 1), (ONE, t.cap[1]), (ONE, t.ext[1])
        dst = self.tmp(t.dtype, rank, cap, ext, loc)
        self.emit(VOp(REDUCE_INSTR[name], dst, (t,), mode, loc))
        return dst

    def shape_arg(self, v: object, loc: SourceLoc) -> tuple[int, tuple[SExpr, SExpr]]:
        items = v.items if isinstance(v, TupleV) else (v,)
        if not 1 <= len(items) <= 2:
            raise err("E205", "tile shapes have one or two dimensions", loc)
        dims = [S.const(self.static_int(x, loc, "tile shape")) for x in items]
        for d in dims:
            if d.value <= 0:
                raise err("E205", f"tile dimensions must be positive, got {d.value}", loc)
        return len(dims), ((dims[0], dims[1]) if len(dims) == 2 else (ONE, dims[0]))

    def mem_arg(self, v: object, loc: SourceLoc) -> Mem:
        if isinstance(v, Obj) and isinstance(v.value, Mem):
            return v.value
        raise err("E209", "expected a memory: dsl.UB, dsl.L1, dsl.L0A, dsl.L0B or dsl.L0C", loc)

    def fill(self, name: str, args: dict, loc: SourceLoc) -> Buf:
        dtype = self.dtype_arg(args["dtype"], loc)
        mem = Mem.UB if args.get("mem") is None else self.mem_arg(args["mem"], loc)
        rank, cap, ext = self.tile_shape(args["shape"], loc, mem)  # runtime lengths too (lower_runtime)
        value = SV(S.const(0)) if name == "zeros" else args["value"]
        if not isinstance(value, SV):
            raise err("E209", "dsl.full() fills with a scalar", loc)
        b = self.new_buf("t", dtype, rank, cap, ext, loc, mem)
        stmt = VOp(Instr.VDUP, b, (self.scalar_for(value, dtype, loc),), None, loc)
        if mem == Mem.L0C:  # zeroed by the first mmad into it, not by the vector unit
            var = self.new_var("acc.init", I64)
            self.acc_init[b.id] = var
            self.emit(SetVar(var, S.const(1), loc))
            return b
        self.emit(stmt)
        if name == "zeros" and rank == 2:
            self.zero_cand[b.id] = (stmt, self.new_var("acc.init", I64))
        return b

    def alloc(self, args: dict, loc: SourceLoc) -> Buf:
        mem = self.mem_arg(args["mem"], loc)
        # an L1 panel may be as long as a tensor dimension (lower_l1): dsl.alloc(dsl.L1, (BM, a.shape[1]), f16)
        rank, cap = self.l1_shape(args["shape"], loc) if mem == Mem.L1 else self.shape_arg(args["shape"], loc)
        dtype = self.dtype_arg(args["dtype"], loc)
        nbuf = args.get("buffers")
        buffers = None if nbuf is None else self.static_int(nbuf, loc, "buffers")
        if buffers is not None and buffers not in (1, 2):
            raise err("E207", f"buffers must be 1 or 2, got {buffers}", loc)
        off = args.get("offset")
        offset = None if off is None else self.static_int(off, loc, "offset")
        if offset is not None and offset % 32:
            raise err("E302", f"explicit offset {offset} in {mem.value} is not 32-byte aligned", loc,
                      f"on-chip buffers start on 32-byte boundaries: use {offset // 32 * 32} or {(offset // 32 + 1) * 32}")
        b = self.new_buf("buf", dtype, rank, cap, cap, loc, mem, explicit=True, offset=offset, buffers=buffers)
        rows, cols = self.new_var(f"{b.name}.rows", I64), self.new_var(f"{b.name}.cols", I64)
        b.ext = (S.var(rows), S.var(cols))
        self.emit(SetVar(rows, cap[0], loc))
        self.emit(SetVar(cols, cap[1], loc))
        return b

    def set_ext(self, dst: Buf, ext: tuple[SExpr, SExpr], loc: SourceLoc) -> None:
        if dst.explicit:
            for d in (0, 1):
                if dst.cap[d].is_const and ext[d].is_const and ext[d].value > dst.cap[d].value:
                    raise err("E301", f"{ext[d].value} {'rows' if d == 0 else 'columns'} do not fit buffer "
                              f"'{dst.name}' of [{dst.shape_str}]", loc)
                if not ext[d].is_const:
                    self.emit(Check(S.binary("<=", ext[d], dst.cap[d]), "E301",
                                    f"%d {'rows' if d == 0 else 'columns'} do not fit buffer '{dst.name}' (capacity %d)",
                                    (ext[d], dst.cap[d]), "allocate a larger buffer or use smaller tiles", loc))
                self.emit(SetVar(dst.ext[d].args[0], ext[d], loc))

    def copy(self, dst: object, src: object, loc: SourceLoc) -> None:
        if isinstance(src, XV):  # gathered through an index tile (lower_gather), then moved
            src = TV(self.load(src, loc))
        if isinstance(dst, TV) and isinstance(src, RV) and dst.buf.parent is not None:
            self.copy_into_window(dst.buf, src.ref, loc)  # into a sub-window of an L1 panel (lower_l1)
        elif isinstance(dst, TV) and isinstance(src, RV):
            if dst.buf.dtype != src.ref.dtype:
                raise err("E204", f"dtype mismatch in copy: {dst.buf.dtype} buffer <- {src.ref.dtype} tensor", loc)
            if src.transposed:  # a window of x.T: loaded as stored, transposed on V
                self.copy_transposed(dst.buf, src, loc)
                return
            self.set_ext(dst.buf, (src.ref.rows, src.ref.cols), loc)
            self.emit(Load(dst.buf, src.ref, None, loc))
        elif isinstance(dst, RV) and isinstance(src, TV):
            self.store(dst, src, loc)
        elif isinstance(dst, TV) and isinstance(src, TV):
            if dst.buf.dtype != src.buf.dtype:
                raise err("E204", f"dtype mismatch in copy: {dst.buf.dtype} <- {src.buf.dtype}", loc,
                          "use dsl.cast to convert")
            self.set_ext(dst.buf, src.buf.ext, loc)
            # out of L0C every move goes through the FIX pipe (here converting nothing), as in materialize
            fix = Fix(src.buf.dtype) if src.buf.mem == Mem.L0C else None
            self.emit(Move(dst.buf, src.buf, None, loc, False, fix))
        else:
            raise err("E209", "dsl.copy(dst, src) copies between a GM window and a buffer, or two buffers", loc)


