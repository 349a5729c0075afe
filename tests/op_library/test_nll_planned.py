"""nll_loss's planned path (sum / mean on contiguous (M, C) inputs): repeat calls go through
op_library._plan.PLANS and give the ordinary path's bits and torch's values; bad targets on a
planned call still raise torch's IndexError."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import op_library
from op_library._plan import PLANS


@pytest.mark.parametrize("tdtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_planned_matches_ordinary_and_torch(tdtype: torch.dtype, reduction: str, weighted: bool) -> None:
    g = torch.Generator().manual_seed(7)
    M, C = 1000, 37
    w = torch.rand(C, generator=g) + 0.5 if weighted else None
    for call in range(3):   # the first call builds the plan, the later ones use it
        x = torch.randn(M, C, generator=g).log_softmax(1)
        t = torch.randint(0, C, (M,), generator=g)
        t[::17] = -100
        got = op_library.nll_loss(x, t.to(tdtype), weight=w, reduction=reduction)
        with PLANS.disabled():
            plain = op_library.nll_loss(x, t.to(tdtype), weight=w, reduction=reduction)
        ref = F.nll_loss(x, t, weight=w, reduction=reduction)
        assert got.shape == () and got.dtype == x.dtype
        assert torch.equal(got, plain), call
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_planned_call_is_a_cache_hit() -> None:
    x = torch.randn(64, 5).log_softmax(1)
    t = torch.randint(0, 5, (64,))
    op_library.nll_loss(x, t)
    hits = PLANS.hits
    op_library.nll_loss(x, t)
    assert PLANS.hits == hits + 1


@pytest.mark.parametrize("bad", [5, -3, 2**32 + 1, -2**31 - 5])
def test_bad_target_on_a_planned_call(bad: int) -> None:
    M, C = 300, 5
    x = torch.randn(M, C).log_softmax(1)
    t = torch.randint(0, C, (M,))
    op_library.nll_loss(x, t, reduction="sum")   # builds the plan
    t[123] = bad
    t[200] = C + 7   # torch names the first bad one
    with pytest.raises(IndexError) as want:
        F.nll_loss(x, t, reduction="sum")
    with pytest.raises(IndexError) as got:
        op_library.nll_loss(x, t, reduction="sum")
    assert str(got.value) == str(want.value)
    t[123] = 0
    t[200] = 0   # the plan still works afterwards
    torch.testing.assert_close(op_library.nll_loss(x, t, reduction="sum"), F.nll_loss(x, t, reduction="sum"))


def test_all_ignored_mean_is_nan_planned() -> None:
    x = torch.randn(100, 4).log_softmax(1)
    t = torch.full((100,), 2)
    for _ in range(2):
        got = op_library.nll_loss(x, t, ignore_index=2)
        assert torch.isnan(got) and torch.isnan(F.nll_loss(x, t, ignore_index=2))
