"""conv2d / max_pool2d / avg_pool2d (NCHW) and their backwards against torch.nn.functional."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from op_library import conv as conv_mod
from op_library.conv import conv2d, conv2d_backward
from op_library.pool import avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward

torch.manual_seed(0)

# (C, CO, kernel, stride, padding, dilation, groups) on N=2, H=W=9 (tails everywhere)
CONV_CASES = [
    (3, 4, (3, 3), 1, 0, 1, 1),
    (3, 4, (3, 3), 2, 1, 1, 1),
    (3, 4, (3, 3), 1, 1, 2, 1),
    (4, 6, (3, 3), 2, 1, 1, 2),
    (4, 6, (3, 3), 1, 1, 2, 2),
    (3, 3, (3, 3), 1, 1, 1, 3),   # depthwise
    (3, 6, (3, 3), 2, 1, 2, 3),   # depthwise, channel multiplier 2
    (3, 5, (1, 1), 1, 0, 1, 1),   # 1x1
    (3, 4, (2, 3), (1, 2), (1, 0), 1, 1),  # non-square kernel, stride and padding
]


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> None:
    torch.testing.assert_close(a, b, atol=tol, rtol=tol)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_forward_backward(case: tuple, bias: bool) -> None:
    C, CO, k, s, p, d, g = case
    x = torch.randn(2, C, 9, 9, requires_grad=True)
    w = torch.randn(CO, C // g, *k, requires_grad=True)
    b = torch.randn(CO, requires_grad=True) if bias else None
    want = F.conv2d(x, w, b, s, p, d, g)
    gy = torch.randn_like(want)
    want.backward(gy)
    y = conv2d(x.detach(), w.detach(), b.detach() if bias else None, s, p, d, g)
    _close(y, want.detach())
    gx, gw, gb = conv2d_backward(gy, x.detach(), w.detach(), s, p, d, g, with_bias=bias)
    _close(gx, x.grad)
    _close(gw, w.grad)
    if bias:
        _close(gb, b.grad)
    else:
        assert gb is None


# (C, CO, kernel, stride, padding, dilation, groups) on N=3, H=11, W=10: the forward paths (stride-phase
# shifted windows, per image or with the images stacked, and im2col) each checked on every case
PATH_CASES = [
    (8, 6, (3, 3), 2, 1, 1, 1),
    (8, 5, (3, 3), (1, 2), 1, 1, 1),
    (8, 4, (3, 2), (2, 3), (1, 2), 1, 1),
    (8, 4, (3, 3), 2, 2, 2, 1),         # dilation with stride
    (8, 4, (2, 3), (2, 1), (0, 1), (1, 2), 1),
    (16, 8, (3, 3), 2, 1, 1, 2),        # groups with stride
    (16, 16, (3, 3), (2, 3), 1, 1, 16),  # depthwise, strided
    (8, 6, (1, 1), 2, 0, 1, 1),         # strided 1x1
    (8, 6, (3, 3), 1, 1, 1, 1),
    (1, 4, (3, 3), 1, 1, 1, 1),
    (2, 4, (3, 3), 2, 1, 1, 1),
    (3, 5, (5, 3), (1, 2), 2, 1, 1),
]


@pytest.mark.parametrize("path", ["image", "batch", "im2col", "im2col-batch"])
@pytest.mark.parametrize("case", PATH_CASES)
def test_conv2d_paths(case: tuple, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    C, CO, k, s, p, d, g = case
    monkeypatch.setattr(conv_mod, "_BATCH_BELOW", 10 ** 9 if path == "batch" else 0)
    monkeypatch.setattr(conv_mod, "_IM2COL_BATCH_BELOW", 10 ** 9 if path == "im2col-batch" else 0)
    monkeypatch.setattr(conv_mod, "_use_im2col", lambda geom: path.startswith("im2col"))
    x = torch.randn(3, C, 11, 10)
    w = torch.randn(CO, C // g, *k)
    b = torch.randn(CO)
    for bias in (b, None):
        _close(conv2d(x, w, bias, s, p, d, g), F.conv2d(x, w, bias, s, p, d, g))
    if path == "batch":  # the backward has one path
        xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
        want = F.conv2d(xx, ww, None, s, p, d, g)
        gy = torch.randn_like(want)
        want.backward(gy)
        gx, gw, _ = conv2d_backward(gy, x, w, s, p, d, g, with_bias=False)
        _close(gx, xx.grad)
        _close(gw, ww.grad)


def test_conv2d_multi_block() -> None:
    """K = 180 > BK, L = 900 > BN, CO = 140 > BM: every cube loop runs several blocks with tails."""
    x = torch.randn(2, 20, 32, 32, requires_grad=True)
    w = torch.randn(140, 20, 3, 3, requires_grad=True)
    b = torch.randn(140, requires_grad=True)
    want = F.conv2d(x, w, b)
    gy = torch.randn_like(want)
    want.backward(gy)
    _close(conv2d(x.detach(), w.detach(), b.detach()), want.detach(), 1e-4 * 64)
    gx, gw, gb = conv2d_backward(gy, x.detach(), w.detach())
    for got, ref in ((gx, x.grad), (gw, w.grad), (gb, b.grad)):
        torch.testing.assert_close(got, ref, atol=1e-5 * ref.abs().max().item(), rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv2d_half(dtype: torch.dtype) -> None:
    x, w, b = torch.randn(2, 4, 9, 9).to(dtype), torch.randn(6, 2, 3, 3).to(dtype), torch.randn(6).to(dtype)
    y = conv2d(x, w, b, 2, 1, 1, 2)
    assert y.dtype == dtype
    want = F.conv2d(x.float(), w.float(), b.float(), 2, 1, 1, 2)
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    torch.testing.assert_close(y.float(), want, atol=1e-3, rtol=ulp)


# (kernel, stride, padding, dilation)
POOL_CASES = [
    (3, 1, 0, 1),
    (3, 2, 0, 1),
    (3, 2, 1, 1),
    (3, 1, 1, 2),
    (2, None, 0, 1),
    ((2, 3), (1, 2), (1, 1), 1),
    ((3, 2), (2, 1), (0, 1), (2, 1)),
]


@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool2d(case: tuple) -> None:
    k, s, p, d = case
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    want, want_ind = F.max_pool2d(x, k, s, p, d, return_indices=True)
    gy = torch.randn_like(want)
    want.backward(gy)
    y, ind = max_pool2d(x.detach(), k, s, p, d)
    assert torch.equal(y, want.detach())
    assert torch.equal(ind, want_ind)
    _close(max_pool2d_backward(gy, x.shape, ind, k, s, p, d), x.grad)


def test_max_pool2d_ties_pick_first() -> None:
    x = torch.randint(0, 3, (2, 3, 9, 9)).float().requires_grad_()
    want, want_ind = F.max_pool2d(x, 3, 1, 1, return_indices=True)
    gy = torch.randn_like(want)
    want.backward(gy)
    y, ind = max_pool2d(x.detach(), 3, 1, 1)
    assert torch.equal(y, want.detach()) and torch.equal(ind, want_ind)
    _close(max_pool2d_backward(gy, x.shape, ind, 3, 1, 1), x.grad)


@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[3] == 1])
def test_avg_pool2d(case: tuple) -> None:
    k, s, p, _ = case
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    want = F.avg_pool2d(x, k, s, p)
    gy = torch.randn_like(want)
    want.backward(gy)
    _close(avg_pool2d(x.detach(), k, s, p), want.detach())
    _close(avg_pool2d_backward(gy, x.shape, k, s, p), x.grad)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_pool_half(dtype: torch.dtype) -> None:
    x = torch.randn(2, 3, 9, 9).to(dtype)
    y, ind = max_pool2d(x, 3, 2, 1)
    want, want_ind = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert torch.equal(y, want) and torch.equal(ind, want_ind)
    ya = avg_pool2d(x, 3, 2, 1)
    torch.testing.assert_close(ya.float(), F.avg_pool2d(x, 3, 2, 1).float(), atol=1e-3, rtol=1e-2)
    gy = torch.randn_like(want)
    gx = max_pool2d_backward(gy, x.shape, ind, 3, 2, 1)
    xr = x.float().requires_grad_()
    F.max_pool2d(xr, 3, 2, 1).backward(gy.float())
    torch.testing.assert_close(gx.float(), xr.grad.to(dtype).float(), atol=1e-2, rtol=1e-2)


# (H, W, kernel, stride, padding, dilation): shapes where ceil_mode adds an output row/column whose
# window overhangs the padded input on the bottom/right (10/8 with k=3, s=2; 7 with k=3, s=3; k=2,
# s=2 on odd sizes), one where torch's "last window must start inside the input or left padding"
# rule drops it again (5 with k=2, s=2, p=1), dilated ones and non-square ones (different H and W,
# kernel, stride, padding)
CEIL_CASES = [
    (10, 8, 3, 2, 0, 1),
    (7, 7, 3, 3, 0, 1),
    (10, 10, 3, 2, 1, 1),
    (9, 9, 2, 2, 0, 1),
    (5, 6, 2, 2, 1, 1),
    (10, 10, 3, 2, 1, 2),
    (10, 7, (3, 2), (2, 3), (1, 0), 1),
    (9, 6, (2, 3), (3, 2), (0, 1), (2, 1)),
]


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("case", CEIL_CASES)
def test_max_pool2d_ceil_mode(case: tuple, ceil_mode: bool) -> None:
    H, W, k, s, p, d = case
    x = torch.randn(2, 3, H, W, requires_grad=True)
    want, want_ind = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil_mode, return_indices=True)
    gy = torch.randn_like(want)
    want.backward(gy)
    y, ind = max_pool2d(x.detach(), k, s, p, d, ceil_mode=ceil_mode)
    assert torch.equal(y, want.detach())
    assert torch.equal(ind, want_ind)
    _close(max_pool2d_backward(gy, x.shape, ind, k, s, p, d, ceil_mode=ceil_mode), x.grad)


# (count_include_pad, divisor_override)
AVG_OPTIONS = [(True, None), (False, None), (True, 3), (False, 5)]


@pytest.mark.parametrize("options", AVG_OPTIONS)
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("case", [c for c in CEIL_CASES if c[5] == 1])
def test_avg_pool2d_options(case: tuple, ceil_mode: bool, options: tuple) -> None:
    H, W, k, s, p, _ = case
    count_include_pad, divisor_override = options
    kw = dict(ceil_mode=ceil_mode, count_include_pad=count_include_pad, divisor_override=divisor_override)
    x = torch.randn(2, 3, H, W, requires_grad=True)
    want = F.avg_pool2d(x, k, s, p, **kw)
    gy = torch.randn_like(want)
    want.backward(gy)
    _close(avg_pool2d(x.detach(), k, s, p, **kw), want.detach())
    _close(avg_pool2d_backward(gy, x.shape, k, s, p, **kw), x.grad)


def test_pool_ceil_mode_changes_shape() -> None:
    """The ceil cases above really differ from floor (and the drop rule fires on 5x6, k=2, s=2, p=1)."""
    x = torch.randn(1, 1, 10, 8)
    assert max_pool2d(x, 3, 2, 0, ceil_mode=True)[0].shape[2:] == (5, 4)
    assert max_pool2d(x, 3, 2, 0)[0].shape[2:] == (4, 3)
    assert avg_pool2d(x, 3, 2, 0, ceil_mode=True).shape[2:] == (5, 4)
    assert avg_pool2d(torch.randn(1, 1, 5, 6), 2, 2, 1, ceil_mode=True).shape[2:] == (3, 4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_pool_half_ceil_mode(dtype: torch.dtype) -> None:
    x = torch.randn(2, 3, 10, 7).to(dtype)
    y, ind = max_pool2d(x, 3, 2, 1, ceil_mode=True)
    want, want_ind = F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)
    assert torch.equal(y, want) and torch.equal(ind, want_ind)
    gy = torch.randn_like(want)
    xr = x.float().requires_grad_()
    F.max_pool2d(xr, 3, 2, 1, ceil_mode=True).backward(gy.float())
    gx = max_pool2d_backward(gy, x.shape, ind, 3, 2, 1, ceil_mode=True)
    torch.testing.assert_close(gx.float(), xr.grad.to(dtype).float(), atol=1e-2, rtol=1e-2)
    kw = dict(ceil_mode=True, count_include_pad=False)
    ya = avg_pool2d(x, 3, 2, 1, **kw)
    torch.testing.assert_close(ya.float(), F.avg_pool2d(x, 3, 2, 1, **kw).float(), atol=1e-3, rtol=1e-2)
    gya = torch.randn_like(ya)
    xr = x.float().requires_grad_()
    F.avg_pool2d(xr, 3, 2, 1, **kw).backward(gya.float())
    gxa = avg_pool2d_backward(gya, x.shape, 3, 2, 1, **kw)
    assert gxa.dtype == dtype
    torch.testing.assert_close(gxa.float(), xr.grad.to(dtype).float(), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("hw,k,s,p", [((34, 40), 2, 2, 0), ((13, 9), 1, 1, 0), ((8, 2100), 3, 1, 1),
                                      ((56, 56), 3, 2, 1), ((30, 30), 3, 3, 0)])
def test_avg_pool2d_row_blocks(hw: tuple[int, int], k: int, s: int, p: int) -> None:
    """avg_pool2d takes R output rows per block (the largest divisor of OH up to 16 that keeps R * OW
    within 2048: here OH = 17 gives R = 1, OH = 13 R = 13, OW = 2100 R = 1), and inputs that need no
    padding are read in place (no padded copy), for max_pool2d too."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 3, *hw, generator=g)
    torch.testing.assert_close(avg_pool2d(x, k, s, p), F.avg_pool2d(x, k, s, p))
    y, i = max_pool2d(x, k, s, p)
    ty, ti = F.max_pool2d(x, k, s, p, return_indices=True)
    assert torch.equal(y, ty) and torch.equal(i, ti)
