"""examples/kernels/flash_attention.py against torch's scaled_dot_product_attention, and native
against the reference interpreter (bit for bit, the same event records)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from flash_attention import flash_attention
from test_interpret import both, same, same_runs

BLOCKS = {64: {"BQ": 64, "BKV": 128}, 128: {"BQ": 32, "BKV": 64}}  # what fits UB and L0B per head size


def inputs(S: int, D: int, seed: int = 0, skv: int | None = None) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(S, D, generator=g).half()
    k, v = (torch.randn(skv or S, D, generator=g).half() for _ in range(2))
    return q, k, v


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None])[0]


@pytest.mark.parametrize("S", [512, 1024, 2048])
@pytest.mark.parametrize("D", [64, 128])
def test_against_torch(S: int, D: int) -> None:
    q, k, v = inputs(S, D)
    o = torch.full((S, D), float("nan"), dtype=torch.float16)
    flash_attention(q, k, v, o, scale=D ** -0.5, D=D, **BLOCKS[D])
    torch.testing.assert_close(o.float(), reference(q, k, v), atol=2e-3, rtol=2e-3)


def test_key_tail() -> None:
    """The keys need not fill their last block (here 300 = 2 x 128 + 44)."""
    q, k, v = inputs(128, 64, seed=1, skv=300)
    o = torch.empty(128, 64, dtype=torch.float16)
    flash_attention[3](q, k, v, o, scale=0.125, D=64, **BLOCKS[64])
    torch.testing.assert_close(o.float(), reference(q, k, v), atol=2e-3, rtol=2e-3)


def test_native_equals_interpreter() -> None:
    q, k, v = (x.numpy() for x in inputs(128, 64, seed=2, skv=200))
    na, ia, nr, ir = both(flash_attention[2], [q, k, v, np.zeros((128, 64), np.float16)], True,
                          scale=0.125, D=64, **BLOCKS[64])
    same(na[3], ia[3])
    same_runs(nr, ir)
    pipes = nr.pipes
    assert pipes["M"] > 0 and pipes["V"] > 0 and pipes["MTE3"] > 0  # the cube, the softmax, P: UB -> L1
