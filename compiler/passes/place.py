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

from compiler import sexpr as S
from compiler.ir import Buf, Check, For, If, Kernel, Load, Move, Placement, Print, Stmt, Store, VOp, accesses
from compiler.sexpr import SExpr
from dsl.errors import KernelError, fmt_bytes
from dsl.types import Mem
from compiler.passes.units import HW_MEM

ALIGN = 32




def _scan(body: tuple[Stmt, ...], loops: list[For], pos: list[int], info: dict[int, dict]) -> None:
    """Collect per buffer: first/last position, whether a DMA touches it, the loops around all uses."""
    for s in body:
        pos[0] += 1
        if isinstance(s, For):
            start = pos[0]
            _scan(s.body, loops + [s], pos, info)
            for d in info.values():
                # used inside this loop but created before it: it lives through the whole loop
                if id(s) in d["touch_loops"] and d["first"] < start:
                    d["last"] = max(d["last"], pos[0])
            continue
        if isinstance(s, If):
            _scan(s.then, loops, pos, info)
            _scan(s.orelse, loops, pos, info)
            continue
        for b, _w in accesses(s):
            d = info.get(b.id)
            if d is None:
                d = info[b.id] = {"buf": b, "first": pos[0], "last": pos[0], "dma": False, "loops": list(loops),
                                  "touch_loops": set()}
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


def _row_stride(b: Buf) -> SExpr:
    per = ALIGN // b.dtype.itemsize
    return S.align_up(b.cap[1], per)


def place_buffers(k: Kernel, cfg) -> Kernel:  # type: ignore[no-untyped-def]
    info: dict[int, dict] = {}
    _scan(k.body, [], [0], info)
    nbuf_default = int(k.options.get("buffers", 2))
    placement: dict[int, Placement] = {}
    checks: list[Stmt] = []
    by_mem: dict[Mem, list[dict]] = {}
    for d in info.values():
        by_mem.setdefault(d["buf"].mem, []).append(d)
    for mem, items in by_mem.items():
        cap_bytes = cfg.capacity(HW_MEM[mem])
        items.sort(key=lambda d: d["first"])
        occupied: list[tuple[int, int, int, Buf]] = []  # (start, end, last_use or big, buf)
        runtime_end: SExpr | None = None
        static_end = 0
        # explicit offsets first
        for d in items:
            b: Buf = d["buf"]
            slots = _slots(b, d, nbuf_default)
            stride = _row_stride(b)
            slot_bytes = S.align_up(S.mul(S.mul(b.cap[0], stride), b.dtype.itemsize), ALIGN)
            loop = d["loops"][-1] if (slots > 1 and d["loops"]) else None
            if loop is None:
                slots = 1
            d.update(slots=slots, stride=stride, slot_bytes=slot_bytes,
                     slot_of=S.binary("%", S.var(loop.it), slots) if loop is not None else None)
        for d in items:
            b = d["buf"]
            if b.offset is None:
                continue
            size = d["slot_bytes"]
            if not size.is_const:
                raise KernelError("E302", f"buffer '{b.name}' has an explicit offset but a runtime size", b.loc,
                                  "give explicit buffers constant shapes")
            total = size.value * d["slots"]
            for (s0, e0, _, other) in occupied:
                if b.offset < e0 and s0 < b.offset + total:
                    raise KernelError("E302", f"buffer '{b.name}' at {mem.value}[{b.offset}:{b.offset + total}] overlaps "
                                      f"'{other.name}' at [{s0}:{e0}]", b.loc, "choose another offset")
            if b.offset + total > cap_bytes:
                raise _overflow(b, d, total, cap_bytes - b.offset, mem)
            occupied.append((b.offset, b.offset + total, 1 << 60, b))
            placement[b.id] = Placement(mem, S.const(b.offset), size, d["slots"], d["stride"], d["slot_of"])
        for d in items:
            b = d["buf"]
            if b.id in placement:
                continue
            size = d["slot_bytes"]
            reusable = not d["dma"] and not b.explicit and d["slots"] == 1
            if size.is_const:
                total = size.value * d["slots"]
                live = [o for o in occupied if not (o[2] < d["first"] and reusable and _reusable(o, info))]
                off = _first_fit(live, total)
                if off + total > cap_bytes:
                    used = sum(e - s for s, e, _, _ in live)
                    raise _overflow(b, d, total, max(cap_bytes - used, 0), mem)
                occupied.append((off, off + total, d["last"] if reusable else 1 << 60, b))
                static_end = max(static_end, off + total)
                placement[b.id] = Placement(mem, S.const(off), size, d["slots"], d["stride"], d["slot_of"])
            else:
                start = runtime_end if runtime_end is not None else None
                placement[b.id] = Placement(mem, start if start is not None else S.const(-1), size, d["slots"],
                                            d["stride"], d["slot_of"])
                runtime_end = S.add(start if start is not None else S.const(0), S.mul(size, d["slots"]))
                d["runtime"] = True
        # runtime-sized buffers go after every static one
        if runtime_end is not None:
            base = S.const(-(-static_end // ALIGN) * ALIGN)
            for d in items:
                if d.get("runtime"):
                    p = placement[d["buf"].id]
                    p.offset = S.add(base, S.const(0) if (p.offset.is_const and p.offset.value == -1) else p.offset)
                    end = S.add(p.offset, S.mul(p.slot_bytes, p.slots))
                    b = d["buf"]
                    checks.append(Check(S.binary("<=", end, cap_bytes), "E301",
                                        f"tile '{b.name}' of [{b.shape_str.replace('%', '%%')}] {b.dtype} needs %d bytes"
                                        f"{' x%d buffers' % p.slots if p.slots > 1 else ''} but {mem.value} has %d bytes "
                                        f"free at that point (capacity {cap_bytes})",
                                        (S.mul(p.slot_bytes, p.slots), S.sub(cap_bytes, p.offset)),
                                        "use smaller tiles (a smaller Const), or buffers=1", b.loc))
    body = tuple(checks) + k.body
    return dataclasses.replace(k, body=body, placement=placement)


def _reusable(o: tuple, info: dict) -> bool:
    return o[2] < (1 << 60)


def _slots(b: Buf, d: dict, default: int) -> int:
    if b.explicit:
        return b.buffers or 1
    return default if d["dma"] else 1


def _first_fit(occupied: list[tuple[int, int, int, Buf]], size: int) -> int:
    off = 0
    for s, e, _, _ in sorted(occupied):
        if off + size <= s:
            return off
        off = max(off, -(-e // ALIGN) * ALIGN)
    return off


def _overflow(b: Buf, d: dict, total: int, free: int, mem: Mem) -> KernelError:
    slots = d["slots"]
    shape = b.shape_str
    per = f" ({slots} buffers of {fmt_bytes(total // slots)})" if slots > 1 else ""
    hint = "lower the tile size (a smaller Const)"
    if slots > 1:
        hint += " or use buffers=1"
    return KernelError("E301", f"tile of {shape} {b.dtype} for '{b.name.split('.')[0]}' needs {fmt_bytes(total)} "
                       f"({total} bytes){per} but {mem.value} has {fmt_bytes(free)} ({free} bytes) free", b.loc, hint)
