"""codegen of atomic stores (`dsl.atomic_add`): GM[window] += a UB tile (MTE3) or an L0C
accumulator after the FIX pipe's scale / relu / cast (FIX), element by element.

Simulated cores run on several host threads, so every element is one real atomic
read-modify-write, with no runtime symbol on any x86-64 level (no libatomic, no compiler-rt):
  - f32: `atomicrmw fadd` (x86 has no float xadd: LLVM expands it to a `lock cmpxchg` loop);
  - i32: `atomicrmw add` (`lock xadd`), wrapping;
  - f16 / bf16: a `cmpxchg` loop on the element's own 16 bits (`lock cmpxchg` of a word): widen
    the old value to f32, add the f32 addend, round to nearest even (`convert.narrow_bits`), as
    torch adds two f16 / bf16 tensors. Rounding an exact f32 sum once gives the correctly rounded
    f16 / bf16 sum, so the order of additions is the only thing threads can change.
Relaxed (monotonic) ordering: the launch joins its threads before anyone reads GM. A call of the
kernel that runs every core of its launch (`%alone`: one host thread, as small launches are run)
shares GM with no other thread and takes the same adds without the lock, in a loop that
vectorises; its cores add in core order, as the interpreter does, so floats match it bit for bit
(the locked path is ~10x slower per element: a lock-prefixed instruction each). The window is
bounds-checked (`dma_checks`) and the tensor's alignment checked (E405: a misaligned locked access
may straddle a cache line) before the first add; the trace event is the instruction's own.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from compiler.backend.codegen_elem import i64_of, scalar_as
from compiler.backend.codegen_vector import Window, dma_checks
from compiler.backend.convert import narrow_bits, widen_bits
from compiler.ir import Fix, Store
from compiler.passes.place import fractal_pad
from dsl.types import DType, Mem, f32, i32

if TYPE_CHECKING:
    from compiler.backend.gen import Gen

#: adds `v` into GM element `p` of dtype `d`: `atomic_add` or `plain_add`
Add = Callable[["Gen", str, str, DType], None]


def gen_atomic(g: Gen, s: Store) -> None:
    """An atomic Store: checks and event first (as every DMA), then one atomic add per element."""
    assert s.instr is not None and s.atomic, "an atomic store routed by the schedule"
    w = dma_checks(g, s.instr, s.dst, s.src, False, s.loc)
    es = s.dst.dtype.itemsize  # a lock-prefixed access must not straddle its element (or a line)
    addr = g.op(f"ptrtoint ptr {g.gm_ptr(s.dst.arg)} to i64")
    g.guard(g.op(f"icmp eq i64 {g.op(f'and i64 {addr}, {es - 1}')}, 0"), "E405", MISALIGNED.format(
        name=s.dst.name, dtype=s.dst.dtype, es=es), [], MISALIGNED_HINT, s.loc)
    # a call that runs every core of the launch shares GM with no other host thread: the same
    # adds without the lock (the loop vectorises); else one atomic read-modify-write per element
    fast, locked, done = g.label("atomic.alone"), g.label("atomic.shared"), g.label("atomic.done")
    g.cbr("%alone", fast, locked)
    for lab, add in ((fast, plain_add), (locked, atomic_add)):
        g.block(lab)
        g.cache.append({})
        if s.src.mem == Mem.UB:
            _from_ub(g, w, add)
        else:
            assert s.fix is not None, "a store from L0C carries its FIX conversion"
            _from_l0c(g, w, s.fix, add)
        g.cache.pop()
        g.br(done)
    g.block(done)


MISALIGNED = "atomic add into '{name}' ({dtype}): its data is not aligned to its {es}-byte elements"
MISALIGNED_HINT = "pass an aligned copy (x.copy()); numpy and torch allocate aligned tensors"


def _gm_elem(g: Gen, w: Window, r: str, c: str) -> str:
    """Pointer to GM element (r, c) of the checked window."""
    col = g.op(f"mul i64 {c}, {w.step}") if w.step is not None else c
    row = g.op(f"add i64 {w.off}, {g.op(f'mul i64 {r}, {w.stride}')}")
    idx = g.op(f"add i64 {row}, {col}")
    return g.op(f"getelementptr i8, ptr {g.gm_ptr(w.ref.arg)}, i64 {g.op(f'mul i64 {idx}, {w.es}')}")


def _from_ub(g: Gen, w: Window, add: Add) -> None:
    d = w.ref.dtype
    bptr, bstride = g.buf_ptr(w.buf)

    def row(r: str) -> None:
        belems = g.op(f"mul i64 {r}, {bstride}")
        brow = g.op(f"getelementptr i8, ptr {bptr}, i64 {g.op(f'mul i64 {belems}, {d.itemsize}')}")

        def col(c: str) -> None:
            sp = g.op(f"getelementptr i8, ptr {brow}, i64 {g.op(f'mul i64 {c}, {d.itemsize}')}")
            if d.itemsize == 2:  # f16 / bf16: the addend in f32, exactly
                v = widen_bits(g, g.op(f"load i16, ptr {sp}, align 2"), d.llvm)
            else:
                v = g.op(f"load {d.llvm}, ptr {sp}, align {d.itemsize}")
            add(g, _gm_elem(g, w, r, c), v, d)

        g.loop(w.cols, col)

    g.loop(w.rows, row)


def _from_l0c(g: Gen, w: Window, fix: Fix, add: Add) -> None:
    """L0C (NZ: element (i, j) at ((j // 16) * rows_pad + i) * 16 + j % 16) through the FIX
    conversion (`cube.gen_fix`'s rules, one element at a time), then the add."""
    acc, out = w.buf.dtype, fix.dtype
    bptr, _ = g.buf_ptr(w.buf)
    m_pad = i64_of(g, fractal_pad(w.buf)[0])
    scale = scalar_as(g, fix.scale, f32) if fix.scale is not None else None

    def row(r: str) -> None:
        def col(c: str) -> None:
            jb = g.op(f"lshr i64 {c}, 4")
            blk = g.op(f"add i64 {g.op(f'mul i64 {jb}, {m_pad}')}, {r}")
            e = g.op(f"add i64 {g.op(f'shl i64 {blk}, 4')}, {g.op(f'and i64 {c}, 15')}")
            p = g.op(f"getelementptr i8, ptr {bptr}, i64 {g.op(f'shl i64 {e}, 2')}")
            v = _fix_value(g, g.op(f"load {acc.llvm}, ptr {p}, align 4"), acc, out, fix.relu, scale)
            if out.itemsize == 2:  # the FIX pipe's f16 / bf16 result, as the f32 addend
                v = widen_bits(g, narrow_bits(g, v, out.llvm), out.llvm)
            add(g, _gm_elem(g, w, r, c), v, out)

        g.loop(w.cols, col)

    g.loop(w.rows, row)


def _fix_value(g: Gen, v: str, acc: DType, out: DType, relu: bool, scale: str | None) -> str:
    """One accumulator through scale and relu: f32 for float outputs (rounded by the caller), i32
    for i32 ones (`cube.gen_fix`; relu is llvm.maximum / smax against 0)."""
    if acc == i32 and scale is None:
        if relu:
            v = g.op(f"select i1 {g.op(f'icmp sgt i32 {v}, 0')}, i32 {v}, i32 0")
        return v
    if acc == i32:
        v = g.op(f"sitofp i32 {v} to float")
    if scale is not None:
        v = g.op(f"fmul float {v}, {scale}")
    if relu:  # maximum(v, 0): NaN stays NaN, -0 becomes +0
        pos = g.op(f"select i1 {g.op(f'fcmp ogt float {v}, 0.0')}, float {v}, float 0.0")
        v = g.op(f"select i1 {g.op(f'fcmp uno float {v}, 0.0')}, float {v}, float {pos}")
    if out == i32:  # a scaled integer accumulator: rint, then saturate
        g.intrinsic("declare float @llvm.rint.f32(float)")
        g.intrinsic("declare i32 @llvm.fptosi.sat.i32.f32(float)")
        r = g.op(f"call float @llvm.rint.f32(float {v})")
        v = g.op(f"call i32 @llvm.fptosi.sat.i32.f32(float {r})")
    return v


def plain_add(g: Gen, p: str, v: str, d: DType) -> None:
    """*p += v with ordinary loads and stores: the same arithmetic as `atomic_add`."""
    if d.itemsize == 2:
        old = widen_bits(g, g.op(f"load i16, ptr {p}, align 2"), d.llvm)
        new = narrow_bits(g, g.op(f"fadd float {old}, {v}"), d.llvm)
        g.emit(f"store i16 {new}, ptr {p}, align 2")
        return
    old = g.op(f"load {d.llvm}, ptr {p}, align 4")
    op = "fadd" if d == f32 else "add"
    g.emit(f"store {d.llvm} {g.op(f'{op} {d.llvm} {old}, {v}')}, ptr {p}, align 4")


def atomic_add(g: Gen, p: str, v: str, d: DType) -> None:
    """*p += v atomically; v is the f32 addend for float types (f16 / bf16 round the sum), else i32."""
    if d == f32:
        g.emit(f"atomicrmw fadd ptr {p}, float {v} monotonic, align 4")
        return
    if d == i32:
        g.emit(f"atomicrmw add ptr {p}, i32 {v} monotonic, align 4")
        return
    assert d.itemsize == 2 and d.is_float, f"no atomic add for {d}"
    old0 = g.op(f"load atomic i16, ptr {p} monotonic, align 2")
    pre, cas, done = g.label("cas.pre"), g.label("cas"), g.label("cas.done")
    g.br(pre)
    g.block(pre)
    g.br(cas)
    g.block(cas)
    old, seen = g.tmp(), g.tmp()
    g.emit(f"{old} = phi i16 [{old0}, %{pre}], [{seen}, %{cas}]")
    new = narrow_bits(g, g.op(f"fadd float {widen_bits(g, old, d.llvm)}, {v}"), d.llvm)
    pair = g.op(f"cmpxchg ptr {p}, i16 {old}, i16 {new} monotonic monotonic, align 2")
    g.emit(f"{seen} = extractvalue {{ i16, i1 }} {pair}, 0")
    g.cbr(g.op(f"extractvalue {{ i16, i1 }} {pair}, 1"), done, cas)
    g.block(done)
