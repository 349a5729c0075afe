"""Registry entries (op_library.registry) for op_library.data: transpose, permute, cat, stack,
index_select, gather, scatter_add, tril, triu, pad (constant), arange, full, fill_, npu_rotary_mul,
adaptive_avg_pool2d.

Data movement is exact, so most cases have k=1; k counts the terms a backward (or scatter_add)
adds into one element (repeated indices, broadcast reductions, overlapping pool windows). cat and
stack take their tensors as three positional arguments here (`_cat3`, `_stack3`), so that the
matrix can differentiate each of them; the op itself takes a list like torch.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

import op_library.data as D
from op_library.registry import FLOATS, INTS, Case, OpSpec, register

ALL = FLOATS + INTS + (torch.bool,)
Args = tuple[Any, ...]


def _t(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """Random values of dtype: normal floats, small ints, random bools."""
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-100, 100, shape, dtype=torch.int32).to(dtype)


def _special(x: torch.Tensor) -> torch.Tensor:
    """x with NaN, +inf and -inf in its first elements (floating dtypes; others unchanged)."""
    if x.dtype.is_floating_point and x.numel() >= 3:
        f = x.reshape(-1)
        f[0], f[1], f[2] = float("nan"), float("inf"), float("-inf")
    return x


def _nc(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """A non-contiguous tensor of `shape` (a transposed view of the last two dims)."""
    return _t(*shape[:-2], shape[-1], shape[-2], dtype=dtype).transpose(-1, -2)


# transpose / permute ------------------------------------------------------------------------------

def _transpose_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    c = [Case((_special(_t(37, 70, dtype=dt)), 0, 1), label="37x70 (0, 1) NaN/inf"),
         Case((_t(3, 37, 5, 33, dtype=dt), 1, -1), label="3x37x5x33 (1, -1)"),
         Case((_t(4, 1, 9, dtype=dt), 0, 2), label="4x1x9 (0, 2) size 1"),
         Case((_t(0, 5, 3, dtype=dt), 0, 1), label="0x5x3 size 0"),
         Case((_nc(5, 37, 20, dtype=dt), -2, -1), label="5x37x20 non-contiguous (-2, -1)"),
         Case((_t(2, 3, 7, dtype=dt), 0, 1), label="2x3x7 (0, 1) rows move")]
    if not quick:
        c += [Case((_t(1025, 1000, dtype=dt), 1, 0), label="1025x1000"),
              Case((_t(7, dtype=dt), 0, 0), label="1-D"),
              Case((_t(4096, 4096, dtype=dt), 0, 1), label="4096x4096", large=True)]
    return c


def _permute_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    c = [Case((_t(2, 37, 3, 20, dtype=dt), (0, 2, 1, 3)), label="BSND->BNSD 2x37x3x20"),
         Case((_special(_t(3, 37, 5, 6, dtype=dt)), (3, 2, 1, 0)), label="3x37x5x6 reversed, NaN/inf"),
         Case((_t(2, 3, 4, 5, 6, dtype=dt), (2, 0, 4, 1, 3)), label="5-D (2, 0, 4, 1, 3)"),
         Case((_t(1, 9, 1, 33, dtype=dt), (3, 0, 2, 1)), label="size-1 dims"),
         Case((_t(3, 0, 4, dtype=dt), (2, 1, 0)), label="size 0"),
         Case((_nc(3, 5, 37, dtype=dt), (-1, 0, 1)), label="non-contiguous, negative dims")]
    if not quick:
        c += [Case((_t(2, 3, 4, 5, 6, 7, 2, 3, dtype=dt), (7, 1, 5, 3, 0, 6, 2, 4)), label="8-D"),
              Case((_t(4, 1024, 8, 64, dtype=dt), (0, 2, 1, 3)), label="4x1024x8x64 BSND->BNSD", large=True)]
    return c


register(OpSpec("transpose", D.transpose, torch.transpose, ALL, _transpose_cases,
                lambda g, out, a, kw: (D.transpose_backward(g, a[1], a[2]),), (0,)))
register(OpSpec("permute", D.permute, torch.permute, ALL, _permute_cases,
                lambda g, out, a, kw: (D.permute_backward(g, a[1]),), (0,)))


# cat / stack --------------------------------------------------------------------------------------

def _cat3(a: Any, b: Any, c: Any, dim: int = 0) -> Any:
    return D.cat([a, b, c], dim)


def _cat3_ref(a: Any, b: Any, c: Any, dim: int = 0) -> Any:
    return torch.cat([a, b, c], dim)


def _stack3(a: Any, b: Any, c: Any, dim: int = 0) -> Any:
    return D.stack([a, b, c], dim)


def _stack3_ref(a: Any, b: Any, c: Any, dim: int = 0) -> Any:
    return torch.stack([a, b, c], dim)


def _cat_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    c = [Case((_t(5, 37, dtype=dt), _t(3, 37, dtype=dt), _special(_t(1, 37, dtype=dt))), {"dim": 0}, label="dim 0"),
         Case((_t(4, 3, 5, dtype=dt), _t(4, 7, 5, dtype=dt), _t(4, 1, 5, dtype=dt)), {"dim": 1}, label="dim 1"),
         Case((_t(3, 33, dtype=dt), _t(3, 0, dtype=dt), _nc(3, 70, dtype=dt)), {"dim": -1},
              label="dim -1, a size-0 part, non-contiguous"),
         Case((_t(1, 1, dtype=dt), _t(1, 1, dtype=dt), _t(1, 1, dtype=dt)), {"dim": 1}, label="1x1")]
    if not quick:
        c += [Case((_t(2, 1025, dtype=dt), _t(2, 1000, dtype=dt), _t(2, 3, dtype=dt)), {"dim": 1}, label="tails"),
              Case((_t(1024, 4096, dtype=dt), _t(1024, 4096, dtype=dt), _t(1024, 4096, dtype=dt)), {"dim": 0},
                   label="3 x 1024x4096 dim 0", large=True)]
    return c


def _stack_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    c = [Case((_t(5, 37, dtype=dt), _t(5, 37, dtype=dt), _special(_t(5, 37, dtype=dt))), {"dim": 0}, label="dim 0"),
         Case((_t(4, 3, dtype=dt), _t(4, 3, dtype=dt), _t(4, 3, dtype=dt)), {"dim": -1}, label="dim -1"),
         Case((_t(2, 0, dtype=dt), _t(2, 0, dtype=dt), _t(2, 0, dtype=dt)), {"dim": 1}, label="size 0"),
         Case((_nc(3, 9, dtype=dt), _t(3, 9, dtype=dt), _t(3, 9, dtype=dt)), {"dim": 1}, label="non-contiguous")]
    if not quick:
        c += [Case((_t(1024, 4096, dtype=dt), _t(1024, 4096, dtype=dt), _t(1024, 4096, dtype=dt)), {"dim": 1},
                   label="3 x 1024x4096 dim 1", large=True)]
    return c


def _cat_bwd(g: Any, out: Any, a: Args, kw: dict[str, Any]) -> Sequence[Any]:
    d = kw.get("dim", 0) % a[0].dim()
    return D.cat_backward(g, [t.shape[d] for t in a], d)


register(OpSpec("cat", _cat3, _cat3_ref, ALL, _cat_cases, _cat_bwd, (0, 1, 2)))
register(OpSpec("stack", _stack3, _stack3_ref, ALL, _stack_cases,
                lambda g, out, a, kw: D.stack_backward(g, 3, kw.get("dim", 0)), (0, 1, 2)))


# index_select / gather / scatter_add ----------------------------------------------------------------

def _idx(n: int, size: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, size, shape or (n,), dtype=torch.int64)


def _index_select_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    c = [Case((_special(_t(37, 20, dtype=dt)), 0, _idx(45, 37)), label="dim 0, repeats", k=8),
         Case((_t(3, 37, 5, dtype=dt), 1, _idx(9, 37)), label="dim 1", k=9),
         Case((_t(3, 5, 70, dtype=dt), -1, _idx(33, 70).to(torch.int32)), label="dim -1, int32 index", k=33),
         Case((_t(4, 5, dtype=dt), 0, _idx(0, 4)), label="empty index"),
         Case((_nc(9, 6, dtype=dt), 1, torch.tensor([5])), label="non-contiguous, one index")]
    if not quick:
        c += [Case((_t(8192, 1024, dtype=dt), 0, _idx(4096, 8192)), label="8192x1024 rows by 4096 indices", k=8,
                   large=True)]
    return c


def _gather_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    c = [Case((_special(_t(37, 20, dtype=dt)), 1, _idx(0, 20, 37, 7)), label="dim 1 (last)", k=7),
         Case((_t(37, 20, dtype=dt), 0, _idx(0, 37, 45, 20)), label="dim 0", k=45),
         Case((_t(3, 37, 5, dtype=dt), -2, _idx(0, 37, 2, 9, 4)), label="dim -2, index smaller", k=9),
         Case((_t(2, 1300, dtype=dt), 1, _idx(0, 1300, 2, 40)), label="long rows (chunks of the gathered dim)", k=40),
         Case((_nc(9, 6, dtype=dt), 0, _idx(0, 9, 1, 1)), label="non-contiguous, 1x1 index"),
         Case((_t(4, 5, dtype=dt), 1, _idx(0, 5, 4, 0)), label="empty index")]
    if not quick:
        c += [Case((_t(4096, 4096, dtype=dt), 1, _idx(0, 4096, 4096, 1024)), label="4096x4096 by 4096x1024",
                   k=8, large=True)]
    return c


def _scatter_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    c = [Case((_t(37, 20, dtype=dt), 0, _idx(0, 37, 45, 20), _t(45, 20, dtype=dt)), label="dim 0", k=8),
         Case((_t(5, 37, dtype=dt), -1, _idx(0, 37, 5, 70), _t(5, 70, dtype=dt)), label="dim -1", k=10),
         Case((_t(3, 9, 4, dtype=dt), 1, _idx(0, 9, 3, 5, 2), _t(3, 5, 2, dtype=dt)),
              label="dim 1, index smaller than self", k=5),
         Case((_nc(4, 5, dtype=dt), 1, _idx(0, 5, 4, 0), _t(4, 0, dtype=dt)), label="non-contiguous, empty index")]
    # (src larger than index is tested in tests/op_library/test_data.py: torch's own autograd of
    # scatter_add returns src's gradient in index's shape there, so the matrix cannot check it)
    if not quick:
        c += [Case((_t(1024, 256, dtype=dt), 0, _idx(0, 1024, 1024, 256), _t(1024, 256, dtype=dt)),
                   label="1024x256", k=8, large=True)]
    return c


register(OpSpec("index_select", D.index_select, torch.index_select, ALL, _index_select_cases,
                lambda g, out, a, kw: (D.index_select_backward(g, a[0].shape, a[1], a[2]),), (0,)))
register(OpSpec("gather", D.gather, torch.gather, FLOATS + INTS, _gather_cases,
                lambda g, out, a, kw: (D.gather_backward(g, a[0].shape, a[1], a[2]),), (0,)))
register(OpSpec("scatter_add", D.scatter_add, torch.scatter_add, FLOATS + (torch.int32,), _scatter_cases,
                lambda g, out, a, kw: D.scatter_add_backward(g, a[1], a[2], a[3].shape), (0, 3)))


# tril / triu ------------------------------------------------------------------------------------

def _tri_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    c = [Case((_special(_t(37, 70, dtype=dt)), 0), label="37x70 NaN/inf"),
         Case((_t(2, 33, 20, dtype=dt), 3), label="batched, diagonal 3"),
         Case((_t(20, 33, dtype=dt), -5), label="diagonal -5"),
         Case((_t(1, 1, dtype=dt), 0), label="1x1"),
         Case((_t(0, 4, dtype=dt), 0), label="0x4"),
         Case((_nc(3, 45, 37, dtype=dt), 1), label="non-contiguous")]
    if not quick:
        c += [Case((_t(1025, 1100, dtype=dt), 40), label="1025x1100"),
              Case((_t(4096, 4096, dtype=dt), 0), label="4096x4096", large=True)]
    return c


register(OpSpec("tril", D.tril, torch.tril, ALL, _tri_cases,
                lambda g, out, a, kw: (D.tril_backward(g, *a[1:]),), (0,)))
register(OpSpec("triu", D.triu, torch.triu, ALL, _tri_cases,
                lambda g, out, a, kw: (D.triu_backward(g, *a[1:]),), (0,)))


# pad --------------------------------------------------------------------------------------------

def _pad_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    v = True if dt == torch.bool else 3 if not dt.is_floating_point else 2.5
    c = [Case((_special(_t(37, 70, dtype=dt)), (1, 2)), label="last dim"),
         Case((_t(2, 3, 9, 7, dtype=dt), (1, 1, 2, 0)), {"value": v}, label="last two dims, value"),
         Case((_t(3, 9, 7, dtype=dt), (-1, 2, 0, 0, 1, -2)), label="three dims, negative (crop)"),
         Case((_t(1, 1, dtype=dt), (0, 0)), label="zero widths"),
         Case((_t(0, 5, dtype=dt), (1, 1, 2, 2)), label="size 0"),
         Case((_nc(4, 9, 5, dtype=dt), (3, 0)), label="non-contiguous")]
    if not quick:
        c += [Case((_t(8, 64, 112, 112, dtype=dt), (1, 1, 1, 1)), label="8x64x112x112 (1, 1, 1, 1)", large=True)]
    return c


register(OpSpec("pad", D.pad, F.pad, ALL, _pad_cases,
                lambda g, out, a, kw: (D.pad_backward(g, a[1]),), (0,)))


# arange / full / fill_ ----------------------------------------------------------------------------

def _arange_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    if dt.is_floating_point:
        c = [Case((0.5, 37.2, 0.7), {"dtype": dt}, label="0.5..37.2 step 0.7"),
             Case((10.0, -3.0, -1.5), {"dtype": dt}, label="negative step"),
             Case((0, 1), {"dtype": dt}, label="one element"), Case((3, 3), {"dtype": dt}, label="empty")]
        big = (0.0, 4096.0 * 4096.0 / 1024, 1.0 / 1024)
    else:
        c = [Case((5, 1000, 3), {"dtype": dt}, label="5..1000 step 3") if dt != torch.int8 else
             Case((-100, 120, 3), {"dtype": dt}, label="-100..120 step 3"),
             Case((7, -9, -2), {"dtype": dt}, label="negative step"),
             Case((0, 1), {"dtype": dt}, label="one element"), Case((3, 3), {"dtype": dt}, label="empty")]
        big = (0, 4096 * 4096, 1) if dt != torch.int8 else (-128, 127, 1)
    if not quick:
        c.append(Case(big, {"dtype": dt}, label="16M elements" if dt != torch.int8 else "i8 range", large=True))
    return c


def _full_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    v = True if dt == torch.bool else -7 if not dt.is_floating_point else 1.5
    c = [Case(((37, 70), v), {"dtype": dt}, label="37x70"), Case(((0, 3), v), {"dtype": dt}, label="0x3"),
         Case(((1,), v), {"dtype": dt}, label="1")]
    if dt.is_floating_point:
        c.append(Case(((5, 3), float("nan")), {"dtype": dt}, label="NaN"))
    if not quick:
        c.append(Case(((4096, 4096), v), {"dtype": dt}, label="4096x4096", large=True))
    return c


def _fill_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    v = False if dt == torch.bool else 9 if not dt.is_floating_point else -0.25
    c = [Case((_t(37, 70, dtype=dt), v), label="37x70"), Case((_t(0, 3, dtype=dt), v), label="0x3"),
         Case((_t(1, dtype=dt), v), label="1")]
    if dt.is_floating_point:
        c.append(Case((_t(5, 3, dtype=dt), float("-inf")), label="-inf"))
    if not quick:
        c.append(Case((_t(4096, 4096, dtype=dt), v), label="4096x4096", large=True))
    return c


register(OpSpec("arange", D.arange, torch.arange, FLOATS + INTS, _arange_cases, fd_check=False))
register(OpSpec("full", D.full, torch.full, ALL, _full_cases, fd_check=False))
register(OpSpec("fill_", D.fill_, torch.fill_, ALL, _fill_cases, fd_check=False))


# npu_rotary_mul / adaptive_avg_pool2d -------------------------------------------------------------

def _rotary_ref(x: Any, r1: Any, r2: Any, rotary_mode: str = "half") -> Any:
    """torch_npu's definition: r1 * x + r2 * rotate(x)."""
    if rotary_mode == "half":
        x1, x2 = torch.chunk(x, 2, -1)
        xn = torch.cat((-x2, x1), dim=-1)
    else:
        x1, x2 = x[..., ::2], x[..., 1::2]
        xn = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return r1 * x + r2 * xn


def _rotary_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    def one(xs: tuple[int, ...], rs: tuple[int, ...], mode: str, label: str, large: bool = False) -> Case:
        k = max(1, (xs[0] * xs[1] * xs[2]) // (rs[0] * rs[1] * rs[2]))
        return Case((_t(*xs, dtype=dt), _t(*rs, dtype=dt), _t(*rs, dtype=dt)), {"rotary_mode": mode},
                    label=f"{label} {mode}", k=k, large=large)

    c = [one((2, 3, 37, 64), (1, 1, 37, 64), "half", "BNSD r 11SD"),
         one((2, 37, 3, 64), (1, 37, 1, 64), "half", "BSND r 1S1D"),
         one((2, 3, 37, 64), (1, 1, 37, 64), "interleave", "BNSD r 11SD"),
         one((37, 2, 3, 32), (37, 2, 3, 32), "interleave", "SBND r full"),
         one((1, 1, 1, 2), (1, 1, 1, 2), "half", "1x1x1x2")]
    x = _t(2, 3, 64, 37, dtype=dt).transpose(2, 3)
    c.append(Case((x, _t(1, 1, 37, 64, dtype=dt), _t(1, 1, 37, 64, dtype=dt)), label="x non-contiguous", k=6))
    if not quick:
        c += [one((4, 1024, 8, 128), (1, 1024, 1, 128), "half", "BSND 4x1024x8x128", large=True),
              one((2, 8, 100, 128), (2, 1, 100, 128), "interleave", "BNSD r B1SD")]
    return c


register(OpSpec("npu_rotary_mul", D.npu_rotary_mul, _rotary_ref, FLOATS, _rotary_cases,
                lambda g, out, a, kw: D.npu_rotary_mul_backward(g, *a, **kw), (0, 1, 2)))


def _adaptive_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    c = [Case((_t(2, 3, 9, 9, dtype=dt), (4, 4)), label="9x9 -> 4x4 (overlapping windows)", k=9),
         Case((_t(2, 3, 14, 14, dtype=dt), 7), label="14x14 -> 7", k=4),
         Case((_t(1, 2, 7, 10, dtype=dt), (3, None)), label="7x10 -> (3, None)", k=3),
         Case((_t(3, 37, 20, dtype=dt), (1, 1)), label="3-D, global", k=740),
         Case((_t(1, 1, 1, 1, dtype=dt), 1), label="1x1"),
         Case((_nc(2, 3, 9, 8, dtype=dt), (2, 3)), label="non-contiguous", k=20)]
    if not quick:
        c += [Case((_t(32, 512, 14, 14, dtype=dt), (7, 7)), label="32x512x14x14 -> 7x7", k=4, large=True),
              Case((_t(2, 3, 50, 60, dtype=dt), (1, 1)), label="global 50x60", k=3000)]
    return c


register(OpSpec("adaptive_avg_pool2d", D.adaptive_avg_pool2d, F.adaptive_avg_pool2d, FLOATS, _adaptive_cases,
                lambda g, out, a, kw: (D.adaptive_avg_pool2d_backward(g, a[0].shape),), (0,)))
