"""Element rules of the vector instructions: what one element of a VOp's destination is, in LLVM IR,
and the reductions (`gen_reduce`, with float sums in `lane_sum`'s fixed order).

f16/bf16 load as f32 and round back on store (bf16 with integer round-to-nearest-even, keeping
subnormals like torch); integers compute in their own width; division and modulo by 0 give 0.
"""
from __future__ import annotations

from collections.abc import Callable

from compiler import sexpr as S
from compiler.backend import vmath
from compiler.backend.convert import narrow_bits, round_to, widen_bits
from compiler.backend.gen import Gen, _lane_mask, carry_loop, ffloat
from compiler.ir import Buf, VOp
from compiler.sexpr import F64, I64, SExpr
from dsl.types import DType, boolean
from simulator.isa import Instr, Pipe


def i64_of(g: "Gen", e: SExpr) -> str:
    """An SExpr as an i64 SSA value (doubles truncate toward zero)."""
    v = g.sval(e)
    return g.op(f"fptosi double {v} to i64") if e.ty == F64 else v


# ------------------------------------------------------------------ element ops
def ety(d: DType) -> str:
    return d.llvm


def compute_ty(d: DType) -> str:
    """Type arithmetic happens in: f32 for all floats, the integer type itself otherwise."""
    return "float" if d.is_float else d.llvm


def load_elem(g: Gen, d: DType, ptr: str) -> str:
    if d.llvm in ("half", "bfloat"):  # through the bits: no runtime helper on any host
        return widen_bits(g, g.op(f"load i16, ptr {ptr}, align 2"), d.llvm)
    return g.op(f"load {ety(d)}, ptr {ptr}, align {d.itemsize}")


def store_elem(g: Gen, d: DType, ptr: str, v: str) -> None:
    if d.llvm in ("half", "bfloat"):
        g.emit(f"store i16 {narrow_bits(g, v, d.llvm)}, ptr {ptr}, align 2")
        return
    g.emit(f"store {ety(d)} {v}, ptr {ptr}, align {d.itemsize}")


def scalar_as(g: Gen, e: SExpr, d: DType) -> str:
    """A scalar operand converted once to the compute type of dtype d (as torch's CPU kernels do:
    a Python float meets an f16/bf16 tensor as an f32 value, not rounded to the storage type)."""
    x = g.sval(e)
    if d.is_float:
        if e.ty == I64:
            x = g.op(f"sitofp i64 {x} to double")
        return g.op(f"fptrunc double {x} to float")
    if e.ty == F64:
        x = g.op(f"fptosi double {x} to i64")
    return g.op(f"trunc i64 {x} to {d.llvm}") if d.llvm != "i64" else x


FBIN = {Instr.VADD: "fadd", Instr.VSUB: "fsub", Instr.VMUL: "fmul", Instr.VDIV: "fdiv"}
IBIN = {Instr.VADD: "add", Instr.VSUB: "sub", Instr.VMUL: "mul", Instr.VAND: "and", Instr.VOR: "or",
        Instr.VXOR: "xor", Instr.VSHL: "shl", Instr.VSHR: "ashr"}
FCMP = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}
ROUNDING = {Instr.VFLOOR: "floor", Instr.VCEIL: "ceil", Instr.VRINT: "rint", Instr.VTRUNC: "trunc"}
ICMP = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}


def elem_op(g: Gen, s: VOp, xs: list[str], src_types: list[DType]) -> str:
    """The value of one element of s.dst from its operands (already in compute type)."""
    ins, d = s.instr, s.dst.dtype
    t = compute_ty(src_types[-1] if ins == Instr.VSEL else src_types[0])
    fl = t == "float"

    def f1(name: str, x: str) -> str:
        return g.fcall(name, x, "float")

    def f2(name: str, x: str, y: str) -> str:
        g.intrinsic(f"declare float @llvm.{name}.f32(float, float)")
        return g.op(f"call float @llvm.{name}.f32(float {x}, float {y})")

    if ins in FBIN and fl:
        return g.op(f"{FBIN[ins]} float {xs[0]}, {xs[1]}")
    if ins in (Instr.VSHL, Instr.VSHR) and not fl:  # counts at or past the width are undefined in LLVM
        bits = int(t[1:])
        amt = g.op(f"select i1 {g.op(f'icmp ugt {t} {xs[1]}, {bits - 1}')}, {t} {bits - 1}, {t} {xs[1]}")
        if ins == Instr.VSHL:
            over = g.op(f"icmp ugt {t} {xs[1]}, {bits - 1}")
            return g.op(f"select i1 {over}, {t} 0, {t} {g.op(f'shl {t} {xs[0]}, {amt}')}")
        return g.op(f"ashr {t} {xs[0]}, {amt}")
    if ins in IBIN and not fl:
        return g.op(f"{IBIN[ins]} {t} {xs[0]}, {xs[1]}")
    if ins in (Instr.VMAX, Instr.VMIN):
        if fl:
            return f2("maximum" if ins == Instr.VMAX else "minimum", xs[0], xs[1])
        name = "smax" if ins == Instr.VMAX else "smin"
        g.intrinsic(f"declare {t} @llvm.{name}.{t}({t}, {t})")
        return g.op(f"call {t} @llvm.{name}.{t}({t} {xs[0]}, {t} {xs[1]})")
    if ins in (Instr.VFLOORDIV, Instr.VMOD):
        if fl:
            q = f1("floor", g.op(f"fdiv float {xs[0]}, {xs[1]}"))
            if ins == Instr.VFLOORDIV:
                return q
            return g.op(f"fsub float {xs[0]}, {g.op(f'fmul float {q}, {xs[1]}')}")
        return g.int_divmod("//" if ins == Instr.VFLOORDIV else "%", xs[0], xs[1], t)
    if ins in vmath.FUNCS:  # transcendentals etc.: inline, branch-free, vectorisable (compiler.backend.vmath)
        return vmath.emit(g, ins, xs)
    if ins in ROUNDING:  # llvm.floor / ceil / rint / trunc: roundps on SSE4.1 and up
        return f1(ROUNDING[ins], xs[0])
    if ins == Instr.VABS:
        if fl:
            return f1("fabs", xs[0])
        g.intrinsic(f"declare {t} @llvm.abs.{t}({t}, i1)")
        return g.op(f"call {t} @llvm.abs.{t}({t} {xs[0]}, i1 false)")
    if ins == Instr.VNEG:
        return g.op(f"fneg float {xs[0]}") if fl else g.op(f"sub {t} 0, {xs[0]}")
    if ins == Instr.VRELU:
        if fl:
            return f2("maximum", xs[0], "0.0")
        g.intrinsic(f"declare {t} @llvm.smax.{t}({t}, {t})")
        return g.op(f"call {t} @llvm.smax.{t}({t} {xs[0]}, {t} 0)")
    if ins == Instr.VNOT:
        if d == boolean:
            return g.op(f"xor i8 {xs[0]}, 1")
        return g.op(f"xor {t} {xs[0]}, -1")
    if ins == Instr.VCMP:
        assert isinstance(s.arg, str)  # the comparison operator
        c = g.op(f"fcmp {FCMP[s.arg]} float {xs[0]}, {xs[1]}") if fl else \
            g.op(f"icmp {ICMP[s.arg]} {t} {xs[0]}, {xs[1]}")
        return g.op(f"zext i1 {c} to i8")
    if ins == Instr.VSEL:
        c = g.op(f"icmp ne i8 {xs[0]}, 0")
        return g.op(f"select i1 {c}, {t} {xs[1]}, {t} {xs[2]}")
    if ins in (Instr.VCOPY, Instr.VDUP):
        return xs[0]
    if ins == Instr.VCAST:
        return cast_value(g, xs[0], src_types[0], d)
    raise AssertionError(f"no element rule for {ins.name} on {d}")


def cast_value(g: Gen, x: str, src: DType, dst: DType) -> str:
    """x is in src's compute type; the result is in dst's compute type."""
    st, dt = compute_ty(src), compute_ty(dst)
    if dst == boolean:
        c = g.op(f"fcmp une float {x}, 0.0") if st == "float" else g.op(f"icmp ne {st} {x}, 0")
        return g.op(f"zext i1 {c} to i8")
    if st == "float" and dt == "float":
        return x  # rounding to f16/bf16 happens at the store
    if st == "float":
        r = g.fcall("rint", x, "float")
        g.intrinsic(f"declare {dt} @llvm.fptosi.sat.{dt}.f32(float)")
        return g.op(f"call {dt} @llvm.fptosi.sat.{dt}.f32(float {r})")
    if dt == "float":
        if src == boolean:
            return g.op(f"uitofp i8 {x} to float")
        f = g.op(f"sitofp {st} {x} to float")
        if dst.llvm in ("half", "bfloat"):  # through f32, as torch's CPU casts (and the interpreter)
            return round_to(g, f, dst.llvm)
        return f
    sb, db = int(st[1:]), int(dt[1:])
    if sb == db:
        return x
    if sb > db:
        return g.op(f"trunc {st} {x} to {dt}")
    return g.op(f"{'zext' if src == boolean else 'sext'} {st} {x} to {dt}")


def f32lit(v: float) -> str:
    import numpy as np

    return ffloat(float(np.float32(v)))


# ------------------------------------------------------------------ reductions
def reduce_event(g: Gen, s: VOp) -> None:
    """The trace event of a reduction: its source's elements, element bytes and rows."""
    src = s.srcs[0]
    assert isinstance(src, Buf)
    rows, cols = i64_of(g, src.ext[0]), i64_of(g, src.ext[1])
    g.event(s.instr, Pipe.V, s.loc, g.op(f"mul i64 {rows}, {cols}"), src.dtype.itemsize, rows)


def gen_reduce(g: Gen, s: VOp, event: bool = True) -> None:
    """A reduction (`event`: with its trace event; codegen_stream issues that apart from the data)."""
    if event:
        reduce_event(g, s)
    src = s.srcs[0]
    assert isinstance(src, Buf)
    d = s.dst
    dt = src.dtype
    ct = compute_ty(dt)
    rows, cols = i64_of(g, src.ext[0]), i64_of(g, src.ext[1])
    sp, ss = g.buf_ptr(src)
    dp, ds = g.buf_ptr(d)
    fl = ct == "float"
    if s.instr == Instr.VREDUCE_SUM:
        init = "0.0" if fl else "0"
    elif s.instr == Instr.VREDUCE_MAX:
        init = "0xFFF0000000000000" if fl else str(-(1 << (int(ct[1:]) - 1)))
    else:
        init = "0x7FF0000000000000" if fl else str((1 << (int(ct[1:]) - 1)) - 1)

    def combine(acc: str, x: str) -> str:
        if s.instr == Instr.VREDUCE_SUM:
            return g.op(f"fadd float {acc}, {x}") if fl else g.op(f"add {ct} {acc}, {x}")
        name = ("maximum" if s.instr == Instr.VREDUCE_MAX else "minimum") if fl else \
            ("smax" if s.instr == Instr.VREDUCE_MAX else "smin")
        suffix = "f32" if fl else ct
        g.intrinsic(f"declare {ct} @llvm.{name}.{suffix}({ct}, {ct})")
        return g.op(f"call {ct} @llvm.{name}.{suffix}({ct} {acc}, {ct} {x})")

    def elem(r: str, c: str) -> str:
        rp = g.op(f"getelementptr {ety(dt)}, ptr {sp}, i64 {g.op(f'mul i64 {r}, {ss}')}")
        return load_elem(g, dt, g.op(f"getelementptr {ety(dt)}, ptr {rp}, i64 {c}"))

    accp = g.tmp()
    g.allocas.append(f"{accp} = alloca {ct}, align 8")  # in the entry block: one slot, not one per iteration

    def out_ptr(i: str) -> str:
        # keepdims column (R, 1): row i; otherwise a row of values
        if d.cap[1] == S.const(1) and d.cap[0] != S.const(1):
            return g.op(f"getelementptr {ety(d.dtype)}, ptr {dp}, i64 {g.op(f'mul i64 {i}, {ds}')}")
        return g.op(f"getelementptr {ety(d.dtype)}, ptr {dp}, i64 {i}")

    def run(outer: str, inner_count: str, at: Callable[[str, str], str]) -> None:
        g.emit(f"store {ct} {init}, ptr {accp}, align 8")

        def inner(c: str) -> None:
            a = g.op(f"load {ct}, ptr {accp}, align 8")
            g.emit(f"store {ct} {combine(a, at(outer, c))}, ptr {accp}, align 8")

        g.loop(inner_count, inner)

    det = s.instr == Instr.VREDUCE_SUM and fl  # float sums: a fixed order, the same on every host

    def row_sum(r: str) -> str:
        rp = g.op(f"getelementptr {ety(dt)}, ptr {sp}, i64 {g.op(f'mul i64 {r}, {ss}')}")
        return lane_sum(g, rp, cols, dt)

    if s.arg == "rows":
        def per_row(r: str) -> None:
            if det:
                store_elem(g, d.dtype, out_ptr(r), row_sum(r))
                return
            run(r, cols, lambda o, c: elem(o, c))
            store_elem(g, d.dtype, out_ptr(r), g.op(f"load {ct}, ptr {accp}, align 8"))
        g.loop(rows, per_row)
    elif s.arg == "cols":  # one running value per column, rows in order
        def per_col(c: str) -> None:
            run(c, rows, lambda o, r: elem(r, o))
            store_elem(g, d.dtype, out_ptr(c), g.op(f"load {ct}, ptr {accp}, align 8"))
        g.loop(cols, per_col)
    else:
        g.emit(f"store {ct} {init}, ptr {accp}, align 8")

        def per_row_all(r: str) -> None:
            if det:  # each row's lane sum, added row by row
                a = g.op(f"load {ct}, ptr {accp}, align 8")
                g.emit(f"store {ct} {combine(a, row_sum(r))}, ptr {accp}, align 8")
                return

            def inner(c: str) -> None:
                a = g.op(f"load {ct}, ptr {accp}, align 8")
                g.emit(f"store {ct} {combine(a, elem(r, c))}, ptr {accp}, align 8")
            g.loop(cols, inner)
        g.loop(rows, per_row_all)
        store_elem(g, d.dtype, out_ptr("0"), g.op(f"load {ct}, ptr {accp}, align 8"))


def lane_sum(g: Gen, p: str, count: str, dt: DType) -> str:
    """Sum of `count` elements at p in a fixed order: 16 f32 lanes (lane l adds elements l, l+16,
    ... in turn, the tail through a masked load), then a fixed tree (l + l+8, l + l+4, ...).
    Vectorised by construction and bit-reproducible on any host; the interpreter does the same."""
    vt = "<16 x float>"

    def load16(q: str, mask: str | None) -> str:
        raw = {"float": "float", "half": "half", "bfloat": "i16"}[dt.llvm]
        vr = f"<16 x {raw}>"
        if mask is None:
            v = g.op(f"load {vr}, ptr {q}, align {dt.itemsize}")
        else:
            name = {"float": "v16f32", "half": "v16f16", "i16": "v16i16"}[raw]
            g.intrinsic(f"declare {vr} @llvm.masked.load.{name}.p0(ptr, i32, <16 x i1>, {vr})")
            v = g.op(f"call {vr} @llvm.masked.load.{name}.p0(ptr {q}, i32 {dt.itemsize}, <16 x i1> {mask}, "
                     f"{vr} zeroinitializer)")
        if raw == "float":
            return v
        if raw == "half":
            return widen_bits(g, g.op(f"bitcast {vr} {v} to <16 x i16>"), "half", 16)
        return widen_bits(g, v, "bfloat", 16)

    full = g.op(f"lshr i64 {count}, 4")

    def chunk(i: str, vals: list[str]) -> list[str]:
        q = g.op(f"getelementptr {ety(dt)}, ptr {p}, i64 {g.op(f'shl i64 {i}, 4')}")
        return [g.op(f"fadd {vt} {vals[0]}, {load16(q, None)}")]

    acc = carry_loop(g, full, [(vt, "zeroinitializer")], chunk)[0]
    tail = g.op(f"and i64 {count}, 15")
    q = g.op(f"getelementptr {ety(dt)}, ptr {p}, i64 {g.op(f'shl i64 {full}, 4')}")
    acc = g.op(f"fadd {vt} {acc}, {load16(q, _lane_mask(g, 16, tail))}")  # zeros past the tail: exact
    width = 16
    while width > 1:
        half = width // 2
        lo = g.op(f"shufflevector <{width} x float> {acc}, <{width} x float> poison, <{half} x i32> <"
                  + ", ".join(f"i32 {i}" for i in range(half)) + ">")
        hi = g.op(f"shufflevector <{width} x float> {acc}, <{width} x float> poison, <{half} x i32> <"
                  + ", ".join(f"i32 {i}" for i in range(half, width)) + ">")
        acc = g.op(f"fadd <{half} x float> {lo}, {hi}")
        width = half
    return g.op(f"extractelement <1 x float> {acc}, i64 0")
