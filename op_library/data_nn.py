"""npu_rotary_mul (torch_npu's rotary position embedding) and adaptive_avg_pool2d, forward and backward,
as DSL kernels (part of the data-movement area; re-exported by op_library.data).

npu_rotary_mul(x, r1, r2, rotary_mode='half' | 'interleave'): y = x * r1 + rotate(x) * r2 on 4-D x
(e.g. BNSD, BSND, SBND); r1 and r2 have one shape, each dim 1 or x's (broadcast). half: rotate(x) =
cat(-x2, x1) of the two halves of the last dim; interleave: pairs (x[2i], x[2i+1]) -> (-x[2i+1], x[2i]).
- Forward (`rotary_fwd`): (b, n) pairs x row blocks of dim 2 are dealt over the cores; r's row is
  the same index taken modulo r's size in each dim (a broadcast dim has size 1), and when r is
  broadcast along dim 2 (RB=1) one r row meets the whole block ((1, D) against (R, D)). half works
  on the two column halves as windows; interleave loads whole rows and swaps the pairs with
  dsl.gather (index j ^ 1, built in the kernel from dsl.arange) and a +-1 sign row. f16/bf16 in f32.
  When r is broadcast along a short dim 2 (fewer than 16, e.g. BSND with r 1S1D) `rotary_fwd_cols`
  instead takes (b, block of dim-1 rows) tiles: r's rows are loaded once per tile and each s is one
  2-D window of x (the dim-1 rows at pitch S*D), so no DMA moves a single 256-byte r row.
- Backward (`rotary_bwd`): rotate is linear with rotate^T = -rotate, so dx = g * r1 - rotate(g * r2),
  dr1 = g * x and dr2 = g * rotate(x), summed over r's broadcast dims: over the block's rows in UB
  (RB=1) and across blocks by atomic adds into f32 buffers of r's shape (ACC=1), cast at the end; when
  r is not broadcast at all they are stored directly (ACC=0).

adaptive_avg_pool2d(input, output_size): windows [floor(i * H / OH), ceil((i + 1) * H / OH)) as torch.
- When OH divides H and OW divides W the windows are equal and disjoint: op_library.pool's
  avg_pool2d (kernel = stride = (H / OH, W / OW)) and its backward do it, row by row (windows of up
  to 64 taps).
- Forward (`adaptive_avg_fwd`): (plane, output element) pairs over the cores; each window is loaded
  as a 2-D GM window (in chunks of CH x CW when it is large), summed in f32 on V, divided by kh then
  kw (torch's order) and stored.
- Backward (`adaptive_avg_bwd`): for each output element gy / kh / kw is atomically added over its
  window of an f32 buffer (windows overlap when H % OH != 0), then cast to the dtype.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

import dsl
from dsl import GM, Const, f32, i32
from op_library.pool import avg_pool2d, avg_pool2d_backward

__all__ = ["npu_rotary_mul", "npu_rotary_mul_backward", "adaptive_avg_pool2d", "adaptive_avg_pool2d_backward"]

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


@dsl.kernel
def rotary_fwd(x: GM, r1: GM, r2: GM, y: GM, MODE: Const[str] = "half", RB: Const[int] = 0, R: Const[int] = 16,
               DM: Const[int] = 128):
    """y = x * r1 + rotate(x) * r2 on (B, N, S, D) views; r (b', n', s', D) broadcast (module docstring)."""
    N = x.shape[1]
    D = x.shape[3]
    h = D // 2
    for bn, s in dsl.tiles2d((x.shape[0] * N, x.shape[2]), (1, R)):
        b = bn.start // N
        n = bn.start % N
        rb = b % r1.shape[0]
        rn = n % r1.shape[1]
        if MODE == "half":
            x1 = dsl.cast(x[b, n, s, 0:h], f32)
            x2 = dsl.cast(x[b, n, s, h:D], f32)
            if RB == 1:
                c1 = dsl.cast(r1[rb, rn, 0:1, 0:h], f32)
                c2 = dsl.cast(r1[rb, rn, 0:1, h:D], f32)
                s1 = dsl.cast(r2[rb, rn, 0:1, 0:h], f32)
                s2 = dsl.cast(r2[rb, rn, 0:1, h:D], f32)
            else:
                c1 = dsl.cast(r1[rb, rn, s, 0:h], f32)
                c2 = dsl.cast(r1[rb, rn, s, h:D], f32)
                s1 = dsl.cast(r2[rb, rn, s, 0:h], f32)
                s2 = dsl.cast(r2[rb, rn, s, h:D], f32)
            y[b, n, s, 0:h] = dsl.cast(x1 * c1 + (-x2) * s1, y.dtype)
            y[b, n, s, h:D] = dsl.cast(x2 * c2 + x1 * s2, y.dtype)
        else:
            a = dsl.arange(dsl.min(DM, D), dtype=i32)
            odd = a % 2
            swap = dsl.zeros((s.len, D), i32) + (a + 1 - 2 * odd)
            sign = dsl.cast(2 * odd - 1, f32)
            xt = dsl.cast(x[b, n, s, :], f32)
            rot = dsl.gather(xt, swap, axis=1) * sign
            if RB == 1:
                c = dsl.cast(r1[rb, rn, 0:1, :], f32)
                sn = dsl.cast(r2[rb, rn, 0:1, :], f32)
            else:
                c = dsl.cast(r1[rb, rn, s, :], f32)
                sn = dsl.cast(r2[rb, rn, s, :], f32)
            y[b, n, s, :] = dsl.cast(xt * c + rot * sn, y.dtype)


@dsl.kernel
def rotary_fwd_cols(x: GM, r1: GM, r2: GM, y: GM, RN: Const[int] = 1, NB: Const[int] = 32):
    """rotary_fwd (half) for r broadcast along dim 2 when dim 2 is short (e.g. BSND, r 1S1D): blocks of
    NB rows of dim 1 per (b, block) tile, r's NB rows (RN=1; RN=0: r broadcast along dim 1 too, one
    row) loaded once per tile, then for each s one 2-D window of x (NB rows, pitch S*D) per half."""
    D = x.shape[3]
    h = D // 2
    for b, nw in dsl.tiles2d((x.shape[0], x.shape[1]), (1, NB)):
        rb = b.start % r1.shape[0]
        if RN == 1:
            c1 = dsl.cast(r1[rb, nw, 0, 0:h], f32)
            c2 = dsl.cast(r1[rb, nw, 0, h:D], f32)
            s1 = dsl.cast(r2[rb, nw, 0, 0:h], f32)
            s2 = dsl.cast(r2[rb, nw, 0, h:D], f32)
        else:
            c1 = dsl.cast(r1[rb, 0:1, 0, 0:h], f32)
            c2 = dsl.cast(r1[rb, 0:1, 0, h:D], f32)
            s1 = dsl.cast(r2[rb, 0:1, 0, 0:h], f32)
            s2 = dsl.cast(r2[rb, 0:1, 0, h:D], f32)
        for s in dsl.range(x.shape[2]):
            x1 = dsl.cast(x[b.start, nw, s, 0:h], f32)
            x2 = dsl.cast(x[b.start, nw, s, h:D], f32)
            y[b.start, nw, s, 0:h] = dsl.cast(x1 * c1 - x2 * s1, y.dtype)
            y[b.start, nw, s, h:D] = dsl.cast(x2 * c2 + x1 * s2, y.dtype)


@dsl.kernel
def rotary_bwd(g: GM, x: GM, r1: GM, r2: GM, dx: GM, dr1: GM, dr2: GM, MODE: Const[str] = "half",
               RB: Const[int] = 0, ACC: Const[int] = 1, R: Const[int] = 16, DM: Const[int] = 128):
    """dx = g * r1 - rotate(g * r2); dr1 = g * x, dr2 = g * rotate(x) summed over r's broadcast dims
    (ACC=1: atomic adds into f32 dr1 / dr2 of r's shape; ACC=0: stored, r not broadcast)."""
    N = x.shape[1]
    D = x.shape[3]
    h = D // 2
    for bn, s in dsl.tiles2d((x.shape[0] * N, x.shape[2]), (1, R)):
        b = bn.start // N
        n = bn.start % N
        rb = b % r1.shape[0]
        rn = n % r1.shape[1]
        if MODE == "half":
            g1 = dsl.cast(g[b, n, s, 0:h], f32)
            g2 = dsl.cast(g[b, n, s, h:D], f32)
            x1 = dsl.cast(x[b, n, s, 0:h], f32)
            x2 = dsl.cast(x[b, n, s, h:D], f32)
            if RB == 1:
                c1 = dsl.cast(r1[rb, rn, 0:1, 0:h], f32)
                c2 = dsl.cast(r1[rb, rn, 0:1, h:D], f32)
                s1 = dsl.cast(r2[rb, rn, 0:1, 0:h], f32)
                s2 = dsl.cast(r2[rb, rn, 0:1, h:D], f32)
            else:
                c1 = dsl.cast(r1[rb, rn, s, 0:h], f32)
                c2 = dsl.cast(r1[rb, rn, s, h:D], f32)
                s1 = dsl.cast(r2[rb, rn, s, 0:h], f32)
                s2 = dsl.cast(r2[rb, rn, s, h:D], f32)
            dx[b, n, s, 0:h] = dsl.cast(g1 * c1 + g2 * s2, dx.dtype)
            dx[b, n, s, h:D] = dsl.cast(g2 * c2 - g1 * s1, dx.dtype)
            p1 = g1 * x1
            p2 = g2 * x2
            q1 = -(g1 * x2)
            q2 = g2 * x1
            if RB == 1:
                dsl.atomic_add(dr1[rb, rn, 0:1, 0:h], dsl.sum(p1, axis=0, keepdims=True))
                dsl.atomic_add(dr1[rb, rn, 0:1, h:D], dsl.sum(p2, axis=0, keepdims=True))
                dsl.atomic_add(dr2[rb, rn, 0:1, 0:h], dsl.sum(q1, axis=0, keepdims=True))
                dsl.atomic_add(dr2[rb, rn, 0:1, h:D], dsl.sum(q2, axis=0, keepdims=True))
            elif ACC == 1:
                dsl.atomic_add(dr1[rb, rn, s, 0:h], p1)
                dsl.atomic_add(dr1[rb, rn, s, h:D], p2)
                dsl.atomic_add(dr2[rb, rn, s, 0:h], q1)
                dsl.atomic_add(dr2[rb, rn, s, h:D], q2)
            else:
                dr1[rb, rn, s, 0:h] = dsl.cast(p1, dr1.dtype)
                dr1[rb, rn, s, h:D] = dsl.cast(p2, dr1.dtype)
                dr2[rb, rn, s, 0:h] = dsl.cast(q1, dr2.dtype)
                dr2[rb, rn, s, h:D] = dsl.cast(q2, dr2.dtype)
        else:
            a = dsl.arange(dsl.min(DM, D), dtype=i32)
            odd = a % 2
            swap = dsl.zeros((s.len, D), i32) + (a + 1 - 2 * odd)
            sign = dsl.cast(2 * odd - 1, f32)
            gt = dsl.cast(g[b, n, s, :], f32)
            xt = dsl.cast(x[b, n, s, :], f32)
            if RB == 1:
                c = dsl.cast(r1[rb, rn, 0:1, :], f32)
                sn = dsl.cast(r2[rb, rn, 0:1, :], f32)
            else:
                c = dsl.cast(r1[rb, rn, s, :], f32)
                sn = dsl.cast(r2[rb, rn, s, :], f32)
            gs = gt * sn
            dx[b, n, s, :] = dsl.cast(gt * c - dsl.gather(gs, swap, axis=1) * sign, dx.dtype)
            p = gt * xt
            q = gt * (dsl.gather(xt, swap, axis=1) * sign)
            if RB == 1:
                dsl.atomic_add(dr1[rb, rn, 0:1, :], dsl.sum(p, axis=0, keepdims=True))
                dsl.atomic_add(dr2[rb, rn, 0:1, :], dsl.sum(q, axis=0, keepdims=True))
            elif ACC == 1:
                dsl.atomic_add(dr1[rb, rn, s, :], p)
                dsl.atomic_add(dr2[rb, rn, s, :], q)
            else:
                dr1[rb, rn, s, :] = dsl.cast(p, dr1.dtype)
                dr2[rb, rn, s, :] = dsl.cast(q, dr2.dtype)


def _rotary_check(x: Any, r1: Any, r2: Any, rotary_mode: str) -> tuple[bool, bool]:
    """(RB: r broadcast along dim 2, ACC: r broadcast anywhere) after checking the arguments."""
    for name, t in (("x", x), ("r1", r1), ("r2", r2)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"npu_rotary_mul: {name} must be a Tensor, got {type(t).__name__}")
        if t.dtype not in FLOATS:
            raise TypeError(f"npu_rotary_mul: {name} has dtype {t.dtype}; expected float32, float16 or bfloat16")
        if t.dim() != 4:
            raise RuntimeError(f"npu_rotary_mul: {name} must be a 4-D tensor, got {t.dim()} dims")
    if r1.dtype != x.dtype or r2.dtype != x.dtype:
        raise TypeError(f"npu_rotary_mul: r1 ({r1.dtype}) and r2 ({r2.dtype}) must have x's dtype {x.dtype}")
    if rotary_mode not in ("half", "interleave"):
        raise ValueError(f"npu_rotary_mul: rotary_mode must be 'half' or 'interleave', got {rotary_mode!r}")
    if x.shape[3] % 2:
        raise RuntimeError(f"npu_rotary_mul: the last dim of x must be even, got {x.shape[3]}")
    if r1.shape != r2.shape:
        raise RuntimeError(f"npu_rotary_mul: r1 {list(r1.shape)} and r2 {list(r2.shape)} must have the same shape")
    for k in range(4):
        if r1.shape[k] not in (1, x.shape[k]) or (k == 3 and r1.shape[k] != x.shape[3]):
            raise RuntimeError(f"npu_rotary_mul: r1 {list(r1.shape)} does not broadcast to x {list(x.shape)} "
                               f"(dim {k}: {r1.shape[k]} vs {x.shape[k]})")
    rb = r1.shape[2] == 1 and x.shape[2] != 1
    acc = any(r1.shape[k] != x.shape[k] for k in range(3))
    return rb, acc


def _rows(x: Any, budget: int) -> dict[str, int]:
    """R (rows per block, about `budget` elements) and DM (the row length rounded up to a power of two)."""
    D = max(1, x.shape[3])
    r = max(1, min(64, budget // D))
    return {"R": 1 << (r.bit_length() - 1), "DM": 1 << max(0, D - 1).bit_length()}


def npu_rotary_mul(x: Any, r1: Any, r2: Any, rotary_mode: str = "half") -> Any:
    """torch_npu.npu_rotary_mul(x, r1, r2, rotary_mode): x * r1 + rotate(x) * r2 (module docstring)."""
    rb, _ = _rotary_check(x, r1, r2, rotary_mode)
    xc, c, s = x.contiguous(), r1.contiguous(), r2.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype)
    if y.numel() and rotary_mode == "half" and rb and x.shape[2] < 16:   # short dim 2: r rows reused across it
        nb = max(1, min(64, 4096 // max(1, x.shape[3])))
        rotary_fwd_cols(xc, c, s, y, RN=int(r1.shape[1] == x.shape[1]), NB=1 << (nb.bit_length() - 1))
    elif y.numel():
        rotary_fwd(xc, c, s, y, MODE=rotary_mode, RB=int(rb), **_rows(x, 4096 if rotary_mode == "half" else 1024))
    return y


def npu_rotary_mul_backward(grad: Any, x: Any, r1: Any, r2: Any, rotary_mode: str = "half") -> tuple[Any, Any, Any]:
    """(grad x, grad r1, grad r2) of npu_rotary_mul; the r grads summed over r's broadcast dims."""
    rb, acc = _rotary_check(x, r1, r2, rotary_mode)
    g, xc, c, s = grad.contiguous(), x.contiguous(), r1.contiguous(), r2.contiguous()
    dx = torch.empty(x.shape, dtype=x.dtype)
    if acc:
        dr1 = torch.zeros(r1.shape, dtype=torch.float32)
        dr2 = torch.zeros(r2.shape, dtype=torch.float32)
    else:
        dr1 = torch.empty(r1.shape, dtype=r1.dtype)
        dr2 = torch.empty(r2.shape, dtype=r2.dtype)
    if x.numel():
        rotary_bwd(g, xc, c, s, dx, dr1, dr2, MODE=rotary_mode, RB=int(rb), ACC=int(acc),
                   **_rows(x, 1024 if rotary_mode == "half" else 512))
    if acc:
        from op_library.data import _cast

        dr1, dr2 = _cast(dr1, r1.dtype), _cast(dr2, r2.dtype)
    return dx, dr1, dr2


# adaptive_avg_pool2d -----------------------------------------------------------------------------

@dsl.kernel
def adaptive_avg_fwd(x: GM, y: GM, KH: Const[int] = 2, KW: Const[int] = 2, CH: Const[int] = 64,
                     CW: Const[int] = 64):
    """y[p, oh, ow, 0] = mean of x[p] over torch's adaptive window (KH x KW the largest window)."""
    H = x.shape[1]
    W = x.shape[2]
    OH = y.shape[1]
    OW = y.shape[2]
    for p, o in dsl.tiles2d((x.shape[0], OH * OW), (1, 1)):
        oh = o.start // OW
        ow = o.start % OW
        hs = (oh * H) // OH
        he = ((oh + 1) * H + OH - 1) // OH
        ws = (ow * W) // OW
        we = ((ow + 1) * W + OW - 1) // OW
        acc = dsl.zeros((1, 1), f32)
        for h0 in dsl.range(hs, he, CH):
            for w0 in dsl.range(ws, we, CW):
                t = dsl.cast(x[p.start, h0:dsl.min(h0 + CH, he), w0:dsl.min(w0 + CW, we)], f32)
                acc = acc + dsl.sum(dsl.sum(t, axis=1, keepdims=True), axis=0, keepdims=True)
        kh = dsl.cast(dsl.full((1, 1), he - hs, i32), f32)
        kw = dsl.cast(dsl.full((1, 1), we - ws, i32), f32)
        y[p.start, oh, ow:ow + 1, 0:1] = dsl.cast(acc / kh / kw, y.dtype)


@dsl.kernel
def adaptive_avg_bwd(gy: GM, gx: GM, CH: Const[int] = 64, CW: Const[int] = 64):
    """gx (f32, zeroed) += gy[p, oh, ow] / kh / kw over each window (atomic: windows may overlap)."""
    H = gx.shape[1]
    W = gx.shape[2]
    OH = gy.shape[1]
    OW = gy.shape[2]
    for p, o in dsl.tiles2d((gx.shape[0], OH * OW), (1, 1)):
        oh = o.start // OW
        ow = o.start % OW
        hs = (oh * H) // OH
        he = ((oh + 1) * H + OH - 1) // OH
        ws = (ow * W) // OW
        we = ((ow + 1) * W + OW - 1) // OW
        v = dsl.cast(gy[p.start, oh, ow:ow + 1, 0:1], f32)
        kh = dsl.cast(dsl.full((1, 1), he - hs, i32), f32)
        kw = dsl.cast(dsl.full((1, 1), we - ws, i32), f32)
        q = v / kh / kw
        for h0 in dsl.range(hs, he, CH):
            for w0 in dsl.range(ws, we, CW):
                z = dsl.zeros((dsl.min(h0 + CH, he) - h0, dsl.min(w0 + CW, we) - w0), f32)
                dsl.atomic_add(gx[p.start, h0:dsl.min(h0 + CH, he), w0:dsl.min(w0 + CW, we)], z + q)


def _out_size(input: Any, output_size: Any) -> tuple[int, int]:
    if isinstance(output_size, int):
        oh = ow = output_size
    else:
        if len(output_size) != 2:
            raise ValueError(f"adaptive_avg_pool2d: output_size must be 2 (or an int), got {output_size!r}")
        if input.dim() <= 2:
            raise ValueError("Input dimension should be at least 3")   # torch's words for a tuple size
        oh, ow = output_size
    H, W = input.shape[-2], input.shape[-1]
    oh = H if oh is None else int(oh)
    ow = W if ow is None else int(ow)
    if oh < 0 or ow < 0:
        raise RuntimeError(f"adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 but "
                           f"received {{{oh}, {ow}}}")
    return oh, ow


def _check_pool(input: Any) -> None:
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"adaptive_avg_pool2d(): argument 'input' must be Tensor, not {type(input).__name__}")
    if input.dtype not in FLOATS:
        raise RuntimeError(f"adaptive_avg_pool2d: dtype {input.dtype} is not supported (float32, float16, bfloat16)")
    if input.dim() < 2:
        r = max(input.dim(), 1)
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got -2)")
    if input.dim() not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(input.shape)}")
    for k in (input.dim() - 2, input.dim() - 1):
        if input.shape[k] == 0:
            raise RuntimeError("adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {list(input.shape)} with dimension {k} being empty")


def _equal_windows(H: int, W: int, oh: int, ow: int) -> bool:
    """Equal disjoint windows of at most 64 taps (pool's avg_pool2d loops over the taps; larger
    windows, e.g. global pooling, go through adaptive_avg_fwd's 2-D window sums)."""
    return bool(oh and ow and H % oh == 0 and W % ow == 0 and (H // oh) * (W // ow) <= 64)


def _chunks(H: int, W: int, oh: int, ow: int) -> tuple[int, int]:
    kw = -(-W // max(ow, 1)) + 1
    cw = min(256, 1 << max(0, kw - 1).bit_length())
    kh = -(-H // max(oh, 1)) + 1
    ch = max(1, min(1 << max(0, kh - 1).bit_length(), 4096 // cw))
    return ch, cw


def adaptive_avg_pool2d(input: Any, output_size: Any) -> Any:
    """torch.nn.functional.adaptive_avg_pool2d(input, output_size) for (N, C, H, W) or (C, H, W)
    input (f32 / f16 / bf16; sums in f32)."""
    _check_pool(input)
    oh, ow = _out_size(input, output_size)
    H, W = input.shape[-2], input.shape[-1]
    lead = list(input.shape[:-2])
    P = math.prod(lead)
    if _equal_windows(H, W, oh, ow) and P:   # equal windows: op_library.pool's avg_pool2d
        k = (H // oh, W // ow)
        return avg_pool2d(input.contiguous().reshape(1, P, H, W), k, k).reshape(lead + [oh, ow])
    y = torch.empty(lead + [oh, ow], dtype=input.dtype)
    if y.numel():
        ch, cw = _chunks(H, W, oh, ow)
        adaptive_avg_fwd(input.contiguous().reshape(P, H, W), y.reshape(P, oh, ow, 1), CH=ch, CW=cw)
    return y


def adaptive_avg_pool2d_backward(grad: Any, input_shape: Sequence[int]) -> Any:
    """Gradient of adaptive_avg_pool2d w.r.t. its input (of input_shape): grad / (kh * kw) spread
    over each window (f32 atomic adds, cast to grad's dtype)."""
    H, W = int(input_shape[-2]), int(input_shape[-1])
    lead = list(input_shape[:-2])
    P = math.prod(lead)
    oh, ow = grad.shape[-2], grad.shape[-1]
    if _equal_windows(H, W, oh, ow) and P:
        k = (H // oh, W // ow)
        return avg_pool2d_backward(grad.contiguous().reshape(1, P, oh, ow), (1, P, H, W), k, k).reshape(
            list(input_shape))
    gx = torch.zeros([P, H, W], dtype=torch.float32)
    if grad.numel() and gx.numel():
        ch, cw = _chunks(H, W, oh, ow)
        adaptive_avg_bwd(grad.contiguous().reshape(P, oh, ow, 1), gx, CH=ch, CW=cw)
    from op_library.data import _cast

    return _cast(gx, grad.dtype).reshape(list(input_shape))
