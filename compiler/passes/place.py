"""place_buffers: give every tile a memory, an offset, a row stride and its ping-pong slots.

- Rows are padded to 32 bytes and buffers start on 32-byte boundaries (the DMA block).
- A buffer that a DMA pipe touches inside a loop gets `buffers` slots (2 by default: ping-pong),
  the slot in use being the loop's iteration count modulo the slots.
- Vector-only temporaries with disjoint lifetimes share space (the V pipe is in order, so no
  flags are needed between them). DMA buffers keep their space for the whole kernel.
- Static sizes are checked against the memory's capacity here (E301); sizes that depend on
  tensor shapes get a runtime check that names the buffer.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.ir import Buf, Check, For, If, Kernel, Load, Move, Placement, Print, Stmt, Store, VOp, accesses
from compiler.passes.units import HW_MEM
from compiler.sexpr import SExpr
from dsl.errors import KernelError, fmt_bytes
from dsl.types import Mem
from simulator.isa import Instr

if TYPE_CHECKING:
    from simulator.config import HwConfig

REDUCE_OPS = (Instr.VREDUCE_SUM, Instr.VREDUCE_MAX, Instr.VREDUCE_MIN)

ALIGN = 32




def _scan(body: tuple[Stmt, ...], loops: list[For], pos: list[int], info: dict[int, dict]) -> None:
    """Collect per buffer: first/last position, whether a DMA touches it, the loops around all uses."""
    for s in body:
        pos[0] += 1
        if isinstance(s, For):
            start = pos[0]
            _scan(s.body, loops + [s], pos, info)
            for u in info.values():
                # used inside this loop but created before it: it lives through the whole loop
                if id(s) in u["touch_loops"] and u["first"] < start:
                    u["last"] = max(u["last"], pos[0])
            continue
        if isinstance(s, If):
            _scan(s.then, loops, pos, info)
            _scan(s.orelse, loops, pos, info)
            continue
        for b, _w in accesses(s):
            d = info.get(b.id)
            if d is None:
                d = info[b.id] = {"buf": b, "first": pos[0], "last": pos[0], "dma": False, "loops": list(loops),
                                  "touch_loops": set(), "def_stmt": s}
            d["last"] = max(d["last"], pos[0])
            d["touch_loops"] |= {id(x) for x in loops}
            common = []  # the loops enclosing every access
            for a, b2 in zip(d["loops"], loops):
                if a is not b2:
                    break
                common.append(a)
            d["loops"] = common
            if isinstance(s, (Load, Store, Move, Print)):
                d["dma"] = True


CUBE_MEMS = (Mem.L1, Mem.L0A, Mem.L0B, Mem.L0C)


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


def _inplace_ok(o: dict, d: dict) -> bool:
    """May d's buffer take o's space at the very instruction where o dies? Only for an elementwise
    op that reads o at the same index it writes d (same dtype size and capacity, no broadcast)."""
    s = d["def_stmt"]
    ob, db = o["buf"], d["buf"]
    if not isinstance(s, VOp) or s.dst is not db or s.instr in REDUCE_OPS or o["last"] != d["first"]:
        return False
    return any(x is ob for x in s.srcs) and ob.cap == db.cap and ob.dtype.itemsize == db.dtype.itemsize


def place_buffers(k: Kernel, cfg: HwConfig) -> Kernel:
    info: dict[int, dict] = {}
    _scan(k.body, [], [0], info)
    nbuf_default = int(k.options.get("buffers", 2))
    placement: dict[int, Placement] = {}
    checks: list[Stmt] = []
    by_mem: dict[Mem, list[dict]] = {}
    for d in info.values():
        b: Buf = d["buf"]
        slots = _slots(b, d, nbuf_default)
        loop = d["loops"][-1] if (slots > 1 and d["loops"]) else None
        slots = slots if loop is not None else 1
        stride = _row_stride(b)
        rows = fractal_pad(b)[0] if b.mem in CUBE_MEMS else b.cap[0]
        d.update(slots=slots, stride=stride,
                 slot_bytes=S.align_up(S.mul(S.mul(rows, stride), b.dtype.itemsize), ALIGN),
                 slot_of=S.binary("%", S.var(loop.it), slots) if loop is not None else None,
                 reusable=not d["dma"] and not b.explicit and slots == 1)
        by_mem.setdefault(b.mem, []).append(d)
    for mem, items in by_mem.items():
        cap_bytes = cfg.capacity(HW_MEM[mem])
        items.sort(key=lambda d: d["first"])
        static: list[dict] = []  # placed, constant size: d with "off", "end"
        dynamic: list[dict] = []  # placed, runtime size: d with "slot" index into regions
        regions: list[list[dict]] = []  # runtime regions, each shared by buffers of one size expression
        for d in sorted(items, key=lambda d: d["buf"].offset is None):  # explicit offsets first
            b = d["buf"]
            size = d["slot_bytes"]
            if b.offset is not None:
                if not size.is_const:
                    raise KernelError("E302", f"buffer '{b.name}' has an explicit offset but a runtime size", b.loc,
                                      "give explicit buffers constant shapes")
                total = size.value * d["slots"]
                for o in static:
                    if b.offset < o["end"] and o["off"] < b.offset + total:
                        raise KernelError("E302", f"buffer '{b.name}' at {mem.value}[{b.offset}:{b.offset + total}] "
                                          f"overlaps '{o['buf'].name}' at [{o['off']}:{o['end']}]", b.loc,
                                          "choose another offset, or leave the offset out")
                if b.offset + total > cap_bytes:
                    raise _overflow(b, d, total, cap_bytes - b.offset, mem, k)
                d.update(off=b.offset, end=b.offset + total)
                static.append(d)
                continue

            def dead(o: dict) -> bool:
                return d["reusable"] and o["reusable"] and (o["last"] < d["first"] or _inplace_ok(o, d))

            if size.is_const:
                total = size.value * d["slots"]
                live = [(o["off"], o["end"]) for o in static if not dead(o)]
                off = _first_fit(live, total)
                if off + total > cap_bytes and d["slots"] > 1 and not b.explicit:
                    # double buffering does not fit: keep one buffer (the pipes then take turns)
                    single = _first_fit(live, size.value)
                    if single + size.value <= cap_bytes:
                        d.update(slots=1, slot_of=None)
                        off, total = single, size.value
                if off + total > cap_bytes:
                    used = sum(e - s0 for s0, e in live)
                    raise _overflow(b, d, total, max(cap_bytes - used, 0), mem, k)
                d.update(off=off, end=off + total)
                static.append(d)
            else:
                for i, region in enumerate(regions):
                    head = region[0]
                    if head["slot_bytes"] == size and head["slots"] == d["slots"] and all(dead(o) for o in region):
                        region.append(d)
                        d["region"] = i
                        break
                else:
                    d["region"] = len(regions)
                    regions.append([d])
                dynamic.append(d)
        static_end = max((o["end"] for o in static), default=0)
        for d in static:
            b = d["buf"]
            placement[b.id] = Placement(mem, S.const(d["off"]), d["slot_bytes"], d["slots"], d["stride"], d["slot_of"])
        # runtime-sized regions go after every static buffer, each checked against the capacity
        end: SExpr = S.const(-(-static_end // ALIGN) * ALIGN)
        for region in regions:
            head = region[0]
            region_off = end
            end = S.add(region_off, S.mul(head["slot_bytes"], head["slots"]))
            for d in region:
                placement[d["buf"].id] = Placement(mem, region_off, d["slot_bytes"], d["slots"], d["stride"], d["slot_of"])
            b = head["buf"]
            shape = pretty_shape(b, k)
            slots = head["slots"]
            checks.append(Check(S.binary("<=", end, cap_bytes), "E301",
                                f"tile of {shape} {b.dtype}{_what(b)} needs %d bytes"
                                f"{f' ({slots} buffers)' if slots > 1 else ''} but {mem.value} has %d bytes free",
                                (S.mul(head["slot_bytes"], slots), S.sub(cap_bytes, region_off)),
                                "lower the tile size (a smaller Const)" + (" or use buffers=1" if slots > 1 else ""),
                                b.loc))
    body = tuple(checks) + k.body
    return dataclasses.replace(k, body=body, placement=placement)


def pretty_shape(b: Buf, k: Kernel) -> str:
    """'8xn' style, naming shape words after the tensor they come from (x.shape[1])."""
    names = {}
    for p in k.params:
        if p.kind == "gm":
            for i in range(p.rank):
                names[p.slot + 2 + i] = f"{p.name}.shape[{i}]"

    def one(e: SExpr) -> str:
        if e.op == "arg" and e.args[0] in names:
            return names[e.args[0]]
        if e.op == "const":
            return str(e.value)
        return S.fmt(e)

    dims = b.cap if b.rank == 2 else b.cap[1:]
    if all(x.is_const for x in dims):
        return "x".join(one(x) for x in dims)
    return "[" + ", ".join(one(x) for x in dims) + "]"


def _what(b: Buf) -> str:
    name = b.name.split(".")[0]
    return "" if name.startswith("t") and name[1:].isdigit() else f" for '{name}'"


def _slots(b: Buf, d: dict, default: int) -> int:
    if b.explicit:
        return b.buffers or 1
    return default if d["dma"] else 1


def _first_fit(occupied: list[tuple[int, int]], size: int) -> int:
    off = 0
    for s, e in sorted(occupied):
        if off + size <= s:
            return off
        off = max(off, -(-e // ALIGN) * ALIGN)
    return off


def _overflow(b: Buf, d: dict, total: int, free: int, mem: Mem, k: Kernel) -> KernelError:
    slots = d["slots"]
    shape = pretty_shape(b, k)
    per = f" ({slots} buffers of {fmt_bytes(total // slots)})" if slots > 1 else ""
    hint = "lower the tile size (a smaller Const)"
    if slots > 1:
        hint += " or use buffers=1"
    return KernelError("E301", f"tile of {shape} {b.dtype}{_what(b)} needs {fmt_bytes(total)} "
                       f"({total} bytes){per} but {mem.value} has {fmt_bytes(free)} ({free} bytes) free", b.loc, hint)
