"""Host-side streaming: a window's GM -> UB loads, its vector instructions and its UB -> GM store done
in one pass over the window.

Each DMA and each vector instruction is its own loop over a UB buffer (`codegen_vector`), so an
elementwise kernel moves its data through the host's caches several times: `z[t] = x[t] + y[t]`
copies x and y into UB, adds them into a third buffer and copies that out. When those UB buffers
are never read again, the copies are unobservable (like the cube's GM -> L1 -> L0 `forwarding`):
the host can read x and y from GM, add and write z in one loop, as torch does.

A *stream group* is a run of statements in one body: UB loads (contiguous windows), elementwise
vector instructions and at most one UB store or one row / whole-tile reduction of a tile a member
wrote (either always the last member; a reduction's shape is its source's), all over the same extent
and capacity, with only flags, checks and barriers between them. Every member is still issued where it
stands: its bounds checks and trace event are emitted in place, so events, flags, cycles and traces
are unchanged. Their data work happens once, at the last member (after every check of the group has
passed), in one loop over the extent in which each element goes through the members in order:

  - a loaded value comes straight from GM, a stored one goes straight to GM;
  - a member's result is kept in a register, rounded to its buffer's dtype (f16/bf16 round per
    instruction, as in UB), and written to UB only if something outside the group reads that buffer
    (anywhere in the kernel, e.g. softmax's `e` that a reduction reads afterwards);
  - UB buffers the group reads but does not write (`(R, 1)` / `(C,)` broadcasts, a row that a
    reduction read first) are read from UB, broadcast by capacity as `vop_data` does;
  - a reduction takes the values in registers (`codegen_stream_reduce`: the same bits as from UB).

A large stored tensor (`STREAM_BYTES`) is written as the unfused store writes it: each row is put in
the store's UB buffer and copied out with non-temporal stores (`nt_copy`). The pass does not
prefetch: the hardware follows its few sequential streams (software read-ahead measured no gain).

The fused pass runs only when a runtime test says it computes what the separate instructions do:
every DMA window is exactly the extent (else UB would hold stale elements), no GM window the group
writes overlaps one it reads (aliased tensors) unless it is the same window element for element,
and likewise in UB. Otherwise the members' own data work runs, in order. Planning (`plan_body`) is
a pure function of the Core IR; `describe` lists the groups for tests and dumps. The interpreter
keeps executing instruction by instruction, and the results agree bit for bit.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compiler import sexpr as S
from compiler.backend.codegen_elem import (
    elem_op,
    ety,
    gen_reduce,
    i64_of,
    load_elem,
    reduce_event,
    scalar_as,
    store_elem,
)
from compiler.backend.codegen_stream_reduce import fusable_reduction, fused_reduce, out_span
from compiler.backend.codegen_vector import (
    STREAM_BYTES,
    Window,
    dma_checks,
    dma_data,
    nt_copy,
    scalar_type,
    vop_data,
    vop_event,
)
from compiler.backend.convert import round_to
from compiler.extents import dyn_broadcasts
from compiler.ir import (
    REDUCE,
    Barrier,
    Buf,
    Check,
    Flag,
    For,
    If,
    Kernel,
    Load,
    Stmt,
    Store,
    VOp,
    access_counts,
    accesses,
    broadcasts,
)
from compiler.sexpr import SExpr
from dsl.types import Mem
from simulator.isa import Instr

if TYPE_CHECKING:
    from compiler.backend.gen import Gen

Member = Load | Store | VOp
PASS_THROUGH = (Flag, Check, Barrier)  # may stand between members: they touch no buffer or GM


@dataclass
class Group:
    """One stream group of a body: `index` are the members' positions, `stmts` the members."""

    index: list[int]
    stmts: list[Member]
    cap: tuple[SExpr, SExpr]
    ext: tuple[SExpr, SExpr]
    internal: set[int] = field(default_factory=set)  # ids of buffers never written to UB
    windows: dict[int, Window] = field(default_factory=dict)  # filled during codegen

    @property
    def last(self) -> int:
        return self.index[-1]


# ------------------------------------------------------------------ planning
def _shape_buf(s: Member) -> Buf:
    """The buffer whose capacity and extent the member covers (a reduction's: its source)."""
    if isinstance(s, Store):
        return s.src
    if _reduction(s):
        assert isinstance(s, VOp) and isinstance(s.srcs[0], Buf)
        return s.srcs[0]
    return s.dst


def _reduction(s: Stmt) -> bool:
    return isinstance(s, VOp) and s.instr in REDUCE


def candidate(s: Stmt) -> bool:
    """Whether `s` can be a member of a stream group at all."""
    if isinstance(s, Load):
        return (s.instr is not None and s.dst.mem == Mem.UB and s.src.step is None
                and s.src.dtype == s.dst.dtype)
    if isinstance(s, Store):
        return (s.instr is not None and s.src.mem == Mem.UB and s.dst.step is None and s.fix is None
                and s.dst.dtype == s.src.dtype and not s.atomic)
    if isinstance(s, VOp) and s.instr in REDUCE:  # only as the last member, of a tile a member wrote
        return fusable_reduction(s)
    if isinstance(s, VOp):
        return (s.instr not in REDUCE and s.instr not in (Instr.VTRANSPOSE, Instr.VRAND, Instr.VRANDINT)
                and s.dst.mem == Mem.UB
                and all(b.mem == Mem.UB for b in s.srcs if isinstance(b, Buf)))
    return False


def _reads(s: Member) -> list[Buf]:
    return [b for b, w in accesses(s) if not w]


def plan_body(body: tuple[Stmt, ...], use: dict[int, list[int]]) -> list[Group]:
    """The stream groups of one statement list (not of nested bodies)."""
    groups: list[Group] = []
    cur: Group | None = None
    written: set[int] = set()  # buffers the open group's members write
    external: set[int] = set()  # buffers the open group reads but did not write first

    def close() -> None:
        if cur is not None and len(cur.stmts) >= 2:
            finish(cur, use)
            groups.append(cur)

    for i, s in enumerate(body):
        if isinstance(s, PASS_THROUGH):
            continue
        if cur is not None and isinstance(s, (Load, Store, VOp)) and candidate(s):
            m: Member = s
            sb = _shape_buf(m)
            outs = [b.id for b, w in accesses(m) if w]
            if (_same_shape(sb, cur) and not any(o in external for o in outs)
                    and all(b.id in written or b.id not in outs for b in _reads(m))
                    and (not _reduction(m) or sb.id in written)):
                cur.index.append(i)
                cur.stmts.append(m)
                external.update(b.id for b in _reads(m) if b.id not in written)
                written.update(outs)
                if isinstance(m, Store) or _reduction(m):  # a store ends its group: nothing may fail after
                    close()                                   # GM is written; so does a reduction
                    cur = None
                continue
        close()
        cur = None
        if isinstance(s, (Load, VOp)) and candidate(s) and not _reduction(s):
            sb = _shape_buf(s)
            cur = Group([i], [s], sb.cap, sb.ext)
            external = {b.id for b in _reads(s)}
            written = {b.id for b, w in accesses(s) if w}
            if external & written:  # in place on itself: leave it alone
                cur = None
    close()
    return groups


def finish(grp: Group, use: dict[int, list[int]]) -> None:
    """Mark the buffers whose only writer is a member and whose every reader is a later member."""
    for j, s in enumerate(grp.stmts):
        if _reduction(s):  # its results always go to UB
            continue
        for b, w in accesses(s):
            if not w or b.mem != Mem.UB:
                continue
            later = sum(1 for t in grp.stmts[j + 1:] for x, wx in accesses(t) if x is b and not wx)
            if use.get(b.id, [0, 0]) == [later, 1]:
                grp.internal.add(b.id)


class Streams:
    """The stream groups of a kernel, planned per body on first use (keyed by the body's identity)."""

    def __init__(self, k: Kernel):
        self.use = access_counts(k.body)
        self._bodies: dict[int, tuple[tuple[Stmt, ...], dict[int, Group]]] = {}
        self.emitted = 0  # groups whose fused pass was generated

    def groups(self, body: tuple[Stmt, ...]) -> dict[int, Group]:
        """position in `body` -> its group, for every member of every group of `body`."""
        hit = self._bodies.get(id(body))
        if hit is not None and hit[0] is body:
            return hit[1]
        out = {i: grp for grp in plan_body(body, self.use) for i in grp.index}
        self._bodies[id(body)] = (body, out)
        return out


def describe(k: Kernel) -> list[str]:
    """One line per stream group of the kernel: its members and the UB buffers it still writes."""
    use = access_counts(k.body)
    out: list[str] = []

    def walk(b: tuple[Stmt, ...]) -> None:
        for grp in plan_body(b, use):
            names = []
            for m in grp.stmts:
                if isinstance(m, VOp):
                    names.append(m.instr.name)
                else:
                    assert m.instr is not None
                    names.append(f"{m.instr.name} {m.src.name if isinstance(m, Load) else m.dst.name}")
            ub = sorted({f"%{x.name}" for m in grp.stmts for x, w in accesses(m) if w and x.id not in grp.internal})
            out.append(f"line {grp.stmts[0].loc.line}: " + ", ".join(names) + f" (UB written: {', '.join(ub) or 'none'})")
        for s in b:
            if isinstance(s, For):
                walk(s.body)
            elif isinstance(s, If):
                walk(s.then)
                walk(s.orelse)

    walk(k.body)
    return out


# ------------------------------------------------------------------ codegen
def gen_member(g: Gen, grp: Group, i: int, s: Member) -> None:
    """Issue member `s` (position `i`) of `grp`: its checks and event now, its data with the group."""
    if i == grp.index[0]:
        grp.windows = {}
    if _reduction(s):
        assert isinstance(s, VOp)
        reduce_event(g, s)
    elif isinstance(s, VOp):
        vop_event(g, s)
    else:
        assert s.instr is not None, "units are assigned by the schedule"
        if isinstance(s, Load):
            grp.windows[i] = dma_checks(g, s.instr, s.src, s.dst, True, s.loc)
        else:
            grp.windows[i] = dma_checks(g, s.instr, s.dst, s.src, False, s.loc)
    if i != grp.last:
        return
    assert g.streams is not None, "members exist only when streaming"
    g.streams.emitted += 1
    ok = _fusable(g, grp)
    fused, alone, done = g.label("stream"), g.label("unfused"), g.label("streamed")
    g.cbr(ok, fused, alone)
    g.block(fused)
    g.cache.append({})
    _fused_pass(g, grp)
    g.cache.pop()
    g.br(done)
    g.block(alone)
    g.cache.append({})
    for j, t in zip(grp.index, grp.stmts):
        if _reduction(t):
            assert isinstance(t, VOp)
            gen_reduce(g, t, event=False)
        elif isinstance(t, VOp):
            vop_data(g, t)
        else:
            dma_data(g, grp.windows[j])
    g.cache.pop()
    g.br(done)
    g.block(done)


def _same_shape(b: Buf, grp: Group) -> bool:
    """Whether `b` may be a member's shape in `grp`: the group's capacity and extent, or (a runtime
    broadcast, `compiler.extents`) extents that `_fusable` compares at run time, with a static 1
    in the same dimensions (so static broadcasts read the same way)."""
    if b.cap == grp.cap and b.ext == grp.ext:
        return True
    one = S.const(1)
    return all((b.cap[d] == one) == (grp.cap[d] == one) for d in (0, 1))


def _fusable(g: Gen, grp: Group) -> str:
    """i1: the one-pass form computes exactly what the members do one after another."""
    rows, cols = (i64_of(g, e) for e in grp.ext)
    conds = []
    for m in grp.stmts:  # members whose extent is only equal at run time; no runtime broadcast taken
        sb = _shape_buf(m)
        if sb.ext != grp.ext and not isinstance(m, Load):  # (a load's window is compared below)
            conds.append(g.op(f"icmp eq i64 {i64_of(g, sb.ext[0])}, {rows}"))
            conds.append(g.op(f"icmp eq i64 {i64_of(g, sb.ext[1])}, {cols}"))
        if not isinstance(m, VOp) or _reduction(m):
            continue
        for x in m.srcs:
            if not isinstance(x, Buf):
                continue
            for d, dyn in enumerate(dyn_broadcasts(x, m.dst)):
                if dyn:  # read element by element: its extent must be the destination's
                    conds.append(g.op(f"icmp eq i64 {i64_of(g, x.ext[d])}, {i64_of(g, m.dst.ext[d])}"))
    for w in grp.windows.values():  # every window is the extent: no stale UB elements are moved
        conds.append(g.op(f"icmp eq i64 {w.rows}, {rows}"))
        conds.append(g.op(f"icmp eq i64 {w.cols}, {cols}"))
    # memory the pass writes against memory it reads (and writes): apart, or the same element for element
    reads: list[Span] = []
    writes: list[Span] = []
    for w in grp.windows.values():
        base = g.op(f"ptrtoint ptr {g.gm_ptr(w.ref.arg)} to i64")
        start = g.op(f"add i64 {base}, {g.op(f'mul i64 {w.off}, {w.es}')}")
        end = g.op(f"add i64 {base}, {g.op(f'mul i64 {w.last}, {w.es}')}")
        (reads if w.is_load else writes).append(Span(Mem.GM, start, end, g.op(f"mul i64 {w.stride}, {w.es}"), w.es))
    for b, bc, is_write in _ub_operands(grp):
        p, st = g.buf_ptr(b)
        start = g.op(f"ptrtoint ptr {p} to i64")
        nr = "1" if bc[0] else rows
        nc = "1" if bc[1] else cols
        rm1 = g.op(f"sub i64 {nr}, 1")
        span = g.op(f"add i64 {g.op(f'mul i64 {rm1}, {st}')}, {nc}")
        es = b.dtype.itemsize
        end = g.op(f"add i64 {start}, {g.op(f'mul i64 {span}, {es}')}")
        (writes if is_write else reads).append(Span(Mem.UB, start, end, g.op(f"mul i64 {st}, {es}"), es,
                                                    bc[0] or bc[1]))
    red = grp.stmts[-1]
    if _reduction(red):  # its results: apart from everything else the pass reads and writes
        assert isinstance(red, VOp)
        start, end, stride = out_span(g, red)
        writes.append(Span(Mem.UB, start, end, stride, red.dst.dtype.itemsize, True))
    for i, a in enumerate(writes):
        for o in reads + writes[i + 1:]:
            if a.mem != o.mem:
                continue
            apart = g.op(f"or i1 {g.op(f'icmp sle i64 {a.end}, {o.start}')}, {g.op(f'icmp sle i64 {o.end}, {a.start}')}")
            if a.es == o.es and not (a.bcast or o.bcast):
                same = g.op(f"and i1 {g.op(f'icmp eq i64 {a.start}, {o.start}')}, "
                            f"{g.op(f'icmp eq i64 {a.stride}, {o.stride}')}")
                apart = g.op(f"or i1 {apart}, {same}")
            conds.append(apart)
    ok = "true"
    for c in conds:
        ok = g.op(f"and i1 {ok}, {c}")
    return ok


def _staged(grp: Group) -> Buf | None:
    """The buffer a group's store writes out when a member produces it: for a large tensor the pass
    puts that row in UB and copies it out non-temporally (`nt_copy`), as the unfused store does."""
    st = grp.stmts[-1]
    if isinstance(st, Store) and any(x is st.src for t in grp.stmts[:-1] for x, w in accesses(t) if w):
        return st.src
    return None


@dataclass
class Span:
    """Bytes [start, end) of one memory that a pass reads or writes (i64 SSA values)."""

    mem: Mem
    start: str
    end: str
    stride: str  # bytes between rows
    es: int
    bcast: bool = False


def _ub_operands(grp: Group) -> list[tuple[Buf, tuple[bool, bool], bool]]:
    """UB buffers the pass touches: (buffer, broadcast (rows, cols), written), each once."""
    out: list[tuple[Buf, tuple[bool, bool], bool]] = []
    seen: set[int] = set()
    written: set[int] = set()
    shape = Buf(-1, "", _shape_buf(grp.stmts[0]).dtype, 2, grp.cap, grp.ext)
    staged = _staged(grp)
    for s in grp.stmts:
        if _reduction(s):  # (its results are not of the group's shape: `out_span`)
            continue
        for b, w in accesses(s):
            if w:
                written.add(b.id)
                if (b.id not in grp.internal or b is staged) and b.id not in seen:
                    seen.add(b.id)
                    out.append((b, (False, False), True))
            elif b.id not in written and b.id not in seen:
                seen.add(b.id)
                out.append((b, broadcasts(b, shape), False))
    return out


def _fused_pass(g: Gen, grp: Group) -> None:
    rows, cols = (i64_of(g, e) for e in grp.ext)
    bufs = {b.id: (b, bc, g.buf_ptr(b)) for b, bc, _ in _ub_operands(grp)}
    scalars: dict[tuple[int, int], str] = {}
    for j, s in enumerate(grp.stmts):
        if isinstance(s, VOp):
            for k, src in enumerate(s.srcs):
                if isinstance(src, SExpr):
                    scalars[(j, k)] = scalar_as(g, src, scalar_type(s, s.dst.dtype))
    gms = {j: g.gm_ptr(w.ref.arg) for j, w in grp.windows.items()}
    staged = _staged(grp)

    def row_ptrs(r: str) -> tuple[dict[Any, str], dict[int, str]]:
        """Row r's pointers (GM windows by member position, UB buffers by id) and the values of the
        column-broadcast operands."""
        rowp: dict[Any, str] = {}
        for j, w in grp.windows.items():
            e = g.op(f"add i64 {w.off}, {g.op(f'mul i64 {r}, {w.stride}')}")
            rowp[("gm", j)] = g.op(f"getelementptr {ety(w.ref.dtype)}, ptr {gms[j]}, i64 {e}")
        for bid, (b, bc, (p, st)) in bufs.items():
            first = "0" if bc[0] else r
            rowp[bid] = g.op(f"getelementptr {ety(b.dtype)}, ptr {p}, i64 {g.op(f'mul i64 {first}, {st}')}")
        once = {bid: load_elem(g, b.dtype, rowp[bid]) for bid, (b, bc, _) in bufs.items()
                if bc[1]}  # a column broadcast: one value per row
        return rowp, once

    def element(rowp: dict[Any, str], once: dict[int, str], c: str, nt: bool,
                defer: list[tuple[Any, str, str]] | None = None) -> dict[int, str]:
        """Column c of a row through the members (a reduction excepted): buffer id -> its value. With
        `defer`, UB writes are appended there (dtype, pointer, value) for the caller to emit later."""
        vals: dict[int, str] = {}

        def value(b: Buf) -> str:
            v = vals.get(b.id)
            if v is None:
                v = once.get(b.id)
            if v is None:
                v = vals[b.id] = load_elem(g, b.dtype, g.op(f"getelementptr {ety(b.dtype)}, ptr {rowp[b.id]}, i64 {c}"))
            return v

        def put(b: Buf, v: str) -> None:
            vals[b.id] = v
            if b.id not in grp.internal or (nt and b is staged):
                p = g.op(f"getelementptr {ety(b.dtype)}, ptr {rowp[b.id]}, i64 {c}")
                if defer is None:
                    store_elem(g, b.dtype, p, v)
                else:
                    defer.append((b.dtype, p, v))

        for j, (pos, s) in enumerate(zip(grp.index, grp.stmts)):
            if isinstance(s, Load):
                gp = g.op(f"getelementptr {ety(s.dst.dtype)}, ptr {rowp[('gm', pos)]}, i64 {c}")
                put(s.dst, load_elem(g, s.dst.dtype, gp))
            elif isinstance(s, Store):
                if not (nt and s.src is staged):
                    gp = g.op(f"getelementptr {ety(s.src.dtype)}, ptr {rowp[('gm', pos)]}, i64 {c}")
                    store_elem(g, s.src.dtype, gp, value(s.src))
            elif not _reduction(s):  # (a reduction is last: fused_reduce takes the values)
                xs, types = [], []
                for k, src in enumerate(s.srcs):
                    if isinstance(src, Buf):
                        xs.append(value(src))
                        types.append(src.dtype)
                    else:
                        xs.append(scalars[(j, k)])
                        types.append(scalar_type(s, s.dst.dtype))
                v = elem_op(g, s, xs, types)
                if s.dst.dtype.llvm in ("half", "bfloat"):  # what UB would hold
                    v = round_to(g, v, s.dst.dtype.llvm)
                put(s.dst, v)
        return vals

    def row(r: str, nt: bool) -> None:
        rowp, once = row_ptrs(r)
        g.loop(cols, lambda c: element(rowp, once, c, nt))
        out = grp.stmts[-1]
        if nt and isinstance(out, Store):  # the row, in UB, out to GM
            nt_copy(g, rowp[("gm", grp.last)], rowp[out.src.id], g.op(f"mul i64 {cols}, {out.src.dtype.itemsize}"))

    red = grp.stmts[-1]
    if _reduction(red):  # the reduced tile's elements straight into registers
        assert isinstance(red, VOp) and isinstance(red.srcs[0], Buf)
        rid = red.srcs[0].id

        def row_elems(r: str) -> Callable[..., str]:
            rowp, once = row_ptrs(r)
            return lambda c, defer=None: element(rowp, once, c, False, defer)[rid]

        fused_reduce(g, red, rows, cols, row_elems)
        return
    if not isinstance(red, Store):
        g.loop(rows, lambda r: row(r, False))
        return
    w = grp.windows[grp.last]
    big = g.op(f"icmp sge i64 {g.op(f'mul i64 {w.numel}, {w.es}')}, {STREAM_BYTES}")
    lab_nt, lab_c, lab_done = g.label("ntpass"), g.label("pass"), g.label("passed")
    g.cbr(big, lab_nt, lab_c)
    for lab, nt in ((lab_nt, True), (lab_c, False)):
        g.block(lab)
        g.cache.append({})
        g.loop(rows, lambda r, nt=nt: row(r, nt))  # type: ignore[misc]
        g.cache.pop()
        g.br(lab_done)
    g.block(lab_done)
