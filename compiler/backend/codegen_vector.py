"""codegen of the UB side of a core: DMA between GM and on-chip buffers (`gen_dma`, bounds-checked
before any byte moves), on-chip moves through UB (`gen_move`) and the vector instructions
(`gen_vop`), each one loop nest over its window or its destination's extent.

Each is split in two: the part every issue of the instruction does (its checks and its trace
event: `dma_checks`, `vop_event`) and the part that moves or computes data (`dma_data`,
`vop_data`), so that `codegen_stream` can issue a run of them and do their data work in one pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compiler.backend import cube
from compiler.backend.codegen_cube import gen_cube_move
from compiler.backend.codegen_elem import elem_op, ety, gen_reduce, i64_of, load_elem, scalar_as, store_elem
from compiler.backend.codegen_rng import gen_rng
from compiler.backend.codegen_transpose import gen_transpose
from compiler.backend.gen import _round
from compiler.extents import dyn_broadcasts
from compiler.ir import REDUCE, RNG, Buf, Fix, GMRef, Move, VOp, broadcasts
from compiler.passes.place import fractal_pad
from compiler.passes.views import rows_pad
from dsl.errors import SourceLoc
from dsl.types import DType, Mem, f32
from simulator.isa import INFO, Instr, Pipe

if TYPE_CHECKING:
    from compiler.backend.gen import Gen


@dataclass
class Window:
    """A DMA's GM window once its checks have passed: i64 SSA values, in elements."""

    ref: GMRef
    buf: Buf
    is_load: bool
    off: str
    rows: str
    cols: str
    stride: str
    numel: str
    last: str  # one past the last element touched
    step: str | None

    @property
    def es(self) -> int:
        return self.ref.dtype.itemsize


def gen_dma(g: Gen, instr: Instr, ref: GMRef, buf: Buf, is_load: bool, loc: SourceLoc, fix: Fix | None = None) -> None:
    """GM <-> on-chip window copy, bounds-checked before any byte moves."""
    dma_data(g, dma_checks(g, instr, ref, buf, is_load, loc), fix)


def dma_checks(g: Gen, instr: Instr, ref: GMRef, buf: Buf, is_load: bool, loc: SourceLoc) -> Window:
    """The DMA's bounds checks (window inside the tensor, inside the buffer) and its trace event."""
    es = ref.dtype.itemsize
    off, rows, cols, stride, numel = (i64_of(g, e) for e in (ref.offset, ref.rows, ref.cols, ref.stride, ref.numel))
    # safety: the window stays inside the tensor, and inside the buffer's capacity
    nz = g.op(f"and i1 {g.op(f'icmp sgt i64 {rows}, 0')}, {g.op(f'icmp sgt i64 {cols}, 0')}")
    rm1 = g.op(f"sub i64 {rows}, 1")
    span = g.op(f"mul i64 {rm1}, {stride}")
    step = i64_of(g, ref.step) if ref.step is not None else None
    if step is None:
        last = g.op(f"add i64 {g.op(f'add i64 {off}, {span}')}, {cols}")
    else:  # a stepped window: the last element is (cols - 1) steps into the last row
        cspan = g.op(f"mul i64 {g.op(f'sub i64 {cols}, 1')}, {step}")
        both = g.op(f"add i64 {span}, {cspan}")
        last = g.op(f"add i64 {g.op(f'add i64 {off}, {both}')}, 1")
    inside = g.op(f"and i1 {g.op(f'icmp sge i64 {off}, 0')}, {g.op(f'icmp sle i64 {last}, {numel}')}")
    ok = g.op(f"or i1 {g.op(f'xor i1 {nz}, true')}, {inside}")
    verb = "read" if is_load else "write"
    g.guard(ok, "E404", f"DMA would {verb} elements [%d, %d) of '{ref.name}' ({ref.dtype}), which has %d elements",
            [off, last, numel], "the window is outside the tensor: check the shapes and the tile indices", loc)
    cap_r, cap_c = (i64_of(g, e) for e in buf.cap)
    fits = g.op(f"and i1 {g.op(f'icmp sle i64 {rows}, {cap_r}')}, {g.op(f'icmp sle i64 {cols}, {cap_c}')}")
    g.guard(fits, "E301", f"a window of %d x %d elements does not fit buffer '{buf.name}' of %d x %d",
            [rows, cols, cap_r, cap_c], "the buffer is smaller than the window copied into it", loc)
    gm_index = [p.slot for p in g.k.params if p.kind == "gm"].index(ref.arg)
    if step is None:
        g.event(instr, INFO[instr][1], loc, g.op(f"mul i64 {cols}, {es}"), rows, str(gm_index),
                g.op(f"mul i64 {off}, {es}"), g.op(f"mul i64 {stride}, {es}"))
    else:  # a gather/scatter: every element is a burst of its own
        g.event(instr, INFO[instr][1], loc, es, g.op(f"mul i64 {rows}, {cols}"), str(gm_index),
                g.op(f"mul i64 {off}, {es}"), g.op(f"mul i64 {step}, {es}"))
    return Window(ref, buf, is_load, off, rows, cols, stride, numel, last, step)


def dma_data(g: Gen, w: Window, fix: Fix | None = None) -> None:
    """The bytes of a checked DMA: GM <-> UB row by row, GM <-> L1/L0C through the cube's layouts."""
    ref, buf, is_load, es = w.ref, w.buf, w.is_load, w.es
    off, rows, cols, stride, numel, last, step = w.off, w.rows, w.cols, w.stride, w.numel, w.last, w.step
    if buf.mem != Mem.UB:
        gp = g.op(f"getelementptr i8, ptr {g.gm_ptr(ref.arg)}, i64 {g.op(f'mul i64 {off}, {es}')}")
        bptr, _ = g.buf_ptr(buf)
        rp, cp = (i64_of(g, e) for e in fractal_pad(buf))
        mv = g.forward.get(buf.id) if is_load else None
        if mv is not None:  # GM -> L1 -> L0A/L0B forwarded: the L0 layout written straight from GM
            dp, _ = g.buf_ptr(mv.dst)
            drp, dcp = (i64_of(g, e) for e in fractal_pad(mv.dst))
            cube.gen_nd2l0(g, dp, gp, rows, cols, stride, drp, dcp, buf.dtype, mv.dst.mem == Mem.L0A)
        elif is_load and buf.parent is not None:  # GM -> a sub-window of an L1 panel (passes/views.py)
            p = max(16, 32 // buf.dtype.itemsize)
            cube.gen_nd2nz(g, bptr, gp, rows, cols, stride, i64_of(g, rows_pad(buf)), _round(g, cols, p),
                           buf.dtype, _round(g, rows, p))
        elif is_load:  # GM -> L1, ND -> NZ
            cube.gen_nd2nz(g, bptr, gp, rows, cols, stride, rp, cp, buf.dtype)
        else:  # L0C -> GM on the FIX pipe
            assert fix is not None, f"a store from {buf.mem.value} without a FIX conversion"
            cube.gen_fix(g, gp, bptr, rows, cols, stride, rp, buf.dtype, fix.dtype, fix.relu,
                         None if fix.scale is None else scalar_as(g, fix.scale, f32))
        return
    bptr, bstride = g.buf_ptr(buf)
    gm = g.gm_ptr(ref.arg)
    # read-ahead distance for loads: one window (the next tile of a streaming loop), in elements
    ahead = g.op(f"sub i64 {last}, {off}")
    big = None if is_load else g.op(f"icmp sge i64 {g.op(f'mul i64 {numel}, {es}')}, {STREAM_BYTES}")

    def row(r: str) -> None:
        gmo = g.op(f"add i64 {off}, {g.op(f'mul i64 {r}, {stride}')}")
        gp = g.op(f"getelementptr i8, ptr {gm}, i64 {g.op(f'mul i64 {gmo}, {es}')}")
        belems = g.op(f"mul i64 {r}, {bstride}")
        bp = g.op(f"getelementptr i8, ptr {bptr}, i64 {g.op(f'mul i64 {belems}, {es}')}")
        if step is not None:
            strided_copy(g, bp, gp, cols, step, buf.dtype, is_load)
            return
        src, dst = (gp, bp) if is_load else (bp, gp)
        copy_elems(g, dst, src, cols, buf.dtype, ahead if is_load else None, None if is_load else big)

    g.loop(rows, row)




def copy_elems(g: Gen, dst: str, src: str, count: str, d: DType, ahead: str | None = None,
               streaming: str | None = None) -> None:
    """Copy `count` elements as 4-byte words plus a byte tail: a vectorised loop written out (not
    memcpy: the functions carry "no-builtins", and libc's `rep movsb` leaves the destination out of
    cache just before a vector instruction reads it). With `ahead` (elements) the window that
    follows is prefetched first, like a DMA engine's read-ahead; with `streaming` (an i1) the bytes
    are stored non-temporally (`nt_copy`). Neither changes a result."""
    nbytes = g.op(f"mul i64 {count}, {d.itemsize}")
    words = g.op(f"lshr i64 {nbytes}, 2")

    def word(i: str) -> None:
        v = g.op(f"load i32, ptr {g.op(f'getelementptr i32, ptr {src}, i64 {i}')}, align 1")
        g.emit(f"store i32 {v}, ptr {g.op(f'getelementptr i32, ptr {dst}, i64 {i}')}, align 1")

    def byte(i: str) -> None:
        j = g.op(f"add i64 {g.op(f'shl i64 {words}, 2')}, {i}")
        v = g.op(f"load i8, ptr {g.op(f'getelementptr i8, ptr {src}, i64 {j}')}, align 1")
        g.emit(f"store i8 {v}, ptr {g.op(f'getelementptr i8, ptr {dst}, i64 {j}')}, align 1")

    if ahead is not None:
        prefetch(g, g.op(f"getelementptr i8, ptr {src}, i64 {g.op(f'mul i64 {ahead}, {d.itemsize}')}"), nbytes)
    if streaming is None:
        g.loop(words, word)
        g.loop(g.op(f"and i64 {nbytes}, 3"), byte)
        return
    # a tensor far larger than the host caches: nothing reads it back soon, and a non-temporal
    # store does not read each line before writing it
    lab_nt, lab_c, lab_done = g.label("nt"), g.label("cached"), g.label("copied")
    g.cbr(streaming, lab_nt, lab_c)
    g.block(lab_nt)
    g.cache.append({})
    nt_copy(g, dst, src, nbytes)
    g.cache.pop()
    g.br(lab_done)
    g.block(lab_c)
    g.cache.append({})
    g.loop(words, word)
    g.loop(g.op(f"and i64 {nbytes}, 3"), byte)
    g.cache.pop()
    g.br(lab_done)
    g.block(lab_done)


def prefetch(g: Gen, p: str, nbytes: str) -> None:
    """Prefetch the cache lines of `nbytes` at `p` (a DMA engine's read-ahead; never faults)."""
    g.intrinsic("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")

    def line(c: str) -> None:
        q = g.op(f"getelementptr i8, ptr {p}, i64 {g.op(f'mul i64 {c}, 64')}")
        g.emit(f"call void @llvm.prefetch.p0(ptr {q}, i32 0, i32 3, i32 1)")

    g.loop(g.op(f"lshr i64 {g.op(f'add i64 {nbytes}, 63')}, 6"), line)


def nt_copy(g: Gen, dst: str, src: str, nbytes: str) -> None:
    """Copy `nbytes` with non-temporal stores of 64 aligned bytes (a plain head up to dst's first
    64-byte boundary, a plain tail). Written as vectors: the loop vectoriser will not make a
    non-temporal store of an unaligned scalar one (and on hosts without SSE4A not at all)."""
    g.decls.add("!900 = !{i32 1}")

    def byte(at: str) -> Any:
        def one(i: str) -> None:
            j = g.op(f"add i64 {at}, {i}")
            v = g.op(f"load i8, ptr {g.op(f'getelementptr i8, ptr {src}, i64 {j}')}, align 1")
            g.emit(f"store i8 {v}, ptr {g.op(f'getelementptr i8, ptr {dst}, i64 {j}')}, align 1")
        return one

    addr = g.op(f"ptrtoint ptr {dst} to i64")
    mis = g.op(f"and i64 {g.op(f'sub i64 0, {addr}')}, 63")
    head = g.op(f"select i1 {g.op(f'icmp ult i64 {mis}, {nbytes}')}, i64 {mis}, i64 {nbytes}")
    g.loop(head, byte("0"))
    rest = g.op(f"sub i64 {nbytes}, {head}")

    def line(i: str) -> None:
        o = g.op(f"add i64 {head}, {g.op(f'shl i64 {i}, 6')}")
        v = g.op(f"load <16 x i32>, ptr {g.op(f'getelementptr i8, ptr {src}, i64 {o}')}, align 1")
        g.emit(f"store <16 x i32> {v}, ptr {g.op(f'getelementptr i8, ptr {dst}, i64 {o}')}, align 64, !nontemporal !900")

    g.loop(g.op(f"lshr i64 {rest}, 6"), line)
    tail = g.op(f"and i64 {rest}, 63")
    g.loop(tail, byte(g.op(f"sub i64 {nbytes}, {tail}")))


STREAM_BYTES = 1 << 25  # GM tensors this large are written with non-temporal stores

def strided_copy(g: Gen, ub: str, gm: str, count: str, step: str, d: DType, is_load: bool) -> None:
    """count elements between a UB row and GM elements `step` apart (gather on load, scatter on store)."""
    t = {1: "i8", 2: "i16", 4: "i32"}[d.itemsize]

    def one(i: str) -> None:
        pg = g.op(f"getelementptr {t}, ptr {gm}, i64 {g.op(f'mul i64 {i}, {step}')}")
        pu = g.op(f"getelementptr {t}, ptr {ub}, i64 {i}")
        src, dst = (pg, pu) if is_load else (pu, pg)
        v = g.op(f"load {t}, ptr {src}, align {d.itemsize}")
        g.emit(f"store {t} {v}, ptr {dst}, align {d.itemsize}")

    g.loop(count, one)


def gen_move(g: Gen, s: Move) -> None:
    if Mem.UB not in (s.dst.mem, s.src.mem) or s.src.mem == Mem.L0C:
        gen_cube_move(g, s)
        return
    d, src = s.dst, s.src
    es = d.dtype.itemsize
    rows, cols = i64_of(g, src.ext[0]), i64_of(g, src.ext[1])
    assert s.instr is not None, "units are assigned by the schedule"
    g.event(s.instr, INFO[s.instr][1], s.loc, g.op(f"mul i64 {cols}, {es}"), rows, -1, 0, 0)
    if d.mem == Mem.L1:  # UB (ND rows) -> L1 (NZ fractals), as the GM -> L1 DMA lays it out
        dp, _ = g.buf_ptr(d)
        sp, ss = g.buf_ptr(src)
        rp, cp = (i64_of(g, e) for e in fractal_pad(d))
        cube.gen_nd2nz(g, dp, sp, rows, cols, ss, rp, cp, d.dtype)
        return
    dp, ds = g.buf_ptr(d)
    sp, ss = g.buf_ptr(src)
    nbytes = g.op(f"mul i64 {cols}, {es}")
    g.intrinsic("declare void @llvm.memmove.p0.p0.i64(ptr, ptr, i64, i1)")

    def row(r: str) -> None:
        ae = g.op(f"mul i64 {r}, {ds}")
        a = g.op(f"getelementptr i8, ptr {dp}, i64 {g.op(f'mul i64 {ae}, {es}')}")
        be = g.op(f"mul i64 {r}, {ss}")
        b = g.op(f"getelementptr i8, ptr {sp}, i64 {g.op(f'mul i64 {be}, {es}')}")
        g.emit(f"call void @llvm.memmove.p0.p0.i64(ptr align 1 {a}, ptr align 1 {b}, i64 {nbytes}, i1 false)")

    g.loop(rows, row)


def gen_vop(g: Gen, s: VOp) -> None:
    if s.instr in REDUCE:
        gen_reduce(g, s)
        return
    if s.instr == Instr.VTRANSPOSE:
        gen_transpose(g, s)
        return
    if s.instr in RNG:
        gen_rng(g, s)
        return
    vop_event(g, s)
    vop_data(g, s)


def widest(s: VOp) -> int:
    """Bytes of the widest element an instruction touches (its trace event's b word)."""
    return max([s.dst.dtype.itemsize] + [b.dtype.itemsize for b in s.srcs if isinstance(b, Buf)])


def vop_event(g: Gen, s: VOp) -> None:
    """The trace event of an elementwise vector instruction (not a reduction)."""
    rows, cols = i64_of(g, s.dst.ext[0]), i64_of(g, s.dst.ext[1])
    g.event(s.instr, Pipe.V, s.loc, g.op(f"mul i64 {rows}, {cols}"), widest(s), rows)


def scalar_type(s: VOp, d: DType) -> DType:
    """The dtype a scalar operand of `s` is converted to: its Buf operands' (VSEL: the values')."""
    pool = s.srcs[1:] if s.instr == Instr.VSEL else s.srcs
    ref = next((b for b in pool if isinstance(b, Buf)), None)
    return ref.dtype if isinstance(ref, Buf) else d


def vop_data(g: Gen, s: VOp) -> None:
    """One elementwise instruction over its destination's extent, sources broadcast by capacity, and
    (`compiler.extents.dyn_broadcasts`) by their runtime extents: a source whose runtime extent may be
    1 reads row 0 when its rows are 1 (a select per row), and the column loop comes in one version per
    combination of such sources whose columns are 1 at run time, picked once per instruction (the
    version where none is: the plain loop)."""
    d = s.dst
    dyn = [dyn_broadcasts(x, d) if isinstance(x, Buf) else (False, False) for x in s.srcs]
    if not any(r or c for r, c in dyn):
        _vop_loops(g, s, {}, frozenset())
        return
    rows, cols = i64_of(g, d.ext[0]), i64_of(g, d.ext[1])

    def flag(x: Buf, i: int, n: str) -> str:  # its extent is 1 where the destination's is not
        one = g.op(f"icmp eq i64 {i64_of(g, x.ext[i])}, 1")
        return g.op(f"and i1 {one}, {g.op(f'icmp ne i64 {n}, 1')}")

    rowflags = {j: flag(x, 0, rows) for j, x in enumerate(s.srcs) if isinstance(x, Buf) and dyn[j][0]}
    colflags = [(j, flag(x, 1, cols)) for j, x in enumerate(s.srcs) if isinstance(x, Buf) and dyn[j][1]]
    if not colflags:
        _vop_loops(g, s, rowflags, frozenset())
        return
    which = "0"
    for bit, (_, f) in enumerate(colflags):
        wide = g.op(f"zext i1 {f} to i64")
        which = g.op(f"or i64 {which}, {g.op(f'shl i64 {wide}, {bit}')}")
    labels = [g.label("bc") for _ in range(1 << len(colflags))]
    done = g.label("bcdone")
    g.emit(f"switch i64 {which}, label %{labels[0]} [" + " ".join(f"i64 {m}, label %{lab}" for m, lab in
                                                                 enumerate(labels) if m) + "]")
    for m, lab in enumerate(labels):
        g.block(lab)
        g.cache.append({})
        _vop_loops(g, s, rowflags, frozenset(j for bit, (j, _) in enumerate(colflags) if m >> bit & 1))
        g.cache.pop()
        g.br(done)
    g.block(done)


def _vop_loops(g: Gen, s: VOp, rowflags: dict[int, str], colbc: frozenset[int]) -> None:
    """vop_data's loops: sources in `colbc` read one element per row; sources in `rowflags` read row 0
    where their flag is set."""
    d = s.dst
    rows, cols = i64_of(g, d.ext[0]), i64_of(g, d.ext[1])
    dptr, dstride = g.buf_ptr(d)
    ops: list[tuple[Any, ...]] = []  # per source: ('buf', ptr, stride, brow, bcol, dtype) | ('scalar', value, dtype)
    types = []
    for j, src in enumerate(s.srcs):
        if isinstance(src, Buf):
            p, st = g.buf_ptr(src)
            br, bc = broadcasts(src, d)
            ops.append(("buf", p, st, rowflags.get(j, br), bc or j in colbc, src.dtype))
            types.append(src.dtype)
        else:
            dt = scalar_type(s, d.dtype)
            ops.append(("scalar", scalar_as(g, src, dt), dt))
            types.append(dt)

    def row(r: str) -> None:
        drow = g.op(f"getelementptr {ety(d.dtype)}, ptr {dptr}, i64 {g.op(f'mul i64 {r}, {dstride}')}")
        rowp: list[str | None] = []  # per source: its row pointer (None for scalars)
        for o in ops:
            if o[0] == "buf":
                _, p, st, br, bc, dt = o
                rr = ("0" if br else r) if isinstance(br, bool) else g.op(f"select i1 {br}, i64 0, i64 {r}")
                rowp.append(g.op(f"getelementptr {ety(dt)}, ptr {p}, i64 {g.op(f'mul i64 {rr}, {st}')}"))
            else:
                rowp.append(None)
        # column-broadcast operands are loaded once per row
        pre = {}
        for j, o in enumerate(ops):
            if o[0] == "buf" and o[4]:
                rp = rowp[j]
                assert rp is not None
                pre[j] = load_elem(g, o[5], rp)

        def col(c: str) -> None:
            xs = []
            for j, o in enumerate(ops):
                if o[0] == "scalar":
                    xs.append(o[1])
                elif j in pre:
                    xs.append(pre[j])
                else:
                    xs.append(load_elem(g, o[5], g.op(f"getelementptr {ety(o[5])}, ptr {rowp[j]}, i64 {c}")))
            v = elem_op(g, s, xs, types)
            store_elem(g, d.dtype, g.op(f"getelementptr {ety(d.dtype)}, ptr {drow}, i64 {c}"), v)

        g.loop(cols, col)

    g.loop(rows, row)
