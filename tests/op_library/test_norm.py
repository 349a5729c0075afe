"""op_library.norm: the registry's quick matrix for every norm op, batch_norm's running-stat update,
error texts against torch's, and the paths the matrix cases only touch lightly."""
from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

import op_library.norm  # noqa: F401

N = sys.modules["op_library.norm"]
OPS = ["softmax", "log_softmax", "layer_norm", "rms_norm", "npu_rms_norm", "npu_add_rms_norm",
       "npu_scaled_masked_softmax", "batch_norm", "group_norm"]


def test_batch_norm_updates_running_stats_like_torch() -> None:
    x = torch.randn(6, 4, 5, 3)
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    rm_t, rv_t = rm.clone(), rv.clone()
    y = N.batch_norm(x, rm, rv, training=True, momentum=0.3)
    y_t = F.batch_norm(x, rm_t, rv_t, training=True, momentum=0.3)
    torch.testing.assert_close(y, y_t)
    torch.testing.assert_close(rm, rm_t)
    torch.testing.assert_close(rv, rv_t)   # unbiased variance in the running update
    before = rm.clone()
    N.batch_norm(x, rm, rv, training=False)
    assert torch.equal(rm, before)


def test_softmax_special_values_match_torch() -> None:
    x = torch.tensor([[1.0, float("inf"), 2.0], [1.0, float("-inf"), 2.0], [float("-inf")] * 3,
                      [1.0, float("nan"), 2.0]])
    for dim in (-1, 0):
        xi = x if dim == -1 else x.t().contiguous()
        torch.testing.assert_close(N.softmax(xi, dim), F.softmax(xi, dim), equal_nan=True)
        torch.testing.assert_close(N.log_softmax(xi, dim), F.log_softmax(xi, dim), equal_nan=True)


def test_blocked_paths() -> None:
    # long rows (online softmax over column blocks), long columns (online over row blocks)
    x = torch.randn(2, 20000)
    torch.testing.assert_close(N.softmax(x, -1), F.softmax(x, -1))
    x = torch.randn(1500, 70)
    torch.testing.assert_close(N.log_softmax(x, 0), F.log_softmax(x, 0))
    x = torch.randn(2, 12000)
    w = torch.randn(12000)
    torch.testing.assert_close(N.layer_norm(x, (12000,), w), F.layer_norm(x, (12000,), w), atol=1e-4, rtol=1e-5)



@pytest.mark.parametrize("shape,groups", [((2, 6, 40, 40), 3), ((2, 4, 5, 7), 2), ((2, 4, 100, 100), 2)])
def test_group_norm_single_load_and_blocked(shape: tuple[int, ...], groups: int) -> None:
    """A (sample, group) row that fits UB is loaded once (mean, variance and the result from UB); a
    larger one (4 x 2 x 10000 here) takes the three blocked passes; with and without affine."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(*shape, generator=g) * 3 + 1
    w, b = torch.randn(shape[1], generator=g), torch.randn(shape[1], generator=g)
    torch.testing.assert_close(N.group_norm(x, groups, w, b), F.group_norm(x, groups, w, b), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(N.group_norm(x, groups), F.group_norm(x, groups), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("s", [49, 3136, 9000])
def test_batch_norm_whole_and_chunked_rows(s: int) -> None:
    """Per-sample channel rows up to 8192 elements move whole (WHOLE=1), longer ones in SB chunks."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 4, s, generator=g) + 2
    rm, rv = torch.zeros(4), torch.ones(4)
    trm, trv = rm.clone(), rv.clone()
    w, b = torch.randn(4, generator=g), torch.randn(4, generator=g)
    torch.testing.assert_close(N.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5),
                               F.batch_norm(x, trm, trv, w, b, True, 0.1, 1e-5), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(rm, trm)
    torch.testing.assert_close(rv, trv)

def test_layer_norm_errors_match_torch() -> None:
    x = torch.randn(3, 4, 5)
    for call in (lambda m: m.layer_norm(x, (4,)), lambda m: m.layer_norm(x, (5,), torch.randn(4)),
                 lambda m: m.layer_norm(x, (5,), None, torch.randn(4)), lambda m: m.rms_norm(x, (5,), torch.randn(4))):
        with pytest.raises(RuntimeError) as want:
            call(F)
        with pytest.raises(RuntimeError) as got:
            call(N)
        assert str(got.value) == str(want.value)


def test_other_errors() -> None:
    x = torch.randn(3, 4, 5)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-3, 2\], but got 3\)"):
        N.softmax(x, 3)
    with pytest.raises(RuntimeError, match="running_mean should contain 4 elements not 3"):
        N.batch_norm(x, torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        N.batch_norm(torch.randn(1, 3), None, None, training=True)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        N.group_norm(x, 3)
    with pytest.raises(RuntimeError, match="mask must be a bool tensor"):
        N.npu_scaled_masked_softmax(torch.randn(1, 1, 4, 4), torch.zeros(1, 1, 4, 4))


def test_npu_rms_norm_rstd_shape() -> None:
    x, g = torch.randn(2, 3, 4, 5), torch.randn(4, 5)
    y, rstd = N.npu_rms_norm(x, g)
    assert rstd.shape == (2, 3, 1, 1) and rstd.dtype == torch.float32
    y16, rstd16 = N.npu_rms_norm(x.half(), g.half())
    assert y16.dtype == torch.float16 and rstd16.dtype == torch.float32
