"""convert: f16 / bf16 <-> f32 conversions as LLVM IR that needs no runtime symbol on any host.

LLVM lowers `fptrunc` / `fpext` / `sitofp` involving `half` or `bfloat` to compiler-rt calls
(`__truncsfbf2`, `__extendhfsf2`, `__truncsfhf2`, ...) on targets without the instruction: the
JIT cannot resolve them. So:
  - bf16 is always converted with integer operations (it is the top half of an f32): round to
    nearest even, subnormals kept, NaNs quieted, as torch and ml_dtypes do.
  - f16 uses F16C (`vcvtph2ps` / `vcvtps2ph`) where the target has it, and the same results from
    integer and float operations elsewhere (x86-64-v2). tests/compiler/test_convert.py checks the
    software path against the instructions on every f16 bit pattern and a dense f32 sweep.
  - integers reach f16 / bf16 through f32 (two roundings past 2**24, as torch's CPU casts do).
Each function takes `n` lanes (0 for a scalar) and works on SSA values of a codegen `Gen`.
"""
from __future__ import annotations

from typing import Protocol


class _Gen(Protocol):
    def op(self, text: str) -> str: ...


def ty(n: int, base: str) -> str:
    return base if n == 0 else f"<{n} x {base}>"


def const(n: int, base: str, c: object) -> str:
    """A constant operand of type ty(n, base)."""
    return str(c) if n == 0 else "<" + ", ".join([f"{base} {c}"] * n) + ">"


def _has_f16c() -> bool:
    from compiler.host import target

    return target().has("f16c")


def bf16_bits_to_f32(g: _Gen, bits: str, n: int = 0) -> str:
    """i16 (bf16 bits) -> float: exact."""
    i16, i32, f = ty(n, "i16"), ty(n, "i32"), ty(n, "float")
    w = g.op(f"zext {i16} {bits} to {i32}")
    s = g.op(f"shl {i32} {w}, {const(n, 'i32', 16)}")
    return g.op(f"bitcast {i32} {s} to {f}")


def f32_to_bf16_bits(g: _Gen, v: str, n: int = 0) -> str:
    """float -> i16 bf16 bits, round to nearest even with integer ops: keeps subnormals (some hosts'
    bf16 instructions flush them) and quiets NaNs, exactly as torch and ml_dtypes do."""
    i32, c = ty(n, "i32"), lambda x: const(n, "i32", x)
    b = g.op(f"bitcast {ty(n, 'float')} {v} to {i32}")
    hi = g.op(f"lshr {i32} {b}, {c(16)}")
    bias = g.op(f"add {i32} {g.op(f'and {i32} {hi}, {c(1)}')}, {c(32767)}")
    r = g.op(f"lshr {i32} {g.op(f'add {i32} {b}, {bias}')}, {c(16)}")
    nan = g.op(f"fcmp uno {ty(n, 'float')} {v}, {const(n, 'float', '0.0')}")
    q = g.op(f"or {i32} {hi}, {c(64)}")
    i1, i16 = ty(n, "i1"), ty(n, "i16")
    sel = g.op(f"select {i1} {nan}, {i32} {q}, {i32} {r}")
    return g.op(f"trunc {i32} {sel} to {i16}")


def f16_bits_to_f32(g: _Gen, bits: str, n: int = 0) -> str:
    """i16 (f16 bits) -> float: exact (normals, subnormals, +-0, +-inf); NaNs keep their payload and
    come out quiet (as vcvtph2ps)."""
    i16, half, f = ty(n, "i16"), ty(n, "half"), ty(n, "float")
    if _has_f16c():
        h = g.op(f"bitcast {i16} {bits} to {half}")
        return g.op(f"fpext {half} {h} to {f}")
    i32, c = ty(n, "i32"), lambda x: const(n, "i32", x)
    h = g.op(f"zext {ty(n, 'i16')} {bits} to {i32}")
    sign = g.op(f"shl {i32} {g.op(f'and {i32} {h}, {c(0x8000)}')}, {c(16)}")
    em = g.op(f"and {i32} {h}, {c(0x7FFF)}")
    o = g.op(f"shl {i32} {em}, {c(13)}")
    # finite: the f16 bits shifted into an f32 are the value times 2**-112 (subnormals included): rescale
    raw = g.op(f"bitcast {i32} {o} to {f}")
    scaled = g.op(f"fmul {f} {raw}, {const(n, 'float', '0x46F0000000000000')}")
    fin = g.op(f"bitcast {f} {scaled} to {i32}")
    special = g.op(f"icmp uge {i32} {em}, {c(0x7C00)}")
    infnan = g.op(f"or {i32} {o}, {c(0x7F800000)}")
    infnan = g.op(f"select {ty(n, 'i1')} {g.op(f'icmp ugt {i32} {em}, {c(0x7C00)}')}, {i32} "
                  f"{g.op(f'or {i32} {infnan}, {c(0x400000)}')}, {i32} {infnan}")  # NaNs come out quiet
    mag = g.op(f"select {ty(n, 'i1')} {special}, {i32} {infnan}, {i32} {fin}")
    return g.op(f"bitcast {i32} {g.op(f'or {i32} {mag}, {sign}')} to {f}")


def f32_to_f16_bits(g: _Gen, v: str, n: int = 0) -> str:
    """float -> i16 f16 bits, round to nearest even; overflow to inf; NaN quieted (as vcvtps2ph)."""
    half, i16 = ty(n, "half"), ty(n, "i16")
    if _has_f16c():
        h = g.op(f"fptrunc {ty(n, 'float')} {v} to {half}")
        return g.op(f"bitcast {half} {h} to {i16}")
    i32, f, i1, c = ty(n, "i32"), ty(n, "float"), ty(n, "i1"), lambda x: const(n, "i32", x)
    b = g.op(f"bitcast {f} {v} to {i32}")
    sign = g.op(f"lshr {i32} {g.op(f'and {i32} {b}, {c(0x80000000)}')}, {c(16)}")
    a = g.op(f"and {i32} {b}, {c(0x7FFFFFFF)}")
    # |v| < 2**-14: the f16 result is subnormal (or zero); adding 0.5 lets the FPU round it (RNE)
    magic = (127 - 15 + 23 - 10 + 1) << 23
    sub = g.op(f"fadd {f} {g.op(f'bitcast {i32} {a} to {f}')}, {g.op(f'bitcast {i32} {c(magic)} to {f}')}")
    sub_bits = g.op(f"sub {i32} {g.op(f'bitcast {f} {sub} to {i32}')}, {c(magic)}")
    # normal: rebias the exponent, round the 13 dropped bits to nearest even
    odd = g.op(f"and {i32} {g.op(f'lshr {i32} {a}, {c(13)}')}, {c(1)}")
    rb = g.op(f"add {i32} {g.op(f'add {i32} {a}, {c(((15 - 127) << 23) + 0xFFF)}')}, {odd}")
    norm_bits = g.op(f"lshr {i32} {rb}, {c(13)}")
    is_sub = g.op(f"icmp ult {i32} {a}, {c(113 << 23)}")
    fin = g.op(f"select {i1} {is_sub}, {i32} {sub_bits}, {i32} {norm_bits}")
    # |v| >= 65520 rounds to inf; NaN keeps its top payload bits and is quieted
    big = g.op(f"icmp uge {i32} {a}, {c((127 + 16) << 23)}")
    payload = g.op(f"and {i32} {g.op(f'lshr {i32} {a}, {c(13)}')}, {c(0x3FF)}")
    nanv = g.op(f"or {i32} {payload}, {c(0x7E00)}")
    is_nan = g.op(f"icmp ugt {i32} {a}, {c(0x7F800000)}")
    over = g.op(f"select {i1} {is_nan}, {i32} {nanv}, {i32} {c(0x7C00)}")
    mag = g.op(f"select {i1} {big}, {i32} {over}, {i32} {fin}")
    return g.op(f"trunc {i32} {g.op(f'or {i32} {mag}, {sign}')} to {i16}")


def narrow_bits(g: _Gen, v: str, llvm_ty: str, n: int = 0) -> str:
    """float -> the i16 bits of `llvm_ty` ("half" or "bfloat")."""
    return f32_to_f16_bits(g, v, n) if llvm_ty == "half" else f32_to_bf16_bits(g, v, n)


def widen_bits(g: _Gen, bits: str, llvm_ty: str, n: int = 0) -> str:
    """The i16 bits of `llvm_ty` ("half" or "bfloat") -> float."""
    return f16_bits_to_f32(g, bits, n) if llvm_ty == "half" else bf16_bits_to_f32(g, bits, n)


def round_to(g: _Gen, v: str, llvm_ty: str, n: int = 0) -> str:
    """float -> the nearest value of `llvm_ty` ("half" / "bfloat"), as a float."""
    return widen_bits(g, narrow_bits(g, v, llvm_ty, n), llvm_ty, n)


__all__ = ["bf16_bits_to_f32", "f32_to_bf16_bits", "f16_bits_to_f32", "f32_to_f16_bits", "narrow_bits", "widen_bits",
           "round_to", "ty", "const"]
