"""split_cores: give each core its share of every outermost `dsl.tiles` loop.

Tiles are dealt in contiguous runs, Ascend-C style: with T tiles over N cores the first T % N
("former") cores take T // N + 1 tiles, the others ("tail") T // N; the last tile of the tensor
is the short one. Nested `tiles` loops run whole on each core.
"""
from __future__ import annotations

import dataclasses

from compiler import sexpr as S
from compiler.ir import For, If, Kernel, SetVar, Stmt


def _split(body: tuple[Stmt, ...], inside_tiles: bool, names: dict[str, str]) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            if s.kind == "tiles" and not inside_tiles:
                count = s.stop  # tiles loops run 0 .. count
                base = S.binary("//", count, S.NUM_CORES)
                rem = S.binary("%", count, S.NUM_CORES)
                first, end = f"{s.var}.first", f"{s.var}.end"
                names[first] = names[end] = S.I64
                out.append(SetVar(first, S.add(S.mul(S.CORE_ID, base), S.smin(S.CORE_ID, rem)), s.loc))
                out.append(SetVar(end, S.add(S.var(first), S.add(base, S.binary("<", S.CORE_ID, rem))), s.loc))
                s = dataclasses.replace(s, start=S.var(first), stop=S.var(end),
                                        body=_split(s.body, True, names), kind="tiles/core")
            else:
                s = dataclasses.replace(s, body=_split(s.body, inside_tiles or s.kind == "tiles", names))
        elif isinstance(s, If):
            s = dataclasses.replace(s, then=_split(s.then, inside_tiles, names),
                                    orelse=_split(s.orelse, inside_tiles, names))
        out.append(s)
    return tuple(out)


def split_cores(k: Kernel) -> Kernel:
    names = dict(k.scalar_vars)
    return dataclasses.replace(k, body=_split(k.body, False, names), scalar_vars=names)
