"""Profiling a training step on the simulated core: a per-op table and a Chrome trace.

    with torch_bridge.profile() as prof:
        loss = model(x).sum(); loss.backward(); opt.step()
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=10))
    prof.export_chrome_trace("step.json")        # open in https://ui.perfetto.dev
    prof.totals                                   # host / simulated device time, pipe use

While a profile is open every `torch.ops.npu.*` call runs through `_run_profiled`: the op's
kernels are launched under `dsl.record()`, so each launch is timed on the model of the core
(a `Run`: cycles, per-pipe busy time, per-core timeline), and the op's host time is measured
around it. Kernels launched directly (a DSL kernel or an op_library function called outside a
registered op) are recorded too and appear as rows named ``[kernel] <name>``.

Attribution follows torch.profiler: an op that calls another registered op is its parent;
"total" counts everything inside the op (host time and the kernels of its children), "self"
leaves the children out, so the self columns of all rows add up to the step. Every kernel
belongs to the innermost op open when it was launched.

The simulated device runs the step's kernels back to back in launch order, as one stream
executes them: the step's device time is the sum of the kernels' times, and the trace places
kernel i at the end of kernel i-1. Host times are wall clock and include the timing model's
replay of every kernel, so ops are slower while profiled than without a profile.

Hooks for the rest of torch_bridge: `_ACTIVE` lists the open sinks (objects with
``_add_event(OpEvent)``; a `profile` is one) and is empty when nothing is profiled; the op wrappers
(ops.py, the npu device's aten kernels) call `_run_profiled(op_name, fn, args, kwargs)` only when
`_ACTIVE` is non-empty, and the npu CPU fallback with `fallback=True`. `_TORCH_MARK`, set by the
torch.profiler bridge (torch_bridge.device.profiling) while a torch.profiler session records the npu
device, wraps each op call in a marker range of torch's trace so the op's kernels can be given to
torch's event of the call. `record_function` ranges also open torch's `record_function` while a
torch.profiler session runs, so they show in both profilers.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from dsl.record import record as _dsl_record
from simulator.timing import PIPE_NAMES
from simulator.trace import write_trace_json
from torch_bridge import profiler_trace as _trace

__all__ = ["KernelLaunch", "KeyAverage", "KeyAverages", "OpEvent", "StepTotals", "profile",
           "record_function"]


class _Sink(Protocol):
    def _add_event(self, event: OpEvent) -> None: ...


#: the open profiles (sinks); empty when nothing is profiled. ops.py tests it on every call.
_ACTIVE: list[_Sink] = []

#: set by the torch.profiler bridge while a torch.profiler session records the npu device: a
#: context manager around each op call that marks it in torch's trace (module docstring)
_TORCH_MARK: Callable[[OpEvent], AbstractContextManager[Any]] | None = None

_LOCAL = threading.local()          # .stack: the OpEvents open on this thread, innermost last
_SEQ = itertools.count()            # one order for op starts and kernel launches, all threads


class _StampedRuns(list[tuple[str, Any]]):
    """`Recording.runs` that also notes a global sequence number per launch: kernels recorded
    on several threads can then be put in launch order on one stream."""

    def __init__(self) -> None:
        super().__init__()
        self.seqs: list[int] = []

    def append(self, item: Any) -> None:
        self.seqs.append(next(_SEQ))
        super().append(item)

    # dsl.record() closes a block with `stack.remove(rec)`, which compares Recordings by value:
    # two nested blocks holding the same runs would be taken for each other. Identity avoids it.
    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = None


@contextmanager
def _stamped_record() -> Iterator[_StampedRuns]:
    with _dsl_record() as rec:
        runs = _StampedRuns()
        rec.runs = runs
        yield runs


# --------------------------------------------------------------------------------------------
# events


@dataclass(eq=False)
class KernelLaunch:
    """One kernel launch: its `Run` (from the timing model) and its place on the step's stream
    (`start_ns` / `end_ns`, `start_cycle`), set when the profile closes."""

    name: str
    run: Any
    seq: int
    op: OpEvent | None = None
    start_cycle: int = 0
    start_ns: int = 0
    end_ns: int = 0
    stream: int = 0        #: the npu stream it ran on (0: the default stream, or not on the device)

    @property
    def cycles(self) -> int:
        return int(self.run.cycles)

    @property
    def seconds(self) -> float:
        return float(self.run.seconds)

    @property
    def label(self) -> str:
        """``op_name/kernel_name`` (the kernel name alone for a direct launch)."""
        return f"{self.op.name}/{self.name}" if self.op is not None else self.name


@dataclass(eq=False)
class OpEvent:
    """One call of a registered op (or a `record_function` range) on the host."""

    name: str
    thread: int
    thread_name: str
    seq: int
    depth: int
    parent: OpEvent | None
    input_shapes: tuple[tuple[int, ...], ...] = ()
    is_user_annotation: bool = False
    #: the overload of an aten op ("out", "Tensor"); the row's name leaves it out, as torch's does
    overload_name: str = ""
    #: the npu device index of the op's tensors (-1: no npu tensor among its arguments)
    device: int = -1
    #: the op ran on the npu CPU fallback (host work, no kernels)
    fallback: bool = False
    host_start_ns: int = 0
    host_end_ns: int = 0
    children: list[OpEvent] = field(default_factory=list)
    #: every launch inside the call, children's included: (kernel name, Run, sequence number)
    launches: list[tuple[str, Any, int]] = field(default_factory=list, repr=False)
    #: the launches this op owns (not a child's), set when the profile closes
    self_kernels: list[KernelLaunch] = field(default_factory=list, repr=False)
    #: all launches inside, in order, set when the profile closes
    kernels: list[KernelLaunch] = field(default_factory=list, repr=False)

    @property
    def host_total_ns(self) -> int:
        return self.host_end_ns - self.host_start_ns

    @property
    def host_self_ns(self) -> int:
        return self.host_total_ns - sum(c.host_total_ns for c in self.children)


def _shape_of(a: Any) -> tuple[tuple[int, ...], ...]:
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        return (tuple(int(s) for s in a.shape),)
    if isinstance(a, (list, tuple)) and a and all(hasattr(t, "shape") for t in a):
        return tuple(tuple(int(s) for s in t.shape) for t in a)
    return ((),)


def _shapes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[int, ...], ...]:
    """Input shapes as torch.profiler records them: one entry per argument, () for non-tensors."""
    out: list[tuple[int, ...]] = []
    for a in (*args, *kwargs.values()):
        out.extend(_shape_of(a))
    return tuple(out)


def _npu_index(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The device index of the first npu tensor among the arguments (-1 if none)."""
    for a in (*args, *kwargs.values()):
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, torch.Tensor) and t.device.type == "npu":
                return int(t.device.index or 0)
    return -1


@contextmanager
def _op_scope(name: str, shapes: tuple[tuple[int, ...], ...], user: bool = False,
              overload: str = "", device: int = -1, fallback: bool = False) -> Iterator[OpEvent]:
    """Open an event on this thread, record the kernels launched inside, hand it to the sinks
    that were open when it started."""
    stack: list[OpEvent] | None = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    sinks = list(_ACTIVE)
    mark = _TORCH_MARK
    parent = stack[-1] if stack else None
    t = threading.current_thread()
    ev = OpEvent(name, t.ident or 0, t.name, next(_SEQ), len(stack), parent, shapes, user, overload,
                 device, fallback)
    if parent is not None:
        parent.children.append(ev)
    stack.append(ev)
    try:
        with _stamped_record() as runs, ExitStack() as marks:
            if mark is not None:
                marks.enter_context(mark(ev))
            ev.host_start_ns = time.perf_counter_ns()
            try:
                yield ev
            finally:
                ev.host_end_ns = time.perf_counter_ns()
                ev.launches = [(n, r, s) for (n, r), s in zip(runs, runs.seqs)]
    finally:
        stack.pop()
        for s in sinks:
            s._add_event(ev)


def _run_profiled(op_name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any], fallback: bool = False) -> Any:
    """Run ``fn(*args, **kwargs)`` as the op `op_name` for every open profile: its kernels timed
    on the model of the core, its host time measured (the op wrappers call this while `_ACTIVE`).

    An aten name's overload is kept apart ("aten::mul.out" is a call of "aten::mul", as in
    torch.profiler). `fallback=True` marks a call run on the npu CPU fallback; when the op is
    already open on this thread (its npu kernel handed the call to the fallback) that call is
    marked instead of opening a second one."""
    if not _ACTIVE:
        return fn(*args, **kwargs)
    name, overload = op_name, ""
    if "::" in op_name:
        name, _, overload = op_name.partition(".")
    if fallback:
        stack = getattr(_LOCAL, "stack", None)
        if stack and stack[-1].name == name and not stack[-1].is_user_annotation:
            stack[-1].fallback = True
            return fn(*args, **kwargs)
    with _op_scope(name, _shapes(args, kwargs), False, overload, _npu_index(args, kwargs), fallback):
        return fn(*args, **kwargs)


@contextmanager
def record_function(name: str) -> Iterator[None]:
    """Label a range of host code in the open profiles (as torch.profiler.record_function):
    it gets a host span and a row; the ops inside are its children, kernels launched directly
    inside are its own. While a torch.profiler session runs the range is opened there too.
    Does nothing when no profile is open."""
    with ExitStack() as scopes:
        if torch.autograd.profiler._is_profiler_enabled:
            scopes.enter_context(torch.autograd.profiler.record_function(name))
        if _ACTIVE:
            scopes.enter_context(_op_scope(name, (), user=True))
        yield


# --------------------------------------------------------------------------------------------
# the table


@dataclass
class KeyAverage:
    """One row of `key_averages()`: every call of one op (times in microseconds, like
    torch's FunctionEventAvg; device = the simulated core)."""

    key: str
    input_shapes: tuple[tuple[int, ...], ...] | None = None
    count: int = 0
    cpu_time_total: float = 0.0
    self_cpu_time_total: float = 0.0
    device_time_total: float = 0.0
    self_device_time_total: float = 0.0
    device_cycles_total: int = 0
    self_device_cycles: int = 0
    #: kernels the op launched itself (children's excluded), by kernel name
    kernels: Counter[str] = field(default_factory=Counter)
    #: sum of the self kernels' roofline bounds (cycles)
    self_bound_cycles: int = 0
    #: the bottleneck pipe of each of the self kernels (Run.profile.bound_pipe), counted
    bound_pipes: Counter[str] = field(default_factory=Counter)
    is_user_annotation: bool = False
    is_kernel: bool = False        # a direct launch, not a registered op

    @property
    def bound_pipe(self) -> str:
        """The pipe that bounds most of the self kernels' cycles ("" without kernels)."""
        return self.bound_pipes.most_common(1)[0][0] if self.bound_pipes else ""

    @property
    def cpu_time(self) -> float:
        """Average host time per call (us)."""
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        """Average simulated device time per call, children included (us)."""
        return self.device_time_total / self.count if self.count else 0.0

    @property
    def kernel_count(self) -> int:
        return sum(self.kernels.values())

    @property
    def efficiency(self) -> float:
        """Roofline bound over cycles of the op's own kernels (1.0 = every kernel at its bound)."""
        return self.self_bound_cycles / self.self_device_cycles if self.self_device_cycles else 0.0


_SORT_KEYS = {
    "device_time_total": "device_time_total", "self_device_time_total": "self_device_time_total",
    "device_time": "device_time", "cpu_time_total": "cpu_time_total",
    "self_cpu_time_total": "self_cpu_time_total", "cpu_time": "cpu_time", "count": "count",
    "device_cycles_total": "device_cycles_total", "self_device_cycles": "self_device_cycles",
    # the names torch_npu / torch.cuda users type
    "npu_time_total": "device_time_total", "self_npu_time_total": "self_device_time_total",
    "cuda_time_total": "device_time_total", "self_cuda_time_total": "self_device_time_total",
}


def _fmt_us(us: float) -> str:
    """A time as torch's tables print it."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class KeyAverages(list[KeyAverage]):
    """The rows of `profile.key_averages()` with the step's totals; `.table()` prints them."""

    def __init__(self, rows: list[KeyAverage], totals: StepTotals, kernel_view: bool = False):
        super().__init__(rows)
        self.totals = totals
        self.kernel_view = kernel_view

    def table(self, sort_by: str | None = "device_time_total", row_limit: int | None = 100,
              max_name_column_width: int = 55) -> str:
        """The rows as torch.profiler prints them (sorted by `sort_by`, descending; at most
        `row_limit` rows, None or -1 for all), then the step totals and the profiling cost.
        Rows of `kernel_averages()` get the kernel columns (cycles, efficiency, bound pipe)
        instead of the host ones."""
        rows = list(self)
        if sort_by is not None:
            if sort_by not in _SORT_KEYS:
                raise ValueError(f"table(): sort_by must be one of {', '.join(_SORT_KEYS)}, "
                                 f"got {sort_by!r}")
            attr = _SORT_KEYS[sort_by]
            rows.sort(key=lambda r: getattr(r, attr), reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        self_cpu = sum(r.self_cpu_time_total for r in self)
        dev = self.totals.device_seconds * 1e6 or 1.0
        cpu = self_cpu or 1.0
        columns: list[tuple[str, Callable[[KeyAverage], str]]]
        if self.kernel_view:
            columns = [
                ("NPU total", lambda r: _fmt_us(r.self_device_time_total)),
                ("NPU %", lambda r: f"{100 * r.self_device_time_total / dev:.2f}%"),
                ("NPU time avg", lambda r: _fmt_us(r.device_time)),
                ("Cycles", lambda r: str(r.self_device_cycles)),
                ("Cycles avg", lambda r: str(r.self_device_cycles // max(r.count, 1))),
                ("Efficiency", lambda r: f"{100 * r.efficiency:.1f}%"),
                ("Bound pipe", lambda r: r.bound_pipe),
                ("# of Calls", lambda r: str(r.count))]
        else:
            columns = [
                ("Self CPU %", lambda r: f"{100 * r.self_cpu_time_total / cpu:.2f}%"),
                ("Self CPU", lambda r: _fmt_us(r.self_cpu_time_total)),
                ("CPU total %", lambda r: f"{100 * r.cpu_time_total / cpu:.2f}%"),
                ("CPU total", lambda r: _fmt_us(r.cpu_time_total)),
                ("CPU time avg", lambda r: _fmt_us(r.cpu_time)),
                ("Self NPU", lambda r: _fmt_us(r.self_device_time_total)),
                ("Self NPU %", lambda r: f"{100 * r.self_device_time_total / dev:.2f}%"),
                ("NPU total", lambda r: _fmt_us(r.device_time_total)),
                ("NPU time avg", lambda r: _fmt_us(r.device_time)),
                ("Self cycles", lambda r: str(r.self_device_cycles)),
                ("# Kernels", lambda r: str(r.kernel_count)),
                ("# of Calls", lambda r: str(r.count))]
        shapes = any(r.input_shapes is not None for r in rows)
        if shapes:
            columns.append(("Input Shapes", lambda r: str([list(s) for s in r.input_shapes or ()])))
        cells = [[c(r) for _, c in columns] for r in rows]
        name_w = min(max([len("Name")] + [len(r.key) for r in rows]), max_name_column_width)
        widths = [max([12, len(h)] + [len(row[i]) for row in cells]) for i, (h, _) in enumerate(columns)]
        if shapes:
            widths[-1] = min(widths[-1], 60)

        def fmt(name: str, vals: list[str]) -> str:
            s = name.rjust(name_w)
            for i, (v, w) in enumerate(zip(vals, widths)):
                s += "  " + (v[:w].ljust(w) if shapes and i == len(vals) - 1 else v.rjust(w))
            return s + "  "

        line = "-" * name_w + "".join("  " + "-" * w for w in widths) + "  "
        out = [line, fmt("Name", [h for h, _ in columns]), line]
        for r, vals in zip(rows, cells):
            name = r.key if len(r.key) <= name_w else r.key[:name_w - 3] + "..."
            out.append(fmt(name, vals))
        out.append(line)
        out.extend(self.totals.footer(None if self.kernel_view else self_cpu))
        return "\n".join(out) + "\n"

    def __str__(self) -> str:
        return self.table()


@dataclass
class StepTotals:
    """The whole profiled block: host wall time, simulated device time and pipe use."""

    host_seconds: float            # wall clock from entering the profile to leaving it
    op_host_seconds: float         # host time inside top-level ops
    device_seconds: float          # the kernels back to back on one stream
    device_cycles: int
    bound_cycles: int              # sum of the kernels' roofline bounds (critical core)
    kernels: int
    op_calls: int
    clock_mhz: float
    cores: int                     # cores of the chip (config)
    config: str
    #: busy cycles per pipe over the step, summed over cores (start-ups included)
    pipe_busy: dict[str, int] = field(default_factory=dict)
    #: calls of ops that ran on the npu CPU fallback (host work, no kernels), by op name
    fallbacks: dict[str, int] = field(default_factory=dict)

    @property
    def pipe_utilization(self) -> dict[str, float]:
        """Busy share of each pipe over the step's cycles times the chip's cores."""
        denom = self.device_cycles * self.cores
        return {p: b / denom if denom else 0.0 for p, b in self.pipe_busy.items()}

    @property
    def efficiency(self) -> float:
        """Sum of the kernels' roofline bounds over the step's cycles (critical-core view)."""
        return self.bound_cycles / self.device_cycles if self.device_cycles else 0.0

    def footer(self, self_cpu_us: float | None) -> list[str]:
        """The table's closing lines: totals, pipe use and the cost of profiling."""
        util = ", ".join(f"{p} {100 * u:.1f}%" for p, u in self.pipe_utilization.items())
        cpu = [] if self_cpu_us is None else [f"Self CPU time total: {_fmt_us(self_cpu_us)}"]
        return cpu + [
            f"Self NPU time total: {_fmt_us(self.device_seconds * 1e6)} (simulated: "
            f"{self.device_cycles} cycles at {self.clock_mhz:g} MHz on {self.config}, "
            f"{self.kernels} kernels back to back on one stream)",
            f"Step: host {_fmt_us(self.host_seconds * 1e6)} wall ({self.op_calls} op calls), "
            f"device {_fmt_us(self.device_seconds * 1e6)} simulated; "
            f"roofline efficiency {100 * self.efficiency:.1f}%",
            f"Pipe utilisation (busy share of {self.cores} cores x step): {util}",
        ] + ([
            "CPU fallback (ran on the host, no device time): "
            + ", ".join(f"{n} x{c}" for n, c in sorted(self.fallbacks.items()))] if self.fallbacks else []
        ) + [
            "Note: host (CPU) times include the timing model replaying every kernel while the "
            "profile is open; the ops run faster unprofiled.",
        ]


# --------------------------------------------------------------------------------------------
# the profile

# trace layout: process ids of the host, the stream and core k (100 + k); track ids in the stream
_HOST_PID, _STREAM_PID, _CORE_PID0 = 0, 1, 100
_KERNEL_TID, _OPS_TID0 = 1, 1 << 20   # kernel tracks: _KERNEL_TID + stream id


class profile:  # noqa: N801  (named like torch.profiler.profile)
    """Profile the ops and kernels run inside the block (module docstring).

    `record_shapes=True` keeps input shapes so `key_averages(group_by_input_shape=True)` can
    split rows by them. `start()` / `stop()` work as `__enter__` / `__exit__`."""

    def __init__(self, record_shapes: bool = False) -> None:
        self.record_shapes = record_shapes
        self._events: list[OpEvent] = []
        self._lock = threading.Lock()
        self._open = False
        self._exit: ExitStack | None = None
        self._direct: _StampedRuns | None = None
        self._start_ns = self._end_ns = 0
        self._kernels: list[KernelLaunch] = []
        self._totals: StepTotals | None = None

    # -- lifecycle
    def start(self) -> None:
        if self._open:
            raise RuntimeError("profile.start(): this profile is already running")
        self._events, self._kernels, self._totals = [], [], None
        self._exit = ExitStack()
        # every launch on this thread, so kernels outside registered ops are timed and shown
        self._direct = self._exit.enter_context(_stamped_record())
        self._open = True
        _ACTIVE.append(self)
        self._start_ns = time.perf_counter_ns()

    def stop(self) -> None:
        if not self._open:
            raise RuntimeError("profile.stop(): this profile is not running")
        self._end_ns = time.perf_counter_ns()
        self._open = False
        _ACTIVE.remove(self)
        assert self._exit is not None
        self._exit.close()
        self._build()

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _add_event(self, event: OpEvent) -> None:
        if self._open:
            with self._lock:
                self._events.append(event)

    def _ready(self, what: str) -> None:
        if self._open or self._totals is None:
            raise RuntimeError(f"profile.{what}() needs a finished profile: call it after the "
                               f"'with torch_bridge.profile()' block")

    # -- attribution and the stream timeline
    def _build(self) -> None:
        events = sorted(self._events, key=lambda e: e.seq)
        by_run: dict[int, KernelLaunch] = {}

        def launch(name: str, run: Any, seq: int) -> KernelLaunch:
            k = by_run.get(id(run))
            if k is None:
                k = by_run[id(run)] = KernelLaunch(name, run, seq)
            elif seq < k.seq:
                k.seq = seq
            return k

        assert self._direct is not None
        for (name, run), seq in zip(self._direct, self._direct.seqs):
            launch(name, run, seq)
        for ev in events:
            ev.kernels = [launch(n, r, s) for n, r, s in ev.launches]
            for k in ev.kernels:   # the innermost (deepest) event owns the kernel
                if k.op is None or k.op.depth < ev.depth:
                    k.op = ev
        for ev in events:
            ev.kernels.sort(key=lambda k: k.seq)
            ev.self_kernels = [k for k in ev.kernels if k.op is ev]
        kernels = sorted(by_run.values(), key=lambda k: k.seq)
        got = [getattr(k.run, "_npu_place", None) for k in kernels]
        places: list[tuple[int, int, int, int]] = [p for p in got if p is not None]
        if kernels and len(places) == len(kernels) and len({p[0] for p in places}) == 1:
            # ops on npu tensors: where the device's stream timeline put them (torch_bridge.device.streams)
            base = min(p[2] for p in places)
            for k, (_, sid, start, end) in zip(kernels, places):
                per_ns = 1000 / k.run.cfg.clock_mhz
                k.start_cycle, k.stream = start - base, sid
                k.start_ns, k.end_ns = round((start - base) * per_ns), round((end - base) * per_ns)
        else:
            cycle = ns = 0
            for k in kernels:   # one stream: each kernel starts when the previous one ends
                k.start_cycle, k.start_ns = cycle, ns
                cycle += k.cycles
                ns += round(k.cycles * 1000 / k.run.cfg.clock_mhz)
                k.end_ns = ns
        self._kernels = kernels
        self._events = events
        cfg = kernels[0].run.cfg if kernels else None
        busy = {p: sum(int(k.run.profile.busy.get(p, 0)) for k in kernels) for p in PIPE_NAMES}
        if cfg is None:
            from simulator.config import load_config
            cfg = load_config()
        self._totals = StepTotals(
            host_seconds=(self._end_ns - self._start_ns) / 1e9,
            op_host_seconds=sum(e.host_total_ns for e in events if e.parent is None) / 1e9,
            device_seconds=sum(k.seconds for k in kernels),
            device_cycles=sum(k.cycles for k in kernels),
            bound_cycles=sum(int(k.run.bound) for k in kernels),
            kernels=len(kernels), op_calls=sum(not e.is_user_annotation for e in events),
            clock_mhz=float(cfg.clock_mhz), cores=int(cfg.cores), config=str(cfg.name),
            pipe_busy=busy, fallbacks=dict(Counter(e.name for e in events if e.fallback)))

    # -- results
    @property
    def totals(self) -> StepTotals:
        """Host seconds, simulated device seconds and cycles, per-pipe use of the step."""
        self._ready("totals")
        assert self._totals is not None
        return self._totals

    def events(self) -> list[OpEvent]:
        """Every op call (and record_function range), in start order."""
        self._ready("events")
        return list(self._events)

    def kernels(self) -> list[KernelLaunch]:
        """Every kernel launch, in launch order, with its owner op and stream position."""
        self._ready("kernels")
        return list(self._kernels)

    def key_averages(self, group_by_input_shape: bool = False) -> KeyAverages:
        """One row per op name (and input shapes, if asked and recorded), as torch's
        key_averages; kernels launched outside any op get ``[kernel] <name>`` rows."""
        self._ready("key_averages")
        if group_by_input_shape and not self.record_shapes:
            raise RuntimeError("key_averages(group_by_input_shape=True) needs "
                               "profile(record_shapes=True)")
        rows: dict[tuple[str, Any], KeyAverage] = {}

        def row(key: str, shapes: Any) -> KeyAverage:
            r = rows.get((key, shapes))
            if r is None:
                r = rows[(key, shapes)] = KeyAverage(key, shapes)
            return r

        for ev in self._events:
            r = row(ev.name, ev.input_shapes if group_by_input_shape else None)
            r.is_user_annotation = ev.is_user_annotation
            r.count += 1
            r.cpu_time_total += ev.host_total_ns / 1e3
            r.self_cpu_time_total += ev.host_self_ns / 1e3
            r.device_time_total += sum(k.seconds for k in ev.kernels) * 1e6
            r.device_cycles_total += sum(k.cycles for k in ev.kernels)
            _add_self(r, ev.self_kernels)
        for k in self._kernels:
            if k.op is None:
                r = row(f"[kernel] {k.name}", None)
                r.is_kernel = True
                r.count += 1
                r.device_time_total += k.seconds * 1e6
                r.device_cycles_total += k.cycles
                _add_self(r, [k])
        return KeyAverages(list(rows.values()), self.totals)

    def kernel_averages(self) -> KeyAverages:
        """One row per ``op_name/kernel_name``: launches, simulated time and cycles, roofline
        efficiency and bottleneck pipe; its `.table()` prints the kernel columns."""
        self._ready("kernel_averages")
        rows: dict[str, KeyAverage] = {}
        for k in self._kernels:
            r = rows.get(k.label)
            if r is None:
                r = rows[k.label] = KeyAverage(k.label, is_kernel=True)
            r.count += 1
            r.device_time_total += k.seconds * 1e6
            r.device_cycles_total += k.cycles
            _add_self(r, [k])
        return KeyAverages(list(rows.values()), self.totals, kernel_view=True)

    def table(self, sort_by: str | None = "device_time_total", row_limit: int | None = 100
              ) -> str:
        """Shorthand for ``key_averages().table(...)``."""
        return self.key_averages().table(sort_by=sort_by, row_limit=row_limit)

    # -- the Chrome trace
    def export_chrome_trace(self, path: str | os.PathLike[str], instructions: bool = True,
                            max_events_per_core: int | None = None) -> None:
        """Write the step as one Chrome / Perfetto trace (gzip if `path` ends in .gz): a host
        process (op spans per thread, wall clock), a stream process (op and kernel spans on the
        simulated timeline) and one process per core with a track per pipe, where each kernel
        is a slice ``op_name/kernel_name`` holding its instructions (`instructions=False`
        leaves those out; `max_events_per_core` keeps the first ones of each kernel)."""
        self._ready("export_chrome_trace")
        doc = {"traceEvents": self._trace_events(instructions, max_events_per_core),
               "displayTimeUnit": "ns",
               "otherData": self._other_data()}
        write_trace_json(doc, path)

    def _other_data(self) -> dict[str, Any]:
        t = self.totals
        return {"host_seconds": t.host_seconds, "device_seconds": t.device_seconds,
                "device_cycles": t.device_cycles, "kernels": t.kernels, "op_calls": t.op_calls,
                "config": t.config, "clock_mhz": t.clock_mhz, "cores": t.cores,
                "pipe_utilization": {p: round(u, 6) for p, u in t.pipe_utilization.items()},
                "clocks": "host process: wall clock from the profile's start; stream and core "
                          "processes: simulated device time from the step's first kernel"}

    def _trace_events(self, instructions: bool, max_events: int | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        meta = _trace.meta
        meta(out, _HOST_PID, None, "host (wall clock)", -2)
        meta(out, _STREAM_PID, None, "npu streams (simulated)", -1)
        for sid in sorted({k.stream for k in self._kernels} | {0}):   # one kernel track per stream
            meta(out, _STREAM_PID, _KERNEL_TID + sid, f"stream {sid} kernels", (1 << 20) + sid)
        tids: dict[int, int] = {}
        flow = itertools.count(1)
        for ev in self._events:
            if ev.thread not in tids:
                tids[ev.thread] = len(tids)
                meta(out, _HOST_PID, tids[ev.thread], ev.thread_name, tids[ev.thread])
                # one op track per host thread, so spans of concurrent threads never cross
                meta(out, _STREAM_PID, _OPS_TID0 + tids[ev.thread], f"ops ({ev.thread_name})",
                     tids[ev.thread])
            tid = tids[ev.thread]
            ts = (ev.host_start_ns - self._start_ns) / 1e3
            dev_self = sum(k.seconds for k in ev.self_kernels) * 1e6
            dev_total = sum(k.seconds for k in ev.kernels) * 1e6
            args: dict[str, Any] = {"device total (us)": round(dev_total, 6),
                                    "self device (us)": round(dev_self, 6),
                                    "kernels": [k.label for k in ev.self_kernels]}
            if ev.input_shapes:
                args["Input Dims"] = [list(s) for s in ev.input_shapes]
            if ev.fallback:
                args["cpu fallback"] = True
            out.append({"name": ev.name, "cat": "user_annotation" if ev.is_user_annotation
                        else "cpu_op", "ph": "X", "pid": _HOST_PID, "tid": tid, "ts": ts,
                        "dur": ev.host_total_ns / 1e3, "args": args})
            if ev.kernels:   # the op's span on the stream, with an arrow from the host call
                start, end = ev.kernels[0].start_ns, max(k.end_ns for k in ev.kernels)
                out.append({"name": ev.name, "cat": "npu_op", "ph": "X", "pid": _STREAM_PID,
                            "tid": _OPS_TID0 + tid, "ts": start / 1e3, "dur": (end - start) / 1e3,
                            "args": {"self device (us)": round(dev_self, 6),
                                     "kernels": len(ev.kernels)}})
                fid = next(flow)
                out.append({"name": "launch", "cat": "ac2g", "ph": "s", "id": fid,
                            "pid": _HOST_PID, "tid": tid, "ts": ts})
                out.append({"name": "launch", "cat": "ac2g", "ph": "f", "bp": "e", "id": fid,
                            "pid": _STREAM_PID, "tid": _OPS_TID0 + tid, "ts": start / 1e3})
        used: dict[int, set[int]] = {}
        for i, k in enumerate(self._kernels):
            out.append({"name": k.label, "cat": "kernel", "ph": "X", "pid": _STREAM_PID,
                        "tid": _KERNEL_TID + k.stream, "ts": k.start_ns / 1e3, "dur": (k.end_ns - k.start_ns) / 1e3,
                        "args": _trace.kernel_args(k, i)})
            _trace.core_events(k, i, k.start_ns, _CORE_PID0, out, used, flow, instructions, max_events)
        _trace.core_metadata(out, used, _CORE_PID0)
        return out


def _add_self(r: KeyAverage, kernels: list[KernelLaunch]) -> None:
    r.self_device_time_total += sum(k.seconds for k in kernels) * 1e6
    r.self_device_cycles += sum(k.cycles for k in kernels)
    r.self_bound_cycles += sum(int(k.run.bound) for k in kernels)
    r.kernels.update(k.name for k in kernels)
    for k in kernels:
        r.bound_pipes[str(k.run.profile.bound_pipe)] += k.cycles
