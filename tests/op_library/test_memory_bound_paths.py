"""The restructured memory-bound kernel paths against torch: the flat (V gather) pooling kernels in
all their block shapes (several planes per block, row chunks of one plane, more than 9 taps,
dilation, ceil_mode, f16), batch_norm's fused statistics / store pipeline with several channels per
core, npu_rotary_mul's short-dim-2 path (r broadcast along dims 1 and 2 or only 2) and conv2d's
row crop."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import op_library as L
from op_library import norm_bn, pool
from op_library.data_nn import npu_rotary_mul


@pytest.mark.parametrize("shape,k,s,p,d,ceil", [
    ((2, 6, 9, 9), 3, 2, 1, 1, False),        # several planes per block
    ((1, 2, 150, 120), 3, 2, 1, 1, False),    # a plane larger than a block: row chunks
    ((1, 3, 20, 23), 5, 1, 2, 1, False),      # 25 taps: the tap loop after the 9 kept in UB
    ((2, 2, 17, 19), 3, 2, 1, 2, True),       # dilation and ceil_mode
])
def test_max_pool_flat(shape, k, s, p, d, ceil):
    x = torch.randn(*shape)
    x[0, 0, 1, 1] = float("nan")
    y, ind = L.max_pool2d(x, k, s, p, d, ceil_mode=ceil)
    ry, rind = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
    torch.testing.assert_close(y, ry, equal_nan=True)
    assert torch.equal(ind, rind)


def test_flat_plan_shapes():
    # several planes per block (dividing the plane count), then row chunks (dividing OH)
    P, R, CP, CS, NI, NO = pool._flat_plan(12, 11, 11, 5, 5, (3, 3), (2, 2), (1, 1), 4)
    assert (R, CP) == (5, 1) and P > 1 and 12 % P == 0 and NI == P * 121 and NO == P * 25
    P, R, CP, CS, NI, NO = pool._flat_plan(2, 152, 122, 75, 60, (3, 3), (2, 2), (1, 1), 4)
    assert P == 1 and CP > 1 and 75 % R == 0 and CS == R * 2 * 122 and NI * 4 <= pool._FLAT_IN


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape,k,s,p,ceil,cip", [
    ((3, 8, 14, 14), 2, 2, 0, False, True),
    ((1, 2, 150, 120), 3, 2, 1, True, False),
    ((2, 3, 13, 11), (4, 3), (1, 2), (2, 1), False, False),
])
def test_avg_pool_flat(dtype, shape, k, s, p, ceil, cip):
    x = torch.randn(*shape).to(dtype)
    y = L.avg_pool2d(x, k, s, p, ceil, cip)
    ref = F.avg_pool2d(x.float(), k, s, p, ceil, cip).to(dtype)
    torch.testing.assert_close(y, ref, rtol=2e-3 if dtype == torch.float16 else 2e-6, atol=1e-5)


def test_adaptive_avg_pool_equal_windows():
    x = torch.randn(4, 10, 14, 14)
    torch.testing.assert_close(L.adaptive_avg_pool2d(x, 7), F.adaptive_avg_pool2d(x, 7))


@pytest.mark.parametrize("shape,affine", [((8, 50, 10, 10), True), ((3, 30, 130), False)])
def test_batch_norm_fused_channels(shape, affine):
    # 50 / 30 channels over 24 cores: two or three per core, so every core pipelines a channel's
    # store into the next one's statistics; data offset from 0 (the shifted one-pass variance)
    x = torch.randn(*shape) * 3 + 40
    c = shape[1]
    w, b = (torch.randn(c), torch.randn(c)) if affine else (None, None)
    rm, rv = torch.randn(c), torch.rand(c) + 0.5
    rm2, rv2 = rm.clone(), rv.clone()
    y = norm_bn.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
    ref = F.batch_norm(x, rm2, rv2, w, b, True, 0.1, 1e-5)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rm, rm2)
    torch.testing.assert_close(rv, rv2, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rshape", [(1, 40, 1, 64), (2, 1, 1, 64)])
def test_rotary_short_dim2(dtype, rshape):
    x = torch.randn(2, 40, 3, 64).to(dtype)
    r1, r2 = torch.randn(*rshape).to(dtype), torch.randn(*rshape).to(dtype)
    y = npu_rotary_mul(x, r1, r2, "half")
    xf = x.float()
    x1, x2 = torch.chunk(xf, 2, -1)
    ref = (r1.float() * xf + r2.float() * torch.cat((-x2, x1), -1)).to(dtype)
    tol = {"rtol": 1.6e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(y, ref, **tol)


def test_conv2d_row_crop():
    # stride 1, padding 1: the shift kernel's output has two junk columns per row, cropped by rows
    x, w, b = torch.randn(2, 16, 12, 20), torch.randn(32, 16, 3, 3), torch.randn(32)
    torch.testing.assert_close(L.conv2d(x, w, b, 1, 1), F.conv2d(x, w, b, 1, 1), rtol=1e-4, atol=1e-4)
