"""insert_sync: set_flag / wait_flag between pipes, so each pipe runs ahead as far as data allows.

Per region (a loop body or the kernel body) the pass finds, for every access to a buffer, the
earlier conflicting accesses on other pipes (read-after-write, write-after-read,
write-after-write), both earlier in the same iteration and, in loops, in the previous use of the
same ping-pong slot (loop-carried). Each dependency becomes a set_flag after the producer and a
wait_flag before the consumer. Dominated dependencies are dropped (pipes are in order), and the
rest share event ids per pipe pair (their sets and waits come in the same order, so the flag
FIFOs match). Loop-carried flags are primed before the loop, one set per slot, and drained after.
Double-buffered buffers use one event id per slot (ping-pong), as hand-written Ascend C does.

A nested loop or an `if` is one compound item of its parent region, accessing whatever its body
accesses: a dependency into it waits before it, one out of it is set after it, on the pipes
inside that take part. Its own body is a region of its own. GM tensors count as buffers within
an iteration (a load after a store of the same tensor waits), and across the iterations of a
`dsl.range` loop (a read-modify-write of GM); tile loops touch disjoint tiles, so they do not.
A scalar read of GM (`LoadScalar`, on S) may read any element: it waits for every earlier DMA
write of its tensor, from the previous iteration of a tile loop too.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compiler import sexpr as S
from compiler.ir import (
    Flag,
    For,
    If,
    Kernel,
    Load,
    LoadScalar,
    Mmad,
    Move,
    Print,
    Stmt,
    Store,
    VIndexed,
    VOp,
    accesses,
    pipe_of,
)
from dsl.errors import KernelError, SourceLoc
from simulator.isa import EVENT_IDS_PER_PAIR, Pipe

PIPE_OPS = (Load, Store, Move, VOp, VIndexed, Mmad)


@dataclass
class Edge:
    src: int
    dst: int
    carried: bool
    slots: int
    src_pipe: Pipe
    dst_pipe: Pipe


def _has_pipe_work(body: tuple[Stmt, ...]) -> bool:
    for s in body:
        if isinstance(s, PIPE_OPS) or isinstance(s, (Print, LoadScalar)):
            return True
        if isinstance(s, For) and _has_pipe_work(s.body):
            return True
        if isinstance(s, If) and (_has_pipe_work(s.then) or _has_pipe_work(s.orelse)):
            return True
    return False


def _keys(s: Stmt, k: Kernel) -> list[tuple[object, bool, int, Pipe]]:
    """(hazard key, is_write, slots, pipe) of every access of a statement. A nested loop or an `if`
    is one compound item: every access inside it, each on its own pipe."""
    if isinstance(s, For):
        return _dedup_keys([a for x in s.body for a in _keys(x, k)])
    if isinstance(s, If):
        return _dedup_keys([a for x in s.then + s.orelse for a in _keys(x, k)])
    if isinstance(s, LoadScalar):  # the scalar unit reads GM: after the DMAs that wrote it
        return [(("gm", s.src.arg), False, 0, Pipe.S)]
    if not isinstance(s, PIPE_OPS) and not isinstance(s, Print):
        return []
    pipe = pipe_of(s)
    out: list[tuple[object, bool, int, Pipe]] = []
    for b, w in accesses(s):
        p = k.placement.get(b.id)
        key = b.id if p is None or p.share is None else p.share  # in place: the storage's first buffer
        out.append((("buf", key), w, p.slots if p else 1, pipe))
    if isinstance(s, Load):
        out.append((("gm", s.src.arg), False, 0, pipe))
    if isinstance(s, Store):
        out.append((("gm", s.dst.arg), True, 0, pipe))
    return out


def _dedup_keys(keys: list) -> list:
    return list(dict.fromkeys(keys))


def _edges(items: list[tuple[int, list]], n: int, cyclic: bool, gm_carried: bool = False) -> list[Edge]:
    """items: (position, accesses) in program order; accesses (key, is_write, slots, pipe)."""
    edges: list[Edge] = []
    by_pos = dict(items)
    for pos, keys in items:
        for key, write, slots, pipe in keys:
            seq = [(p, False) for p in range(pos - 1, -1, -1)]
            if cyclic:
                seq += [(p, True) for p in range(n - 1, pos - 1, -1)]
            for p, carried in seq:
                if carried and key[0] == "gm" and not gm_carried and pipe != Pipe.S:
                    break  # iterations of a tile loop touch different parts of a tensor (a scalar
                    # read may read any element: it waits for the last iteration's writes too)
                hits = [(w, q) for k2, w, _, q in by_pos.get(p, ()) if k2 == key]
                if not hits:
                    continue
                stop = False
                for pwrite, ppipe in hits:
                    if not (pwrite or write):
                        continue  # read after read
                    if ppipe != pipe:
                        edges.append(Edge(p, pos, carried, max(slots, 1), ppipe, pipe))
                    if pwrite or (ppipe == pipe and not write):
                        stop = True  # a write orders everything before it; so does an in-order pipe
                if stop:
                    break
    return _prune(edges, n)


def _prune(edges: list[Edge], n: int) -> list[Edge]:
    """Drop an edge when another of the same pipe pair and kind starts later and ends earlier."""
    def key(e: Edge) -> tuple[int, int]:
        return (e.src - (n if e.carried else 0), e.dst)

    kept: list[Edge] = []
    uniq = {(e.src, e.dst, e.carried, e.slots, e.src_pipe, e.dst_pipe): e for e in edges}
    for e in uniq.values():
        se, de = key(e)
        dominated = False
        for f in uniq.values():
            if f is e or (f.src_pipe, f.dst_pipe, f.carried, f.slots) != (e.src_pipe, e.dst_pipe, e.carried, e.slots):
                continue
            sf, df = key(f)
            if sf >= se and df <= de and (sf, df) != (se, de):
                dominated = True
                break
        if not dominated:
            kept.append(e)
    return sorted(kept, key=lambda e: (e.dst, e.src))


class _Ids:
    def __init__(self, base: dict[tuple[Pipe, Pipe], int]):
        self.base = dict(base)
        self.used = dict(base)
        self.group: dict[tuple, int] = {}

    def get(self, e: Edge, loc: SourceLoc) -> int:
        g = (e.src_pipe, e.dst_pipe, e.carried, e.slots)
        if g not in self.group:
            pair = (e.src_pipe, e.dst_pipe)
            first = self.used.get(pair, 0)
            if first + e.slots > EVENT_IDS_PER_PAIR:
                raise KernelError("E304", f"this loop needs more than {EVENT_IDS_PER_PAIR} event ids between "
                                  f"{e.src_pipe.name} and {e.dst_pipe.name}", loc,
                                  "split the loop body into several loops, or use buffers=1")
            self.group[g] = first
            self.used[pair] = first + e.slots
        return self.group[g]


def _region(body: tuple[Stmt, ...], k: Kernel, loop: For | None,
            base: dict[tuple[Pipe, Pipe], int]) -> tuple[list[Stmt], tuple[Stmt, ...], list[Stmt]]:
    """Returns (statements before the loop, the new body, statements after the loop)."""
    n = len(body)
    items = [(pos, _keys(s, k)) for pos, s in enumerate(body)]
    # a buffer only a nested loop or if touches is that item's own business: its region syncs it,
    # and its drained flags order it against the next time round
    count: dict[object, int] = {}
    for _, keys in items:
        for key in {a[0] for a in keys}:
            count[key] = count.get(key, 0) + 1
    items = [(pos, [a for a in keys if count[a[0]] > 1 or not isinstance(body[pos], (For, If))])
             for pos, keys in items]
    items = [(pos, keys) for pos, keys in items if keys]
    # a dsl.range loop may read back what its previous iteration stored (read-modify-write of GM);
    # the iterations of a tile loop touch disjoint tiles
    edges = _edges(items, n, loop is not None, gm_carried=loop is not None and loop.kind == "range")
    ids = _Ids(base)

    def event(e: Edge) -> S.SExpr:
        b = ids.get(e, body[e.dst].loc)
        if e.slots <= 1 or loop is None:
            return S.const(b)
        return S.add(b, S.binary("%", S.var(loop.it), e.slots))  # one event id per slot (ping-pong, or three)

    waits: dict[int, list[Flag]] = {}
    sets: dict[int, list[Flag]] = {}
    pre: list[Stmt] = []
    post: list[Stmt] = []
    for e in edges:
        ev = event(e)
        loc = body[e.dst].loc
        waits.setdefault(e.dst, []).append(Flag(True, e.src_pipe, e.dst_pipe, ev, loc))
        sets.setdefault(e.src, []).append(Flag(False, e.src_pipe, e.dst_pipe, ev, body[e.src].loc))
        if e.carried:
            b0 = ids.get(e, loc)
            for sl in range(e.slots):
                pre.append(Flag(False, e.src_pipe, e.dst_pipe, S.const(b0 + sl), loop.loc if loop else loc))
                post.append(Flag(True, e.src_pipe, e.dst_pipe, S.const(b0 + sl), loop.loc if loop else loc))
    inner_base = ids.used
    out: list[Stmt] = []
    for pos, s in enumerate(body):
        out.extend(_dedup(waits.get(pos, [])))
        if isinstance(s, For) and _has_pipe_work(s.body):
            p0, nb, p1 = _region(s.body, k, s, inner_base)
            out.extend(p0)
            out.append(dataclasses.replace(s, body=nb))
            out.extend(p1)
        elif isinstance(s, If) and _has_pipe_work((s,)):
            _, t, _ = _region(s.then, k, None, inner_base)
            _, o, _ = _region(s.orelse, k, None, inner_base)
            out.append(dataclasses.replace(s, then=t, orelse=o))
        else:
            out.append(s)
        out.extend(_dedup(sets.get(pos, [])))
    return pre, tuple(out), post


def _dedup(flags: list[Flag]) -> list[Flag]:
    seen, out = set(), []
    for f in flags:
        key = (f.wait, f.src, f.dst, f.event)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def insert_sync(k: Kernel) -> Kernel:
    pre, body, post = _region(k.body, k, None, {})
    assert not pre and not post
    return dataclasses.replace(k, body=body)
