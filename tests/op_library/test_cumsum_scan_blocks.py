"""cumsum's blocked cube scan at the edges of its (BM, BK) blocks: lengths around multiples of the
scan block BK (full blocks, a tail, only a tail), both directions (cumsum_backward is the reversed
scan), both kernels (last dim and inner dims), and non-finite values placed at block boundaries so
the carry between blocks is what turns non-finite."""
from __future__ import annotations

import pytest
import torch

from op_library import reduce as R

BK = R._SCAN_BK


def _rev(x: torch.Tensor, d: int) -> torch.Tensor:
    return torch.flip(torch.cumsum(torch.flip(x, [d]), d), [d])


@pytest.mark.parametrize("n", [1, BK - 1, BK, BK + 1, 2 * BK + 5, 3 * BK])
@pytest.mark.parametrize("dim", [0, 1])
def test_lengths_around_the_scan_block(n: int, dim: int) -> None:
    g = torch.Generator().manual_seed(n)
    shape = (n, 37) if dim == 0 else (37, n)
    x = torch.randn(shape, generator=g)
    want = torch.cumsum(x.double(), dim)
    assert float((R.cumsum(x, dim).double() - want).abs().max()) < 1e-4
    assert float((R.cumsum_backward(x, dim).double() - _rev(x.double(), dim)).abs().max()) < 1e-4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_round_once(dtype: torch.dtype) -> None:
    x = torch.randn(70, 3 * BK + 7).to(dtype)
    got = R.cumsum(x, 1, dtype=torch.float32)
    assert float((got.double() - torch.cumsum(x.double(), 1)).abs().max()) < 1e-3
    torch.testing.assert_close(R.cumsum(x, 1), torch.cumsum(x.float(), 1).to(dtype))


@pytest.mark.parametrize("at", [BK - 1, BK, 2 * BK - 1, 2 * BK + 3])
@pytest.mark.parametrize("val", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("dim", [0, 1])
def test_non_finite_at_block_edges(at: int, val: float, dim: int) -> None:
    x = torch.randn(40, 3 * BK + 9)
    x[5, at] = val
    x[11, at] = val
    x[11, at + 2] = -val   # inf then -inf: NaN from there on
    if dim == 0:
        x = x.t().contiguous()
    for got, want in ((R.cumsum(x, dim), torch.cumsum(x, dim)),
                      (R.cumsum_backward(x, dim), _rev(x, dim))):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-4)
        assert torch.equal(torch.isfinite(got), torch.isfinite(want))
