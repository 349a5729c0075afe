"""Data movement on the simulated core, with torch's names and signatures: transpose / permute, cat,
stack, index_select, gather, scatter_add, tril / triu, constant pad (F.pad), arange, full, fill_,
each differentiable one with `<op>_backward`. Results are new contiguous tensors; dtypes f32, f16,
bf16, i32, i8 and bool (scatter_add and the backwards: f32 / f16 / bf16 / i32 where torch has them).
Kernels: op_library.data_kernels. The host only validates, makes inputs contiguous, reshapes
(views) and converts int64 indices to int32 after checking their range (torch's IndexError /
RuntimeError texts); `dtype=torch.int64` results (arange, full with an int) are produced as int32
by the kernels and widened on return.

Dataflow.
- permute(x, dims) / transpose: size-1 dims are dropped and input dims that stay neighbours are
  merged, so (B, S, N, D) -> (B, N, S, D) is one step on (A=B, Q=S, B=N, L=D) and a batched 2-D
  transpose one on (A, Q, 1, L). If the last dim stays last, `copy4` moves blocks of rows (strided
  DMA on both sides, no vector work); else `transpose4` moves BQ x BL blocks through the vector
  transpose (x's rows along the dim that becomes y's last). Blocks are dealt over the cores.
- cat / stack: views (outer, d_i * inner) of each input against (outer, sum d_i * inner) of the
  result; one `copy2d` launch per input writes its column band. The backward (split) is copy2d
  the other way round. stack is cat of unsqueezed views.
- index_select: (A, D, B) -> (A, n, B), one window x[a-block, idx[j], c-block] per index (the
  scalar unit reads idx[j]; the DSL bounds-checks it). Backward: atomic adds of the gradient rows
  into an f32 (A, D, B) buffer (index_add), cast to the dtype.
- gather: dim last: rows of x in UB and dsl.gather along the columns (axis=1); dim inside: a
  (D, BC) slab per leading index and dsl.gather along the rows (axis=0). D is taken BD at a time
  with a mask, so any size fits UB. An index shorter than the input in a dim other than `dim`
  reads the input's matching corner (made contiguous first). Backward = scatter_add into zeros.
- scatter_add: the result starts as a copy of input (copy2d), then per block of index elements one
  MTE3 scatter-add picked by the index tile (`dsl.atomic_add(y[a, idx, c], src)`, a burst per
  element: `scatter_add_elems`; f16/bf16 add in f32 and round once per add, as torch's CPU kernel does).
  Its backward: grad for input is grad itself (a copy), for src gather(grad, dim, index).
- tril / triu: (B, M, N) views, a where() against a row-index column. Backward: the same mask.
- pad (constant mode): padding of the last dim or the last two is one `pad2d` launch on (P, H, W)
  views (row blocks: rows outside x filled, the others border-filled and their kept band copied);
  padding further out is one row pad per padded dim d on the view (prod(shape[:d]), prod(shape[d:])):
  fill2d for the borders, copy2d for the kept band (negative pads crop). Backward: the crop (pad
  with the negated widths).
- arange / full / fill_: arange_f (f32 arithmetic, as torch's CPU kernel for float dtypes) or
  arange_i, fill2d / fill2d_int.

Known limits: cat of tensors of different dtypes (torch promotes) raises; F.pad modes other than
'constant' raise NotImplementedError; scatter_add's adds are one burst per element (an index per
element: no row bursts); permutes that merge to more than 8 dims raise.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from op_library import data_kernels as K
from op_library._cores import CORES
from op_library.data_nn import (
    adaptive_avg_pool2d,
    adaptive_avg_pool2d_backward,
    npu_rotary_mul,
    npu_rotary_mul_backward,
)

__all__ = [
    "transpose", "transpose_backward", "permute", "permute_backward", "cat", "cat_backward", "stack",
    "stack_backward", "index_select", "index_select_backward", "gather", "gather_backward", "scatter_add",
    "scatter_add_backward", "tril", "tril_backward", "triu", "triu_backward", "pad", "pad_backward", "arange",
    "full", "fill_", "npu_rotary_mul", "npu_rotary_mul_backward", "adaptive_avg_pool2d",
    "adaptive_avg_pool2d_backward",
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.bool)
FLOATS = (torch.float32, torch.float16, torch.bfloat16)


# helpers -----------------------------------------------------------------------------------------

def _check_dtype(x: Any, name: str, allowed: Sequence[torch.dtype] = DTYPES) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(x).__name__}")
    if x.dtype not in allowed:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported (the kernels take "
                        f"{', '.join(str(d).removeprefix('torch.') for d in allowed)})")


def _wrap_dim(dim: int, rank: int) -> int:
    """torch's dim wrapping (a 0-d tensor takes dims -1 and 0) and its IndexError text."""
    r = max(rank, 1)
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim % r


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _pow2_floor(n: int) -> int:
    """The largest power of two <= n (1 for n < 1)."""
    return 1 << max(0, int(n).bit_length() - 1)


def _blocks(n: int, cap: int) -> int:
    """A power of two block size, no larger than cap nor than n rounded up to a power of two."""
    return max(1, min(cap, _pow2(n)))


def _cols(width: int, esize: int, budget: int = 16384) -> tuple[int, int]:
    """(BR, BC) for a 2-D copy of rows of `width` elements: about `budget` bytes per block."""
    per = max(1, budget // max(esize, 1))
    bc = _blocks(width, per)
    br = max(1, min(64, per // bc))
    return br, bc


def _copy_rows(x2: Any, y2: Any, xo: int, yo: int, n: int) -> None:
    """y2[:, yo:yo + n] = x2[:, xo:xo + n] (2-D views with the same rows)."""
    if n <= 0 or x2.shape[0] == 0:
        return
    es = x2.element_size()
    # 16 KiB blocks, smaller for a small copy so each of the CORES cores gets ~8 (the last block's
    # store, which nothing overlaps, stays short): 1 MiB -> 4 KiB blocks
    br, bc = _cols(n, es, max(2048, min(16384, _pow2_floor(x2.shape[0] * n * es // (8 * CORES)))))
    K.copy2d(x2, y2, xo, yo, n, BR=br, BC=bc)


def _fill_rows(y2: Any, yo: int, n: int, value: Any) -> None:
    """y2[:, yo:yo + n] = value."""
    if n <= 0 or y2.shape[0] == 0:
        return
    br, bc = _cols(n, y2.element_size())
    if y2.dtype.is_floating_point:
        K.fill2d(y2, yo, n, float(value), BR=br, BC=bc)
    else:
        K.fill2d_int(y2, yo, n, int(value), BR=br, BC=bc)


def _cast(x: Any, dtype: torch.dtype) -> Any:
    """x (f32, any shape) as a new tensor of dtype (the cast kernel)."""
    if x.dtype == dtype:
        return x
    y = torch.empty(x.shape, dtype=dtype)
    if x.numel():
        K.cast_kernel(x.reshape(-1), y.reshape(-1))
    return y


def _index32(index: Any, size: int, what: str = "index_select") -> Any:
    """int32 copy of an int32/int64 index tensor after checking 0 <= index < size on the host."""
    if index.numel() and size >= 0:
        lo_t, hi_t = torch.aminmax(index)
        lo, hi = int(lo_t), int(hi_t)
        if lo < 0 or hi >= size:
            raise IndexError("index out of range in self")
    return index.to(torch.int32).contiguous()


# permute / transpose -----------------------------------------------------------------------------

def _plan(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """Merged input dims and the permutation on them (size-1 dims dropped, neighbours merged)."""
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    p = [d for d in perm if shape[d] != 1]
    groups: list[list[int]] = []   # in output order, runs of consecutive input dims
    for d in p:
        if groups and groups[-1][-1] + 1 == d:
            groups[-1].append(d)
        else:
            groups.append([d])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])   # groups in input order
    sizes = [math.prod(shape[d] for d in groups[g]) for g in order]
    pos = {g: i for i, g in enumerate(order)}
    del keep
    return sizes, [pos[g] for g in range(len(groups))]


def _permute_into(x: Any, perm: Sequence[int], y: Any) -> None:
    """y (contiguous, x.permute(perm)'s shape) = x.permute(perm) for contiguous x, by the kernels."""
    if x.numel() == 0:
        return
    d, p = _plan(list(x.shape), perm)
    n = len(d)
    if n <= 1 or p == list(range(n)):
        _copy_rows(x.reshape(1, -1), y.reshape(1, -1), 0, 0, x.numel())
        return
    last = n - 1
    mode_t = p[-1] != last
    q = p[-1] if mode_t else p[-2]
    A, Q, B, L = math.prod(d[:q]), d[q], math.prod(d[q + 1:last]), d[last]
    others = [k for k in p if k not in (q, last)]   # in output order
    if len(others) > 6:
        raise RuntimeError(f"permute: {n} dims after merging neighbours; the kernels take at most 8")
    strides = []
    for k in others:   # k's stride in the flat (A, B) index a * B + b of x viewed (A, Q, B, L)
        strides.append(math.prod(d[k + 1:q]) * B if k < q else math.prod(d[k + 1:last]))
    sizes = [d[k] for k in others]
    pad = 6 - len(others)
    sizes, strides = [1] * pad + sizes, [0] * pad + strides
    x4 = x.reshape(A, Q, B, L)
    args = (*sizes[1:], *strides)
    es = x.element_size()
    if mode_t:
        pl = p.index(last)
        X = math.prod(d[k] for k in p[:pl])
        Y = math.prod(d[k] for k in p[pl + 1:last])
        y4 = y.reshape(X, L, Y, Q)
        bl = _blocks(L, 64)
        bq = _blocks(Q, max(64, min(1024, 4096 // bl)))
        if es == 1:
            bq = min(bq, 512)
        K.transpose4(x4, y4, *args, BQ=bq, BL=bl)
    else:
        X = math.prod(d[k] for k in p[:-2])
        y4 = y.reshape(X, Q, 1, L)
        per = 16384 // es
        bl = _blocks(L, per)
        bq = _blocks(Q, max(1, min(256, per // bl)))
        K.copy4(x4, y4, *args, BQ=bq, BL=bl)


def permute(input: Any, dims: Sequence[int]) -> Any:
    """torch.permute(input, dims) as a new contiguous tensor (the data moved by copy4 / transpose4)."""
    _check_dtype(input, "permute(): input")
    dims = list(dims)
    rank = input.dim()
    if len(dims) != rank:
        raise RuntimeError("permute(sparse_coo): number of dimensions in the tensor input does not match the length "
                           f"of the desired ordering of dimensions i.e. input.dim() = {rank} is not equal to "
                           f"len(dims) = {len(dims)}")
    w = [_wrap_dim(int(k), rank) for k in dims]
    if len(set(w)) != len(w):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    x = input.contiguous()
    y = torch.empty([x.shape[k] for k in w], dtype=x.dtype)
    _permute_into(x, w, y)
    return y


def permute_backward(grad: Any, dims: Sequence[int]) -> Any:
    """Gradient of permute: grad permuted by the inverse permutation."""
    rank = grad.dim()
    w = [_wrap_dim(int(k), rank) for k in dims]
    inv = [0] * rank
    for i, k in enumerate(w):
        inv[k] = i
    return permute(grad, inv)


def transpose(input: Any, dim0: int, dim1: int) -> Any:
    """torch.transpose(input, dim0, dim1) as a new contiguous tensor."""
    _check_dtype(input, "transpose(): input")
    rank = input.dim()
    a, b = _wrap_dim(dim0, rank), _wrap_dim(dim1, rank)
    perm = list(range(rank))
    if rank:
        perm[a], perm[b] = perm[b], perm[a]
    return permute(input, perm)


def transpose_backward(grad: Any, dim0: int, dim1: int) -> Any:
    """Gradient of transpose: the same transpose of grad."""
    return transpose(grad, dim0, dim1)


# cat / stack -------------------------------------------------------------------------------------

def _cat_shapes(tensors: Sequence[Any], dim: int) -> tuple[list[Any], int]:
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"cat(): argument 'tensors' must be tuple of Tensors, not {type(tensors).__name__}")
    if len(tensors) == 0:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        _check_dtype(t, f"cat(): tensors[{i}]")
    # torch skips legacy empty 1-D tensors of shape (0,)
    ts = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)] or [tensors[0]]
    ref = ts[0]
    if ref.dim() == 0:
        raise RuntimeError("zero-dimensional tensor (at position 0) cannot be concatenated")
    d = _wrap_dim(dim, ref.dim())
    for i, t in enumerate(ts):
        if t.dtype != ref.dtype:
            raise RuntimeError(f"cat(): expected all tensors to have the dtype {ref.dtype}, got {t.dtype} for "
                               f"tensor number {i} in the list (the kernels do not promote)")
        if t.dim() != ref.dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.dim()} and {t.dim()}")
        for k in range(ref.dim()):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{ref.shape[k]} but got size {t.shape[k]} for tensor number {i} in the list.")
    return ts, d


def cat(tensors: Sequence[Any], dim: int = 0) -> Any:
    """torch.cat(tensors, dim) (no out=): one copy2d launch per input into its band of the result."""
    ts, d = _cat_shapes(tensors, dim)
    shape = list(ts[0].shape)
    shape[d] = sum(t.shape[d] for t in ts)
    y = torch.empty(shape, dtype=ts[0].dtype)
    outer = math.prod(shape[:d])
    inner = math.prod(shape[d + 1:])
    if y.numel() == 0:
        return y
    y2 = y.reshape(outer, shape[d] * inner)
    off = 0
    for t in ts:
        w = t.shape[d] * inner
        if w:
            _copy_rows(t.contiguous().reshape(outer, w), y2, 0, off, w)
        off += w
    return y


def cat_backward(grad: Any, sizes: Sequence[int], dim: int = 0) -> list[Any]:
    """Gradient of cat: the slices of grad along dim, sizes[i] wide each (copy2d), as new tensors."""
    d = _wrap_dim(dim, grad.dim())
    g = grad.contiguous()
    outer = math.prod(g.shape[:d])
    inner = math.prod(g.shape[d + 1:])
    g2 = g.reshape(outer, g.shape[d] * inner)
    out, off = [], 0
    for s in sizes:
        shape = list(g.shape)
        shape[d] = s
        r = torch.empty(shape, dtype=g.dtype)
        if r.numel():
            _copy_rows(g2, r.reshape(outer, s * inner), off, 0, s * inner)
        off += s * inner
        out.append(r)
    return out


def stack(tensors: Sequence[Any], dim: int = 0) -> Any:
    """torch.stack(tensors, dim) (no out=): cat of the inputs unsqueezed at dim (views)."""
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"stack(): argument 'tensors' must be tuple of Tensors, not {type(tensors).__name__}")
    if len(tensors) == 0:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors):
        _check_dtype(t, f"stack(): tensors[{i}]")
        if t.shape != tensors[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at "
                               f"entry 0 and {list(t.shape)} at entry {i}")
    d = _wrap_dim(dim, tensors[0].dim() + 1)
    return cat([t.unsqueeze(d) for t in tensors], d)


def stack_backward(grad: Any, n: int, dim: int = 0) -> list[Any]:
    """Gradient of stack: the n slices of grad along dim, that dim removed."""
    d = _wrap_dim(dim, grad.dim())
    return [g.squeeze(d) for g in cat_backward(grad, [1] * n, d)]


# index_select / gather / scatter_add ---------------------------------------------------------------

def _check_index(index: Any, fn: str) -> None:
    if not isinstance(index, torch.Tensor):
        raise TypeError(f"{fn}(): argument 'index' must be Tensor, not {type(index).__name__}")
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"{fn}(): Expected dtype int32/int64 for index")


def index_select(input: Any, dim: int, index: Any) -> Any:
    """torch.index_select(input, dim, index) (no out=): one window per index (index_rows)."""
    _check_dtype(input, "index_select(): input")
    _check_index(index, "index_select")
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    d = _wrap_dim(dim, input.dim())
    x = input.contiguous()
    shape = list(x.shape) if x.dim() else [1]
    D = shape[d]
    idx = _index32(index.reshape(-1), D)
    n = idx.numel()
    out_shape = list(shape)
    out_shape[d] = n
    y = torch.empty(out_shape if input.dim() else list(index.shape), dtype=x.dtype)
    if y.numel() == 0:
        return y
    A, B = math.prod(shape[:d]), math.prod(shape[d + 1:])
    bb = _blocks(B, 16384 // x.element_size())
    ba = _blocks(A, max(1, min(64, 16384 // x.element_size() // bb)))
    K.index_rows(x.reshape(A, D, B), idx, y.reshape(A, n, B), BA=ba, BB=bb, SPLIT=int(B > bb))
    return y


def index_select_backward(grad: Any, input_shape: Sequence[int], dim: int, index: Any) -> Any:
    """Gradient of index_select: grad's slices added into zeros at the indices (index_add, atomic
    adds into an f32 buffer, then cast to grad's dtype)."""
    shape = list(input_shape) if len(input_shape) else [1]
    d = _wrap_dim(dim, len(input_shape))
    D = shape[d]
    idx = _index32(index.reshape(-1), D)
    n = idx.numel()
    gx = torch.zeros(shape, dtype=torch.float32)
    A, B = math.prod(shape[:d]), math.prod(shape[d + 1:])
    if n and gx.numel():
        g = grad.contiguous().reshape(A, n, B)
        bb = _blocks(B, 4096)
        ba = _blocks(A, max(1, min(64, 4096 // bb)))
        K.index_add_rows(g, idx, gx.reshape(A, D, B), BA=ba, BB=bb)
    return _cast(gx, grad.dtype).reshape(list(input_shape))


def _gather_views(input: Any, dim: int, index: Any, fn: str) -> tuple[Any, Any, int]:
    """(x, idx32, d) with x the part of input index covers in the dims other than d (contiguous)."""
    _check_index(index, fn)
    if index.dim() != input.dim() and not (index.dim() <= 1 and input.dim() <= 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    d = _wrap_dim(dim, input.dim())
    xs = list(input.shape) if input.dim() else [1]
    ish = list(index.shape) if index.dim() else [1]
    for k in range(len(xs)):
        if k != d and ish[k] > xs[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected index {list(index.shape)} to be "
                               f"no larger than self {list(input.shape)} apart from dimension {d}")
    if index.numel():
        lo_t, hi_t = torch.aminmax(index)
        lo, hi = int(lo_t), int(hi_t)
        if lo < 0 or hi >= xs[d]:
            bad = lo if lo < 0 else hi
            raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size {xs[d]}")
    x = input.reshape(xs)
    return _corner(x, [xs[d] if k == d else ish[k] for k in range(len(xs))]), \
        index.reshape(ish).to(torch.int32).contiguous(), d


def _corner(x: Any, shape: Sequence[int]) -> Any:
    """x[:shape[0], :shape[1], ...] as a new contiguous tensor (a crop by the pad kernels), or x
    itself (contiguous) when it already has that shape."""
    if list(x.shape) == list(shape):
        return x.contiguous()
    widths: list[int] = []
    for k in range(x.dim() - 1, -1, -1):
        widths += [0, int(shape[k]) - int(x.shape[k])]
    return pad(x, widths)


def gather(input: Any, dim: int, index: Any) -> Any:
    """torch.gather(input, dim, index) (no sparse_grad / out=): dsl.gather on UB tiles."""
    _check_dtype(input, "gather(): input", (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8))
    x, idx, d = _gather_views(input, dim, index, "gather")
    y = torch.empty(index.shape, dtype=input.dtype)
    if y.numel() == 0:
        return y
    sh = list(x.shape)
    A, D, B = math.prod(sh[:d]), sh[d], math.prod(sh[d + 1:])
    n = idx.shape[d]
    es = x.element_size()
    if B == 1:   # whole index rows and whole x rows where they fit, so x is read once
        bn = _blocks(n, 2048)
        bd = _blocks(D, 16384 // es)
        cap = max(1, min(16384 // (bd * es), 4096 // bn))
        br = _blocks(A, _pow2_floor(cap))
        K.gather_last(x.reshape(A, D), idx.reshape(A, n), y.reshape(A, n), BR=br, BN=bn, BD=bd, SPLIT=int(D > bd))
    else:
        bc = _blocks(B, 128 if es >= 4 else 256)
        bn = _blocks(n, max(1, 2048 // bc))
        bd = _blocks(D, max(8, 4096 // bc))
        K.gather_mid(x.reshape(A, D, B), idx.reshape(A, n, B), y.reshape(A, n, B), BN=bn, BC=bc, BD=bd)
    return y


def _scatter_into(y: Any, d: int, idx: Any, src: Any) -> None:
    """y (contiguous) += scatter of src (idx's shape) along d (atomic adds)."""
    if idx.numel() == 0:
        return
    sh = list(idx.shape)
    A, n, B = math.prod(sh[:d]), sh[d], math.prod(sh[d + 1:])
    ys = list(y.shape)
    if ys[:d] != sh[:d] or ys[d + 1:] != sh[d + 1:]:
        raise AssertionError("scatter target must match the index outside dim (sliced by the caller)")
    bc = max(2, _blocks(B, 256))   # a step > 1: c is a window of columns, never a scalar
    whole = int(B <= bc)
    # about 4096 elements a block, but at least ~4 blocks a core so loads overlap the adds
    per = max(1, min(4096, _pow2_floor(A * n * B // (4 * CORES))) // bc) if whole else max(1, 4096 // bc)
    bj = _blocks(n, per)
    K.scatter_add_elems(idx.reshape(A, n, B), src.reshape(A, n, B), y.reshape(A, ys[d], B), BJ=bj, BC=bc,
                        WHOLE=whole)


def scatter_add(input: Any, dim: int, index: Any, src: Any) -> Any:
    """torch.scatter_add(input, dim, index, src): a copy of input, then one atomic add per element of
    src (the part index covers). f16 / bf16 accumulate in an f32 copy and round once at the end; an
    index smaller than input outside `dim` is padded with index 0 and src with zeros (adding 0)."""
    _check_dtype(input, "scatter_add(): input", (torch.float32, torch.float16, torch.bfloat16, torch.int32))
    _check_dtype(src, "scatter_add(): src", (input.dtype,))
    _check_index(index, "scatter_add")
    if index.dim() != input.dim() or src.dim() != input.dim():
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    d = _wrap_dim(dim, input.dim())
    for k in range(input.dim()):
        if index.shape[k] > src.shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected index {list(index.shape)} to be "
                               f"no larger than src {list(src.shape)}")
        if k != d and index.shape[k] > input.shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected index {list(index.shape)} to be "
                               f"no larger than self {list(input.shape)} apart from dimension {d}")
    xs = list(input.shape) if input.dim() else [1]
    if index.numel():
        lo_t, hi_t = torch.aminmax(index)
        lo, hi = int(lo_t), int(hi_t)
        if lo < 0 or hi >= xs[d]:
            bad = lo if lo < 0 else hi
            raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size {xs[d]}")
    acc_dt = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    y = torch.empty(input.shape, dtype=acc_dt)
    if y.numel():
        if acc_dt == input.dtype:
            _copy_rows(input.contiguous().reshape(1, -1), y.reshape(1, -1), 0, 0, y.numel())
        else:
            K.cast_kernel(input.contiguous().reshape(-1), y.reshape(-1))
    if index.numel():
        ish = list(index.shape) if index.dim() else [1]
        s = _corner(src.reshape(list(src.shape) if src.dim() else [1]), ish)
        if acc_dt != s.dtype:
            s = _cast_any(s, acc_dt)
        idx = index.reshape(ish).to(torch.int32).contiguous()
        full_ = [xs[k] if k != d else ish[k] for k in range(len(xs))]
        if full_ != ish:   # index 0 with src 0 adds nothing
            idx, s = _corner(idx, full_), _corner(s, full_)
        _scatter_into(y.reshape(xs), d, idx, s)
    return _cast(y, input.dtype)


def scatter_add_backward(grad: Any, dim: int, index: Any, src_shape: Sequence[int]) -> tuple[Any, Any]:
    """Gradients of scatter_add: for input grad itself (copied), for src gather(grad, dim, index)
    padded with zeros to src's shape where index is smaller."""
    gin = torch.empty(grad.shape, dtype=grad.dtype)
    if grad.numel():
        _copy_rows(grad.contiguous().reshape(1, -1), gin.reshape(1, -1), 0, 0, grad.numel())
    gs = gather(grad, dim, index)
    if list(gs.shape) != list(src_shape):   # src beyond index's extent gets no gradient: zeros
        gs = _corner(gs, src_shape)
    return gin, gs


def gather_backward(grad: Any, input_shape: Sequence[int], dim: int, index: Any) -> Any:
    """Gradient of gather: grad scatter-added into zeros of input's shape (f32 atomics, then cast)."""
    acc = torch.zeros(list(input_shape), dtype=torch.float32)
    if grad.numel():
        g32 = grad if grad.dtype == torch.float32 else _cast_any(grad, torch.float32)
        acc = scatter_add(acc, dim, index, g32)
    return _cast(acc, grad.dtype)


def _cast_any(x: Any, dtype: torch.dtype) -> Any:
    y = torch.empty(x.shape, dtype=dtype)
    if x.numel():
        K.cast_kernel(x.contiguous().reshape(-1), y.reshape(-1))
    return y


# tril / triu -------------------------------------------------------------------------------------

_IOTA: dict[int, Any] = {}


def _iota_col(n: int) -> Any:
    if n not in _IOTA:
        _IOTA[n] = torch.arange(n, dtype=torch.int32).reshape(n, 1)
    return _IOTA[n]


def _tri(input: Any, diagonal: int, upper: bool) -> Any:
    name = "triu" if upper else "tril"
    _check_dtype(input, f"{name}(): input")
    if input.dim() < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    x = input.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype)
    if y.numel() == 0:
        return y
    M, N = x.shape[-2], x.shape[-1]
    x3, y3 = x.reshape(-1, M, N), y.reshape(-1, M, N)
    split = _pow2(N) * x.element_size() > 16384   # rows up to 16 KiB move whole (no inner loop)
    bc = _blocks(N, 4096 // max(1, x.element_size()) * 2) if split else _pow2(N)
    br = _blocks(M, max(1, min(64, 8192 // bc)))
    K.tri_kernel(x3, y3, _iota_col(br), int(diagonal), UPPER=int(upper), BR=br, BC=bc, SPLIT=int(split))
    return y


def tril(input: Any, diagonal: int = 0) -> Any:
    """torch.tril(input, diagonal) (no out=)."""
    return _tri(input, diagonal, False)


def triu(input: Any, diagonal: int = 0) -> Any:
    """torch.triu(input, diagonal) (no out=)."""
    return _tri(input, diagonal, True)


def tril_backward(grad: Any, diagonal: int = 0) -> Any:
    """Gradient of tril: tril of grad."""
    return tril(grad, diagonal)


def triu_backward(grad: Any, diagonal: int = 0) -> Any:
    """Gradient of triu: triu of grad."""
    return triu(grad, diagonal)


# constant pad ------------------------------------------------------------------------------------

def pad(input: Any, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Any:
    """torch.nn.functional.pad(input, pad, mode='constant', value) (constant mode only; negative
    widths crop): one row pad per padded dim (fill2d for borders, copy2d for the kept band)."""
    _check_dtype(input, "pad(): input")
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r} is not supported by the op library (only 'constant')")
    pads = [int(p) for p in pad]
    if len(pads) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pads) // 2 > input.dim():
        raise RuntimeError("Padding length should be less than or equal to two times the input dimension but got "
                           f"padding length {len(pads)} and input of dimension {input.dim()}")
    shape = list(input.shape)
    out_shape = list(shape)
    for i in range(len(pads) // 2):
        d = input.dim() - 1 - i
        out_shape[d] = shape[d] + pads[2 * i] + pads[2 * i + 1]
        if out_shape[d] < 0:
            raise RuntimeError("narrow(): length must be non-negative.")   # torch's words (it crops by narrow)
    v = 0 if value is None else value
    cur = input.contiguous()
    dims = [input.dim() - 1 - i for i in range(len(pads) // 2) if pads[2 * i] or pads[2 * i + 1]]
    if not dims:
        y = torch.empty(shape, dtype=input.dtype)
        if y.numel():
            _copy_rows(cur.reshape(1, -1), y.reshape(1, -1), 0, 0, y.numel())
        return y
    if min(dims) >= input.dim() - 2:   # only the last one or two dims: one pad2d pass
        return _pad_last2(cur, out_shape, pads, v)
    for d in sorted(dims):   # outermost first: later passes work on the smaller inner rows
        i = input.dim() - 1 - d
        pl, pr = pads[2 * i], pads[2 * i + 1]
        new_shape = list(cur.shape)
        new_shape[d] = out_shape[d]
        y = torch.empty(new_shape, dtype=input.dtype)
        if y.numel():
            outer = math.prod(new_shape[:d])
            inner = math.prod(new_shape[d + 1:])
            src_w = cur.shape[d] * inner
            x2 = cur.reshape(outer, src_w)
            y2 = y.reshape(outer, out_shape[d] * inner)
            keep_lo, keep_hi = max(-pl, 0), cur.shape[d] - max(-pr, 0)   # the kept rows of dim d
            kept = max(0, keep_hi - keep_lo)
            dst0 = max(pl, 0)
            _fill_rows(y2, 0, dst0 * inner, v)
            _copy_rows(x2, y2, keep_lo * inner, dst0 * inner, kept * inner)
            _fill_rows(y2, (dst0 + kept) * inner, (out_shape[d] - dst0 - kept) * inner, v)
        cur = y
    return cur



def _pad_last2(x: Any, out_shape: list[int], pads: list[int], value: Any) -> Any:
    """pad of the last dim, or the last two, as one pad2d launch on (P, H, W) -> (P, OH, OW) views."""
    y = torch.empty(out_shape, dtype=x.dtype)
    if y.numel() == 0:
        return y
    W, OW = x.shape[-1], out_shape[-1]
    if x.dim() >= 2 and len(pads) >= 4:
        H, OH, top = x.shape[-2], out_shape[-2], pads[2]
    else:   # the last dim only: every leading row is a row of one plane
        H, OH, top = max(1, math.prod(x.shape[:-1])), max(1, math.prod(out_shape[:-1])), 0
    P = x.numel() // max(H * W, 1) if x.numel() else y.numel() // (OH * OW)
    br, bc = _cols(OW, x.element_size())
    fl = x.dtype.is_floating_point
    K.pad2d(x.reshape(P, H, W), y.reshape(P, OH, OW), top, pads[0], float(value) if fl else 0.0,
            0 if fl else int(value), FLOAT=int(fl), BR=br, BC=bc, SPLIT=int(OW > bc))
    return y

def pad_backward(grad: Any, pad_: Sequence[int]) -> Any:
    """Gradient of constant pad: grad cropped back (pad with the negated widths)."""
    return pad(grad, [-int(p) for p in pad_])


# arange / full / fill_ ---------------------------------------------------------------------------

def _launch_arange(y: Any, start: Any, step: Any) -> None:
    if y.numel() == 0:
        return
    if y.dtype.is_floating_point:
        K.arange_f(y, float(start), float(step))
    else:
        K.arange_i(y, int(start), int(step))


def arange(start: Any = 0, end: Any = None, step: Any = 1, *, dtype: torch.dtype | None = None) -> Any:
    """torch.arange(start, end, step, dtype=) (no out= / layout / device): arange(end) or
    arange(start, end, step). Integer results are computed in int32 (int64 results widened)."""
    if end is None:
        start, end = 0, start
    vals = [start, end, step]
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if dtype is None:
        dtype = torch.get_default_dtype() if any(isinstance(v, float) for v in vals) else torch.int64
    n = math.ceil((end - start) / step) if (end - start) != 0 else 0
    if n < 0 or (end > start and step < 0) or (end < start and step > 0):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    kdt = torch.int32 if dtype == torch.int64 else dtype
    _check_dtype(torch.empty(0, dtype=kdt), "arange(): dtype", DTYPES[:-1])
    if kdt in (torch.int32, torch.int8) and max(abs(int(start)), abs(int(start + step * n))) >= 2 ** 31:
        raise RuntimeError("arange: values outside int32 are not supported by the kernels")
    y = torch.empty(int(n), dtype=kdt)
    _launch_arange(y, start, step)
    return y.to(torch.int64) if dtype == torch.int64 else y


def _fill_flat(y: Any, value: Any) -> None:
    if y.numel():
        _fill_rows(y.reshape(1, -1), 0, y.numel(), value)


def full(size: Sequence[int], fill_value: Any, *, dtype: torch.dtype | None = None) -> Any:
    """torch.full(size, fill_value, dtype=) (no out= / layout / device). Without dtype: bool for a
    bool value, int64 for an int (filled in int32, widened), else the default float dtype."""
    if dtype is None:
        dtype = torch.bool if isinstance(fill_value, bool) else \
            torch.int64 if isinstance(fill_value, int) else torch.get_default_dtype()
    kdt = torch.int32 if dtype == torch.int64 else dtype
    y = torch.empty(list(size), dtype=kdt)
    _check_dtype(y, "full(): dtype")
    _fill_flat(y, fill_value)
    return y.to(torch.int64) if dtype == torch.int64 else y


def fill_(input: Any, value: Any) -> Any:
    """torch.fill_(input, value): every element of input set to value in place (input contiguous)."""
    _check_dtype(input, "fill_(): input")
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError("fill_ only supports 0-dimension value tensor but got tensor with "
                               f"{value.dim()} dimensions.")
        value = value.item()
    if not input.is_contiguous():
        raise RuntimeError("fill_(): the op library fills contiguous tensors only")
    _fill_flat(input, value)
    return input
