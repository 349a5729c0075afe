"""batch_norm and group_norm (op_library.norm's channel-statistics ops): kernels and host side.

The input is made contiguous and viewed (N, C, S) (S = the product of the spatial dims, 1 for
(N, C)). Each core owns whole channels (batch_norm) or whole (sample, group) rows (group_norm)
and walks them in SB-element windows `x[n, c:c+1, s]`: pass 1 the f32 sum (mean), pass 2 the f32
sum of squared deviations (biased variance; two passes for accuracy), pass 3 the normalised
store y = x * scale + shift with per-channel scale = rstd * w and shift = b - mean * scale.

batch_norm's forward (training) takes the statistics in one pass instead: the sums of d and d*d
for d = x - k, k the channel's first element (shifted sums: accurate while |mean - k| is of the
order of the standard deviation, which a sample of the channel is), var = E[d^2] - E[d]^2 >= 0.
With whole rows (FUSE) each channel's normalised store runs inside the next channel's statistics
loop on the same core (MTE2 streams both, MTE3 stores behind), the core's last channel after it;
w, b, rm, rv are read as scalars.

batch_norm training updates running_mean / running_var in place with torch's rule
(running = (1 - momentum) * running + momentum * stat, the variance unbiased by n / (n - 1)),
written by the kernel into the caller's tensors; eval normalises with the running statistics.
Backward (batch_norm_backward / group_norm_backward) recomputes the statistics from x (training;
eval reads the running ones): gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = g * w,
(eval: gx = g * w * rstd), grad_weight = sum(g * xhat), grad_bias = sum(g) in f32 (batch_norm:
one core per channel stores its sums; group_norm: atomic adds over the samples into a zeroed
f32 buffer), rounded to the parameter's dtype by a kernel.
"""
from __future__ import annotations

import math
from typing import Any

import torch

import dsl
from dsl import GM, Const, f32
from op_library import norm_kernels as K

_SB = 2048


@dsl.kernel
def batch_norm_fwd(x: GM, w: GM, b: GM, rm: GM, rv: GM, y: GM, eps: float, momentum: float,
                   TRAIN: Const[int] = 1, UPDATE: Const[int] = 1, HAS_W: Const[int] = 1, HAS_B: Const[int] = 1,
                   SB: Const[int] = 2048, WHOLE: Const[int] = 0, NS: Const[int] = 1, FUSE: Const[int] = 0):
    """x, y (N, C, S); w, b, rm, rv (1, C). One channel per tile. WHOLE=1 (S <= SB): windows of NS
    samples x all of S (one 2-D DMA each, the samples as rows); else SB-element windows per sample.
    Training statistics in one pass, shifted by the channel's first element k (module docstring)."""
    N = x.shape[0]
    S = x.shape[2]
    cnt = N * S
    L = dsl.min(SB, S)
    # this core's channels first..last (dsl.tiles' split: the first C % cores cores take one more); a
    # scalar carried across iterations would be simpler, but reads its pre-loop value (see the report)
    C = x.shape[1]
    q = C // dsl.num_cores()
    first = dsl.core_id() * q + dsl.min(dsl.core_id(), C % dsl.num_cores())
    last = (dsl.core_id() + 1) * q + dsl.min(dsl.core_id() + 1, C % dsl.num_cores()) - 1
    scp = dsl.zeros((1, 1), f32)
    shp = dsl.zeros((1, 1), f32)
    for t in dsl.tiles(C, 1):
        c = t.start
        pc = dsl.max(c - 1, first)   # the core's first channel: a placeholder store, rewritten next iteration
        if TRAIN == 1:
            k = x[0, c, 0]
            acc = dsl.zeros((1, 1), f32)
            acc2 = dsl.zeros((1, 1), f32)
            if WHOLE == 1:
                for n in dsl.range(0, N, NS):
                    d1 = dsl.cast(x[n:dsl.min(n + NS, N), c, 0:L], f32) - k
                    acc = acc + dsl.sum(dsl.sum(d1, axis=1, keepdims=True), axis=0, keepdims=True)
                    acc2 = acc2 + dsl.sum(dsl.sum(d1 * d1, axis=1, keepdims=True), axis=0, keepdims=True)
                    if FUSE == 1:   # the previous channel's store overlaps this one's statistics
                        xq = dsl.cast(x[n:dsl.min(n + NS, N), pc, 0:L], f32)
                        y[n:dsl.min(n + NS, N), pc, 0:L] = dsl.cast(xq * scp + shp, y.dtype)
            else:
                for n in dsl.range(N):
                    for s in dsl.range(0, S, SB):
                        d = dsl.cast(x[n, c:c + 1, s], f32) - k
                        acc = acc + dsl.sum(d, axis=1, keepdims=True)
                        acc2 = acc2 + dsl.sum(d * d, axis=1, keepdims=True)
            m1 = acc / cnt
            mean = m1 + k
            var = dsl.maximum(acc2 / cnt - m1 * m1, 0.0)
            if UPDATE == 1:
                rm[0:1, c:c + 1] = dsl.cast(mean * momentum + rm[0, c] * (1.0 - momentum), rm.dtype)
                rv[0:1, c:c + 1] = dsl.cast(var * (momentum * cnt / (cnt - 1)) + rv[0, c] * (1.0 - momentum),
                                            rv.dtype)
        else:
            mean = dsl.full((1, 1), rm[0, c], f32)
            var = dsl.full((1, 1), rv[0, c], f32)
        # w, b, rm, rv are read as scalars (S pipe): the fused loop leaves no MTE2 <-> V event ids to spare
        sc = dsl.rsqrt(var + eps)
        if HAS_W == 1:
            sc = sc * w[0, c]
        sh = dsl.zeros((1, 1), f32) - mean * sc
        if HAS_B == 1:
            sh = sh + b[0, c]
        if FUSE == 1:
            scp = sc * 1.0
            shp = sh * 1.0
        elif WHOLE == 1:
            for n in dsl.range(0, N, NS):
                y[n:dsl.min(n + NS, N), c, 0:L] = dsl.cast(dsl.cast(x[n:dsl.min(n + NS, N), c, 0:L], f32) * sc + sh,
                                                           y.dtype)
        else:
            for n in dsl.range(N):
                for s in dsl.range(0, S, SB):
                    y[n, c:c + 1, s] = dsl.cast(dsl.cast(x[n, c:c + 1, s], f32) * sc + sh, y.dtype)
    if FUSE == 1 and last >= first:   # the core's last channel's store
        for n in dsl.range(0, N, NS):
            xq = dsl.cast(x[n:dsl.min(n + NS, N), last, 0:L], f32)
            y[n:dsl.min(n + NS, N), last, 0:L] = dsl.cast(xq * scp + shp, y.dtype)


@dsl.kernel
def batch_norm_bwd(g: GM, x: GM, w: GM, rm: GM, rv: GM, gx: GM, gw: GM, gb: GM, eps: float,
                   TRAIN: Const[int] = 1, HAS_W: Const[int] = 1, SB: Const[int] = 2048):
    """gx (N, C, S); gw, gb (1, C) f32: sum(g * xhat), sum(g) per channel."""
    N = x.shape[0]
    S = x.shape[2]
    cnt = N * S
    for t in dsl.tiles(x.shape[1], 1):
        c = t.start
        if TRAIN == 1:
            acc = dsl.zeros((1, 1), f32)
            for n in dsl.range(N):
                for s in dsl.range(0, S, SB):
                    acc = acc + dsl.sum(dsl.cast(x[n, c:c + 1, s], f32), axis=1, keepdims=True)
            mean = acc / cnt
            acc2 = dsl.zeros((1, 1), f32)
            for n in dsl.range(N):
                for s in dsl.range(0, S, SB):
                    d = dsl.cast(x[n, c:c + 1, s], f32) - mean
                    acc2 = acc2 + dsl.sum(d * d, axis=1, keepdims=True)
            rs = dsl.rsqrt(acc2 / cnt + eps)
        else:
            mean = dsl.cast(rm[0:1, c:c + 1], f32)
            rs = dsl.rsqrt(dsl.cast(rv[0:1, c:c + 1], f32) + eps)
        sg = dsl.zeros((1, 1), f32)
        sgx = dsl.zeros((1, 1), f32)
        for n in dsl.range(N):
            for s in dsl.range(0, S, SB):
                gt = dsl.cast(g[n, c:c + 1, s], f32)
                sg = sg + dsl.sum(gt, axis=1, keepdims=True)
                sgx = sgx + dsl.sum(gt * ((dsl.cast(x[n, c:c + 1, s], f32) - mean) * rs), axis=1, keepdims=True)
        gw[0:1, c:c + 1] = sgx
        gb[0:1, c:c + 1] = sg
        if HAS_W == 1:
            k = rs * dsl.cast(w[0:1, c:c + 1], f32)
        else:
            k = rs * 1.0
        mg = sg / cnt
        mgx = sgx / cnt
        for n in dsl.range(N):
            for s in dsl.range(0, S, SB):
                gt = dsl.cast(g[n, c:c + 1, s], f32)
                if TRAIN == 1:
                    xh = (dsl.cast(x[n, c:c + 1, s], f32) - mean) * rs
                    gx[n, c:c + 1, s] = dsl.cast((gt - mg - xh * mgx) * k, gx.dtype)
                else:
                    gx[n, c:c + 1, s] = dsl.cast(gt * k, gx.dtype)


@dsl.kernel
def group_norm_fwd(x: GM, w: GM, b: GM, y: GM, G: int, eps: float, HAS_W: Const[int] = 1, HAS_B: Const[int] = 1,
                   SB: Const[int] = 2048, SINGLE: Const[int] = 0):
    """x, y (N * G, Cg, S); w, b (G, Cg), or (G * Cg, 1) columns with SINGLE. One (sample, group) row per
    tile. SINGLE=1 (the row fits UB): the (Cg, S) row is loaded once, its mean and variance (two-pass)
    taken in UB and y = x * scale + shift stored from it (one read of x instead of three)."""
    CG = x.shape[1]
    S = x.shape[2]
    cnt = CG * S
    for t in dsl.tiles(x.shape[0], 1):
        row = t.start
        gi = row % G
        if SINGLE == 1:
            if x.dtype == f32:
                xt = x[row, :, :]
            else:
                xt = dsl.cast(x[row, :, :], f32)
            m1 = dsl.sum(dsl.sum(xt, axis=1, keepdims=True), axis=0, keepdims=True) / cnt
            dv = xt - m1
            r1 = dsl.rsqrt(dsl.sum(dsl.sum(dv * dv, axis=1, keepdims=True), axis=0, keepdims=True) / cnt + eps)
            # y = x * scale + shift per channel (scale = w * rstd, shift = b - mean * scale), as torch's
            # CPU kernel computes it: dv stays in registers, and the last pass reads x once
            if HAS_W == 1:
                sc1 = dsl.cast(w[gi * CG:gi * CG + CG, 0:1], f32) * r1
            else:
                sc1 = dsl.zeros((CG, 1), f32) + r1
            if HAS_B == 1:
                sh1 = dsl.cast(b[gi * CG:gi * CG + CG, 0:1], f32) - m1 * sc1
            else:
                sh1 = dsl.zeros((CG, 1), f32) - m1 * sc1
            y[row, :, :] = dsl.cast(xt * sc1 + sh1, y.dtype)
        else:
            acc = dsl.zeros((1, 1), f32)
            for ci in dsl.range(CG):
                for s in dsl.range(0, S, SB):
                    acc = acc + dsl.sum(dsl.cast(x[row, ci:ci + 1, s], f32), axis=1, keepdims=True)
            mean = acc / cnt
            acc2 = dsl.zeros((1, 1), f32)
            for ci in dsl.range(CG):
                for s in dsl.range(0, S, SB):
                    d = dsl.cast(x[row, ci:ci + 1, s], f32) - mean
                    acc2 = acc2 + dsl.sum(d * d, axis=1, keepdims=True)
            rs = dsl.rsqrt(acc2 / cnt + eps)
            for ci in dsl.range(CG):
                if HAS_W == 1:
                    sc = rs * dsl.cast(w[gi:gi + 1, ci:ci + 1], f32)
                else:
                    sc = rs * 1.0     # (written before ae02d4f fixed `sc = rs` aliasing; either form is right now)
                sh = dsl.zeros((1, 1), f32) - mean * sc
                if HAS_B == 1:
                    sh = sh + dsl.cast(b[gi:gi + 1, ci:ci + 1], f32)
                for s in dsl.range(0, S, SB):
                    y[row, ci:ci + 1, s] = dsl.cast(dsl.cast(x[row, ci:ci + 1, s], f32) * sc + sh, y.dtype)


@dsl.kernel
def group_norm_bwd(g: GM, x: GM, w: GM, gx: GM, gw: GM, gb: GM, G: int, eps: float, HAS_W: Const[int] = 1,
                   SB: Const[int] = 2048):
    """gx (N * G, Cg, S); gw, gb (G, Cg) f32 zeroed: atomic adds of sum(g * xhat), sum(g) per sample."""
    CG = x.shape[1]
    S = x.shape[2]
    cnt = CG * S
    for t in dsl.tiles(x.shape[0], 1):
        row = t.start
        gi = row % G
        acc = dsl.zeros((1, 1), f32)
        for ci in dsl.range(CG):
            for s in dsl.range(0, S, SB):
                acc = acc + dsl.sum(dsl.cast(x[row, ci:ci + 1, s], f32), axis=1, keepdims=True)
        mean = acc / cnt
        acc2 = dsl.zeros((1, 1), f32)
        for ci in dsl.range(CG):
            for s in dsl.range(0, S, SB):
                d = dsl.cast(x[row, ci:ci + 1, s], f32) - mean
                acc2 = acc2 + dsl.sum(d * d, axis=1, keepdims=True)
        rs = dsl.rsqrt(acc2 / cnt + eps)
        s1 = dsl.zeros((1, 1), f32)
        s2 = dsl.zeros((1, 1), f32)
        for ci in dsl.range(CG):
            pg = dsl.zeros((1, 1), f32)
            pgx = dsl.zeros((1, 1), f32)
            for s in dsl.range(0, S, SB):
                gt = dsl.cast(g[row, ci:ci + 1, s], f32)
                xh = (dsl.cast(x[row, ci:ci + 1, s], f32) - mean) * rs
                pg = pg + dsl.sum(gt, axis=1, keepdims=True)
                pgx = pgx + dsl.sum(gt * xh, axis=1, keepdims=True)
            dsl.atomic_add(gw[gi:gi + 1, ci:ci + 1], pgx)
            dsl.atomic_add(gb[gi:gi + 1, ci:ci + 1], pg)
            if HAS_W == 1:
                wc = dsl.cast(w[gi:gi + 1, ci:ci + 1], f32)
                pg = pg * wc
                pgx = pgx * wc
            s1 = s1 + pg
            s2 = s2 + pgx
        s1 = s1 / cnt
        s2 = s2 / cnt
        for ci in dsl.range(CG):
            for s in dsl.range(0, S, SB):
                gt = dsl.cast(g[row, ci:ci + 1, s], f32)
                if HAS_W == 1:
                    gt = gt * dsl.cast(w[gi:gi + 1, ci:ci + 1], f32)
                xh = (dsl.cast(x[row, ci:ci + 1, s], f32) - mean) * rs
                gx[row, ci:ci + 1, s] = dsl.cast((gt - s1 - xh * s2) * rs, gx.dtype)


def _vec(p: torch.Tensor | None, like: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    if p is None:
        return torch.empty((1, 1), dtype=like.dtype)
    return p.contiguous().view(shape)


def _cast(acc: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if like.dtype == torch.float32:
        return acc.view(like.shape)
    out = torch.empty(like.shape, dtype=like.dtype)
    K.cast_kernel(acc.reshape(-1), out.view(-1))
    return out


def _bn_check(input: torch.Tensor, running_mean: Any, running_var: Any, weight: Any, bias: Any,
              training: bool) -> tuple[int, int, int]:
    if input.dim() < 2:
        raise ValueError(f"batch_norm: expected input with at least 2 dims (N, C, ...), got {input.dim()}D")
    n, c = input.shape[0], input.shape[1]
    s = math.prod(input.shape[2:])
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != c:
            raise RuntimeError(f"{name} should contain {c} elements not {t.numel()}")
    if training and n * s <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape}")
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError("batch_norm: running_mean and running_var must be defined in evaluation mode")
    return n, c, s


def batch_norm(input: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.batch_norm for (N, C, ...) inputs (module docstring). training=True
    updates running_mean / running_var in place (when given); momentum=None (cumulative average)
    is not supported."""
    n, c, s = _bn_check(input, running_mean, running_var, weight, bias, training)
    if momentum is None:
        raise NotImplementedError("batch_norm: momentum=None (cumulative moving average) is not supported")
    y = torch.empty(input.shape, dtype=input.dtype)
    if input.numel() == 0:
        return y
    update = int(training and running_mean is not None and running_var is not None)
    if update and not (running_mean.is_contiguous() and running_var.is_contiguous()):
        raise RuntimeError("batch_norm: running_mean and running_var must be contiguous (updated in place)")
    rm = running_mean.view(1, c) if running_mean is not None else torch.empty((1, 1))
    rv = running_var.view(1, c) if running_var is not None else torch.empty((1, 1))
    batch_norm_fwd(input.contiguous().view(n, c, s), _vec(weight, input, (1, c)), _vec(bias, input, (1, c)), rm, rv,
                   y.view(n, c, s), float(eps), float(momentum), TRAIN=int(training), UPDATE=update,
                   HAS_W=int(weight is not None), HAS_B=int(bias is not None), FUSE=_fuse(training, s),
                   **_whole(s, n))
    return y


def _whole(s: int, n: int) -> dict[str, int]:
    """SB / WHOLE / NS for batch_norm_fwd: samples' channel rows up to 8192 elements move whole, NS
    samples per window."""
    sb = 1 << max(0, s - 1).bit_length()
    ns = max(1, min(n, 4096 // sb))   # samples per window: about 4096 elements (16 KiB of f32)
    return {"SB": sb, "WHOLE": 1, "NS": ns} if sb <= 8192 else {"SB": _SB, "WHOLE": 0}


def _fuse(training: bool, s: int) -> int:
    """FUSE for batch_norm_fwd: in training with whole rows each channel's normalised store runs inside
    the next channel's statistics pass (one loop streams both), the core's last channel after its loop."""
    return int(training and 1 << max(0, s - 1).bit_length() <= 8192)


def batch_norm_backward(grad_output: torch.Tensor, input: torch.Tensor, running_mean: torch.Tensor | None,
                        running_var: torch.Tensor | None, weight: torch.Tensor | None = None,
                        bias: torch.Tensor | None = None, training: bool = False,
                        eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(grad_input, grad_weight, grad_bias) of batch_norm; training recomputes the batch statistics
    from input, eval uses the running ones (which the forward did not change)."""
    n, c, s = _bn_check(input, running_mean, running_var, weight, bias, training)
    gx = torch.empty(input.shape, dtype=input.dtype)
    gw = torch.zeros((1, c), dtype=torch.float32)
    gb = torch.zeros((1, c), dtype=torch.float32)
    if input.numel():
        rm = running_mean.contiguous().view(1, c) if running_mean is not None else torch.empty((1, 1))
        rv = running_var.contiguous().view(1, c) if running_var is not None else torch.empty((1, 1))
        batch_norm_bwd(grad_output.contiguous().view(n, c, s), input.contiguous().view(n, c, s),
                       _vec(weight, input, (1, c)), rm, rv, gx.view(n, c, s), gw, gb, float(eps), TRAIN=int(training),
                       HAS_W=int(weight is not None), SB=_SB)
    return gx, None if weight is None else _cast(gw, weight), None if bias is None else _cast(gb, bias)


def _gn_check(input: torch.Tensor, num_groups: int, weight: Any, bias: Any) -> tuple[int, int, int]:
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.dim()}")
    n, c = input.shape[0], input.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dim() != 1 or t.numel() != c):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {list(t.shape)} and input of shape {list(input.shape)}")
    return n, c, math.prod(input.shape[2:])


_GN_SINGLE = 6400   # elements of a (Cg, S) group row loaded whole (about 25 KiB of f32 per slot)


def group_norm(input: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.group_norm (module docstring)."""
    n, c, s = _gn_check(input, num_groups, weight, bias)
    g = num_groups
    y = torch.empty(input.shape, dtype=input.dtype)
    if input.numel() == 0:
        return y
    single = (c // g) * s <= _GN_SINGLE   # the group's row fits UB: one read of x
    shape = (c, 1) if single else (g, c // g)
    group_norm_fwd(input.contiguous().view(n * g, c // g, s), _vec(weight, input, shape),
                   _vec(bias, input, shape), y.view(n * g, c // g, s), g, float(eps),
                   HAS_W=int(weight is not None), HAS_B=int(bias is not None), SB=_SB, SINGLE=int(single))
    return y


def group_norm_backward(grad_output: torch.Tensor, input: torch.Tensor, num_groups: int,
                        weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                        eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(grad_input, grad_weight, grad_bias) of group_norm (statistics recomputed from input)."""
    n, c, s = _gn_check(input, num_groups, weight, bias)
    g = num_groups
    gx = torch.empty(input.shape, dtype=input.dtype)
    gw = torch.zeros((g, c // g), dtype=torch.float32)
    gb = torch.zeros((g, c // g), dtype=torch.float32)
    if input.numel():
        group_norm_bwd(grad_output.contiguous().view(n * g, c // g, s), input.contiguous().view(n * g, c // g, s),
                       _vec(weight, input, (g, c // g)), gx.view(n * g, c // g, s), gw, gb, g, float(eps),
                       HAS_W=int(weight is not None), SB=_SB)
    return gx, None if weight is None else _cast(gw, weight), None if bias is None else _cast(gb, bias)
