"""The DSL kernels behind op_library.attention: flash-style attention forward and backward.

Every kernel sees query / key / value / output as 3-D GM tensors (G, S, W) and finds head
(b, n)'s rows as the window `x[b * gb + n * gn, rows, c : c + D]` with `c = b * cb + n * cn`, so one
kernel serves every layout without a host copy (op_library.attention computes the coefficients):
BNSD is (B*N, S, D) with gb = N, gn = 1; BSH / BSND are (B, S, N*D) with gb = 1, cn = D; SBH is
(1, S, B*N*D) with cb = N*D, cn = D. Key / value heads are n // group (GQA). Value and output rows
may be DV wide (SDPA allows a value head dim other than the query's): their column offset is the
same head's, c // D * DV (every layout's c is a multiple of D).

Scores are `(Q K^T) * scale` on the cube (the scale fused into the FIX move to UB), masked on the
vector unit by up to three things, each a Const so an unmasked launch pays nothing:
- MASK 1: a bool (i8) tile, True = take part (torch); MASK 2: True = masked out (torch_npu);
  MASK 3: an additive float mask. The mask is a 3-D GM tensor (M, L, S), head (b, n) reading
  `mask[b * mgb + n * mgn]` (mgb / mgn = 0 broadcasts it over batches / heads).
- BAND: keep (row i, key j) only when lo <= j - i <= hi (is_causal, sparse_mode 2 / 3, pre_tockens /
  next_tockens). The key loop runs over the blocks the band touches only; the masking itself is
  done on every block it runs.
- DROP: dropout from `dsl.rand`: probability (r, c) of head bn is kept when Philox word
  `offset + (bn * L + r) * S + c` of `seed` is >= p, and scaled by 1 / (1 - p). The backward draws
  the same words.

Masked scores are -inf; the running max starts at -3e38, so a row with no key left gets p = 0,
sum 0 and output 0 (torch's CPU result), and its softmax_max is -3e38, its softmax_sum 0.
"""
from __future__ import annotations

import dsl
from dsl import GM, Const, f32, i32

NEG = -3.0e38   # the running max of a row that has seen no key yet
NEG_INF = float("-inf")
POS_INF = float("inf")


@dsl.kernel
def attn_fwd(q: GM, k: GM, v: GM, o: GM, smax: GM[f32], ssum: GM[f32], mask: GM,
             scale: float, heads: int, group: int, qgb: int, qgn: int, qcb: int, qcn: int,
             kgb: int, kgn: int, kcb: int, kcn: int, mgb: int, mgn: int, lo: int, hi: int,
             p: float, seed: int, offset: int,
             D: Const[int] = 64, DV: Const[int] = 64, BQ: Const[int] = 64, BKV: Const[int] = 64,
             MASK: Const[int] = 0, BAND: Const[bool] = False, DROP: Const[bool] = False, PV: Const[bool] = True):
    """o = softmax(mask(q k^T * scale)) v per head, online softmax over key blocks of BKV; the row
    max and sum go to smax / ssum ((B*N, L, 8) f32, the value repeated 8 times as torch_npu).
    PV=False computes the row max and sum only (the SDPA backward's recomputation; o is not written)."""
    L = q.shape[1]
    S = k.shape[1]
    for g, i in dsl.tiles2d((smax.shape[0], L), (1, BQ)):
        bn = g.start
        b = bn // heads
        n = bn % heads
        nk = n // group
        qg = b * qgb + n * qgn
        qc = b * qcb + n * qcn
        kg = b * kgb + nk * kgn
        kc = b * kcb + nk * kcn
        mg = b * mgb + n * mgn
        jlo = dsl.max(0, i.start + lo)
        jhi = dsl.min(S, i.start + i.len + hi)
        rows = (dsl.zeros((1, i.len), i32) + dsl.arange(i.len)).T
        m = dsl.full((i.len, 1), NEG, f32)
        l = dsl.zeros((i.len, 1), f32)
        oc = qc // D * DV
        vc = kc // D * DV
        acc = dsl.zeros((i.len, DV), f32)
        for j in dsl.range(jlo, jhi, BKV):
            st = (q[qg, i, qc:qc + D] @ k.T[kg, kc:kc + D, j]) * scale
            if MASK == 1:
                st = dsl.where(mask[mg, i, j] != 0, st, NEG_INF)
            if MASK == 2:
                st = dsl.where(mask[mg, i, j] != 0, NEG_INF, st)
            if MASK == 3:
                st = st + dsl.cast(mask[mg, i, j], f32)
            if BAND:
                d = dsl.arange(dsl.min(j + BKV, jhi) - j) + (j - i.start) - rows
                st = dsl.where((d >= lo) & (d <= hi), st, NEG_INF)
            m_new = dsl.maximum(m, dsl.max(st, axis=1, keepdims=True))
            pr = dsl.exp(st - m_new)
            alpha = dsl.exp(m - m_new)
            l = l * alpha + dsl.sum(pr, axis=1, keepdims=True)
            if DROP:
                keep = dsl.rand(st.shape, seed, offset + (bn * L + i.start) * S + j, stride=S) >= p
                pr = dsl.where(keep, pr * (1.0 / (1.0 - p)), 0.0)
            if PV:
                pv = dsl.cast(pr, q.dtype) @ v[kg, j, vc:vc + DV]
                acc = acc * alpha + pv
            m = m_new
        if PV:
            o[qg, i, oc:oc + DV] = dsl.cast(acc * (1.0 / dsl.maximum(l, 1e-30)), o.dtype)
        smax[bn, i, :] = dsl.zeros((i.len, 8), f32) + m
        ssum[bn, i, :] = dsl.zeros((i.len, 8), f32) + l


@dsl.kernel
def attn_bwd_prep(o: GM, do: GM, smax: GM[f32], ssum: GM[f32], lse: GM[f32], dsum: GM[f32],
                  heads: int, qgb: int, qgn: int, qcb: int, qcn: int, D: Const[int] = 64, DV: Const[int] = 64,
                  BQ: Const[int] = 64):
    """Per query row: lse = max + log(sum) (+inf for a row with no key, so its p is 0) and
    dsum = rowsum(dO * O), both (B*N, L, 1) f32, for the two backward kernels."""
    for g, i in dsl.tiles2d((smax.shape[0], o.shape[1]), (1, BQ)):
        bn = g.start
        b = bn // heads
        n = bn % heads
        qg = b * qgb + n * qgn
        oc = (b * qcb + n * qcn) // D * DV
        l = ssum[bn, i, 0:1]
        lse[bn, i, 0:1] = dsl.where(l > 0.0, smax[bn, i, 0:1] + dsl.log(dsl.maximum(l, 1e-30)), POS_INF)
        prod = dsl.cast(o[qg, i, oc:oc + DV], f32) * dsl.cast(do[qg, i, oc:oc + DV], f32)
        dsum[bn, i, 0:1] = dsl.sum(prod, axis=1, keepdims=True)


@dsl.kernel
def attn_bwd_dq(q: GM, k: GM, v: GM, do: GM, dq: GM, lse: GM[f32], dsum: GM[f32], mask: GM,
                scale: float, heads: int, group: int, qgb: int, qgn: int, qcb: int, qcn: int,
                kgb: int, kgn: int, kcb: int, kcn: int, mgb: int, mgn: int, lo: int, hi: int,
                p: float, seed: int, offset: int,
                D: Const[int] = 64, DV: Const[int] = 64, BQ: Const[int] = 64, BKV: Const[int] = 64,
                MASK: Const[int] = 0, BAND: Const[bool] = False, DROP: Const[bool] = False):
    """dQ = scale * sum_j dS_j K_j per query block, P recomputed from lse, dS = P * (dP - dsum),
    dP = dO V^T (times the dropout mask / (1 - p))."""
    L = q.shape[1]
    S = k.shape[1]
    for g, i in dsl.tiles2d((lse.shape[0], L), (1, BQ)):
        bn = g.start
        b = bn // heads
        n = bn % heads
        nk = n // group
        qg = b * qgb + n * qgn
        qc = b * qcb + n * qcn
        kg = b * kgb + nk * kgn
        kc = b * kcb + nk * kcn
        mg = b * mgb + n * mgn
        jlo = dsl.max(0, i.start + lo)
        jhi = dsl.min(S, i.start + i.len + hi)
        rows = (dsl.zeros((1, i.len), i32) + dsl.arange(i.len)).T
        oc = qc // D * DV
        vc = kc // D * DV
        lc = lse[bn, i, 0:1]
        dc = dsum[bn, i, 0:1]
        acc = dsl.zeros((i.len, D), f32)
        for j in dsl.range(jlo, jhi, BKV):
            st = (q[qg, i, qc:qc + D] @ k.T[kg, kc:kc + D, j]) * scale
            if MASK == 1:
                st = dsl.where(mask[mg, i, j] != 0, st, NEG_INF)
            if MASK == 2:
                st = dsl.where(mask[mg, i, j] != 0, NEG_INF, st)
            if MASK == 3:
                st = st + dsl.cast(mask[mg, i, j], f32)
            if BAND:
                d = dsl.arange(dsl.min(j + BKV, jhi) - j) + (j - i.start) - rows
                st = dsl.where((d >= lo) & (d <= hi), st, NEG_INF)
            pr = dsl.exp(st - lc)
            dp = do[qg, i, oc:oc + DV] @ v.T[kg, vc:vc + DV, j]
            if DROP:
                keep = dsl.rand(st.shape, seed, offset + (bn * L + i.start) * S + j, stride=S) >= p
                dp = dsl.where(keep, dp * (1.0 / (1.0 - p)), 0.0)
            ds = pr * (dp - dc)
            dqb = dsl.cast(ds, q.dtype) @ k[kg, j, kc:kc + D]
            acc = acc + dqb
        dq[qg, i, qc:qc + D] = dsl.cast(acc * scale, dq.dtype)


@dsl.kernel
def attn_bwd_dkv(q: GM, k: GM, v: GM, do: GM, dk: GM, dv: GM, lse: GM[f32], dsum: GM[f32], mask: GM,
                 scale: float, heads: int, group: int, qgb: int, qgn: int, qcb: int, qcn: int,
                 kgb: int, kgn: int, kcb: int, kcn: int, mgb: int, mgn: int, lo: int, hi: int,
                 p: float, seed: int, offset: int,
                 D: Const[int] = 64, DV: Const[int] = 64, BQ: Const[int] = 64, BKV: Const[int] = 64,
                 MASK: Const[int] = 0, BAND: Const[bool] = False, DROP: Const[bool] = False):
    """dV = sum_i P_i^T dO_i and dK = scale * sum_i dS_i^T Q_i per key block of a key / value head,
    over the `group` query heads that share it and the query blocks its band touches. Works on the
    transposed scores (keys down, queries across), so lse and dsum ((B*N, L) f32) are rows and no
    tile is transposed unless a mask or dropout needs one."""
    L = q.shape[1]
    S = k.shape[1]
    kheads = heads // group
    for g, j in dsl.tiles2d((lse.shape[0] // group, S), (1, BKV)):
        b = g.start // kheads
        nk = g.start % kheads
        kg = b * kgb + nk * kgn
        kc = b * kcb + nk * kcn
        vc = kc // D * DV
        ilo = dsl.max(0, j.start - hi)
        ihi = dsl.min(L, j.start + j.len - lo)
        cols = (dsl.zeros((1, j.len), i32) + dsl.arange(j.len)).T
        dka = dsl.zeros((j.len, D), f32)
        dva = dsl.zeros((j.len, DV), f32)
        for h in dsl.range(group):
            n = nk * group + h
            bn = b * heads + n
            qg = b * qgb + n * qgn
            qc = b * qcb + n * qcn
            oc = qc // D * DV
            mg = b * mgb + n * mgn
            for i in dsl.range(ilo, ihi, BQ):
                st = (k[kg, j, kc:kc + D] @ q.T[qg, qc:qc + D, i]) * scale
                if MASK == 1:
                    st = dsl.where(mask.T[mg, j, i] != 0, st, NEG_INF)
                if MASK == 2:
                    st = dsl.where(mask.T[mg, j, i] != 0, NEG_INF, st)
                if MASK == 3:
                    st = st + dsl.cast(mask.T[mg, j, i], f32)
                if BAND:
                    d = cols + (j.start - i) - dsl.arange(dsl.min(i + BQ, ihi) - i)
                    st = dsl.where((d >= lo) & (d <= hi), st, NEG_INF)
                pr = dsl.exp(st - lse[bn, i])
                dp = v[kg, j, vc:vc + DV] @ do.T[qg, oc:oc + DV, i]
                pd = pr
                if DROP:
                    keep = dsl.transpose(dsl.rand((dsl.min(i + BQ, ihi) - i, j.len), seed,
                                                  offset + (bn * L + i) * S + j.start, stride=S)) >= p
                    pd = dsl.where(keep, pr * (1.0 / (1.0 - p)), 0.0)
                    dp = dsl.where(keep, dp * (1.0 / (1.0 - p)), 0.0)
                dvb = dsl.cast(pd, q.dtype) @ do[qg, i, oc:oc + DV]
                dva = dva + dvb
                ds = pr * (dp - dsum[bn, i])
                dkb = dsl.cast(ds, q.dtype) @ q[qg, i, qc:qc + D]
                dka = dka + dkb
        dk[kg, j, kc:kc + D] = dsl.cast(dka * scale, dk.dtype)
        dv[kg, j, vc:vc + DV] = dsl.cast(dva, dv.dtype)
