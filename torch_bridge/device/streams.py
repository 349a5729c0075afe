"""Streams and events of the npu device, in simulated device time (torch.cuda's semantics).

    s = torch.npu.Stream()
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    with torch.npu.stream(s):
        y = x @ w               # queued on s
    torch.npu.current_stream().wait_stream(s)
    end.record()
    print(start.elapsed_time(end))   # milliseconds of simulated device time

Two clocks. The host runs every kernel eagerly, when the op is called (so `query()` is always True
and `synchronize()` returns at once: by then the work is done). The simulated device has its own
clock: each stream has a position in simulated time (the end of the last work queued on it), and each
AI core of the device the time it becomes free. An op's kernels are timed on the model of the core
(`dsl.record(timed=True)`: a launch identical to an earlier one reuses its time) and placed:

- on their stream, in order: a kernel starts no earlier than the end of the stream's previous work
  (and of any event the stream waited for);
- on the cores: each of the kernel's blocks (the per-core work of its launch, longest first) takes
  the core that is free soonest and starts when both the stream and that core allow. A kernel on
  one stream uses only as many cores as its launch has blocks, and a core that finishes its block
  early takes another stream's next block: kernels on two streams overlap where cores are free.
  Concurrent kernels do not slow each other down (HBM bandwidth is not shared out between them).
- copies take the stream for bytes / bandwidth, and no cores: host <-> device at
  `VINCI_NPU_HOST_GBPS` (default 32 GB/s, a PCIe 5.0 x8 / 4.0 x16 link), device to device at the
  HBM bandwidth of the config (a read and a write per byte).

Events take the position of the stream they are recorded on; `elapsed_time` is the difference in
milliseconds; `wait_event` / `wait_stream` move a stream's position up to the event's. Memory of
the caching allocator is pooled per stream (torch_bridge.device.allocator); `Tensor.record_stream`
makes the freed block's next user wait for the other stream's work, as the CUDA allocator does.

`VINCI_NPU_TIMING=0` turns the simulated timing off (kernels are then not timed at all: ops cost
less host time, `elapsed_time` raises).
"""
from __future__ import annotations

import heapq
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from dsl.record import _LOCAL as _REC_LOCAL
from dsl.record import Recording
from torch_bridge import profiler as _prof
from torch_bridge.device import memory as _mem

__all__ = ["Stream", "Event", "StreamContext", "stream", "current_stream", "default_stream", "set_stream",
           "timing_enabled"]


def _timing_env() -> bool:
    return os.environ.get("VINCI_NPU_TIMING", "1").strip().lower() not in ("0", "off", "false", "no")


_TIMING = _timing_env()


def timing_enabled() -> bool:
    """True unless VINCI_NPU_TIMING=0: npu ops are timed on the model of the core and placed on streams."""
    return _TIMING


def _gbps_env() -> float:
    text = os.environ.get("VINCI_NPU_HOST_GBPS", "32")
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"VINCI_NPU_HOST_GBPS={text!r}: expected GB/s, e.g. 32") from None
    if v <= 0:
        raise ValueError(f"VINCI_NPU_HOST_GBPS={text!r}: must be positive")
    return v


# --------------------------------------------------------------------------------------------
# the simulated device: core free times and the streams' positions

class _Device:
    """One npu device's simulated time: when each AI core is free, the streams' positions (cycles)."""

    def __init__(self, index: int) -> None:
        cfg = _mem._hw()
        self.index = index
        self.hz = cfg.clock_mhz * 1e6
        self.free = [0] * cfg.cores               # cycle at which each core is free (see _free)
        self.pending: tuple[int, list[int]] | None = None
        self.latest = 0                            # max(self.free)
        self.host_bytes_per_cycle = _gbps_env() * 1e9 / self.hz
        self.hbm_bytes_per_cycle = float(cfg.l2.hbm_bytes_per_cycle) * cfg.cores
        self.ids = itertools.count(1)              # stream ids; 0 is the default stream
        self.clock: dict[int, int] = {0: 0}        # stream id -> position
        self.kernels = 0                           # kernels placed (for tests and the profiler)
        self.lock = threading.Lock()

    def place(self, sid: int, run: Any) -> tuple[int, int]:
        """Queue kernel `run` on stream `sid`: (start, end) cycle. See the module docstring."""
        durs = getattr(run, "_block_cycles", None)
        if durs is None:   # the blocks' lengths, longest first (kept on the Run: timed Runs are shared)
            durs = run._block_cycles = sorted((c.end_cycle - c.start_cycle for c in run.profile.per_core),
                                              reverse=True)[: len(self.free)]
        with self.lock:
            ready = self.clock.get(sid, 0)
            if self.latest <= ready:
                # every core is free by `ready`: the blocks start together. The cores' free times are
                # then ready + durs, kept as that pair until another stream needs them one by one.
                self.pending = (ready, durs)
                end = ready + (durs[0] if durs else 0)
                start = ready
                if end > self.latest:
                    self.latest = end
            else:                               # some cores busy (another stream): list scheduling
                free = self._free()
                heap = [(t, k) for k, t in enumerate(free)]
                heapq.heapify(heap)
                start, end = -1, ready
                for d in durs:
                    t, k = heapq.heappop(heap)
                    s = max(t, ready)
                    start = s if start < 0 else min(start, s)
                    free[k] = s + d
                    end = max(end, s + d)
                    heapq.heappush(heap, (s + d, k))
                start = max(start, ready)
                self.latest = max(free)
            self.clock[sid] = end
            self.kernels += 1
        return start, end

    def _free(self) -> list[int]:
        """The cores' free times, with a pending (start, blocks) pattern written out."""
        if self.pending is not None:
            base, durs = self.pending
            free = self.free
            for k in range(len(free)):
                free[k] = base + durs[k] if k < len(durs) else base
            self.pending = None
        return self.free

    def copy(self, sid: int, nbytes: int, host: bool) -> None:
        """Queue a copy of `nbytes` on stream `sid` (host <-> device when `host`, else on the device)."""
        cycles = int(nbytes / self.host_bytes_per_cycle if host else 2 * nbytes / self.hbm_bytes_per_cycle)
        with self.lock:
            self.clock[sid] = self.clock.get(sid, 0) + cycles

    def wait(self, sid: int, cycle: int) -> None:
        with self.lock:
            if self.clock.get(sid, 0) < cycle:
                self.clock[sid] = cycle


_DEVICES: list[_Device] = []


def _device(index: int) -> _Device:
    while len(_DEVICES) <= index:
        _DEVICES.append(_Device(len(_DEVICES)))
    return _DEVICES[index]


# --------------------------------------------------------------------------------------------
# streams

_PRIVATEUSE1 = 20   # c10::DeviceType::PrivateUse1


class Stream(torch.Stream):
    """A queue of work on one npu device (torch.cuda.Stream's twin; a `torch.Stream`, so
    `Tensor.record_stream` takes it). Work queued on one stream runs in order in simulated time;
    work on different streams may overlap. `priority` is kept for the API and does not change the
    simulated order."""

    def __new__(cls, device: Any = None, priority: int = 0, *, _id: int | None = None) -> Stream:
        from torch_bridge.device import runtime
        index = runtime._index(device)
        dev = _device(index)
        sid = next(dev.ids) if _id is None else _id
        dev.clock.setdefault(sid, 0)
        self = super().__new__(cls, stream_id=sid, device_index=index, device_type=_PRIVATEUSE1)
        self.priority = int(priority)
        return self

    priority: int

    def __init__(self, device: Any = None, priority: int = 0, *, _id: int | None = None) -> None:
        pass   # made in __new__ (torch.Stream's fields are set there)

    @property
    def npu_stream(self) -> int:
        """The stream's id on its device (0: the default stream)."""
        return self.stream_id

    # the position in simulated time (cycles); see the module docstring
    @property
    def _clock(self) -> int:
        return _device(self.device_index).clock.get(self.stream_id, 0)

    def wait_event(self, event: Event) -> None:  # type: ignore[override]
        """Work queued on this stream after this call starts after the work `event` captured."""
        if event._cycle is None:
            return          # an event never recorded: nothing to wait for (as CUDA)
        dev = _device(self.device_index)
        # an event of another device: its device time is a different clock; the wait orders nothing
        # on this device's model beyond what the event's own device did (CUDA allows the wait)
        if event._device == self.device_index:
            dev.wait(self.stream_id, event._cycle)

    def wait_stream(self, stream: Stream) -> None:  # type: ignore[override]
        """Work queued on this stream after this call starts after all work queued on `stream` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:  # type: ignore[override]
        """Record `event` (a new one if None) on this stream; returns it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def query(self) -> bool:
        """True: the host has run every kernel queued on the stream by the time the call returns."""
        return True

    def synchronize(self) -> None:
        """Nothing to wait for on the host (kernels run when their op is called)."""

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Stream) and other.device_index == self.device_index
                and other.stream_id == self.stream_id)

    def __hash__(self) -> int:
        return hash((self.device_index, self.stream_id))

    def __repr__(self) -> str:
        return f"<torch.npu.Stream device=npu:{self.device_index} npu_stream={self.stream_id}>"


_DEFAULT: dict[int, Stream] = {}
_LOCAL = threading.local()        # .current: {device index: Stream} for this thread


def default_stream(device: Any = None) -> Stream:
    """The device's default stream (id 0)."""
    from torch_bridge.device import runtime
    index = runtime._index(device)
    s = _DEFAULT.get(index)
    if s is None:
        s = _DEFAULT[index] = Stream(index, _id=0)
    return s


def _current(index: int) -> Stream:
    cur = _LOCAL.__dict__.get("current")
    if cur:
        s = cur.get(index)
        if s is not None:
            return s
    s = _DEFAULT.get(index)
    return s if s is not None else default_stream(index)


def current_stream(device: Any = None) -> Stream:
    """The stream this thread queues work on for `device` (the current device if None)."""
    from torch_bridge.device import runtime
    return _current(runtime._index(device))


def set_stream(stream: Stream) -> None:
    """Make `stream` current for its device on this thread (torch.cuda.set_stream)."""
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream: expected a torch.npu.Stream, got {type(stream).__name__}")
    cur = getattr(_LOCAL, "current", None)
    if cur is None:
        cur = _LOCAL.current = {}
    cur[stream.device_index] = stream


class StreamContext:
    """`with torch.npu.stream(s):` make `s` the current stream (and its device the current device)
    inside the block; both are restored on exit. `None` does nothing."""

    def __init__(self, stream: Stream | None) -> None:
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"torch.npu.stream: expected a torch.npu.Stream or None, got {type(stream).__name__}")
        self.stream = stream
        self._prev: tuple[int, Stream, Stream] | None = None

    def __enter__(self) -> Stream | None:
        from torch_bridge.device import runtime
        s = self.stream
        if s is None:
            return None
        prev_dev = runtime.current_device()
        self._prev = (prev_dev, _current(s.device_index), _current(prev_dev))
        runtime.set_device(s.device_index)
        set_stream(s)
        return s

    def __exit__(self, *exc: Any) -> None:
        from torch_bridge.device import runtime
        if self._prev is None:
            return
        prev_dev, prev_on_s, prev_cur = self._prev
        set_stream(prev_on_s)
        set_stream(prev_cur)
        runtime.set_device(prev_dev)
        self._prev = None


def stream(stream: Stream | None) -> StreamContext:
    """Context manager selecting `stream` (torch.cuda.stream)."""
    return StreamContext(stream)


# --------------------------------------------------------------------------------------------
# events

class Event(torch.Event):
    """A marker in a stream's simulated time (torch.cuda.Event's twin; a `torch.Event`)."""

    _device: int | None
    _cycle: int | None
    enable_timing: bool
    blocking: bool

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> Event:
        if interprocess:
            raise RuntimeError("torch.npu.Event: interprocess events are not supported by the simulated device")
        self = super().__new__(cls, device="npu", enable_timing=bool(enable_timing), blocking=bool(blocking))
        self.enable_timing = bool(enable_timing)
        self.blocking = bool(blocking)
        self._device = None
        self._cycle = None
        return self

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        pass   # made in __new__

    @property
    def device(self) -> torch.device | None:  # type: ignore[override]
        return None if self._device is None else torch.device("npu", self._device)

    def record(self, stream: Stream | None = None) -> None:  # type: ignore[override]
        """Capture the work queued on `stream` (the current stream if None) so far."""
        if stream is None:
            stream = current_stream()
        if not isinstance(stream, Stream):
            raise TypeError(f"Event.record: expected a torch.npu.Stream, got {type(stream).__name__}")
        if self._device is not None and self._device != stream.device_index:
            raise RuntimeError(f"Event device npu:{self._device} does not match recording stream's device "
                               f"npu:{stream.device_index}.")
        self._device = stream.device_index
        self._cycle = stream._clock

    def wait(self, stream: Stream | None = None) -> None:  # type: ignore[override]
        """Make `stream` (the current one if None) wait for this event."""
        (stream if stream is not None else current_stream()).wait_event(self)

    def query(self) -> bool:
        """True: the captured work has run on the host (see the module docstring)."""
        return True

    def synchronize(self) -> None:
        """Nothing to wait for on the host."""

    def elapsed_time(self, end_event: Event) -> float:  # type: ignore[override]
        """Milliseconds of simulated device time between this event and `end_event`."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self._cycle is None or end_event._cycle is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if self._device != end_event._device:
            raise RuntimeError(f"elapsed_time: the events were recorded on different devices "
                               f"(npu:{self._device} and npu:{end_event._device})")
        if not _TIMING:
            raise RuntimeError("elapsed_time: simulated timing is off (VINCI_NPU_TIMING=0)")
        return (end_event._cycle - self._cycle) / _device(self._device or 0).hz * 1e3

    def __repr__(self) -> str:
        where = "not recorded" if self._device is None else f"npu:{self._device} cycle {self._cycle}"
        return f"<torch.npu.Event {where}>"


# --------------------------------------------------------------------------------------------
# running an op's kernels onto the timeline

_OP = threading.local()            # .depth: True inside a timed op (inner ops are part of it)


def _npu_index(args: Any) -> int:
    """The device of the first npu tensor among `args` (lists looked into); the current device if none."""
    for a in args:
        if isinstance(a, torch.Tensor):
            d = a.device
            if d.type == "npu":
                return d.index or 0
        elif isinstance(a, (list, tuple)):
            for t in a:
                if isinstance(t, torch.Tensor) and t.device.type == "npu":
                    return t.device.index or 0
    from torch_bridge.device import runtime
    return runtime.current_device()


def run_timed(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """fn(*args, **kwargs) with its kernels timed and queued on the current stream of its device."""
    if not _TIMING or getattr(_OP, "depth", False):
        return fn(*args, **kwargs)
    stack = _REC_LOCAL.stack
    if stack is None:
        stack = _REC_LOCAL.stack = []
    rec = Recording(timed=True)
    stack.append(rec)
    _OP.depth = True
    try:
        out = fn(*args, **kwargs)
    finally:
        _OP.depth = False
        stack.remove(rec)
    if rec.runs:
        index = _npu_index(args)
        dev = _device(index)
        sid = _current(index).stream_id
        profiled = bool(_prof._ACTIVE)
        for _, run in rec.runs:
            start, end = dev.place(sid, run)
            if profiled:   # a profile's Runs are its own (traced): its trace places them by this
                run._npu_place = (index, sid, start, end)
    return out


def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` run through `run_timed`."""
    def k(*args: Any, **kwargs: Any) -> Any:
        return run_timed(fn, args, kwargs)
    k.__name__ = getattr(fn, "__name__", "op")
    return k


def note_copy(src: torch.Tensor, dst: torch.Tensor) -> None:
    """Queue a copy from `src` to `dst` (at least one on npu) on the current stream of the npu side."""
    if not _TIMING:
        return
    npu = dst if dst.device.type == "npu" else src
    index = npu.device.index or 0
    host = src.device.type != "npu" or dst.device.type != "npu"
    _device(index).copy(_current(index).stream_id, dst.numel() * dst.element_size(), host)


def stream_of_block(index: int) -> int:
    """The id of the current stream of device `index` (the allocator pools blocks by it)."""
    return _current(index).stream_id


def _hook_allocators() -> None:
    """Pool new blocks by the current stream; let freed blocks used on other streams delay their reuse."""
    _mem.stream_id = stream_of_block
    for i, alloc in enumerate(_mem.ALLOCATORS):
        dev = _device(i)
        alloc.stream_clock = lambda sid, dev=dev: dev.clock.get(sid, 0)
        alloc.stream_wait = dev.wait


_hook_allocators()


@contextmanager
def _untimed() -> Iterator[None]:
    """Inside: npu ops are not timed (used by tests comparing with and without timing)."""
    global _TIMING
    old, _TIMING = _TIMING, False
    try:
        yield
    finally:
        _TIMING = old
