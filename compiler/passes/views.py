"""Placements of sub-windows: `a1[:, k]` of an L1 panel is its parent's storage from an origin on.

A sub-window (`Buf.parent` set) has no storage of its own. `place_buffers` places only roots
(`ir.accesses` reports a sub-window as its root, so lifetimes, slots and flags are the root's);
this gives each sub-window the root's placement moved to its origin. Cube memories hold NZ
fractals: column block `c // c0` of a root padded to `rows_pad` rows starts `rows_pad * 32` bytes
after the previous one, and row r of a block is 32 bytes further. Lowering only accepts origins on
fractal boundaries (multiples of `fractal_pad`'s 16, or 32 for i8), so the sub-window is itself an
NZ matrix with the root's `rows_pad`: the L1 -> L0A/L0B moves and the GM -> L1 loads address it
with that (`cube.gen_l1_to_l0a(..., src_rows_pad=...)`, `cube.gen_nd2nz(..., fill_rows=...)`).
"""
from __future__ import annotations

import dataclasses

from compiler import sexpr as S
from compiler.ir import Buf, Kernel, Placement
from compiler.passes.place import CUBE_MEMS, fractal_pad


def rows_pad(b: Buf) -> S.SExpr:
    """Rows between column blocks of b's storage (its root's padded row count)."""
    return fractal_pad(b.root)[0]


def view_offset(b: Buf) -> S.SExpr:
    """Bytes from b's root to b's first element."""
    assert b.parent is not None and b.origin is not None and b.mem in CUBE_MEMS
    r0, c0 = b.origin
    cw = 32 // b.dtype.itemsize  # elements per fractal row
    return S.mul(S.add(S.mul(S.binary("//", c0, cw), rows_pad(b)), r0), 32)


def place_views(k: Kernel) -> Kernel:
    """After `place_buffers`: every sub-window in `k.bufs` placed inside its root."""
    out: dict[int, Placement] = dict(k.placement)
    for b in k.bufs:
        if b.parent is None or b.root.id not in k.placement:
            continue
        p = k.placement[b.root.id]
        out[b.id] = dataclasses.replace(p, offset=S.add(p.offset, view_offset(b)))
    return dataclasses.replace(k, placement=out)
