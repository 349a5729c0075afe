"""Copies between the npu device and the host that torch's C++ would route through hooks a Python
backend lacks: lazily conjugated / negated complex tensors, non-blocking copies to the host, pinned
host memory (torch_bridge.device.aten._logical, torch_bridge.device.pinned)."""
from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

import op_library
import torch_bridge  # noqa: F401  (registers npu)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # the complex ops fall back to the CPU
        yield


def test_ifft_result_reaches_the_host():
    """fft.ifft's result is a lazily conjugated tensor; copying it used to recurse in torch's
    Conjugate fallback until the process died (clone -> copy_ -> _copy_from -> the fallback)."""
    x = torch.randn(16)
    y = torch.fft.ifft(x.to("npu"))
    assert y.device.type == "npu"
    torch.testing.assert_close(y.cpu(), torch.fft.ifft(x))


@pytest.mark.parametrize("view", ["conj", "neg"])
def test_conj_and_neg_views_copy_resolved(view):
    c = torch.randn(5, dtype=torch.complex64)
    d = c.to("npu")
    v, ref = (d.conj(), c.conj()) if view == "conj" else (d._neg_view(), c._neg_view())
    assert v.is_conj() == (view == "conj") and v.is_neg() == (view == "neg")
    torch.testing.assert_close(v.cpu(), ref.resolve_conj().resolve_neg())
    torch.testing.assert_close(v.resolve_conj().resolve_neg().cpu(), ref.resolve_conj().resolve_neg())
    torch.testing.assert_close((v.clone() + 1).cpu(), ref.clone() + 1)


def test_copy_into_a_conj_view():
    c = torch.randn(4, dtype=torch.complex64)
    d = torch.zeros(4, dtype=torch.complex64, device="npu")
    d.conj().copy_(c.to("npu"))
    torch.testing.assert_close(d.cpu(), c.conj())


def test_complex_in_a_child_process_does_not_crash():
    """The original crash, as a user meets it, in a process of its own (a crash would kill pytest)."""
    code = ("import torch, torch_bridge, warnings; warnings.simplefilter('ignore');"
            "x = torch.arange(8.); print(torch.allclose(torch.fft.ifft(x.npu()).cpu(), torch.fft.ifft(x)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "True"


@pytest.mark.parametrize("dtype", [None, torch.float16])
def test_non_blocking_to_host(dtype):
    x = torch.randn(3, 5)
    d = x.to("npu")
    y = d.t().to("cpu", non_blocking=True, dtype=dtype)
    ref = x.t().to(dtype or x.dtype)
    assert y.device.type == "cpu" and y.dtype == ref.dtype and y.stride() == ref.stride()
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(d.cpu(), x)   # the source is untouched


def test_pin_memory():
    x = torch.randn(4, 3)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and p.data_ptr() != x.data_ptr()
    assert p.pin_memory() is p   # pinning pinned memory is a no-op, as in torch
    torch.testing.assert_close(p, x)
    torch.testing.assert_close(p.to("npu", non_blocking=True).cpu(), x)
    t = x.t().pin_memory()
    assert t.stride() == x.t().stride() and t.is_pinned()


def test_dataloader_pin_memory():
    ds = torch.utils.data.TensorDataset(torch.randn(8, 2), torch.arange(8))
    batches = list(torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True))
    assert all(t.is_pinned() for b in batches for t in b)
    torch.testing.assert_close(torch.cat([b[0] for b in batches]), ds.tensors[0])


def test_pinned_record_dies_with_the_storage():
    from torch_bridge.device import pinned
    p = torch.randn(1000).pin_memory()
    ptr = p.untyped_storage().data_ptr()
    assert ptr in pinned._PINNED
    del p
    assert ptr not in pinned._PINNED


def test_linear_with_no_inner_dimension():
    """K = 0: the product is empty, so the result is the bias broadcast (torch's answer)."""
    x, w, b = torch.randn(2, 3, 0), torch.randn(4, 0), torch.randn(4)
    torch.testing.assert_close(op_library.linear(x, w, b), torch.nn.functional.linear(x, w, b))
    torch.testing.assert_close(op_library.linear(x, w), torch.zeros(2, 3, 4))
    torch.testing.assert_close(torch.nn.functional.linear(x.npu(), w.npu(), b.npu()).cpu(),
                               torch.nn.functional.linear(x, w, b))


def test_untyped_storage_on_npu():
    """torch's constructor would dereference the missing C++ allocator; ours uses the caching one."""
    before = torch.npu.memory_allocated()
    s = torch.UntypedStorage(100, device="npu")
    assert s.device == torch.device("npu", 0) and s.nbytes() == 100
    assert torch.npu.memory_allocated() > before
    b = torch.UntypedStorage([1, 2, 255], device="npu:0")
    assert b.device.type == "npu" and b.cpu().tolist() == [1, 2, 255]
    assert torch.UntypedStorage(device="npu").nbytes() == 0
    t = torch.TypedStorage(4, dtype=torch.float32, device="npu")
    assert t.device.type == "npu" and t.size() == 4
    assert torch.UntypedStorage(3).device.type == "cpu"   # CPU storages are torch's
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.UntypedStorage(3, device="npu:9")
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.UntypedStorage(-1, device="npu")
    del s, b, t
    assert torch.npu.memory_allocated() == before


def test_matmul_with_no_inner_dimension_is_zeros():
    """K = 0 used to return the output buffer uninitialised (mm_kernel has no k block to start from)."""
    for _ in range(3):
        junk = [torch.full((64, 64), 7.0) for _ in range(16)]   # leave garbage in freed memory
        del junk
        assert torch.equal(op_library.matmul(torch.randn(5, 0), torch.randn(0, 6)), torch.zeros(5, 6))
        assert torch.equal(op_library.matmul(torch.randn(0, 5), torch.randn(6, 0), transpose_a=True,
                                             transpose_b=True), torch.zeros(5, 6))
        assert torch.equal(op_library.bmm(torch.randn(2, 5, 0), torch.randn(2, 0, 6)), torch.zeros(2, 5, 6))
        assert torch.equal((torch.randn(3, 0).npu() @ torch.randn(0, 4).npu()).cpu(), torch.zeros(3, 4))
