"""Matrix products on the cube: matmul / mm / bmm / linear, forward and backward.

Every kernel tiles the output into BM x BN blocks dealt over the cores (`dsl.tiles2d`), runs a
K loop that stages A and B windows GM -> L1 -> L0A/L0B and accumulates in L0C, and leaves
through the FIX pipe (casting to the output dtype on the way). Transposed operands are read as
windows of `x.T`: the DMA reads the stored layout and the L1 -> L0 move transposes.

Block sizes follow the shape (`_blocks`, `_bmm_blocks`): edges from 64 to 128 in steps of 16, the
pair whose busiest core has the fewest estimated cycles. Large products keep 128 x 128 (fewest GM
reads); small and skinny ones take narrower blocks so every core gets work (on the timing model:
512^3 f32 -0.20, 8 x 256^3 bmm -0.25, 64 x 4096 x 4096 -0.22, 256^3 -0.64 of the cycles; no shape
tried got slower).

matmul and linear on contiguous CPU tensors keep their host work per signature (dtypes, shapes,
transposes, cores) as a plan (op_library._plan): a later call allocates the result and launches the
same kernel with its argument block marshalled once.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import dsl
from dsl import GM, Const, f32, i8, i32
from op_library._cores import CORES
from op_library._plan import PLANS, Builder, sigs

__all__ = ["matmul", "matmul_backward", "bmm", "bmm_backward", "linear", "linear_backward"]


@dsl.kernel
def mm_kernel(a: GM, b: GM, c: GM, TA: Const[bool] = False, TB: Const[bool] = False,
              BM: Const[int] = 128, BN: Const[int] = 128, BK: Const[int] = 64):
    """c = op(a) @ op(b), op = transpose when TA / TB."""
    M = a.shape[1] if TA else a.shape[0]
    K = a.shape[0] if TA else a.shape[1]
    N = b.shape[0] if TB else b.shape[1]
    for m, n in dsl.tiles2d((M, N), (BM, BN)):
        acc = dsl.zeros((BM, BN), i32 if a.dtype == i8 else f32)
        for k in dsl.range(0, K, BK):
            if TA:
                if TB:
                    acc += a.T[m, k] @ b.T[k, n]
                else:
                    acc += a.T[m, k] @ b[k, n]
            else:
                if TB:
                    acc += a[m, k] @ b.T[k, n]
                else:
                    acc += a[m, k] @ b[k, n]
        c[m, n] = dsl.cast(acc, c.dtype)


@dsl.kernel
def bmm_kernel(a: GM, b: GM, c: GM, TA: Const[bool] = False, TB: Const[bool] = False,
               BM: Const[int] = 128, BN: Const[int] = 128, BK: Const[int] = 64):
    """c[i] = op(a[i]) @ op(b[i]) for every batch i; blocks of all batches are dealt over the cores."""
    M = a.shape[2] if TA else a.shape[1]
    K = a.shape[1] if TA else a.shape[2]
    N = b.shape[1] if TB else b.shape[2]
    for i, m in dsl.tiles2d((a.shape[0], M), (1, BM)):
        for n in dsl.tiles(N, BN):
            acc = dsl.zeros((BM, BN), i32 if a.dtype == i8 else f32)
            for k in dsl.range(0, K, BK):
                if TA:
                    if TB:
                        acc += a.T[i.start, m, k] @ b.T[i.start, k, n]
                    else:
                        acc += a.T[i.start, m, k] @ b[i.start, k, n]
                else:
                    if TB:
                        acc += a[i.start, m, k] @ b.T[i.start, k, n]
                    else:
                        acc += a[i.start, m, k] @ b[i.start, k, n]
            c[i.start, m, n] = dsl.cast(acc, c.dtype)


@dsl.kernel
def linear_kernel(x: GM, w: GM, bias: GM, y: GM, BM: Const[int] = 64, BN: Const[int] = 128,
                  BK: Const[int] = 64):
    """y = x @ w.T + bias (torch.nn.functional.linear): the bias add runs on the vector unit
    (L0C -> UB on FIX, V add, UB -> GM on MTE3)."""
    for m, n in dsl.tiles2d((x.shape[0], w.shape[0]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, x.shape[1], BK):
            acc += x[m, k] @ w.T[k, n]
        y[m, n] = dsl.cast(acc + dsl.cast(bias[n], f32), y.dtype)


@dsl.kernel
def col_sum_kernel(g: GM, out: GM, R: Const[int] = 32, C: Const[int] = 256):
    """out[j] = sum_i g[i, j] (the bias gradient): column blocks over cores, f32 accumulation."""
    for c in dsl.tiles(g.shape[1], C):
        acc = dsl.sum(dsl.cast(g[0:dsl.min(R, g.shape[0]), c], f32), axis=0, keepdims=True)
        for r in dsl.range(R, g.shape[0], R):
            acc = acc + dsl.sum(dsl.cast(g[r, c], f32), axis=0, keepdims=True)
        out[c] = dsl.cast(dsl.sum(acc, axis=0), out.dtype)


def _torch() -> Any:
    import torch

    return torch


_EDGES = (128, 112, 96, 80, 64)   # block edges tried (multiples of 16: whole fractals); 128 x 128 x 64
# fits L0A / L0B / L0C double-buffered for every operand type, and so does every smaller block
_MACS = {1: 8192, 2: 4096, 4: 2048}   # cube MACs per cycle by operand element size (i8, f16 / bf16, f32)


def _block_cycles(bm: int, bn: int, k: int, es: int) -> float:
    """A block's cycles on the default core, roughly: per 64-deep k step the larger of the A and B
    windows' GM -> L1 reads (~105 bytes a cycle from L2, as measured in traces) and the mmad, then
    the FIX pipe writing the f32 / i32 block out (128 bytes a cycle)."""
    steps = -(-k // 64)
    return steps * max((bm + bn) * 64 * es / 105, bm * bn * 64 / _MACS.get(es, 2048)) + bm * bn * 4 / 128


def _pick(cost: Callable[[int, int], float]) -> dict[str, int]:
    """The (BM, BN) of least estimated cost, 128 x 128 on ties (fewest blocks)."""
    bm, bn = min(((m, n) for m in _EDGES for n in _EDGES), key=lambda b: (cost(*b), -b[0] * b[1]))
    return {"BM": bm, "BN": bn, "BK": 64}


def _blocks(m: int, n: int, k: int, es: int = 4, cores: int | None = None) -> dict[str, int]:
    """Block sizes of mm_kernel for an (m, k) @ (k, n) product: the busiest core's blocks times a
    block's estimated cycles, least over the candidate edges. A product with too few 128 x 128
    blocks for the cores takes narrower ones (512^3 f32: 16 blocks of 128 x 128 on 16 of 24 cores ->
    24 of 128 x 96, 9,311 -> 7,460 cycles); a large one keeps 128 x 128 (fewest GM reads)."""
    c = cores or CORES

    def cost(bm: int, bn: int) -> float:
        return -(-(-(-m // bm) * -(-n // bn)) // c) * _block_cycles(bm, bn, k, es)
    return _pick(cost)


def _bmm_blocks(b: int, m: int, n: int, k: int, es: int = 4, cores: int | None = None) -> dict[str, int]:
    """bmm_kernel deals (batch, BM-row strip) pairs over the cores, each strip walking all of N in
    BN blocks: the busiest core's strips times the strip's blocks, least over the candidates."""
    c = cores or CORES

    def cost(bm: int, bn: int) -> float:
        return -(-(b * -(-m // bm)) // c) * -(-n // bn) * _block_cycles(bm, bn, k, es)
    return _pick(cost)


def _check_mm(op: str, named: tuple[tuple[str, Any], ...]) -> None:
    """torch-style dtype checks of a matmul's tensors (the cube kernels take f32, f16, bf16 and i8),
    naming the argument, before any kernel runs."""
    torch = _torch()
    ok = (torch.float32, torch.float16, torch.bfloat16, torch.int8)
    first: tuple[str, Any] | None = None
    for name, t in named:
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}(): argument '{name}' must be a Tensor, not {type(t).__name__}")
        if t.dtype not in ok:
            raise RuntimeError(f"{op}(): argument '{name}' has dtype {t.dtype}; the cube kernels take float32, "
                               f"float16, bfloat16 or int8")
        if first is None:
            first = (name, t)
        elif t.dtype != first[1].dtype:
            raise RuntimeError(f"{op}(): expected {first[0]} and {name} to have the same dtype, but got: "
                               f"{first[1].dtype} != {t.dtype}")


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False, out_dtype: Any = None,
           cores: int | None = None) -> Any:
    """op(a) @ op(b) for 2-D torch tensors (f16, bf16, f32, i8), result in out_dtype (default: a's,
    i32 for i8 inputs)."""
    torch = _torch()
    key = None
    if type(transpose_a) is bool and type(transpose_b) is bool and (cores is None or type(cores) is int) and \
            (out_dtype is None or isinstance(out_dtype, torch.dtype)) and PLANS.enabled():
        s = sigs((a, b))
        if s is not None:
            key = ("matmul", transpose_a, transpose_b, out_dtype, cores, *s)
            plan = PLANS.get(key)
            if plan is not None:
                return plan(a, b)
    _check_mm("matmul", (("a", a), ("b", b)))
    M = a.shape[1] if transpose_a else a.shape[0]
    K = a.shape[0] if transpose_a else a.shape[1]
    K2 = b.shape[1] if transpose_b else b.shape[0]
    N = b.shape[0] if transpose_b else b.shape[1]
    if K != K2:
        raise ValueError(f"matmul: inner dimensions differ ({K} vs {K2})")
    dt = out_dtype or (torch.int32 if a.dtype == torch.int8 else a.dtype)
    if K == 0:   # an empty sum: zeros (mm_kernel has no k block to start its accumulator from)
        return torch.zeros((M, N), dtype=dt)
    bl = Builder(key, (a, b), _THIRD)
    c = bl.v(bl.alloc((M, N), dt), (M, N))
    bl.run(mm_kernel, bl.v(0, a.shape), bl.v(1, b.shape), c, block_dim=cores or None, TA=transpose_a,
           TB=transpose_b, **_blocks(M, N, K, a.element_size(), cores))
    return bl.finish()


_THIRD = operator.itemgetter(2)
_FOURTH = operator.itemgetter(3)


def bmm(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False, cores: int | None = None) -> Any:
    """op(a[i]) @ op(b[i]) for 3-D torch tensors (f16, bf16, f32, i8; i32 result for i8)."""
    torch = _torch()
    _check_mm("bmm", (("a", a), ("b", b)))
    B = a.shape[0]
    M = a.shape[2] if transpose_a else a.shape[1]
    N = b.shape[1] if transpose_b else b.shape[2]
    K = a.shape[1] if transpose_a else a.shape[2]
    if K == 0:   # an empty sum: zeros
        return torch.zeros((B, M, N), dtype=torch.int32 if a.dtype == torch.int8 else a.dtype)
    c = torch.empty((B, M, N), dtype=torch.int32 if a.dtype == torch.int8 else a.dtype)
    launch = bmm_kernel[cores] if cores else bmm_kernel
    launch(a.contiguous(), b.contiguous(), c, TA=transpose_a, TB=transpose_b,
           **_bmm_blocks(B, M, N, K, a.element_size(), cores))
    return c


def linear(x: Any, w: Any, bias: Any = None, cores: int | None = None) -> Any:
    torch = _torch()
    ins = (x, w, bias)
    s = sigs(ins) if (cores is None or type(cores) is int) and PLANS.enabled() else None
    if s is not None:
        key = ("linear", cores, *s)
        plan = PLANS.get(key)
        if plan is not None:
            return plan(*ins)
    _check_mm("linear", (("input", x), ("weight", w), ("bias", bias)))
    if w.dim() != 2 or x.dim() < 1 or x.shape[-1] != w.shape[1]:
        rows, k = (math.prod(x.shape[:-1]), x.shape[-1]) if x.dim() else (1, 1)
        raise RuntimeError(f"linear(): mat1 and mat2 shapes cannot be multiplied ({rows}x{k} and "
                           f"{'x'.join(str(d) for d in reversed(w.shape))})")
    if s is not None:
        if x.dim() >= 1 and x.numel() > 0 and w.dim() == 2:
            return _linear_planned(key, x, w, bias, ins, cores)
    lead = x.shape[:-1]
    x2 = x.reshape(math.prod(lead), x.shape[-1]).contiguous()   # not -1: K may be 0
    if x2.shape[1] == 0:   # an empty sum: the bias (or zeros) in every row
        y = torch.zeros((x2.shape[0], w.shape[0]), dtype=x.dtype) if bias is None else \
            bias.expand(x2.shape[0], w.shape[0]).contiguous()   # no launch: nothing to multiply
    elif bias is None:
        y = matmul(x2, w, transpose_b=True, cores=cores)
    else:
        y = torch.empty((x2.shape[0], w.shape[0]), dtype=x.dtype)
        launch = linear_kernel[cores] if cores else linear_kernel
        launch(x2, w.contiguous(), bias.contiguous(), y)
    return y.reshape(*lead, w.shape[0])


def _linear_planned(key: Any, x: Any, w: Any, bias: Any, ins: tuple[Any, ...], cores: int | None) -> Any:
    """`linear` on contiguous inputs as a plan (the same launch: mm_kernel with w transposed, or
    linear_kernel with a bias); the result is allocated in its final shape."""
    torch = _torch()
    K = x.shape[-1]
    m = x.numel() // K
    N, K2 = w.shape
    bl = Builder(key, ins, _FOURTH)
    if bias is None:
        if K != K2:
            raise ValueError(f"matmul: inner dimensions differ ({K} vs {K2})")
        y = bl.v(bl.alloc((*x.shape[:-1], N), torch.int32 if x.dtype == torch.int8 else x.dtype), (m, N))
        bl.run(mm_kernel, bl.v(0, (m, K)), bl.v(1, (N, K2)), y, block_dim=cores or None, TA=False, TB=True,
               **_blocks(m, N, K, x.element_size(), cores))
    else:
        y = bl.v(bl.alloc((*x.shape[:-1], N), x.dtype), (m, N))
        bl.run(linear_kernel, bl.v(0, (m, K)), bl.v(1, (N, K2)), bl.v(2, tuple(bias.shape)), y,
               block_dim=cores or None)
    return bl.finish()


def matmul_backward(grad: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """For c = a @ b: (grad_a, grad_b) = (grad @ b.T, a.T @ grad)."""
    return matmul(grad, b, transpose_b=True), matmul(a, grad, transpose_a=True)


def bmm_backward(grad: Any, a: Any, b: Any) -> tuple[Any, Any]:
    return bmm(grad, b, transpose_b=True), bmm(a, grad, transpose_a=True)


def linear_backward(grad: Any, x: Any, w: Any, with_bias: bool = True) -> tuple[Any, Any, Any]:
    """For y = x @ w.T + b: grad_x = grad @ w, grad_w = grad.T @ x, grad_b = grad summed over rows."""
    torch = _torch()
    g2 = grad.reshape(-1, grad.shape[-1]).contiguous()
    x2 = x.reshape(g2.shape[0], x.shape[-1]).contiguous()   # not -1: K may be 0
    gx = matmul(g2, w).reshape(x.shape)
    gw = matmul(g2, x2, transpose_a=True)
    gb = None
    if with_bias:
        gb = torch.empty(g2.shape[1], dtype=grad.dtype)
        col_sum_kernel(g2, gb)
    return gx, gw, gb
