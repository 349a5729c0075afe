"""torch_npu tutorial, part 3: device memory around allocations and empty_cache().

The caching allocator keeps freed blocks for reuse: memory_allocated() falls when a tensor dies,
memory_reserved() only when empty_cache() gives the cached segments back.
Run: python examples/npu/memory_stats.py
"""
import torch

import torch_bridge  # noqa: F401

MiB = 2 ** 20


def show(when: str) -> None:
    print(f"{when:<28} allocated {torch.npu.memory_allocated() / MiB:8.2f} MiB   "
          f"reserved {torch.npu.memory_reserved() / MiB:8.2f} MiB")


torch.npu.reset_peak_memory_stats()
show("start")
x = torch.empty(1024, 1024, device="npu")          # 4 MiB
y = torch.empty(256, 1024, device="npu")           # 1 MiB
show("after two tensors")
del x
show("after del x")
torch.npu.empty_cache()
show("after empty_cache()")
print(f"peak allocated {torch.npu.max_memory_allocated() / MiB:.2f} MiB")
print(torch.npu.memory_summary())

# past the device's capacity: a clear OutOfMemoryError, and the process carries on
torch.npu.set_per_process_memory_fraction(0.5 * 2 ** 30 / torch.npu.get_device_properties().total_memory)
try:
    torch.empty(2 ** 30, device="npu")              # 4 GiB against a 512 MiB cap
except torch.OutOfMemoryError as e:
    print("OutOfMemoryError:", ". ".join(str(e).split(". ")[:2]) + ".")
torch.npu.set_per_process_memory_fraction(1.0)
print("y is intact:", y.shape, y.device)
