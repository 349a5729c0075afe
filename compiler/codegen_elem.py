"""Element rules of the vector instructions: what one element of a VOp's destination is, in LLVM IR.

f16/bf16 load as f32 and round back on store (bf16 with integer round-to-nearest-even, keeping
subnormals like torch); integers compute in their own width; division and modulo by 0 give 0.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from compiler.ir import VOp
from compiler.sexpr import F64, I64, SExpr
from dsl.types import DType, boolean
from simulator.isa import Instr

if TYPE_CHECKING:
    from compiler.codegen import Gen


def ffloat(v: float) -> str:
    """An LLVM double literal, exact (hex form)."""
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


# ------------------------------------------------------------------ element ops
def ety(d: DType) -> str:
    return d.llvm


def compute_ty(d: DType) -> str:
    """Type arithmetic happens in: f32 for all floats, the integer type itself otherwise."""
    return "float" if d.is_float else d.llvm


def load_elem(g: Gen, d: DType, ptr: str) -> str:
    if d.llvm == "bfloat":  # bf16 is the top half of an f32
        h = g.op(f"load i16, ptr {ptr}, align 2")
        w = g.op(f"zext i16 {h} to i32")
        return g.op(f"bitcast i32 {g.op(f'shl i32 {w}, 16')} to float")
    v = g.op(f"load {ety(d)}, ptr {ptr}, align {d.itemsize}")
    if d.llvm == "half":
        return g.op(f"fpext half {v} to float")
    return v


def f32_to_bf16_bits(g: Gen, v: str) -> str:
    """Round to nearest even with integer ops: keeps subnormals (some hosts' bf16 instructions flush
    them) and quiets NaNs, exactly as torch and ml_dtypes do."""
    b = g.op(f"bitcast float {v} to i32")
    odd = g.op(f"and i32 {g.op(f'lshr i32 {b}, 16')}, 1")
    bias = g.op(f"add i32 {odd}, 32767")
    r = g.op(f"lshr i32 {g.op(f'add i32 {b}, {bias}')}, 16")
    nan = g.op(f"fcmp uno float {v}, 0.0")
    q = g.op(f"or i32 {g.op(f'lshr i32 {b}, 16')}, 64")
    return g.op(f"trunc i32 {g.op(f'select i1 {nan}, i32 {q}, i32 {r}')} to i16")


def store_elem(g: Gen, d: DType, ptr: str, v: str) -> None:
    if d.llvm == "bfloat":
        g.emit(f"store i16 {f32_to_bf16_bits(g, v)}, ptr {ptr}, align 2")
        return
    if d.llvm == "half":
        v = g.op(f"fptrunc float {v} to half")
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
    if ins == Instr.VPOW:
        return f2("pow", xs[0], xs[1])
    if ins == Instr.VEXP:
        return f1("exp", xs[0])
    if ins == Instr.VLOG:
        return f1("log", xs[0])
    if ins == Instr.VSQRT:
        return f1("sqrt", xs[0])
    if ins == Instr.VRSQRT:
        return g.op(f"fdiv float 1.0, {f1('sqrt', xs[0])}")
    if ins == Instr.VRECIP:
        return g.op(f"fdiv float 1.0, {xs[0]}")
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
    if ins == Instr.VSIGMOID:
        e = f1("exp", g.op(f"fneg float {xs[0]}"))
        return g.op(f"fdiv float 1.0, {g.op(f'fadd float 1.0, {e}')}")
    if ins == Instr.VTANH:
        return f1("tanh", xs[0])
    if ins == Instr.VGELU:
        x = xs[0]
        x3 = g.op(f"fmul float {x}, {g.op(f'fmul float {x}, {x}')}")
        inner = g.op(f"fadd float {x}, {g.op(f'fmul float {x3}, {f32lit(0.044715)}')}")
        th = f1("tanh", g.op(f"fmul float {inner}, {f32lit(0.7978845608028654)}"))
        return g.op(f"fmul float {g.op(f'fmul float {x}, 0.5')}, {g.op(f'fadd float {th}, 1.0')}")
    if ins == Instr.VNOT:
        if d == boolean:
            return g.op(f"xor i8 {xs[0]}, 1")
        return g.op(f"xor {t} {xs[0]}, -1")
    if ins == Instr.VCMP:
        c = g.op(f"fcmp {FCMP[s.arg]} float {xs[0]}, {xs[1]}") if fl else \
            g.op(f"icmp {ICMP[s.arg]} {t} {xs[0]}, {xs[1]}")  # type: ignore[index]
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
        if dst.llvm in ("half", "bfloat"):  # one rounding, straight to the narrow type
            h = g.op(f"sitofp {st} {x} to {dst.llvm}")
            return g.op(f"fpext {dst.llvm} {h} to float")
        return g.op(f"sitofp {st} {x} to float")
    sb, db = int(st[1:]), int(dt[1:])
    if sb == db:
        return x
    if sb > db:
        return g.op(f"trunc {st} {x} to {dt}")
    return g.op(f"{'zext' if src == boolean else 'sext'} {st} {x} to {dt}")


def f32lit(v: float) -> str:
    import numpy as np

    return ffloat(float(np.float32(v)))


