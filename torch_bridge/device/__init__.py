"""The `npu` device: PrivateUse1 renamed `npu`, the `torch.npu` module, simulated HBM, aten kernels.

Importing this package (done by `import torch_bridge`) makes the simulated chip a PyTorch device,
as torch_npu makes Ascend one: `torch.randn(3, device="npu")`, `x.npu()`, `model.to("npu")`,
`torch.npu.memory_allocated()`; aten ops on npu tensors run on the op library's DSL kernels
(torch_bridge.device.kernels), the rest fall back to the CPU with a warning
(torch_bridge.device.fallback). See docs/device.md.

Rooms: `memory` (device count, HBM capacity, tensor creation, zero-copy CPU aliases) over
`allocator` (the caching allocator); `runtime` (the `torch.npu` functions); `aten` (factories,
copies, views, random fills) and `kernels` (arithmetic on the op library); `fallback` (the CPU
fallback and device checks).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_bridge.device import aten, fallback, memory, runtime, streams
from torch_bridge.device.fallback import fallback_ops
from torch_bridge.device.memory import _cpu_alias

__all__ = ["fallback_ops", "_cpu_alias", "runtime", "memory", "register"]

_REGISTERED = False


def register() -> None:
    """Make PrivateUse1 the `npu` device (once per process; before the first `.backward()`)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    _setup_privateuseone_for_python_backend("npu", backend_module=runtime)
    memory.init_devices()
    memory.install_storage_constructor()
    fallback.register()
    aten.register()
    from torch_bridge import ops
    ops.register_impls("PrivateUse1", wrap=_npu_op)
    torch.serialization.register_package(5, _npu_tag, _npu_deserialize)
    _REGISTERED = True


def _npu_tag(obj: object) -> str | None:
    if isinstance(obj, (torch.UntypedStorage, torch.storage.TypedStorage)) and obj.device.type == "npu":
        return f"npu:{obj.device.index or 0}"
    return None


def _npu_deserialize(obj: Any, location: str) -> Any:
    """torch.load onto npu (saved there, or `map_location="npu[:i]"`): a storage from the caching
    allocator filled from the loaded bytes. (torch's own path builds `UntypedStorage(n, device=npu)`,
    which needs a C++ allocator the Python backend does not have.)"""
    if not location.startswith("npu"):
        return None
    index = memory.check_index(int(location.split(":")[1]) if ":" in location else runtime.current_device())
    if obj.device.type == "npu" and obj.device.index == index:
        return obj
    t = memory.empty_strided([obj.nbytes()], [1], torch.uint8, index)
    st = t.untyped_storage()
    if obj.nbytes():
        memory.host_bytes(st).copy_(torch.empty(0, dtype=torch.uint8, device=obj.device).set_(obj))
    return st


def _npu_op(qual: str, impl: Callable[..., Any]) -> Callable[..., Any]:
    """A torch.ops.npu impl taking npu tensors: the same impl on their CPU aliases."""
    names = None

    name = f"npu::{qual}"
    run_timed, run_on_cpu = streams.run_timed, fallback.run_on_cpu

    def k(*args: Any, **kwargs: Any) -> Any:
        return run_timed(run_on_cpu, (impl, name, args, kwargs, names), {})
    k.__name__ = getattr(impl, "__name__", qual) + "_npu"
    return k


register()
torch.npu = runtime  # type: ignore[attr-defined]  # also set by _register_device_module; explicit for mypy
