"""2-D convolution (NCHW, torch.nn.functional.conv2d semantics) by img2col on the cube, and its backward.

Shapes: x (N, C, H, W), w (CO, Cg, KH, KW) with Cg = C / G, COg = CO / G, K = Cg*KH*KW,
L = OH*OW. The im2col matrix of image n is colsT[n] (C*KH*KW, L), row r = (c, kh, kw); viewed
per group it is cols3 (N*G, K, L), so group g of image n is cols3[n*G + g].

Forward by shifted windows (`conv_shift_kernel`: no im2col matrix), any stride
1. Stride phases: output (oh, ow) of tap (kh, kw) reads padded row oh*SH + kh*DH = SH*(oh + vh) + a
   with vh = (kh*DH) // SH, a = (kh*DH) % SH (columns alike: vw, e), so it reads phase plane (a, e)
   (padded rows a + SH*r, columns e + SW*j) at (oh + vh, ow + vw): a plain shift. Phase planes have
   RQ = OH + max vh rows and WQ = OW + max vw columns (just what valid outputs read) plus one zero
   slack row. Stride 1: one phase, the padded planes themselves (`pool.pad_planes`: data_kernels.pad2d,
   blocks of rows in one pass). Otherwise `pool.pad_planes` (zeros up to SH*RQ x SW*WQ) then
   `conv_phase_kernel` (one strided 2-D gather per block of rows) builds xq (., P = SH*SW, Cg, flat).
2. Viewed flat, tap t of flat output position q = oh*WQ + ow reads xq[., ph(t), c, q + vh*WQ + vw]:
   each tap's B operand is a plain 2-D window of one phase plane. outp (COg, LP) = sum over taps of
   w4[g, t] (COg, Cg) @ that window, all accumulated in one L0C tile (w4: w in tap-major layout);
   bias as below. Columns ow >= OW of each row are junk (they wrap into the next row).
3. Per image (xq (N*G, P, Cg, (RQ+1)*WQ)), or for small planes (fewer than `_BATCH_BELOW` output
   positions) with the images stacked along the rows (xq (G, P, Cg, (N*RQ+1)*WQ), one matmul over
   the batch, the weights loaded once per column block, outp (CO, N, RQ, WQ)): `conv_crop_kernel`
   keeps rows < OH, columns < OW (and transposes (CO, N) back); no crop when nothing is dropped.
Forward by im2col (few input channels per group, where each tap's K = Cg would waste the cube's
K fractal; or small strided planes, where the phase planes are >1.4x the output: `_use_im2col`)
1. `pool.pad_planes` as above (no slack).
2. `im2col_kernel` (rows (plane, tap) dealt over the cores): per block of RB output rows,
   colsT[p, tap, oh:oh+RB, :] = xp[p, oh*SH + kh*DH : ... : SH, kw*DW : ... : SW] -- one strided 2-D
   gather GM -> UB on MTE2 and one contiguous store UB -> GM on MTE3 (small planes: the images side
   by side, colsT (C, KH*KW, N*L), one matmul over the batch, then the transposing crop).
3. `conv_mm_kernel`: out3[n*G + g] (COg, L) = w3[g] (COg, K) @ cols3[n*G + g] (K, L) on the cube
   (GM -> L1 on MTE2, L1 -> L0A/L0B on MTE1, mmad on M into L0C, f32 accumulation); without bias
   it leaves L0C through FIX (cast fused), with bias L0C -> UB on FIX, V adds the (COg, 1) bias
   column, MTE3 stores.

Backward (grad_y viewed as gy3 (N*G, COg, L))
- grad_w: `conv_grad_w_kernel`, gw3[g] = sum_n gy3[n*G + g] @ cols3[n*G + g].T, the n and L loops
  both accumulate in one L0C tile (cols3.T windows are transposed on the L1 -> L0B move).
- grad_b: `conv_grad_b_kernel`, row sums of gy (N, CO, L) over n and L on V (f32 accumulation).
- grad_x: `conv_dcols_kernel`, dcols3[n*G + g] = w3[g].T @ gy3[n*G + g] on the cube (f32 out), then
  `col2im_kernel` (one core per (n, c) plane, so the read-modify-write is race-free): zero the
  plane of an f32 padded buffer, and for each tap and output row add the dcols row into the
  strided window (MTE2 gather, V add, MTE3 scatter); `pool.crop_kernel` removes the padding and
  casts to the input dtype.
"""
from __future__ import annotations

from typing import Any

import dsl
from dsl import GM, Const, f32
from op_library.pool import _pair, crop_planes, pad_planes

__all__ = ["conv2d", "conv2d_backward"]

# stack the images into one matmul when an image has fewer output positions (measured: 8x64x16x16 with
# 288 is faster per image, 8x64x8x8 stride 2 with 20-16 faster stacked)
_BATCH_BELOW = 128
_IM2COL_BATCH_BELOW = 128  # the same for im2col (8x64x8x8 s2: 0.26 ms for one 128x576x128 matmul vs 0.32 per image)


@dsl.kernel
def conv_pad_planes_kernel(x: GM, xpf: GM, PT: Const[int] = 0, PL: Const[int] = 0, WP: Const[int] = 1,
                           PB: Const[int] = 1):
    """Zero padding for many small planes, into the flat view xpf (N*C, rows*WP) of the padded
    planes: per block of PB planes, the planes zeroed whole (long contiguous rows), then one 2-D window
    per input row with the planes as its rows (the plane pitch as row stride)."""
    W = x.shape[2]
    for b in dsl.tiles(x.shape[0], PB):
        xpf[b, :] = 0.0
        for h in dsl.range(x.shape[1]):
            o = (h + PT) * WP + PL
            xpf[b, o:o + W] = x[b, h, :]


@dsl.kernel
def im2col_planes_kernel(xp: GM, cols: GM, KW: Const[int] = 1, SH: Const[int] = 1, SW: Const[int] = 1,
                         DH: Const[int] = 1, DW: Const[int] = 1, PB: Const[int] = 1):
    """im2col_kernel for small planes, with the channels of one image as the rows of each DMA: for
    padded planes xp (N, C, Hp, Wp) and cols (N, C, T, OH, OW), per (image, tap, block of PB channels)
    and output row one strided gather and one store."""
    N = xp.shape[0]
    OH = cols.shape[3]
    L = (cols.shape[4] - 1) * SW + 1
    for bt, c in dsl.tiles2d((N * cols.shape[2], xp.shape[1]), (1, PB)):
        n = bt.start // cols.shape[2]
        t = bt.start % cols.shape[2]
        a = (t % KW) * DW
        for oh in dsl.range(OH):
            cols[n, c, t, oh, :] = xp[n, c, oh * SH + (t // KW) * DH, a:a + L:SW]


@dsl.kernel
def im2col_planes_batch_kernel(xp: GM, cols: GM, KW: Const[int] = 1, SH: Const[int] = 1, SW: Const[int] = 1,
                               DH: Const[int] = 1, DW: Const[int] = 1, PB: Const[int] = 1):
    """im2col_planes_kernel into the batched layout cols (C, T, N, OH, OW): the images side by side."""
    N = xp.shape[0]
    OH = cols.shape[3]
    L = (cols.shape[4] - 1) * SW + 1
    for bt, c in dsl.tiles2d((N * cols.shape[1], xp.shape[1]), (1, PB)):
        n = bt.start // cols.shape[1]
        t = bt.start % cols.shape[1]
        a = (t % KW) * DW
        for oh in dsl.range(OH):
            cols[c, t, n, oh, :] = xp[n, c, oh * SH + (t // KW) * DH, a:a + L:SW]


@dsl.kernel
def im2col_kernel(xp: GM, cols: GM, KW: Const[int] = 1, SH: Const[int] = 1, SW: Const[int] = 1,
                  DH: Const[int] = 1, DW: Const[int] = 1, RB: Const[int] = 1, C: Const[int] = 1,
                  BATCH: Const[bool] = False):
    """cols[p, kh*KW + kw, oh, ow] = xp[p, oh*SH + kh*DH, ow*SW + kw*DW] for padded planes xp (with
    BATCH, plane p = (n, c) goes to cols[c, tap, n*OH + oh, ow] instead: the images side by side):
    per (plane, tap) and block of RB output rows (RB divides OH) one strided 2-D gather and one store."""
    OW = cols.shape[3]
    OH = cols.shape[2] * cols.shape[0] // xp.shape[0]
    L = (OW - 1) * SW + 1
    for b, r in dsl.tiles2d((xp.shape[0], cols.shape[1]), (1, 1)):
        p = b.start
        t = r.start
        a = (t % KW) * DW
        d = p
        base = 0
        if BATCH:
            d = p % C
            base = (p // C) * OH
        for oh in dsl.range(0, OH, RB):
            h = oh * SH + (t // KW) * DH
            cols[d, t, base + oh:base + oh + RB, :] = xp[p, h:h + (RB - 1) * SH + 1:SH, a:a + L:SW]


@dsl.kernel
def conv_phase_kernel(xp: GM, xq: GM, C: Const[int] = 1, CG: Const[int] = 1, SH: Const[int] = 1,
                      SW: Const[int] = 1, RQ: Const[int] = 1, BATCH: Const[bool] = False, RB: Const[int] = 1):
    """Stride-phase planes of the padded planes xp (N*C, >= SH*RQ, >= SW*WQ): phase ph = (a, e) of
    plane p = (n, c) is xq[d, base + r, j] = xp[p, a + SH*r, e + SW*j] (r < RQ, j < WQ) with
    d = (g*P + ph)*CG + c % CG and base = n*RQ when BATCH (the images stacked along the rows), else d
    counts (n, g) first and base = 0; one zero slack row follows the last image. One core per
    (plane, phase): per block of RB rows (RB divides RQ) one strided 2-D gather and one store."""
    WQ = xq.shape[2]
    P = SH * SW
    NB = (xq.shape[1] - 1) // RQ
    L = SW * (WQ - 1) + 1
    for bp, bf in dsl.tiles2d((xp.shape[0], P), (1, 1)):
        p = bp.start
        ph = bf.start
        n = p // C
        c = p % C
        a = ph // SW
        e = ph % SW
        nb = 0
        d = ((n * (C // CG) + c // CG) * P + ph) * CG + c % CG
        if BATCH:
            nb = n
            d = ((c // CG) * P + ph) * CG + c % CG
        base = nb * RQ
        if nb == NB - 1:
            xq[d, base + RQ, :] = 0.0
        for r in dsl.range(0, RQ, RB):
            h = a + SH * r
            xq[d, base + r:base + r + RB, :] = xp[p, h:h + SH * (RB - 1) + 1:SH, e:e + L:SW]


@dsl.kernel
def conv_shift_kernel(w4: GM, w2: GM, xq: GM, outp: GM, bias3: GM, LP: int, G: Const[int] = 1, KW: Const[int] = 1,
                      SH: Const[int] = 1, SW: Const[int] = 1, DH: Const[int] = 1, DW: Const[int] = 1,
                      WQ: Const[int] = 1, HAS_BIAS: Const[bool] = False, BM: Const[int] = 64,
                      BN: Const[int] = 128, BK: Const[int] = 64, CO1: Const[int] = 0):
    """Conv without im2col: outp[i, :, q] (q over LP flat positions of the phase planes, row pitch WQ) =
    sum over taps t and channels c of w4[i % G, t, :, c] * xq[i, ph(t), c, q + off(t)], where tap
    (kh, kw) reads phase ((kh*DH) % SH, (kw*DW) % SW) shifted by ((kh*DH) // SH)*WQ + (kw*DW) // SW:
    each tap's B operand is a plain 2-D window of one phase plane."""
    T = w4.shape[1]
    if CO1 > 0:   # one group, CO1 = COg output channels in one block: every tap's weights stay in L1
        w1 = dsl.alloc(dsl.L1, (w2.shape[0], w2.shape[1]), w2.dtype)
        dsl.copy(w1, w2[0:w2.shape[0], :])
    # (image-group, column block) pairs over the cores: a few images still spread over every core
    for i, n in dsl.tiles2d((xq.shape[0], LP), (1, BN)):
        g = i.start % G
        for m in dsl.range(0, w4.shape[2], BM):
            acc = dsl.zeros((BM, BN), f32)
            KC = (w4.shape[3] + BK - 1) // BK
            for tk in dsl.range(T * KC):   # taps x K steps in one loop: each step's loads overlap the last mmad
                t = tk // KC
                k = (tk % KC) * BK
                ke = dsl.min(k + BK, w4.shape[3])
                vh = (t // KW) * DH
                vw = (t % KW) * DW
                ph = (vh % SH) * SW + vw % SW
                s = n.start + (vh // SH) * WQ + vw // SW
                if CO1 > 0:
                    acc += w1[t * CO1:t * CO1 + CO1, k:ke] @ xq[i.start, ph, k:ke, s:s + n.len]
                else:
                    acc += w4[g, t, m, k:ke] @ xq[i.start, ph, k:ke, s:s + n.len]
            if HAS_BIAS:
                outp[i.start, m, n] = dsl.cast(acc + dsl.cast(bias3[g, m, 0:1], f32), outp.dtype)
            else:
                outp[i.start, m, n] = dsl.cast(acc, outp.dtype)


@dsl.kernel
def conv_crop_kernel(outp: GM, out: GM, TRANS: Const[bool] = False, RB: Const[int] = 32):
    """out[n, c] = outp[n, c] (outp[c, n] if TRANS) restricted to its first OH rows and OW columns."""
    OH = out.shape[2]
    OW = out.shape[3]
    for b, c in dsl.tiles2d((out.shape[0], out.shape[1]), (1, 1)):
        for r in dsl.range(0, OH, RB):
            if TRANS:
                out[b.start, c.start, r:dsl.min(r + RB, OH), :] = outp[c.start, b.start, r:dsl.min(r + RB, OH), 0:OW]
            else:
                out[b.start, c.start, r:dsl.min(r + RB, OH), :] = outp[b.start, c.start, r:dsl.min(r + RB, OH), 0:OW]


@dsl.kernel
def conv_crop_rows_kernel(outp: GM, out: GM, RB: Const[int] = 64):
    """out[r, :] = outp[r, 0:OW] on the (planes * OH, width) row views: blocks of RB rows across planes."""
    for r in dsl.tiles(out.shape[0], RB):
        out[r, :] = outp[r, 0:out.shape[1]]


@dsl.kernel
def conv_crop_planes_kernel(outp: GM, out: GM, CB: Const[int] = 1):
    """The transposing crop for small planes: out[n, c, r, :] = outp[c, n, r, 0:OW], the channels of
    a block of CB as the rows of each DMA (one per image, output row and block)."""
    OH = out.shape[2]
    OW = out.shape[3]
    for b, c in dsl.tiles2d((out.shape[0], out.shape[1]), (1, CB)):
        for r in dsl.range(OH):
            out[b.start, c, r, :] = outp[c, b.start, r, 0:OW]


@dsl.kernel
def conv_mm_kernel(w3: GM, cols3: GM, out3: GM, bias3: GM, G: Const[int] = 1, HAS_BIAS: Const[bool] = False,
                   BM: Const[int] = 64, BN: Const[int] = 128, BK: Const[int] = 64):
    """out3[i] = w3[i % G] @ cols3[i] (+ bias3[i % G], a (COg, 1) column) for every image-group i."""
    for i, m in dsl.tiles2d((cols3.shape[0], w3.shape[1]), (1, BM)):
        g = i.start % G
        for n in dsl.tiles(cols3.shape[2], BN):
            acc = dsl.zeros((BM, BN), f32)
            for k in dsl.range(0, w3.shape[2], BK):
                acc += w3[g, m, k] @ cols3[i.start, k, n]
            if HAS_BIAS:
                out3[i.start, m, n] = dsl.cast(acc + dsl.cast(bias3[g, m, 0:1], f32), out3.dtype)
            else:
                out3[i.start, m, n] = dsl.cast(acc, out3.dtype)


@dsl.kernel
def conv_grad_w_kernel(gy3: GM, cols3: GM, gw3: GM, G: Const[int] = 1, BM: Const[int] = 128,
                       BN: Const[int] = 128, BK: Const[int] = 64):
    """gw3[g] = sum_n gy3[n*G + g] @ cols3[n*G + g].T, accumulated over n and L in L0C."""
    nimg = cols3.shape[0] // G
    for g, m in dsl.tiles2d((G, gw3.shape[1]), (1, BM)):
        for j in dsl.tiles(gw3.shape[2], BN):
            acc = dsl.zeros((BM, BN), f32)
            for n in dsl.range(nimg):
                for k in dsl.range(0, cols3.shape[2], BK):
                    acc += gy3[n * G + g.start, m, k] @ cols3.T[n * G + g.start, k, j]
            gw3[g.start, m, j] = dsl.cast(acc, gw3.dtype)


@dsl.kernel
def conv_dcols_kernel(w3: GM, gy3: GM, dcols3: GM, G: Const[int] = 1, BM: Const[int] = 128,
                      BN: Const[int] = 128, BK: Const[int] = 64):
    """dcols3[i] = w3[i % G].T @ gy3[i] (the im2col-space gradient, f32)."""
    for i, m in dsl.tiles2d((gy3.shape[0], w3.shape[2]), (1, BM)):
        g = i.start % G
        for n in dsl.tiles(gy3.shape[2], BN):
            acc = dsl.zeros((BM, BN), f32)
            for k in dsl.range(0, w3.shape[1], BK):
                acc += w3.T[g, m, k] @ gy3[i.start, k, n]
            dcols3[i.start, m, n] = dsl.cast(acc, dcols3.dtype)


@dsl.kernel
def col2im_kernel(dcols: GM, gxp: GM, OW: Const[int] = 1, KH: Const[int] = 1, KW: Const[int] = 1,
                  SH: Const[int] = 1, SW: Const[int] = 1, DH: Const[int] = 1, DW: Const[int] = 1):
    """gxp[p] = 0, then += dcols[p, tap, oh row] at the strided positions of each tap (one core per plane)."""
    L = (OW - 1) * SW + 1
    OH = dcols.shape[2] // OW
    for b in dsl.tiles(gxp.shape[0], 1):
        p = b.start
        for h in dsl.range(gxp.shape[1]):
            gxp[p, h, :] = 0.0
        for t in dsl.range(KH * KW):
            kh = t // KW
            a = (t % KW) * DW
            for oh in dsl.range(OH):
                o = oh * OW
                row = oh * SH + kh * DH
                cur = gxp[p, row, a:a + L:SW]
                gxp[p, row, a:a + L:SW] = cur + dsl.cast(dcols[p, t, o:o + OW], f32)


@dsl.kernel
def conv_grad_b_kernel(gy: GM, gb: GM, R: Const[int] = 8, BL: Const[int] = 1024):
    """gb[c] = sum over n and l of gy[n, c, l] (gy viewed as (N, CO, L)), f32 accumulation."""
    L = gy.shape[2]
    for c in dsl.tiles(gy.shape[1], R):
        acc = dsl.sum(dsl.cast(gy[0, c, 0:dsl.min(BL, L)], f32), axis=1, keepdims=True)
        for l in dsl.range(BL, L, BL):
            acc = acc + dsl.sum(dsl.cast(gy[0, c, l], f32), axis=1, keepdims=True)
        for n in dsl.range(1, gy.shape[0]):
            for l in dsl.range(0, L, BL):
                acc = acc + dsl.sum(dsl.cast(gy[n, c, l], f32), axis=1, keepdims=True)
        gb[c] = dsl.cast(dsl.sum(acc, axis=1), gb.dtype)


def _torch() -> Any:
    import torch

    return torch


def _geometry(x_shape: Any, w_shape: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> dict[str, int]:
    N, C, H, W = (int(v) for v in x_shape)
    CO, Cg, KH, KW = (int(v) for v in w_shape)
    (SH, SW), (PH, PW), (DH, DW) = _pair(stride), _pair(padding), _pair(dilation)
    G = int(groups)
    if C != Cg * G or CO % G:
        raise ValueError(f"conv2d: channels {C} / out {CO} do not match groups={G} and weight {tuple(w_shape)}")
    OH = (H + 2 * PH - DH * (KH - 1) - 1) // SH + 1
    OW = (W + 2 * PW - DW * (KW - 1) - 1) // SW + 1
    if OH <= 0 or OW <= 0:
        raise ValueError("conv2d: the kernel does not fit the padded input")
    return dict(N=N, C=C, H=H, W=W, CO=CO, Cg=Cg, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW, DH=DH, DW=DW,
                G=G, OH=OH, OW=OW, COg=CO // G, K=Cg * KH * KW, L=OH * OW)


def _rows(n: int, row_bytes: int, budget: int = 32 * 1024, divides: bool = False) -> int:
    """Rows per block: as many as fit `budget` bytes of UB (at least 1, at most n); a divisor of n if asked."""
    rb = max(1, min(n, budget // max(1, row_bytes)))
    while divides and n % rb:
        rb -= 1
    return rb


def _pad(x: Any, d: dict[str, int], rows: int | None = None, cols: int | None = None) -> Any:
    """The zero-padded planes (N*C, rows, cols) of x (defaults H + 2PH, W + 2PW; padding at the top
    and left, zeros up to rows and cols), or x's own planes when nothing is added."""
    torch = _torch()
    N, C, H, W, PH, PW = d["N"], d["C"], d["H"], d["W"], d["PH"], d["PW"]
    x3 = x.contiguous().reshape(N * C, H, W)
    rows = H + 2 * PH if rows is None else rows
    Wp = W + 2 * PW if cols is None else cols
    if rows == H and Wp == W:
        return x3
    rb, pb = _rows(rows, Wp * x.element_size()), _rows(N * C, rows * Wp * x.element_size())
    if -(-N * C // pb) * (1 + H) < N * C * (-(-rows // rb) + -(-H // rb)):  # fewer DMAs: planes as rows
        xp = torch.empty((N * C, rows, Wp), dtype=x.dtype)
        conv_pad_planes_kernel(x3, xp.reshape(N * C, rows * Wp), PT=PH, PL=PW, WP=Wp, PB=pb)
        return xp
    return pad_planes(x3, PH, PW, 0.0, size=(rows, Wp))   # data_kernels.pad2d: blocks of rows, one pass


def _im2col(x: Any, d: dict[str, int], into: Any = None, batch: bool = False) -> Any:
    """colsT (N*C, KH*KW, OH*OW) of x (zero padding applied first), in the memory of `into` if given
    (a contiguous tensor of at least as many bytes); with `batch` (C, KH*KW, N*OH*OW) instead."""
    torch = _torch()
    N, C, OH, OW = d["N"], d["C"], d["OH"], d["OW"]
    xp = _pad(x, d)
    shape = (C, d["KH"] * d["KW"], N * OH, OW) if batch else (N * C, d["KH"] * d["KW"], OH, OW)
    if into is None:
        cols = torch.empty(shape, dtype=x.dtype)
    else:
        nbytes = N * C * d["KH"] * d["KW"] * d["L"] * x.element_size()
        cols = into.reshape(-1).view(torch.uint8)[:nbytes].view(x.dtype).reshape(shape)
    T, esize = d["KH"] * d["KW"], x.element_size()
    rb, pb = _rows(OH, OW * esize, divides=True), _rows(C, OW * esize)
    geo = dict(KW=d["KW"], SH=d["SH"], SW=d["SW"], DH=d["DH"], DW=d["DW"])
    if -(-C // pb) * OH < C * (OH // rb):  # fewer DMAs with the channels as the rows of each
        xp4 = xp.reshape(N, C, xp.shape[1], xp.shape[2])
        if batch:
            im2col_planes_batch_kernel(xp4, cols.reshape(C, T, N, OH, OW), PB=pb, **geo)
        else:
            im2col_planes_kernel(xp4, cols.reshape(N, C, T, OH, OW), PB=pb, **geo)
    else:
        im2col_kernel(xp, cols, RB=rb, C=C, BATCH=batch, **geo)
    return cols.reshape(shape[0], d["KH"] * d["KW"], -1)


def _conv_shift(x: Any, w: Any, b3: Any, has_bias: bool, d: dict[str, int], out: Any,
                batch: bool | None = None) -> None:
    """Forward into out (N, CO, OH, OW) by `conv_shift_kernel` (no im2col matrix): x is split into
    zero-padded stride-phase planes (RQ rows, WQ columns: just what the valid outputs read, plus a
    slack row), the output is computed over the phase width WQ and cropped. With `batch` (default:
    small planes) the images are stacked along each phase plane's rows, so one matmul spans the batch
    (its N dimension is N*RQ*WQ) and the weights are loaded once per column block, not per image."""
    torch = _torch()
    N, C, G, CO, COg, Cg, KH, KW = d["N"], d["C"], d["G"], d["CO"], d["COg"], d["Cg"], d["KH"], d["KW"]
    SH, SW, DH, DW, OH, OW = d["SH"], d["SW"], d["DH"], d["DW"], d["OH"], d["OW"]
    RQ = OH + (KH - 1) * DH // SH
    WQ = OW + (KW - 1) * DW // SW
    if batch is None:
        batch = N > 1 and OH * WQ < _BATCH_BELOW
    P = SH * SW
    if batch:
        xq = torch.empty((G * P * Cg, N * RQ + 1, WQ), dtype=x.dtype)
        outp = torch.empty((CO, N, RQ, WQ), dtype=x.dtype)
        LP, B = ((N - 1) * RQ + OH) * WQ, G
    else:
        xq = None
        outp = out if WQ == OW else torch.empty((N, CO, OH, WQ), dtype=x.dtype)
        LP, B = OH * WQ, N * G
    if P == 1 and not batch:  # the padded planes (with a slack row) are the phase planes
        xq = _pad(x, d, RQ + 1, WQ)
    else:
        xp = _pad(x, d, max(SH * RQ, d["H"] + d["PH"]), max(SW * WQ, d["W"] + d["PW"]))
        if xq is None:
            xq = torch.empty((N * G * P * Cg, RQ + 1, WQ), dtype=x.dtype)
        conv_phase_kernel(xp, xq, C=C, CG=Cg, SH=SH, SW=SW, RQ=RQ, BATCH=batch,
                          RB=_rows(RQ, WQ * x.element_size(), divides=True))
    w4 = w.reshape(G, COg, Cg, KH * KW).permute(0, 3, 1, 2).contiguous()  # tap-major weight layout
    # one group whose output channels fill one 16-aligned block: the weights are loaded into L1 once per core
    co1 = COg if G == 1 and COg % 16 == 0 and COg <= 64 and w4.numel() * w4.element_size() <= 256 * 1024 else 0
    blocks = _shift_blocks(B, LP, Cg, KH * KW, co1 or 64, x.element_size())
    conv_shift_kernel(w4, w4.reshape(-1, Cg), xq.reshape(B, P, Cg, -1), outp.reshape(B, COg, -1), b3, LP, G=G,
                      KW=KW, SH=SH, SW=SW, DH=DH, DW=DW, WQ=WQ, HAS_BIAS=has_bias, CO1=co1, BM=co1 or 64, **blocks)
    if outp is not out:
        _crop(outp, out, batch, WQ)


def _cores() -> int:
    """Cores of the configured chip (only used to pick block sizes)."""
    from compiler import CONFIG
    from dsl.kernel import _config

    return int(_config(CONFIG.hw).cores)


def _shift_blocks(B: int, LP: int, Cg: int, T: int, BM: int, esize: int) -> dict[str, int]:
    """BK and BN of `conv_shift_kernel` (B image-groups of LP columns, T taps, BM output rows): the
    (image, block) pairs spread over the cores so that the busiest core has the fewest columns, each
    pair costing ~32 columns more for its pipeline fill and drain (the step loop drains and the
    accumulator leaves through FIX before the next pair's first mmad) and each K step ~0.4 of a column;
    BN a multiple of 16 up to 288, BK (16, 32 or 64) no larger than Cg needs; the B window
    double-buffered in L0B (64 KiB), the accumulator within 72 KiB of L0C. Measured on the bench case
    4x32x56x56 -> 64 k3 p1 f32 (LP 3248): BK 16 BN 272 (2 pairs per core) 11.3k cycles in this kernel,
    BK 32 BN 192 (3) 11.7k, BK 64 BN 128 (5) 14.2k."""
    cores = _cores()
    best: tuple[float, int, int] = (float("inf"), -16, 96)
    for bk in (16, 32, 64):
        if bk > max(16, -(-Cg // 16) * 16):
            continue
        steps = T * -(-Cg // bk)
        for bn in range(96, 289, 16):
            if 2 * bk * bn * esize > 64 * 1024 or BM * bn * 4 > 72 * 1024:
                continue
            per_core = -(-B * -(-LP // bn) // cores)
            key = (per_core * (bn + 32 + 0.4 * steps), -bk, bn)
            best = min(best, key)
    return dict(BK=-best[1], BN=best[2])


def _crop(outp: Any, out: Any, trans: bool, width: int) -> None:
    """out (N, CO, OH, OW) from outp ((CO, N) transposed if `trans`, rows >= OH and columns >= OW
    dropped), by whichever crop kernel issues fewer DMAs."""
    N, CO, OH, OW = out.shape
    if not trans and outp.shape[2] == OH:   # only columns dropped: blocks of rows across the planes
        conv_crop_rows_kernel(outp.reshape(-1, width), out.view(-1, OW), RB=_rows(N * CO * OH, width * out.element_size(), 16384))
        return
    rb, cb = _rows(OH, width * out.element_size()), _rows(CO, width * out.element_size())
    if trans and N * -(-CO // cb) * OH < N * CO * -(-OH // rb):
        conv_crop_planes_kernel(outp, out, CB=cb)
    else:
        conv_crop_kernel(outp, out, TRANS=trans, RB=rb)


def _use_im2col(d: dict[str, int]) -> bool:
    """Build the im2col matrix (K = Cg*KH*KW) instead of shifted windows when each tap's matmul would
    have K = Cg under one fractal (few input channels), or when the phase planes are much larger than
    the output (small strided planes: e.g. a 4x4 output reads 5x5 phase planes, 1.56x the matmul
    columns; measured on 8x64x8x8 -> 128 stride 2, im2col is ~15% faster there)."""
    if d["K"] == d["Cg"]:
        return False
    RQ = d["OH"] + (d["KH"] - 1) * d["DH"] // d["SH"]
    WQ = d["OW"] + (d["KW"] - 1) * d["DW"] // d["SW"]
    return d["Cg"] < 8 or RQ * WQ > 1.4 * d["L"]


def _check_conv(x: Any, w: Any, bias: Any) -> None:
    """torch's checks (and messages) for conv2d's tensors, before any kernel runs."""
    if x.dim() not in (3, 4):
        raise RuntimeError(f"Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: "
                           f"{list(x.shape)}")
    if w.dim() != 4:
        raise RuntimeError(f"weight should have 4 dimensions for conv2d, but got weight of size: {list(w.shape)}")
    floats = ("torch.float32", "torch.float16", "torch.bfloat16")
    if str(x.dtype) not in floats:
        raise RuntimeError(f"conv2d: input has dtype {x.dtype}; the kernels take float32, float16 or bfloat16")
    if w.dtype != x.dtype:
        raise RuntimeError(f"Input type ({x.dtype}) and weight type ({w.dtype}) should be the same")
    if bias is not None and bias.dtype != x.dtype:
        raise RuntimeError(f"Input type ({x.dtype}) and bias type ({bias.dtype}) should be the same")


def conv2d(x: Any, w: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1) -> Any:
    """torch.nn.functional.conv2d for NCHW (or unbatched CHW) torch tensors (f32, f16, bf16; f32
    accumulation): shifted windows of the padded stride-phase planes (`conv_shift_kernel`), or for few
    input channels zero padding + im2col on the vector side and one cube matmul per image and group;
    bias on V."""
    torch = _torch()
    _check_conv(x, w, bias)
    if x.dim() == 3:
        return conv2d(x.unsqueeze(0), w, bias, stride, padding, dilation, groups).squeeze(0)
    d = _geometry(x.shape, w.shape, stride, padding, dilation, groups)
    N, G, COg, K, L = d["N"], d["G"], d["COg"], d["K"], d["L"]
    out = torch.empty((N, d["CO"], d["OH"], d["OW"]), dtype=x.dtype)
    b3 = bias.contiguous().reshape(G, COg, 1) if bias is not None else torch.zeros((G, COg, 1), dtype=x.dtype)
    if not _use_im2col(d):  # the shift kernel (stride phases, no im2col matrix)
        _conv_shift(x, w, b3, bias is not None, d, out)
        return out
    w3 = w.contiguous().reshape(G, COg, K)
    if N > 1 and L < _IM2COL_BATCH_BELOW:  # small planes: one matmul over the images side by side
        outp = torch.empty((d["CO"], N, d["OH"], d["OW"]), dtype=x.dtype)
        conv_mm_kernel(w3, _im2col(x, d, batch=True).reshape(G, K, N * L), outp.reshape(G, COg, N * L), b3, G=G,
                       HAS_BIAS=bias is not None)
        _crop(outp, out, True, d["OW"])
        return out
    cols3 = _im2col(x, d).reshape(N * G, K, L)
    conv_mm_kernel(w3, cols3, out.reshape(N * G, COg, L), b3, G=G, HAS_BIAS=bias is not None)
    return out


def conv2d_backward(grad_y: Any, x: Any, w: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                    groups: int = 1, with_bias: bool = True) -> tuple[Any, Any, Any]:
    """Gradients of conv2d: (grad_x, grad_w, grad_b) (grad_b None unless with_bias), each in its
    input's dtype. im2col is recomputed from x; see the module docstring for the dataflow."""
    torch = _torch()
    if x.dim() == 3:   # unbatched
        gx, gw, gb = conv2d_backward(grad_y.unsqueeze(0), x.unsqueeze(0), w, stride, padding, dilation, groups,
                                     with_bias)
        return gx.squeeze(0), gw, gb
    d = _geometry(x.shape, w.shape, stride, padding, dilation, groups)
    N, C, G, COg, K, L = d["N"], d["C"], d["G"], d["COg"], d["K"], d["L"]
    gy = grad_y.contiguous()
    gy3 = gy.reshape(N * G, COg, L)
    w3 = w.contiguous().reshape(G, COg, K)
    # one f32 buffer serves as cols3 (read by grad_w) and then as dcols: a fresh multi-megabyte
    # buffer per call costs more in page faults than the kernels that fill it
    dcols = torch.empty((N * G, K, L), dtype=torch.float32)
    # grad_w
    cols3 = _im2col(x, d, into=dcols).reshape(N * G, K, L)
    gw = torch.empty(w.shape, dtype=w.dtype)
    conv_grad_w_kernel(gy3, cols3, gw.reshape(G, COg, K), G=G)
    # grad_b
    gb = None
    if with_bias:
        gb = torch.empty(d["CO"], dtype=grad_y.dtype)
        conv_grad_b_kernel(gy.reshape(N, d["CO"], L), gb)
    # grad_x: dcols on the cube, then col2im scatter-add and crop
    conv_dcols_kernel(w3, gy3, dcols, G=G)  # overwrites cols3
    Hp, Wp = d["H"] + 2 * d["PH"], d["W"] + 2 * d["PW"]
    gxp = torch.empty((N * C, Hp, Wp), dtype=torch.float32)
    col2im_kernel(dcols.reshape(N * C, d["KH"] * d["KW"], L), gxp, OW=d["OW"], KH=d["KH"], KW=d["KW"],
                  SH=d["SH"], SW=d["SW"], DH=d["DH"], DW=d["DW"])
    gx = crop_planes(gxp, d["PH"], d["PW"], (N * C, d["H"], d["W"]), x.dtype).reshape(x.shape)
    return gx, gw, gb
