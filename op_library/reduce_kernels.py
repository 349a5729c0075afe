"""DSL kernels behind op_library.reduce (see its docstring for the dataflow).

The input is viewed as (O, R, I): R the reduced block, O the dims before it, I the dims after.
- `rows_kernel` (I == 1, x viewed (M, R)): (BR, C) blocks dealt over the cores; each block reduces
  its rows to one partial per row (`part[r, j]`, j the column chunk). A single chunk writes the final
  value (POST applied, cast to the output dtype); several chunks write f32 partials that a second
  launch of the same kernel (MODE "sum" / "max" / "min" / "argmax2" ...) reduces.
- `cols_kernel` (I > 1, x viewed (O * R, I)): (1, C) column blocks of each o dealt over the cores;
  BR rows at a time accumulate into a (BR, C) f32 panel (blocked: a sub-panel of NB row blocks is
  added into the panel, so long columns stay accurate), the panel's rows are reduced at the end and
  the R % BR tail rows are added one at a time.
- `bwd_rows_kernel` / `bwd_cols_kernel`: the backward, elementwise over x's (O, R, I) view with the
  (O, I) per-output values (grad, result, mean, tie count, index) broadcast along R.
- `cumsum_rows_kernel` (I == 1) / `cumsum_cube_cols_kernel` (I > 1): running sums along R as a blocked
  scan on the cube: BK-long blocks times a BK x BK triangle of ones (`tri_ones_kernel`, kept in L1)
  plus the running sum carried from the blocks before, added on V (forward: ascending, backward: the
  same kernels walking from the end with the other triangle, REV=1). f16 / bf16 multiply by exact
  ones and accumulate in f32. Blocks with a non-finite carry are redone by sequential adds (0 * inf).

MODE (forward): sum, abs (sum |x|), sq (sum x^2), dev (sum (x - aux)^2), exp (sum exp(x - aux'),
aux' = aux with +-inf replaced by 0 as torch's logsumexp), eq (count of x == aux), eqabs (count of
|x| == aux or x NaN), max, min, absmax, absmin, argmax, argmin (value and first index; NaN wins),
argmax2 / argmin2 (combine (value, index) partials). POST: none, sqrt, log (log(v) + aux').
Sums accumulate in f32 whatever the input dtype and are scaled by `scale` before POST.
"""
from __future__ import annotations

import dsl
from dsl import GM, Const, f32, i32

BIG = 2147483647


@dsl.kernel
def rows_kernel(x: GM, part: GM, pidx: GM, aux: GM, xidx: GM, scale: float, inf: float, MODE: Const[str] = "sum",
                POST: Const[str] = "none", BR: Const[int] = 8, C: Const[int] = 1024):
    """part[r, j] (and pidx[r, j] for arg modes) = MODE-reduction of x[r, j*C:(j+1)*C]."""
    for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (BR, C)):
        j = c.start // C
        if MODE == "max" or MODE == "min" or MODE == "absmax" or MODE == "absmin":
            xt = x[r, c]
            if MODE == "absmax":
                xt = dsl.abs(xt)
            if MODE == "absmin":
                xt = dsl.abs(xt)
            if MODE == "max" or MODE == "absmax":
                part[r, j:j + 1] = dsl.cast(dsl.max(xt, axis=1, keepdims=True), part.dtype)
            else:
                part[r, j:j + 1] = dsl.cast(dsl.min(xt, axis=1, keepdims=True), part.dtype)
        elif MODE == "argmax" or MODE == "argmin" or MODE == "argmax2" or MODE == "argmin2":
            xt = x[r, c]
            if MODE == "argmax" or MODE == "argmax2":
                m = dsl.max(xt, axis=1, keepdims=True)
            else:
                m = dsl.min(xt, axis=1, keepdims=True)
            hit = (xt == m) | (xt != xt)
            if MODE == "argmax2" or MODE == "argmin2":
                ix = xidx[r, c]
            else:
                ix = dsl.arange(c.len, dtype=i32) + c.start
            part[r, j:j + 1] = dsl.cast(m, part.dtype)
            pidx[r, j:j + 1] = dsl.min(dsl.where(hit, ix, BIG), axis=1, keepdims=True)
        else:
            xt = dsl.cast(x[r, c], f32)
            if MODE == "abs":
                xt = dsl.abs(xt)
            if MODE == "sq":
                xt = xt * xt
            if MODE == "dev":
                d = xt - aux[r, 0:1]
                xt = d * d
            if MODE == "exp":
                a = aux[r, 0:1]
                xt = dsl.exp(xt - dsl.where(dsl.abs(a) == inf, 0.0, a))
            if MODE == "eq":
                xt = dsl.cast(xt == aux[r, 0:1], f32)
            if MODE == "eqabs":
                xt = dsl.cast((dsl.abs(xt) == aux[r, 0:1]) | (xt != xt), f32)
            if MODE == "eqn":
                xt = dsl.cast((xt == aux[r, 0:1]) | (xt != xt), f32)
            v = dsl.sum(xt, axis=1, keepdims=True) * scale
            if POST == "sqrt":
                v = dsl.sqrt(v)
            if POST == "log":
                a2 = aux[r, 0:1]
                v = dsl.log(v) + dsl.where(dsl.abs(a2) == inf, 0.0, a2)
            part[r, j:j + 1] = dsl.cast(v, part.dtype)


@dsl.kernel
def cols_kernel(x: GM, out: GM, oidx: GM, aux: GM, iota: GM, R: int, scale: float, inf: float, MODE: Const[str] = "sum",
                POST: Const[str] = "none", BR: Const[int] = 8, C: Const[int] = 512, NB: Const[int] = 64):
    """out[o, i] (and oidx[o, i]) = MODE-reduction over r of x[o * R + r, i] (x viewed (O * R, I))."""
    nb = R // BR
    for o, c in dsl.tiles2d((out.shape[0], x.shape[1]), (1, C)):
        base = o.start * R
        if MODE == "max" or MODE == "min" or MODE == "absmax" or MODE == "absmin" or MODE == "argmax" \
                or MODE == "argmin":
            big = MODE == "max" or MODE == "absmax" or MODE == "argmax"
            if big:
                acc = dsl.full((BR, c.len), -inf, f32)
            else:
                acc = dsl.full((BR, c.len), inf, f32)
            ix = dsl.zeros((BR, c.len), i32) + iota[0:BR, 0:1]
            for b in dsl.range(nb):
                v = dsl.cast(x[base + b * BR:base + b * BR + BR, c], f32)
                if MODE == "absmax" or MODE == "absmin":
                    v = dsl.abs(v)
                if MODE == "argmax" or MODE == "argmin":
                    if big:
                        take = (v > acc) | ((v != v) & (acc == acc))
                    else:
                        take = (v < acc) | ((v != v) & (acc == acc))
                    acc = dsl.where(take, v, acc)
                    ix = dsl.where(take, iota[0:BR, 0:1] + b * BR, ix)
                elif big:
                    acc = dsl.maximum(acc, v)   # NaN-propagating, as torch's amax
                else:
                    acc = dsl.minimum(acc, v)
            if big:
                m = dsl.max(acc, axis=0, keepdims=True)
            else:
                m = dsl.min(acc, axis=0, keepdims=True)
            mi = dsl.min(dsl.where((acc == m) | (acc != acc), ix, BIG), axis=0, keepdims=True)
            for t in dsl.range(nb * BR, R):
                v1 = dsl.cast(x[base + t:base + t + 1, c], f32)
                if MODE == "absmax" or MODE == "absmin":
                    v1 = dsl.abs(v1)
                if big:
                    take1 = (v1 > m) | ((v1 != v1) & (m == m))
                else:
                    take1 = (v1 < m) | ((v1 != v1) & (m == m))
                m = dsl.where(take1, v1, m)
                mi = dsl.where(take1, t, mi)
            out[o.start:o.start + 1, c] = dsl.cast(m, out.dtype)
            if MODE == "argmax" or MODE == "argmin":
                oidx[o.start:o.start + 1, c] = mi
        else:
            if MODE == "dev" or MODE == "eq" or MODE == "eqabs" or MODE == "eqn":
                a = aux[o.start:o.start + 1, c]
            if MODE == "exp" or POST == "log":
                a0 = aux[o.start:o.start + 1, c]
                a = dsl.where(dsl.abs(a0) == inf, 0.0, a0)
            acc = dsl.zeros((BR, c.len), f32)
            for b0 in dsl.range(0, nb, NB):
                sub = dsl.zeros((BR, c.len), f32)
                for b in dsl.range(b0, dsl.min(b0 + NB, nb)):
                    v = dsl.cast(x[base + b * BR:base + b * BR + BR, c], f32)
                    if MODE == "abs":
                        v = dsl.abs(v)
                    if MODE == "sq":
                        v = v * v
                    if MODE == "dev":
                        d = v - a
                        v = d * d
                    if MODE == "exp":
                        v = dsl.exp(v - a)
                    if MODE == "eq":
                        v = dsl.cast(v == a, f32)
                    if MODE == "eqabs":
                        v = dsl.cast((dsl.abs(v) == a) | (v != v), f32)
                    if MODE == "eqn":
                        v = dsl.cast((v == a) | (v != v), f32)
                    sub += v
                acc += sub
            s = dsl.sum(acc, axis=0, keepdims=True)
            for t in dsl.range(nb * BR, R):
                v1 = dsl.cast(x[base + t:base + t + 1, c], f32)
                if MODE == "abs":
                    v1 = dsl.abs(v1)
                if MODE == "sq":
                    v1 = v1 * v1
                if MODE == "dev":
                    d1 = v1 - a
                    v1 = d1 * d1
                if MODE == "exp":
                    v1 = dsl.exp(v1 - a)
                if MODE == "eq":
                    v1 = dsl.cast(v1 == a, f32)
                if MODE == "eqabs":
                    v1 = dsl.cast((dsl.abs(v1) == a) | (v1 != v1), f32)
                if MODE == "eqn":
                    v1 = dsl.cast((v1 == a) | (v1 != v1), f32)
                s += v1
            s = s * scale
            if POST == "sqrt":
                s = dsl.sqrt(s)
            if POST == "log":
                s = dsl.log(s) + a
            out[o.start:o.start + 1, c] = dsl.cast(s, out.dtype)


@dsl.kernel
def bwd_rows_kernel(x: GM, g: GM, out: GM, aux: GM, idx: GM, gx: GM, scale: float, MODE: Const[str] = "sum",
                    BR: Const[int] = 8, C: Const[int] = 1024):
    """gx[r, c] = d(reduction of row r)/dx[r, c] * g[r] (x viewed (M, R); g, out, aux, idx (M, 1))."""
    for r, c in dsl.tiles2d((gx.shape[0], gx.shape[1]), (BR, C)):
        gr = dsl.cast(g[r, 0:1], f32)
        if MODE == "sum":
            gx[r, c] = dsl.cast(dsl.zeros((r.len, c.len), f32) + gr * scale, gx.dtype)
        elif MODE == "index":
            hit = dsl.zeros((r.len, c.len), i32) + (dsl.arange(c.len, dtype=i32) + c.start) == idx[r, 0:1]
            gx[r, c] = dsl.cast(dsl.where(hit, gr, 0.0), gx.dtype)
        else:
            xt = dsl.cast(x[r, c], f32)
            if MODE == "amax":
                o = dsl.cast(out[r, 0:1], f32)
                gx[r, c] = dsl.cast(gr / aux[r, 0:1] * dsl.cast(xt == o, f32), gx.dtype)
            if MODE == "amaxn":
                o = dsl.cast(out[r, 0:1], f32)
                gx[r, c] = dsl.cast(gr / aux[r, 0:1] * dsl.cast((xt == o) | (xt != xt), f32), gx.dtype)
            if MODE == "var":
                gx[r, c] = dsl.cast(gr * (2.0 * scale) * (xt - aux[r, 0:1]), gx.dtype)
            if MODE == "std":
                o = dsl.cast(out[r, 0:1], f32)
                gs = dsl.where(o == 0.0, 0.0, gr / (o * 2.0))
                gx[r, c] = dsl.cast(gs * (2.0 * scale) * (xt - aux[r, 0:1]), gx.dtype)
            if MODE == "lse":
                gx[r, c] = dsl.cast(gr * dsl.exp(xt - dsl.cast(out[r, 0:1], f32)), gx.dtype)
            if MODE == "norm1":
                sg = dsl.cast(xt > 0.0, f32) - dsl.cast(xt < 0.0, f32)
                gx[r, c] = dsl.cast(sg * gr, gx.dtype)
            if MODE == "norm2":
                o = dsl.cast(out[r, 0:1], f32)
                gx[r, c] = dsl.cast(xt * dsl.where(o == 0.0, 0.0, gr / o), gx.dtype)
            if MODE == "norminf":
                o = dsl.cast(out[r, 0:1], f32)
                sg = dsl.cast(xt > 0.0, f32) - dsl.cast(xt < 0.0, f32)
                mask = dsl.cast((dsl.abs(xt) == o) | (xt != xt), f32)
                gx[r, c] = dsl.cast(sg * (gr / aux[r, 0:1] * mask), gx.dtype)


@dsl.kernel
def bwd_cols_kernel(x: GM, g: GM, out: GM, aux: GM, idx: GM, gx: GM, R: int, scale: float,
                    MODE: Const[str] = "sum", C: Const[int] = 512):
    """gx[o * R + r, i] as bwd_rows_kernel with the (O, I) values g, out, aux, idx broadcast over r
    (x, gx viewed (O * R, I)); one row of a column block per step."""
    for o, c in dsl.tiles2d((g.shape[0], gx.shape[1]), (1, C)):
        gr = dsl.cast(g[o.start:o.start + 1, c], f32)
        if MODE == "sum":
            gs = gr * scale
        if MODE == "std":
            ov = dsl.cast(out[o.start:o.start + 1, c], f32)
            gs = dsl.where(ov == 0.0, 0.0, gr / (ov * 2.0)) * (2.0 * scale)
        if MODE == "var":
            gs = gr * (2.0 * scale)
        if MODE == "amax" or MODE == "amaxn" or MODE == "norminf":
            gs = gr / aux[o.start:o.start + 1, c]
        if MODE == "norm2":
            ov = dsl.cast(out[o.start:o.start + 1, c], f32)
            gs = dsl.where(ov == 0.0, 0.0, gr / ov)
        for t in dsl.range(R):
            row = o.start * R + t
            if MODE == "sum":
                gx[row:row + 1, c] = dsl.cast(gs, gx.dtype)
            elif MODE == "index":
                gx[row:row + 1, c] = dsl.cast(dsl.where(idx[o.start:o.start + 1, c] == t, gr, 0.0), gx.dtype)
            else:
                xt = dsl.cast(x[row:row + 1, c], f32)
                if MODE == "amax":
                    ov = dsl.cast(out[o.start:o.start + 1, c], f32)
                    gx[row:row + 1, c] = dsl.cast(gs * dsl.cast(xt == ov, f32), gx.dtype)
                if MODE == "amaxn":
                    ov = dsl.cast(out[o.start:o.start + 1, c], f32)
                    gx[row:row + 1, c] = dsl.cast(gs * dsl.cast((xt == ov) | (xt != xt), f32), gx.dtype)
                if MODE == "var" or MODE == "std":
                    gx[row:row + 1, c] = dsl.cast(gs * (xt - aux[o.start:o.start + 1, c]), gx.dtype)
                if MODE == "lse":
                    gx[row:row + 1, c] = dsl.cast(gr * dsl.exp(xt - dsl.cast(out[o.start:o.start + 1, c], f32)),
                                                  gx.dtype)
                if MODE == "norm1":
                    sg = dsl.cast(xt > 0.0, f32) - dsl.cast(xt < 0.0, f32)
                    gx[row:row + 1, c] = dsl.cast(sg * gr, gx.dtype)
                if MODE == "norm2":
                    gx[row:row + 1, c] = dsl.cast(xt * gs, gx.dtype)
                if MODE == "norminf":
                    ov = dsl.cast(out[o.start:o.start + 1, c], f32)
                    sg = dsl.cast(xt > 0.0, f32) - dsl.cast(xt < 0.0, f32)
                    mask = dsl.cast((dsl.abs(xt) == ov) | (xt != xt), f32)
                    gx[row:row + 1, c] = dsl.cast(sg * (gs * mask), gx.dtype)


@dsl.kernel
def tri_ones_kernel(u: GM, LOWER: Const[int] = 0, BK: Const[int] = 64):
    """u (BK, BK) = 1 where i <= j (LOWER=0: the upper triangle) or i >= j (LOWER=1), else 0: the scan
    matrices of the cube cumsum kernels, made once per dtype, size and direction."""
    for t in dsl.tiles(BK, 1):
        j = dsl.arange(BK, dtype=i32)
        if LOWER == 1:
            u[t.start:t.start + 1, :] = dsl.cast(j <= t.start, u.dtype)
        else:
            u[t.start:t.start + 1, :] = dsl.cast(j >= t.start, u.dtype)


@dsl.kernel
def cumsum_rows_kernel(x: GM, u: GM, y: GM, flag: GM[f32], REV: Const[int] = 0, BM: Const[int] = 128,
                       BK: Const[int] = 64):
    """y[m, k] = sum of x[m, j] for j <= k (REV=1: j >= k) in f32, x / y (M, R). A row block walks R in
    (BM, BK) blocks (REV=1: from the end), the R % BK tail last: the cube multiplies each by the triangle
    of ones u (upper for REV=0, lower for REV=1; kept in L1), V adds the running row sums carried from
    the blocks before and takes the new carry (the block's last column, REV=1: first) as a masked row
    sum. Full blocks are static windows (the host's fast path), only the tail has a runtime length.
    A non-finite x makes 0 * x NaN in the products of the columns it does not reach, so a row block
    whose carry ends non-finite (flag[b, 0], read back by the scalar unit) is done again by
    sequential column adds."""
    R = x.shape[1]
    nf = R // BK
    u1 = dsl.alloc(dsl.L1, (BK, BK), x.dtype)
    dsl.copy(u1, u[:, :])
    for m in dsl.tiles(x.shape[0], BM):
        carry = dsl.zeros((m.len, 1), f32)
        if REV == 1:
            hot = dsl.arange(BK, dtype=i32) == 0
        else:
            hot = dsl.arange(BK, dtype=i32) == BK - 1
        for i in dsl.range(nf):
            k = i * BK
            if REV == 1:
                k = R - (i + 1) * BK
            acc = dsl.zeros((BM, BK), f32)
            acc += x[m, k:k + BK] @ u1[:, :]
            t = acc + carry
            carry = dsl.sum(dsl.where(hot, t, 0.0), axis=1, keepdims=True)
            if y.dtype == f32:
                y[m, k:k + BK] = t
            else:
                y[m, k:k + BK] = dsl.cast(t, y.dtype)
        if nf * BK < R:
            k0 = nf * BK
            if REV == 1:
                k0 = 0
            kl = dsl.min(BK, R - nf * BK)
            acc1 = dsl.zeros((BM, BK), f32)
            acc1 += x[m, k0:k0 + kl] @ u1[0:kl, 0:kl]
            t1 = acc1 + carry
            if REV == 1:
                hot1 = dsl.arange(kl, dtype=i32) == 0
            else:
                hot1 = dsl.arange(kl, dtype=i32) == kl - 1
            carry = dsl.sum(dsl.where(hot1, t1, 0.0), axis=1, keepdims=True)
            y[m, k0:k0 + kl] = dsl.cast(t1, y.dtype)
        b = m.start // BM
        flag[b:b + 1, 0:1] = dsl.sum(carry * 0.0, axis=0, keepdims=True)
        f = flag[b, 0]
        if f != f:
            e = m.start + m.len
            for r0 in dsl.range(m.start, e, 16):   # 16 rows at a time: small UB columns
                run = dsl.zeros((dsl.min(r0 + 16, e) - r0, 1), f32)
                for c in dsl.range(R):
                    col = c
                    if REV == 1:
                        col = R - 1 - c
                    run += dsl.cast(x[r0:dsl.min(r0 + 16, e), col:col + 1], f32)
                    y[r0:dsl.min(r0 + 16, e), col:col + 1] = dsl.cast(run, y.dtype)


@dsl.kernel
def cumsum_cube_cols_kernel(x: GM, u: GM, y: GM, flag: GM[f32], R: int, REV: Const[int] = 0, BN: Const[int] = 64,
                            BK: Const[int] = 64):
    """y[o * R + r, i] = sum of x[o * R + s, i] for s <= r (REV=1: s >= r) in f32, x / y viewed (O * R, I):
    the column form of cumsum_rows_kernel. (1, BN) column blocks of each o walk R in (BK, BN) blocks
    (the tail last), multiplied on the cube from the left by the triangle u (lower for REV=0, upper for
    REV=1); the carry is a row (the block's last row, REV=1: first, gathered on V). A block whose carry
    ends non-finite (flag[b, 0]) is done again one row at a time."""
    nf = R // BK
    u1 = dsl.alloc(dsl.L1, (BK, BK), x.dtype)
    dsl.copy(u1, u[:, :])
    for o, n in dsl.tiles2d((x.shape[0] // dsl.max(R, 1), x.shape[1]), (1, BN)):
        base = o.start * R
        carry = dsl.zeros((1, n.len), f32)
        if REV == 1:
            pick = dsl.zeros((1, n.len), i32)
        else:
            pick = dsl.zeros((1, n.len), i32) + (BK - 1)
        for i in dsl.range(nf):
            k = base + i * BK
            if REV == 1:
                k = base + R - (i + 1) * BK
            acc = dsl.zeros((BK, BN), f32)
            acc += u1[:, :] @ x[k:k + BK, n]
            t = acc + carry
            carry = dsl.gather(t, pick, axis=0)
            if y.dtype == f32:
                y[k:k + BK, n] = t
            else:
                y[k:k + BK, n] = dsl.cast(t, y.dtype)
        if nf * BK < R:
            k0 = base + nf * BK
            if REV == 1:
                k0 = base
            kl = dsl.min(BK, R - nf * BK)
            acc1 = dsl.zeros((BK, BN), f32)
            acc1 += u1[0:kl, 0:kl] @ x[k0:k0 + kl, n]
            t1 = acc1 + carry
            if REV == 1:
                carry = dsl.gather(t1, dsl.zeros((1, n.len), i32), axis=0)
            else:
                carry = dsl.gather(t1, dsl.zeros((1, n.len), i32) + (kl - 1), axis=0)
            y[k0:k0 + kl, n] = dsl.cast(t1, y.dtype)
        b = (o.start * ((x.shape[1] + BN - 1) // BN)) + n.start // BN
        flag[b:b + 1, 0:1] = dsl.sum(carry * 0.0, axis=1, keepdims=True)
        f = flag[b, 0]
        if f != f:
            run = dsl.zeros((1, n.len), f32)
            for c in dsl.range(R):
                row = base + c
                if REV == 1:
                    row = base + R - 1 - c
                run += dsl.cast(x[row:row + 1, n], f32)
                y[row:row + 1, n] = dsl.cast(run, y.dtype)
