"""lower: the kernel AST -> Tile IR, checking names, types and shapes on the way.

Scalars become `SExpr`s (folded when static), tiles become `Buf`s, GM subscripts become `GMRef`
windows that are loaded when used. Every user mistake found here is a `KernelError` at the
node's location.
"""
from __future__ import annotations

import operator
import types
from dataclasses import dataclass, field
from typing import Unpack, cast

from compiler import sexpr as S
from compiler.extents import same_extent
from compiler.frontend.lower_calls import CallLowering
from compiler.frontend.lower_cube import CubeLowering
from compiler.frontend.lower_gather import GatherLowering
from compiler.frontend.lower_l1 import L1Lowering
from compiler.frontend.lower_runtime import RuntimeTileLowering
from compiler.frontend.lower_transpose import TransposeLowering
from compiler.frontend.lower_windows import WindowLowering
from compiler.frontend.values import FV, GV, MV, RV, SV, SW, TGV, TR, TV, BufOptions, Obj, ShapeV, TupleV
from compiler.ir import (
    Buf,
    Check,
    Fix,
    For,
    If,
    Kernel,
    ParamSpec,
    SetVar,
    Stmt,
    VOp,
)
from compiler.sexpr import F64, I64, SExpr
from dsl import ast as A
from dsl.builtins import BUILTINS, SPECS, Builtin
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, Mem, _ConstType, _GMType, boolean
from simulator.isa import Instr

BINARY_INSTR = {"+": Instr.VADD, "-": Instr.VSUB, "*": Instr.VMUL, "/": Instr.VDIV, "//": Instr.VFLOORDIV,
                "%": Instr.VMOD, "**": Instr.VPOW, "&": Instr.VAND, "|": Instr.VOR, "^": Instr.VXOR,
                "<<": Instr.VSHL, ">>": Instr.VSHR}

FLOAT_ONLY = {Instr.VDIV, Instr.VPOW, Instr.VEXP, Instr.VLOG, Instr.VSQRT, Instr.VRSQRT, Instr.VSIGMOID,
              Instr.VTANH, Instr.VGELU, Instr.VRECIP, Instr.VERF, Instr.VSIN, Instr.VCOS, Instr.VSOFTPLUS,
              Instr.VGELU_TANH, Instr.VFLOOR, Instr.VCEIL, Instr.VRINT, Instr.VTRUNC}
INT_ONLY = {Instr.VAND, Instr.VOR, Instr.VXOR, Instr.VSHL, Instr.VSHR, Instr.VFLOORDIV, Instr.VMOD}
ONE = S.const(1)


def err(code: str, msg: str, loc: SourceLoc | None, hint: str | None = None) -> KernelError:
    return KernelError(code, msg, loc, hint)


# ------------------------------------------------------------------ parameters
@dataclass
class ParamDecl:
    """What a parameter's annotation declares (decided once, at decoration time)."""

    name: str
    kind: str  # gm | scalar | const
    dtype: DType | None
    rank: int | None
    scalar_ty: str
    default: object
    has_default: bool
    loc: SourceLoc


_NO_DEFAULT = object()

_STATIC_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
               "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "<<": operator.lshift,
               ">>": operator.rshift}


def eval_static(node: A.Expr, env: dict, loc_code: str = "E208") -> object:
    """Evaluate an annotation or default: names, attributes, subscripts, tuples and literals."""
    if isinstance(node, A.Constant):
        return node.value
    if isinstance(node, A.Name):
        if node.id in env:
            return env[node.id]
        if node.id in ("int", "float", "bool", "str"):
            return {"int": int, "float": float, "bool": bool, "str": str}[node.id]
        raise err("E201", f"unknown name '{node.id}'", node.loc, "import it at module level (e.g. from dsl import f32)")
    if isinstance(node, A.Attribute):
        base = eval_static(node.value, env, loc_code)
        if not hasattr(base, node.attr):
            raise err("E201", f"'{node.attr}' is not an attribute of {getattr(base, '__name__', base)}", node.loc)
        return getattr(base, node.attr)
    if isinstance(node, A.Subscript):
        base = eval_static(node.value, env, loc_code)
        return base[eval_static(node.index, env, loc_code)]  # type: ignore[index]
    if isinstance(node, A.Tuple):
        return tuple(eval_static(e, env, loc_code) for e in node.elts)
    if isinstance(node, A.UnaryOp) and node.op == "-":
        return -eval_static(node.operand, env, loc_code)  # type: ignore[operator]
    # `TILE: Const[int] = 1 << 20`, `4 * 1024`: arithmetic on numbers (Python itself ran the default
    # when it executed the def, so an expression that would not finish never gets here)
    if isinstance(node, A.BinOp) and node.op in _STATIC_OPS:
        left, right = eval_static(node.left, env, loc_code), eval_static(node.right, env, loc_code)
        if isinstance(left, (int, float)) and isinstance(right, (int, float)):
            try:
                return _STATIC_OPS[node.op](left, right)
            except (ArithmeticError, ValueError) as e:
                raise err(loc_code, f"cannot evaluate this default: {e}", node.loc) from None
    raise err(loc_code, "this expression is not allowed here; use a literal or a name",
              getattr(node, "loc", None), "defaults and annotations are literals, names, and arithmetic on them")


def declare_params(fdef: A.FunctionDef, env: dict) -> list[ParamDecl]:
    out = []
    for p in fdef.params:
        if p.annotation is None:
            raise err("E208", f"parameter '{p.name}' needs a type annotation", p.loc,
                      "annotate it: GM[f32] for a tensor, Const[int] for a compile-time value, int/float for a scalar")
        ann = eval_static(p.annotation, env)
        default = eval_static(p.default, env) if p.default is not None else _NO_DEFAULT
        has = default is not _NO_DEFAULT
        if isinstance(ann, _GMType):
            if has:
                raise err("E208", f"GM tensor '{p.name}' cannot have a default", p.default.loc if p.default else p.loc)
            out.append(ParamDecl(p.name, "gm", ann.dtype, ann.rank, I64, None, False, p.loc))
        elif isinstance(ann, _ConstType):
            out.append(ParamDecl(p.name, "const", None, None, I64, default if has else None, has, p.loc))
        elif ann in (int, bool) or (isinstance(ann, DType) and not ann.is_float):
            out.append(ParamDecl(p.name, "scalar", None, None, I64, default if has else None, has, p.loc))
        elif ann is float or (isinstance(ann, DType) and ann.is_float):
            out.append(ParamDecl(p.name, "scalar", None, None, F64, default if has else None, has, p.loc))
        else:
            raise err("E208", f"unsupported annotation for '{p.name}': {ann!r}", p.annotation.loc,
                      "use GM[dtype], Const[int], int or float")
    return out


# ------------------------------------------------------------------ lowering
@dataclass
class Scope:
    names: dict[str, object] = field(default_factory=dict)


class Lowerer(CallLowering, CubeLowering, WindowLowering, TransposeLowering, RuntimeTileLowering, L1Lowering,
              GatherLowering):
    def __init__(self, fdef: A.FunctionDef, env: dict, params: list[ParamSpec], options: dict):
        self.fdef, self.genv, self.options = fdef, env, options
        self.kernel = Kernel(fdef.name, params, (), 0, [], options=dict(options))
        self.scopes: list[dict[str, object]] = [{}]
        self.frozen: dict[str, str] = {}  # name -> why it cannot be assigned
        self.bodies: list[list[Stmt]] = [[]]
        self.depth = 0
        self.nbuf = 0
        self.nvar = 0
        self.mutable = _assigned_more_than_once(fdef.body)
        self.zero_cand: dict[int, tuple[VOp, str]] = {}  # dsl.zeros tiles that may become L0C accumulators
        self.acc_init: dict[int, str] = {}  # L0C accumulator -> its "next mmad overwrites" flag
        self.var_depth: dict[str, int] = {}
        for p in params:
            if p.kind == "gm":
                self.bind(p.name, GV(p))
                self.frozen[p.name] = "a kernel argument"
            elif p.kind == "const":
                self.bind(p.name, SV(S.const(p.value)) if isinstance(p.value, (int, float, bool)) else Obj(p.value))
                self.frozen[p.name] = "a Const parameter"
            else:
                self.bind(p.name, SV(S.arg(p.slot, p.scalar_ty)))
                self.frozen[p.name] = "a kernel argument"

    # ---------------------------------------------------------- plumbing
    def emit(self, s: Stmt) -> None:
        self.bodies[-1].append(s)

    def bind(self, name: str, v: object) -> None:
        self.scopes[-1][name] = v

    def lookup(self, name: str, loc: SourceLoc) -> object:
        for sc in reversed(self.scopes):
            if name in sc:
                return sc[name]
        if name in self.genv:
            return self.from_python(self.genv[name], name, loc)
        import builtins as py

        if name in ("min", "max", "abs", "int", "float", "range", "len", "print", "sum"):
            return Obj(getattr(py, name))
        raise err("E201", f"unknown name '{name}'", loc, "define it before use, or import it at module level")

    def from_python(self, v: object, name: str, loc: SourceLoc) -> object:
        if _is_dsl(v):
            return Obj(v)
        if isinstance(v, bool) or isinstance(v, (int, float)):
            return SV(S.const(v))
        if isinstance(v, (Builtin, DType, Mem, str)) or v is None:
            return Obj(v)
        raise err("E201", f"'{name}' ({type(v).__name__}) cannot be used inside a kernel", loc,
                  "kernels can use dsl, dtypes, and int/float constants from the module")

    def new_buf(self, name: str, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr],
                loc: SourceLoc, mem: Mem = Mem.UB, **kw: Unpack[BufOptions]) -> Buf:
        self.nbuf += 1
        b = Buf(self.nbuf, f"{name}{self.nbuf}" if name.startswith("t") and name[1:].isdigit() or name == "t" else
                f"{name}.{self.nbuf}", dtype, rank, cap, ext, mem, loc, depth=self.depth, **kw)
        self.kernel.bufs.append(b)
        return b

    def tmp(self, dtype: DType, rank: int, cap: tuple[SExpr, SExpr], ext: tuple[SExpr, SExpr], loc: SourceLoc) -> Buf:
        return self.new_buf("t", dtype, rank, cap, ext, loc)

    def new_var(self, hint: str, ty: str) -> str:
        self.nvar += 1
        name = f"{hint}.{self.nvar}"
        self.kernel.scalar_vars[name] = ty
        return name

    # ---------------------------------------------------------- entry
    def run(self) -> Kernel:
        self.block(self.fdef.body)
        self.kernel.body = tuple(self.bodies[0])
        return self.kernel

    def block(self, stmts: tuple[A.Stmt, ...]) -> None:
        for s in stmts:
            self.stmt(s)

    def nested(self, stmts: tuple[A.Stmt, ...]) -> tuple[Stmt, ...]:
        self.bodies.append([])
        self.scopes.append({})
        try:
            self.block(stmts)
        finally:
            self.scopes.pop()
        return tuple(self.bodies.pop())

    # ---------------------------------------------------------- statements
    def stmt(self, s: A.Stmt) -> None:
        if isinstance(s, A.Assign):
            value = self.expr(s.value)
            if isinstance(value, TV) and isinstance(s.value, A.Name) and value.buf.mem == Mem.UB \
                    and any(isinstance(t, A.Name) and t.id != s.value.id and t.id in self.mutable for t in s.targets):
                # `sc = rs`, sc reassigned later: sc gets its own tile, or updating it in place (a
                # loop-carried value, an assignment in an `if`) would change rs too
                src = value.buf
                dst = self.new_buf("t", src.dtype, src.rank, src.cap, src.ext, s.loc)
                self.emit(VOp(Instr.VCOPY, dst, (src,), None, s.loc))
                value = TV(dst)
            for t in s.targets:
                self.assign(t, value, s.loc)
        elif isinstance(s, A.AugAssign):
            cur = self.expr(s.target)
            value = self.binop(s.op, cur, self.expr(s.value), s.loc)
            self.assign(s.target, value, s.loc)
        elif isinstance(s, A.ExprStmt):
            if isinstance(s.value, A.Constant) and isinstance(s.value.value, str):
                return  # a string statement is a comment
            self.expr(s.value, stmt=True)
        elif isinstance(s, A.For):
            self.for_(s)
        elif isinstance(s, A.If):
            self.if_(s)
        elif isinstance(s, A.Pass):
            pass
        elif isinstance(s, A.Return):
            raise err("E101", "kernels cannot return a value", s.loc,
                      "write results into a GM argument, e.g. out[t] = ...") if s.value is not None else \
                err("E101", "'return' is not supported in kernels", s.loc, "guard the remaining code with an if")
        else:  # pragma: no cover - the parser produces nothing else
            raise err("E101", f"unsupported statement {type(s).__name__}", getattr(s, "loc", None))

    def assign(self, target: A.Expr, value: object, loc: SourceLoc) -> None:
        if isinstance(target, A.Tuple):
            items = value.items if isinstance(value, TupleV) else None
            if items is None or len(items) != len(target.elts):
                n = len(items) if items is not None else 1
                raise err("E205", f"cannot unpack {n} value(s) into {len(target.elts)} names", target.loc)
            for t, v in zip(target.elts, items):
                self.assign(t, v, loc)
            return
        if isinstance(target, A.Subscript):
            dst = self.expr(target.value)
            if isinstance(dst, GV):
                region = self.region(dst, target.index, target.loc)
                self.store(region, value, loc)
                return
            if isinstance(dst, TGV):  # y.T[c, r] = tile: stored transposed (store_transposed)
                self.store(cast(RV, self.subscript(target)), value, loc)
                return
            raise err("E210", "only GM tensors can be assigned by subscript", target.loc,
                      "compute a whole tile and store it: out[t] = tile")
        if not isinstance(target, A.Name):
            raise err("E210", "cannot assign to this expression", target.loc)
        name = target.id
        if name in self.frozen:
            raise err("E206", f"cannot assign to '{name}': it is {self.frozen[name]}", target.loc,
                      "use a new name for the new value")
        if isinstance(value, RV):
            value = TV(self.load(value, loc, name))
        if isinstance(value, MV):
            value = TV(self.mmad_new(value, loc, name))
        if isinstance(value, FV):
            value = TV(self.materialize(value, loc))
        old = self._find(name)
        if isinstance(value, SV):
            if isinstance(old, SV) and old.e.op == "var" and old.e.args[0] in self.kernel.scalar_vars:
                e = value.e
                if old.e.ty == I64 and e.ty == F64:
                    raise err("E204", f"'{name}' holds an int; assigning a float changes its type", loc,
                              "initialise it with a float, e.g. 0.0")
                self.emit(SetVar(old.e.args[0], S.to_float(e) if old.e.ty == F64 else e, loc))
                return
            if name in self.mutable:
                v = self.new_var(name, value.e.ty)
                self.emit(SetVar(v, value.e, loc))
                self.bind(name, SV(S.var(v, value.e.ty), value.is_bool))
                return
            self.bind(name, value)
            return
        if isinstance(value, TV) and value.buf.name[:1] == "t" and value.buf.name[1:].isdigit():
            value.buf.name = f"{name}.{value.buf.id}"  # a fresh tile takes the name it is bound to
        if isinstance(value, TV) and isinstance(old, TV) and name not in self.scopes[-1]:
            # a name bound outside this loop body or this runtime `if` branch: update its tile in
            # place so the loop carries it and the code after the `if` sees it (aliases such as
            # `sc = rs` got their own tile when bound, see `stmt`)
            self.write_into(old.buf, value.buf, loc)
            return
        self.bind(name, value)

    def _find(self, name: str) -> object | None:
        for sc in reversed(self.scopes):
            if name in sc:
                return sc[name]
        return None

    def write_into(self, dst: Buf, src: Buf, loc: SourceLoc) -> None:
        if dst is src:
            return
        if dst.dtype != src.dtype:
            raise err("E204", f"cannot assign a {src.dtype} tile to a {dst.dtype} tile", loc,
                      f"cast it: dsl.cast(..., {dst.dtype})")
        self.check_shapes(dst, src, loc, "assignment")
        body = self.bodies[-1]
        last = body[-1] if body else None
        # computed straight into dst, unless a transpose reads dst itself (it cannot work in place)
        in_place = isinstance(last, VOp) and last.instr == Instr.VTRANSPOSE and any(b is dst for b in last.srcs)
        if isinstance(last, VOp) and last.dst is src and src.mem == dst.mem and not src.explicit and not in_place:
            body[-1] = VOp(last.instr, dst, last.srcs, last.arg, last.loc)
            self.kernel.bufs.remove(src)
        else:
            self.emit(VOp(Instr.VCOPY, dst, (src,), None, loc))

    def for_(self, s: A.For) -> None:
        it = s.iter
        if not isinstance(it, A.Call):
            raise err("E210", "a kernel loop must iterate over dsl.tiles(...) or dsl.range(...)", s.iter.loc)
        fn = self.expr(it.func)
        fname = fn.value.name if isinstance(fn, Obj) and isinstance(fn.value, Builtin) else None
        if isinstance(fn, Obj) and fn.value is range:
            raise err("E202", "Python's range() is not available in kernels", it.loc, "use dsl.range(...)")
        if fname not in ("tiles", "range", "tiles2d"):
            raise err("E210", "a kernel loop must iterate over dsl.tiles(...) or dsl.range(...)", it.loc)
        args = self.call_args(fname, it)
        targets = s.target.elts if isinstance(s.target, A.Tuple) else (s.target,)
        names: list[str] = []
        for t in targets:
            if not isinstance(t, A.Name):
                raise err("E210", "loop targets must be names", t.loc)
            names.append(t.id)
        itv = self.new_var("it", I64)
        self.depth += 1
        self.scopes.append({})
        self.bodies.append([])
        try:
            if fname == "range":
                a, b, step = (self.scalar(args[k], it.loc, k) if args[k] is not None else None
                              for k in ("a", "b", "step"))
                assert a is not None  # a required argument of dsl.range (checked by call_args)
                start, stop = (S.const(0), a) if b is None else (a, b)
                step = step if step is not None else ONE
                if step.is_const and step.value == 0:
                    raise err("E207", "dsl.range step must not be 0", it.loc)
                if len(targets) != 1:
                    raise err("E205", "dsl.range gives one index", s.target.loc)
                v = self.new_var(names[0], I64)
                if step.is_const and step.value > 1:
                    ln = S.smin(step, S.sub(stop, S.var(v)))
                    self.bind(names[0], SW(S.var(v), False, ln, step))
                else:
                    self.bind(names[0], SV(S.var(v)))
                self.frozen_loop(names[0])
                kind, tile, var = "range", None, v
            elif fname == "tiles":
                n = self.scalar(args["n"], it.loc, "n")
                size = self.static_int(args["tile"], it.args[1].loc if len(it.args) > 1 else it.loc, "tile size")
                if len(targets) != 1:
                    raise err("E205", "dsl.tiles gives one tile range", s.target.loc)
                var = self.new_var(names[0] + ".idx", I64)
                idx = S.var(var)
                start_e = S.mul(idx, size)
                self.bind(names[0], TR(start_e, S.smin(S.const(size), S.sub(n, start_e)), S.const(size), idx))
                self.frozen_loop(names[0])
                start, stop, step = S.const(0), S.ceil_div(n, size), ONE
                kind, tile = "tiles", (S.const(size), n)
            else:  # tiles2d
                ext, sizes = args["extents"], args["tiles"]
                if not (isinstance(ext, TupleV) and isinstance(sizes, TupleV) and len(ext.items) == 2 == len(sizes.items)):
                    raise err("E203", "dsl.tiles2d takes ((M, N), (BM, BN))", it.loc)
                m, n = (self.scalar(e, it.loc, "extent") for e in ext.items)
                bm, bn = (self.static_int(e, it.loc, "tile size") for e in sizes.items)
                if len(targets) != 2:
                    raise err("E205", "dsl.tiles2d gives two tile ranges: for m, n in ...", s.target.loc)
                var = self.new_var("blk", I64)
                idx = S.var(var)
                nb = S.ceil_div(n, bn)
                mi, ni = S.binary("//", idx, nb), S.binary("%", idx, nb)
                ms, ns = S.mul(mi, bm), S.mul(ni, bn)
                self.bind(names[0], TR(ms, S.smin(S.const(bm), S.sub(m, ms)), S.const(bm), mi))
                self.bind(names[1], TR(ns, S.smin(S.const(bn), S.sub(n, ns)), S.const(bn), ni))
                for name in names:
                    self.frozen_loop(name)
                start, stop, step = S.const(0), S.mul(S.ceil_div(m, bm), nb), ONE
                kind, tile = "tiles", (S.const(bm * bn), S.mul(m, n))
            self.block(s.body)
        finally:
            for t in targets:
                if isinstance(t, A.Name):
                    self.frozen.pop(t.id, None)
            self.scopes.pop()
            body = tuple(self.bodies.pop())
            self.depth -= 1
        self.emit(For(var, itv, start, stop, step, body, kind, tile, s.loc))

    def frozen_loop(self, name: str) -> None:
        self.frozen[name] = "a loop variable"

    def if_(self, s: A.If) -> None:
        c = self.expr(s.test)
        if isinstance(c, (TV, RV)):
            raise err("E209", "'if' needs a scalar condition, not a tile", s.test.loc,
                      "select elementwise with dsl.where(cond, a, b)")
        cond = self.scalar(c, s.test.loc, "condition")
        if cond.is_const:
            self.block(s.body if cond.value else s.orelse)
            return
        then = self.nested(s.body)
        orelse = self.nested(s.orelse)
        self.emit(If(cond, then, orelse, s.loc))

    # ---------------------------------------------------------- expressions
    def expr(self, e: A.Expr, stmt: bool = False) -> object:
        if isinstance(e, A.Constant):
            if isinstance(e.value, (bool, int, float)):
                return SV(S.const(e.value), isinstance(e.value, bool))
            return Obj(e.value)
        if isinstance(e, A.Name):
            return self.lookup(e.id, e.loc)
        if isinstance(e, A.Tuple):
            return TupleV(tuple(self.expr(x) for x in e.elts))
        if isinstance(e, A.Attribute):
            return self.attribute(e)
        if isinstance(e, A.Subscript):
            return self.subscript(e)
        if isinstance(e, A.BinOp):
            return self.binop(e.op, self.expr(e.left), self.expr(e.right), e.loc)
        if isinstance(e, A.UnaryOp):
            return self.unaryop(e)
        if isinstance(e, A.Compare):
            return self.compare(e)
        if isinstance(e, A.BoolOp):
            vals = [self.expr(v) for v in e.values]
            if any(isinstance(v, (TV, RV)) for v in vals):
                raise err("E209", f"'{e.op}' works on scalars; for tiles use '{'&' if e.op == 'and' else '|'}'", e.loc)
            out = self.scalar(vals[0], e.loc)
            for v in vals[1:]:
                out = S.binary(e.op, out, self.scalar(v, e.loc))
            return SV(out, True)
        if isinstance(e, A.IfExp):
            c = self.expr(e.test)
            if isinstance(c, (TV, RV)):
                raise err("E209", "a conditional expression needs a scalar condition", e.test.loc,
                          "select elementwise with dsl.where(cond, a, b)")
            a, b = self.expr(e.body), self.expr(e.orelse)
            if isinstance(a, SV) and isinstance(b, SV):
                return SV(S.select(self.scalar(c, e.loc), a.e, b.e))
            cond = self.scalar(c, e.loc)
            if cond.is_const:
                return a if cond.value else b
            raise err("E209", "both branches of a conditional expression on tiles must be known at compile time",
                      e.loc, "use dsl.where for elementwise selection")
        if isinstance(e, A.Call):
            return self.call(e, stmt)
        raise err("E102", f"unsupported expression {type(e).__name__}", getattr(e, "loc", None))

    def attribute(self, e: A.Attribute) -> object:
        base = self.expr(e.value)
        if isinstance(base, Obj):
            if _is_dsl(base.value):
                if e.attr in SPECS:
                    return Obj(BUILTINS[e.attr])
                v = getattr(base.value, e.attr, None)
                if isinstance(v, (DType, Mem)):
                    return Obj(v)
                close = _close(e.attr, list(SPECS))
                raise err("E202", f"unknown builtin 'dsl.{e.attr}'", e.loc,
                          f"did you mean dsl.{close}?" if close else "see the DSL tour in the README for builtins")
        if isinstance(base, GV):
            if e.attr == "shape":
                return ShapeV(base)
            if e.attr == "dtype":
                return Obj(base.p.dtype)
            if e.attr == "T":
                if (base.p.rank or 0) < 2:
                    raise err("E205", f"'{base.p.name}.T' needs a tensor of rank 2 or more", e.loc,
                              "a 1-D tensor has no rows to swap with its columns")
                return TGV(base)
        if isinstance(base, TR):
            if e.attr in ("start", "len", "size", "index"):
                return SV({"start": base.start, "len": base.len, "size": base.len, "index": base.index}[e.attr])
        if isinstance(base, (TV, RV)):
            if e.attr == "shape":
                return ShapeV(base)
            if e.attr == "dtype":
                return Obj(base.buf.dtype if isinstance(base, TV) else base.ref.dtype)
            if e.attr in ("astype", "to"):
                return Obj(("method-cast", base))
        if e.attr == "T":
            return self.transpose_value(base, e.loc, "'.T'")
        raise err("E210", f"'{e.attr}' is not available here", e.loc)

    def extent_check(self, a: SExpr, b: SExpr, capa: SExpr, capb: SExpr, loc: SourceLoc, what: str) -> None:
        if same_extent(a, b):
            return
        if a.is_const and b.is_const:
            if a.value != b.value:
                raise err("E205", f"shape mismatch in {what}: {a.value} vs {b.value}", loc)
            return
        if capa.is_const and capb.is_const and capa.value != capb.value and not (a.is_const or b.is_const):
            raise err("E205", f"shape mismatch in {what}: tiles of {capa.value} vs {capb.value}", loc)
        self.emit(Check(S.binary("==", a, b), "E205", f"shape mismatch in {what}: %d vs %d", (a, b),
                        "both sides must have the same extent", loc))

    def check_shapes(self, a: Buf, b: Buf, loc: SourceLoc, what: str) -> None:
        for d in (0, 1):
            self.extent_check(a.ext[d], b.ext[d], a.cap[d], b.cap[d], loc, what)

    # ---------------------------------------------------------- scalar helpers
    def scalar(self, v: object, loc: SourceLoc, what: object = "value") -> SExpr:
        if isinstance(v, SV):
            return v.e
        if isinstance(v, (TV, RV)):
            raise err("E209", f"expected a scalar for {what}, got a tile", loc)
        raise err("E209", f"expected a scalar for {what}", loc)

    def static_int(self, v: object, loc: SourceLoc, what: str) -> int:
        e = self.scalar(v, loc, what)
        if not e.is_const or e.ty != I64:
            raise err("E207", f"the {what} must be a compile-time integer", loc,
                      "pass it as a Const[int] parameter or write a literal")
        return int(e.value)

    def scalar_for(self, v: SV, dtype: DType, loc: SourceLoc) -> SExpr:
        if v.is_float and not dtype.is_float:
            raise err("E204", f"a float scalar cannot be combined with a {dtype} tile", loc,
                      "cast the tile to a float type, or use an integer")
        return S.to_float(v.e) if dtype.is_float else v.e

    def as_tile(self, v: object, loc: SourceLoc) -> Buf | None:
        """A UB tile for a value used by the vector unit (loads GM windows, moves L0C results out)."""
        if isinstance(v, TV):
            if v.buf.mem == Mem.L0C:
                return self.materialize(FV(v.buf, Fix(v.buf.dtype)), loc)
            return v.buf
        if isinstance(v, RV):
            return self.load(v, loc)  # a window of x.T is transposed on the way (load_transposed)
        if isinstance(v, MV):
            return self.materialize(FV(self.mmad_new(v, loc, "t"), Fix(v.acc)), loc)
        if isinstance(v, FV):
            return self.materialize(v, loc)
        return None

    # ---------------------------------------------------------- operators
    def binop(self, op: str, a: object, b: object, loc: SourceLoc) -> object:
        if op == "@":
            return self.matmul(a, b, loc)
        if op == "+" and isinstance(b, MV) and isinstance(a, TV):
            return TV(self.accumulate(a.buf, b, loc))
        if op == "+" and isinstance(a, MV) and isinstance(b, TV):
            return TV(self.accumulate(b.buf, a, loc))
        if op == "*" and isinstance(b, SV) and (fv := self.fixable(a)) is not None:
            if fv.fix.scale is None and not fv.fix.relu and fv.fix.dtype == fv.buf.dtype:
                return FV(fv.buf, Fix(fv.buf.dtype, False, S.to_float(b.e)))
        ta, tb = self.as_tile(a, loc), self.as_tile(b, loc)
        if ta is None and tb is None:
            if isinstance(a, SV) and isinstance(b, SV):
                return SV(S.binary(op, a.e, b.e))
            raise err("E210", f"unsupported operand for '{op}'", loc)
        instr = BINARY_INSTR.get(op)
        if instr is None:
            raise err("E210", f"operator '{op}' is not supported on tiles", loc)
        return TV(self.vbinary(instr, ta if ta is not None else a, tb if tb is not None else b, loc, op))

    def vbinary(self, instr: Instr, a: object, b: object, loc: SourceLoc, sym: str, arg: object = None,
                out_dtype: DType | None = None) -> Buf:
        bufs = [x for x in (a, b) if isinstance(x, Buf)]
        for x in (a, b):
            if not isinstance(x, (Buf, SV)):
                raise err("E209", f"'{sym}' needs tiles or scalars", loc)
        dtype = bufs[0].dtype
        if len(bufs) == 2 and bufs[0].dtype != bufs[1].dtype:
            raise err("E204", f"dtype mismatch: {bufs[0].dtype} {sym} {bufs[1].dtype}", loc,
                      f"cast one side first, e.g. dsl.cast(x, {bufs[0].dtype})")
        self.check_dtype(instr, dtype, loc, sym)
        srcs = tuple(x if isinstance(x, Buf) else self.scalar_for(cast(SV, x), dtype, loc) for x in (a, b))  # checked above
        rank, cap, ext = self.broadcast(bufs, loc, sym)
        dst = self.tmp(out_dtype or dtype, rank, cap, ext, loc)
        self.emit(VOp(instr, dst, srcs, arg, loc))
        return dst

    def check_dtype(self, instr: Instr, dtype: DType, loc: SourceLoc, sym: str) -> None:
        if instr in FLOAT_ONLY and not dtype.is_float:
            raise err("E204", f"'{sym}' needs a float tile, got {dtype}", loc, "cast first: dsl.cast(x, f32)")
        if instr in INT_ONLY and dtype.is_float and instr not in (Instr.VFLOORDIV, Instr.VMOD):
            raise err("E204", f"'{sym}' needs an integer or bool tile, got {dtype}", loc)

    def broadcast(self, bufs: list[Buf], loc: SourceLoc, sym: str) -> tuple[int, tuple[SExpr, SExpr], tuple[SExpr, SExpr]]:
        return self.broadcast_tiles(bufs, loc, sym)  # numpy's rules, runtime 1s included (lower_runtime)

    def unaryop(self, e: A.UnaryOp) -> object:
        v = self.expr(e.operand)
        t = self.as_tile(v, e.loc)
        if t is None:
            x = self.scalar(v, e.loc)
            if e.op == "-":
                return SV(S.unary("neg", x))
            if e.op == "+":
                return v
            if e.op == "not":
                return SV(S.unary("not", x), True)
            return SV(S.binary("^", x, -1))
        if e.op == "-":
            return TV(self.vunary(Instr.VNEG, t, e.loc, "-"))
        if e.op == "+":
            return TV(t)
        if e.op == "not":
            raise err("E209", "'not' works on scalars; for tiles use '~'", e.loc)
        return TV(self.vunary(Instr.VNOT, t, e.loc, "~"))

    def vunary(self, instr: Instr, t: Buf, loc: SourceLoc, sym: str) -> Buf:
        self.check_dtype(instr, t.dtype, loc, sym)
        dst = self.tmp(t.dtype, t.rank, t.cap, t.ext, loc)
        self.emit(VOp(instr, dst, (t,), None, loc))
        return dst

    def compare(self, e: A.Compare) -> object:
        a, b = self.expr(e.left), self.expr(e.right)
        if isinstance(a, Obj) or isinstance(b, Obj):  # compile-time objects: strings, dtypes, None
            va = a.value if isinstance(a, Obj) else (a.e.value if isinstance(a, SV) and a.e.is_const else a)
            vb = b.value if isinstance(b, Obj) else (b.e.value if isinstance(b, SV) and b.e.is_const else b)
            if e.op in ("==", "!="):
                return SV(S.const((va == vb) == (e.op == "==")), True)
            raise err("E209", f"'{e.op}' cannot compare these values", e.loc)
        ta, tb = self.as_tile(a, e.loc), self.as_tile(b, e.loc)
        if ta is None and tb is None:
            return SV(S.binary(e.op, self.scalar(a, e.loc), self.scalar(b, e.loc)), True)
        return TV(self.vbinary(Instr.VCMP, ta if ta is not None else a, tb if tb is not None else b, e.loc, e.op,
                               arg=e.op, out_dtype=boolean))

def _assigned_more_than_once(body: tuple[A.Stmt, ...]) -> set[str]:
    counts: dict[str, int] = {}

    def names(t: A.Expr):
        if isinstance(t, A.Name):
            yield t.id
        elif isinstance(t, A.Tuple):
            for e in t.elts:
                yield from names(e)

    def visit(stmts: tuple[A.Stmt, ...], in_loop: bool) -> None:
        for s in stmts:
            if isinstance(s, A.Assign):
                for t in s.targets:
                    for n in names(t):
                        counts[n] = counts.get(n, 0) + 1
            elif isinstance(s, A.AugAssign):
                for n in names(s.target):
                    counts[n] = counts.get(n, 0) + 2
            elif isinstance(s, A.For):
                visit(s.body, True)
            elif isinstance(s, A.If):
                visit(s.body, in_loop)
                visit(s.orelse, in_loop)

    visit(body, False)
    return {n for n, c in counts.items() if c > 1}


def _is_dsl(v: object) -> bool:
    """`v` is the `dsl` package, as a kernel's module sees it (`import dsl`)."""
    return isinstance(v, types.ModuleType) and v.__name__ == "dsl"


def _close(word: str, options: list[str]) -> str | None:
    import difflib

    m = difflib.get_close_matches(word, options, n=1)
    return m[0] if m else None


def lower(fdef: A.FunctionDef, env: dict, params: list[ParamSpec], options: dict) -> Kernel:
    """The `lower` stage: AST -> Tile IR."""
    k = Lowerer(fdef, env, params, options).run()
    k.nwords = max((p.slot + (2 + p.rank if p.kind == "gm" else 1) for p in params if p.kind != "const"), default=0)
    return k
