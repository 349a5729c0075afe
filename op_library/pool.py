"""2-D pooling on the vector unit: max_pool2d / avg_pool2d (NCHW), forward and backward.

Dataflow. The input is viewed as B = N*C planes (B, H, W).
1. `pad_kernel` copies the planes into a padded GM buffer (B, HP, WP) filled with -inf (max) or
   0 (avg): a scalar fill stored row by row (V dup in UB, MTE3 store), then the rows of x moved
   GM -> UB (MTE2) -> GM (MTE3) into the interior at (PH, PW). HP = max(H + 2PH, (OH-1)*SH +
   DH*(KH-1) + 1) and likewise WP: with ceil_mode the last window may overhang the padded input
   on the bottom/right, and the buffer is then larger there (extra fill). Every later window is
   then in bounds, so the pooling kernels have no padding logic; the unpadded width W (for the
   argmax indices) is passed to `max_pool_kernel` and `pool_backward_kernel` as a runtime scalar
   (it cannot be derived from WP).
2. The forward kernels deal (plane, output row) pairs over the cores (`dsl.tiles2d`). For an
   output row oh and a kernel tap (kh, kw) the inputs feeding the OW outputs are one stepped
   row window `xp[p, oh*SH + kh*DH, kw*DW : kw*DW + (OW-1)*SW + 1 : SW]` (a strided gather on
   MTE2, GM -> UB). V keeps a running max (and, for max, a running argmax built with
   `dsl.where` from an index row `iota * SW + base`) or a running f32 sum (taps in row-major
   order, as torch sums); MTE3 stores the row.
   Indices follow torch: ih * W + iw in the unpadded plane (int32 in the kernel, returned int64).
   Avg divides the sum by torch's divisor, which is separable: divisor(oh, ow) = rh[oh] * cw[ow]
   with two small f32 tensors computed on the host from index arithmetic (`_avg_divisors`:
   the window clipped to the padded input (count_include_pad) or to the input
   (count_include_pad=False), or rh = divisor_override, cw = 1). avg takes R output rows at a
   time (R the largest divisor of OH up to 16): each tap is one 2-D window stepped by SH rows and
   SW columns, cw is loaded once per core and rh[oh:oh+R] as an (R, 1) column.
   The padded planes come from data_kernels.pad2d (blocks of rows in one pass) when no cast is
   needed, else from `pad_kernel`.
   Forward (the flat kernels, used whenever a block fits: `_flat_plan`): the padded planes are
   read as one flat array. A group is R output rows of one plane (R divides OH); whole planes are
   taken P at a time (P divides the plane count), so every block is whole and its input is ONE
   contiguous window xp[a:a + NI] (MTE2). Each tap is a V gather of that window by a host-built
   index row (`_flat_tables`, cached; the first 9 taps' rows stay in UB for the whole launch), so
   strided taps cost no per-element DMA bursts. max keeps the running max (NaN wins, as torch) and
   the winning tap's offset, added to torch's index of tap 0 (tidx) and the group's row offset; avg
   sums the taps in f32 in row-major order and divides by the divisors of the block (dv).
3. The backward kernels own whole planes (`dsl.tiles(B, 1)`: one core per plane, so the
   read-modify-write below is race-free). Each core zeroes its plane of an f32 padded gradient
   buffer (the same (HP, WP) as the forward), then for every output row and tap loads the
   strided window of that buffer (MTE2 gather), adds the routed gradient (max:
   `where(index == tap's index, gy, 0)`; avg: gy / (rh[oh] * cw)) on V and stores it back with a
   strided scatter (MTE3). Taps in the padding may receive gradient (avg, or a max tap whose
   padded-plane index aliases the argmax); it is discarded: `crop_kernel` finally copies the
   interior back into grad_x, casting to its dtype on V.
   Ordering: the compiler's sync pass does not order an MTE3 store to GM before an MTE2 load of
   the same GM bytes in a later iteration of the same loop, so the loops are arranged (taps
   outside, output rows inside) so that consecutive inner iterations touch disjoint rows; across
   outer iterations the end-of-loop flag waits (MTE3 -> V -> MTE2) order them.
"""
from __future__ import annotations

import functools
from typing import Any

import dsl
from dsl import GM, Const, f32, i32
from op_library.data_kernels import pad2d

__all__ = ["max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward"]


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return int(v[0]), int(v[1])
    return int(v), int(v)


@dsl.kernel
def pad_kernel(x: GM, xp: GM, fill: float, PT: Const[int] = 0, PL: Const[int] = 0):
    """xp[b] = fill everywhere, with x[b] copied to rows PT.., columns PL.. (one core per plane)."""
    W = x.shape[2]
    for b in dsl.tiles(x.shape[0], 1):
        p = b.start
        if PT > 0 or PL > 0 or xp.shape[1] > x.shape[1] or xp.shape[2] > W:
            for h in dsl.range(xp.shape[1]):
                xp[p, h, :] = fill
        for h in dsl.range(x.shape[1]):
            xp[p, h + PT, PL:PL + W] = x[p, h, :]


@dsl.kernel
def crop_kernel(xp: GM, x: GM, PT: Const[int] = 0, PL: Const[int] = 0):
    """x[b, h, :] = cast(xp[b, h + PT, PL:PL + W]) (the inverse of pad_kernel)."""
    W = x.shape[2]
    for b, r in dsl.tiles2d((x.shape[0], x.shape[1]), (1, 1)):
        x[b.start, r.start, :] = dsl.cast(xp[b.start, r.start + PT, PL:PL + W], x.dtype)


@dsl.kernel
def max_pool_kernel(xp: GM, y: GM, ind: GM, iota: GM, W: int, PH: Const[int] = 0, PW: Const[int] = 0,
                    KH: Const[int] = 2, KW: Const[int] = 2, SH: Const[int] = 2, SW: Const[int] = 2,
                    DH: Const[int] = 1, DW: Const[int] = 1):
    """y[b, oh, :] = max over taps of strided rows of the padded planes; ind = torch's flat index
    (W is the unpadded width)."""
    OW = y.shape[2]
    L = (OW - 1) * SW + 1
    io = iota[0:OW] * SW
    for b, r in dsl.tiles2d((y.shape[0], y.shape[1]), (1, 1)):
        p = b.start
        oh = r.start
        m = xp[p, oh * SH, 0:L:SW]
        ix = io + ((oh * SH - PH) * W - PW)
        for kk in dsl.range(1, KH * KW):
            kh = kk // KW
            a = (kk % KW) * DW
            w = xp[p, oh * SH + kh * DH, a:a + L:SW]
            take = (w > m) | (w != w)
            m = dsl.where(take, w, m)
            ix = dsl.where(take, io + ((oh * SH + kh * DH - PH) * W + a - PW), ix)
        y[p, oh, :] = m
        ind[p, oh, :] = ix


@dsl.kernel
def avg_pool_kernel(xp: GM, y: GM, rh: GM, cw: GM, KH: Const[int] = 2, KW: Const[int] = 2,
                    SH: Const[int] = 2, SW: Const[int] = 2, R: Const[int] = 1):
    """y[b, oh, :] = (sum over taps of strided windows of the zero-padded planes, in f32) / (rh[oh] * cw):
    R output rows at a time (R divides OH, so every block is whole), each tap one 2-D window stepped by
    SH rows and SW columns; rh is (OH, 1)."""
    OW = y.shape[2]
    L = (OW - 1) * SW + 1
    cwt = cw[0:OW]
    for b, r in dsl.tiles2d((y.shape[0], y.shape[1]), (1, R)):
        p = b.start
        h0 = r.start * SH
        s = dsl.cast(xp[p, h0:h0 + (R - 1) * SH + 1:SH, 0:L:SW], f32)
        for kk in dsl.range(1, KH * KW):
            a = kk % KW
            hk = h0 + kk // KW
            s = s + dsl.cast(xp[p, hk:hk + (R - 1) * SH + 1:SH, a:a + L:SW], f32)
        y[p, r, :] = dsl.cast(s / (rh[r, 0:1] * cwt), y.dtype)


@dsl.kernel
def max_pool_flat_kernel(xp: GM, gidx: GM, tidx: GM, y: GM, ind: GM, W: int, CP: int, PS: int, CS: int,
                         ROFF: int,
                         NI: Const[int] = 1, NO: Const[int] = 1, P: Const[int] = 1, T: Const[int] = 1,
                         KW: Const[int] = 1, DH: Const[int] = 1, DW: Const[int] = 1):
    """Flat max pool (module doc, "Forward"): per block of P groups one contiguous input window, each
    tap a V gather of it (the first 9 taps' index rows stay in UB); running max and the winning tap's
    offset, plus torch's index of tap 0 (tidx) and the chunk's row offset."""
    g0 = gidx[0, :]
    if T > 1:
        g1 = gidx[1, :]
    if T > 2:
        g2 = gidx[2, :]
    if T > 3:
        g3 = gidx[3, :]
    if T > 4:
        g4 = gidx[4, :]
    if T > 5:
        g5 = gidx[5, :]
    if T > 6:
        g6 = gidx[6, :]
    if T > 7:
        g7 = gidx[7, :]
    if T > 8:
        g8 = gidx[8, :]
    t0 = tidx[0, :]
    for t in dsl.tiles(y.shape[0] // (NO // P), P):
        ch = t.start % CP
        a = (t.start // CP) * PS + ch * CS
        o = t.start * (NO // P)
        xt = xp[a:a + NI]
        m = dsl.gather(xt, g0)
        ix = dsl.zeros((NO,), i32)
        if T > 1:
            w = dsl.gather(xt, g1)
            take = (w > m) | (w != w)
            m = dsl.where(take, w, m)
            ix = dsl.where(take, ((1 // KW) * DH) * W + (1 % KW) * DW, ix)
        if T > 2:
            w = dsl.gather(xt, g2)
            take = (w > m) | (w != w)
            m = dsl.where(take, w, m)
            ix = dsl.where(take, ((2 // KW) * DH) * W + (2 % KW) * DW, ix)
        if T > 3:
            w = dsl.gather(xt, g3)
            take = (w > m) | (w != w)
            m = dsl.where(take, w, m)
            ix = dsl.where(take, ((3 // KW) * DH) * W + (3 % KW) * DW, ix)
        if T > 4:
            w = dsl.gather(xt, g4)
            take = (w > m) | (w != w)
            m = dsl.where(take, w, m)
            ix = dsl.where(take, ((4 // KW) * DH) * W + (4 % KW) * DW, ix)
        if T > 5:
            w = dsl.gather(xt, g5)
            take = (w > m) | (w != w)
            m = dsl.where(take, w, m)
            ix = dsl.where(take, ((5 // KW) * DH) * W + (5 % KW) * DW, ix)
        if T > 6:
            w = dsl.gather(xt, g6)
            take = (w > m) | (w != w)
            m = dsl.where(take, w, m)
            ix = dsl.where(take, ((6 // KW) * DH) * W + (6 % KW) * DW, ix)
        if T > 7:
            w = dsl.gather(xt, g7)
            take = (w > m) | (w != w)
            m = dsl.where(take, w, m)
            ix = dsl.where(take, ((7 // KW) * DH) * W + (7 % KW) * DW, ix)
        if T > 8:
            w = dsl.gather(xt, g8)
            take = (w > m) | (w != w)
            m = dsl.where(take, w, m)
            ix = dsl.where(take, ((8 // KW) * DH) * W + (8 % KW) * DW, ix)
        if T > 9:
            for kk in dsl.range(9, T):
                w = dsl.gather(xt, gidx[kk, :])
                take = (w > m) | (w != w)
                m = dsl.where(take, w, m)
                ix = dsl.where(take, ((kk // KW) * DH) * W + (kk % KW) * DW, ix)
        y[o:o + NO] = m
        ind[o:o + NO] = ix + t0 + ch * ROFF


@dsl.kernel
def avg_pool_flat_kernel(xp: GM, gidx: GM, dv: GM, y: GM, CP: int, PS: int, CS: int, NI: Const[int] = 1,
                         NO: Const[int] = 1, P: Const[int] = 1, T: Const[int] = 1):
    """Flat avg pool (module doc, "Forward"): the taps gathered from one contiguous input window per
    block of P groups, summed in f32 in row-major tap order, divided by torch's divisor dv[chunk]."""
    g0 = gidx[0, :]
    if T > 1:
        g1 = gidx[1, :]
    if T > 2:
        g2 = gidx[2, :]
    if T > 3:
        g3 = gidx[3, :]
    if T > 4:
        g4 = gidx[4, :]
    if T > 5:
        g5 = gidx[5, :]
    if T > 6:
        g6 = gidx[6, :]
    if T > 7:
        g7 = gidx[7, :]
    if T > 8:
        g8 = gidx[8, :]
    d0 = dv[0, :]
    for t in dsl.tiles(y.shape[0] // (NO // P), P):
        ch = t.start % CP
        a = (t.start // CP) * PS + ch * CS
        o = t.start * (NO // P)
        xt = xp[a:a + NI]
        s = dsl.cast(dsl.gather(xt, g0), f32)
        if T > 1:
            s = s + dsl.cast(dsl.gather(xt, g1), f32)
        if T > 2:
            s = s + dsl.cast(dsl.gather(xt, g2), f32)
        if T > 3:
            s = s + dsl.cast(dsl.gather(xt, g3), f32)
        if T > 4:
            s = s + dsl.cast(dsl.gather(xt, g4), f32)
        if T > 5:
            s = s + dsl.cast(dsl.gather(xt, g5), f32)
        if T > 6:
            s = s + dsl.cast(dsl.gather(xt, g6), f32)
        if T > 7:
            s = s + dsl.cast(dsl.gather(xt, g7), f32)
        if T > 8:
            s = s + dsl.cast(dsl.gather(xt, g8), f32)
        if T > 9:
            for kk in dsl.range(9, T):
                s = s + dsl.cast(dsl.gather(xt, gidx[kk, :]), f32)
        if CP == 1:
            y[o:o + NO] = dsl.cast(s / d0, y.dtype)
        else:
            y[o:o + NO] = dsl.cast(s / dv[ch, :], y.dtype)


@dsl.kernel
def pool_backward_kernel(gy: GM, ind: GM, gxp: GM, iota: GM, rh: GM, cw: GM, W: int,
                         MODE: Const[str] = "max", PH: Const[int] = 0, PW: Const[int] = 0,
                         KH: Const[int] = 2, KW: Const[int] = 2, SH: Const[int] = 2, SW: Const[int] = 2,
                         DH: Const[int] = 1, DW: Const[int] = 1):
    """gxp (f32, padded) = scatter-add of gy over the taps; one core owns each plane (RMW on GM).
    max: routed by ind (W is the unpadded width); avg: gy / (rh[oh] * cw)."""
    OW = gy.shape[2]
    L = (OW - 1) * SW + 1
    io = iota[0:OW] * SW
    cwt = cw[0:OW]
    for b in dsl.tiles(gy.shape[0], 1):
        p = b.start
        for h in dsl.range(gxp.shape[1]):
            gxp[p, h, :] = 0.0
        # taps outside, rows inside: the windows of one tap on different output rows never overlap,
        # so no iteration of the inner loop reads what the previous one stored (see the module doc)
        for kk in dsl.range(KH * KW):
            a = (kk % KW) * DW
            for oh in dsl.range(gy.shape[1]):
                row = oh * SH + (kk // KW) * DH
                cur = gxp[p, row, a:a + L:SW]
                g = dsl.cast(gy[p, oh, :], f32)
                if MODE == "max":
                    hit = ind[p, oh, :] == io + ((row - PH) * W + a - PW)
                    gxp[p, row, a:a + L:SW] = cur + dsl.where(hit, g, 0.0)
                else:
                    gxp[p, row, a:a + L:SW] = cur + g / (rh[oh:oh + 1] * cwt)


def _torch() -> Any:
    import torch

    return torch


def _iota(n: int) -> Any:
    return _torch().arange(max(n, 1), dtype=_torch().int32)


def _out_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> int:
    """torch's pooling output size (pooling_output_shape)."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _padded_size(n: int, k: int, s: int, p: int, d: int, out: int) -> int:
    """Rows (or columns) of the padded buffer: the padded input, grown so the last window fits."""
    return max(n + 2 * p, (out - 1) * s + d * (k - 1) + 1)


def _avg_divisors(n: int, k: int, s: int, p: int, out: int, count_include_pad: bool) -> Any:
    """torch's avg-pool divisor factor along one axis, per output index (f32, index arithmetic only)."""
    f = []
    for o in range(max(out, 1)):
        start = o * s - p
        end = min(start + k, n + p)
        if count_include_pad:
            f.append(end - start)
        else:
            f.append(max(min(end, n) - max(start, 0), 1))   # never 0 (an empty window sums to 0)
    return _torch().tensor(f, dtype=_torch().float32)


def _avg_factors(H: int, W: int, k: tuple[int, int], s: tuple[int, int], p: tuple[int, int], OH: int, OW: int,
                 count_include_pad: bool, divisor_override: Any) -> tuple[Any, Any]:
    """(rh (OH,), cw (OW,)) with divisor(oh, ow) = rh[oh] * cw[ow], as torch's avg_pool2d divides."""
    torch = _torch()
    if divisor_override is not None:
        if int(divisor_override) == 0:
            raise ValueError("divisor_override must be non-zero")
        return (torch.full((max(OH, 1),), float(int(divisor_override)), dtype=torch.float32),
                torch.ones((max(OW, 1),), dtype=torch.float32))
    return (_avg_divisors(H, k[0], s[0], p[0], OH, count_include_pad),
            _avg_divisors(W, k[1], s[1], p[1], OW, count_include_pad))


def pad_planes(x3: Any, ph: int, pw: int, fill: float, dtype: Any = None, size: Any = None) -> Any:
    """A (B, H + 2ph, W + 2pw) copy of the planes x3 (B, H, W), the border set to fill. size=(HP, WP)
    makes the buffer larger on the bottom/right (x still at (ph, pw), the rest fill). With nothing to
    pad (and no cast) it is x3 itself: callers only read it."""
    torch = _torch()
    B, H, W = x3.shape
    HP, WP = size if size is not None else (H + 2 * ph, W + 2 * pw)
    if (HP, WP) == (H, W) and (dtype is None or dtype == x3.dtype):   # nothing to pad: x3 itself
        return x3.contiguous()
    xp = torch.empty((B, HP, WP), dtype=dtype or x3.dtype)
    if xp.dtype == x3.dtype and xp.numel():   # one pass of blocks of rows (data_kernels.pad2d)
        bc = 1 << max(0, WP - 1).bit_length()
        split = bc * xp.element_size() > 16384
        if split:
            bc = 16384 // xp.element_size()
        br = max(1, min(64, 16384 // xp.element_size() // bc))
        pad2d(x3, xp, ph, pw, float(fill), 0, FLOAT=1, BR=1 << (br.bit_length() - 1), BC=bc, SPLIT=int(split))
    else:
        pad_kernel(x3, xp, float(fill), PT=ph, PL=pw)
    return xp


def crop_planes(xp: Any, ph: int, pw: int, shape: tuple[int, int, int], dtype: Any) -> Any:
    """The interior (B, H, W) of the padded planes xp (at rows ph.., columns pw..), cast to dtype."""
    out = _torch().empty(shape, dtype=dtype)
    crop_kernel(xp, out, PT=ph, PL=pw)
    return out


_FLAT_IN = 32 * 1024    # bytes of input per block (one contiguous window, double-buffered in UB)
_FLAT_OUT = 2048        # outputs per block
_FLAT_INDEX = 48 * 1024  # bytes of the gather index rows kept in UB (up to 9 taps)


@functools.lru_cache(maxsize=64)
def _flat_plan(B: int, HP: int, WP: int, OH: int, OW: int, k: tuple[int, int], s: tuple[int, int],
               d: tuple[int, int], esize: int) -> tuple[int, int, int, int, int, int] | None:
    """(P planes per block, R output rows per group, CP groups per plane, CS input stride of a group,
    NI input elements per block, NO outputs per block) for the flat kernels, or None when even one
    output row's input does not fit (then the row kernels run). A group is R output rows of one plane
    (R divides OH); whole planes (CP = 1) are taken P at a time (P divides B): every block is whole."""
    (KH, KW), SH, DH = k, s[0], d[0]
    PS = HP * WP
    out = min(_FLAT_OUT, _FLAT_INDEX // (4 * min(KH * KW, 9)))
    if PS * esize <= _FLAT_IN and OH * OW <= out:
        pmax = max(1, min(_FLAT_IN // (PS * esize), out // (OH * OW)))
        P = max(p for p in range(1, pmax + 1) if B % p == 0)
        return P, OH, 1, PS, P * PS, P * OH * OW
    for R in range(OH, 0, -1):
        NR = (R - 1) * SH + (KH - 1) * DH + 1
        if OH % R == 0 and NR * WP * esize <= _FLAT_IN and R * OW <= out:
            return 1, R, OH // R, R * SH * WP, NR * WP, R * OW
    return None


@functools.lru_cache(maxsize=64)
def _flat_tables(HP: int, WP: int, W: int, OH: int, OW: int, k: tuple[int, int], s: tuple[int, int],
                 p: tuple[int, int], d: tuple[int, int], P: int, R: int) -> tuple[Any, Any]:
    """(gidx, tidx), each (KH*KW, P*R*OW) int32: per tap, the position in a block's input window that
    each output of the block reads, and torch's flat index of that tap in the unpadded plane (for the
    block's first group; later groups of a plane add their chunk offset in the kernel). Cached: the
    kernels only read them."""
    torch = _torch()
    (KH, KW), (SH, SW), (PH, PW), (DH, DW) = k, s, p, d
    r = torch.arange(R, dtype=torch.int64).view(1, R, 1)
    ow = torch.arange(OW, dtype=torch.int64).view(1, 1, OW)
    pl = torch.arange(P, dtype=torch.int64).view(P, 1, 1) * (HP * WP)
    g, t = [], []
    for kh in range(KH):
        for kw in range(KW):
            row = r * SH + kh * DH
            col = ow * SW + kw * DW
            g.append((pl + row * WP + col).reshape(-1))
            t.append(((row - PH) * W + col - PW).expand(P, R, OW).reshape(-1))
    return torch.stack(g).to(torch.int32).contiguous(), torch.stack(t).to(torch.int32).contiguous()


def _flat_divisors(rh: Any, cw: Any, P: int, R: int) -> Any:
    """dv (CP, P*R*OW) f32: torch's divisor rh[oh] * cw[ow] of each output of a block of chunk c."""
    OH, OW = rh.shape[0], cw.shape[0]
    dv = (rh.view(OH // R, 1, R, 1) * cw.view(1, 1, 1, OW)).expand(OH // R, P, R, OW)
    return dv.reshape(OH // R, -1).contiguous()


def _params(kernel_size: Any, stride: Any, padding: Any, dilation: Any = 1):
    k = _pair(kernel_size)
    s = _pair(stride) if stride is not None and stride != [] else k
    return k, s, _pair(padding), _pair(dilation)


def _check_out(grad_y: Any, OH: int, OW: int) -> None:
    if (grad_y.shape[2], grad_y.shape[3]) != (OH, OW):
        raise ValueError(f"grad_y has spatial shape {tuple(grad_y.shape[2:])}, the forward gives {(OH, OW)} "
                         "(check ceil_mode)")


def max_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False) -> tuple[Any, Any]:
    """torch.nn.functional.max_pool2d(x, ..., ceil_mode=ceil_mode, return_indices=True) for NCHW x
    (f32/f16/bf16): returns (y, indices) with int64 indices into each H*W plane, as torch does."""
    torch = _torch()
    (KH, KW), (SH, SW), (PH, PW), (DH, DW) = _params(kernel_size, stride, padding, dilation)
    N, C, H, W = x.shape
    OH, OW = _out_size(H, KH, SH, PH, DH, ceil_mode), _out_size(W, KW, SW, PW, DW, ceil_mode)
    HP, WP = _padded_size(H, KH, SH, PH, DH, OH), _padded_size(W, KW, SW, PW, DW, OW)
    xp = pad_planes(x.contiguous().reshape(N * C, H, W), PH, PW, float("-inf"), size=(HP, WP))
    y = torch.empty((N * C, OH, OW), dtype=x.dtype)
    ind = torch.empty((N * C, OH, OW), dtype=torch.int32)
    plan = _flat_plan(N * C, HP, WP, OH, OW, (KH, KW), (SH, SW), (DH, DW), x.element_size()) if y.numel() else None
    if plan is not None:
        P, R, CP, CS, NI, NO = plan
        gidx, tidx = _flat_tables(HP, WP, W, OH, OW, (KH, KW), (SH, SW), (PH, PW), (DH, DW), P, R)
        max_pool_flat_kernel(xp.reshape(-1), gidx, tidx, y.reshape(-1), ind.reshape(-1), W, CP, HP * WP, CS,
                             R * SH * W, NI=NI, NO=NO, P=P, T=KH * KW, KW=KW, DH=DH, DW=DW)
        return y.reshape(N, C, OH, OW), ind.reshape(N, C, OH, OW).to(torch.int64)
    max_pool_kernel(xp, y, ind, _iota(OW), W, PH=PH, PW=PW, KH=KH, KW=KW, SH=SH, SW=SW, DH=DH, DW=DW)
    return y.reshape(N, C, OH, OW), ind.reshape(N, C, OH, OW).to(torch.int64)


def max_pool2d_backward(grad_y: Any, x_shape: Any, indices: Any, kernel_size: Any, stride: Any = None,
                        padding: Any = 0, dilation: Any = 1, dtype: Any = None, ceil_mode: bool = False) -> Any:
    """Gradient of max_pool2d w.r.t. x: grad_y routed to the argmax positions (indices from the forward,
    which was run with the same ceil_mode)."""
    torch = _torch()
    (KH, KW), (SH, SW), (PH, PW), (DH, DW) = _params(kernel_size, stride, padding, dilation)
    N, C, H, W = x_shape
    OH, OW = _out_size(H, KH, SH, PH, DH, ceil_mode), _out_size(W, KW, SW, PW, DW, ceil_mode)
    _check_out(grad_y, OH, OW)
    HP, WP = _padded_size(H, KH, SH, PH, DH, OH), _padded_size(W, KW, SW, PW, DW, OW)
    gy = grad_y.contiguous().reshape(N * C, OH, OW)
    ind = indices.to(torch.int32).contiguous().reshape(N * C, OH, OW)
    gxp = torch.empty((N * C, HP, WP), dtype=torch.float32)
    rh, cw = _avg_factors(H, W, (KH, KW), (SH, SW), (PH, PW), OH, OW, True, 1)   # unused by MODE="max"
    pool_backward_kernel(gy, ind, gxp, _iota(OW), rh, cw, W, MODE="max", PH=PH, PW=PW, KH=KH, KW=KW,
                         SH=SH, SW=SW, DH=DH, DW=DW)
    return crop_planes(gxp, PH, PW, (N * C, H, W), dtype or grad_y.dtype).reshape(N, C, H, W)


def avg_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Any = None) -> Any:
    """torch.nn.functional.avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
    divisor_override) for NCHW x (f32/f16/bf16; f32 sums, divided by torch's divisor)."""
    torch = _torch()
    (KH, KW), (SH, SW), (PH, PW), _ = _params(kernel_size, stride, padding)
    N, C, H, W = x.shape
    OH, OW = _out_size(H, KH, SH, PH, 1, ceil_mode), _out_size(W, KW, SW, PW, 1, ceil_mode)
    HP, WP = _padded_size(H, KH, SH, PH, 1, OH), _padded_size(W, KW, SW, PW, 1, OW)
    rh, cw = _avg_factors(H, W, (KH, KW), (SH, SW), (PH, PW), OH, OW, count_include_pad, divisor_override)
    xp = pad_planes(x.contiguous().reshape(N * C, H, W), PH, PW, 0.0, size=(HP, WP))
    y = torch.empty((N * C, OH, OW), dtype=x.dtype)
    plan = _flat_plan(N * C, HP, WP, OH, OW, (KH, KW), (SH, SW), (1, 1), x.element_size()) if y.numel() else None
    if plan is not None:
        P, R, CP, CS, NI, NO = plan
        gidx, _ = _flat_tables(HP, WP, W, OH, OW, (KH, KW), (SH, SW), (PH, PW), (1, 1), P, R)
        avg_pool_flat_kernel(xp.reshape(-1), gidx, _flat_divisors(rh, cw, P, R), y.reshape(-1), CP, HP * WP, CS,
                             NI=NI, NO=NO, P=P, T=KH * KW)
    elif y.numel():
        # output rows per block: a divisor of OH, up to 16 and ~2048 outputs (UB holds a few such tiles)
        rows = max(r for r in range(1, 17) if OH % r == 0 and (r == 1 or r * OW <= 2048))
        avg_pool_kernel(xp, y, rh.reshape(-1, 1), cw, KH=KH, KW=KW, SH=SH, SW=SW, R=rows)
    return y.reshape(N, C, OH, OW)


def avg_pool2d_backward(grad_y: Any, x_shape: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                        dtype: Any = None, ceil_mode: bool = False, count_include_pad: bool = True,
                        divisor_override: Any = None) -> Any:
    """Gradient of avg_pool2d w.r.t. x: grad_y / divisor spread over each window (the divisor as in
    the forward with the same ceil_mode, count_include_pad, divisor_override)."""
    torch = _torch()
    (KH, KW), (SH, SW), (PH, PW), _ = _params(kernel_size, stride, padding)
    N, C, H, W = x_shape
    OH, OW = _out_size(H, KH, SH, PH, 1, ceil_mode), _out_size(W, KW, SW, PW, 1, ceil_mode)
    _check_out(grad_y, OH, OW)
    HP, WP = _padded_size(H, KH, SH, PH, 1, OH), _padded_size(W, KW, SW, PW, 1, OW)
    rh, cw = _avg_factors(H, W, (KH, KW), (SH, SW), (PH, PW), OH, OW, count_include_pad, divisor_override)
    gy = grad_y.contiguous().reshape(N * C, OH, OW)
    gxp = torch.empty((N * C, HP, WP), dtype=torch.float32)
    pool_backward_kernel(gy, _iota(1), gxp, _iota(OW), rh, cw, W, MODE="avg", PH=PH, PW=PW, KH=KH, KW=KW,
                         SH=SH, SW=SW)
    return crop_planes(gxp, PH, PW, (N * C, H, W), dtype or grad_y.dtype).reshape(N, C, H, W)
