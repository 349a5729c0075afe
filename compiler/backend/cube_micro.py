"""The Mmad vector micro-kernel, generated for the target's vector ISA from one description.

`MicroTarget` says what the target offers (f32 lanes per vector register, how many vector
registers, fma, f16c, the AVX-512 dot instructions); `choose_tile` picks the micro-tile, R rows x
`cols` columns of C, whose accumulators stay in registers over all of k. Each k step loads the
tile's B vectors once and broadcasts one A value per row; the budget is

    R * nv accumulators + nv B vectors + 2 broadcasts (+ 1 product without fma) <= vregs

(nv = cols / lanes), and among the tiles that fit the one with the most multiply-adds per loaded
vector, R * nv / (R + nv), wins (ties: R dividing 16, then fewer rows). Rows are capped at 8: more
buys little and costs per-row A pointers and row tails. That gives, for f32 multiply-add:

    AVX-512 (16 lanes, 32 regs, fma)   8 x 48   24 accumulators + 3 B + broadcast
    AVX2    (8 lanes, 16 regs, fma)    6 x 16   12 + 2 + 2
    SSE4.2  (4 lanes, 16 regs)         5 x 8    10 + 2 + 2 + product (fmul + fadd)

C fractals are 16 columns wide: `cols` is a multiple of 16 (whole fractals) or divides 16 (part of
one). A's rows come in fractals of 16: when R does not divide 16 a tile may straddle two, so each
row has its own A pointer, and the last rows of the tile count that 16 * (row fractals) leaves
over R run as a shorter tile.

What the kernel multiplies (`_Spec`): f32 (fma, or fmul + fadd); f16 / bf16 widened in scratch
first into the f32 layouts, so the f32 kernel runs on them (compiler.backend.convert: vcvtph2ps with F16C,
integer operations without); bf16 pairs on vdpbf16ps (AVX-512 BF16); i8 widened to i16 pairs on
vpdpwssd (AVX-512 VNNI) or pmaddwd + add (any level; exact in i32). Every path sums exactly k
terms: nothing past k in A or B is read into the result.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from compiler.backend.convert import widen_bits
from compiler.backend.gen import Gen, _add, _ceil, _if, _mul, _ptr, _rem, _shr, _splat, _sub, c0_of, carry_loop
from dsl.types import DType, bf16, f16, f32, i8

MAX_ROWS = 8  # see the module docstring
MAX_FRACTALS = 3  # columns of a tile: at most 48 (a tile's B, k x cols, stays in L1 while A streams)


@dataclass(frozen=True)
class MicroTarget:
    """What the micro-kernel may use: `lanes` f32 per vector register (4 SSE, 8 AVX2, 16 AVX-512),
    `vregs` vector registers (16 or 32), and the instructions it asks about by LLVM feature name."""

    lanes: int
    vregs: int
    features: frozenset[str]

    def has(self, *names: str) -> bool:
        return all(n in self.features for n in names)

    @staticmethod
    def of(features: Iterable[str]) -> MicroTarget:
        """From LLVM feature names without '+' (what the JIT compiles for)."""
        fs = frozenset(features)
        wide = "avx512f" in fs
        return MicroTarget(16 if wide else 8 if "avx" in fs else 4, 32 if wide else 16, fs)

    def without(self, *names: str) -> MicroTarget:
        return MicroTarget(self.lanes, self.vregs, self.features - set(names))


# the features an ISA name of `cube.host_isa` leaves out ("generic": no dot instructions, no AMX)
ISA_DROPS = {"generic": ("avx512bf16", "avx512vnni", "amx-tile", "amx-bf16"), "avx512": ("amx-tile", "amx-bf16"),
             "amx": ()}


def _micro_params() -> MicroTarget:
    """The target the micro-kernel is generated for: the one the JIT compiles for (VINCI_HOST_ISA)."""
    from compiler.host import target

    return MicroTarget.of(target().enabled)


def describe() -> str:
    """The f32 micro-kernel the JIT's target gets, for reports: "6x16 of <8 x float>, fma"."""
    t = _micro_params()
    fma = t.has("fma") or t.has("avx512f")
    tile = choose_tile(t.lanes, t.vregs, fma)
    return f"{tile.rows}x{tile.cols} of <{t.lanes} x float>, {'fma' if fma else 'fmul + fadd'}"


def fused_f32() -> bool:
    """Whether the f32 micro-kernel rounds each multiply-add once (fma) on the JIT's target, or
    twice (fmul, fadd: x86-64-v2). The reference interpreter asks, to agree bit for bit."""
    t = _micro_params()
    return t.has("fma") or t.has("avx512f")


@dataclass(frozen=True)
class Tile:
    rows: int  # R
    cols: int  # columns of C: a multiple of 16, or a divisor of 16
    lanes: int  # accumulator lanes per vector

    @property
    def nv(self) -> int:
        return self.cols // self.lanes


def choose_tile(lanes: int, vregs: int, fused: bool) -> Tile:
    """The micro-tile for `lanes`-wide vectors and `vregs` registers; `fused`: the multiply-add is
    one instruction (fma, vdpbf16ps, vpdpwssd), else the product needs a register of its own."""
    best: tuple[tuple[float, bool, int], Tile] | None = None
    for nv in range(1, 16):
        cols = nv * lanes
        if not (cols % 16 == 0 and cols <= 16 * MAX_FRACTALS or 16 % cols == 0):
            continue
        rows = min(MAX_ROWS, (vregs - nv - 2 - (0 if fused else 1)) // nv)
        if rows < 1:
            continue
        score = (rows * nv / (rows + nv), 16 % rows == 0, -rows)
        if best is None or score > best[0]:
            best = (score, Tile(rows, cols, lanes))
    assert best is not None
    return best[1]


class _Spec:
    """What the micro-kernel multiplies: accumulator element `acc` (float / i32), `ks` k values per
    step (1: multiply-add; 2: pair dot on 2-byte elements), `c0` k values per fractal row, `eb`
    bytes per element of the A and B it reads (at `a`, `b`), `dot` the pair instruction ("bf16":
    vdpbf16ps; "i16": vpdpwssd with `vnni`, else pmaddwd + add), `fma`: float multiply-add in one
    instruction; `tile` the micro-tile for target `t`."""

    def __init__(self, acc: str, ks: int, c0: int, eb: int, a: str, b: str, t: MicroTarget, dot: str = "") -> None:
        self.acc, self.ks, self.c0, self.eb, self.a, self.b, self.dot = acc, ks, c0, eb, a, b, dot
        self.frac = 16 * c0 * eb  # bytes per fractal of A and of B
        self.fma = t.has("fma") or t.has("avx512f")  # (as fused_f32)
        self.vnni = dot == "i16" and t.has("avx512vnni") and t.lanes == 16  # vpdpwssd
        # fused: one instruction per multiply-add, else the product needs a register
        fused = dot == "bf16" or self.vnni or (acc == "float" and self.fma)
        # pmaddwd + add: LLVM reassociates a chain of integer adds (an unrolled fractal of k steps
        # per accumulator) into trees that keep every B vector live; one step per loop trip instead
        self.unroll = not (dot == "i16" and not self.vnni)
        self.tile = choose_tile(t.lanes, t.vregs, fused)
        w = t.lanes
        self.vt = f"<{w} x {acc}>"
        # B as the instruction takes it: pairs of 2-byte elements for the dot products
        self.bt = {"bf16": f"<{2 * w} x bfloat>", "i16": f"<{2 * w} x i16>"}.get(dot, self.vt)


def mmad(g: Gen, c: str, a: str, b: str, m: str, n: str, k: str, m_pad: str, k_pad: str, n_pad: str,
         in_dtype: DType, init: str, scratch: str, t: MicroTarget) -> None:
    """`cube.gen_mmad` on the vector units of target `t` (see there)."""
    c0 = c0_of(in_dtype)
    mb_n, nb_n = _ceil(g, m, 16), _ceil(g, n, 16)
    kb_pad, nb_pad = _shr(g, k_pad, c0), _shr(g, n_pad, 16)
    kb_n = _ceil(g, k, c0)
    zero = g.op(f"icmp ne i64 {init}, 0")
    sa = scratch
    sb = _ptr(g, scratch, _mul(g, _mul(g, m_pad, k_pad), 4))  # B' after room for a 4-byte A'
    if in_dtype == f32:
        spec = _Spec("float", 1, c0, 4, a, b, t)
    elif in_dtype == bf16 and t.has("avx512bf16") and t.lanes == 16:
        _pair_b(g, sb, b, k, kb_n, nb_n, nb_pad, c0, "bfloat", None)
        spec = _Spec("float", 2, c0, 2, a, sb, t, dot="bf16")
    elif in_dtype in (f16, bf16):
        # widened into the f32 layouts (8 k per fractal row): the f32 kernel runs on them as they are
        _widen(g, sa, a, mb_n, kb_n, kb_pad, in_dtype.llvm, True)
        _widen(g, sb, b, kb_n, nb_n, nb_pad, in_dtype.llvm, False)
        kb_pad = _mul(g, kb_pad, 2)
        spec = _Spec("float", 1, c0_of(f32), 4, sa, sb, t)
    elif in_dtype == i8:
        _convert(g, sa, a, mb_n, kb_n, kb_pad, 16 * c0, "i8", "i16")
        _pair_b(g, sb, b, k, kb_n, nb_n, nb_pad, c0, "i16", "sext")
        spec = _Spec("i32", 2, c0, 2, sa, sb, t, dot="i16")
    else:
        raise AssertionError(f"mmad on {in_dtype}")
    _micro_all(g, spec, c, m_pad, mb_n, nb_n, k, kb_pad, nb_pad, zero)


# ------------------------------------------------------------------ operand preparation
def _bytes(t: str) -> int:
    return {"i8": 1, "i16": 2, "half": 2, "bfloat": 2, "i32": 4, "float": 4}[t]


def _convert(g: Gen, dst: str, src: str, outer: str, inner: str, outer_pad: str, frac: int, st: str,
             dt: str) -> None:
    """Sign-extend element-wise, same indices, the fractals (o, i) for o < outer, i < inner of a buffer
    whose fractal (o, i) is number o * outer_pad + i: (mb, kb) of L0A or (kb, nb) of L0B."""
    ses, des = _bytes(st), _bytes(dt)

    def run(o: str) -> None:
        e0 = _mul(g, _mul(g, o, outer_pad), frac)
        _convert_run(g, _ptr(g, dst, _mul(g, e0, des)), _ptr(g, src, _mul(g, e0, ses)), _mul(g, inner, frac),
                     st, dt, "sext")

    g.loop(outer, run)


def _convert_run(g: Gen, dst: str, src: str, count: str, st: str, dt: str, how: str) -> None:
    """dst[e] = how(src[e]) for e < count (a multiple of 16), 16 at a time."""
    def one(v: str) -> None:
        x = g.op(f"load <16 x {st}>, ptr {_ptr(g, src, _mul(g, v, 16 * _bytes(st)))}, align 32")
        y = g.op(f"{how} <16 x {st}> {x} to <16 x {dt}>")
        g.emit(f"store <16 x {dt}> {y}, ptr {_ptr(g, dst, _mul(g, v, 16 * _bytes(dt)))}, align 32")

    g.loop(_shr(g, count, 16), one)


def _widen(g: Gen, dst: str, src: str, outer: str, inner: str, outer_pad: str, st: str, is_a: bool) -> None:
    """f16 / bf16 fractals (o, i), o < outer, i < inner, numbered o * outer_pad + i, of L0A (16 rows x
    16 k) or L0B (16 k x 16 n) -> f32 in the f32 layout of the same operand (fractals of 8 k, so
    fractal f becomes 2f and 2f + 1 of L0A, and (2 kb, nb), (2 kb + 1, nb) of L0B), exactly and with
    no runtime helper on any level (compiler.backend.convert)."""
    lo, hi = ("<" + ", ".join(f"i32 {i + h}" for i in range(8)) + ">" for h in (0, 8))

    def rows(s: str, d: str, n: int) -> None:
        """n source rows of 16 from s; L0A: row r to d + 32 r (first 8 k) and d + 512 + 32 r, L0B:
        row r to d + 64 r. A loop, not unrolled: the software f16 path is long (x86-64-v2)."""
        def row(r: str) -> None:
            x = g.op(f"load <16 x {st}>, ptr {_ptr(g, s, _mul(g, r, 32))}, align 32")
            y = widen_bits(g, g.op(f"bitcast <16 x {st}> {x} to <16 x i16>"), st, 16)
            if not is_a:
                g.emit(f"store <16 x float> {y}, ptr {_ptr(g, d, _mul(g, r, 64))}, align 32")
                return
            for h, idx in ((0, lo), (1, hi)):
                v = g.op(f"shufflevector <16 x float> {y}, <16 x float> poison, <8 x i32> {idx}")
                g.emit(f"store <8 x float> {v}, ptr {_ptr(g, d, _add(g, 512 * h, _mul(g, r, 32)))}, align 32")

        g.loop(str(n), row)

    def frac(o: str, i: str) -> None:
        f = _add(g, _mul(g, o, outer_pad), i)
        s = _ptr(g, src, _mul(g, f, 512))
        if is_a:  # fractal f -> 2f, 2f + 1
            rows(s, _ptr(g, dst, _mul(g, f, 1024)), 16)
            return
        d0 = _ptr(g, dst, _mul(g, _add(g, _mul(g, _mul(g, o, 2), outer_pad), i), 512))  # (2 kb, nb)
        rows(s, d0, 8)
        rows(_ptr(g, s, 256), _ptr(g, d0, _mul(g, outer_pad, 512)), 8)  # k rows 8-15 -> (2 kb + 1, nb)

    g.loop(outer, lambda o: g.loop(inner, lambda i: frac(o, i)))


def _pair_b(g: Gen, dst: str, src: str, k: str, kb_n: str, nb_n: str, nb_pad: str, c0: int, dt: str,
            how: str | None) -> None:
    """L0B fractals (c0 k-rows x 16 n) -> pair-interleaved fractals of 2-byte elements, same order:
    row p holds (B[2p][n], B[2p+1][n]) for the 16 n (the vdpbf16ps / vpdpwssd / pmaddwd operand),
    64 bytes. Rows k and beyond are zero, so a pair dot never reads past k."""
    st = "i8" if how == "sext" else dt
    ses = _bytes(st)
    iota = "<" + ", ".join(f"i32 {i // 2 + 16 * (i % 2)}" for i in range(32)) + ">"  # interleave two rows

    def frac(kb: str, nb: str) -> None:
        f = _add(g, _mul(g, kb, nb_pad), nb)
        s = _ptr(g, src, _mul(g, f, 16 * c0 * ses))
        d = _ptr(g, dst, _mul(g, f, 16 * c0 * 2))
        k0 = _mul(g, kb, c0)
        left = _sub(g, k, k0)  # rows < left are real
        for p in range(c0 // 2):
            rows = []
            for h in (0, 1):
                kk = 2 * p + h
                x = g.op(f"load <16 x {st}>, ptr {_ptr(g, s, kk * 16 * ses)}, align {16 * ses if ses < 2 else 32}")
                if how:
                    x = g.op(f"{how} <16 x {st}> {x} to <16 x {dt}>")
                live = g.op(f"icmp sgt i64 {left}, {kk}")
                rows.append(g.op(f"select i1 {live}, <16 x {dt}> {x}, <16 x {dt}> zeroinitializer"))
            v = g.op(f"shufflevector <16 x {dt}> {rows[0]}, <16 x {dt}> {rows[1]}, <32 x i32> {iota}")
            g.emit(f"store <32 x {dt}> {v}, ptr {_ptr(g, d, p * 64)}, align 32")

    g.loop(kb_n, lambda kb: g.loop(nb_n, lambda nb: frac(kb, nb)))


# ------------------------------------------------------------------ the micro-kernel
def _micro_all(g: Gen, s: _Spec, c: str, m_pad: str, mb_n: str, nb_n: str, k: str, kb_pad: str, nb_pad: str,
               zero: str) -> None:
    """Walk C in micro-tiles, column blocks outside (a block's B, k x cols, stays in L1 while A
    streams past), rows inside; the last column and row blocks may be narrower / shorter."""
    R, cols = s.tile.rows, s.tile.cols

    def rows_of(nb0: str, sub: object, nf: int) -> None:
        def tile(i0: str, rr: int) -> None:
            _micro(g, s, c, m_pad, i0, rr, nb0, sub, nf, k, kb_pad, nb_pad, zero)

        if 16 % R == 0:
            g.loop(_mul(g, mb_n, 16 // R), lambda t: tile(_mul(g, t, R), R))
            return
        total = _mul(g, mb_n, 16)
        full = g.op(f"udiv i64 {total}, {R}")
        g.loop(full, lambda t: tile(_mul(g, t, R), R))
        i0 = _mul(g, full, R)
        left = _sub(g, total, i0)
        for rr in sorted({16 * x % R for x in range(R)} - {0}):  # the row counts 16 * mb_n can leave
            _if(g, g.op(f"icmp eq i64 {left}, {rr}"), lambda rr=rr: tile(i0, rr))  # type: ignore[misc]

    if cols < 16:  # column blocks inside each fractal
        per = 16 // cols
        g.loop(_mul(g, nb_n, per), lambda u: rows_of(_shr(g, u, per), _mul(g, _rem(g, u, per), 4 * cols), 1))
        return
    NF = cols // 16
    groups = _shr(g, nb_n, NF) if NF & (NF - 1) == 0 else g.op(f"udiv i64 {nb_n}, {NF}")
    g.loop(groups, lambda q: rows_of(_mul(g, q, NF), 0, NF))
    left = _sub(g, nb_n, _mul(g, groups, NF))
    for nf in range(1, NF):
        _if(g, g.op(f"icmp eq i64 {left}, {nf}"), lambda nf=nf: rows_of(_sub(g, nb_n, nf), 0, nf))  # type: ignore[misc]


def _micro(g: Gen, s: _Spec, c: str, m_pad: str, i0: str, rr: int, nb0: str, sub: object, nf: int, k: str,
           kb_pad: str, nb_pad: str, zero: str) -> None:
    """One micro-tile over all of k: rows i0 .. i0 + rr of C, and columns from `sub` bytes into
    fractal nb0: `nf` whole fractals, or (cols < 16) tile.cols columns of one."""
    w, vt = s.tile.lanes, s.vt
    width = min(16, s.tile.cols)  # columns per fractal in the tile
    # the tile's vectors: (fractal, byte offset in a 64-byte fractal row); a C / B column is 4 bytes
    vecs = [(f, j * 4 * w) for f in range(nf) for j in range(width // w)]
    cbase = _ptr(g, c, sub)
    def crow(r: int, f: int) -> str:  # C row i0 + r of fractal nb0 + f
        return _ptr(g, cbase, _mul(g, _add(g, _add(g, _mul(g, _add(g, nb0, f), m_pad), i0), r), 64))

    cptr = [[_ptr(g, crow(r, f), o) for f, o in vecs] for r in range(rr)]
    acc0 = []
    for r in range(rr):
        for p in cptr[r]:
            v = g.op(f"load {vt}, ptr {p}, align {min(32, 4 * w)}")
            acc0.append(g.op(f"select i1 {zero}, {vt} zeroinitializer, {vt} {v}"))
    # A: row i's fractal-row at (i // 16) * kb_pad * frac + (i % 16) * c0 * eb, then + kb * frac per fractal
    # step; B: fractal nb at nb * frac, + kb * nb_pad * frac per step, a fractal row (one k step) 64 bytes
    if 16 % s.tile.rows == 0:  # a tile never straddles two row fractals
        a0 = _ptr(g, s.a, _add(g, _mul(g, _mul(g, _shr(g, i0, 16), kb_pad), s.frac),
                               _mul(g, _rem(g, i0, 16), s.c0 * s.eb)))
        arows: list[str] = [_ptr(g, a0, r * s.c0 * s.eb) for r in range(rr)]
    else:
        arows = []
        for r in range(rr):
            i = _add(g, i0, r)
            arows.append(_ptr(g, s.a, _add(g, _mul(g, _mul(g, _shr(g, i, 16), kb_pad), s.frac),
                                           _mul(g, _rem(g, i, 16), s.c0 * s.eb))))
    b0 = _ptr(g, s.b, _add(g, _mul(g, nb0, s.frac), sub))
    bstep = _mul(g, nb_pad, s.frac)  # B bytes per kb

    def steps(accs: list[str], kb: str, offs: list[object], mask_last: str | None = None) -> list[str]:
        accs = list(accs)
        akb = _mul(g, kb, s.frac)
        bkb = _ptr(g, b0, _mul(g, kb, bstep))
        for j, off in enumerate(offs):  # off: element offset of this step's k within the fractal row
            brow = _ptr(g, bkb, _mul(g, off, 64 // s.ks))
            bv = [g.op(f"load {s.bt}, ptr {_ptr(g, brow, f * s.frac + o)}, align {min(32, 4 * w)}")
                  for f, o in vecs]
            for r in range(rr):
                ap = _ptr(g, arows[r], _add(g, akb, _mul(g, off, s.eb)))
                av = _bcast(g, s, ap, mask_last if j == len(offs) - 1 else None)
                for q in range(len(vecs)):
                    accs[r * len(vecs) + q] = _fma(g, s, accs[r * len(vecs) + q], av, bv[q])
        return accs

    kf = _shr(g, k, s.c0)
    def fractal(kb: str, xs: list[str]) -> list[str]:
        if s.unroll:
            return steps(xs, kb, list(range(0, s.c0, s.ks)))
        return carry_loop(g, str(s.c0 // s.ks), [(vt, v) for v in xs], lambda t, ys: steps(ys, kb, [_mul(g, t, s.ks)]))

    accs = carry_loop(g, kf, [(vt, v) for v in acc0], fractal)
    # the last, partial fractal of k: whole steps, then (bf16 pair dots) a step of one real k value.
    # i16 pairs need no such step: B's rows past k are zero and A's (finite) values times zero add 0
    kt = _rem(g, k, s.c0)
    whole = _shr(g, _add(g, kt, 1) if s.dot == "i16" else kt, s.ks)
    accs = carry_loop(g, whole, [(vt, v) for v in accs], lambda t, xs: steps(xs, kf, [_mul(g, t, s.ks)]))
    if s.dot == "bf16":
        odd = _rem(g, kt, 2)
        before = g.label("oddpre")
        g.br(before)
        g.block(before)
        yes, done = g.label("odd"), g.label("oddend")
        g.cbr(g.op(f"icmp ne i64 {odd}, 0"), yes, done)
        g.block(yes)
        fin = steps(accs, kf, [_mul(g, whole, 2)], mask_last="65535")
        g.br(done)
        g.block(done)
        accs = [g.op(f"phi {vt} [{x}, %{before}], [{y}, %{yes}]") for x, y in zip(accs, fin)]
    for r in range(rr):
        for q, p in enumerate(cptr[r]):
            g.emit(f"store {vt} {accs[r * len(vecs) + q]}, ptr {p}, align {min(32, 4 * w)}")


def _bcast(g: Gen, s: _Spec, p: str, mask: str | None) -> str:
    """A's value(s) for one step, broadcast to all lanes: one vbroadcastss / vpbroadcastd from memory."""
    w = s.tile.lanes
    if s.ks == 1:
        x = g.op(f"load {s.acc}, ptr {p}, align {s.eb}")
        return _splat(g, w, s.acc, x)
    x = g.op(f"load i32, ptr {p}, align 4")
    if mask:  # the pair's second element lies past k
        x = g.op(f"and i32 {x}, {mask}")
    v = _splat(g, w, "i32", x)
    return g.op(f"bitcast <{w} x i32> {v} to {s.bt}")


def _fma(g: Gen, s: _Spec, acc: str, a: str, b: str) -> str:
    """acc + a * b (lane-wise; pair dots: acc + a0 * b0 + a1 * b1)."""
    w, vt, bt = s.tile.lanes, s.vt, s.bt
    if s.dot == "bf16":
        g.intrinsic(f"declare {vt} @llvm.x86.avx512bf16.dpbf16ps.512({vt}, {bt}, {bt})")
        return g.op(f"call {vt} @llvm.x86.avx512bf16.dpbf16ps.512({vt} {acc}, {bt} {b}, {bt} {a})")
    if s.vnni:
        g.intrinsic(f"declare {vt} @llvm.x86.avx512.vpdpwssd.512({vt}, {bt}, {bt})")
        return g.op(f"call {vt} @llvm.x86.avx512.vpdpwssd.512({vt} {acc}, {bt} {b}, {bt} {a})")
    if s.dot == "i16":  # sext, multiply, add pairs: LLVM selects pmaddwd at every level
        wt = f"<{2 * w} x i32>"
        prod = g.op(f"mul nsw {wt} {g.op(f'sext {bt} {a} to {wt}')}, {g.op(f'sext {bt} {b} to {wt}')}")
        half = [g.op(f"shufflevector {wt} {prod}, {wt} poison, <{w} x i32> <"
                     + ", ".join(f"i32 {2 * i + h}" for i in range(w)) + ">") for h in (0, 1)]
        return g.op(f"add {vt} {acc}, {g.op(f'add {vt} {half[0]}, {half[1]}')}")
    if s.fma:
        g.intrinsic(f"declare {vt} @llvm.fma.v{w}f32({vt}, {vt}, {vt})")
        return g.op(f"call {vt} @llvm.fma.v{w}f32({vt} {a}, {vt} {b}, {vt} {acc})")
    return g.op(f"fadd {vt} {acc}, {g.op(f'fmul {vt} {a}, {b}')}")


__all__ = ["MicroTarget", "Tile", "choose_tile", "mmad", "describe", "fused_f32", "ISA_DROPS"]
