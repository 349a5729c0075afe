"""DSL kernels behind op_library.norm (softmax family and normalisations), forward and backward.

Every kernel loads its inputs in their own dtype, computes in f32 (statistics, exponentials,
sums) and rounds once when it stores. Three shapes of kernel recur:

- `*_rows`: a block of R whole rows per tile (`x[r, :]`, R x D in UB): one pass over GM
  (MTE2 load, V statistics and result, MTE3 store), double-buffered by the compiler.
- `*_rows_blocked`: rows too long for UB. Pass 1 walks the row in CB-column blocks keeping
  running per-row statistics ((R, 1) tiles: online max/sum for softmax, Chan's merge of block
  mean and M2 for layer_norm, a sum of squares for rms_norm), pass 2 walks it again and stores.
- `*_cols`: softmax over a dimension other than the last, the tensor viewed as (O, R, I) with
  the reduction over R: a tile is x[o, :, c] (R x C, C columns of the inner dimension), reduced
  along axis 0; `*_cols_blocked` walks R in RB-row blocks with running (1, C) statistics.

Weight and bias gradients are summed over rows in f32: each core keeps a (1, D) accumulator in
UB across its tiles and adds it into a zeroed f32 GM buffer with `dsl.atomic_add` at the end;
`cast_kernel` rounds that buffer to the parameter's dtype.

-inf is passed in as the runtime scalar `ninf` (a float literal cannot be infinite). The online
softmax shifts by `where(m == -inf, 0, m)` so a block that is all -inf leaves the running sum at
0 instead of NaN; a whole row of -inf still gives NaN (exp(-inf - -inf)), as torch does.
"""
from __future__ import annotations

import dsl
from dsl import GM, Const, f32

# softmax / log_softmax forward -------------------------------------------------------------------


@dsl.kernel
def softmax_rows(x: GM, y: GM, LOG: Const[int] = 0, R: Const[int] = 2):
    """y = softmax (LOG=1: log_softmax) of each row of x (N, D); R rows per tile, one pass."""
    for r in dsl.tiles(x.shape[0], R):
        xt = dsl.cast(x[r, :], f32)
        m = dsl.max(xt, axis=1, keepdims=True)
        e = dsl.exp(xt - m)
        s = dsl.sum(e, axis=1, keepdims=True)
        if LOG == 1:
            y[r, :] = dsl.cast(xt - m - dsl.log(s), y.dtype)
        else:
            y[r, :] = dsl.cast(e / s, y.dtype)


@dsl.kernel
def masked_softmax_rows(x: GM, mask: GM, y: GM, scale: float, ninf: float, R: Const[int] = 2):
    """y = softmax(where(mask != 0, -inf, x * scale)) of each row (mask i8, x's shape)."""
    for r in dsl.tiles(x.shape[0], R):
        xt = dsl.where(mask[r, :] != 0, ninf, dsl.cast(x[r, :], f32) * scale)
        m = dsl.max(xt, axis=1, keepdims=True)
        e = dsl.exp(xt - m)
        y[r, :] = dsl.cast(e / dsl.sum(e, axis=1, keepdims=True), y.dtype)


@dsl.kernel
def softmax_rows_blocked(x: GM, y: GM, ninf: float, LOG: Const[int] = 0, R: Const[int] = 1,
                         CB: Const[int] = 4096):
    """Long rows: pass 1 online max / sum over CB-column blocks, pass 2 stores."""
    D = x.shape[1]
    for r in dsl.tiles(x.shape[0], R):
        m = dsl.full((r.len, 1), ninf, f32)
        s = dsl.zeros((r.len, 1), f32)
        for c in dsl.range(0, D, CB):
            blk = dsl.cast(x[r, c], f32)
            mn = dsl.maximum(m, dsl.max(blk, axis=1, keepdims=True))
            ms = dsl.where(mn == ninf, 0.0, mn)
            s = s * dsl.exp(m - ms) + dsl.sum(dsl.exp(blk - ms), axis=1, keepdims=True)
            m = mn
        if LOG == 1:
            sh = m + dsl.log(s)
            for c in dsl.range(0, D, CB):
                y[r, c] = dsl.cast(dsl.cast(x[r, c], f32) - sh, y.dtype)
        else:
            inv = 1.0 / s
            for c in dsl.range(0, D, CB):
                y[r, c] = dsl.cast(dsl.exp(dsl.cast(x[r, c], f32) - m) * inv, y.dtype)


@dsl.kernel
def softmax_cols(x: GM, y: GM, LOG: Const[int] = 0, C: Const[int] = 64):
    """x (O, R, I), softmax over R: tiles x[o, :, c] (R x C) reduced along axis 0, one pass."""
    for o, c in dsl.tiles2d((x.shape[0], x.shape[2]), (1, C)):
        xt = dsl.cast(x[o.start, :, c], f32)
        m = dsl.max(xt, axis=0, keepdims=True)
        e = dsl.exp(xt - m)
        s = dsl.sum(e, axis=0, keepdims=True)
        if LOG == 1:
            y[o.start, :, c] = dsl.cast(xt - m - dsl.log(s), y.dtype)
        else:
            y[o.start, :, c] = dsl.cast(e / s, y.dtype)


@dsl.kernel
def softmax_cols_blocked(x: GM, y: GM, ninf: float, LOG: Const[int] = 0, C: Const[int] = 64,
                         RB: Const[int] = 64):
    """x (O, R, I), softmax over R too long for UB: online (1, C) max / sum over RB-row blocks."""
    R = x.shape[1]
    for o, c in dsl.tiles2d((x.shape[0], x.shape[2]), (1, C)):
        m = dsl.full((1, c.len), ninf, f32)
        s = dsl.zeros((1, c.len), f32)
        for r in dsl.range(0, R, RB):
            blk = dsl.cast(x[o.start, r, c], f32)
            mn = dsl.maximum(m, dsl.max(blk, axis=0, keepdims=True))
            ms = dsl.where(mn == ninf, 0.0, mn)
            s = s * dsl.exp(m - ms) + dsl.sum(dsl.exp(blk - ms), axis=0, keepdims=True)
            m = mn
        if LOG == 1:
            sh = m + dsl.log(s)
            for r in dsl.range(0, R, RB):
                y[o.start, r, c] = dsl.cast(dsl.cast(x[o.start, r, c], f32) - sh, y.dtype)
        else:
            inv = 1.0 / s
            for r in dsl.range(0, R, RB):
                y[o.start, r, c] = dsl.cast(dsl.exp(dsl.cast(x[o.start, r, c], f32) - m) * inv, y.dtype)


# softmax / log_softmax backward: softmax gx = scale * y * (g - sum(g * y)); log_softmax
# gx = g - exp(y) * sum(g) --------------------------------------------------------------------------


@dsl.kernel
def softmax_bwd_rows(g: GM, y: GM, gx: GM, scale: float, LOG: Const[int] = 0, R: Const[int] = 2):
    for r in dsl.tiles(g.shape[0], R):
        gt = dsl.cast(g[r, :], f32)
        yt = dsl.cast(y[r, :], f32)
        if LOG == 1:
            gx[r, :] = dsl.cast(gt - dsl.exp(yt) * dsl.sum(gt, axis=1, keepdims=True), gx.dtype)
        else:
            s = dsl.sum(gt * yt, axis=1, keepdims=True)
            gx[r, :] = dsl.cast(yt * (gt - s) * scale, gx.dtype)


@dsl.kernel
def softmax_bwd_rows_blocked(g: GM, y: GM, gx: GM, scale: float, LOG: Const[int] = 0, R: Const[int] = 1,
                             CB: Const[int] = 4096):
    D = g.shape[1]
    for r in dsl.tiles(g.shape[0], R):
        s = dsl.zeros((r.len, 1), f32)
        for c in dsl.range(0, D, CB):
            if LOG == 1:
                s = s + dsl.sum(dsl.cast(g[r, c], f32), axis=1, keepdims=True)
            else:
                s = s + dsl.sum(dsl.cast(g[r, c], f32) * dsl.cast(y[r, c], f32), axis=1, keepdims=True)
        for c in dsl.range(0, D, CB):
            gt = dsl.cast(g[r, c], f32)
            yt = dsl.cast(y[r, c], f32)
            if LOG == 1:
                gx[r, c] = dsl.cast(gt - dsl.exp(yt) * s, gx.dtype)
            else:
                gx[r, c] = dsl.cast(yt * (gt - s) * scale, gx.dtype)


@dsl.kernel
def softmax_bwd_cols(g: GM, y: GM, gx: GM, LOG: Const[int] = 0, C: Const[int] = 64):
    for o, c in dsl.tiles2d((g.shape[0], g.shape[2]), (1, C)):
        gt = dsl.cast(g[o.start, :, c], f32)
        yt = dsl.cast(y[o.start, :, c], f32)
        if LOG == 1:
            gx[o.start, :, c] = dsl.cast(gt - dsl.exp(yt) * dsl.sum(gt, axis=0, keepdims=True), gx.dtype)
        else:
            gx[o.start, :, c] = dsl.cast(yt * (gt - dsl.sum(gt * yt, axis=0, keepdims=True)), gx.dtype)


@dsl.kernel
def softmax_bwd_cols_blocked(g: GM, y: GM, gx: GM, LOG: Const[int] = 0, C: Const[int] = 64,
                             RB: Const[int] = 64):
    R = g.shape[1]
    for o, c in dsl.tiles2d((g.shape[0], g.shape[2]), (1, C)):
        s = dsl.zeros((1, c.len), f32)
        for r in dsl.range(0, R, RB):
            if LOG == 1:
                s = s + dsl.sum(dsl.cast(g[o.start, r, c], f32), axis=0, keepdims=True)
            else:
                s = s + dsl.sum(dsl.cast(g[o.start, r, c], f32) * dsl.cast(y[o.start, r, c], f32), axis=0,
                                keepdims=True)
        for r in dsl.range(0, R, RB):
            gt = dsl.cast(g[o.start, r, c], f32)
            yt = dsl.cast(y[o.start, r, c], f32)
            if LOG == 1:
                gx[o.start, r, c] = dsl.cast(gt - dsl.exp(yt) * s, gx.dtype)
            else:
                gx[o.start, r, c] = dsl.cast(yt * (gt - s), gx.dtype)


# layer_norm / rms_norm forward ---------------------------------------------------------------------


@dsl.kernel
def layer_norm_rows(x: GM, w: GM, b: GM, y: GM, eps: float, HAS_W: Const[int] = 1, HAS_B: Const[int] = 1,
                    R: Const[int] = 2):
    """y = (x - mean) * rsqrt(var + eps) * w + b per row (biased variance, two-pass in UB)."""
    D = x.shape[1]
    if HAS_W == 1:
        wt = dsl.cast(w[0:1, :], f32)
    if HAS_B == 1:
        bt = dsl.cast(b[0:1, :], f32)
    for r in dsl.tiles(x.shape[0], R):
        xt = dsl.cast(x[r, :], f32)
        xc = xt - dsl.sum(xt, axis=1, keepdims=True) / D
        yt = xc * dsl.rsqrt(dsl.sum(xc * xc, axis=1, keepdims=True) / D + eps)
        if HAS_W == 1:
            yt = yt * wt
        if HAS_B == 1:
            yt = yt + bt
        y[r, :] = dsl.cast(yt, y.dtype)


@dsl.kernel
def layer_norm_rows_blocked(x: GM, w: GM, b: GM, y: GM, eps: float, HAS_W: Const[int] = 1,
                            HAS_B: Const[int] = 1, R: Const[int] = 1, CB: Const[int] = 4096):
    """Long rows: block mean and M2 merged (Chan et al.) over CB-column blocks, then a store pass."""
    D = x.shape[1]
    for r in dsl.tiles(x.shape[0], R):
        mean = dsl.zeros((r.len, 1), f32)
        m2 = dsl.zeros((r.len, 1), f32)
        for c in dsl.range(0, D, CB):
            nb = dsl.min(c + CB, D) - c
            blk = dsl.cast(x[r, c], f32)
            bm = dsl.sum(blk, axis=1, keepdims=True) / nb
            bc = blk - bm
            na = c
            d = bm - mean
            mean = mean + d * (nb / (na + nb))
            m2 = m2 + dsl.sum(bc * bc, axis=1, keepdims=True) + d * d * (na * nb / (na + nb))
        rs = dsl.rsqrt(m2 / D + eps)
        for c in dsl.range(0, D, CB):
            yt = (dsl.cast(x[r, c], f32) - mean) * rs
            if HAS_W == 1:
                yt = yt * dsl.cast(w[0:1, c], f32)
            if HAS_B == 1:
                yt = yt + dsl.cast(b[0:1, c], f32)
            y[r, c] = dsl.cast(yt, y.dtype)


@dsl.kernel
def rms_norm_rows(x: GM, x2: GM, w: GM, y: GM, rstd: GM, xsum: GM, eps: float, ADD: Const[int] = 0,
                  HAS_W: Const[int] = 1, R: Const[int] = 2):
    """y = x * rsqrt(mean(x^2) + eps) * w per row, rstd (N, 1) f32; ADD=1: x = x + x2 (in f32,
    also stored into xsum)."""
    D = x.shape[1]
    if HAS_W == 1:
        wt = dsl.cast(w[0:1, :], f32)
    for r in dsl.tiles(x.shape[0], R):
        xt = dsl.cast(x[r, :], f32)
        if ADD == 1:
            xt = xt + dsl.cast(x2[r, :], f32)
            xsum[r, :] = dsl.cast(xt, xsum.dtype)
        rs = dsl.rsqrt(dsl.sum(xt * xt, axis=1, keepdims=True) / D + eps)
        rstd[r, 0:1] = rs
        yt = xt * rs
        if HAS_W == 1:
            yt = yt * wt
        y[r, :] = dsl.cast(yt, y.dtype)


@dsl.kernel
def rms_norm_rows_blocked(x: GM, x2: GM, w: GM, y: GM, rstd: GM, xsum: GM, eps: float, ADD: Const[int] = 0,
                          HAS_W: Const[int] = 1, R: Const[int] = 1, CB: Const[int] = 4096):
    """Long rows: sum of squares over CB-column blocks, then a store pass (ADD: see rms_norm_rows)."""
    D = x.shape[1]
    for r in dsl.tiles(x.shape[0], R):
        ss = dsl.zeros((r.len, 1), f32)
        for c in dsl.range(0, D, CB):
            xt = dsl.cast(x[r, c], f32)
            if ADD == 1:
                xt = xt + dsl.cast(x2[r, c], f32)
                xsum[r, c] = dsl.cast(xt, xsum.dtype)
            ss = ss + dsl.sum(xt * xt, axis=1, keepdims=True)
        rs = dsl.rsqrt(ss / D + eps)
        rstd[r, 0:1] = rs
        for c in dsl.range(0, D, CB):
            xt = dsl.cast(x[r, c], f32)
            if ADD == 1:
                xt = xt + dsl.cast(x2[r, c], f32)
            yt = xt * rs
            if HAS_W == 1:
                yt = yt * dsl.cast(w[0:1, c], f32)
            y[r, c] = dsl.cast(yt, y.dtype)


# layer_norm / rms_norm backward (mean and rstd recomputed from x) --------------------------------------


@dsl.kernel
def layer_norm_bwd_rows(g: GM, x: GM, w: GM, gx: GM, gw: GM, gb: GM, stats: GM, eps: float,
                        HAS_W: Const[int] = 1, GRAD_WB: Const[int] = 1, R: Const[int] = 2):
    """gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = g * w. GRAD_WB=1 adds this core's
    sums of g * xhat and g over its rows into gw, gb ((1, D) f32, zeroed); GRAD_WB=2 stores each
    row's (mean, rstd) into stats (N, 2) f32 for `norm_param_grad_cols` instead (wide rows)."""
    D = x.shape[1]
    if HAS_W == 1:
        wt = dsl.cast(w[0:1, :], f32)
    if GRAD_WB == 1:
        aw = dsl.zeros((1, D), f32)
        ab = dsl.zeros((1, D), f32)
    for r in dsl.tiles(x.shape[0], R):
        xt = dsl.cast(x[r, :], f32)
        gt = dsl.cast(g[r, :], f32)
        mean = dsl.sum(xt, axis=1, keepdims=True) / D
        xc = xt - mean
        rs = dsl.rsqrt(dsl.sum(xc * xc, axis=1, keepdims=True) / D + eps)
        xh = xc * rs
        if GRAD_WB == 1:
            aw += dsl.sum(gt * xh, axis=0, keepdims=True)
            ab += dsl.sum(gt, axis=0, keepdims=True)
        if GRAD_WB == 2:
            stats[r, 0:1] = mean
            stats[r, 1:2] = rs
        if HAS_W == 1:
            gt = gt * wt
        mg = dsl.sum(gt, axis=1, keepdims=True) / D
        mgx = dsl.sum(gt * xh, axis=1, keepdims=True) / D
        gx[r, :] = dsl.cast((gt - mg - xh * mgx) * rs, gx.dtype)
    if GRAD_WB == 1:
        dsl.atomic_add(gw[0:1, :], aw)
        dsl.atomic_add(gb[0:1, :], ab)


@dsl.kernel
def rms_norm_bwd_rows(g: GM, x: GM, w: GM, g2: GM, gx: GM, gw: GM, stats: GM, eps: float,
                      HAS_W: Const[int] = 1, GRAD_W: Const[int] = 1, ADDG: Const[int] = 0, R: Const[int] = 2):
    """gx = rstd * (gh - xhat * mean(gh * xhat)), gh = g * w (+ g2 with ADDG=1: the gradient that
    reaches npu_add_rms_norm's x1 + x2 output); GRAD_W=1 adds the sums of g * xhat into gw,
    GRAD_W=2 stores (0, rstd) per row into stats (N, 2) for `norm_param_grad_cols`."""
    D = x.shape[1]
    if HAS_W == 1:
        wt = dsl.cast(w[0:1, :], f32)
    if GRAD_W == 1:
        aw = dsl.zeros((1, D), f32)
    for r in dsl.tiles(x.shape[0], R):
        xt = dsl.cast(x[r, :], f32)
        gt = dsl.cast(g[r, :], f32)
        rs = dsl.rsqrt(dsl.sum(xt * xt, axis=1, keepdims=True) / D + eps)
        xh = xt * rs
        if GRAD_W == 1:
            aw += dsl.sum(gt * xh, axis=0, keepdims=True)
        if GRAD_W == 2:
            stats[r, 0:1] = dsl.zeros((r.len, 1), f32)
            stats[r, 1:2] = rs
        if HAS_W == 1:
            gt = gt * wt
        res = (gt - xh * (dsl.sum(gt * xh, axis=1, keepdims=True) / D)) * rs
        if ADDG == 1:
            res = res + dsl.cast(g2[r, :], f32)
        gx[r, :] = dsl.cast(res, gx.dtype)
    if GRAD_W == 1:
        dsl.atomic_add(gw[0:1, :], aw)


@dsl.kernel
def norm_bwd_rows_blocked(g: GM, x: GM, w: GM, g2: GM, gx: GM, stats: GM, eps: float, RMS: Const[int] = 0,
                          HAS_W: Const[int] = 1, ADDG: Const[int] = 0, R: Const[int] = 1, CB: Const[int] = 4096):
    """layer_norm (RMS=0) / rms_norm (RMS=1) backward for rows too long for UB, three passes over
    CB-column blocks: the statistics (Chan's merge / sum of squares), the sums of gh and gh * xhat,
    then gx (+ g2 with ADDG=1). Stores (mean, rstd) per row into stats for `norm_param_grad_cols`."""
    D = x.shape[1]
    for r in dsl.tiles(x.shape[0], R):
        mean = dsl.zeros((r.len, 1), f32)
        m2 = dsl.zeros((r.len, 1), f32)
        for c in dsl.range(0, D, CB):
            blk = dsl.cast(x[r, c], f32)
            if RMS == 1:
                m2 = m2 + dsl.sum(blk * blk, axis=1, keepdims=True)
            else:
                nb = dsl.min(c + CB, D) - c
                bm = dsl.sum(blk, axis=1, keepdims=True) / nb
                bc = blk - bm
                d = bm - mean
                mean = mean + d * (nb / (c + nb))
                m2 = m2 + dsl.sum(bc * bc, axis=1, keepdims=True) + d * d * (c * nb / (c + nb))
        rs = dsl.rsqrt(m2 / D + eps)
        stats[r, 0:1] = mean
        stats[r, 1:2] = rs
        s1 = dsl.zeros((r.len, 1), f32)
        s2 = dsl.zeros((r.len, 1), f32)
        for c in dsl.range(0, D, CB):
            gt = dsl.cast(g[r, c], f32)
            if HAS_W == 1:
                gt = gt * dsl.cast(w[0:1, c], f32)
            xh = (dsl.cast(x[r, c], f32) - mean) * rs
            s1 = s1 + dsl.sum(gt, axis=1, keepdims=True)
            s2 = s2 + dsl.sum(gt * xh, axis=1, keepdims=True)
        s1 = s1 / D
        s2 = s2 / D
        for c in dsl.range(0, D, CB):
            gt = dsl.cast(g[r, c], f32)
            if HAS_W == 1:
                gt = gt * dsl.cast(w[0:1, c], f32)
            xh = (dsl.cast(x[r, c], f32) - mean) * rs
            if RMS == 1:
                res = (gt - xh * s2) * rs
            else:
                res = (gt - s1 - xh * s2) * rs
            if ADDG == 1:
                res = res + dsl.cast(g2[r, c], f32)
            gx[r, c] = dsl.cast(res, gx.dtype)


@dsl.kernel
def norm_param_grad_cols(g: GM, x: GM, stats: GM, gw: GM, gb: GM, WANT_B: Const[int] = 1, C: Const[int] = 64,
                         RB: Const[int] = 64):
    """gw = sum over rows of g * (x - mean) * rstd, gb = sum of g ((1, D) f32), stats (N, 2) =
    (mean, rstd) per row: C-column blocks over cores, RB-row blocks down the rows (f32 sums)."""
    N = x.shape[0]
    for c in dsl.tiles(x.shape[1], C):
        aw = dsl.zeros((1, c.len), f32)
        ab = dsl.zeros((1, c.len), f32)
        for r in dsl.range(0, N, RB):
            gt = dsl.cast(g[r, c], f32)
            xh = (dsl.cast(x[r, c], f32) - stats[r, 0:1]) * stats[r, 1:2]
            aw = aw + dsl.sum(gt * xh, axis=0, keepdims=True)
            if WANT_B == 1:
                ab = ab + dsl.sum(gt, axis=0, keepdims=True)
        gw[0:1, c] = aw
        if WANT_B == 1:
            gb[0:1, c] = ab


@dsl.kernel
def cast_kernel(x: GM, y: GM, TILE: Const[int] = 4096):
    """y = x rounded to y's dtype (1-D)."""
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.cast(x[t], y.dtype)
