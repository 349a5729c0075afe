"""The npu device in torch.profiler, and `torch.npu.profile` / `torch.npu.profiler`.

    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        loss = model(x).sum(); loss.backward(); opt.step()
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=10))
    prof.export_chrome_trace("step.json")      # host ops, npu kernels, per-core pipe tracks

What torch 2.13 offers a PrivateUse1 device from Python: the session itself runs (the device is
listed by `torch.profiler.supported_activities()`, as `ProfilerActivity.NPU`, and the profiler
takes state KINETO_PRIVATEUSE1), but device events come only from C++: a kineto
`IActivityProfiler` registered with `REGISTER_PRIVATEUSE1_PROFILER`
(torch/csrc/profiler/standalone/privateuse1_profiler.h) or, for the legacy path, `ProfilerStubs`
given to `registerPrivateUse1Methods` (torch/csrc/profiler/stubs/base.h). Neither has a Python
binding, so kineto itself never sees an npu kernel.

This module adds them on the Python side of torch's profiler, where torch builds its results: while
a torch.profiler session records the npu device (its `use_device` is "npu"), a
`torch_bridge.profile` runs with it and times every kernel on the model of the core, and each op
call on npu tensors is marked in kineto's trace (a `[npu launch] #<n>` range inside torch's event of
the call). When torch turns kineto's events into `FunctionEvent`s, the markers are taken out and
their ops' kernels become torch's device events: a `FunctionEvent` of device type PrivateUse1 per
launch (its time the simulated one) and a kernel of the op's CPU event, so torch's own
`key_averages().table()` gets its "Self NPU" / "NPU total" columns, `events()` lists the kernels,
and `sort_by="self_device_time_total"` works, under the names "cuda_time_total" and
"npu_time_total" too. `export_chrome_trace` merges
the kernels into kineto's file: per npu device a stream process (kernel slices, the ops' device
spans, an arrow from each host op to its kernels) and a process per core with a track per pipe.

The device timeline in torch's results: a kernel starts at its op's call on the host clock, or when
the stream's previous kernel ends if that is later (one stream per device today; `_place` is where
streams would be told apart), and lasts its simulated time. The host clock includes the timing
model replaying every kernel, so kernels look sparse under slow host ops; the sum of the kernel
times (the "Self NPU time total") is the simulated device time of the block. A CPU-only session
(no PrivateUse1 activity) is left alone: torch refuses device times without a device in its
table, and timing kernels would slow it down; `torch_bridge.record_function` ranges show in it.

`torch.npu.profile` is `torch_bridge.profile` (the simulator's own table: cycles, roofline
efficiency, bound pipe, pipe utilisation; see docs/profiling.md). `torch.npu.profiler` is
torch_npu's spelling of torch.profiler: `profile` (CPU and NPU activities by default),
`ProfilerActivity` (with `.NPU`), `schedule`, `tensorboard_trace_handler`, `record_function`;
`simulated_profile(prof)` returns the `torch_bridge.profile` that ran with a torch.profiler session.
"""
from __future__ import annotations

import gzip
import itertools
import json
import sys
import types
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import torch
from torch._C._profiler import _RecordFunctionFast
from torch.autograd import DeviceType
from torch.autograd import profiler as _ap
from torch.autograd.profiler_util import EventList, FunctionEvent, FunctionEventAvg

from torch_bridge import profiler as _bridge
from torch_bridge import profiler_trace as _trace

__all__ = ["profile", "profiler", "set_trace_options", "simulated_profile"]

#: name prefix of the marker range put around each npu op call in kineto's trace
_MARK = "[npu launch] #"
#: process ids of the npu devices in a merged trace: above Linux's pid range (2**22) and kineto's
#: small device ids; device d's stream is _NPU_PID0 + 1000 d, its core k _NPU_PID0 + 1000 d + 100 + k
_NPU_PID0 = 1 << 24
_KERNEL_TID, _OPS_TID0 = 1, 10
#: flow ids of the merged trace start here (kineto numbers its own arrows from 1)
_FLOW0 = 1 << 40

#: the torch_bridge profiles running with torch.profiler sessions now
_SESSIONS: list[_bridge.profile] = []
#: what export_chrome_trace puts on the core tracks (set_trace_options)
_TRACE: dict[str, Any] = {"instructions": True, "max_events_per_core": None}


def set_trace_options(instructions: bool = True, max_events_per_core: int | None = None) -> None:
    """What torch.profiler's `export_chrome_trace` writes on the npu core tracks: the kernels'
    instructions inside their pipe slices (`instructions=False` leaves them out: a much smaller file
    for a big model), at most `max_events_per_core` of each kernel's core."""
    _TRACE["instructions"] = bool(instructions)
    _TRACE["max_events_per_core"] = max_events_per_core


def _mark(ev: _bridge.OpEvent) -> Any:
    return _RecordFunctionFast(f"{_MARK}{ev.seq}")


def _records_npu(tprof: Any) -> bool:
    return tprof.use_device == "npu"


def simulated_profile(prof: Any) -> _bridge.profile:
    """The `torch_bridge.profile` that ran with torch.profiler session `prof` (a
    `torch.profiler.profile` or `torch.autograd.profiler.profile` that recorded the npu device):
    its table has cycles, efficiency and bound pipes, its totals the pipe utilisation."""
    inner = getattr(prof, "profiler", None) or prof
    sim = getattr(inner, "_npu_profile", None)
    if sim is None:
        raise RuntimeError("simulated_profile(): this profiler did not record the npu device; open it with "
                           "activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]")
    return sim


# -------------------------------------------------------------------------------------------- session
_ORIG: dict[str, Callable[..., Any]] = {}


def _start_trace(self: Any) -> None:
    _ORIG["_start_trace"](self)
    if not _records_npu(self):
        return
    sim = _bridge.profile(record_shapes=bool(self.record_shapes))
    sim.start()
    self._npu_profile = sim
    _SESSIONS.append(sim)
    _bridge._TORCH_MARK = _mark


def _stop(self: Any) -> None:
    sim = getattr(self, "_npu_profile", None)
    if sim is None or sim not in _SESSIONS:
        return
    _SESSIONS.remove(sim)
    if not _SESSIONS:
        _bridge._TORCH_MARK = None
    sim.stop()


def _exit(self: Any, exc_type: Any, exc_val: Any, exc_tb: Any) -> Any:
    _stop(self)     # before torch's exit: with acc_events it builds the results at once
    return _ORIG["__exit__"](self, exc_type, exc_val, exc_tb)


def _ensure_function_events(self: Any) -> None:
    _ORIG["_ensure_function_events"](self)
    sim = getattr(self, "_npu_profile", None)
    events = self._function_events
    if sim is None or events is None or getattr(self, "_npu_merged", None) is events or sim in _SESSIONS:
        return
    _merge_events(events, sim)
    self._npu_merged = events


def _export_chrome_trace(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
    out = _ORIG["export_chrome_trace"](self, path, *args, **kwargs)
    sim = getattr(self, "_npu_profile", None)
    if sim is not None and sim not in _SESSIONS:
        _merge_trace(path, sim, bool(_TRACE["instructions"]), _TRACE["max_events_per_core"])
    return out


def install() -> None:
    """Hook the npu device into torch.autograd.profiler.profile, the session behind
    torch.profiler.profile (once; the hooks do nothing for sessions without the npu device)."""
    if _ORIG:
        return
    cls = _ap.profile
    hooks = {"_start_trace": _start_trace, "__exit__": _exit,
             "_ensure_function_events": _ensure_function_events, "export_chrome_trace": _export_chrome_trace}
    for name, fn in hooks.items():
        orig = getattr(cls, name)
        _ORIG[name] = orig
        fn.__doc__ = orig.__doc__
        setattr(cls, name, fn)
    # the device's own names for torch's device columns, so sort_by="self_npu_time_total" works as
    # "self_cuda_time_total" does (torch's table maps only cuda, xpu and privateuse1 to device)
    for c in (FunctionEvent, FunctionEventAvg):
        for alias, attr in (("npu_time_total", "device_time_total"), ("self_npu_time_total", "self_device_time_total")):
            if not hasattr(c, alias):
                setattr(c, alias, property(attrgetter(attr)))


# -------------------------------------------------------------------------------------------- results
def _place(kernels: list[_bridge.KernelLaunch], launch_us: dict[int, float], t0: float) -> list[float]:
    """Start (us, the host clock of `launch_us`) of each kernel on its device's stream: at its op's
    call (`launch_us[op.seq]`) or when the previous kernel of the stream ends, whichever is later;
    a kernel without a marked op (a direct launch) follows the previous one. One stream per device."""
    ends: dict[int, float] = {}
    starts = []
    for k in kernels:
        dev = _device_of(k)
        end = ends.get(dev, t0)
        t = launch_us.get(k.op.seq) if k.op is not None else None
        start = end if t is None else max(end, t)
        starts.append(start)
        ends[dev] = start + k.seconds * 1e6
    return starts


def _device_of(k: _bridge.KernelLaunch) -> int:
    op = k.op
    while op is not None and op.device < 0:
        op = op.parent
    return op.device if op is not None else 0


def _merge_events(events: EventList, sim: _bridge.profile) -> None:
    """Take the markers out of torch's events and add the simulated kernels (module docstring)."""
    launch: dict[int, float] = {}
    owner: dict[int, FunctionEvent] = {}
    keep: list[FunctionEvent] = []
    for fe in events:
        if not fe.name.startswith(_MARK):
            keep.append(fe)
            continue
        seq = int(fe.name[len(_MARK):])
        launch[seq] = fe.time_range.start
        parent = fe.cpu_parent
        for c in fe.cpu_children:
            c.cpu_parent = parent
        if parent is not None:
            owner[seq] = parent
            parent.cpu_children = [c for c in parent.cpu_children if c is not fe] + fe.cpu_children
    kernels = sim.kernels()
    starts = _place(kernels, launch, min((fe.time_range.start for fe in keep), default=0.0))
    next_id = max((fe.id for fe in keep), default=0) + 1
    use_device = events._use_device
    for i, (k, start) in enumerate(zip(kernels, starts)):
        dev, us = _device_of(k), k.seconds * 1e6
        keep.append(FunctionEvent(
            id=next_id + i, name=k.name, thread=0, start_us=start, end_us=start + us, overload_name="",
            trace_name=k.name, input_shapes=[], stack=[], use_device=use_device, device_type=DeviceType.PrivateUse1,
            device_index=dev, device_resource_id=0))
        parent = owner.get(k.op.seq) if k.op is not None else None
        if parent is not None:
            parent.append_kernel(k.name, dev, us)
    events.clear()
    events.extend(keep)


def _merge_trace(path: str, sim: _bridge.profile, instructions: bool = True,
                 max_events_per_core: int | None = None) -> None:
    """Add the simulated kernels to kineto's Chrome trace at `path` (module docstring)."""
    with open(path, "rb") as f:
        raw = f.read()
    packed = raw[:2] == b"\x1f\x8b"
    doc = json.loads(gzip.decompress(raw) if packed else raw)
    events: list[dict[str, Any]] = []
    launch: dict[int, float] = {}
    anchor: dict[int, tuple[Any, Any]] = {}
    for e in doc.get("traceEvents", []):
        name = e.get("name")
        if e.get("ph") == "X" and isinstance(name, str) and name.startswith(_MARK):
            seq = int(name[len(_MARK):])
            launch[seq], anchor[seq] = float(e["ts"]), (e["pid"], e["tid"])
        else:
            events.append(e)
    host = [float(e["ts"]) for e in events if e.get("ph") == "X" and isinstance(e.get("pid"), int)]
    kernels = sim.kernels()
    starts = _place(kernels, launch, min(host, default=0.0))
    flow = itertools.count(_FLOW0)
    used: dict[int, dict[int, set[int]]] = {}
    ops_tids: dict[Any, int] = {}
    spans: dict[int, list[float]] = {}
    for i, (k, start) in enumerate(zip(kernels, starts)):
        dev = _device_of(k)
        pid = _NPU_PID0 + 1000 * dev
        dur = k.seconds * 1e6
        events.append({"name": k.label, "cat": "kernel", "ph": "X", "pid": pid, "tid": _KERNEL_TID,
                       "ts": start, "dur": dur, "args": {**_trace.kernel_args(k, i), "device": dev,
                                                          "simulated (us)": round(dur, 6)}})
        _trace.core_events(k, i, start * 1e3, pid + 100, events, used.setdefault(dev, {}), flow, instructions,
                           max_events_per_core)
        if k.op is not None and k.op.seq in anchor:   # an arrow from the host op to its kernel
            fid = next(flow)
            hpid, htid = anchor[k.op.seq]
            events.append({"name": "launch", "cat": "ac2g", "ph": "s", "id": fid, "pid": hpid, "tid": htid,
                           "ts": launch[k.op.seq]})
            events.append({"name": "launch", "cat": "ac2g", "ph": "f", "bp": "e", "id": fid, "pid": pid,
                           "tid": _KERNEL_TID, "ts": start})
        op = k.op
        while op is not None:   # the device span of each op: its first kernel's start to its last one's end
            span = spans.setdefault(op.seq, [start, start + dur])
            span[1] = start + dur
            op = op.parent
    by_seq = {ev.seq: ev for ev in sim.events()}
    for seq, (start, end) in spans.items():
        ev = by_seq[seq]
        dev = _device_of(ev.kernels[0])
        tid = ops_tids.get((dev, ev.thread))
        if tid is None:   # one op track per host thread, so spans of concurrent threads never cross
            tid = ops_tids[(dev, ev.thread)] = _OPS_TID0 + len(ops_tids)
            _trace.meta(events, _NPU_PID0 + 1000 * dev, tid, f"ops ({ev.thread_name})", tid)
        events.append({"name": ev.name, "cat": "npu_op", "ph": "X", "pid": _NPU_PID0 + 1000 * dev, "tid": tid,
                       "ts": start, "dur": end - start,
                       "args": {"self device (us)": round(sum(k.seconds for k in ev.self_kernels) * 1e6, 6),
                                "kernels": len(ev.kernels)}})
    totals = sim.totals
    for dev in sorted(used):
        pid = _NPU_PID0 + 1000 * dev
        _trace.meta(events, pid, None, f"npu:{dev} stream 0 (simulated)", _NPU_PID0 + 1000 * dev, f"NPU {dev}")
        _trace.meta(events, pid, _KERNEL_TID, "kernels", 0)
        _trace.core_metadata(events, used.get(dev, {}), pid + 100, f"npu:{dev} core {{core}} (simulated)",
                             _NPU_PID0 + 1000 * dev + 100)
    doc["traceEvents"] = events
    # beside kineto's own keys: the simulated step's totals
    doc["npuSimulated"] = {"device_seconds": totals.device_seconds, "device_cycles": totals.device_cycles,
                           "kernels": totals.kernels, "config": totals.config, "clock_mhz": totals.clock_mhz,
                           "cores": totals.cores,
                           "pipe_utilization": {p: round(u, 6) for p, u in totals.pipe_utilization.items()},
                           "clocks": "npu processes: a kernel starts at its op's host call (or when the "
                                     "stream's previous kernel ends) and lasts its simulated time"}
    data = json.dumps(doc).encode()
    with open(path, "wb") as f:
        f.write(gzip.compress(data) if packed else data)


# -------------------------------------------------------------------------------------------- torch.npu
profile = _bridge.profile

profiler = types.ModuleType("torch.npu.profiler", "torch_npu's torch.npu.profiler / torch_npu.profiler: "
                            "torch.profiler with the npu device recorded (torch_bridge.device.profiling).")
profiler.profile = torch.profiler.profile            # type: ignore[attr-defined]  # CPU + NPU by default
profiler.ProfilerActivity = torch.profiler.ProfilerActivity  # type: ignore[attr-defined]
profiler.ProfilerAction = torch.profiler.ProfilerAction  # type: ignore[attr-defined]
profiler.schedule = torch.profiler.schedule          # type: ignore[attr-defined]
profiler.tensorboard_trace_handler = torch.profiler.tensorboard_trace_handler  # type: ignore[attr-defined]
profiler.record_function = torch.profiler.record_function  # type: ignore[attr-defined]
profiler.supported_activities = torch.profiler.supported_activities  # type: ignore[attr-defined]
profiler.simulated_profile = simulated_profile      # type: ignore[attr-defined]
profiler.set_trace_options = set_trace_options      # type: ignore[attr-defined]
sys.modules.setdefault("torch.npu.profiler", profiler)

install()
