"""Cube ops against torch: every transpose combination, batches, bias epilogues, backward, tails."""
from __future__ import annotations

import pytest
import torch

import op_library as L

torch.manual_seed(0)

SHAPES = [(1, 1, 1), (17, 31, 13), (128, 64, 128), (130, 200, 257)]
TOL = {torch.float32: 1e-4, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def ref_mm(a: torch.Tensor, b: torch.Tensor, ta: bool, tb: bool) -> torch.Tensor:
    a, b = a.double(), b.double()
    return (a.T if ta else a) @ (b.T if tb else b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul_transposes(dtype: torch.dtype, shape: tuple[int, int, int], ta: bool, tb: bool) -> None:
    M, K, N = shape
    a = (torch.randn(K, M) if ta else torch.randn(M, K)).to(dtype)
    b = (torch.randn(N, K) if tb else torch.randn(K, N)).to(dtype)
    c = L.matmul(a, b, ta, tb, out_dtype=torch.float32, cores=7)
    torch.testing.assert_close(c.double(), ref_mm(a, b, ta, tb), atol=TOL[dtype] * K ** 0.5, rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_output_cast_on_fix(dtype: torch.dtype) -> None:
    a, b = torch.randn(100, 70).to(dtype), torch.randn(70, 90).to(dtype)
    c = L.matmul(a, b)
    assert c.dtype == dtype
    # one rounding of an f32 sum; the sum's order differs from torch's (AMX on some hosts): 1 ulp
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    torch.testing.assert_close(c.float(), (a.float() @ b.float()).to(dtype).float(), atol=1e-3, rtol=ulp)


def test_int8_accumulates_in_int32_exactly() -> None:
    a = torch.randint(-128, 128, (37, 300), dtype=torch.int8)
    b = torch.randint(-128, 128, (300, 41), dtype=torch.int8)
    c = L.matmul(a, b)
    assert c.dtype == torch.int32
    assert torch.equal(c, a.int() @ b.int())


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True), (False, True)])
def test_bmm(ta: bool, tb: bool) -> None:
    B, M, K, N = 3, 40, 70, 50
    a = torch.randn(B, K, M) if ta else torch.randn(B, M, K)
    b = torch.randn(B, N, K) if tb else torch.randn(B, K, N)
    c = L.bmm(a, b, ta, tb, cores=4)
    want = torch.bmm(a.transpose(1, 2) if ta else a, b.transpose(1, 2) if tb else b)
    torch.testing.assert_close(c, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_linear_with_bias_epilogue(dtype: torch.dtype) -> None:
    x = torch.randn(2, 33, 80).to(dtype)
    w = torch.randn(70, 80).to(dtype)
    bias = torch.randn(70).to(dtype)
    y = L.linear(x, w, bias, cores=3)
    want = torch.nn.functional.linear(x.float(), w.float(), bias.float()).to(dtype)
    torch.testing.assert_close(y, want, atol=2e-2 if dtype == torch.float16 else 1e-4, rtol=1e-3)
    y0 = L.linear(x, w)
    torch.testing.assert_close(y0, torch.nn.functional.linear(x.float(), w.float()).to(dtype),
                               atol=2e-2 if dtype == torch.float16 else 1e-4, rtol=1e-3)


GELU_EPILOGUE = """
@dsl.kernel
def mm_gelu(a: GM, b: GM, bias: GM, c: GM, BM: Const[int] = 64, BN: Const[int] = 64, BK: Const[int] = 32):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[k, n]
        c[m, n] = dsl.cast(dsl.gelu(acc + dsl.cast(bias[n], f32)), c.dtype)
"""


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_bias_gelu_epilogue_runs_on_the_vector_unit(source, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    """An epilogue FIX cannot do (bias add, gelu) leaves L0C for UB on FIX and runs on V."""
    k = source(GELU_EPILOGUE).mm_gelu
    a, b, bias = torch.randn(100, 70).to(dtype), torch.randn(70, 90).to(dtype), torch.randn(90).to(dtype)
    c = torch.empty(100, 90, dtype=dtype)
    k[8](a, b, bias, c)
    want = torch.nn.functional.gelu(a.double() @ b.double() + bias.double())
    tol = 1e-4 if dtype == torch.float32 else 2e-3  # f16: one rounding of the result
    torch.testing.assert_close(c.double(), want, atol=tol * 10, rtol=tol)
    core = k.emit("core", a, b, bias, c)
    assert "COPY_L0C_UB" in core and "COPY_L0C_GM" not in core


def test_matmul_and_linear_backward() -> None:
    a = torch.randn(45, 60, requires_grad=True)
    b = torch.randn(60, 38, requires_grad=True)
    g = torch.randn(45, 38)
    (a @ b).backward(g)
    ga, gb = L.matmul_backward(g, a.detach(), b.detach())
    torch.testing.assert_close(ga, a.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gb, b.grad, atol=1e-4, rtol=1e-4)

    x = torch.randn(3, 20, 64, requires_grad=True)
    w = torch.randn(48, 64, requires_grad=True)
    bias = torch.randn(48, requires_grad=True)
    gy = torch.randn(3, 20, 48)
    torch.nn.functional.linear(x, w, bias).backward(gy)
    gx, gw, gbias = L.linear_backward(gy, x.detach(), w.detach())
    torch.testing.assert_close(gx, x.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gw, w.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gbias, bias.grad, atol=1e-4, rtol=1e-4)


def test_bmm_backward() -> None:
    a = torch.randn(2, 30, 40, requires_grad=True)
    b = torch.randn(2, 40, 20, requires_grad=True)
    g = torch.randn(2, 30, 20)
    torch.bmm(a, b).backward(g)
    ga, gb = L.bmm_backward(g, a.detach(), b.detach())
    torch.testing.assert_close(ga, a.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gb, b.grad, atol=1e-4, rtol=1e-4)
