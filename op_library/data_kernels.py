"""The DSL kernels behind op_library.data (data movement). Each works on 2-, 3- or 4-D views the host
sets up (op_library.data's docstring describes the views); none computes anything but copies,
selects and index arithmetic.

- `transpose4` / `copy4`: one permutation step on x (A, Q, B, L). transpose4 writes y (X, L, Y, Q):
  a BQ x BL block of x (rows along Q, strided) is loaded (MTE2), transposed on V and stored as the
  BL x BQ block of y (MTE3). copy4 writes y (X, Q, 1, L): blocks of rows, strided on both sides,
  pure DMA. The (A, B) position of each output plane (x, y) comes from its flat index o over the
  "other" dims (up to six, in output order) by div/mod with their sizes o1..o5 and their strides
  s0..s5 in x's flat (A, B) index: scalar work, once per block.
- `copy2d` / `fill2d` / `fill2d_int`: y[r, yo + c] = x[r, xo + c] (or a value) for c < n: cat,
  its backward (split), stack, constant pad of dims before the last two (a row pad per padded dim),
  full / fill. `pad2d`: constant pad (or crop) of the last one or two dims in one pass (also the
  padded planes of op_library.pool).
- Kernels with a SPLIT Const move rows that fit one block whole (SPLIT=0): a nested loop costs a
  pipe barrier per block, which stops one block's store from overlapping the next block's load.
- `tri_kernel`: tril / triu on (B, M, N): a row-index column (the host's 0..BR-1 table) against
  dsl.arange of the columns, dsl.where.
- `index_rows` (index_select along a dim, and its backward `index_add_rows` by atomic adds into an
  f32 buffer), `gather_last` / `gather_mid` (dsl.gather on UB tiles, the gathered dim taken in
  chunks of BD with a mask so any size works), `scatter_add_elems` (one atomic add per element).
- `cast_kernel` (f32 accumulators back to the output dtype), `arange_f` / `arange_i`.
"""
from __future__ import annotations

import dsl
from dsl import GM, Const, f32, i32


@dsl.kernel
def transpose4(x: GM, y: GM, o1: int, o2: int, o3: int, o4: int, o5: int, s0: int, s1: int, s2: int, s3: int,
               s4: int, s5: int, BQ: Const[int] = 64, BL: Const[int] = 64):
    """y[X, L, Y, Q] = x[A, Q, B, L] with the plane (a, b) of output plane o = (xo, yo) by index arithmetic."""
    Q = x.shape[1]
    L = x.shape[3]
    Y = y.shape[2]
    nq = (Q + BQ - 1) // BQ
    nl = (L + BL - 1) // BL
    for t in dsl.tiles(y.shape[0] * Y * nq * nl, 1):
        i = t.start
        l0 = (i % nl) * BL
        j = i // nl
        q0 = (j % nq) * BQ
        o = j // nq
        r5 = o // o5
        r4 = r5 // o4
        r3 = r4 // o3
        r2 = r3 // o2
        off = (r2 // o1) * s0 + (r2 % o1) * s1 + (r3 % o2) * s2 + (r4 % o3) * s3 + (r5 % o4) * s4 + (o % o5) * s5
        a = off // x.shape[2]
        b = off % x.shape[2]
        y[o // Y, l0:dsl.min(l0 + BL, L), o % Y, q0:dsl.min(q0 + BQ, Q)] = \
            x[a, q0:dsl.min(q0 + BQ, Q), b, l0:dsl.min(l0 + BL, L)].T


@dsl.kernel
def copy4(x: GM, y: GM, o1: int, o2: int, o3: int, o4: int, o5: int, s0: int, s1: int, s2: int, s3: int,
          s4: int, s5: int, BQ: Const[int] = 8, BL: Const[int] = 1024):
    """y[X, Q, 1, L] = x[A, Q, B, L]: blocks of rows, the plane (a, b) of output plane o as in transpose4."""
    Q = x.shape[1]
    L = x.shape[3]
    nq = (Q + BQ - 1) // BQ
    nl = (L + BL - 1) // BL
    for t in dsl.tiles(y.shape[0] * nq * nl, 1):
        i = t.start
        l0 = (i % nl) * BL
        j = i // nl
        q0 = (j % nq) * BQ
        o = j // nq
        r5 = o // o5
        r4 = r5 // o4
        r3 = r4 // o3
        r2 = r3 // o2
        off = (r2 // o1) * s0 + (r2 % o1) * s1 + (r3 % o2) * s2 + (r4 % o3) * s3 + (r5 % o4) * s4 + (o % o5) * s5
        a = off // x.shape[2]
        b = off % x.shape[2]
        y[o, q0:dsl.min(q0 + BQ, Q), 0, l0:dsl.min(l0 + BL, L)] = x[a, q0:dsl.min(q0 + BQ, Q), b, l0:dsl.min(l0 + BL, L)]


@dsl.kernel
def copy2d(x: GM, y: GM, xo: int, yo: int, n: int, BR: Const[int] = 8, BC: Const[int] = 1024):
    """y[r, yo + c] = x[r, xo + c] for c < n (x and y have the same rows)."""
    for r, c in dsl.tiles2d((x.shape[0], n), (BR, BC)):
        y[r, yo + c.start:yo + c.start + c.len] = x[r, xo + c.start:xo + c.start + c.len]


@dsl.kernel
def fill2d(y: GM, yo: int, n: int, value: float, BR: Const[int] = 8, BC: Const[int] = 1024):
    """y[r, yo + c] = value for c < n (floating y)."""
    for r, c in dsl.tiles2d((y.shape[0], n), (BR, BC)):
        y[r, yo + c.start:yo + c.start + c.len] = value


@dsl.kernel
def fill2d_int(y: GM, yo: int, n: int, value: int, BR: Const[int] = 8, BC: Const[int] = 1024):
    """y[r, yo + c] = value for c < n (integer or bool y)."""
    for r, c in dsl.tiles2d((y.shape[0], n), (BR, BC)):
        y[r, yo + c.start:yo + c.start + c.len] = value



@dsl.kernel
def pad2d(x: GM, y: GM, top: int, left: int, fv: float, iv: int, FLOAT: Const[int] = 1, BR: Const[int] = 16,
          BC: Const[int] = 1024, SPLIT: Const[int] = 0):
    """Constant pad of the last two dims in one pass: y[p, i, j] = x[p, i - top, j - left] where that lies
    inside x (P, H, W), else the value (fv; iv for integer / bool y with FLOAT=0); negative top / left
    (and an output smaller than x + top) crop. Blocks of BR output rows of a plane are dealt over the
    cores; in each, the rows above and below x are filled, the others get their left and right borders
    filled and the kept band copied (GM -> UB -> GM). SPLIT=0: rows of up to BC elements move whole
    (no inner loop, so blocks overlap their loads and stores); SPLIT=1: BC columns at a time."""
    H = x.shape[1]
    W = x.shape[2]
    OH = y.shape[1]
    OW = y.shape[2]
    r0 = dsl.max(top, 0)
    r1 = dsl.min(top + H, OH)
    c0 = dsl.max(left, 0)
    c1 = dsl.max(dsl.min(left + W, OW), c0)
    for p, r in dsl.tiles2d((y.shape[0], OH), (1, BR)):
        pi = p.start
        rs = r.start
        re = r.start + r.len
        tb = dsl.min(re, r0)
        ba = dsl.max(rs, r1)
        ma = dsl.max(rs, r0)
        mb = dsl.min(re, r1)
        if SPLIT == 0:
            if FLOAT:
                if tb > rs:   # rows above x
                    y[pi, rs:dsl.min(rs + BR, tb), 0:dsl.min(BC, OW)] = fv
                if re > ba:   # rows below x
                    y[pi, ba:dsl.min(ba + BR, re), 0:dsl.min(BC, OW)] = fv
                if mb > ma and c0 > 0:
                    y[pi, ma:dsl.min(ma + BR, mb), 0:dsl.min(BC, c0)] = fv
                if mb > ma and OW > c1:
                    y[pi, ma:dsl.min(ma + BR, mb), c1:dsl.min(c1 + BC, OW)] = fv
            else:
                if tb > rs:
                    y[pi, rs:dsl.min(rs + BR, tb), 0:dsl.min(BC, OW)] = iv
                if re > ba:
                    y[pi, ba:dsl.min(ba + BR, re), 0:dsl.min(BC, OW)] = iv
                if mb > ma and c0 > 0:
                    y[pi, ma:dsl.min(ma + BR, mb), 0:dsl.min(BC, c0)] = iv
                if mb > ma and OW > c1:
                    y[pi, ma:dsl.min(ma + BR, mb), c1:dsl.min(c1 + BC, OW)] = iv
            if mb > ma and c1 > c0:   # the kept band
                y[pi, ma:dsl.min(ma + BR, mb), c0:dsl.min(c0 + BC, c1)] = \
                    x[pi, ma - top:dsl.min(ma + BR, mb) - top, c0 - left:dsl.min(c0 + BC, c1) - left]
        else:
            if tb > rs:
                for c in dsl.range(0, OW, BC):
                    if FLOAT:
                        y[pi, rs:dsl.min(rs + BR, tb), c:dsl.min(c + BC, OW)] = fv
                    else:
                        y[pi, rs:dsl.min(rs + BR, tb), c:dsl.min(c + BC, OW)] = iv
            if re > ba:
                for c in dsl.range(0, OW, BC):
                    if FLOAT:
                        y[pi, ba:dsl.min(ba + BR, re), c:dsl.min(c + BC, OW)] = fv
                    else:
                        y[pi, ba:dsl.min(ba + BR, re), c:dsl.min(c + BC, OW)] = iv
            if mb > ma:
                for c in dsl.range(0, c0, BC):
                    if FLOAT:
                        y[pi, ma:dsl.min(ma + BR, mb), c:dsl.min(c + BC, c0)] = fv
                    else:
                        y[pi, ma:dsl.min(ma + BR, mb), c:dsl.min(c + BC, c0)] = iv
                for c in dsl.range(c0, c1, BC):
                    y[pi, ma:dsl.min(ma + BR, mb), c:dsl.min(c + BC, c1)] = \
                        x[pi, ma - top:dsl.min(ma + BR, mb) - top, c - left:dsl.min(c + BC, c1) - left]
                for c in dsl.range(c1, OW, BC):
                    if FLOAT:
                        y[pi, ma:dsl.min(ma + BR, mb), c:dsl.min(c + BC, OW)] = fv
                    else:
                        y[pi, ma:dsl.min(ma + BR, mb), c:dsl.min(c + BC, OW)] = iv


@dsl.kernel
def cast_kernel(x: GM, y: GM, TILE: Const[int] = 4096):
    """y = x cast to y's dtype (flat)."""
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.cast(x[t], y.dtype)


@dsl.kernel
def arange_f(y: GM, start: float, step: float, TILE: Const[int] = 4096):
    """y[i] = start + i * step, in f32, rounded to y's dtype."""
    for t in dsl.tiles(y.shape[0], TILE):
        i = dsl.cast(dsl.arange(t.len, dtype=i32) + t.start, f32)
        y[t] = dsl.cast(i * step + start, y.dtype)


@dsl.kernel
def arange_i(y: GM, start: int, step: int, TILE: Const[int] = 4096):
    """y[i] = start + i * step in i32 (wrapping), cast to y's dtype."""
    for t in dsl.tiles(y.shape[0], TILE):
        v = (dsl.arange(t.len, dtype=i32) + t.start) * step + start
        y[t] = dsl.cast(v, y.dtype)


@dsl.kernel
def tri_kernel(x: GM, y: GM, iota: GM, diag: int, UPPER: Const[int] = 0, BR: Const[int] = 16,
               BC: Const[int] = 1024, SPLIT: Const[int] = 1):
    """y[b] = tril(x[b], diag) (UPPER=0) or triu(x[b], diag) (UPPER=1); x, y (B, M, N), iota (BR, 1) = 0..BR-1."""
    N = x.shape[2]
    for b, r in dsl.tiles2d((x.shape[0], x.shape[1]), (1, BR)):
        lim = iota[0:r.len, :] + (r.start + diag)          # (rows, 1): the diagonal column of each row
        if SPLIT == 0:   # whole rows (N <= BC): no inner loop, so blocks overlap load, select and store
            cols0 = dsl.arange(dsl.min(BC, N), dtype=i32)
            keep0 = (cols0 <= lim) if UPPER == 0 else (cols0 >= lim)
            y[b.start, r, 0:dsl.min(BC, N)] = dsl.where(keep0, x[b.start, r, 0:dsl.min(BC, N)], 0)
        else:
            for c in dsl.range(0, N, BC):
                cols = dsl.arange(dsl.min(c + BC, N) - c, dtype=i32) + c
                keep = (cols <= lim) if UPPER == 0 else (cols >= lim)
                xt = x[b.start, r, c:dsl.min(c + BC, N)]
                y[b.start, r, c:dsl.min(c + BC, N)] = dsl.where(keep, xt, 0)


@dsl.kernel
def index_rows(x: GM, idx: GM, y: GM, BA: Const[int] = 8, BB: Const[int] = 1024, SPLIT: Const[int] = 1):
    """y[a, j, :] = x[a, idx[j], :] for x (A, D, B), y (A, n, B); the DSL checks each idx[j] (E404).
    SPLIT=0 (B <= BB): whole rows, no inner loop, so one block's store overlaps the next one's load;
    SPLIT=1: BB columns at a time."""
    B = x.shape[2]
    for j, a in dsl.tiles2d((idx.shape[0], x.shape[0]), (1, BA)):
        i = idx[j.start]
        if SPLIT == 0:
            y[a, j.start, 0:dsl.min(BB, B)] = x[a, i, 0:dsl.min(BB, B)]
        else:
            for c in dsl.range(0, B, BB):
                y[a, j.start, c:dsl.min(c + BB, B)] = x[a, i, c:dsl.min(c + BB, B)]


@dsl.kernel
def index_add_rows(g: GM, idx: GM, gx: GM, BA: Const[int] = 8, BB: Const[int] = 1024):
    """gx[a, idx[j], :] += g[a, j, :] (gx f32, zeroed by the caller; atomic across cores)."""
    B = g.shape[2]
    for j, a in dsl.tiles2d((idx.shape[0], g.shape[0]), (1, BA)):
        i = idx[j.start]
        for c in dsl.range(0, B, BB):
            dsl.atomic_add(gx[a, i, c:dsl.min(c + BB, B)], dsl.cast(g[a, j.start, c:dsl.min(c + BB, B)], f32))


@dsl.kernel
def gather_last(x: GM, idx: GM, y: GM, BR: Const[int] = 8, BN: Const[int] = 256, BD: Const[int] = 1024,
                SPLIT: Const[int] = 1):
    """y[r, c] = x[r, idx[r, c]] for x (R, D), idx / y (R, n): x's row taken BD columns at a time, each
    chunk gathered where the index falls in it (the host has checked 0 <= idx < D). SPLIT=0 (D <= BD):
    one chunk and no inner loop, so blocks overlap their loads, gathers and stores."""
    D = x.shape[1]
    for r, c in dsl.tiles2d((idx.shape[0], idx.shape[1]), (BR, BN)):
        it = idx[r, c]
        if SPLIT == 0:
            y[r, c] = dsl.gather(x[r, 0:dsl.min(BD, D)], it, axis=1)
        else:
            acc = dsl.gather(x[r, 0:dsl.min(BD, D)], dsl.minimum(it, BD - 1), axis=1)
            for d in dsl.range(BD, D, BD):
                loc = it - d
                inside = loc >= 0
                g = dsl.gather(x[r, d:dsl.min(d + BD, D)],
                               dsl.minimum(dsl.maximum(loc, 0), dsl.min(d + BD, D) - d - 1), axis=1)
                acc = dsl.where(inside, g, acc)
            y[r, c] = acc


@dsl.kernel
def gather_mid(x: GM, idx: GM, y: GM, BN: Const[int] = 64, BC: Const[int] = 64, BD: Const[int] = 256):
    """y[a, j, c] = x[a, idx[a, j, c], c] for x (A, D, B), idx / y (A, n, B): as gather_last along rows."""
    D = x.shape[1]
    for a, j in dsl.tiles2d((idx.shape[0], idx.shape[1]), (1, BN)):
        for c in dsl.range(0, idx.shape[2], BC):
            it = idx[a.start, j, c:dsl.min(c + BC, idx.shape[2])]
            acc = dsl.gather(x[a.start, 0:dsl.min(BD, D), c:dsl.min(c + BC, idx.shape[2])],
                             dsl.minimum(it, BD - 1), axis=0)
            for d in dsl.range(BD, D, BD):
                loc = it - d
                inside = loc >= 0
                g = dsl.gather(x[a.start, d:dsl.min(d + BD, D), c:dsl.min(c + BC, idx.shape[2])],
                               dsl.minimum(dsl.maximum(loc, 0), dsl.min(d + BD, D) - d - 1), axis=0)
                acc = dsl.where(inside, g, acc)
            y[a.start, j, c:dsl.min(c + BC, idx.shape[2])] = acc


@dsl.kernel
def scatter_add_elems(idx: GM, src: GM, y: GM, BJ: Const[int] = 64, BC: Const[int] = 64,
                      WHOLE: Const[int] = 0):
    """y[a, idx[a, j, c], c] += src[a, j, c] for idx (i32) / src (A, n, B), y (A, D, B): per block of BJ x BC
    elements one index tile, one src tile and one MTE3 scatter-add picked by the index tile (a burst
    per element; repeated indices add up). WHOLE=1 (B <= BC): a block spans all B columns and the
    block loop is the innermost loop, so its tiles rotate ping-pong slots across blocks (the next
    block's loads overlap this block's adds; an inner column loop of one trip would pin one slot)."""
    if WHOLE:
        for a, jt in dsl.tiles2d((idx.shape[0], idx.shape[1]), (1, BJ)):
            dsl.atomic_add(y[a.start, idx[a.start, jt, :], :], src[a.start, jt, :])
    else:
        for a, jt in dsl.tiles2d((idx.shape[0], idx.shape[1]), (1, BJ)):
            for c in dsl.range(0, idx.shape[2], BC):
                dsl.atomic_add(y[a.start, idx[a.start, jt, c], c], src[a.start, jt, c])
