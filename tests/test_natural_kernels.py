"""The nine kernels of issue 8 as a newcomer writes them from the README (examples/kernels/): each
against torch on shapes with tails, on 1 and several cores, and against the reference interpreter
(bit for bit, the same trace records). bench/natural.py profiles them at full size."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from col_sum import col_sum
from cross_entropy import cross_entropy
from flash_attention import flash_attention
from gelu_tanh import gelu_tanh
from linear_bias_relu import linear_bias_relu
from log_softmax import log_softmax
from rms_norm import rms_norm
from rotary import rotary

from tests.compiler.test_interpret import both, same, same_runs

g = torch.Generator().manual_seed(8)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


@pytest.mark.parametrize("rows", [1, 9, 37])
@pytest.mark.parametrize("cores", [1, 5])
def test_log_softmax(rows: int, cores: int) -> None:
    x = randn(rows, 1000)
    y = torch.empty_like(x)
    log_softmax[cores](x, y)
    torch.testing.assert_close(y, F.log_softmax(x, -1), atol=2e-6, rtol=1e-6)


@pytest.mark.parametrize("shape", [(1, 1), (70, 1000), (129, 65)])
def test_col_sum_short_last_block(shape: tuple[int, int]) -> None:
    x = randn(*shape)
    y = torch.empty(shape[1])
    col_sum[3](x, y)
    torch.testing.assert_close(y, x.sum(0), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 4097, 100_003])
def test_gelu_tanh_written_out(n: int) -> None:
    x = randn(n) * 4
    y = torch.empty_like(x)
    gelu_tanh[4](x, y)
    torch.testing.assert_close(y, F.gelu(x, approximate="tanh"), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("rows", [1, 17, 100])
def test_rotary_half_layout(rows: int) -> None:
    x, c, s = randn(rows, 128), randn(rows, 128), randn(rows, 128)
    y = torch.empty_like(x)
    rotary[3](x, c, s, y)
    assert torch.equal(y, x * c + torch.cat([-x[:, 64:], x[:, :64]], 1) * s)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mkn", [(128, 64, 128), (200, 96, 300)])
def test_linear_bias_relu_128x128_accumulator(dtype: torch.dtype, mkn: tuple[int, int, int]) -> None:
    m, k, n = mkn
    x, w, b = randn(m, k).to(dtype), randn(k, n).to(dtype), randn(n)
    y = torch.empty(m, n, dtype=dtype)
    linear_bias_relu[4](x, w, b, y)
    ref = torch.relu(x.float() @ w.float() + b).to(dtype)
    torch.testing.assert_close(y.float(), ref.float(), atol=2e-2, rtol=1e-2)


def test_cross_entropy_per_row() -> None:
    x = randn(37, 1000)
    t = torch.randint(0, 1000, (37, 1), generator=g, dtype=torch.int32)
    loss = torch.empty(37, 1)
    cross_entropy[5](x, t, loss)
    torch.testing.assert_close(loss[:, 0], F.cross_entropy(x, t[:, 0].long(), reduction="none"), atol=2e-6, rtol=1e-6)


@pytest.mark.parametrize("S", [128, 320])
def test_flash_attention_one_head(S: int) -> None:
    D = 64
    q, k, v = (randn(S, D).half() for _ in range(3))
    o = torch.empty(S, D, dtype=torch.float16)
    flash_attention[3](q, k, v, o, 1 / math.sqrt(D), D=D)
    ref = F.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None])[0]
    torch.testing.assert_close(o.float(), ref, atol=4e-3, rtol=4e-3)


def test_rms_norm_rows_with_a_tail() -> None:
    x, w = randn(13, 1024), randn(1024)
    y = torch.empty_like(x)
    rms_norm[4](x, w, y)
    torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, atol=1e-5, rtol=1e-5)


CASES = {
    "log_softmax": (log_softmax, lambda: [randn(11, 1000).numpy(), np.zeros((11, 1000), np.float32)], {}),
    "col_sum": (col_sum, lambda: [randn(70, 130).numpy(), np.zeros(130, np.float32)], {}),
    "rotary": (rotary, lambda: [randn(19, 64).numpy() for _ in range(3)] + [np.zeros((19, 64), np.float32)], {}),
    "linear_bias_relu": (linear_bias_relu, lambda: [randn(130, 70).half().numpy(), randn(70, 140).half().numpy(),
                                                    randn(140).numpy(), np.zeros((130, 140), np.float16)], {}),
    "cross_entropy": (cross_entropy, lambda: [randn(9, 300).numpy(), np.arange(9, dtype=np.int32)[:, None] * 31,
                                              np.zeros((9, 1), np.float32)], {}),
    "flash_attention": (flash_attention, lambda: [randn(128, 64).half().numpy() for _ in range(3)]
                        + [np.zeros((128, 64), np.float16), 0.125], {"D": 64}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_native_and_interpreter_agree(name: str) -> None:
    k, make, consts = CASES[name]
    na, ia, nr, ir = both(k[3], make(), profile=True, **consts)
    for a, b in zip(na, ia):
        if isinstance(a, np.ndarray):
            same(a, b)
    same_runs(nr, ir)
