"""The DSL kernels behind op_library.nn (embedding, losses, dropout); the public functions, their
dataflow and limits are described in op_library/nn.py.

Conventions here: float inputs are loaded in their dtype and cast to f32 in UB; every result is
computed in f32 and rounded once on the way out. Row kernels deal blocks of R rows over the cores
(`dsl.tiles`) and walk the class dimension in windows of CB columns (`dsl.range(0, C, CB)`), so any
C fits UB. Index tensors are i32 (the host converted and range-checked them).
"""
from __future__ import annotations

import dsl
from dsl import GM, Const, f32, i8, i32

# embedding ---------------------------------------------------------------------------------------


@dsl.kernel
def embedding_kernel(idx: GM[i32], w: GM, y: GM, R: Const[int] = 8, CB: Const[int] = 8192,
                     SPLIT: Const[int] = 0):
    """y[j, :] = w[idx[j], :]: S reads the index, MTE2 loads the row, MTE3 stores it (SPLIT=1: in
    windows of CB elements, for rows wider than UB; a nested loop costs a pipe barrier per row, so
    rows that fit move whole)."""
    D = w.shape[1]
    for t in dsl.tiles(idx.shape[0], R):
        for r in dsl.range(t.len):
            j = t.start + r
            i = idx[j]
            if SPLIT:
                for c in dsl.range(0, D, CB):
                    y[j, c] = w[i, c]
            else:
                y[j, :] = w[i, :]


@dsl.kernel
def embedding_backward_kernel(g: GM, idx: GM[i32], gw: GM[f32], pad: int, R: Const[int] = 8,
                              CB: Const[int] = 8192, SPLIT: Const[int] = 0):
    """gw[idx[j], :] += g[j, :] (atomic scatter-add into the zeroed f32 accumulator), skipping
    rows whose index is `pad` (pass -1 for none); SPLIT as in embedding_kernel."""
    D = g.shape[1]
    for t in dsl.tiles(idx.shape[0], R):
        for r in dsl.range(t.len):
            j = t.start + r
            i = idx[j]
            if i != pad:
                if SPLIT:
                    for c in dsl.range(0, D, CB):
                        dsl.atomic_add(gw[i, c], dsl.cast(g[j, c], f32))
                else:
                    dsl.atomic_add(gw[i, :], dsl.cast(g[j, :], f32))


@dsl.kernel
def count_kernel(idx: GM[i32], cnt: GM[i32], R: Const[int] = 64):
    """cnt[idx[j]] += 1 (atomic; cnt zeroed by the caller): index frequencies for scale_grad_by_freq."""
    for t in dsl.tiles(idx.shape[0], R):
        for r in dsl.range(t.len):
            i = idx[t.start + r]
            dsl.atomic_add(cnt[i:i + 1], dsl.full((1,), 1, i32))


@dsl.kernel
def scale_rows_kernel(gw: GM[f32], cnt: GM[i32, 2], out: GM, R: Const[int] = 4, CB: Const[int] = 2048):
    """out[i, :] = gw[i, :] / max(cnt[i], 1), cast to out's dtype."""
    D = gw.shape[1]
    for t in dsl.tiles(gw.shape[0], R):
        n = dsl.cast(dsl.maximum(cnt[t, 0:1], 1), f32)
        for c in dsl.range(0, D, CB):
            out[t, c] = dsl.cast(gw[t, c] / n, out.dtype)


@dsl.kernel
def cast_kernel(x: GM, y: GM, TILE: Const[int] = 8192):
    """y = cast(x) (flat; also a plain copy when the dtypes agree)."""
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.cast(x[t], y.dtype)


@dsl.kernel
def transpose3_kernel(x: GM, y: GM, BS: Const[int] = 64, BC: Const[int] = 64):
    """y[n] = x[n].T for (N, A, B) -> (N, B, A): moves the class dim of an (N, C, S) loss input last."""
    A = x.shape[1]
    for n, s in dsl.tiles2d((x.shape[0], x.shape[2]), (1, BS)):
        for c in dsl.range(0, A, BC):
            y[n.start, s, c] = x[n.start, c, s].T


# losses ------------------------------------------------------------------------------------------


@dsl.kernel
def target_weight_kernel(tgt: GM[i32], w: GM[f32], wt: GM[f32], ign: int, R: Const[int] = 64,
                         HAS_W: Const[int] = 0):
    """wt[j] = 0 if tgt[j] == ign else (w[tgt[j]] if HAS_W else 1): the weight of each row's target."""
    for t in dsl.tiles(tgt.shape[0], R):
        for r in dsl.range(t.len):
            j = t.start + r
            i = tgt[j]
            if i == ign:
                wt[j:j + 1] = 0.0
            elif HAS_W:
                wt[j:j + 1] = w[i]
            else:
                wt[j:j + 1] = 1.0


@dsl.kernel
def nll_rows_kernel(x: GM, tgt: GM[i32], w: GM[f32], loss: GM, wt: GM[f32], ign: int,
                    R: Const[int] = 1024, HAS_W: Const[int] = 0):
    """loss[j] = -w[tgt[j]] * x[j, tgt[j]] and wt[j] = w[tgt[j]] (both 0 where tgt[j] == ign; w = 1
    without HAS_W): per block of R rows one load of the targets,
    one MTE2 gather of an element per row (x[t, idx]) and of the weights (w[idx]); ignored rows
    read column 0 and are masked (their x may be -inf)."""
    for t in dsl.tiles(tgt.shape[0], R):
        ti = tgt[t]
        ok = ti != ign
        safe = dsl.where(ok, ti, 0)
        v = dsl.cast(x[t, safe], f32)
        if HAS_W:
            wi = dsl.where(ok, w[safe], 0.0)
        else:
            wi = dsl.cast(ok, f32)
        loss[t] = dsl.cast(dsl.where(ok, -(wi * v), 0.0), loss.dtype)
        wt[t] = wi


@dsl.kernel
def nll_sum_kernel(x: GM, tgt: GM[i32], w: GM[f32], ps: GM[f32, 2], pw: GM[f32, 2], ign: int,
                   R: Const[int] = 1024, HAS_W: Const[int] = 0):
    """ps[0, b] = -sum of w[t_j] * x[j, t_j] and pw[0, b] = sum of w[t_j] over the rows j of block b
    (rows with t_j == ign add 0; w = 1 without HAS_W): one MTE2 gather of an
    element per row (x[t, idx]; the weights by w[idx]), the products added up in f32 on V, one store
    per block of R rows (sum_kernel adds the blocks). A target outside [0, C) is caught by the
    gather's index check (E404) before anything is read."""
    for t in dsl.tiles(tgt.shape[0], R):
        ti = tgt[t]
        ok = ti != ign
        safe = dsl.where(ok, ti, 0)
        b = t.start // R
        if HAS_W:
            wi = dsl.where(ok, w[safe], 0.0)
            v = dsl.cast(x[t, safe], f32)
            ps[0:1, b:b + 1] = -dsl.sum(dsl.where(ok, wi * v, 0.0), axis=0, keepdims=True)
            pw[0:1, b:b + 1] = dsl.sum(wi, axis=0, keepdims=True)
        else:   # the row count goes out while MTE2 gathers; where() masks an ignored row's x (may be -inf)
            pw[0:1, b:b + 1] = dsl.sum(dsl.cast(ok, f32), axis=0, keepdims=True)
            v = dsl.cast(x[t, safe], f32)
            ps[0:1, b:b + 1] = -dsl.sum(dsl.where(ok, v, 0.0), axis=0, keepdims=True)


@dsl.kernel
def ce_rows_kernel(x: GM, tgt: GM[i32, 2], w: GM[f32], wt: GM[f32, 2], loss: GM, ign: int, a: float,
                   b: float, ninf: float, R: Const[int] = 8, CB: Const[int] = 2048, HAS_W: Const[int] = 0,
                   SMOOTH: Const[int] = 0, SINGLE: Const[int] = 1):
    """Per-row cross entropy of logits x (M, C): loss = a * wt * (lse - x[t]) + b * (lse * sw - sx)
    (the smoothing term only with SMOOTH, sx = sum_c w_c x_c, sw = sum_c w_c; rows with target ==
    ign give 0). SINGLE=1 (C fits UB): the row block is loaded once and reduced in place. SINGLE=0:
    one pass over CB-column windows with an online max / sum of exp, the target logit gathered from
    the window it falls in."""
    C = x.shape[1]
    for t in dsl.tiles(x.shape[0], R):
        tg = tgt[t, 0:1]
        sx = dsl.zeros((t.len, 1), f32)
        sw = dsl.zeros((1,), f32)
        if SINGLE:
            row = dsl.cast(x[t, :], f32)
            m = dsl.max(row, axis=1, keepdims=True)
            lse = dsl.log(dsl.sum(dsl.exp(row - m), axis=1, keepdims=True)) + m
            xt = dsl.gather(row, dsl.where((tg >= 0) & (tg < C), tg, 0), axis=1)
            if SMOOTH:
                if HAS_W:
                    wc = w[0:C]
                    sx = dsl.sum(row * wc, axis=1, keepdims=True)
                    sw = dsl.sum(wc, axis=0, keepdims=True)
                else:
                    sx = dsl.sum(row, axis=1, keepdims=True)
        else:
            m = dsl.full((t.len, 1), ninf, f32)
            s = dsl.zeros((t.len, 1), f32)
            xt = dsl.zeros((t.len, 1), f32)
            for c in dsl.range(0, C, CB):
                ch = dsl.cast(x[t, c], f32)
                mc = dsl.maximum(m, dsl.max(ch, axis=1, keepdims=True))
                s = s * dsl.exp(m - mc) + dsl.sum(dsl.exp(ch - mc), axis=1, keepdims=True)
                m = mc
                k = tg - c
                inr = (k >= 0) & (k < CB)
                xt = xt + dsl.where(inr, dsl.gather(ch, dsl.where(inr, k, 0), axis=1), 0.0)
                if SMOOTH:
                    if HAS_W:
                        wc = w[c]
                        sx = sx + dsl.sum(ch * wc, axis=1, keepdims=True)
                        sw = sw + dsl.sum(wc, axis=0, keepdims=True)
                    else:
                        sx = sx + dsl.sum(ch, axis=1, keepdims=True)
            lse = m + dsl.log(s)
        valid = tg != ign
        out = dsl.where(valid, a * (wt[t, 0:1] * (lse - xt)), 0.0)
        if SMOOTH:
            if HAS_W:
                out = out + dsl.where(valid, b * (lse * sw - sx), 0.0)
            else:
                out = out + dsl.where(valid, b * (lse * C - sx), 0.0)
        loss[t, 0:1] = dsl.cast(out, loss.dtype)


@dsl.kernel
def ce_backward_kernel(x: GM, tgt: GM[i32, 2], w: GM[f32], wt: GM[f32, 2], gout: GM, tot: GM[f32, 2], gx: GM,
                       ign: int, a: float, b: float, ninf: float, R: Const[int] = 8, CB: Const[int] = 2048,
                       HAS_W: Const[int] = 0, SMOOTH: Const[int] = 0, MODE: Const[int] = 0,
                       SINGLE: Const[int] = 1):
    """gx = d loss / d x for ce_rows_kernel's loss, reduced by MODE (0 none: gout is (M, 1); 1 sum,
    2 mean: gout is (1, 1), and mean divides by tot = the sum of wt):
    gx[i, c] = (cn_i + cs_i * sw) * p_ic - cn_i * [c == t_i] - cs_i * w_c, with p = softmax(x[i]),
    cn = a * g_i * wt_i, cs = b * g_i (0 on ignored rows). SINGLE=1: one load of the row block, the
    gradient written from it; SINGLE=0: pass 1 finds each row's logsumexp (online over windows),
    pass 2 writes the gradient window by window."""
    C = x.shape[1]
    for t in dsl.tiles(x.shape[0], R):
        tg = tgt[t, 0:1]
        if MODE == 0:
            g = dsl.cast(gout[t, 0:1], f32)
        elif MODE == 1:
            g = dsl.cast(gout[0:1, 0:1], f32) + dsl.zeros((t.len, 1), f32)
        else:
            g = dsl.cast(gout[0:1, 0:1], f32) / tot[0:1, 0:1] + dsl.zeros((t.len, 1), f32)
        valid = tg != ign
        cn = dsl.where(valid, a * (g * wt[t, 0:1]), 0.0)
        cs = dsl.where(valid, b * g, 0.0)
        if SINGLE:
            row = dsl.cast(x[t, :], f32)
            m = dsl.max(row, axis=1, keepdims=True)
            lse = dsl.log(dsl.sum(dsl.exp(row - m), axis=1, keepdims=True)) + m
            cp = cn
            if SMOOTH:
                if HAS_W:
                    cp = cn + cs * dsl.sum(w[0:C], axis=0, keepdims=True)
                else:
                    cp = cn + cs * C
            hit = dsl.arange(dsl.min(CB, C), dtype=i32) == tg   # CB >= C here
            gr = dsl.exp(row - lse) * cp - dsl.where(hit, cn, 0.0)
            if SMOOTH:
                if HAS_W:
                    gr = gr - cs * w[0:C]
                else:
                    gr = gr - cs
            gx[t, :] = dsl.cast(gr, gx.dtype)
        else:
            m = dsl.full((t.len, 1), ninf, f32)
            s = dsl.zeros((t.len, 1), f32)
            sw = dsl.zeros((1,), f32)
            for c in dsl.range(0, C, CB):
                ch = dsl.cast(x[t, c], f32)
                mc = dsl.maximum(m, dsl.max(ch, axis=1, keepdims=True))
                s = s * dsl.exp(m - mc) + dsl.sum(dsl.exp(ch - mc), axis=1, keepdims=True)
                m = mc
                if SMOOTH:
                    if HAS_W:
                        sw = sw + dsl.sum(w[c], axis=0, keepdims=True)
            lse = m + dsl.log(s)
            cp = cn
            if SMOOTH:
                if HAS_W:
                    cp = cn + cs * sw
                else:
                    cp = cn + cs * C
            for c in dsl.range(0, C, CB):
                p = dsl.exp(dsl.cast(x[t, c], f32) - lse)
                hit = dsl.arange(dsl.min(CB, C - c), dtype=i32) == tg - c
                gr = p * cp - dsl.where(hit, cn, 0.0)
                if SMOOTH:
                    if HAS_W:
                        gr = gr - cs * w[c]
                    else:
                        gr = gr - cs
                gx[t, c] = dsl.cast(gr, gx.dtype)


@dsl.kernel
def nll_backward_kernel(tgt: GM[i32, 2], wt: GM[f32, 2], gout: GM, tot: GM[f32, 2], gx: GM,
                        R: Const[int] = 8, CB: Const[int] = 4096, MODE: Const[int] = 0, SINGLE: Const[int] = 1):
    """gx[i, c] = -g_i * wt_i where c == tgt[i], else 0 (MODE as in ce_backward_kernel; SINGLE=1:
    whole rows, CB >= C; else CB-class windows)."""
    C = gx.shape[1]
    for t in dsl.tiles(gx.shape[0], R):
        tg = tgt[t, 0:1]
        if MODE == 0:
            g = dsl.cast(gout[t, 0:1], f32)
        elif MODE == 1:
            g = dsl.cast(gout[0:1, 0:1], f32) + dsl.zeros((t.len, 1), f32)
        else:
            g = dsl.cast(gout[0:1, 0:1], f32) / tot[0:1, 0:1] + dsl.zeros((t.len, 1), f32)
        coef = -(g * wt[t, 0:1])
        if SINGLE:
            gx[t, :] = dsl.cast(dsl.where(dsl.arange(dsl.min(CB, C), dtype=i32) == tg, coef, 0.0), gx.dtype)
        else:
            for c in dsl.range(0, C, CB):
                hit = dsl.arange(dsl.min(CB, C - c), dtype=i32) == tg - c
                gx[t, c] = dsl.cast(dsl.where(hit, coef, 0.0), gx.dtype)


@dsl.kernel
def sum_kernel(v: GM[f32], out: GM, den: GM[f32], MEAN: Const[int] = 0, T: Const[int] = 8192):
    """out[0] = sum(v) on one core, in f32 (a tree sum per window of T, the window sums added in
    order); MEAN=1 divides by sum(den) (den as long as v), MEAN=2 by den[0]."""
    for _ in dsl.tiles(1, 1):
        acc = dsl.zeros((1,), f32)
        d = dsl.zeros((1,), f32)
        for i in dsl.range(0, v.shape[0], T):
            acc = acc + dsl.sum(v[i], axis=0, keepdims=True)
            if MEAN == 1:
                d = d + dsl.sum(den[i], axis=0, keepdims=True)
        if MEAN == 1:
            out[0:1] = dsl.cast(acc / d, out.dtype)
        elif MEAN == 2:
            out[0:1] = dsl.cast(acc / den[0:1], out.dtype)
        else:
            out[0:1] = dsl.cast(acc, out.dtype)


@dsl.kernel
def mse_kernel(x: GM, y: GM, out: GM, TILE: Const[int] = 8192):
    """out = (x - y)^2 elementwise (reduction='none')."""
    for t in dsl.tiles(x.shape[0], TILE):
        d = dsl.cast(x[t], f32) - dsl.cast(y[t], f32)
        out[t] = dsl.cast(d * d, out.dtype)


@dsl.kernel
def mse_partial_kernel(x: GM, y: GM, part: GM[f32], TILE: Const[int] = 8192):
    """part[k] = sum over window k of (x - y)^2 (then sum_kernel adds the windows)."""
    for t in dsl.tiles(x.shape[0], TILE):
        d = dsl.cast(x[t], f32) - dsl.cast(y[t], f32)
        k = t.start // TILE
        part[k:k + 1] = dsl.sum(d * d, axis=0, keepdims=True)


@dsl.kernel
def mse_backward_kernel(x: GM, y: GM, g: GM, gx: GM, gy: GM, norm: float, TILE: Const[int] = 4096,
                        SCALAR_G: Const[int] = 0):
    """gx = norm * (x - y) * g, gy = -gx (g elementwise, or g[0] with SCALAR_G)."""
    for t in dsl.tiles(x.shape[0], TILE):
        d = dsl.cast(x[t], f32) - dsl.cast(y[t], f32)
        if SCALAR_G:
            r = (norm * d) * dsl.cast(g[0:1], f32)
        else:
            r = (norm * d) * dsl.cast(g[t], f32)
        gx[t] = dsl.cast(r, gx.dtype)
        gy[t] = dsl.cast(-r, gy.dtype)


# dropout -----------------------------------------------------------------------------------------


@dsl.kernel
def dropout_kernel(x: GM, y: GM, mask: GM[i8], p: float, scale: float, seed: int, offset: int,
                   TILE: Const[int] = 8192, NOISE: Const[int] = 0, MASK: Const[int] = 1):
    """keep = rand >= p with element i drawing Philox word offset + i of `seed` (the same on any core
    count). NOISE=0 (aten native_dropout): y = x * keep * scale; NOISE=1 (aten dropout): y = x * noise
    with noise = keep * scale rounded to x's dtype first. MASK=1 also stores keep (bool as i8)."""
    for t in dsl.tiles(x.shape[0], TILE):
        keep = dsl.rand((t.len,), seed, offset + t.start) >= p
        kf = dsl.cast(keep, f32)
        if NOISE:
            y[t] = dsl.cast(dsl.cast(x[t], f32) * dsl.cast(dsl.cast(kf * scale, x.dtype), f32), y.dtype)
        else:
            y[t] = dsl.cast(dsl.cast(x[t], f32) * kf * scale, y.dtype)
        if MASK:
            mask[t] = dsl.cast(keep, i8)


@dsl.kernel
def dropout_backward_kernel(g: GM, mask: GM[i8], gx: GM, scale: float, TILE: Const[int] = 8192):
    """gx = g * mask * scale (aten native_dropout_backward)."""
    for t in dsl.tiles(g.shape[0], TILE):
        gx[t] = dsl.cast(dsl.cast(g[t], f32) * dsl.cast(mask[t], f32) * scale, gx.dtype)
