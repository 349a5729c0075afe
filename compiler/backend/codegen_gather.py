"""codegen of gathers and scalars from GM: `LoadScalar` (one GM element into a scalar variable, on
S) and the position-dependent vector instructions of `VIndexed` (VARANGE, VGATHER).

A gather checks every index before it writes anything: per row, an OR of "index outside the bound"
over the row (a vectorisable reduction: an unsigned compare catches negative indices too), and only
if one is found a scalar pass that stops at the first offending index with its value and position.
The data pass then moves element bits (no float conversion: NaN payloads and -0 survive).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.backend.codegen_elem import i64_of, load_elem
from compiler.backend.gen import _if, carry_loop
from compiler.gathers import READ_HINT, gather_message, read_message
from compiler.ir import LoadScalar, VIndexed
from compiler.sexpr import F64
from simulator.isa import Instr, Pipe

if TYPE_CHECKING:
    from compiler.backend.gen import Gen

BITS = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}


def gen_load_scalar(g: Gen, s: LoadScalar) -> None:
    """var = the GM element at s.src.offset, bounds-checked against the tensor before the read."""
    ref = s.src
    es = ref.dtype.itemsize
    off, numel = i64_of(g, ref.offset), i64_of(g, ref.numel)
    ok = g.op(f"and i1 {g.op(f'icmp sge i64 {off}, 0')}, {g.op(f'icmp slt i64 {off}, {numel}')}")
    g.guard(ok, "E404", read_message(ref.name, ref.dtype), [off, numel], READ_HINT, s.loc)
    gm_index = [p.slot for p in g.k.params if p.kind == "gm"].index(ref.arg)
    g.event(Instr.LOAD_GM_S, Pipe.S, s.loc, es, 1, gm_index, g.op(f"mul i64 {off}, {es}"), 0)
    p = g.op(f"getelementptr i8, ptr {g.gm_ptr(ref.arg)}, i64 {g.op(f'mul i64 {off}, {es}')}")
    v = load_elem(g, ref.dtype, p)  # floats widened to f32, integers in their own width
    ty = g.k.scalar_vars[s.var]
    if ty == F64:
        v = g.op(f"fpext float {v} to double")
        g.emit(f"store double {v}, ptr {g.var_ptr(s.var)}, align 8")
    else:
        if ref.dtype.llvm != "i64":
            v = g.op(f"sext {ref.dtype.llvm} {v} to i64")
        g.emit(f"store i64 {v}, ptr {g.var_ptr(s.var)}, align 8")
    for c in g.cache:  # values computed from the old value are stale
        for key in [k for k in c if s.var in S.free_vars(k)]:
            del c[key]


def gen_indexed(g: Gen, s: VIndexed) -> None:
    if s.instr == Instr.VARANGE:
        gen_arange(g, s)
    elif s.instr == Instr.VGATHER:
        gen_gather(g, s)
    else:  # pragma: no cover
        raise AssertionError(f"codegen: {s.instr.name}")


def gen_arange(g: Gen, s: VIndexed) -> None:
    """dst[r, c] = c, converted to dst's dtype (i32 or f32)."""
    d = s.dst
    rows, cols = i64_of(g, d.ext[0]), i64_of(g, d.ext[1])
    g.event(Instr.VARANGE, Pipe.V, s.loc, g.op(f"mul i64 {rows}, {cols}"), d.dtype.itemsize, rows)
    dp, ds = g.buf_ptr(d)
    t = d.dtype.llvm

    def row(r: str) -> None:
        rp = g.op(f"getelementptr {t}, ptr {dp}, i64 {g.op(f'mul i64 {r}, {ds}')}")

        def col(c: str) -> None:
            v = g.op(f"sitofp i64 {c} to float") if d.dtype.is_float else g.op(f"trunc i64 {c} to {t}")
            g.emit(f"store {t} {v}, ptr {g.op(f'getelementptr {t}, ptr {rp}, i64 {c}')}, align {d.dtype.itemsize}")

        g.loop(cols, col)

    g.loop(rows, row)


def gen_gather(g: Gen, s: VIndexed) -> None:
    """'cols': dst[r, c] = x[r, index[r, c]]; 'rows': dst[r, c] = x[index[r, c], c]."""
    d = s.dst
    x, ix = s.srcs
    rows, cols = i64_of(g, d.ext[0]), i64_of(g, d.ext[1])
    bound = i64_of(g, x.ext[1] if s.arg == "cols" else x.ext[0])
    g.event(Instr.VGATHER, Pipe.V, s.loc, g.op(f"mul i64 {rows}, {cols}"), max(4, d.dtype.itemsize), rows)
    ip, istride = g.buf_ptr(ix)
    xp, xstride = g.buf_ptr(x)
    dp, dstride = g.buf_ptr(d)
    it, bt = ix.dtype.llvm, BITS[d.dtype.itemsize]
    msg, hint = gather_message(s)

    def index_row(r: str) -> str:
        return g.op(f"getelementptr {it}, ptr {ip}, i64 {g.op(f'mul i64 {r}, {istride}')}")

    def index_at(rp: str, c: str) -> str:
        v = g.op(f"load {it}, ptr {g.op(f'getelementptr {it}, ptr {rp}, i64 {c}')}, align {ix.dtype.itemsize}")
        return g.op(f"sext {it} {v} to i64")

    def check_row(r: str) -> None:
        rp = index_row(r)

        def any_bad(c: str, acc: list[str]) -> list[str]:
            out = g.op(f"icmp uge i64 {index_at(rp, c)}, {bound}")
            return [g.op(f"or i8 {acc[0]}, {g.op(f'zext i1 {out} to i8')}")]

        (bad,) = carry_loop(g, cols, [("i8", "0")], any_bad)

        def find_first() -> None:
            def one(c: str) -> None:
                v = index_at(rp, c)
                ok = g.op(f"icmp ult i64 {v}, {bound}")
                g.guard(ok, "E404", msg, [v, c, bound] if d.rank == 1 else [v, r, c, bound], hint, s.loc)

            g.loop(cols, one)

        g.cache.append({})
        _if(g, g.op(f"icmp ne i8 {bad}, 0"), find_first)
        g.cache.pop()

    g.loop(rows, check_row)  # every index checked before the first write

    def data_row(r: str) -> None:
        rp = index_row(r)
        dr = g.op(f"getelementptr {bt}, ptr {dp}, i64 {g.op(f'mul i64 {r}, {dstride}')}")
        xr = g.op(f"getelementptr {bt}, ptr {xp}, i64 {g.op(f'mul i64 {r}, {xstride}')}") if s.arg == "cols" else xp

        def one(c: str) -> None:
            v = index_at(rp, c)
            at = v if s.arg == "cols" else g.op(f"add i64 {g.op(f'mul i64 {v}, {xstride}')}, {c}")
            e = g.op(f"load {bt}, ptr {g.op(f'getelementptr {bt}, ptr {xr}, i64 {at}')}, align {d.dtype.itemsize}")
            g.emit(f"store {bt} {e}, ptr {g.op(f'getelementptr {bt}, ptr {dr}, i64 {c}')}, align {d.dtype.itemsize}")

        g.loop(cols, one)

    g.loop(rows, data_row)
