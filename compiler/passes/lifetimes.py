"""Buffer lifetimes for `place_buffers`: where each buffer is first and last used, which loops hold
it, whether a DMA touches it, and which results compute in place.

`scan` numbers the statements in program order and records, per buffer, the first and last
position that touches it (a buffer created before a loop and used inside lives to the loop's end),
whether a DMA (or a print) touches it, and the loops enclosing every use.

`inplace_groups` lets an elementwise result take the storage of an operand that dies at that very
instruction (same capacity and element size, no broadcast): `y = xt - m` writes into `xt`'s
buffer when nothing reads `xt` afterwards. Members of a group are one buffer for the rest of the
schedule: one lifetime (the union), one slot count and slot selector, one hazard key for
`insert_sync` (`Placement.share`), so a loaded tile that is rewritten in place and stored is
double-buffered and synchronised exactly as if the program had used one buffer throughout. The
vector unit reads each element before it writes the same element, in order, so the instruction
itself is safe; the instructions allowed are listed in `INPLACE` (never a reduction, a transpose,
a gather or anything else that reads other positions than it writes).
"""
from __future__ import annotations

from compiler.extents import dyn_broadcasts
from compiler.ir import Buf, For, If, Load, Move, Print, Stmt, Store, VOp, accesses, pipe_of
from dsl.types import Mem
from simulator.isa import Instr

#: vector instructions that read every operand at exactly the element they write
INPLACE = frozenset({
    Instr.VADD, Instr.VSUB, Instr.VMUL, Instr.VDIV, Instr.VMAX, Instr.VMIN, Instr.VEXP, Instr.VLOG,
    Instr.VSQRT, Instr.VRSQRT, Instr.VABS, Instr.VNEG, Instr.VRELU, Instr.VSIGMOID, Instr.VTANH,
    Instr.VCMP, Instr.VSEL, Instr.VCAST, Instr.VCOPY, Instr.VAND, Instr.VOR, Instr.VNOT, Instr.VPOW,
    Instr.VGELU, Instr.VRECIP, Instr.VMOD, Instr.VFLOORDIV, Instr.VXOR, Instr.VSHL, Instr.VSHR,
    Instr.VERF, Instr.VSIN, Instr.VCOS, Instr.VSOFTPLUS, Instr.VGELU_TANH,
    Instr.VFLOOR, Instr.VCEIL, Instr.VRINT, Instr.VTRUNC,
})


def scan(body: tuple[Stmt, ...]) -> dict[int, dict]:
    """Per buffer id: buf, first, last, dma, loops (enclosing every use), touch_loops, def_stmt."""
    info: dict[int, dict] = {}
    _scan(body, [], [0], info)
    return info


def _scan(body: tuple[Stmt, ...], loops: list[For], pos: list[int], info: dict[int, dict]) -> None:
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
                                  "touch_loops": set(), "def_stmt": s, "pipes": set()}
            d["pipes"].add(pipe_of(s))
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


def _inplace_src(d: dict, group_of: dict[int, dict]) -> dict | None:
    """The group whose storage d's defining instruction may write into, if any."""
    s, db = d["def_stmt"], d["buf"]
    if not isinstance(s, VOp) or s.dst is not db or s.instr not in INPLACE or db.explicit or db.mem != Mem.UB:
        return None
    if any(x is db for x in s.srcs):
        return None  # d reads itself: it is older than this instruction
    for o in s.srcs:
        g = group_of.get(o.id) if isinstance(o, Buf) else None
        if g is None or g["buf"].explicit or g["last"] != d["first"]:
            continue  # o lives on after this instruction (or the user placed it)
        ob = o  # the operand as this instruction reads it: same shape, no broadcast
        if not isinstance(ob, Buf) or ob.cap != db.cap or ob.dtype.itemsize != db.dtype.itemsize or ob.mem != db.mem:
            continue
        if any(dyn_broadcasts(ob, db)):
            continue  # a runtime broadcast reads o after d overwrote it
        if (g["dma"] or d["dma"]) and [id(x) for x in g["loops"]] != [id(x) for x in d["loops"]]:
            continue  # a double-buffered group keeps one slot selector: the same loops
        return g
    return None


def inplace_groups(info: dict[int, dict]) -> list[dict]:
    """Merge each in-place result into its operand's group. Returns one dict per group (the first
    buffer's, with the union lifetime and a "members" list), in order of first use."""
    group_of: dict[int, dict] = {}
    groups: list[dict] = []
    for d in sorted(info.values(), key=lambda d: d["first"]):
        g = _inplace_src(d, group_of)
        if g is None:
            g = dict(d, members=[d["buf"]], touch_loops=set(d["touch_loops"]), pipes=set(d["pipes"]))
            groups.append(g)
        else:
            g["members"].append(d["buf"])
            g["last"] = max(g["last"], d["last"])
            g["dma"] = g["dma"] or d["dma"]
            g["pipes"] = g["pipes"] | d["pipes"]
            g["touch_loops"] |= d["touch_loops"]
            g["loops"] = _common(g["loops"], d["loops"])
        group_of[d["buf"].id] = g
    return groups


def _common(a: list[For], b: list[For]) -> list[For]:
    out = []
    for x, y in zip(a, b):
        if x is not y:
            break
        out.append(x)
    return out
