"""The interpreter's rules for gathers and scalars from GM, mirroring `compiler.backend.codegen_gather`:
`LoadScalar` (bounds check, S-pipe event, the element as a Python int or float) and `VIndexed`
(VARANGE; VGATHER with every index checked before anything is written, the first offending one in
row-major order reported, then element bits moved)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from compiler.gathers import READ_HINT, gather_message, read_message
from compiler.interp.interpret_rules import storage
from compiler.ir import LoadScalar, VIndexed
from compiler.sexpr import F64
from simulator.isa import Instr, Pipe

if TYPE_CHECKING:
    from compiler.interp.interpret import Core


def load_scalar(core: Core, s: LoadScalar) -> None:
    ref = s.src
    es = ref.dtype.itemsize
    off, numel = core.i64(ref.offset), core.i64(ref.numel)
    if not 0 <= off < numel:
        raise core.fail("E404", read_message(ref.name, ref.dtype), [off, numel], READ_HINT, s.loc)
    gm_index = [p.slot for p in core.k.params if p.kind == "gm"].index(ref.arg)
    core.event(Instr.LOAD_GM_S, Pipe.S, s.loc, es, 1, gm_index, off * es, 0)
    v = core.gm[ref.arg][off]
    core.env[s.var] = float(v) if core.k.scalar_vars[s.var] == F64 else int(v)


def indexed(core: Core, s: VIndexed) -> None:
    d = s.dst
    rows, cols = core.i64(d.ext[0]), core.i64(d.ext[1])
    if s.instr == Instr.VARANGE:
        core.event(Instr.VARANGE, Pipe.V, s.loc, rows * cols, d.dtype.itemsize, rows)
        iota = np.broadcast_to(np.arange(max(cols, 0), dtype=np.int64), (max(rows, 0), max(cols, 0)))
        core.view(d, rows, cols)[...] = iota.astype(storage(d.dtype))  # f32: round to nearest even
        return
    assert s.instr == Instr.VGATHER, f"interpret: {s.instr.name}"
    x, ix = s.srcs
    by_col = s.arg == "cols"
    bound = core.i64(x.ext[1] if by_col else x.ext[0])
    core.event(Instr.VGATHER, Pipe.V, s.loc, rows * cols, max(4, d.dtype.itemsize), rows)
    idx = core.view(ix, rows, cols).astype(np.int64)
    bad = (idx < 0) | (idx >= bound)
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])  # the first in row-major order, as the native scan
        msg, hint = gather_message(s)
        vals = [int(idx[r, c]), c, bound] if d.rank == 1 else [int(idx[r, c]), r, c, bound]
        raise core.fail("E404", msg, vals, hint, s.loc)
    if rows <= 0 or cols <= 0:
        return
    bits = np.dtype(f"u{d.dtype.itemsize}")
    if by_col:
        src = core.view(x, rows, bound).view(bits)
        out = src[np.arange(rows)[:, None], idx]
    else:
        src = core.view(x, bound, cols).view(bits)
        out = src[idx, np.arange(cols)[None, :]]
    core.view(d, rows, cols).view(bits)[...] = out
