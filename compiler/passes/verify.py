"""The IR verifier: one rule per statement kind, run after every stage in tests (`verify(k, stage)`).

It checks what each stage promises the next: after `assign_units` every data movement has its
route and every vector/cube operand sits where its unit can read it; after `place_buffers` every
buffer has a placement inside its memory, 32-byte aligned; after `insert_sync` set/wait flags are
balanced in every loop body (and primes match drains) and event ids are in range.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.ir import (
    Buf,
    Check,
    Flag,
    For,
    If,
    Kernel,
    Load,
    LoadScalar,
    Mmad,
    Move,
    Print,
    SetVar,
    Stmt,
    Store,
    VIndexed,
    VOp,
    accesses,
)
from dsl.types import Mem
from simulator.isa import ATOMIC, EVENT_IDS_PER_PAIR, ROUTE, Instr

if TYPE_CHECKING:
    from simulator.config import HwConfig

ORDER = ("tile", "split_cores", "assign_units", "chunk_epilogues", "place_buffers", "insert_sync")


class VerifyError(AssertionError):
    pass


def verify(k: Kernel, stage: str, cfg: HwConfig | None = None) -> None:
    """Raise VerifyError if `k` breaks an invariant that should hold after `stage`."""
    done = ORDER.index(stage)
    defined = {p.name for p in k.params}
    _body(k, k.body, set(k.scalar_vars) | defined, done, cfg)


def _after(done: int, stage: str) -> bool:
    return done >= ORDER.index(stage)


def _body(k: Kernel, body: tuple[Stmt, ...], names: set[str], done: int, cfg: HwConfig | None) -> None:
    for s in body:
        _stmt(k, s, names, done, cfg)
    if _after(done, "insert_sync"):
        _balanced(body)


def _stmt(k: Kernel, s: Stmt, names: set[str], done: int, cfg: HwConfig | None) -> None:
    for e in _exprs(s):
        free = S.free_vars(e) - names
        if free:
            raise VerifyError(f"{type(s).__name__} at line {s.loc.line} reads undefined scalars {sorted(free)}")
    if isinstance(s, For):
        _body(k, s.body, names | {s.var, s.it}, done, cfg)
        return
    if isinstance(s, If):
        _body(k, s.then, names, done, cfg)
        _body(k, s.orelse, names, done, cfg)
        return
    if isinstance(s, (Load, Store, Move)) and _after(done, "assign_units"):
        if s.instr is None:
            raise VerifyError(f"{type(s).__name__} at line {s.loc.line} has no route")
        src, dst = ROUTE[s.instr]
        if isinstance(s, Load):
            ma, mb = Mem.GM, s.dst.mem
        elif isinstance(s, Store):
            ma, mb = s.src.mem, Mem.GM
        else:
            ma, mb = s.src.mem, s.dst.mem
        if (ma.value, mb.value) != (src.name, dst.name):
            raise VerifyError(f"{s.instr.name} at line {s.loc.line} moves {ma.value}->{mb.value}")
        if (s.instr in ATOMIC.values()) != (isinstance(s, Store) and s.atomic):
            raise VerifyError(f"{s.instr.name} at line {s.loc.line}: atomic instruction and statement disagree")
    if isinstance(s, VIndexed):
        _indexed(s)
    if isinstance(s, (VOp, VIndexed)) and _after(done, "assign_units"):
        for b in (s.dst, *s.srcs):
            if isinstance(b, Buf) and b.mem != Mem.UB:
                raise VerifyError(f"{s.instr.name} at line {s.loc.line} touches {b.name} in {b.mem.value}")
    if isinstance(s, VOp) and s.instr == Instr.VTRANSPOSE:
        tile = s.srcs[0] if len(s.srcs) == 1 else None
        if not isinstance(tile, Buf) or tile.rank != 2 or tile.dtype != s.dst.dtype or tile is s.dst:
            raise VerifyError(f"VTRANSPOSE at line {s.loc.line} needs one other 2-D tile of its dtype")
    if isinstance(s, Mmad) and _after(done, "assign_units"):
        if (s.a.mem, s.b.mem, s.dst.mem) != (Mem.L0A, Mem.L0B, Mem.L0C):
            raise VerifyError(f"mmad at line {s.loc.line} has operands in {s.a.mem}, {s.b.mem}, {s.dst.mem}")
    if _after(done, "place_buffers"):
        for b, _ in accesses(s):
            p = k.placement.get(b.id)
            if p is None:
                raise VerifyError(f"buffer {b.name} (line {b.loc.line}) has no placement")
            if p.mem != b.mem:
                raise VerifyError(f"buffer {b.name} is placed in {p.mem} but lives in {b.mem}")
            if p.offset.is_const:
                if p.offset.value % 32:
                    raise VerifyError(f"buffer {b.name} at offset {p.offset.value} is not 32-byte aligned")
                if cfg is not None and p.slot_bytes.is_const:
                    from compiler.passes.units import HW_MEM

                    end = p.offset.value + p.slot_bytes.value * p.slots
                    if end > cfg.capacity(HW_MEM[p.mem]):
                        raise VerifyError(f"buffer {b.name} ends at {end}, past {p.mem.value}")
    if isinstance(s, Flag):
        if s.src == s.dst:
            raise VerifyError(f"a flag from {s.src.name} to itself")
        if s.event.is_const and not 0 <= s.event.value < EVENT_IDS_PER_PAIR:
            raise VerifyError(f"event id {s.event.value} out of range")


def _exprs(s: Stmt) -> list[S.SExpr]:
    if isinstance(s, SetVar):
        return [s.value]
    if isinstance(s, For):
        return [s.start, s.stop, s.step]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, Check):
        return [s.cond, *s.values]
    if isinstance(s, Load):
        return [s.src.offset, s.src.rows, s.src.cols]
    if isinstance(s, Store):
        return [s.dst.offset, s.dst.rows, s.dst.cols]
    if isinstance(s, Mmad):
        return [s.m, s.n, s.k, s.init]
    if isinstance(s, LoadScalar):
        return [s.src.offset, s.src.numel]
    if isinstance(s, Print):
        return [i for i in s.items if isinstance(i, S.SExpr)]
    return []


def _indexed(s: VIndexed) -> None:
    """VARANGE has no operand; VGATHER gathers its table's dtype by an integer index tile of its shape."""
    if s.instr == Instr.VARANGE and not s.srcs:
        return
    if s.instr == Instr.VGATHER and len(s.srcs) == 2 and s.arg in ("rows", "cols"):
        table, index = s.srcs
        if table.dtype == s.dst.dtype and not index.dtype.is_float and index.cap == s.dst.cap \
                and s.dst not in (table, index):
            return
    raise VerifyError(f"{s.instr.name} at line {s.loc.line} has bad operands")


def _balanced(body: tuple[Stmt, ...]) -> None:
    """Within one body (a loop iteration, a branch, the kernel), every pipe pair sets as often as it
    waits; a loop's primes (sets just before it) match its drains (waits just after it)."""
    count: Counter = Counter()
    for s in body:
        if isinstance(s, Flag):
            count[(s.src, s.dst)] += -1 if s.wait else 1
    bad = {f"{a.name}->{b.name}": n for (a, b), n in count.items() if n}
    if bad:
        raise VerifyError(f"unbalanced flags in a body: {bad} (sets minus waits)")
