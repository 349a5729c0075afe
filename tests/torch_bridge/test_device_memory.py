"""The npu caching allocator: stats around allocations, empty_cache, pools, split/merge, OOM."""
from __future__ import annotations

import gc

import pytest
import torch

import torch_bridge  # noqa: F401
from torch_bridge.device.allocator import (
    LARGE_BUFFER,
    ROUND,
    SMALL_BUFFER,
    SMALL_SIZE,
    DeviceAllocator,
    round_size,
    segment_size,
)

MiB = 1 << 20


def test_rounding_and_segment_sizes():
    assert round_size(1) == ROUND == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert segment_size(512) == SMALL_BUFFER == 2 * MiB and segment_size(SMALL_SIZE) == SMALL_BUFFER
    assert segment_size(SMALL_SIZE + 512) == LARGE_BUFFER == 20 * MiB
    assert segment_size(10 * MiB) == 10 * MiB and segment_size(11 * MiB + 1) == 12 * MiB


def test_split_merge_and_reuse():
    a = DeviceAllocator(0, 64 * MiB)
    b1 = a.malloc(1000)                    # small pool: a 2 MiB segment split into 1024 + rest
    b2 = a.malloc(1000)
    assert b1.size == b2.size == 1024 and b2.ptr == b1.ptr + 1024 and len(a.segments) == 1
    st = a.memory_stats()
    assert st["allocated_bytes.all.current"] == 2048 and st["reserved_bytes.all.current"] == 2 * MiB
    assert st["requested_bytes.all.current"] == 2000 and st["allocation.small_pool.current"] == 2
    assert st["inactive_split.all.current"] == 1          # the free tail of the segment
    a.free(b1)
    b3 = a.malloc(600)                     # best fit: the freed 1024 block, split to 1024 (rest < 512 kept)
    assert b3.ptr == b1.ptr and b3.size == 1024
    a.free(b3)
    a.free(b2)                             # all three pieces merge back into one free segment
    assert len(a._free[0]) == 1 and a._blocks[a.segments[0].base].size == 2 * MiB
    assert a.memory_stats()["inactive_split.all.current"] == 0
    assert a.allocated() == 0 and a.reserved() == 2 * MiB
    big = a.malloc(3 * MiB)                # large pool: a 20 MiB segment
    assert big.pool == 1 and a.reserved() == 22 * MiB
    a.free(big)
    a.empty_cache()
    assert a.reserved() == 0 and a.segments == []
    st = a.memory_stats()
    assert st["reserved_bytes.all.peak"] == 22 * MiB and st["num_device_alloc"] == st["num_device_free"] == 2


def test_per_stream_pools():
    a = DeviceAllocator(0, 64 * MiB)
    b = a.malloc(4096, stream=0)
    a.free(b)
    c = a.malloc(4096, stream=1)           # a block freed on stream 0 is not handed to stream 1
    assert c.segment is not b.segment and c.stream == 1
    d = a.malloc(4096, stream=0)
    assert d.ptr == b.ptr


def test_allocator_oom_retries_cache_then_raises():
    a = DeviceAllocator(0, 24 * MiB)
    x = a.malloc(3 * MiB)                  # 20 MiB segment
    a.free(x)                              # cached
    y = a.malloc(SMALL_SIZE)               # 2 MiB small segment: 22 MiB reserved
    z = a.malloc(21 * MiB)                 # a 22 MiB segment: only fits once the cached 20 MiB one is released
    assert a.memory_stats()["num_alloc_retries"] == 1 and a.reserved() == 24 * MiB
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 4.00 MiB \(a new segment of 20.00 MiB\)\. "
                                                     r"NPU 0 has a total capacity of 24.00 MiB of which 0 bytes is free"):
        a.malloc(4 * MiB)
    assert a.memory_stats()["num_ooms"] == 1 and y.allocated and z.allocated and a.reserved() == 24 * MiB
    a.free(y)
    assert a.malloc(1000).ptr == y.ptr     # the allocator still works after the OOM


def test_memory_stats_around_tensors_and_empty_cache():
    torch.npu.empty_cache()
    gc.collect()
    base_alloc = torch.npu.memory_allocated()
    torch.npu.reset_peak_memory_stats()
    x = torch.empty(1000, device="npu")    # 4000 bytes -> a 4096 block
    assert torch.npu.memory_allocated() == base_alloc + 4096
    assert torch.npu.memory_reserved() >= torch.npu.memory_allocated()
    y = torch.empty(5 * MiB // 4, device="npu")   # 5 MiB -> large pool
    assert torch.npu.memory_allocated() == base_alloc + 4096 + 5 * MiB
    peak = torch.npu.max_memory_allocated()
    assert peak == base_alloc + 4096 + 5 * MiB
    reserved = torch.npu.memory_reserved()
    ptr = y.data_ptr()
    del y
    assert torch.npu.memory_allocated() == base_alloc + 4096
    assert torch.npu.memory_reserved() == reserved          # cached, not released
    y2 = torch.empty(5 * MiB // 4, device="npu")
    assert y2.data_ptr() == ptr                              # the cached block is reused
    del y2
    assert torch.npu.max_memory_allocated() == peak
    torch.npu.empty_cache()
    assert torch.npu.memory_reserved() < reserved
    assert torch.npu.max_memory_reserved() >= reserved
    torch.npu.reset_peak_memory_stats()
    assert torch.npu.max_memory_allocated() == torch.npu.memory_allocated()
    st = torch.npu.memory_stats()
    assert st["allocated_bytes.all.current"] == torch.npu.memory_allocated()
    assert st["allocated_bytes.large_pool.freed"] >= 10 * MiB
    summary = torch.npu.memory_summary()
    assert "NPU memory summary, device ID 0" in summary and "Allocated memory" in summary
    assert x.is_npu


def test_op_results_are_counted():
    torch.npu.empty_cache()
    before = torch.npu.memory_allocated()
    a = torch.ones(256, 256, device="npu")
    b = a + a                              # the kernel's output buffer, adopted (no copy)
    assert torch.npu.memory_allocated() == before + 2 * 256 * 256 * 4
    assert b.cpu()[0, 0].item() == 2.0
    del b
    assert torch.npu.memory_allocated() == before + 256 * 256 * 4


def test_oom_raises_and_process_carries_on():
    keep = torch.arange(1000, dtype=torch.float32).npu()
    limit = torch.npu.get_device_properties(0).total_memory
    try:
        torch.npu.set_per_process_memory_fraction(64 * MiB / limit)
        with pytest.raises(torch.OutOfMemoryError, match=r"NPU out of memory. Tried to allocate 128.00 MiB"):
            torch.empty(32 * MiB, device="npu")              # 128 MiB of f32
        with pytest.raises(torch.OutOfMemoryError, match="total capacity of 64.00 MiB"):
            torch.ones(8192, 8192, device="npu")             # 256 MiB
        assert torch.npu.memory_stats()["num_ooms"] >= 2
        # existing tensors intact, smaller allocations and kernels still work
        assert torch.equal(keep.cpu(), torch.arange(1000, dtype=torch.float32))
        y = (keep * 2).cpu()
        assert y[999].item() == 1998.0
    finally:
        torch.npu.set_per_process_memory_fraction(1.0)
    z = torch.empty(32 * MiB, device="npu")
    assert z.numel() == 32 * MiB
    del z
    torch.npu.empty_cache()


def test_set_fraction_bad_value():
    with pytest.raises(ValueError, match="Invalid fraction value: 1.5"):
        torch.npu.set_per_process_memory_fraction(1.5)
