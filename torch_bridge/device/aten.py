"""The npu (PrivateUse1) kernels of the aten ops that are not arithmetic: factories, copies between
devices, views and other metadata ops, resize, random number fills, `item()`.

Metadata ops (as_strided, view, _reshape_alias, set_, ...) only make TensorImpls over the same
storage, so they redispatch to torch's own CPU kernels, which never touch the memory. Copies between
host and device are host memcpys through the zero-copy alias (the simulated DMA). Random fills draw
from the device's generator (`torch.npu.manual_seed`) on the host: the op library has no random
normal / uniform kernel (listed in docs/device.md).

`kernel(*names)` registers a function for the npu key; `register()` puts every registered one into
`Library("aten", "IMPL")` (the arithmetic kernels of torch_bridge.device.kernels use the same table).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.library import Library

import op_library
from torch_bridge.device import memory as _mem
from torch_bridge.device import runtime, streams
from torch_bridge.device.fallback import common_device

A = _mem._cpu_alias
aten = torch.ops.aten
_CPU_KEYS = _mem._CPU_KEYS

KERNELS: dict[str, Callable[..., Any]] = {}
#: kernels that do no device work (metadata, factories): registered without the profiler hook
PLAIN: set[str] = set()


def kernel(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the npu kernel of aten ops `names` ("add.out", "relu")."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for n in names:
            KERNELS[n] = fn
        return fn
    return deco


def _index(device: Any) -> int:
    if device is None:
        return runtime.current_device()
    d = device if isinstance(device, torch.device) else torch.device(device)
    i = d.index
    if i is not None and 0 <= i < _mem.DEVICE_COUNT and d.type == "npu":
        return int(i)
    if d.type != "npu":
        raise RuntimeError(f"expected an npu device, got {d}")
    return runtime.current_device() if d.index is None else _mem.check_index(d.index)


def _dtype(dtype: Any) -> torch.dtype:
    return torch.get_default_dtype() if dtype is None else dtype


# ------------------------------------------------------------------ factories
@kernel("empty.memory_format")
def empty(size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
          memory_format: Any = None) -> torch.Tensor:
    return _mem.empty(size, _dtype(dtype), _index(device), memory_format)


@kernel("empty_strided")
def empty_strided(size: Any, stride: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> torch.Tensor:
    return _mem.empty_strided(size, stride, _dtype(dtype), _index(device))


# ------------------------------------------------------------------ copies
@kernel("_copy_from")
def _copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """copy_ between devices (or npu to npu): a host copy through the aliases (the simulated DMA); a
    dtype change on the device runs the op library's cast kernel first."""
    src = _logical(self)
    if (self.device.type == "npu" and self.dtype != dst.dtype and self.dtype in _CAST and dst.dtype in _CAST
            and self.numel()):
        src = op_library.npu_dtype_cast(src.contiguous(), dst.dtype)
    _logical(dst).copy_(src)
    streams.note_copy(self, dst)
    return dst


def _logical(t: torch.Tensor) -> torch.Tensor:
    """The CPU alias of `t` with its lazy conjugate / negative bits (torch's CPU copy resolves them).

    _copy_from is also registered for the Conjugate and Negative keys: left to torch's fallback for
    those keys, a copy of a lazily conjugated npu tensor (`fft.ifft`'s result, `x.conj()`) would
    materialise it by clone -> copy_ -> _copy_from -> the same fallback, until the stack overflows."""
    a = A(t)
    if t.is_conj():
        a = a.conj()
    if t.is_neg():
        a = a._neg_view()
    return a


_CAST = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.bool)


@kernel("_copy_from_and_resize")
def _copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    _logical(dst).copy_(_logical(self))
    streams.note_copy(self, dst)
    return dst


@kernel("record_stream")
def record_stream(self: torch.Tensor, s: Any) -> None:
    """Tensor.record_stream(s): the caching allocator will not hand the tensor's block to new work
    before the work queued on `s` by the time the tensor is freed (simulated time, see streams)."""
    if s.device_type != streams._PRIVATEUSE1 or s.device_index != self.device.index:
        raise RuntimeError(f"record_stream: the stream is on {s.device}, but the tensor is on {self.device}; "
                           f"a tensor can only be recorded on a stream of its own device")
    _mem.ALLOCATORS[self.device.index].record_stream(self.untyped_storage().data_ptr(), s.stream_id)


# ------------------------------------------------------------------ metadata (torch's CPU kernels)
def _redispatch(op: Any) -> Callable[..., Any]:
    def k(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(_CPU_KEYS, *args, **kwargs)
    k.__name__ = f"npu_{op.__name__.replace('.', '_')}"
    return k


for _name in ("as_strided.default", "view.default", "view.dtype", "_reshape_alias.default", "unfold.default",
              "set_.source_Storage", "set_.source_Storage_storage_offset", "set_.source_Tensor", "set_.default",
              "_local_scalar_dense.default", "is_set_to.default", "_unsafe_view.default", "alias.default",
              "_fw_primal.default", "view_as_real.default", "view_as_complex.default"):
    _pkt, _ov = _name.split(".")
    KERNELS[_name.removesuffix(".default")] = _redispatch(getattr(getattr(aten, _pkt), _ov))
    PLAIN.add(_name.removesuffix(".default"))
PLAIN.update(("empty.memory_format", "empty_strided", "resize_", "_local_scalar_dense", "record_stream"))


@kernel("_local_scalar_dense")
def _local_scalar_dense(self: torch.Tensor) -> Any:
    return A(self).item()


@kernel("_has_compatible_shallow_copy_type")
def _has_compatible_shallow_copy_type(self: torch.Tensor, from_: torch.Tensor) -> bool:
    """Dense CPU and npu tensors can take each other's TensorImpl (`param.data = t`), as CPU and CUDA
    ones can: torch's C++ check lists no PrivateUse1 and leaves it to this op. Without it `module.to("npu")`
    replaced every Parameter, and a ScriptModule (torch.jit.trace / load) could not move at all."""
    return self.layout == torch.strided and from_.layout == torch.strided and {self.device.type, from_.device.type} <= {
        "cpu", "npu"}


PLAIN.add("_has_compatible_shallow_copy_type")


@kernel("resize_")
def resize_(self: torch.Tensor, size: Any, memory_format: Any = None) -> torch.Tensor:
    """Resize in place; growing past the storage moves the data to a new block of the allocator."""
    size = list(size)
    stride = (_mem.channels_last_strides(size) if memory_format == torch.channels_last and len(size) == 4
              else _mem.contiguous_strides(size))
    need = _mem.storage_nbytes(size, stride, self.element_size()) + self.storage_offset() * self.element_size()
    st = self.untyped_storage()
    if need > st.nbytes():
        new = _mem.new_storage(int(need), self.device.index)
        if st.nbytes():
            _mem.host_bytes(new)[: st.nbytes()].copy_(_mem.host_bytes(st))
        st = new
    return aten.set_.source_Storage_storage_offset.redispatch(_CPU_KEYS, self, st, self.storage_offset(), size,
                                                              stride)


# ------------------------------------------------------------------ random fills (device generator, on the host)
def _gen(self: torch.Tensor, generator: Any) -> torch.Generator:
    return generator if generator is not None else runtime.default_generator(self.device.index)


@kernel("normal_")
def normal_(self: torch.Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> torch.Tensor:
    A(self).normal_(mean, std, generator=_gen(self, generator))
    return self


@kernel("uniform_")
def uniform_(self: torch.Tensor, from_: float = 0.0, to: float = 1.0, *, generator: Any = None) -> torch.Tensor:
    A(self).uniform_(from_, to, generator=_gen(self, generator))
    return self


@kernel("bernoulli_.float")
def bernoulli_(self: torch.Tensor, p: float = 0.5, *, generator: Any = None) -> torch.Tensor:
    A(self).bernoulli_(p, generator=_gen(self, generator))
    return self


@kernel("random_.from")
def random_from(self: torch.Tensor, from_: int, to: Any = None, *, generator: Any = None) -> torch.Tensor:
    A(self).random_(from_, to, generator=_gen(self, generator))
    return self


@kernel("random_.to")
def random_to(self: torch.Tensor, to: int, *, generator: Any = None) -> torch.Tensor:
    A(self).random_(to, generator=_gen(self, generator))
    return self


@kernel("random_")
def random_(self: torch.Tensor, *, generator: Any = None) -> torch.Tensor:
    A(self).random_(generator=_gen(self, generator))
    return self


@kernel("exponential_")
def exponential_(self: torch.Tensor, lambd: float = 1.0, *, generator: Any = None) -> torch.Tensor:
    A(self).exponential_(lambd, generator=_gen(self, generator))
    return self


@kernel("randperm.generator_out")
def randperm_out(n: int, *, generator: Any = None, out: torch.Tensor) -> torch.Tensor:
    r = torch.randperm(n, generator=_gen(out, generator), dtype=out.dtype)
    out.resize_(r.shape)
    A(out).copy_(r)
    return out


# ------------------------------------------------------------------ registration
_LIB: Library | None = None


def check_devices(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` behind torch's device checks (the ones codegen puts in front of backend kernels)."""
    def k(*args: Any, **kwargs: Any) -> Any:
        common_device(name, list(args) + list(kwargs.values()))
        return fn(*args, **kwargs)
    k.__name__ = fn.__name__
    return k


def _device_op(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as device work: its kernels timed and queued on the current stream (streams.run_timed),
    and, while a profile is open (`torch.npu.profile()` / `torch_bridge.profile()`), run through
    `profiler._run_profiled` so the op gets a row named `aten::<name>` with its kernels."""
    from torch_bridge import profiler as _prof

    qual = "aten::" + name.removesuffix(".default")
    run_timed = streams.run_timed

    def k(*args: Any, **kwargs: Any) -> Any:
        if _prof._ACTIVE:
            return run_timed(_prof._run_profiled, (qual, fn, args, kwargs), {})
        return run_timed(fn, args, kwargs)
    k.__name__ = getattr(fn, "__name__", name)
    return k


def register() -> None:
    """Register every kernel of KERNELS for the npu key (the modules that fill it are imported here)."""
    global _LIB
    # fill KERNELS: arithmetic ops, GradScaler's, SDPA, the nn ops of kernels_nn
    from torch_bridge.device import amp, attention, kernels, kernels_nn  # noqa: F401
    _LIB = Library("aten", "IMPL")
    for name, fn in KERNELS.items():
        _LIB.impl(name, fn if name in PLAIN else _device_op(name, fn), "PrivateUse1")
    from torch_bridge.device import pinned
    pinned.register(_LIB)
    for name in ("_copy_from", "_copy_from_and_resize"):   # see _logical
        for key in ("Conjugate", "Negative"):
            _LIB.impl(name, KERNELS[name], key)
