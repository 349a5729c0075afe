"""What the CPU fallback writes: `out=` tensors it must resize, wrapped numbers, and the convolutions
the CPU has no `_overrideable` kernel for (found by the OpInfo run, tests/torch_bridge/test_device_opinfo.py)."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_bridge  # noqa: F401


@pytest.fixture(autouse=True)
def _quiet():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # the one-time fallback warnings
        yield


def test_arange_fills_its_empty_out_tensor():
    # arange.start_out runs on an empty npu tensor: the CPU kernel resizes the alias, the npu tensor follows
    assert torch.arange(0, 9, 3, device="npu").cpu().tolist() == [0, 3, 6]
    torch.testing.assert_close(torch.arange(5.0, device="npu").cpu(), torch.arange(5.0))
    r = torch.arange(0, 20, 2, device="npu")
    assert r.dtype == torch.int64 and r.shape == (10,) and r.is_npu


def test_out_too_small_grows_without_touching_its_neighbours():
    x = torch.randn(300, device="npu")
    out = torch.ones(4, device="npu")                # a small block: its neighbours share the segment
    near = torch.full((4,), 2.0, device="npu")
    r = torch.atan(x, out=out)                       # no atan kernel: the CPU fallback writes out=
    assert r is out and out.shape == (300,) and out.is_npu
    torch.testing.assert_close(out.cpu(), x.cpu().atan())
    assert near.cpu().tolist() == [2.0] * 4


def test_out_larger_than_the_result_is_resized_in_its_block():
    x = torch.randn(2, 3, device="npu")
    out = torch.empty(10, device="npu")
    torch.cumprod(x, 1, out=out)
    assert out.shape == (2, 3)
    torch.testing.assert_close(out.cpu(), x.cpu().cumprod(1))
    nc = torch.empty(3, 2, device="npu").t()         # the right shape, non-contiguous: written in place
    torch.atan(x, out=nc)
    assert nc.stride() == (1, 2)
    torch.testing.assert_close(nc.cpu(), x.cpu().atan())


def test_wrapped_numbers_keep_torch_type_promotion():
    x = torch.arange(10, dtype=torch.int32).npu()
    r = x % 3                                        # remainder.Tensor with a wrapped 3: the CPU fallback
    assert r.dtype == torch.int32 and r.cpu().tolist() == (torch.arange(10, dtype=torch.int32) % 3).tolist()
    z = torch.tensor(7, dtype=torch.int32).npu()
    assert (z % 5).dtype == torch.int32 and (z % 5).item() == 2
    f = torch.randn(4)
    torch.testing.assert_close(torch.copysign(f.npu(), -3.14).cpu(), torch.copysign(f, -3.14))


def test_out_tensors_sharing_a_segment_are_separate_to_the_cpu_kernel():
    # torch's CPU linalg_qr.out is wrong when Q and R are views of one storage; npu tensors live in one
    # segment, so the fallback gives each written tensor an alias of its own block
    a = torch.randn(5, 5)
    q, r = torch.linalg.qr(a)
    qn, rn = torch.linalg.qr(a.npu())
    torch.testing.assert_close(qn.cpu(), q)
    torch.testing.assert_close(rn.cpu(), r)


@pytest.mark.parametrize("fn, x, w", [
    (F.conv3d, (1, 2, 4, 4, 4), (3, 2, 2, 2, 2)),
    (F.conv_transpose2d, (1, 2, 5, 5), (2, 3, 3, 3)),
])
def test_convolutions_the_op_library_lacks_run_torch_convolution_on_the_host(fn, x, w):
    torch.manual_seed(0)
    xs, ws = torch.randn(x, requires_grad=True), torch.randn(w, requires_grad=True)
    xn, wn = xs.detach().npu().requires_grad_(), ws.detach().npu().requires_grad_()
    before = torch_bridge.fallback_ops().get("aten::convolution", 0)
    y, yn = fn(xs, ws), fn(xn, wn)
    torch.testing.assert_close(yn.cpu(), y.detach(), rtol=1e-5, atol=1e-5)
    assert torch_bridge.fallback_ops()["aten::convolution"] == before + 1
    y.sum().backward()
    yn.sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), xs.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wn.grad.cpu(), ws.grad, rtol=1e-5, atol=1e-5)
