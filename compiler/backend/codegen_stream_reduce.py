"""A stream group that ends in a reduction (`codegen_stream`): the reduced tile's elements go from GM
(through the group's elementwise members) straight into accumulators held in registers, with no UB
round trip for the tile.

The result is the one `codegen_elem.gen_reduce` computes from UB, bit for bit:

  - a float sum keeps `lane_sum`'s order: 16 lanes, lane l adding elements l, l + 16, ... in turn
    (the row's last `cols % 16` elements into lanes 0.., the other lanes unchanged, as lane_sum's
    masked load of zeros leaves them: an accumulator that starts at +0.0 is never -0.0), then the
    same tree (l + l+8, l + l+4, l + l+2, l + l+1); a whole-tile sum adds the row sums row by row;
  - max / min (NaN-propagating, -0 < +0) and integer sums (wrapping) are associative and commutative
    exactly, so 16 lanes and a tree give the value of gen_reduce's one running value (a NaN result
    may carry another NaN's payload).

Only the data work is here; the reduction's trace event is issued in place like every member's.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compiler import sexpr as S
from compiler.backend.codegen_elem import compute_ty, ety, i64_of, store_elem
from compiler.backend.gen import carry_loop
from compiler.ir import REDUCE, Buf, VOp
from dsl.types import Mem
from simulator.isa import Instr

if TYPE_CHECKING:
    from compiler.backend.gen import Gen

LANES = 16  # lane_sum's lanes


def fusable_reduction(s: VOp) -> bool:
    """Whether `s` can end a stream group: a reduction of a UB tile per row or over the whole tile."""
    src = s.srcs[0] if s.srcs else None
    return (s.instr in REDUCE and s.arg in ("rows", "all") and isinstance(src, Buf) and src.mem == Mem.UB
            and s.dst.mem == Mem.UB)


def column_out(s: VOp) -> bool:
    """Whether the results go down a (R, 1) column (one per row of the destination), as gen_reduce
    lays them out; otherwise along a row."""
    return s.dst.cap[1] == S.const(1) and s.dst.cap[0] != S.const(1)


def out_span(g: Gen, s: VOp) -> tuple[str, str, str]:
    """(first byte, one past the last byte, row stride in bytes) of the UB the reduction writes."""
    p, st = g.buf_ptr(s.dst)
    es = s.dst.dtype.itemsize
    start = g.op(f"ptrtoint ptr {p} to i64")
    src = s.srcs[0]
    assert isinstance(src, Buf)
    n = "1" if s.arg == "all" else i64_of(g, src.ext[0])
    last = g.op(f"mul i64 {g.op(f'sub i64 {n}, 1')}, {st}") if column_out(s) else g.op(f"sub i64 {n}, 1")
    n_el = g.op(f"add i64 {last}, 1")
    end = g.op(f"add i64 {start}, {g.op(f'mul i64 {n_el}, {es}')}")
    return start, end, g.op(f"mul i64 {st}, {es}")


def _init(instr: Instr, ct: str) -> str:
    """gen_reduce's initial value."""
    fl = ct == "float"
    if instr == Instr.VREDUCE_SUM:
        return "0.0" if fl else "0"
    if instr == Instr.VREDUCE_MAX:
        return "0xFFF0000000000000" if fl else str(-(1 << (int(ct[1:]) - 1)))
    return "0x7FF0000000000000" if fl else str((1 << (int(ct[1:]) - 1)) - 1)


def _combine(g: Gen, instr: Instr, ty: str, ct: str, a: str, b: str) -> str:
    """a (+ | max | min) b, `ty` the scalar or vector type of a and b, `ct` their element type."""
    fl = ct == "float"
    if instr == Instr.VREDUCE_SUM:
        return g.op(f"{'fadd' if fl else 'add'} {ty} {a}, {b}")
    big = instr == Instr.VREDUCE_MAX
    name = ("maximum" if big else "minimum") if fl else ("smax" if big else "smin")
    elem = "f32" if fl else ct
    suffix = elem if ty == ct else f"v{ty[1:].split(' x ')[0]}{elem}"
    g.intrinsic(f"declare {ty} @llvm.{name}.{suffix}({ty}, {ty})")
    return g.op(f"call {ty} @llvm.{name}.{suffix}({ty} {a}, {ty} {b})")


def fused_reduce(g: Gen, s: VOp, rows: str, cols: str, row_elems: Callable[[str], Callable[..., str]]) -> None:
    """Reduction `s` over rows x cols elements that `row_elems(r)(c, defer)` computes (in the compute
    type of the reduction's source: the value its producer would have put in UB), results into s.dst.
    The UB writes of a 16-element chunk (members whose tiles are read after the group) come back in
    `defer` and are emitted after the chunk's 16 loads: GM and UB are disjoint and the group's windows
    were checked not to overlap (`codegen_stream._fusable`), and with no store between them the SLP
    vectoriser merges the loads (and the stores) into vectors; interleaved, it could not prove them
    apart and left 16 scalar loads and stores (~6x slower)."""
    src = s.srcs[0]
    assert isinstance(src, Buf)
    ct = compute_ty(src.dtype)
    init = _init(s.instr, ct)
    vt = f"<{LANES} x {ct}>"
    ordered = s.instr == Instr.VREDUCE_SUM and ct == "float"
    vinit = "zeroinitializer" if s.instr == Instr.VREDUCE_SUM else \
        "<" + ", ".join(f"{ct} {init}" for _ in range(LANES)) + ">"
    dp, ds = g.buf_ptr(s.dst)
    full = g.op(f"lshr i64 {cols}, 4")
    tail = g.op(f"and i64 {cols}, {LANES - 1}")
    at_tail = g.op(f"shl i64 {full}, 4")

    def row_value(r: str) -> str:
        elem = row_elems(r)

        def chunk(i: str, acc: list[str]) -> list[str]:
            base = g.op(f"shl i64 {i}, 4")
            vec = "poison"
            pending: list[tuple[Any, str, str]] = []
            for lane in range(LANES):  # one vector of 16 elements (the SLP vectoriser merges the lanes)
                c = base if lane == 0 else g.op(f"add nuw nsw i64 {base}, {lane}")
                vec = g.op(f"insertelement {vt} {vec}, {ct} {elem(c, pending)}, i64 {lane}")
            for dt, p, v in pending:
                store_elem(g, dt, p, v)
            return [_combine(g, s.instr, vt, ct, acc[0], vec)]

        if ordered:  # lane_sum's order: one accumulator
            acc = carry_loop(g, full, [(vt, vinit)], chunk)[0]
        else:  # any order: four accumulators (64 elements a step) hide the combine's latency
            def quad(i: str, accs: list[str]) -> list[str]:
                return [chunk(g.op(f"add nuw nsw i64 {g.op(f'shl i64 {i}, 2')}, {q}"), [a])[0]
                        for q, a in enumerate(accs)]

            accs = carry_loop(g, g.op(f"lshr i64 {full}, 2"), [(vt, vinit)] * 4, quad)
            a01 = _combine(g, s.instr, vt, ct, accs[0], accs[1])
            a23 = _combine(g, s.instr, vt, ct, accs[2], accs[3])
            rest = g.op(f"and i64 {full}, 3")
            at_rest = g.op(f"and i64 {full}, -4")
            acc = carry_loop(g, rest, [(vt, _combine(g, s.instr, vt, ct, a01, a23))],
                             lambda i, a: chunk(g.op(f"add nuw nsw i64 {at_rest}, {i}"), a))[0]

        def last(k: str, a: list[str]) -> list[str]:  # the row's tail: element k into lane k
            x = elem(g.op(f"add nuw nsw i64 {at_tail}, {k}"))
            lane = g.op(f"extractelement {vt} {a[0]}, i64 {k}")
            return [g.op(f"insertelement {vt} {a[0]}, {ct} {_combine(g, s.instr, ct, ct, lane, x)}, i64 {k}")]

        acc = carry_loop(g, tail, [(vt, acc)], last)[0]
        width = LANES
        while width > 1:  # lane_sum's tree: lane l + lane l + width / 2
            half = width // 2
            lo = g.op(f"shufflevector <{width} x {ct}> {acc}, <{width} x {ct}> poison, <{half} x i32> <"
                      + ", ".join(f"i32 {i}" for i in range(half)) + ">")
            hi = g.op(f"shufflevector <{width} x {ct}> {acc}, <{width} x {ct}> poison, <{half} x i32> <"
                      + ", ".join(f"i32 {i}" for i in range(half, width)) + ">")
            acc = _combine(g, s.instr, f"<{half} x {ct}>", ct, lo, hi)
            width = half
        return g.op(f"extractelement <1 x {ct}> {acc}, i64 0")

    def out_ptr(i: str) -> str:
        at = g.op(f"mul i64 {i}, {ds}") if column_out(s) else i
        return g.op(f"getelementptr {ety(s.dst.dtype)}, ptr {dp}, i64 {at}")

    if s.arg == "rows":
        g.loop(rows, lambda r: store_elem(g, s.dst.dtype, out_ptr(r), row_value(r)))
        return
    total = carry_loop(g, rows, [(ct, init)], lambda r, a: [_combine(g, s.instr, ct, ct, a[0], row_value(r))])[0]
    store_elem(g, s.dst.dtype, out_ptr("0"), total)
