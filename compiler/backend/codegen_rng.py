"""codegen of `dsl.rand` / `dsl.randint` (VRAND / VRANDINT): Philox 4x32-10 (Salmon et al., SC'11, as in
Random123, cuRAND, torch's CUDA generator and JAX), with the numbering of `compiler.frontend.lower_rng`:
word n of seed s is word n % 4 of philox4x32_10(counter = (b lo, b hi, 0, 0), key = (s lo, s hi)),
b = n // 4 (n a u64, b masked to its 62 bits).

Per row, element c takes word n0 + c (n0 = offset + r * stride): the row's words fall in blocks that
start n0 % 4 words before it. The blocks wholly inside the row are computed 16 (then 4) at a time in
explicit vectors (each 32x32 -> 64-bit multiply a `mul nuw` of zero-extended i64 lanes, which x86
lowers to pmuludq, SSE2 through AVX-512: no runtime helper on any level), their four words
interleaved into 64 (16) consecutive elements and stored as one vector; the partial blocks at either
end, and the last few whole ones, are computed one at a time and stored word by word where they fall
inside the row. (16 lanes measured best on Zen 3 at x86-64-v2 and v3, ~1.6-1.8 ns per f32 value on one
host thread when the machine is quiet.)
"""
from __future__ import annotations

from collections.abc import Callable

from compiler.backend.codegen_elem import i64_of
from compiler.backend.gen import Gen, _if, _splat
from compiler.ir import VOp
from compiler.sexpr import SExpr
from simulator.isa import Instr, Pipe

# Philox 4x32 constants (Random123 philox.h): the multipliers and the Weyl key increments
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
VF = (16, 4)  # Philox blocks per vector iteration: 64 values while a row has them, then 16 at a time
SCALE = "0x3E70000000000000"  # 2**-24 (exact as a float)


def _i32(v: int) -> int:
    """An unsigned 32-bit constant as LLVM's signed i32 literal."""
    return v - (1 << 32) if v >= 1 << 31 else v


def philox(g: Gen, n: int | None, ctr: list[str], k0: str, k1: str) -> list[str]:
    """The 4 output words of Philox 4x32-10 for counter `ctr` (4 values of type i32, or <n x i32> when n
    is given) under the key (k0, k1) (i32 scalars, the same for every lane)."""
    t = "i32" if n is None else f"<{n} x i32>"
    w = "i64" if n is None else f"<{n} x i64>"

    def const64(v: int) -> str:
        return str(v) if n is None else "<" + ", ".join([f"i64 {v}"] * n) + ">"

    def lanes(x: str) -> str:
        return x if n is None else _splat(g, n, "i32", x)

    def mulhilo(m: int, x: str) -> tuple[str, str]:
        p = g.op(f"mul nuw {w} {g.op(f'zext {t} {x} to {w}')}, {const64(m)}")
        hi = g.op(f"trunc {w} {g.op(f'lshr {w} {p}, {const64(32)}')} to {t}")
        return hi, g.op(f"trunc {w} {p} to {t}")

    c0, c1, c2, c3 = ctr
    for r in range(ROUNDS):
        if r:  # the key schedule: a Weyl sequence, bumped before every round but the first
            k0, k1 = g.op(f"add i32 {k0}, {_i32(W0)}"), g.op(f"add i32 {k1}, {_i32(W1)}")
        hi0, lo0 = mulhilo(M0, c0)
        hi1, lo1 = mulhilo(M1, c2)
        c0, c1, c2, c3 = (g.op(f"xor {t} {g.op(f'xor {t} {hi1}, {c1}')}, {lanes(k0)}"), lo1,
                          g.op(f"xor {t} {g.op(f'xor {t} {hi0}, {c3}')}, {lanes(k1)}"), lo0)
    return [c0, c1, c2, c3]


def _value(g: Gen, uniform: bool, t: str, x: str, n: int | None) -> str:
    """A word as the instruction's element: itself (randint), or its high 24 bits times 2**-24 (rand)."""
    if not uniform:
        return x
    sh = "8" if n is None else "<" + ", ".join(["i32 8"] * n) + ">"
    ft = "float" if n is None else f"<{n} x float>"
    f = g.op(f"sitofp {t} {g.op(f'lshr {t} {x}, {sh}')} to {ft}")
    scale = SCALE if n is None else _splat(g, n, "float", SCALE)
    return g.op(f"fmul {ft} {f}, {scale}")


def _counter(g: Gen, blk: str, t: str, w: str, n: int = 1) -> tuple[str, str]:
    """(low, high) counter words of block index `blk` (i64 or vector), kept to 62 bits like n // 4 of a u64."""
    mask = (1 << 62) - 1
    m = str(mask) if w == "i64" else "<" + ", ".join([f"i64 {mask}"] * n) + ">"
    s32 = "32" if w == "i64" else "<" + ", ".join(["i64 32"] * n) + ">"
    b = g.op(f"and {w} {blk}, {m}")
    return g.op(f"trunc {w} {b} to {t}"), g.op(f"trunc {w} {g.op(f'lshr {w} {b}, {s32}')} to {t}")


def gen_rng(g: Gen, s: VOp) -> None:
    """VRAND / VRANDINT over the destination's extent: its event, then row by row."""
    d = s.dst
    uniform = s.instr == Instr.VRAND
    ety = "float" if uniform else "i32"
    rows, cols = i64_of(g, d.ext[0]), i64_of(g, d.ext[1])
    g.event(s.instr, Pipe.V, s.loc, g.op(f"mul i64 {rows}, {cols}"), d.dtype.itemsize, rows)
    seed, offset, stride = (i64_of(g, e) for e in s.srcs if isinstance(e, SExpr))  # all three are scalars
    k0 = g.op(f"trunc i64 {seed} to i32")
    k1 = g.op(f"trunc i64 {g.op(f'lshr i64 {seed}, 32')} to i32")
    dptr, dstride = g.buf_ptr(d)
    ncols = g.op(f"select i1 {g.op(f'icmp sgt i64 {cols}, 0')}, i64 {cols}, i64 0")

    def row(r: str) -> None:
        n0 = g.op(f"add i64 {offset}, {g.op(f'mul i64 {r}, {stride}')}")
        rp = g.op(f"getelementptr {ety}, ptr {dptr}, i64 {g.op(f'mul i64 {r}, {dstride}')}")
        lead = g.op(f"and i64 {n0}, 3")  # words of the first block before the row starts
        b0 = g.op(f"lshr i64 {n0}, 2")
        span = g.op(f"add i64 {lead}, {ncols}")
        nblk = g.op(f"lshr i64 {g.op(f'add i64 {span}, 3')}, 2")  # blocks touching the row
        first = g.op(f"zext i1 {g.op(f'icmp ne i64 {lead}, 0')} to i64")  # the first whole block
        whole = g.op(f"sub i64 {g.op(f'lshr i64 {span}, 2')}, {first}")
        whole = g.op(f"select i1 {g.op(f'icmp sgt i64 {whole}, 0')}, i64 {whole}, i64 0")

        def partial(j: str) -> None:  # block j of the row, word by word where it falls inside
            lo, hi = _counter(g, g.op(f"add i64 {b0}, {j}"), "i32", "i64")
            words = philox(g, None, [lo, hi, "0", "0"], k0, k1)
            base = g.op(f"sub i64 {g.op(f'shl i64 {j}, 2')}, {lead}")
            for k, wv in enumerate(words):
                p = g.op(f"add i64 {base}, {k}")

                def put(p: str = p, wv: str = wv) -> None:
                    v = _value(g, uniform, "i32", wv, None)
                    g.emit(f"store {ety} {v}, ptr {g.op(f'getelementptr {ety}, ptr {rp}, i64 {p}')}, align 4")

                _if(g, g.op(f"icmp ult i64 {p}, {ncols}"), put)

        def vector(vf: int, start: str) -> Callable[[str], None]:
            def body(v: str) -> None:  # vf whole blocks from block `start` + vf * v: 4 * vf consecutive elements
                j = g.op(f"add i64 {start}, {g.op(f'shl i64 {v}, {vf.bit_length() - 1}')}")
                iota = "<" + ", ".join(f"i64 {i}" for i in range(vf)) + ">"
                blk = g.op(f"add <{vf} x i64> {_splat(g, vf, 'i64', g.op(f'add i64 {b0}, {j}'))}, {iota}")
                vt = f"<{vf} x i32>"
                lo, hi = _counter(g, blk, vt, f"<{vf} x i64>", vf)
                w0, w1, w2, w3 = philox(g, vf, [lo, hi, "zeroinitializer", "zeroinitializer"], k0, k1)
                pair = "<" + ", ".join(f"i32 {i}" for i in range(2 * vf)) + ">"
                a = g.op(f"shufflevector {vt} {w0}, {vt} {w1}, <{2 * vf} x i32> {pair}")
                b = g.op(f"shufflevector {vt} {w2}, {vt} {w3}, <{2 * vf} x i32> {pair}")
                order = "<" + ", ".join(f"i32 {i + vf * k}" for i in range(vf) for k in range(4)) + ">"
                wt = f"<{2 * vf} x i32>"
                out = g.op(f"shufflevector {wt} {a}, {wt} {b}, <{4 * vf} x i32> {order}")
                val = _value(g, uniform, f"<{4 * vf} x i32>", out, 4 * vf)
                at = g.op(f"sub i64 {g.op(f'shl i64 {j}, 2')}, {lead}")
                g.emit(f"store <{4 * vf} x {ety}> {val}, ptr {g.op(f'getelementptr {ety}, ptr {rp}, i64 {at}')}, "
                       "align 4")
            return body

        g.loop(first, partial)
        done = first
        for vf in VF:  # wide vectors while they fill, then narrow ones, then one block at a time
            left = g.op(f"sub i64 {whole}, {g.op(f'sub i64 {done}, {first}')}")  # whole blocks not yet done
            nvec = g.op(f"lshr i64 {left}, {vf.bit_length() - 1}")
            g.loop(nvec, vector(vf, done))
            done = g.op(f"add i64 {done}, {g.op(f'shl i64 {nvec}, {vf.bit_length() - 1}')}")
        g.loop(g.op(f"sub i64 {nblk}, {done}"), lambda i: partial(g.op(f"add i64 {done}, {i}")))

    g.loop(rows, row)
