"""place_buffers: give every tile a memory, an offset, a row stride and its ping-pong slots.

- Rows are padded to 32 bytes and buffers start on 32-byte boundaries (the DMA block).
- A buffer that a DMA pipe touches inside a loop gets `buffers` slots (ping-pong), the slot in use
  being the loop's iteration count modulo the slots. By default two, or three for a tile three
  pipes pass along in turn (loaded, computed on in place, stored: MTE2 -> V -> MTE3, or FIX -> V
  -> MTE3), so all three overlap; when they do not fit, fewer.
- Elementwise results compute in place: a result takes the storage of an operand that dies at
  that instruction (`compiler.passes.lifetimes`), and the two are one buffer from then on (one
  lifetime, one slot selector, one hazard key for `insert_sync` through `Placement.share`).
- Vector-only temporaries with disjoint lifetimes share space (the V pipe is in order, so no
  flags are needed between them). DMA buffers keep their space for the whole kernel.
- Static sizes are checked against the memory's capacity here (E301, with hints from
  `compiler.passes.budget`); sizes that depend on tensor shapes get a runtime check that names the
  buffer.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.ir import Buf, Check, For, Kernel, Placement, Stmt
from compiler.passes import budget
from compiler.passes.carried import carried_read, init_flags
from compiler.passes.lifetimes import inplace_groups, scan
from compiler.passes.units import HW_MEM
from compiler.sexpr import SExpr
from dsl.errors import KernelError
from dsl.types import Mem
from simulator.isa import Pipe

if TYPE_CHECKING:
    from simulator.config import HwConfig

ALIGN = 32
CUBE_MEMS = (Mem.L1, Mem.L0A, Mem.L0B, Mem.L0C)
pretty_shape = budget.pretty_shape  # kept here for the modules that import it from place


def _row_stride(b: Buf) -> SExpr:
    """UB: columns padded to 32 bytes. Cube memories hold fractals (NZ): the 'row stride' is the
    padded column count, and rows are padded to 16 (see `fractal_pad`)."""
    if b.mem in CUBE_MEMS:
        return fractal_pad(b)[1]
    per = ALIGN // b.dtype.itemsize
    return S.align_up(b.cap[1], per)


def fractal_pad(b: Buf) -> tuple[SExpr, SExpr]:
    """Padded (rows, cols) of a buffer in a cube memory. L0C accumulators: both to 16. Operands
    (L1, L0A, L0B): both to max(16, c0) where c0 = 32 bytes of the element type is the fractal
    width (16 for f16/bf16/f32, 32 for i8), so every layout conversion agrees on the padding."""
    p = 16 if b.mem == Mem.L0C else max(16, ALIGN // b.dtype.itemsize)
    return S.align_up(b.cap[0], p), S.align_up(b.cap[1], p)


def buffers_option(k: Kernel) -> int | None:
    """The `buffers=` kernel option: 1 or 2 slots for every tile a DMA touches in a loop; None (not
    given): two, or three for a tile that three pipes pass along (loaded or moved in, computed on
    in place, stored), so that load, compute and store of consecutive tiles overlap."""
    n = k.options.get("buffers")
    if n is not None and (n not in (1, 2) or isinstance(n, bool)):
        raise KernelError("E207", f"buffers={n!r}: a kernel's tiles take 1 or 2 buffers", k.locs[0] if k.locs else None,
                          "@dsl.kernel(buffers=1) single-buffers every tile; buffers=2 double-buffers them all")
    return None if n is None else int(n)


def place_buffers(k: Kernel, cfg: HwConfig) -> Kernel:
    nbuf_default = buffers_option(k)
    placement: dict[int, Placement] = {}
    checks: list[Stmt] = []
    by_mem: dict[Mem, list[dict]] = {}
    flags = init_flags(k.body)
    for d in inplace_groups(scan(k.body)):
        b: Buf = d["buf"]
        slots = _slots(b, d, nbuf_default)
        loop = d["loops"][-1] if (slots > 1 and d["loops"]) else None
        if loop is not None and _carried(d, loop, flags):
            loop = None  # its value passes from one iteration to the next: the slots must not rotate
        slots = slots if loop is not None else 1
        stride = _row_stride(b)
        rows = fractal_pad(b)[0] if b.mem in CUBE_MEMS else b.cap[0]
        d.update(slots=slots, want_slots=slots, stride=stride,
                 slot_bytes=S.align_up(S.mul(S.mul(rows, stride), b.dtype.itemsize), ALIGN),
                 slot_of=S.binary("%", S.var(loop.it), slots) if loop is not None else None,
                 reusable=not d["dma"] and not b.explicit and slots == 1)
        by_mem.setdefault(b.mem, []).append(d)
    for mem, items in by_mem.items():
        cap_bytes = cfg.capacity(HW_MEM[mem])
        items.sort(key=lambda d: d["first"])
        static: list[dict] = []  # placed, constant size: d with "off", "end"
        regions: list[list[dict]] = []  # runtime regions, each shared by buffers of one size expression
        for d in sorted(items, key=lambda d: d["buf"].offset is None):  # explicit offsets first
            b = d["buf"]
            size = d["slot_bytes"]
            if b.offset is not None:
                _place_explicit(d, static, cap_bytes, mem, k)
                continue

            def dead(o: dict) -> bool:
                return d["reusable"] and o["reusable"] and o["last"] < d["first"]

            if size.is_const:
                total = size.value * d["slots"]
                live = [o for o in static if not dead(o)]
                spans = [(o["off"], o["end"]) for o in live]
                off = _first_fit(spans, total)
                for fewer in range(d["slots"] - 1, 0, -1):
                    if off + total <= cap_bytes or b.explicit:
                        break
                    # the slots asked for do not fit: fewer (with one, the pipes take turns)
                    at = _first_fit(spans, size.value * fewer)
                    if at + size.value * fewer <= cap_bytes:
                        loop = d["loops"][-1]
                        d.update(slots=fewer, slot_of=S.binary("%", S.var(loop.it), fewer) if fewer > 1 else None)
                        off, total = at, size.value * fewer
                if off + total > cap_bytes:
                    used = sum(e - s0 for s0, e in spans)
                    freed = sum(o["slot_bytes"].value * (o["slots"] - 1) for o in live if o["slots"] > 1
                                and not o["buf"].explicit)
                    raise budget.overflow(b, d["slots"], d["want_slots"], total, max(cap_bytes - used, 0), freed,
                                          mem, k)
                d.update(off=off, end=off + total)
                static.append(d)
            else:
                for i, region in enumerate(regions):
                    head = region[0]
                    if head["slot_bytes"] == size and head["slots"] == d["slots"] and all(dead(o) for o in region):
                        region.append(d)
                        break
                else:
                    regions.append([d])
        static_end = max((o["end"] for o in static), default=0)
        for d in static:
            _record(placement, d, mem, S.const(d["off"]))
        # runtime-sized regions go after every static buffer, each checked against the capacity
        end: SExpr = S.const(-(-static_end // ALIGN) * ALIGN)
        for region in regions:
            head = region[0]
            region_off = end
            end = S.add(region_off, S.mul(head["slot_bytes"], head["slots"]))
            for d in region:
                _record(placement, d, mem, region_off)
            checks.extend(_runtime_checks(head, region_off, end, cap_bytes, mem, k))
    body = tuple(checks) + k.body
    return dataclasses.replace(k, body=body, placement=placement)


def _record(placement: dict[int, Placement], d: dict, mem: Mem, off: SExpr) -> None:
    """The group's placement for each of its members; members after the first share its storage."""
    root = d["buf"]
    for b in d["members"]:
        placement[b.id] = Placement(mem, off, d["slot_bytes"], d["slots"], d["stride"], d["slot_of"],
                                    share=None if b is root else root.id)


def _place_explicit(d: dict, static: list[dict], cap_bytes: int, mem: Mem, k: Kernel) -> None:
    b = d["buf"]
    size = d["slot_bytes"]
    if not size.is_const:
        raise KernelError("E302", f"buffer '{b.name}' has an explicit offset but a runtime size", b.loc,
                          "give explicit buffers constant shapes")
    assert b.offset is not None
    total = size.value * d["slots"]
    for o in static:
        if b.offset < o["end"] and o["off"] < b.offset + total:
            raise KernelError("E302", f"buffer '{b.name}' at {mem.value}[{b.offset}:{b.offset + total}] "
                              f"overlaps '{o['buf'].name}' at [{o['off']}:{o['end']}]", b.loc,
                              "choose another offset, or leave the offset out")
    if b.offset + total > cap_bytes:
        raise budget.overflow(b, d["slots"], d["want_slots"], total, cap_bytes - b.offset, 0, mem, k)
    d.update(off=b.offset, end=b.offset + total)
    static.append(d)


def _runtime_checks(head: dict, region_off: SExpr, end: SExpr, cap_bytes: int, mem: Mem, k: Kernel) -> list[Check]:
    """E301 at launch for a runtime-sized region: whether one buffer fits, then two, then (if it has
    three) three, so `buffers=1` / `buffers=2` is suggested only when it would help. Each names the
    rows that would fit when a Const sizes the tile's rows."""
    b = head["buf"]
    slots = head["slots"]
    one = head["slot_bytes"]
    free = S.sub(cap_bytes, region_off)
    msg = f"tile of {budget.pretty_shape(b, k)} {b.dtype}{budget.what(b)} needs %d bytes"
    values: tuple[SExpr, ...] = (S.mul(one, slots),)
    if slots > 1:
        msg += f" ({slots} buffers of %d)"
        values += (one,)
    msg += f" but {mem.value} has %d bytes free"
    values += (free,)
    row_bytes = S.mul(head["stride"], b.dtype.itemsize)
    by_rows = b.rank == 2 and b.cap[0].is_const and mem not in CUBE_MEMS
    if by_rows:  # the rows that fit where this tile starts, with each slot count up to its own
        rows_free = S.binary("//", S.smax(free, 0), row_bytes)
        if slots > 1:
            msg += ("; at most %d rows fit double-buffered, %d single-buffered" if slots == 2 else
                    "; at most %d rows fit in 3 buffers, %d in 2, %d in 1")
            values += tuple(S.binary("//", rows_free, n) for n in range(slots, 0, -1))
        else:
            msg += "; at most %d rows fit"
            values += (rows_free,)
    out = []
    for n in range(1, slots + 1):  # the first that fails says which fewer slots would have fitted
        fits = end if n == slots else S.add(region_off, S.mul(one, n))
        fewer = "" if n == 1 else ("buffers=1" if n == 2 else "buffers=2")
        out.append(Check(S.binary("<=", fits, cap_bytes), "E301", msg, values,
                         budget.runtime_hint(b, k, fewer, n - 1), b.loc))
    return out


def _carried(d: dict, loop: For, flags: dict[str, set[int]]) -> bool:
    """Whether an iteration of `loop` may read the group's value from an earlier one (slots that
    rotate would hand it the other slot). An inferred tile then takes one slot (correct, the pipes
    take turns); an explicit multi-slot buffer is an error at its `dsl.alloc`."""
    read = carried_read(loop, {m.id for m in d["members"]}, flags)
    if read is None:
        return False
    b: Buf = d["buf"]
    if b.explicit:
        at = f"line {read.loc.line}" if read.loc.line > 0 else "a later statement"
        raise KernelError("E211", f"buffer '{b.name.split('.')[0]}' has buffers={b.buffers}, but the loop at line "
                          f"{loop.loc.line} reads in one iteration what an earlier one wrote into it", b.loc,
                          "the buffer carries a value from one iteration to the next, so its slots cannot "
                          "alternate: use buffers=1",
                          [f"{at} reads it before that iteration has written it (the write is conditional, "
                           "in a loop that may not run, or after the read)"])
    return True


def _slots(b: Buf, d: dict, default: int | None) -> int:
    if b.explicit:
        return b.buffers or 1
    if not d["dma"]:
        return 1
    if default is None:  # three pipes in turn (MTE2/FIX -> V -> MTE3): a third slot lets all of them overlap
        return 3 if len(d["pipes"] - {Pipe.S}) >= 3 else 2
    return default


def _first_fit(occupied: list[tuple[int, int]], size: int) -> int:
    off = 0
    for s, e in sorted(occupied):
        if off + size <= s:
            return off
        off = max(off, -(-e // ALIGN) * ALIGN)
    return off
