"""CPU fallback for aten ops without an npu kernel, and the device checks every npu kernel makes.

An op that reaches the PrivateUse1 catch-all (`Library("_", "IMPL").fallback`) runs on the CPU over
zero-copy aliases of its npu arguments, as torch_npu falls back: the first time an op does so, a
warning names it ("... is not currently supported on the NPU backend and will fall back to run on
the CPU"); `fallback_ops()` lists every op that fell back in this process (with counts);
`VINCI_FALLBACK=error` makes a fallback an error instead (torch_npu's strict mode).

Results: an in-place or `out=` result is the npu argument it wrote (written through its alias); a
view result becomes an npu view of the same storage; a new CPU result is copied to the npu device.
"""
from __future__ import annotations

import os
import warnings
from collections import Counter
from typing import Any

import torch
from torch.library import Library

from torch_bridge import profiler as _prof
from torch_bridge.device import memory as _mem

FALLBACKS: Counter[str] = Counter()
_CPU = torch.device("cpu")


def fallback_ops() -> dict[str, int]:
    """Ops that ran on the CPU fallback in this process: {"aten::name.overload": calls}."""
    return dict(FALLBACKS)


def strict() -> bool:
    return os.environ.get("VINCI_FALLBACK", "").lower() in ("error", "strict", "1")


def device_mismatch(op: str, arg: str, found: torch.device, npu: torch.device) -> RuntimeError:
    return RuntimeError(f"Expected all tensors to be on the same device, but got {arg} is on {found}, different "
                        f"from other tensors on {npu} (when checking argument in method {op})")


def common_device(op: str, args: Any, names: Any = None) -> int:
    """The npu device index of an op's tensor arguments; torch's device-mismatch error when they mix
    devices (a 0-dim CPU tensor, a wrapped scalar, is allowed as torch allows it)."""
    index = -1
    dev: torch.device | None = None
    for i, a in enumerate(args):
        ts = a if isinstance(a, (list, tuple)) else (a,)
        for t in ts:
            if not isinstance(t, torch.Tensor):
                continue
            d = t.device
            if d.type == "npu":
                if index < 0:
                    index, dev = d.index, d
                elif d.index != index:
                    raise device_mismatch(op, _argname(names, i), d, dev)  # type: ignore[arg-type]
            elif t.dim() != 0:
                npu = dev or next((x.device for y in args for x in (y if isinstance(y, (list, tuple)) else (y,))
                                   if isinstance(x, torch.Tensor) and x.device.type == "npu"), None)
                if npu is not None:
                    raise device_mismatch(op, _argname(names, i), d, npu)
    return max(index, 0)


def _argname(names: Any, i: int) -> str:
    return names[i] if names and i < len(names) else f"argument #{i}"


def _to_cpu(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return _mem._cpu_alias(a) if a.device.type == "npu" else a
    if isinstance(a, torch.device) and a.type == "npu":
        return _CPU
    if isinstance(a, (list, tuple)):
        return type(a)(_to_cpu(x) for x in a)
    return a


def _npu_inputs(args: Any) -> list[torch.Tensor]:
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.device.type == "npu":
                out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_npu_inputs(a))
    return out


_use_count = torch._C._storage_Use_Count


class _Results:
    """Maps an op's CPU results back to npu tensors: a result in the memory of an npu input becomes
    that input (or an npu view of its storage); a fresh result is adopted by the allocator (no copy)."""

    def __init__(self, index: int, inputs: list[torch.Tensor]) -> None:
        self.index = index
        self.inputs = inputs
        self.adopted: dict[int, torch.Tensor] = {}

    def _view(self, base: torch.Tensor, r: torch.Tensor, ptr: int) -> torch.Tensor:
        off, rem = divmod(r.data_ptr() - ptr, r.element_size())
        v = base if base.dtype == r.dtype else torch.ops.aten.view.dtype(base, r.dtype)
        if rem:
            raise RuntimeError("npu result is not aligned to its dtype inside its storage")
        if (v.shape == r.shape and v.stride() == r.stride() and v.storage_offset() == off and
                v.untyped_storage().data_ptr() == ptr):
            return v
        return torch.ops.aten.as_strided.default(v, r.shape, r.stride(), off)

    def map(self, r: Any) -> Any:
        if isinstance(r, (list, tuple)):
            return type(r)(self.map(x) for x in r)
        if not isinstance(r, torch.Tensor) or r.device.type != "cpu":
            return r
        ust = r.untyped_storage()
        ptr, n = ust.data_ptr(), ust.nbytes()
        if n:
            for a in self.inputs:
                st = a.untyped_storage()
                lo = st.data_ptr()
                if lo <= r.data_ptr() < lo + st.nbytes():
                    return self._view(a, r, lo)
            base = self.adopted.get(ptr)
            if base is not None:
                return self._view(base, r, ptr)
            if _use_count(ust._cdata) <= 2:
                base = _mem.adopt(r, self.index)
                self.adopted[ptr] = base
                return base
        out = _mem.empty_strided(r.shape, r.stride(), r.dtype, self.index)
        if r.numel():
            _mem._cpu_alias(out).copy_(r)
        return out


def run_on_cpu(fn: Any, name: str, args: Any, kwargs: dict[str, Any], names: Any = None,
               keep: tuple[str, ...] = ()) -> Any:
    """fn(*args, **kwargs) with npu tensors replaced by their CPU aliases (kwargs in `keep` stay npu
    tensors), after torch's device check; CPU results mapped back to npu tensors (see _Results)."""
    alias = _mem._cpu_alias
    index = -1
    inputs: list[torch.Tensor] = []
    cargs: list[Any] = []
    mixed = False
    for a in args:          # the common case in one pass: tensors that are all on one npu device
        if type(a) is torch.Tensor or isinstance(a, torch.Tensor):
            d = a.device
            if d.type == "npu" and (index < 0 or d.index == index):
                index = d.index
                inputs.append(a)
                cargs.append(alias(a))
                continue
            mixed = mixed or d.type == "npu" or a.dim() != 0
            cargs.append(a)
        elif isinstance(a, (list, tuple)):
            mixed = True
            cargs.append(_to_cpu(a))
        else:
            cargs.append(_to_cpu(a) if isinstance(a, torch.device) else a)
    if kwargs:
        mixed = True
        ckw = {k: (v if k in keep else _to_cpu(v)) for k, v in kwargs.items()}
    else:
        ckw = kwargs
    if mixed:               # lists, kwargs, CPU tensors or several devices: the full check
        flat = list(args) + list(kwargs.values())
        index = common_device(name, flat, names)
        inputs = _npu_inputs(flat)
    r = fn(*cargs, **ckw)
    return _Results(max(index, 0), inputs).map(r)


def _written(op: Any, args: Any, kwargs: dict[str, Any]) -> list[tuple[int | str, torch.Tensor]]:
    """The npu tensors an op writes (schema `Tensor(a!)`: self of in-place ops, `out=`), by position or name."""
    found: list[tuple[int | str, torch.Tensor]] = []
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        key: int | str = a.name if a.name in kwargs else i
        v = kwargs[key] if isinstance(key, str) else (args[i] if i < len(args) else None)
        if isinstance(v, torch.Tensor) and v.device.type == "npu":
            found.append((key, v))
    return found


def _exact_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU alias of npu tensor `t` over exactly its own block, so a CPU kernel resizing it cannot
    write past the block into its neighbours in the segment (an empty `t` gets fresh CPU memory)."""
    if t.untyped_storage().nbytes() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    return _mem._raw_alias(t)


def _synced(op: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """`op` for run_on_cpu, with its written npu tensors (in-place self, `out=`) passed as exact
    aliases and brought up to date afterwards: a CPU kernel that resizes an `out=` alias (arange into
    an empty tensor) changes only the alias, so the npu tensor is resized the same way (a new allocator
    block when it grows) and the data copied in; a result that is such an alias becomes the npu
    tensor. An `out=` tensor too small for the result cannot grow in place (its alias is its block):
    the op runs again with empty CPU `out=` tensors, whose results are copied in."""
    written = _written(op, args, kwargs)
    if not written:
        return op

    def call(*args: Any, **ckw: Any) -> Any:
        cargs = list(args)
        for key, t in written:
            if isinstance(key, str):
                ckw[key] = _exact_alias(t)
            else:
                cargs[key] = _exact_alias(t)
        try:
            r = op(*cargs, **ckw)
        except RuntimeError as e:
            if "not resizable" not in str(e) or not any(isinstance(key, str) for key, _ in written):
                raise
            for key, t in written:
                if isinstance(key, str):
                    ckw[key] = torch.empty(0, dtype=t.dtype)
            r = op(*cargs, **ckw)
        swap: dict[int, torch.Tensor] = {}
        for key, t in written:
            ca = ckw[key] if isinstance(key, str) else cargs[key]
            if ca.shape == t.shape and ca.stride() == t.stride() and ca.data_ptr() == t.data_ptr():
                continue
            st = t.untyped_storage()
            off, rem = divmod(ca.data_ptr() - st.data_ptr(), t.element_size())
            if st.nbytes() and ca.untyped_storage().data_ptr() == st.data_ptr() and not rem:
                torch.ops.aten.set_.source_Storage_storage_offset(t, st, off, ca.shape, ca.stride())   # restrided
            else:                                                  # the CPU kernel gave the alias new memory
                t.resize_(ca.shape)
                _mem._cpu_alias(t).copy_(ca)
            swap[id(ca)] = _mem._cpu_alias(t)
        if isinstance(r, (list, tuple)):
            return type(r)(swap.get(id(x), x) for x in r)
        return swap.get(id(r), r)
    return call


_KIND = {bool: (torch.bool,), int: (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64),
         float: (torch.float16, torch.bfloat16, torch.float32, torch.float64),
         complex: (torch.complex32, torch.complex64, torch.complex128)}


def _numbers_as_tensors(op: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A wrapped number (the 5 of `x % 5`, a 0-dim tensor to the dispatcher) reaches a Python kernel
    as a Python number, which the CPU op does not take where its schema says Tensor. It goes back as a
    0-dim tensor of the dtype it has in torch's type promotion: that of a tensor argument of its kind
    (int for an int32 tensor stays int32), else the default (int64, the default float dtype, ...)."""
    schema = op._schema.arguments
    slots = [(i, a.name) for i, a in enumerate(schema) if str(a.type) in ("Tensor", "Optional[Tensor]")]
    if not any(type(args[i] if i < len(args) else kwargs.get(n)) in _KIND for i, n in slots):
        return args, kwargs
    dtypes = [t.dtype for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)]

    def tensor(v: Any) -> torch.Tensor:
        kind = _KIND[type(v)]
        dt = next((d for d in dtypes if d in kind), None)
        return torch.tensor(v, dtype=dt) if dt is not None else torch.tensor(v)
    args = list(args)
    for i, n in slots:
        if i < len(args) and type(args[i]) in _KIND:
            args[i] = tensor(args[i])
        elif n in kwargs and type(kwargs[n]) in _KIND:
            kwargs = {**kwargs, n: tensor(kwargs[n])}
    return tuple(args), kwargs


def cpu_fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    """The PrivateUse1 catch-all: run `op` on CPU aliases (see the module docstring)."""
    name = op._schema.name + (f".{op._schema.overload_name}" if op._schema.overload_name else "")
    names = [a.name for a in op._schema.arguments]
    common_device(name, list(args) + list(kwargs.values()), names)
    if strict():
        raise RuntimeError(f"{name} is not currently supported on the NPU backend (VINCI_FALLBACK=error forbids "
                           f"the CPU fallback)")
    if name not in FALLBACKS:
        warnings.warn(f"The operator '{name}' is not currently supported on the NPU backend and will fall back to "
                      f"run on the CPU. This may have performance implications.", UserWarning, stacklevel=2)
    FALLBACKS[name] += 1
    args, kwargs = _numbers_as_tensors(op, args, kwargs)
    fn = _synced(op, args, kwargs)
    if _prof._ACTIVE:   # a row of the open profiles: host time, no kernels, marked as a fallback
        return _prof._run_profiled(name, lambda *a, **k: run_on_cpu(fn, name, a, k, names), args, kwargs,
                                   fallback=True)
    return run_on_cpu(fn, name, args, kwargs, names)


_LIB: Library | None = None


def register() -> None:
    global _LIB
    _LIB = Library("_", "IMPL")
    _LIB.fallback(cpu_fallback, "PrivateUse1")
