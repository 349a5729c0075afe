"""The interpreter's rule for GM windows picked by a UB index tile (`GMGather`, `GMScatter`),
mirroring `compiler.backend.codegen_gm_index` check for check: the tile fits its buffer (E301),
every index in [0, size) with the first bad one in row-major order reported (E404), the span the
indices reach inside the tensor (E404), for a scatter the tensor's alignment (E405); then the same
trace record and the data. A scatter adds in row-major order, a repeated index adding onto the
sum before it (in rounds: each round adds, per target, its earliest element not yet added), in
the dtype's arithmetic (`interpret_atomic.accumulate`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from compiler.backend.codegen_atomic import MISALIGNED, MISALIGNED_HINT
from compiler.gathers import DMA_HINT, DMA_MESSAGE, INDEX_HINT, contiguous, index_message, two_d_positions
from compiler.interp.interpret_atomic import accumulate
from compiler.interp.interpret_rules import wrap
from compiler.ir import GMGather, GMScatter, Indexed
from simulator.isa import INFO

if TYPE_CHECKING:
    from compiler.interp.interpret import Core


def _indices(core: Core, by: Indexed, rows: int, cols: int) -> np.ndarray:
    """The indices as an int64 (rows, cols) array, cols = 1 with one index per row."""
    if rows <= 0 or cols <= 0:
        return np.zeros((max(rows, 0), max(cols, 0)), np.int64)
    if by.per_row and by.index.rank == 1:
        return core.view(by.index, 1, rows).astype(np.int64).reshape(rows, 1)
    return core.view(by.index, rows, cols).astype(np.int64)


def gm_indexed(core: Core, s: GMGather | GMScatter) -> None:
    is_load = isinstance(s, GMGather)
    ref, buf = (s.src, s.dst) if isinstance(s, GMGather) else (s.dst, s.src)
    by = s.by
    assert s.instr is not None and ref.step is not None, "a routed indexed DMA"
    es = ref.dtype.itemsize
    off, rows, cols, rstride, numel, step = (core.i64(e) for e in (ref.offset, ref.rows, ref.cols, ref.stride,
                                                                    ref.numel, ref.step))
    istride, bound = core.i64(by.istride), core.i64(by.bound)
    cap_r, cap_c = (core.i64(e) for e in buf.cap)
    if not (rows <= cap_r and cols <= cap_c):
        raise core.fail("E301", f"a window of %d x %d elements does not fit buffer '{buf.name}' of %d x %d",
                        [rows, cols, cap_r, cap_c], "the buffer is smaller than the window copied into it", s.loc)
    idx = _indices(core, by, rows, 1 if by.per_row else cols)
    bad = (idx < 0) | (idx >= bound)  # native: one unsigned compare
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        pos = [r, c] if two_d_positions(by) else [r if by.per_row else c]
        raise core.fail("E404", index_message(by, ref.name), [int(idx[r, c]), *pos, bound], INDEX_HINT, s.loc)
    nz = rows > 0 and cols > 0
    reach = wrap(wrap(wrap((rows - 1) * rstride) + wrap((cols - 1) * step)) + wrap((bound - 1) * istride))
    last = wrap(wrap(off + reach) + 1)
    if nz and not (off >= 0 and last <= numel):
        raise core.fail("E404", DMA_MESSAGE.format(verb="read" if is_load else "write", name=ref.name,
                                                   dtype=ref.dtype), [off, last, numel], DMA_HINT, s.loc)
    gm = core.gm[ref.arg]
    if not is_load and gm.ctypes.data % es:
        raise core.fail("E405", MISALIGNED.format(name=ref.name, dtype=ref.dtype, es=es), [], MISALIGNED_HINT, s.loc)
    first = int(idx[0, 0]) if nz else 0
    d = wrap(off + wrap(first * istride)) * es
    if contiguous(by, ref):
        a, b, e = cols * es, rows, rstride if rstride != 0 else istride
    else:
        a, b, e = es, wrap(rows * cols), step if step else istride
    gm_index = [p.slot for p in core.k.params if p.kind == "gm"].index(ref.arg)
    core.event(s.instr, INFO[s.instr][1], s.loc, a, b, gm_index, wrap(d), wrap(e * es))
    if not nz:
        return
    r_ = np.arange(rows, dtype=np.int64)[:, None]
    c_ = np.arange(cols, dtype=np.int64)[None, :]
    elem = off + r_ * rstride + c_ * step + idx * istride  # (rows, cols), idx broadcast over columns per row
    tile = core.view(buf, rows, cols)
    if is_load:
        bits = np.dtype(f"u{es}")
        tile.view(bits)[...] = gm.view(bits)[elem]
        return
    targets, vals = elem.reshape(-1), np.ascontiguousarray(tile).reshape(-1)
    pending = np.arange(targets.size)
    while pending.size:
        _, firsts = np.unique(targets[pending], return_index=True)
        sel = pending[firsts]
        cur = gm[targets[sel]]
        accumulate(core, ref, cur, vals[sel], s.loc)
        gm[targets[sel]] = cur
        keep = np.ones(pending.size, bool)
        keep[firsts] = False
        pending = pending[keep]
