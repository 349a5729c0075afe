"""assign_units: bind every data movement to its DMA route (and so its pipe), check legality.

Vector instructions read and write UB only; GM reaches L1 and UB (MTE2) and is written from UB
(MTE3) or L0C (FIX); L1 feeds L0A/L0B (MTE1). Anything else is an illegal placement (E303).
"""
from __future__ import annotations

import dataclasses

from compiler.ir import Buf, For, If, Kernel, Load, Mmad, Move, Stmt, Store, VOp
from dsl.errors import KernelError, SourceLoc
from dsl.types import Mem
from simulator.isa import ATOMIC, ROUTE, Instr
from simulator.isa import Mem as HwMem

# L1 holds fractals (NZ) for the cube; nothing reads them back out to UB on this core. Atomic
# stores take their route's atomic form (isa.ATOMIC).
_BY_ROUTE = {(src.name, dst.name): instr for instr, (src, dst) in ROUTE.items()
             if instr != Instr.COPY_L1_UB and instr not in ATOMIC.values()}
_LEGAL = ", ".join(f"{s}->{d}" for s, d in _BY_ROUTE)


def route(src: Mem, dst: Mem, what: str, loc: SourceLoc) -> Instr:
    instr = _BY_ROUTE.get((src.value, dst.value))
    if instr is None:
        hint = {("GM", "L0A"): "stage it through L1", ("GM", "L0B"): "stage it through L1",
                ("L1", "UB"): "L1 feeds the cube (L0A/L0B); keep a UB copy if the vector unit needs the data",
                ("L1", "GM"): "move it to UB first", ("L0C", "L0A"): "go through L1"}.get((src.value, dst.value))
        raise KernelError("E303", f"no data path from {src.value} to {dst.value} for {what}", loc,
                          hint or f"the core's paths are {_LEGAL}")
    return instr


def _vector_operand(b: Buf, s: VOp) -> None:
    if b.mem != Mem.UB:
        raise KernelError("E303", f"the vector unit cannot {('write' if b is s.dst else 'read')} '{b.name}': "
                          f"it is in {b.mem.value}, vector instructions work on UB", s.loc,
                          "allocate it in UB (dsl.alloc(dsl.UB, ...)) or dsl.copy it to a UB buffer first")


def _assign(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, Load):
            s = dataclasses.replace(s, instr=route(Mem.GM, s.dst.mem, f"'{s.dst.name}'", s.loc))
        elif isinstance(s, Store):
            instr = route(s.src.mem, Mem.GM, f"'{s.src.name}'", s.loc)
            s = dataclasses.replace(s, instr=ATOMIC[instr] if s.atomic else instr)
        elif isinstance(s, Move):
            s = dataclasses.replace(s, instr=route(s.src.mem, s.dst.mem, f"'{s.src.name}'", s.loc))
        elif isinstance(s, VOp):
            for b in (s.dst, *s.srcs):
                if isinstance(b, Buf):
                    _vector_operand(b, s)
        elif isinstance(s, Mmad):
            for b, want, role in ((s.a, Mem.L0A, "A"), (s.b, Mem.L0B, "B"), (s.dst, Mem.L0C, "C")):
                if b.mem != want:
                    raise KernelError("E303", f"the cube reads {role} from {want.value}, but '{b.name.split('.')[0]}'"
                                      f" is in {b.mem.value}", s.loc, "let the compiler stage matmul operands")
        elif isinstance(s, For):
            s = dataclasses.replace(s, body=_assign(s.body))
        elif isinstance(s, If):
            s = dataclasses.replace(s, then=_assign(s.then), orelse=_assign(s.orelse))
        out.append(s)
    return tuple(out)


def assign_units(k: Kernel) -> Kernel:
    return dataclasses.replace(k, body=_assign(k.body))


HW_MEM = {m: HwMem[m.value] for m in Mem}
