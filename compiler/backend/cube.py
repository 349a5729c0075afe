"""cube: native code for the cube unit (ND->NZ loads, L1->L0 moves, Mmad, Fixpipe).

Every emitter writes LLVM IR loops into a codegen `Gen`; arguments are SSA names (or literals)
of i64 element counts and pointers. Layouts, as element indices (c0 = 32 // itemsize: 8 for
f32, 16 for f16/bf16, 32 for i8, so a fractal row is 32 bytes):

  L1  (NZ)  (r, c) of a rows_pad x cols_pad matrix at ((c // c0) * rows_pad + r) * c0 + c % c0
  L0A (zZ)  (i, j) of M x K at ((i // 16) * (k_pad // c0) + j // c0) * 16 * c0 + (i % 16) * c0 + j % c0
  L0B       (i, j) of K x N at ((i // c0) * (n_pad // 16) + j // 16) * c0 * 16 + (i % c0) * 16 + j % 16
  L0C (NZ)  (i, j) of M x N at ((j // 16) * m_pad + i) * 16 + j % 16   (f32 / i32)

Mmad runs a register-blocked vector micro-kernel generated for the JIT's target
(`cube_micro`): R rows x `cols` columns of C stay in registers over all of k, the tile chosen
from the vector width and register count (AVX-512 8 x 48, AVX2 6 x 16, SSE 5 x 8); fma, or
fmul + fadd without FMA. f16 / bf16 are widened to f32 in scratch first; i8 runs on i16 pairs
(pmaddwd). The path (`isa`, see `host_isa`) adds the AVX-512 dot instructions and AMX:
  "avx512"  bf16: vdpbf16ps on (k, k + 1) pairs, B interleaved into pairs in scratch; i8:
            vpdpwssd on i16 pairs likewise (exact in i32).
  "amx"     bf16 on AMX tiles (16 x 16 x 32 per tdpbf16ps), A and B repacked into tiles in
            scratch. Linux grants AMX state per process on request (arch_prctl), asked once by
            the code itself; if refused, the "generic" path runs instead. Other dtypes as
            "avx512" except bf16's fallback: on these Intel cores vdpbf16ps is slower than
            converting to f32 and using fma.
  "generic" the micro-kernel alone (no BF16 or VNNI instructions).
Every path sums exactly k terms: nothing past k in A or B is read into the result.
"""
from __future__ import annotations

from compiler.backend.convert import narrow_bits
from compiler.backend.cube_amx import mmad_amx
from compiler.backend.cube_micro import ISA_DROPS, MicroTarget, _micro_params, mmad
from compiler.backend.gen import (
    Gen,
    _add,
    _ceil,
    _copy_bytes,
    _if,
    _lane_mask,
    _loop_from,
    _mul,
    _ptr,
    _rem,
    _round,
    _shr,
    _splat,
    _sub,
    c0_of,
    carry_loop,
)
from dsl.types import DType, bf16, f32


# ------------------------------------------------------------------ GM (ND) -> L1 (NZ)
def gen_nd2nz(g: Gen, dst: str, src: str, rows: str, cols: str, src_stride: str, rows_pad: str, cols_pad: str,
              dtype: DType, fill_rows: str | None = None) -> None:
    """Copy a rows x cols ND window (rows `src_stride` elements apart) into an L1 buffer in NZ with
    rows_pad x cols_pad capacity, zero-filling the rest. `fill_rows` (a sub-window of a taller
    buffer: column blocks stay `rows_pad` rows apart) limits the zeros to rows below it.

    Column block by column block, as NZ stores them: each 64-byte line of a source row feeds two
    column blocks, so the inner loop walks down the rows two at a time, reads one line of each
    (every source byte once) and writes two sequential 64-byte runs. (Software prefetch of the
    rows ahead measured slower here: the hardware keeps up.)"""
    es, c0 = dtype.itemsize, c0_of(dtype)
    it = f"i{8 * es}"
    run, line = f"<{c0} x {it}>", f"<{2 * c0} x {it}>"
    full = _shr(g, cols, c0)
    pairs = _shr(g, full, 2)
    tail = _rem(g, cols, c0)
    nblk = _shr(g, cols_pad, c0)
    has_tail = g.op(f"icmp ne i64 {tail}, 0")
    first_zero = _add(g, full, g.op(f"zext i1 {has_tail} to i64"))
    g.intrinsic(f"declare {run} @llvm.masked.load.v{c0}{it}.p0(ptr, <{c0} x i1>, {run})")
    half = [("<" + ", ".join(f"i32 {i + h * c0 + q * 2 * c0}" for q in range(2) for i in range(c0)) + ">")
            for h in (0, 1)]
    rpairs, odd = _shr(g, rows, 2), g.op(f"icmp ne i64 {_rem(g, rows, 2)}, 0")
    row_ptr = lambda r, cb: _ptr(g, src, _mul(g, _add(g, _mul(g, r, src_stride), _mul(g, cb, c0)), es))  # noqa: E731
    out_ptr = lambda r, cb: _ptr(g, dst, _mul(g, _add(g, _mul(g, cb, rows_pad), r), 32))  # noqa: E731

    def two_blocks(cb: str) -> None:
        """Column blocks cb, cb + 1 from one source line per row."""
        def rp(q: str) -> None:
            r = _mul(g, q, 2)
            x = [g.op(f"load {line}, ptr {row_ptr(_add(g, r, h), cb)}, align {es}") for h in (0, 1)]
            for h in (0, 1):
                v = g.op(f"shufflevector {line} {x[0]}, {line} {x[1]}, <{2 * c0} x i32> {half[h]}")
                g.emit(f"store {line} {v}, ptr {out_ptr(r, _add(g, cb, h))}, align 32")

        g.loop(rpairs, rp)

        def last() -> None:
            r = _sub(g, rows, 1)
            x = g.op(f"load {line}, ptr {row_ptr(r, cb)}, align {es}")
            for h in (0, 1):
                idx = "<" + ", ".join(f"i32 {i + h * c0}" for i in range(c0)) + ">"
                v = g.op(f"shufflevector {line} {x}, {line} poison, <{c0} x i32> {idx}")
                g.emit(f"store {run} {v}, ptr {out_ptr(r, _add(g, cb, h))}, align 32")

        _if(g, odd, last)

    def one_block(cb: str, mask: str | None) -> None:
        """Column block cb alone (the odd last full one, or the tail under `mask`)."""
        def load(r: str) -> str:
            p = row_ptr(r, cb)
            if mask is None:
                return g.op(f"load {run}, ptr {p}, align {es}")
            return g.op(f"call {run} @llvm.masked.load.v{c0}{it}.p0(ptr align {es} {p}, <{c0} x i1> {mask}, "
                        f"{run} zeroinitializer)")

        def rp(q: str) -> None:
            r = _mul(g, q, 2)
            x = [load(_add(g, r, h)) for h in (0, 1)]
            cat = "<" + ", ".join(f"i32 {i}" for i in range(2 * c0)) + ">"
            v = g.op(f"shufflevector {run} {x[0]}, {run} {x[1]}, <{2 * c0} x i32> {cat}")
            g.emit(f"store {line} {v}, ptr {out_ptr(r, cb)}, align 32")

        g.loop(rpairs, rp)
        _if(g, odd, lambda: g.emit(f"store {run} {load(_sub(g, rows, 1))}, ptr {out_ptr(_sub(g, rows, 1), cb)}, "
                                    "align 32"))

    g.loop(pairs, lambda q: two_blocks(_mul(g, q, 2)))
    _if(g, g.op(f"icmp ne i64 {_rem(g, full, 2)}, 0"), lambda: one_block(_sub(g, full, 1), None))
    _if(g, has_tail, lambda: one_block(full, _lane_mask(g, c0, tail)))

    # zeros: rows [rows, rows_pad) of the filled column blocks, whole column blocks past them
    fill = fill_rows or rows_pad

    def zero(cb: str, r0: str) -> None:
        base = out_ptr(r0, cb)
        g.loop(_sub(g, fill, r0),
               lambda r: g.emit(f"store {run} zeroinitializer, ptr {_ptr(g, base, _mul(g, r, 32))}, align 32"))

    _if(g, g.op(f"icmp slt i64 {rows}, {fill}"), lambda: g.loop(first_zero, lambda cb: zero(cb, rows)))
    _loop_from(g, first_zero, nblk, lambda cb: zero(cb, "0"))


def gen_nd2l0(g: Gen, dst: str, src: str, rows: str, cols: str, src_stride: str, rows_pad: str, cols_pad: str,
              dtype: DType, is_a: bool) -> None:
    """GM (ND) -> L0A / L0B directly: what `gen_nd2nz` then `gen_l1_to_l0a` / `gen_l1_to_l0b` (not
    transposing) leave in the L0 buffer, in one pass: the fractals covering rows x cols, zeros
    inside them past the window. L0A fractals are 16 rows of c0 elements, L0B's c0 rows of 16;
    either way a source row feeds one fractal row per fractal column, 512 bytes apart."""
    es, c0 = dtype.itemsize, c0_of(dtype)
    it = f"i{8 * es}"
    fr, w = (16, c0) if is_a else (c0, 16)  # fractal rows, elements per fractal row
    vt = f"<{w} x {it}>"
    per = _shr(g, cols_pad, w)  # fractals per row of fractals
    full, tail = _shr(g, cols, w), _rem(g, cols, w)
    chunks = _ceil(g, cols, w)
    mask = _lane_mask(g, w, tail)
    g.intrinsic(f"declare {vt} @llvm.masked.load.v{w}{it}.p0(ptr, <{w} x i1>, {vt})")
    align = min(32, w * es)

    def out(r: str, q: str) -> str:
        f = _add(g, _mul(g, _shr(g, r, fr), per), q)
        return _ptr(g, dst, _add(g, _mul(g, f, 512), _mul(g, _rem(g, r, fr), w * es)))

    has_tail = g.op(f"icmp ne i64 {tail}, 0")
    wide = f"<{2 * w} x {it}>"
    cat = "<" + ", ".join(f"i32 {i}" for i in range(2 * w)) + ">"

    def rows_at(r: str, nr: int) -> None:
        """Rows r .. r + nr: with nr = 2 (r even) their fractal rows are one 64-byte store."""
        sps = [_ptr(g, src, _mul(g, _mul(g, _add(g, r, h), src_stride), es)) for h in range(nr)]

        def put(q: str, vs: list[str]) -> None:
            v = vs[0] if nr == 1 else g.op(f"shufflevector {vt} {vs[0]}, {vt} {vs[1]}, <{2 * w} x i32> {cat}")
            g.emit(f"store {vt if nr == 1 else wide} {v}, ptr {out(r, q)}, align {align}")

        g.loop(full, lambda q: put(q, [g.op(f"load {vt}, ptr {_ptr(g, sp, _mul(g, q, w * es))}, align {es}")
                                       for sp in sps]))
        _if(g, has_tail, lambda: put(full, [g.op(
            f"call {vt} @llvm.masked.load.v{w}{it}.p0(ptr align {es} {_ptr(g, sp, _mul(g, full, w * es))}, "
            f"<{w} x i1> {mask}, {vt} zeroinitializer)") for sp in sps]))

    if w * es == 32:  # two rows of a fractal fill a cache line
        g.loop(_shr(g, rows, 2), lambda p: rows_at(_mul(g, p, 2), 2))
        _if(g, g.op(f"icmp ne i64 {_rem(g, rows, 2)}, 0"), lambda: rows_at(_sub(g, rows, 1), 1))
    else:
        g.loop(rows, lambda r: rows_at(r, 1))
    _loop_from(g, rows, _round(g, rows, fr),
               lambda r: g.loop(chunks, lambda q: g.emit(f"store {vt} zeroinitializer, ptr {out(r, q)}, align {align}")))


# ------------------------------------------------------------------ L1 -> L0A / L0B
def _concat(g: Gen, vs: list[str], n: int, it: str) -> str:
    """One vector from equal vectors of n elements (a power-of-two count), pairwise."""
    while len(vs) > 1:
        idx = "<" + ", ".join(f"i32 {i}" for i in range(2 * n)) + ">"
        vs = [g.op(f"shufflevector <{n} x {it}> {vs[i]}, <{n} x {it}> {vs[i + 1]}, <{2 * n} x i32> {idx}")
              for i in range(0, len(vs), 2)]
        n *= 2
    return vs[0]


def _transpose(g: Gen, dst: str, pieces: list[str], piece: int, src_rows: int, es: int) -> None:
    """Load `pieces` (each `piece` elements; together src_rows rows of equal length, row-major)
    and store the transpose, contiguous, at dst."""
    it = f"i{8 * es}"
    vs = [g.op(f"load <{piece} x {it}>, ptr {p}, align {min(32, piece * es)}") for p in pieces]
    n = piece * len(pieces)
    cols = n // src_rows
    idx = "<" + ", ".join(f"i32 {r * cols + c}" for c in range(cols) for r in range(src_rows)) + ">"
    t = g.op(f"shufflevector <{n} x {it}> {_concat(g, vs, piece, it)}, <{n} x {it}> poison, <{n} x i32> {idx}")
    g.emit(f"store <{n} x {it}> {t}, ptr {dst}, align 32")


def gen_l1_to_l0a(g: Gen, dst: str, src: str, m: str, k: str, m_pad: str, k_pad: str, dtype: DType,
                  transpose: bool, src_rows_pad: str | None = None) -> None:
    """L1 (NZ) -> L0A (zZ), the fractals covering m x k. The L1 buffer holds M x K with rows_pad =
    m_pad, or with `transpose` K x M with rows_pad = k_pad rounded to 16, and A is its transpose;
    `src_rows_pad` overrides that when the L1 buffer is taller than the L0A one."""
    es, c0 = dtype.itemsize, c0_of(dtype)
    kb_pad = _shr(g, k_pad, c0)
    rows_pad = src_rows_pad or (_round(g, k_pad, 16) if transpose else m_pad)

    def frac(mb: str, kb: str) -> None:
        d = _ptr(g, dst, _mul(g, _add(g, _mul(g, mb, kb_pad), kb), 512))
        if not transpose:
            s = _ptr(g, src, _mul(g, _add(g, _mul(g, kb, rows_pad), _mul(g, mb, 16)), 32))
            _copy_bytes(g, d, s, 512)
            return
        # A(i, j) = L1(j, i): L1 row j holds the 16 i of this fractal in runs of min(16, c0)
        p = min(16, c0)
        pieces = []
        for jj in range(c0):
            j = _add(g, _mul(g, kb, c0), jj)
            for q in range(16 // p):
                i0 = _add(g, _mul(g, mb, 16), q * p)
                e = _add(g, _mul(g, _add(g, _mul(g, _shr(g, i0, c0), rows_pad), j), c0), _rem(g, i0, c0))
                pieces.append(_ptr(g, src, _mul(g, e, es)))
        _transpose(g, d, pieces, p, c0, es)

    g.loop(_ceil(g, m, 16), lambda mb: g.loop(_ceil(g, k, c0), lambda kb: frac(mb, kb)))


def gen_l1_to_l0b(g: Gen, dst: str, src: str, k: str, n: str, k_pad: str, n_pad: str, dtype: DType,
                  transpose: bool, src_rows_pad: str | None = None) -> None:
    """L1 (NZ) -> L0B, the fractals covering k x n. The L1 buffer holds K x N with rows_pad = k_pad
    rounded to 16, or with `transpose` N x K with rows_pad = n_pad; `src_rows_pad` overrides."""
    es, c0 = dtype.itemsize, c0_of(dtype)
    nb_pad = _shr(g, n_pad, 16)
    p = min(16, c0)
    rows_pad = src_rows_pad or (n_pad if transpose else _round(g, k_pad, 16))

    def frac(kb: str, nb: str) -> None:
        d = _ptr(g, dst, _mul(g, _add(g, _mul(g, kb, nb_pad), nb), 512))
        if transpose:  # B(k, n) = L1(n, k): the fractal's 16 rows n are one contiguous 512-byte block
            s = _ptr(g, src, _mul(g, _add(g, _mul(g, kb, rows_pad), _mul(g, nb, 16)), 32))
            _transpose(g, d, [s], 16 * c0, 16, es)
            return
        t = f"<{p} x i{8 * es}>"
        vals = []  # the fractal in order: row kk holds 16 n from L1 row k, in runs of min(16, c0)
        for kk in range(c0):
            kr_row = _add(g, _mul(g, kb, c0), kk)
            for q in range(16 // p):
                n0 = _add(g, _mul(g, nb, 16), q * p)
                e = _add(g, _mul(g, _add(g, _mul(g, _shr(g, n0, c0), rows_pad), kr_row), c0), _rem(g, n0, c0))
                vals.append(g.op(f"load {t}, ptr {_ptr(g, src, _mul(g, e, es))}, align {p * es}"))
        per = 64 // (p * es)  # pieces per 64-byte store
        for j in range(0, len(vals), per):
            v = _concat(g, vals[j: j + per], p, f"i{8 * es}")
            g.emit(f"store <{per * p} x i{8 * es}> {v}, ptr {_ptr(g, d, j * p * es)}, align 32")

    g.loop(_ceil(g, k, c0), lambda kb: g.loop(_ceil(g, n, 16), lambda nb: frac(kb, nb)))


# ------------------------------------------------------------------ Mmad
ISAS = ("generic", "avx512", "amx")  # each needs the host features of the ones before it


def host_isa() -> str:
    """The Mmad path kernels compile for: the best the JIT target has ("amx", "avx512" or
    "generic"; VINCI_HOST_ISA caps the target), or a lesser one asked for with VINCI_CUBE_ISA."""
    from compiler.config import CONFIG
    from compiler.host import target

    t = target()
    best = "generic"
    if t.has("avx512f", "avx512bf16", "avx512vnni"):
        best = "avx512"
        if t.has("amx-tile", "amx-bf16"):
            best = "amx"
    want = CONFIG.cube_isa or best
    if want not in ISAS:
        raise ValueError(f"VINCI_CUBE_ISA={want!r}: expected one of {', '.join(ISAS)}")
    if ISAS.index(want) > ISAS.index(best):
        raise ValueError(f"VINCI_CUBE_ISA={want!r}: the best Mmad path of target {t.name} is {best!r}")
    return want


def gen_mmad(g: Gen, c: str, a: str, b: str, m: str, n: str, k: str, m_pad: str, k_pad: str, n_pad: str,
             in_dtype: DType, init: str, scratch: str, isa: str | None = None,
             target: MicroTarget | None = None) -> None:
    """C (L0C) = (init ? 0 : C) + A (L0A) @ B (L0B) over exactly k terms, for the 16x16 fractals
    covering m x n (C's other rows / columns of those fractals get values too). `init` is an i64
    (0 / 1) known at run time. `scratch`: host memory, at least 4 * (m_pad * k_pad + k_pad * n_pad)
    bytes, 32-byte aligned (64 is faster), not shared with another core running at the same time.
    `isa` overrides the host's choice of path, `target` the vector ISA the micro-kernel is
    generated for (tests: a lower level than the host's)."""
    isa = isa or host_isa()
    t = (target or _micro_params()).without(*ISA_DROPS[isa])
    if in_dtype == bf16 and isa == "amx":
        mmad_amx(g, c, a, b, m, n, k, m_pad, k_pad, n_pad, init, scratch,
                 lambda: gen_mmad(g, c, a, b, m, n, k, m_pad, k_pad, n_pad, in_dtype, init, scratch, "generic",
                                  target))
        return
    mmad(g, c, a, b, m, n, k, m_pad, k_pad, n_pad, in_dtype, init, scratch, t)


# ------------------------------------------------------------------ Fixpipe: L0C -> ND
def gen_fix(g: Gen, dst: str, src: str, rows: str, cols: str, dst_stride: str, m_pad: str, acc_dtype: DType,
            out_dtype: DType, relu: bool, scale: str | None) -> None:
    """dst[i, j] = out(relu(C[i, j] * scale)) for i < rows, j < cols; C in L0C (NZ). Float results
    round to nearest even; integer results round to nearest even and saturate."""
    at = acc_dtype.llvm
    ot = out_dtype.llvm
    oes = out_dtype.itemsize
    vin = f"<16 x {at}>"
    # f16 / bf16 results are stored as their i16 bits: vectors of `half` / `bfloat` are legalised
    # through f32 and back with compiler-rt helpers on hosts without the instructions
    vout = f"<16 x {'i16' if oes == 2 else ot}>"
    sc = _splat(g, 16, "float", scale) if scale is not None else None

    def sat_i8(x: str) -> str:
        lo = _vcall(g, "smax", "v16i32", "<16 x i32>", x, _splat(g, 16, "i32", "-128"))
        hi = _vcall(g, "smin", "v16i32", "<16 x i32>", lo, _splat(g, 16, "i32", "127"))
        return g.op(f"trunc <16 x i32> {hi} to {vout}")

    def convert(v: str) -> str:
        if at == "i32" and sc is None:
            if relu:
                v = _vcall(g, "smax", "v16i32", vin, v, "zeroinitializer")
            if out_dtype.is_float:  # through f32 (as torch's casts): no runtime helper on any host
                f = g.op(f"sitofp {vin} {v} to <16 x float>")
                return f if out_dtype == f32 else narrow_bits(g, f, ot, 16)
            return v if ot == "i32" else sat_i8(v)
        if at == "i32":
            v = g.op(f"sitofp {vin} {v} to <16 x float>")
        if sc is not None:
            v = g.op(f"fmul <16 x float> {v}, {sc}")
        if relu:
            v = _vcall(g, "maximum", "v16f32", "<16 x float>", v, "zeroinitializer")
        if out_dtype == f32:
            return v
        if out_dtype.is_float:  # bf16 with integer RNE (keeps subnormals, quiets NaNs, as torch); f16 by F16C or the same
            return narrow_bits(g, v, ot, 16)
        g.intrinsic("declare <16 x float> @llvm.rint.v16f32(<16 x float>)")
        g.intrinsic("declare <16 x i32> @llvm.fptosi.sat.v16i32.v16f32(<16 x float>)")
        r = g.op(f"call <16 x float> @llvm.rint.v16f32(<16 x float> {v})")
        x = g.op(f"call <16 x i32> @llvm.fptosi.sat.v16i32.v16f32(<16 x float> {r})")
        return x if ot == "i32" else sat_i8(x)

    full = _shr(g, cols, 16)
    tail = _rem(g, cols, 16)
    mask = _lane_mask(g, 16, tail)
    vname = {"float": "v16f32", "half": "v16i16", "bfloat": "v16i16", "i8": "v16i8", "i32": "v16i32"}[ot]
    g.intrinsic(f"declare void @llvm.masked.store.{vname}.p0({vout}, ptr, <16 x i1>)")

    def row(i: str) -> None:
        drow = _ptr(g, dst, _mul(g, _mul(g, i, dst_stride), oes))

        def load(jb: str) -> str:
            return g.op(f"load {vin}, ptr {_ptr(g, src, _mul(g, _add(g, _mul(g, jb, m_pad), i), 64))}, align 32")

        def blk(jb: str) -> None:
            v = convert(load(jb))
            g.emit(f"store {vout} {v}, ptr {_ptr(g, drow, _mul(g, jb, 16 * oes))}, align {oes}")

        g.loop(full, blk)

        def part() -> None:
            v = convert(load(full))
            p = _ptr(g, drow, _mul(g, full, 16 * oes))
            g.emit(f"call void @llvm.masked.store.{vname}.p0({vout} {v}, ptr align {oes} {p}, <16 x i1> {mask})")

        _if(g, g.op(f"icmp ne i64 {tail}, 0"), part)

    g.loop(rows, row)


def _vcall(g: Gen, name: str, suffix: str, vt: str, x: str, y: str) -> str:
    g.intrinsic(f"declare {vt} @llvm.{name}.{suffix}({vt}, {vt})")
    return g.op(f"call {vt} @llvm.{name}.{suffix}({vt} {x}, {vt} {y})")


# ------------------------------------------------------------------ standalone functions
ATTRS = '"no-builtins" "prefer-vector-width"="512" "min-legal-vector-width"="512"'


def module(g: Gen, name: str, params: str) -> str:
    """Wrap the lines emitted into `g` as `define void @name(params)`: a whole module (tests, bench)."""
    body = "\n".join(g.lines)
    return ("\n".join(sorted(g.decls)) + f"\n\ndefine void @{name}({params}) #0 {{\nentry:\n{body}\n  ret void\n}}\n"
            f"\nattributes #0 = {{ {ATTRS} }}\n")


__all__ = ["c0_of", "gen_nd2nz", "gen_nd2l0", "gen_l1_to_l0a", "gen_l1_to_l0b", "gen_mmad", "gen_fix", "host_isa", "module",
           "carry_loop"]
