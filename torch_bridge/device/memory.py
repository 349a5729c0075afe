"""npu tensors in simulated HBM: device count and capacity, the allocators, tensor creation, CPU aliases.

An npu tensor's storage is built over a block of the device's caching allocator
(`torch._C._construct_storage_from_data_pointer`); a `weakref.finalize` on that storage gives the
block back when the storage dies. The memory is host memory, so `_cpu_alias(t)` is a CPU tensor
viewing the same bytes (a view of the segment's own CPU buffer): the op library's kernels read and
write npu tensors through such aliases without a copy.

Environment: `VINCI_NPU_DEVICES` (device count; default: the hardware config's `devices` field if it
has one, else 1) and `VINCI_NPU_HBM` (bytes per device, with an optional K/M/G suffix; default: the
config's `l2.hbm_capacity`).
"""
from __future__ import annotations

import ctypes
import os
import weakref
from typing import Any

import torch

from torch_bridge.device.allocator import DeviceAllocator

_CPU = torch.device("cpu")
_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_SET = torch.ops.aten.set_.source_Storage_storage_offset
_STORAGE = torch._C._construct_storage_from_data_pointer


def _parse_bytes(text: str, name: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = 1
    for suffix, s in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if t.endswith(suffix):
            t, scale = t[:-1], s
            break
    try:
        value = int(float(t) * scale)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a byte count such as 68719476736, 512M or 16G") from None
    if value <= 0:
        raise ValueError(f"{name}={text!r}: must be positive")
    return value


def _hw() -> Any:
    from simulator.config import load_config
    return load_config()


def _device_count() -> int:
    env = os.environ.get("VINCI_NPU_DEVICES")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"VINCI_NPU_DEVICES={env!r}: expected a device count (1 or more)") from None
        if n < 1:
            raise ValueError(f"VINCI_NPU_DEVICES={env!r}: expected a device count (1 or more)")
        return n
    return int(getattr(_hw(), "devices", 1))


def _hbm_bytes() -> int:
    env = os.environ.get("VINCI_NPU_HBM")
    return _parse_bytes(env, "VINCI_NPU_HBM") if env else int(_hw().l2.hbm_capacity)


DEVICE_COUNT = _device_count()
ALLOCATORS = [DeviceAllocator(i, _hbm_bytes()) for i in range(DEVICE_COUNT)]


def _default_stream_id(index: int) -> int:
    return 0


#: the id of device `index`'s current stream, whose pool new blocks come from (streams.py sets it)
stream_id = _default_stream_id


def check_index(index: int | None, what: str = "device") -> int:
    """`index` as a valid device ordinal (None -> the current device); a clear error otherwise."""
    if index is None:
        from torch_bridge.device import runtime
        return runtime.current_device()
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"{what} index must be an int, got {type(index).__name__}")
    if index < 0 or index >= DEVICE_COUNT:
        raise RuntimeError(f"Invalid device ordinal npu:{index}: this process has {DEVICE_COUNT} npu device"
                           f"{'s' if DEVICE_COUNT != 1 else ''} (npu:0 .. npu:{DEVICE_COUNT - 1}; set "
                           f"VINCI_NPU_DEVICES for more)")
    return index


# ------------------------------------------------------------------ fresh npu TensorImpls per device
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_KEEP: list[Any] = []   # the DLPack structs behind the seeds live as long as the process


def _seed(index: int) -> torch.Tensor:
    """An empty float tensor on npu:`index`. torch._C._acc.create_empty_tensor only makes npu:0 ones;
    DLPack's kDLExtDev maps to PrivateUse1 with any index (no deleter: nothing to free)."""
    if index == 0:
        return torch._C._acc.create_empty_tensor((0,), torch.float32)
    shape, strides, data = (ctypes.c_int64 * 1)(0), (ctypes.c_int64 * 1)(1), (ctypes.c_float * 1)()
    m = _DLManaged(_DLTensor(ctypes.addressof(data), _DLDevice(12, index), 1, _DLDataType(2, 32, 1), shape, strides,
                             0), None, None)
    _KEEP.extend((shape, strides, data, m))
    api = ctypes.pythonapi
    api.PyCapsule_New.restype = ctypes.py_object
    api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    t = torch._C._from_dlpack(api.PyCapsule_New(ctypes.addressof(m), b"dltensor", None))
    assert t.device == torch.device("npu", index), t.device
    return t


_SEEDS: dict[tuple[int, torch.dtype], torch.Tensor] = {}
_DEVICES: list[torch.device] = []


def init_devices() -> None:
    """torch.device objects per device (after the backend is renamed to npu)."""
    _DEVICES.extend(torch.device("npu", i) for i in range(DEVICE_COUNT))


def _fresh(index: int, dtype: torch.dtype) -> torch.Tensor:
    """A new 0-element TensorImpl of `dtype` on npu:`index` (storage replaced by the caller)."""
    if index == 0:
        return torch._C._acc.create_empty_tensor((0,), dtype)
    seed = _SEEDS.get((index, dtype))
    if seed is None:
        base = _SEEDS.get((index, torch.float32))
        if base is None:
            base = _SEEDS[(index, torch.float32)] = _seed(index)
        seed = _SEEDS[(index, dtype)] = torch.ops.aten.view.dtype.redispatch(_CPU_KEYS, base, dtype)
    return seed.detach()


# ------------------------------------------------------------------ creation
def storage_nbytes(size: Any, stride: Any, itemsize: int) -> int:
    n = 1
    for s, st in zip(size, stride):
        if s == 0:
            return 0
        n += (s - 1) * st
    return n * itemsize


def new_storage(nbytes: int, index: int) -> Any:
    """An npu storage of `nbytes` from npu:`index`'s caching allocator (its block returns when it dies)."""
    if nbytes == 0:
        return _STORAGE(0, _DEVICES[index], 0)
    alloc = ALLOCATORS[index]
    block = alloc.malloc(nbytes, stream_id(index))
    st = _STORAGE(block.ptr, _DEVICES[index], nbytes)
    _on_death(st, alloc, block)
    return st


_REFS: dict[int, Any] = {}   # id(weakref) -> weakref: keeps the weakrefs alive until their storage dies


def _on_death(st: Any, alloc: DeviceAllocator, block: Any) -> None:
    """Give `block` back to `alloc` when storage `st` dies (a bare weakref callback: cheaper than
    weakref.finalize, which also registers an atexit hook we do not need)."""
    def dead(ref: Any) -> None:
        del _REFS[id(ref)]
        alloc.free(block)
    ref = weakref.ref(st, dead)
    _REFS[id(ref)] = ref


def empty_strided(size: Any, stride: Any, dtype: torch.dtype, index: int) -> torch.Tensor:
    """A new npu tensor on npu:`index` with these sizes and strides (uninitialised)."""
    size, stride = list(size), list(stride)
    itemsize = dtype.itemsize
    st = new_storage(storage_nbytes(size, stride, itemsize), index)
    return _SET.redispatch(_CPU_KEYS, _fresh(index, dtype), st, 0, size, stride)


def contiguous_strides(size: Any) -> list[int]:
    stride, acc = [], 1
    for s in reversed(list(size)):
        stride.append(acc)
        acc *= max(int(s), 1)
    return stride[::-1]


def channels_last_strides(size: Any) -> list[int]:
    n, c, h, w = size
    return [h * w * c, 1, w * c, c]


def empty(size: Any, dtype: torch.dtype, index: int, memory_format: Any = None) -> torch.Tensor:
    if memory_format == torch.channels_last and len(size) == 4:
        return empty_strided(size, channels_last_strides(size), dtype, index)
    return empty_strided(size, contiguous_strides(size), dtype, index)


_UINT8 = torch.uint8


def adopt(r: torch.Tensor, index: int) -> torch.Tensor:
    """npu tensor over CPU tensor `r`'s memory (an op result), counted by npu:`index`'s allocator; no copy.

    `r` must not be used afterwards (the npu tensor owns its memory now)."""
    ust = r.untyped_storage()
    nbytes = ust.nbytes()
    if nbytes == 0:
        return empty_strided(r.shape, r.stride(), r.dtype, index)
    alloc = ALLOCATORS[index]
    block = alloc.adopt(ust, stream_id(index))
    st = _STORAGE(block.ptr, _DEVICES[index], nbytes)
    _on_death(st, alloc, block)
    return _SET.redispatch(_CPU_KEYS, _fresh(index, r.dtype), st, r.storage_offset(), r.shape, r.stride())


# ------------------------------------------------------------------ CPU aliases
def _cpu_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same memory as npu tensor `t` (same sizes, strides, dtype; zero-copy).

    Writes through the alias change `t`. The alias keeps the memory alive (it views the segment's
    own buffer), so it stays valid even if `t` dies first."""
    if t.device.type == "cpu":
        return t
    dtype = t.dtype
    ust = t.untyped_storage()
    base = ust.data_ptr()
    seg = ALLOCATORS[t.device.index].live.get(base)
    if seg is None:
        if ust.nbytes() == 0:
            return torch.empty_strided(t.shape, t.stride(), dtype=dtype)
        return _raw_alias(t)
    off = base - seg.base
    itemsize = dtype.itemsize
    if off % itemsize:
        return _raw_alias(t)
    return torch.empty(0, dtype=dtype).set_(seg.cpu, off // itemsize + t.storage_offset(), t.shape, t.stride())


def _raw_alias(t: torch.Tensor) -> torch.Tensor:
    """Alias of memory that is not one of our segments (a storage made elsewhere); it does not keep the
    memory alive, so it must not outlive `t`."""
    st = t.untyped_storage()
    cpu = _STORAGE(st.data_ptr(), _CPU, st.nbytes())
    return torch.empty(0, dtype=t.dtype).set_(cpu, t.storage_offset(), t.shape, t.stride())


def host_bytes(st: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 CPU tensor over an npu storage's bytes (valid while the storage lives)."""
    return torch.empty(0, dtype=_UINT8).set_(_STORAGE(st.data_ptr(), _CPU, st.nbytes()))


# ------------------------------------------------------------------ torch.UntypedStorage(..., device="npu")
_STORAGE_NEW: Any = torch._C.StorageBase.__new__


def _storage_new(cls: Any, *args: Any, device: Any = None, **kwargs: Any) -> Any:
    """torch.UntypedStorage's constructor, with npu storages from the caching allocator.

    torch's C++ constructor asks the device's C++ allocator for the memory, and a Python backend has
    none: `torch.UntypedStorage(n, device="npu")` dereferenced a null allocator and killed the
    process. `UntypedStorage(n, device=...)` and `UntypedStorage(sequence, device=...)` of npu are
    made here (the sequence goes through a CPU storage); every other form is torch's."""
    if device is None or kwargs or cls is not torch.UntypedStorage:
        return _STORAGE_NEW(cls, *args, device=device, **kwargs)
    d = torch.device(device)
    if d.type != "npu":
        return _STORAGE_NEW(cls, *args, device=device)
    index = check_index(d.index) if d.index is not None else _current()
    if len(args) > 1:
        raise TypeError(f"UntypedStorage(): expected at most one positional argument (a size or a sequence), "
                        f"got {len(args)}")
    src = None
    if not args:
        nbytes = 0
    elif isinstance(args[0], int):
        if args[0] < 0:
            raise RuntimeError(f"Storage size must be non-negative, but got {args[0]}")
        nbytes = args[0]
    else:
        src = _STORAGE_NEW(cls, args[0])   # torch's own parsing and errors for a sequence of bytes
        nbytes = src.nbytes()
    st = new_storage(nbytes, index)
    if src is not None and nbytes:
        host_bytes(st).copy_(torch.empty(0, dtype=_UINT8).set_(src))
    return st


def _current() -> int:
    return int(torch.npu.current_device())  # type: ignore[attr-defined]


def install_storage_constructor() -> None:
    torch.UntypedStorage.__new__ = _storage_new  # type: ignore[method-assign]
