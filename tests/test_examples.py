"""The example kernels, checked against torch (what `vinci demo` shows, as tests)."""
from __future__ import annotations

import pytest
import torch
from layer_norm import layer_norm
from matmul import matmul
from rms_norm import rms_norm
from softmax import softmax
from swish import swish, swish_backward
from vadd import vadd, vadd_any

torch.manual_seed(0)


@pytest.mark.parametrize("n", [0, 1, 2047, 2048, 2049, 100_000])
def test_vadd(n: int) -> None:
    x, y = torch.randn(n), torch.randn(n)
    z = torch.empty(n)
    vadd[8](x, y, z)
    assert torch.equal(z, x + y)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.int8])
def test_vadd_any_dtype(dtype: torch.dtype) -> None:
    x = (torch.randn(10_000) * 20).to(dtype)
    y = (torch.randn(10_000) * 20).to(dtype)
    z = torch.empty_like(x)
    vadd_any[4](x, y, z)
    assert torch.equal(z, x + y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_swish_forward_and_backward(dtype: torch.dtype) -> None:
    x = torch.randn(50_001).to(dtype)
    y = torch.empty_like(x)
    swish[6](x, y)
    tol = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(y.float(), torch.nn.functional.silu(x.float()).to(dtype).float(), atol=tol, rtol=tol)
    dy = torch.randn(50_001).to(dtype)
    dx = torch.empty_like(x)
    swish_backward[6](x, dy, dx)
    xr = x.float().clone().requires_grad_()
    torch.nn.functional.silu(xr).backward(dy.float())
    torch.testing.assert_close(dx.float(), xr.grad.to(dtype).float(), atol=tol * 4, rtol=tol * 4)


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (37, 129), (256, 1000)])
def test_softmax(shape: tuple[int, int]) -> None:
    x = torch.randn(shape) * 4
    y = torch.empty_like(x)
    softmax[8](x, y)
    torch.testing.assert_close(y, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("shape", [(1, 8), (7, 33), (64, 1024)])
def test_layer_norm(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    w, b = torch.randn(shape[1]), torch.randn(shape[1])
    y = torch.empty_like(x)
    layer_norm[8](x, w, b, y, eps=1e-5)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (shape[1],), w, b, 1e-5), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape", [(1, 8), (7, 33), (64, 1024)])
def test_rms_norm(shape: tuple[int, int]) -> None:
    x, w = torch.randn(shape), torch.randn(shape[1])
    y = torch.empty_like(x)
    rms_norm[8](x, w, y, eps=1e-6)
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (shape[1],), w, 1e-6), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 31, 13), (300, 200, 130)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_matmul(shape: tuple[int, int, int], dtype: torch.dtype) -> None:
    M, K, N = shape
    a, b = torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)
    c = torch.empty(M, N)
    matmul[5](a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), atol=1e-3 * K ** 0.5, rtol=1e-3)


def test_profiles_are_real() -> None:
    """Double buffering overlaps DMA with compute: the timing model shows it (>= 85% of the bound)."""
    x, y = torch.randn(1 << 20), torch.randn(1 << 20)
    z = torch.empty_like(x)
    run2 = vadd[24].profile(x, y, z)
    run1 = vadd.with_options(buffers=1)[24].profile(x, y, z)
    assert run2.efficiency >= 0.85
    assert run1.cycles > run2.cycles
    s = torch.empty_like(x)
    assert swish[24].profile(x, s).efficiency >= 0.85
    assert swish.with_options(buffers=1)[24].profile(x, s).efficiency < 0.85
