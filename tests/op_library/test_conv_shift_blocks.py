"""conv2d's shift-kernel block choice (`_shift_blocks`): the blocks it picks fit L0B and give the
right result with a partial last block, and the bench's large case stays at >= 85% of its simulated
roofline (cycles from the timing model, not wall time)."""
import pytest
import torch
import torch.nn.functional as F

import dsl
import op_library as L
from op_library.conv import _shift_blocks


@pytest.mark.parametrize("B, LP, Cg, BM, esize", [(4, 3248, 32, 64, 4), (1, 16, 128, 64, 4), (8, 100, 64, 16, 2),
                                                  (2, 784, 16, 32, 2), (1, 100000, 512, 64, 4)])
def test_blocks_fit_l0(B: int, LP: int, Cg: int, BM: int, esize: int) -> None:
    blk = _shift_blocks(B, LP, Cg, 9, BM, esize)
    assert blk["BN"] % 16 == 0 and 96 <= blk["BN"] <= 288
    assert blk["BK"] in (16, 32, 64) and blk["BK"] <= max(16, Cg)
    assert 2 * blk["BK"] * blk["BN"] * esize <= 64 * 1024      # L0B, double-buffered
    assert BM * blk["BN"] * 4 <= 72 * 1024                      # the f32 accumulator in L0C


def test_bench_case_blocks() -> None:
    # 4 images x 12 blocks of 272 = 48 pairs, 2 per core (128 would give 104 pairs, 5 on the busiest core)
    assert _shift_blocks(4, 56 * 58, 32, 9, 64, 4) == dict(BK=16, BN=272)


@pytest.mark.parametrize("xs, co, bias, dtype, tol", [
    ((4, 32, 56, 56), 64, False, torch.float32, 1e-4),      # the bench case: BN 272, partial last block
    ((2, 48, 21, 19), 32, True, torch.float32, 1e-4),       # Cg > 32: BK 64
    ((3, 16, 30, 30), 48, True, torch.float16, 2e-2),
])
def test_conv_matches_torch(xs: tuple[int, int, int, int], co: int, bias: bool, dtype: torch.dtype, tol: float) -> None:
    torch.manual_seed(1)
    x, w = torch.randn(xs).to(dtype), torch.randn(co, xs[1], 3, 3).to(dtype)
    b = torch.randn(co).to(dtype) if bias else None
    y = L.conv2d(x, w, b, padding=1)
    ref = F.conv2d(x.float(), w.float(), None if b is None else b.float(), padding=1)
    torch.testing.assert_close(y.float(), ref, rtol=tol, atol=tol * ref.abs().max().item())


def test_bench_case_roofline() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(4, 32, 56, 56), torch.randn(64, 32, 3, 3)
    with dsl.record() as rec:
        L.conv2d(x, w, padding=1)
    assert rec.kernels() == ["pad2d", "conv_shift_kernel", "conv_crop_rows_kernel"]
    assert rec.efficiency >= 0.85, [(name, r.cycles, r.bound) for name, r in rec.runs]
