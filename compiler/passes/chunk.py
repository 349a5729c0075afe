"""chunk_epilogues: a vector epilogue of a cube accumulator streams L0C through UB in row chunks.

`c[m, n] = dsl.relu(acc + bias[n])` moves the BM x BN accumulator L0C -> UB (FIX), runs the vector
instructions (V) and stores the result (MTE3). When that run does not fit UB with its tiles
double-buffered, this pass wraps it in a loop over chunks of CH rows, CH the largest multiple of 16
that fits: FIX moves rows [r, r + CH) of L0C (`Move.row0`), V runs the epilogue on them, MTE3
stores them, and the chunk's tiles are double-buffered by the chunk loop, so FIX, V and MTE3
overlap. Row vectors (`bias[n]`) and checks move before the loop (loaded once).

An epilogue is the run of statements from an L0C -> UB move up to its last store in which every
statement splits by rows: moves of the same accumulator, elementwise vector instructions and row
reductions over BM-row tiles (other operands: row vectors or scalars), loads and stores of BM-row
GM windows. Its tiles must not be used after it. Anything else leaves the epilogue whole (and
`place_buffers` reports E301 if it does not fit). The choice is made by placing the kernel
(`place_buffers`) with each candidate: a schedule decision, never a change of the result.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.extents import dyn_broadcasts
from compiler.ir import REDUCE, Buf, Check, For, If, Kernel, Load, Move, Stmt, Store, VOp, accesses, walk
from compiler.passes.lifetimes import INPLACE
from compiler.passes.place import buffers_option, place_buffers
from compiler.sexpr import SExpr
from dsl.errors import KernelError
from dsl.types import Mem

if TYPE_CHECKING:
    from simulator.config import HwConfig

ROWS = 16  # L0C fractal rows: chunks start on fractal boundaries


@dataclass
class Epilogue:
    move: Move  # the first L0C -> UB move (identifies the region)
    start: int  # index in its body
    stop: int  # one past the last store
    acc: Buf
    chunked: set[int]  # ids of the BM-row UB tiles, split into chunks
    hoist: list[int]  # indices of statements run once before the loop (row vectors, checks)


def chunk_epilogues(k: Kernel, cfg: HwConfig) -> Kernel:
    """Split every epilogue that does not fit UB double-buffered into row chunks that do."""
    nbuf = 1 if buffers_option(k) == 1 else 2  # double buffering, or what the user asked for
    moves = [s for s in walk(k.body) if isinstance(s, Move) and s.src.mem == Mem.L0C and s.dst.mem == Mem.UB
             and s.row0 is None]
    for n, mv in enumerate(moves):
        ep = _find(k, mv)
        if ep is None:
            continue
        if _fits(k, cfg, {mv.dst.id}, nbuf, whole=True):
            continue
        bm = int(ep.acc.cap[0].value)
        fallback = None
        for ch in range(bm - ROWS if bm % ROWS == 0 else bm // ROWS * ROWS, ROWS - 1, -ROWS):
            k2, first = _rewrite(k, ep, ch, n)
            if _fits(k2, cfg, {first}, nbuf, whole=False):
                # as many chunks as this size needs, made even (balanced ping-pong)
                count = -(-bm // ch)
                even = -(-(-(-bm // count)) // ROWS) * ROWS
                if even < ch:
                    k3, first3 = _rewrite(k, ep, even, n)
                    if _fits(k3, cfg, {first3}, nbuf, whole=False):
                        k2 = k3
                k = k2
                break
            if fallback is None and _fits(k2, cfg, {first}, 1, whole=False):
                fallback = k2  # fits single-buffered: better than not at all
        else:
            if fallback is not None:
                k = fallback
    return k


def _fits(k: Kernel, cfg: HwConfig, ids: set[int], nbuf: int, whole: bool) -> bool:
    """Whether k places with the tiles `ids` in at least `nbuf` slots (whole: if a loop can give them)."""
    try:
        placed = place_buffers(k, cfg)
    except KernelError:
        return False
    for i in ids:
        p = placed.placement.get(i)
        if p is None or (p.slots < nbuf and not (whole and not _in_loop(k.body, i))):
            return False
    return True


def _in_loop(body: tuple[Stmt, ...], buf_id: int, inside: bool = False) -> bool:
    for s in body:
        if isinstance(s, For):
            if _in_loop(s.body, buf_id, True):
                return True
        elif isinstance(s, If):
            if _in_loop(s.then, buf_id, inside) or _in_loop(s.orelse, buf_id, inside):
                return True
        elif inside and any(b.id == buf_id for b, _ in accesses(s)):
            return True
    return False


def _body_of(body: tuple[Stmt, ...], target: Stmt) -> tuple[Stmt, ...] | None:
    """The statement list that holds `target` (by identity)."""
    if any(s is target for s in body):
        return body
    for s in body:
        subs = (s.body,) if isinstance(s, For) else (s.then, s.orelse) if isinstance(s, If) else ()
        for sub in subs:
            r = _body_of(sub, target)
            if r is not None:
                return r
    return None


def _find(k: Kernel, mv: Move) -> Epilogue | None:
    body = _body_of(k.body, mv)
    if body is None:
        return None
    i = next(j for j, s in enumerate(body) if s is mv)
    acc = mv.src
    if not acc.cap[0].is_const or int(acc.cap[0].value) < 2 * ROWS:
        return None
    bm, rows = acc.cap[0], acc.ext[0]
    chunked = {mv.dst.id}
    hoist: list[int] = []
    stop = None
    for j in range(i + 1, len(body)):
        s = body[j]
        if isinstance(s, Check):
            hoist.append(j)
        elif isinstance(s, Move) and s.src is acc and s.dst.mem == Mem.UB and s.row0 is None and s.dst.ext[0] == rows:
            chunked.add(s.dst.id)
        elif isinstance(s, Load) and s.dst.mem == Mem.UB and s.src.step is None and s.dst.cap[0] == S.const(1):
            hoist.append(j)  # a row vector (bias[n]): loaded once
        elif isinstance(s, Load) and s.dst.mem == Mem.UB and s.src.step is None and s.dst.cap[0] == bm \
                and s.src.rows == rows and s.dst.ext[0] == rows:
            chunked.add(s.dst.id)
        elif isinstance(s, VOp) and _splits(s, chunked, bm, rows):
            chunked.add(s.dst.id)
        elif isinstance(s, Store) and s.src.id in chunked and s.dst.step is None and s.fix is None \
                and s.dst.rows == rows:
            stop = j + 1
        else:
            break
    if stop is None:
        return None
    region = body[i:stop]
    inside = {id(s) for s in region}
    hoisted_bufs = {h.dst.id for j in hoist if j < stop for h in (body[j],) if isinstance(h, Load)}
    for s in walk(k.body):
        if id(s) in inside or isinstance(s, (For, If)):
            continue
        if any(b.id in chunked or b.id in hoisted_bufs for b, _ in accesses(s)):
            return None  # a tile of the epilogue is used elsewhere: it must stay whole
    return Epilogue(mv, i, stop, acc, chunked, [j for j in hoist if j < stop])


def _splits(s: VOp, chunked: set[int], bm: SExpr, rows: SExpr) -> bool:
    """A vector instruction that computes each row of its BM-row result from the same row of its
    chunked operands (and from row vectors or scalars)."""
    if s.instr in REDUCE:
        if s.arg != "rows":
            return False
    elif s.instr not in INPLACE:
        return False
    if s.dst.cap[0] != bm or s.dst.ext[0] != rows or s.dst.id in chunked:
        return False
    for o in s.srcs:
        if not isinstance(o, Buf):
            continue
        if o.id in chunked:
            if dyn_broadcasts(o, s.dst)[0]:
                return False
        elif not (o.cap[0] == S.const(1) and s.dst.cap[0] != S.const(1)):
            return False
    return True


def _rewrite(k: Kernel, ep: Epilogue, ch: int, n: int) -> tuple[Kernel, int]:
    """k with the epilogue in a loop over chunks of `ch` rows. Returns (kernel, id of the first move's
    chunk tile)."""
    body = _body_of(k.body, ep.move)
    assert body is not None
    row, it = f"l0c.row.{n}", f"l0c.it.{n}"
    r0 = S.var(row)
    rows = ep.acc.ext[0]
    crows = S.smin(ch, S.sub(rows, r0))
    next_id = max([b.id for b in k.bufs] + [b.id for s in walk(k.body) for b, _ in accesses(s)]) + 1
    new: dict[int, Buf] = {}
    bufs = list(k.bufs)

    def chunk(b: Buf) -> Buf:
        nonlocal next_id
        if b.id not in ep.chunked:
            return b
        if b.id not in new:
            new[b.id] = Buf(next_id, b.name, b.dtype, 2, (S.const(ch), b.cap[1]), (crows, b.ext[1]), b.mem, b.loc,
                            depth=b.depth + 1)
            next_id += 1
            bufs.append(new[b.id])
        return new[b.id]

    inner: list[Stmt] = []
    for j in range(ep.start, ep.stop):
        s = body[j]
        if j in ep.hoist:
            continue
        if isinstance(s, Move):
            s = dataclasses.replace(s, dst=chunk(s.dst), row0=r0)
        elif isinstance(s, Load):
            ref = dataclasses.replace(s.src, offset=S.add(s.src.offset, S.mul(r0, s.src.stride)), rows=crows)
            s = dataclasses.replace(s, dst=chunk(s.dst), src=ref)
        elif isinstance(s, Store):
            ref = dataclasses.replace(s.dst, offset=S.add(s.dst.offset, S.mul(r0, s.dst.stride)), rows=crows)
            s = dataclasses.replace(s, dst=ref, src=chunk(s.src))
        elif isinstance(s, VOp):
            s = dataclasses.replace(s, dst=chunk(s.dst), srcs=tuple(chunk(o) if isinstance(o, Buf) else o
                                                                    for o in s.srcs))
        inner.append(s)
    loop = For(row, it, S.const(0), rows, S.const(ch), tuple(inner), loc=ep.move.loc)
    replaced = tuple(body[:ep.start]) + tuple(body[j] for j in ep.hoist) + (loop,) + tuple(body[ep.stop:])
    out = _replace_body(k.body, body, replaced)
    svars = {**k.scalar_vars, row: S.I64, it: S.I64}
    return dataclasses.replace(k, body=out, bufs=bufs, scalar_vars=svars), new[ep.move.dst.id].id


def _replace_body(body: tuple[Stmt, ...], old: tuple[Stmt, ...], new: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    if body is old:
        return new
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            s = dataclasses.replace(s, body=_replace_body(s.body, old, new))
        elif isinstance(s, If):
            s = dataclasses.replace(s, then=_replace_body(s.then, old, new), orelse=_replace_body(s.orelse, old, new))
        out.append(s)
    return tuple(out)
