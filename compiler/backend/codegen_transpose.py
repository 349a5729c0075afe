"""codegen of VTRANSPOSE: a 2-D UB tile (R x C) into its transpose (C x R), in square blocks.

A block is N rows of N elements loaded as N vectors, transposed in registers by log2(N) rounds of
interleaving shuffles (`shufflevector`, which the backend turns into unpack / permute
instructions), and stored as N rows of the destination. N fills one vector register of the
target, at most 256 bits: 8 x 8 for 4-byte elements (4 x 4 with SSE only), 16 x 16 for 2-byte
ones (8 x 8), 16 x 16 for bytes. The data are moved as integers of the element's width, so every
dtype (f32, i32, f16, bf16, i8, bool) is transposed bit for bit. Blocks on the right and bottom
edges (R or C not a multiple of N) take the same path with masked loads and stores: rows past R
repeat the last row and are never stored, columns past C are neither read nor written.
"""
from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from compiler.backend.codegen_elem import i64_of
from compiler.backend.gen import _add, _ceil, _if, _lane_mask, _mul, _ptr, _rem, _shr
from compiler.host import target
from compiler.ir import Buf, VOp
from simulator.isa import Instr, Pipe

if TYPE_CHECKING:
    from compiler.backend.gen import Gen


def block_size(itemsize: int) -> int:
    """Elements per side of the register block for this element width on the target."""
    bits = min(target().vector_bits, 256)
    return min(16, max(4, bits // (8 * itemsize)))


def transpose_regs(g: Gen, rows: list[str], n: int, it: str) -> list[str]:
    """The n vectors <n x it> of an n x n block -> the n vectors of its transpose. Each round pairs
    row i with row i + n/2 and interleaves them (low halves into 2i, high halves into 2i + 1);
    after log2(n) rounds element (r, c) sits at (c, r)."""
    vt = f"<{n} x {it}>"
    half = n // 2
    lo = "<" + ", ".join(f"i32 {x}" for k in range(half) for x in (k, n + k)) + ">"
    hi = "<" + ", ".join(f"i32 {x}" for k in range(half, n) for x in (k, n + k)) + ">"
    vs = list(rows)
    for _ in range(n.bit_length() - 1):
        out = []
        for i in range(half):
            a, b = vs[i], vs[i + half]
            out.append(g.op(f"shufflevector {vt} {a}, {vt} {b}, <{n} x i32> {lo}"))
            out.append(g.op(f"shufflevector {vt} {a}, {vt} {b}, <{n} x i32> {hi}"))
        vs = out
    return vs


def gen_transpose(g: Gen, s: VOp) -> None:
    """dst[c, r] = src[r, c] over the source's extent R x C (its trace event: R * C elements, R rows)."""
    src, d = s.srcs[0], s.dst
    assert isinstance(src, Buf) and s.instr == Instr.VTRANSPOSE
    es = src.dtype.itemsize
    it, n = f"i{8 * es}", block_size(es)
    vt = f"<{n} x {it}>"
    g.intrinsic("declare i64 @llvm.smax.i64(i64, i64)")
    rows, cols = (g.op(f"call i64 @llvm.smax.i64(i64 {i64_of(g, e)}, i64 0)") for e in src.ext)
    g.event(Instr.VTRANSPOSE, Pipe.V, s.loc, g.op(f"mul i64 {rows}, {cols}"), es, rows)
    sp, ss = g.buf_ptr(src)
    dp, ds = g.buf_ptr(d)

    def at(base: str, stride: str, r: str, c: str) -> str:
        return _ptr(g, base, _mul(g, _add(g, _mul(g, r, stride), c), es))

    def full(bi: str, bj: str) -> None:
        r0, c0 = _mul(g, bi, n), _mul(g, bj, n)
        vs = [g.op(f"load {vt}, ptr {at(sp, ss, _add(g, r0, k), c0)}, align {es}") for k in range(n)]
        for k, v in enumerate(transpose_regs(g, vs, n, it)):
            g.emit(f"store {vt} {v}, ptr {at(dp, ds, _add(g, c0, k), r0)}, align {es}")

    g.intrinsic(f"declare {vt} @llvm.masked.load.v{n}{it}.p0(ptr, <{n} x i1>, {vt})")
    g.intrinsic(f"declare void @llvm.masked.store.v{n}{it}.p0({vt}, ptr, <{n} x i1>)")

    def edge(r0: str, c0: str, nr: str, nc: str) -> None:
        """A block with nr <= n valid rows and nc <= n valid columns (both >= 1)."""
        cmask, rmask = _lane_mask(g, n, nc), _lane_mask(g, n, nr)
        last = g.op(f"sub i64 {nr}, 1")
        vs = []
        for k in range(n):  # rows past nr repeat the last valid one (in bounds; never stored)
            r = _add(g, r0, g.op(f"select i1 {g.op(f'icmp slt i64 {k}, {nr}')}, i64 {k}, i64 {last}"))
            vs.append(g.op(f"call {vt} @llvm.masked.load.v{n}{it}.p0(ptr align {es} {at(sp, ss, r, c0)}, "
                           f"<{n} x i1> {cmask}, {vt} zeroinitializer)"))
        def put(v: str, p: str) -> None:
            g.emit(f"call void @llvm.masked.store.v{n}{it}.p0({vt} {v}, ptr align {es} {p}, <{n} x i1> {rmask})")

        for k, v in enumerate(transpose_regs(g, vs, n, it)):  # destination rows past nc are not stored
            p = at(dp, ds, _add(g, c0, k), r0)
            _if(g, g.op(f"icmp slt i64 {k}, {nc}"), partial(put, v, p))

    fr, fc = _shr(g, rows, n), _shr(g, cols, n)
    g.loop(fr, lambda bi: g.loop(fc, lambda bj: full(bi, bj)))
    rr, rc = _rem(g, rows, n), _rem(g, cols, n)
    r_full, c_full = _mul(g, fr, n), _mul(g, fc, n)
    # the right strip (full-height blocks, rc columns), then the bottom strip with the corner
    _if(g, g.op(f"icmp sgt i64 {rc}, 0"),
        lambda: g.loop(fr, lambda bi: edge(_mul(g, bi, n), c_full, str(n), rc)))

    def bottom(bj: str) -> None:
        c0 = _mul(g, bj, n)
        nc = g.op(f"select i1 {g.op(f'icmp slt i64 {_add(g, c0, n)}, {cols}')}, i64 {n}, "
                  f"i64 {g.op(f'sub i64 {cols}, {c0}')}")
        edge(r_full, c0, rr, nc)

    _if(g, g.op(f"icmp sgt i64 {rr}, 0"), lambda: g.loop(_ceil(g, cols, n), bottom))
