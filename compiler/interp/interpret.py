"""The reference interpreter: a kernel's Core IR run statement by statement in numpy.

It executes the very Core IR that `codegen` turns into native code, on the same state: GM is the
caller's tensors (zero-copy views, so results land where the native code puts them), on-chip
buffers live in the pooled arenas of `simulator.memory` at the offsets and ping-pong slots the
placement gave. Runtime checks fail with the same `KernelError` text, and a profiled run records
the same trace events, so `simulate` gives the same cycles.

Per-element semantics are `codegen.elem_op` / `cast_value` / `scalar_as`, rule for rule: floats
compute in f32 (scalar operands too) and round to f16/bf16 once per instruction, integers wrap,
x // 0 and x % 0 give 0, max/min/relu propagate NaN and order -0 < +0 (llvm.maximum), float ->
int casts round half to even and saturate. exp, log, tanh, erf, sin, pow, ... run the very
recipes of `compiler.backend.vmath` that the native code inlines (fused multiply-adds where the
target has FMA). Scalar expressions follow `Gen.sval` (i64 wrap-around, IEEE f64). Float sums add
in `codegen_elem.lane_sum`'s fixed order, as the native code does. The one known difference from
the native run:

- bf16 Mmad on AMX hosts: how the tile unit rounds inside a 32-element step of k is not
  documented (it is not the SDM's pseudocode), so the interpreter uses the vdpbf16ps rule (pairs,
  odd element first, subnormals flushed): the f32 accumulators differ in their last bits. Every
  other Mmad is bit-exact: f32/f16 (and bf16 without BF16 instructions) are one f32 fma per k in
  order, i8 is exact in i32.

The cube's memories hold fractals, not rows: L1 and L0C are NZ (16-row fractals column block by
column block), L0A zZ and L0B fractal rows (see `compiler.backend.cube`). `Core.fractals` views a
cube buffer as its grid of fractals; `cube_get` / `cube_put` read and write it as a plain matrix.

Use: VINCI_INTERPRET=1 (or `compiler.config.CONFIG.interpret = True`) sends every launch here.
To step through a kernel, put a breakpoint in `Core.exec`: it stops before every statement, with
`s` the statement, `self.env` the scalars, `self.tile(buf)` a buffer's valid contents and
`self.core` the core. `interpret_core` runs Core IR built by hand or by `pipeline.to_core`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from numpy.lib.stride_tricks import as_strided

from compiler import sexpr as S
from compiler.extents import dyn_broadcasts
from compiler.interp.interpret_atomic import accumulate
from compiler.interp.interpret_gather import indexed, load_scalar
from compiler.interp.interpret_gm_index import gm_indexed
from compiler.interp.interpret_rng import rng_values
from compiler.interp.interpret_rules import (
    ZERO,
    as_i64,
    compute,
    elem,
    fix_values,
    host_isa,
    mmad_values,
    scalar_as,
    seval,
    storage,
    wrap,
)
from compiler.ir import (
    CUBE_TYPE,
    REDUCE,
    RNG,
    Barrier,
    Buf,
    Check,
    Fix,
    Flag,
    For,
    GMGather,
    GMRef,
    GMScatter,
    If,
    Kernel,
    Load,
    LoadScalar,
    Mmad,
    Move,
    Print,
    SetVar,
    Stmt,
    Store,
    VIndexed,
    VOp,
    broadcasts,
)
from compiler.passes.place import fractal_pad
from compiler.sexpr import F64, SExpr
from dsl.errors import KernelError, SourceLoc
from dsl.types import DType, Mem, bf16, f16, f32, i8, i32
from simulator import abi
from simulator.isa import EVENT_DTYPE, EVENT_WORDS, INFO, Instr, Pipe
from simulator.isa import Mem as HwMem

CUBE_MEMS = (Mem.L1, Mem.L0A, Mem.L0B, Mem.L0C)
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

#: how each dtype sits in memory (bool as its byte, so ~ and ^ work on it as the native i8 does)
STORAGE: dict[str, np.dtype] = {**{d.name: d.np for d in (f32, f16, bf16, i32, i8)}, "bool": np.dtype(np.int8)}


def window(flat: np.ndarray, start: int, rows: int, cols: int, stride: int, what: str, step: int = 1) -> np.ndarray:
    """rows x cols elements of the 1-D array `flat` from element `start`, consecutive rows `stride`
    elements apart, consecutive columns `step` apart: a writable view. Empty when rows or cols <= 0
    (the native loops run 0 times)."""
    if rows <= 0 or cols <= 0:
        return np.empty((max(rows, 0), max(cols, 0)), flat.dtype)
    end = start + (rows - 1) * stride + (cols - 1) * step + 1
    if start < 0 or stride < 0 or end > flat.size:
        raise AssertionError(f"{what}: elements [{start}, {end}) with row stride {stride} are outside its "
                             f"memory of {flat.size} elements")
    item = flat.strides[0]
    return as_strided(flat[start:], (rows, cols), (stride * item, step * item))


def gm_array(value: Any, info: Any, d: DType) -> np.ndarray:
    """A GM argument as a flat array of its storage type, sharing memory with the caller's tensor."""
    if isinstance(value, np.ndarray):
        return value.reshape(-1).view(storage(d))
    if info.nbytes == 0:
        return np.empty(0, storage(d))
    raw = (ctypes.c_uint8 * info.nbytes).from_address(info.ptr)  # torch tensors (bf16 has no .numpy())
    return np.ctypeslib.as_array(raw).view(storage(d))


def arg_words(params: Sequence[Any], values: Sequence[Any], shapes: Sequence[tuple[int, ...] | None],
              ptrs: Sequence[int]) -> list[int | float]:
    """The launch argument block, as `Launch._launch` fills it; f64 scalars as Python floats."""
    n = max((p.slot + (2 + p.rank if p.kind == "gm" else 1) for p in params if p.kind != "const"), default=0)
    argv: list[int | float] = [0] * max(n, 1)
    for p, v, shape, ptr in zip(params, values, shapes, ptrs):
        if p.kind == "gm":
            assert shape is not None
            argv[p.slot] = ptr
            argv[p.slot + 1] = int(np.prod(shape))
            for j, s in enumerate(shape):
                argv[p.slot + 2 + j] = int(s)
        elif p.kind == "scalar":
            argv[p.slot] = float(v) if p.scalar_ty == F64 else int(v)
    return argv


# ------------------------------------------------------------------ one core
class Core:
    """The state of one simulated core running Core IR `k`: scalars, GM, on-chip memories, trace.

    `run(body)` executes statements in order; `exec(stmt)` executes one. Errors are the
    `KernelError`s the native code raises, with " (core N)" appended.
    """

    def __init__(self, k: Kernel, argv: Sequence[int | float], gm: dict[int, np.ndarray],
                 mems: dict[Mem, np.ndarray], core: int = 0, ncores: int = 1,
                 locs: list[SourceLoc] | None = None, trace: bool = False):
        self.k, self.argv, self.gm, self.mems = k, list(argv), gm, mems
        self.core, self.ncores = core, ncores
        self.env: dict[str, int | float] = {}
        self.locs = locs if locs is not None else k.locs
        self._loc_ids: dict[SourceLoc, int] = {}
        self.events: list[tuple[int, ...]] | None = [] if trace else None

    # ---------------------------------------------------------- helpers
    def scalar(self, e: SExpr) -> int | float:
        return seval(e, self.env, self.argv, self.core, self.ncores)

    def i64(self, e: SExpr) -> int:
        return as_i64(e, self.scalar(e))

    def loc_id(self, loc: SourceLoc) -> int:
        """Index of `loc` in the plan's table (appended if missing), as `Kernel.loc_id` gives codegen."""
        i = self._loc_ids.get(loc)
        if i is None:
            try:
                i = self.locs.index(loc)
            except ValueError:
                self.locs.append(loc)
                i = len(self.locs) - 1
            self._loc_ids[loc] = i
        return i

    def event(self, instr: Instr, pipe: Pipe, loc: SourceLoc, *vals: int) -> None:
        if self.events is not None:
            words = (int(instr), int(pipe), self.loc_id(loc), *(int(v) for v in vals))
            self.events.append(words + (0,) * (EVENT_WORDS - len(words)))

    def fail(self, code: str, message: str, values: Sequence[int], hint: str, loc: SourceLoc) -> KernelError:
        """The error `dsl.kernel._launch_error` builds from a failed native check."""
        vals = (list(values) + [0] * abi.N_ERR_VALUES)[:abi.N_ERR_VALUES]
        n = message.count("%d")
        try:
            msg = message % tuple(vals[:n])
        except (TypeError, ValueError):
            msg = message
        return KernelError(code, f"{msg} (core {self.core})", loc, hint or None)

    def base(self, b: Buf) -> tuple[np.ndarray, int, int]:
        """(the buffer's memory as a flat array of its dtype, first element of the current slot, row stride)."""
        p = self.k.placement[b.id]
        nbytes, es = self.i64(p.offset), b.dtype.itemsize
        if p.slots > 1 and p.slot_of is not None:
            nbytes = wrap(nbytes + self.i64(p.slot_of) * self.i64(p.slot_bytes))
        assert nbytes % es == 0, f"buffer '{b.name}' at byte {nbytes} is not aligned to its {b.dtype} elements"
        return self.mems[p.mem].view(storage(b.dtype)), nbytes // es, self.i64(p.row_stride)

    def view(self, b: Buf, rows: int, cols: int) -> np.ndarray:
        """rows x cols elements of buffer b (current slot) as a writable view."""
        flat, start, stride = self.base(b)
        return window(flat, start, rows, cols, stride, f"buffer '{b.name}'")

    def tile(self, b: Buf) -> np.ndarray:
        """A copy of b's valid extent, for looking at while stepping."""
        rows, cols = self.i64(b.ext[0]), self.i64(b.ext[1])
        if b.mem in CUBE_MEMS:
            return self.cube_get(b, rows, cols)
        return self.view(b, rows, cols).copy()

    def fractals(self, b: Buf) -> np.ndarray:
        """A cube buffer's current slot as its grid of fractals [block row, block col, row, col] (a
        view): 16 x c0 fractals (c0 = 32 bytes of elements) in L1 and L0A, c0 x 16 in L0B, 16 x 16 in
        L0C; L1 and L0C (NZ) store them column block by column block, L0A and L0B row by row.
        A sub-window (`a1[:, k]`) is its root's grid from its origin on (passes/views.py)."""
        rp, cp = (self.i64(e) for e in fractal_pad(b))
        c0 = 32 // b.dtype.itemsize
        fr, fc = {Mem.L0B: (c0, 16), Mem.L0C: (16, 16)}.get(b.mem, (16, c0))
        if b.parent is not None and b.origin is not None:
            r0, k0 = (self.i64(e) for e in b.origin)
            assert r0 % fr == 0 and k0 % fc == 0, f"window of '{b.root.name}' at ({r0}, {k0}) is inside a fractal"
            return self.fractals(b.root)[r0 // fr: r0 // fr + rp // fr, k0 // fc: k0 // fc + cp // fc]
        flat, start, _ = self.base(b)
        if start < 0 or start + rp * cp > flat.size:
            raise AssertionError(f"buffer '{b.name}': elements [{start}, {start + rp * cp}) are outside its memory "
                                 f"of {flat.size} elements")
        mem = flat[start:start + rp * cp]
        if b.mem in (Mem.L0A, Mem.L0B):
            return mem.reshape(rp // fr, cp // fc, fr, fc)
        return mem.reshape(cp // fc, rp // fr, fr, fc).transpose(1, 0, 2, 3)

    def cube_get(self, b: Buf, rows: int, cols: int) -> np.ndarray:
        """Elements [0, rows) x [0, cols) of a cube buffer as a matrix (a copy)."""
        g = self.fractals(b)
        fr, fc = g.shape[2:]
        nr, nc = -(-max(rows, 0) // fr), -(-max(cols, 0) // fc)
        return g[:nr, :nc].transpose(0, 2, 1, 3).reshape(nr * fr, nc * fc)[:max(rows, 0), :max(cols, 0)]

    def cube_put(self, b: Buf, x: np.ndarray) -> None:
        """Write the matrix x, whole fractals from the top left corner, into a cube buffer."""
        g = self.fractals(b)
        fr, fc = g.shape[2:]
        nr, nc = x.shape[0] // fr, x.shape[1] // fc
        assert x.shape == (nr * fr, nc * fc) and nr <= g.shape[0] and nc <= g.shape[1], \
            f"{x.shape} is not whole fractals of buffer '{b.name}'"
        g[:nr, :nc] = x.reshape(nr, fr, nc, fc).transpose(0, 2, 1, 3)

    # ---------------------------------------------------------- statements
    def run(self, body: Sequence[Stmt]) -> None:
        for s in body:
            self.exec(s)

    def exec(self, s: Stmt) -> None:
        if isinstance(s, SetVar):
            v = self.scalar(s.value)
            self.env[s.name] = float(v) if self.k.scalar_vars.get(s.name, s.value.ty) == F64 else v
        elif isinstance(s, For):
            self.for_(s)
        elif isinstance(s, If):
            self.run(s.then if self.scalar(s.cond) != 0 else s.orelse)
        elif isinstance(s, Check):
            if self.scalar(s.cond) == 0:
                raise self.fail(s.code, s.message, [self.i64(v) for v in s.values], s.hint, s.loc)
        elif isinstance(s, Flag):
            pipe, other = (s.dst, s.src) if s.wait else (s.src, s.dst)
            self.event(Instr.WAIT_FLAG if s.wait else Instr.SET_FLAG, pipe, s.loc, int(other), self.i64(s.event))
        elif isinstance(s, Barrier):
            self.event(Instr.BARRIER, Pipe.ALL, s.loc)
        elif isinstance(s, (GMGather, GMScatter)):
            gm_indexed(self, s)
        elif isinstance(s, Load):
            assert s.instr is not None, "units are assigned by the schedule"
            self.dma(s.instr, s.src, s.dst, True, s.loc)
        elif isinstance(s, Store):
            assert s.instr is not None, "units are assigned by the schedule"
            self.dma(s.instr, s.dst, s.src, False, s.loc, s.fix, s.atomic)
        elif isinstance(s, Move):
            self.move(s)
        elif isinstance(s, VOp):
            with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the point, not warnings
                if s.instr in REDUCE:
                    self.reduce(s)
                elif s.instr == Instr.VTRANSPOSE:
                    self.transpose(s)
                elif s.instr in RNG:
                    self.rng(s)
                else:
                    self.vop(s)
        elif isinstance(s, Print):
            self.print_(s)
        elif isinstance(s, Mmad):
            with np.errstate(all="ignore"):
                self.mmad(s)
        elif isinstance(s, LoadScalar):
            load_scalar(self, s)
        elif isinstance(s, VIndexed):
            indexed(self, s)
        else:
            raise AssertionError(f"interpret: no rule for {type(s).__name__}")

    def for_(self, s: For) -> None:
        start, stop, step = self.scalar(s.start), self.scalar(s.stop), self.scalar(s.step)
        self.env[s.var], self.env[s.it] = start, 0
        while self.env[s.var] < stop if step > 0 else self.env[s.var] > stop:
            self.run(s.body)
            self.env[s.var] = wrap(int(self.env[s.var]) + cast(int, step))  # an i64 loop
            self.env[s.it] = wrap(int(self.env[s.it]) + 1)

    def dma(self, instr: Instr, ref: GMRef, buf: Buf, is_load: bool, loc: SourceLoc, fix: Fix | None = None,
            atomic: bool = False) -> None:
        """codegen.gen_dma: both bounds checks before any element moves, then the event, then the copy.
        Out of UB the copy is the cube's: GM -> L1 lays the window out in NZ, zero-padded to whole
        fractals; L0C -> GM runs the FIX pipe."""
        es = ref.dtype.itemsize  # the GM element: out of L0C it is the FIX output, not the accumulator
        off, rows, cols, stride, numel = (self.i64(e) for e in (ref.offset, ref.rows, ref.cols, ref.stride,
                                                                 ref.numel))
        step = self.i64(ref.step) if ref.step is not None else None
        last = wrap(off + wrap((rows - 1) * stride) + cols) if step is None else \
            wrap(off + wrap((rows - 1) * stride) + wrap((cols - 1) * step) + 1)
        if rows > 0 and cols > 0 and not (off >= 0 and last <= numel):
            verb = "read" if is_load else "write"
            raise self.fail("E404", f"DMA would {verb} elements [%d, %d) of '{ref.name}' ({ref.dtype}), which has "
                            f"%d elements", [off, last, numel],
                            "the window is outside the tensor: check the shapes and the tile indices", loc)
        cap_r, cap_c = (self.i64(e) for e in buf.cap)
        if not (rows <= cap_r and cols <= cap_c):
            raise self.fail("E301", f"a window of %d x %d elements does not fit buffer '{buf.name}' of %d x %d",
                            [rows, cols, cap_r, cap_c], "the buffer is smaller than the window copied into it", loc)
        gm_index = [p.slot for p in self.k.params if p.kind == "gm"].index(ref.arg)  # c: which GM tensor
        if step is None:
            self.event(instr, INFO[instr][1], loc, cols * es, rows, gm_index, off * es, stride * es)
        else:  # a gather/scatter: every element is a burst of its own
            self.event(instr, INFO[instr][1], loc, es, rows * cols, gm_index, off * es, step * es)
        g = window(self.gm[ref.arg], off, rows, cols, stride, f"'{ref.name}'", step or 1)
        if buf.mem != Mem.UB:
            if is_load:  # ND -> NZ: the whole padded buffer is written, zeros around the window
                rp, cp = (self.i64(e) for e in fractal_pad(buf))
                if buf.parent is not None:  # a sub-window: the fractals covering the window (codegen_vector)
                    p = max(16, 32 // buf.dtype.itemsize)
                    rp, cp = -(-rows // p) * p, -(-cols // p) * p
                padded = np.zeros((rp, cp), storage(buf.dtype))
                padded[:g.shape[0], :g.shape[1]] = g
                self.cube_put(buf, padded)
            else:
                assert fix is not None, f"a store from {buf.mem.value} without a FIX conversion"
                with np.errstate(all="ignore"):
                    vals = fix_values(self.cube_get(buf, rows, cols), fix, self.fix_scale(fix))
                    if atomic:  # dsl.atomic_add: GM += the FIX pipe's result
                        accumulate(self, ref, g, vals, loc)
                    else:
                        g[...] = vals
            return
        b = self.view(buf, rows, cols)
        if is_load:
            b[...] = g
        elif atomic:
            accumulate(self, ref, g, b, loc)
        else:
            g[...] = b

    def move(self, s: Move) -> None:
        """codegen.gen_move: rows x cols of the source's extent, row by row."""
        if Mem.UB not in (s.dst.mem, s.src.mem) or s.src.mem == Mem.L0C:
            self.cube_move(s)
            return
        rows, cols = self.i64(s.src.ext[0]), self.i64(s.src.ext[1])
        assert s.instr is not None, "units are assigned by the schedule"
        self.event(s.instr, INFO[s.instr][1], s.loc, cols * s.dst.dtype.itemsize, rows, -1, 0, 0)
        if s.dst.mem == Mem.L1:  # UB rows -> L1 fractals, laid out as the GM -> L1 DMA does
            rp, cp = (self.i64(e) for e in fractal_pad(s.dst))
            padded = np.zeros((rp, cp), storage(s.dst.dtype))
            padded[:rows, :cols] = self.view(s.src, rows, cols)
            self.cube_put(s.dst, padded)
            return
        self.view(s.dst, rows, cols)[...] = self.view(s.src, rows, cols).copy()

    def fix_scale(self, fix: Fix) -> np.float32 | None:
        return None if fix.scale is None else scalar_as(self.scalar(fix.scale), fix.scale.ty, f32)

    def cube_move(self, s: Move) -> None:
        """codegen_cube.gen_cube_move: L0C -> UB through the FIX pipe, or L1 -> L0A / L0B (MTE1), the
        fractals covering the destination's extent, transposing when the L1 buffer holds the
        operand transposed (the padding inside fractals comes along: zeros from the load)."""
        d, src = s.dst, s.src
        assert s.instr is not None, "units are assigned by the schedule"
        info = INFO[s.instr]
        if src.mem == Mem.L0C:
            rows, cols = self.i64(src.ext[0]), self.i64(src.ext[1])
            r0 = 0
            if s.row0 is not None:  # a chunk of rows [r0, r0 + dst rows)
                r0, rows = self.i64(s.row0), self.i64(d.ext[0])
            self.event(s.instr, info[1], s.loc, cols * d.dtype.itemsize, rows, -1, 0, 0)
            assert s.fix is not None, "a move out of L0C without a FIX conversion"
            with np.errstate(all="ignore"):
                acc = self.cube_get(src, r0 + rows, cols)[r0:]
                self.view(d, rows, cols)[...] = fix_values(acc, s.fix, self.fix_scale(s.fix))
            return
        rp, cp = (self.i64(e) for e in fractal_pad(d))
        self.event(s.instr, info[1], s.loc, rp * cp * d.dtype.itemsize, 1, -1, 0, 0)
        c0 = 32 // d.dtype.itemsize
        fr, fc = (16, c0) if d.mem == Mem.L0A else (c0, 16)
        rows = -(-max(self.i64(d.ext[0]), 0) // fr) * fr
        cols = -(-max(self.i64(d.ext[1]), 0) // fc) * fc
        # the native code addresses L1 with the destination's padding; lowering makes it the source's own
        srp = self.i64(fractal_pad(src)[0])
        assert srp == -(-(cp if s.transpose else rp) // 16) * 16, f"L1 buffer '{src.name}' is padded to {srp} rows"
        x = self.cube_get(src, cols, rows).T if s.transpose else self.cube_get(src, rows, cols)
        self.cube_put(d, x)

    def mmad(self, s: Mmad) -> None:
        """codegen_cube.gen_cube_mmad: C = (init ? 0 : C) + A @ B over exactly k terms, for the 16 x 16
        fractals covering m x n (the rows and columns past m and n get the zero padding's products)."""
        m, n, k = (self.i64(e) for e in (s.m, s.n, s.k))
        self.event(Instr.MMAD, Pipe.M, s.loc, m, n, k, int(CUBE_TYPE[s.a.dtype.name]))
        rows, cols, k = -(-max(m, 0) // 16) * 16, -(-max(n, 0) // 16) * 16, max(k, 0)
        acc = storage(s.dst.dtype)
        c = np.zeros((rows, cols), acc) if self.i64(s.init) != 0 else self.cube_get(s.dst, rows, cols)
        a, b = self.cube_get(s.a, rows, k), self.cube_get(s.b, k, cols)
        self.cube_put(s.dst, mmad_values(a, b, c, host_isa()).astype(acc))

    def vop(self, s: VOp) -> None:
        """codegen.gen_vop: one element rule over the destination's extent, sources broadcast by capacity."""
        d = s.dst
        rows, cols = self.i64(d.ext[0]), self.i64(d.ext[1])
        widest = max([d.dtype.itemsize] + [b.dtype.itemsize for b in s.srcs if isinstance(b, Buf)])
        self.event(s.instr, Pipe.V, s.loc, rows * cols, widest, rows)
        xs, types = [], []
        for src in s.srcs:
            if isinstance(src, Buf):
                brow, bcol = broadcasts(src, d)
                drow, dcol = dyn_broadcasts(src, d)  # a runtime extent of 1 broadcasts too (numpy's rule)
                brow = brow or (drow and self.i64(src.ext[0]) == 1)
                bcol = bcol or (dcol and self.i64(src.ext[1]) == 1)
                xs.append(self.view(src, 1 if brow else rows, 1 if bcol else cols).astype(compute(src.dtype)))
                types.append(src.dtype)
            else:
                # a scalar takes the type of the tile it meets: codegen's `ref`, except that codegen
                # types a leading scalar by the destination, which breaks `0.5 < x` (bool dst)
                values = s.srcs[1:] if s.instr == Instr.VSEL else s.srcs
                ref = next((b for b in values if isinstance(b, Buf)), None)
                dt = ref.dtype if ref is not None else d.dtype
                xs.append(scalar_as(self.scalar(src), src.ty, dt))
                types.append(dt)
        out = self.view(d, rows, cols)
        np.copyto(out, elem(s, xs, types), casting="unsafe")  # the store rounds f32 to f16/bf16

    def transpose(self, s: VOp) -> None:
        """codegen_transpose.gen_transpose: dst[c, r] = src[r, c] over the source's extent, bit for bit."""
        src = s.srcs[0]
        assert isinstance(src, Buf)
        rows, cols = (max(self.i64(e), 0) for e in src.ext)
        self.event(s.instr, Pipe.V, s.loc, rows * cols, src.dtype.itemsize, rows)
        self.view(s.dst, cols, rows)[...] = self.view(src, rows, cols).T

    def rng(self, s: VOp) -> None:
        """codegen_rng.gen_rng: Philox words numbered offset + r * stride + c (`interpret_rng`)."""
        d = s.dst
        rows, cols = self.i64(d.ext[0]), self.i64(d.ext[1])
        self.event(s.instr, Pipe.V, s.loc, rows * cols, d.dtype.itemsize, rows)
        seed, offset, stride = (self.i64(e) for e in s.srcs if isinstance(e, SExpr))
        self.view(d, rows, cols)[...] = rng_values(s.instr == Instr.VRAND, seed, offset, stride, rows, cols)

    def reduce(self, s: VOp) -> None:
        """codegen_elem.gen_reduce: 'rows' gives one value per row, 'cols' one per column, 'all' one."""
        src, d = s.srcs[0], s.dst
        assert isinstance(src, Buf)
        dt, t = src.dtype, compute(src.dtype)
        rows, cols = self.i64(src.ext[0]), self.i64(src.ext[1])
        self.event(s.instr, Pipe.V, s.loc, rows * cols, dt.itemsize, rows)
        x = self.view(src, rows, cols).astype(t)
        # one group per output value, reduced in the native loop's order
        assert isinstance(s.arg, str)  # the reduction: "rows", "cols" or "all"
        groups = {"rows": x, "cols": x.T}.get(s.arg, x.reshape(1, -1))
        if s.instr == Instr.VREDUCE_SUM and t == np.float32 and s.arg != "cols":
            per_row = lane_sum(x)  # codegen_elem.lane_sum: 16 lanes then a fixed tree
            if s.arg == "rows":
                vals = per_row
            else:  # row sums added row by row
                vals = np.cumsum(np.concatenate([np.zeros(1, t), per_row]), dtype=t)[-1:]
        elif s.instr == Instr.VREDUCE_SUM:
            init = np.zeros((groups.shape[0], 1), t)
            vals = np.cumsum(np.concatenate([init, groups], axis=1), axis=1, dtype=t)[:, -1]
        else:
            vals = _minmax(groups, s.instr == Instr.VREDUCE_MAX, t)
        n = len(vals)
        # keepdims column (R, 1): one value per row of d; otherwise a row of values
        if d.cap[1] == S.const(1) and d.cap[0] != S.const(1):
            out = self.view(d, n, 1)[:, 0]
        else:
            out = self.view(d, 1, n)[0]
        np.copyto(out, vals, casting="unsafe")

    def print_(self, s: Print) -> None:
        """One line per call, as `dsl.kernel._Printer` writes it for the native code."""
        parts = []
        for it in s.items:
            if isinstance(it, str):
                parts.append(it)
            elif isinstance(it, SExpr):
                v = self.scalar(it)
                parts.append(repr(float(v)) if it.ty == F64 else str(int(v)))
            else:
                flat, start, stride = self.base(it)
                rows, cols = self.i64(it.ext[0]), self.i64(it.ext[1])
                raw = flat[start:start + max(rows, 0) * stride].view(it.dtype.np)
                arr = raw.reshape(max(rows, 0), stride)[:, :cols]
                parts.append(np.array2string(arr.copy(), precision=4, threshold=64))
        sys.stdout.write(f"[core {self.core}] " + " ".join(parts) + "\n")


def lane_sum(x: np.ndarray) -> np.ndarray:
    """Per row of f32 x: codegen_elem.lane_sum's order (16 lanes, each adding its elements in turn, then
    lane l + lane l + 8, l + 4, l + 2, l + 1)."""
    rows, cols = x.shape
    pad = np.zeros((rows, -(-cols // 16) * 16), np.float32)
    pad[:, :cols] = x
    lanes = np.cumsum(np.concatenate([np.zeros((rows, 1, 16), np.float32), pad.reshape(rows, -1, 16)], axis=1),
                      axis=1, dtype=np.float32)[:, -1, :]
    width = 16
    while width > 1:
        half = width // 2
        lanes = (lanes[:, :half] + lanes[:, half:width]).astype(np.float32)
        width = half
    return lanes[:, 0]


def _minmax(g: np.ndarray, is_max: bool, t: np.dtype) -> np.ndarray:
    """Max/min of each row of g, starting from the native loop's initial value (for empty rows)."""
    fl = t == np.float32
    if fl:
        init = t.type(-np.inf if is_max else np.inf)
    else:
        info = np.iinfo(t)
        init = t.type(info.min if is_max else info.max)
    if g.shape[1] == 0:
        return np.full(g.shape[0], init, t)
    r = (g.max if is_max else g.min)(axis=1)
    if fl:  # llvm.maximum/minimum order the zeros: a max is -0 only if every zero is -0
        pos = ((g == 0) & ~np.signbit(g)).any(axis=1)
        neg = ((g == 0) & np.signbit(g)).any(axis=1)
        zero = np.where(pos, ZERO, -ZERO) if is_max else np.where(neg, -ZERO, ZERO)
        r = np.where(r == 0, zero, r).astype(t)
    return r


# ------------------------------------------------------------------ launches
def memories(cfg: Any, n: int, core: int) -> dict[Mem, np.ndarray]:
    from simulator.memory import get_memories

    mems = get_memories(cfg, n)
    return {m: mems.view(HwMem[m.value], core) for m in Mem if m != Mem.GM}


def run_cores(kir: Kernel, argv: Sequence[int | float], gm: dict[int, np.ndarray], cfg: Any, n: int,
              trace: bool = False, locs: list[SourceLoc] | None = None) -> list[np.ndarray] | None:
    """Run cores 0..n-1 of Core IR `kir` in turn. Returns per-core event records when tracing.

    The first failing core raises (the native launch reports the lowest failing core too, but
    the cores after it still run there)."""
    from simulator.launch import contexts

    events = []
    with contexts(cfg, n).lock:  # the on-chip arenas are shared with native launches of (cfg, n)
        for c in range(n):
            core = Core(kir, argv, gm, memories(cfg, n, c), c, n, locs, trace)
            core.run(kir.body)
            if core.events is not None:
                arr = np.array(core.events, dtype=np.int64).reshape(-1, EVENT_WORDS)
                events.append(np.ascontiguousarray(arr).view(EVENT_DTYPE).reshape(-1))
    return events if trace else None


def interpret_core(kir: Kernel, args: Sequence[Any], cfg: Any, n: int = 1, trace: bool = False,
                   locs: list[SourceLoc] | None = None) -> list[np.ndarray] | None:
    """Run Core IR directly (tests that start mid-pipeline): `args` has one entry per `kir.params`
    (numpy arrays for GM, numbers for scalars; entries for Const parameters are ignored)."""
    shapes = [np.shape(a) if p.kind == "gm" else None for p, a in zip(kir.params, args)]
    ptrs = [a.__array_interface__["data"][0] if p.kind == "gm" else 0 for p, a in zip(kir.params, args)]
    argv = arg_words(kir.params, args, shapes, ptrs)
    gm: dict[int, np.ndarray] = {}
    for p, a in zip(kir.params, args):
        if p.kind == "gm":
            assert p.dtype is not None  # a GM parameter always has a dtype
            gm[p.slot] = np.asarray(a).reshape(-1).view(storage(p.dtype))
    return run_cores(kir, argv, gm, cfg, n, trace, locs)


def interpret(kir: Kernel, plan: Any, values: list[Any], infos: list[Any], cfg: Any, n: int,
              trace: bool) -> list[np.ndarray] | None:
    """A launch in the interpreter: `kir` is the Core IR of the specialisation `plan` was compiled
    for; `values`, `infos`, `cfg` and `n` are what the native launch gets. Raises the native
    launch's `KernelError`s; returns the cores' trace events when `trace` (else None)."""
    shapes = [info.shape if info is not None else None for info in infos]
    ptrs = [info.ptr if info is not None else 0 for info in infos]
    argv = arg_words(plan.params, values, shapes, ptrs)
    gm = {p.slot: gm_array(v, info, p.dtype) for p, v, info in zip(plan.params, values, infos) if p.kind == "gm"}
    events = run_cores(kir, argv, gm, cfg, n, trace, plan.locs)
    sys.stdout.flush()
    return events
