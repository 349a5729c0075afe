"""Page-locked ("pinned") host memory for the npu device, and non-blocking copies to the host.

torch asks a C++ `PrivateUse1HooksInterface::getPinnedMemoryAllocator` for pinned memory, and a
Python backend cannot provide one (torch._C._acc.PrivateUse1Hooks exposes only is_available,
has_primary_context and is_built). So without this module `x.pin_memory()`,
`DataLoader(pin_memory=True)` and `npu_tensor.to("cpu", non_blocking=True)` raise
NotImplementedError. Here:

- `aten::_pin_memory` / `aten::is_pinned` get CPU kernels: pinning copies the tensor into fresh host
  memory that this module remembers as pinned (by storage address, until the storage dies), and
  `is_pinned()` answers from that record. The simulated link charges the same bandwidth
  (VINCI_NPU_HOST_GBPS) pinned or not; pinned memory here only keeps stock code working.
- `aten::_to_copy` gets an npu kernel: torch's own composite, but never asking for a pinned
  destination. A copy to the host completes before the call returns (the host runs every kernel
  eagerly; simulated time still queues the copy on the current stream), so `non_blocking=True` is
  as safe as torch_npu's after `torch.npu.synchronize()`.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_TO_COPY = torch.ops.aten._to_copy.default
_PINNED: dict[int, Any] = {}   # data_ptr -> weakref of the pinned storage


def _device_ok(device: Any) -> None:
    """torch's check: pinning is for an accelerator (here only npu)."""
    if device is None:
        return
    d = torch.device(device)
    if d.type != "npu":
        raise RuntimeError(f"Expected an accelerator device (npu) to pin memory for, but got {d}")


def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """aten::_pin_memory on a CPU tensor: a copy in host memory recorded as pinned (same sizes,
    strides and storage offset)."""
    _device_ok(device)
    src = self.untyped_storage()
    st = torch.UntypedStorage(src.nbytes())
    if src.nbytes():
        st.copy_(src)
    out = torch.empty(0, dtype=self.dtype).set_(st, self.storage_offset(), self.shape, self.stride())
    ptr = st.data_ptr()
    if ptr:
        _PINNED[ptr] = weakref.ref(st, _forget(ptr))
    return out


def _forget(ptr: int) -> Any:
    def dead(_ref: Any) -> None:
        _PINNED.pop(ptr, None)
    return dead


def is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    _device_ok(device)
    ref = _PINNED.get(self.untyped_storage().data_ptr())
    return ref is not None and ref() is not None


def to_copy(self: torch.Tensor, *, dtype: Any = None, layout: Any = None, device: Any = None,
            pin_memory: Any = None, non_blocking: bool = False, memory_format: Any = None) -> torch.Tensor:
    """aten::_to_copy of an npu tensor: torch's composite kernel without a pinned destination."""
    out = _TO_COPY.redispatch(_CPU_KEYS, self, dtype=dtype, layout=layout, device=device, pin_memory=None,
                              non_blocking=False, memory_format=memory_format)
    if pin_memory and out.device.type == "cpu":
        return globals()["pin_memory"](out)
    return out


def register(lib: torch.library.Library) -> None:
    lib.impl("_pin_memory", pin_memory, "CPU")
    lib.impl("is_pinned", is_pinned, "CPU")
    lib.impl("_to_copy", to_copy, "PrivateUse1")
