"""`torch.npu`: the device runtime API, as torch.cuda / torch_npu.npu offer it.

Devices: `is_available`, `device_count`, `current_device`, `set_device`, `device(i)` (context
manager), `get_device_name`, `get_device_properties`, `synchronize`. Random numbers:
`manual_seed[_all]`, `seed[_all]`, `initial_seed`, `get_rng_state[_all]`, `set_rng_state[_all]`
(one generator per device). Memory: `memory_allocated`, `max_memory_allocated`, `memory_reserved`,
`max_memory_reserved`, `reset_peak_memory_stats`, `reset_max_memory_allocated`, `empty_cache`,
`memory_stats`, `memory_summary`, `mem_get_info`, `set_per_process_memory_fraction`. Streams and
events in simulated time (torch_bridge.device.streams): `Stream`, `Event`, `stream(s)`,
`current_stream`, `default_stream`, `set_stream`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch

from torch_bridge.device import memory as _mem

_local = threading.local()


def _index(device: Any) -> int:
    """A device argument (None, int, "npu:1", torch.device) as a checked ordinal."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"Expected an npu device, got {device}")
        return current_device() if device.index is None else _mem.check_index(device.index)
    return _mem.check_index(device)


# ------------------------------------------------------------------ devices
def is_available() -> bool:
    """True: the simulated device is always there."""
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    """Nothing to do (the device is ready at import); kept for torch.cuda.init parity."""


def _lazy_init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """Number of npu devices (VINCI_NPU_DEVICES, else the hardware config's)."""
    return _mem.DEVICE_COUNT


def current_device() -> int:
    """The ordinal new npu tensors go to when the device string has no index."""
    return int(getattr(_local, "index", 0))


def set_device(device: Any) -> None:
    """Make `device` (int, "npu:i" or torch.device) the current device of this thread."""
    _local.index = _index(device)


class device:
    """Context manager that makes `device` current inside the block (torch.cuda.device's twin)."""

    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = current_device()
        if self.idx >= 0:
            set_device(self.idx)

    def __exit__(self, *exc: Any) -> None:
        if self.idx >= 0:
            set_device(self.prev_idx)


class device_of(device):
    """Context manager that makes the device of tensor `obj` current (a no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor) -> None:
        super().__init__(obj.device.index if obj.device.type == "npu" else None)


@dataclass(frozen=True)
class _NpuDeviceProperties:
    name: str
    total_memory: int
    multi_processor_count: int
    clock_rate_mhz: int
    ub_size: int
    l1_size: int
    index: int

    def __repr__(self) -> str:
        return (f"_NpuDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB, "
                f"multi_processor_count={self.multi_processor_count}, clock_rate_mhz={self.clock_rate_mhz})")


def get_device_properties(device: Any = None) -> _NpuDeviceProperties:
    """Name, HBM size, AI core count (multi_processor_count), clock and on-chip sizes of a device."""
    i = _index(device)
    cfg = _mem._hw()
    return _NpuDeviceProperties(cfg.name, _mem.ALLOCATORS[i].limit, cfg.cores, cfg.clock_mhz, cfg.memory.UB,
                                cfg.memory.L1, i)


def get_device_name(device: Any = None) -> str:
    """The simulated chip's name (the hardware config's, e.g. "ascend910b1")."""
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    _index(device)
    return (0, 0)


def synchronize(device: Any = None) -> None:
    """Wait for the device: kernels run synchronously in this simulation, so there is nothing queued."""
    _index(device)


# ------------------------------------------------------------------ random numbers
_GENERATORS: list[torch.Generator] = []


def _generator(index: int) -> torch.Generator:
    while len(_GENERATORS) <= index:
        g = torch.Generator()
        g.seed()
        _GENERATORS.append(g)
    return _GENERATORS[index]


def default_generator(index: int) -> torch.Generator:
    """The generator random ops on npu:`index` draw from when none is given."""
    return _generator(_mem.check_index(index))


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _generator(current_device()).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator (torch.manual_seed calls this for npu too)."""
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator(current_device()).seed()


def seed_all() -> None:
    for i in range(device_count()):
        _generator(i).seed()


def initial_seed() -> int:
    return _generator(current_device()).initial_seed()


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    """The generator state of `device` as a uint8 CPU tensor."""
    return _generator(_index(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    _generator(_index(device)).set_state(new_state.to("cpu") if new_state.device.type != "cpu" else new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# ------------------------------------------------------------------ memory
def _alloc(device: Any) -> Any:
    return _mem.ALLOCATORS[_index(device)]


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live npu tensors (rounded block sizes) on `device`."""
    return int(_alloc(device).stats.get("allocated_bytes", "all", "current"))


def max_memory_allocated(device: Any = None) -> int:
    return int(_alloc(device).stats.get("allocated_bytes", "all", "peak"))


def memory_reserved(device: Any = None) -> int:
    """Bytes of simulated HBM the caching allocator holds (live blocks plus its cache)."""
    return int(_alloc(device).stats.get("reserved_bytes", "all", "current"))


def max_memory_reserved(device: Any = None) -> int:
    return int(_alloc(device).stats.get("reserved_bytes", "all", "peak"))


def reset_peak_memory_stats(device: Any = None) -> None:
    _alloc(device).reset_peak()


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _alloc(device).reset_accumulated()


def empty_cache() -> None:
    """Release the cached free segments of every device (live tensors are untouched)."""
    for a in _mem.ALLOCATORS:
        a.empty_cache()


def memory_stats(device: Any = None) -> dict[str, Any]:
    """torch.cuda.memory_stats's dict ("allocated_bytes.all.current", "num_ooms", ...)."""
    return _alloc(device).memory_stats()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    return str(_alloc(device).memory_summary())


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device's HBM as the allocator sees it."""
    a = _alloc(device)
    return a.limit - memory_reserved(device), a.limit


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Cap this process's reserved memory on `device` at `fraction` of its HBM (0..1)."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _alloc(device).fraction = float(fraction)


def get_per_process_memory_fraction(device: Any = None) -> float:
    return float(_alloc(device).fraction)


# ------------------------------------------------------------------ streams and events (simulated time)
from torch_bridge.device import streams as _streams  # noqa: E402  (streams reads this module lazily)

Stream, Event, StreamContext = _streams.Stream, _streams.Event, _streams.StreamContext
stream, current_stream, default_stream, set_stream = (_streams.stream, _streams.current_stream,
                                                      _streams.default_stream, _streams.set_stream)
from torch_bridge.device.profiling import profile, profiler  # noqa: E402,F401  (torch.npu.profile / .profiler)
