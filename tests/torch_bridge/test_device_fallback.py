"""The CPU fallback of aten ops without an npu kernel: one-time warning, fallback_ops(), strict mode."""
from __future__ import annotations

import warnings

import pytest
import torch

import torch_bridge

MSG = "is not currently supported on the NPU backend and will fall back to run on the CPU"


def test_fallback_warns_once_and_is_listed():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).npu()
    with pytest.warns(UserWarning, match=rf"The operator 'aten::roll' {MSG}"):
        y = torch.roll(x, 1, 1)
    assert y.is_npu and torch.equal(y.cpu(), torch.roll(x.cpu(), 1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the second call does not warn again
        y2 = torch.roll(x, 1, 0)
    assert torch.equal(y2.cpu(), torch.roll(x.cpu(), 1, 0))
    ops = torch_bridge.fallback_ops()
    assert ops["aten::roll"] == 2


def test_fallback_in_place_and_view_results_stay_on_the_device():
    x = torch.arange(6, dtype=torch.float32).npu()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = x.cumprod_(0)                        # in place: the npu tensor itself, written through its alias
        assert r is x
        assert torch.equal(x.cpu(), torch.arange(6, dtype=torch.float32).cumprod(0))
        d = torch.arange(9, dtype=torch.float32).reshape(3, 3).npu()
        diag = torch.diagonal(d)                 # a view op: an npu view of the same storage
        assert diag.is_npu and diag.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
        assert torch.equal(diag.cpu(), torch.tensor([0.0, 4.0, 8.0]))


def test_strict_mode_raises(monkeypatch):
    monkeypatch.setenv("VINCI_FALLBACK", "error")
    x = torch.ones(3).npu()
    with pytest.raises(RuntimeError, match=r"aten::_cummax_helper is not currently supported on the NPU backend "
                                           r"\(VINCI_FALLBACK=error forbids the CPU fallback\)"):
        torch.cummax(x, 0)
    assert "aten::_cummax_helper" not in torch_bridge.fallback_ops()
    assert torch.equal((x + x).cpu(), torch.full((3,), 2.0))     # ops with kernels still run


def test_unsupported_dtype_falls_back():
    # the op library has no float64 kernels: such a call runs on the CPU, and says so
    x = torch.ones(3, dtype=torch.float64).npu()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y = x + x
    assert y.is_npu and y.dtype == torch.float64 and torch.equal(y.cpu(), torch.full((3,), 2.0, dtype=torch.float64))
    assert "aten::add.Tensor" in torch_bridge.fallback_ops()
    assert not w or MSG in str(w[0].message)
