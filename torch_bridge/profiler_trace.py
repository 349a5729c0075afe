"""Chrome-trace events of kernels on the simulated device, for the profilers' step traces.

A kernel launch (`torch_bridge.profiler.KernelLaunch`) becomes a slice on its stream's track (made by
the caller, with `kernel_args`) and, per core that did work, a slice on each of the core's pipe
tracks (`S`, `V`, `M`, `MTE1`, `MTE2`, `MTE3`, `FIX`; `ALL` for barriers), holding the kernel's
instructions as `Run.save_trace` shows them, moved onto the step's timeline (`core_events`).

The caller decides where each kernel starts on the simulated timeline (`start_ns`) and which
process ids the cores get (`core_pid0 + core`): `torch_bridge.profile` lays kernels back to back
from 0 in a trace of its own; the torch.profiler bridge (torch_bridge.device.profiling) places them
at their launch in kineto's host clock and merges them into kineto's trace.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from simulator.timing import PIPE_NAMES
from simulator.trace import chrome_trace_events

if TYPE_CHECKING:
    from torch_bridge.profiler import KernelLaunch

PIPE_IDS = {name: i for i, name in enumerate(PIPE_NAMES)}


def pipe_name(p: int) -> str:
    """The name of pipe track `p` ("ALL" for the barrier track)."""
    return PIPE_NAMES[p] if 0 <= p < len(PIPE_NAMES) else "ALL"


def meta(out: list[dict[str, Any]], pid: Any, tid: Any, name: str, sort: int,
         labels: str | None = None) -> None:
    """Name (and order) a process (`tid` None) or a thread track."""
    kind = "process" if tid is None else "thread"
    out.append({"name": f"{kind}_name", "ph": "M", "pid": pid, "tid": tid or 0, "args": {"name": name}})
    out.append({"name": f"{kind}_sort_index", "ph": "M", "pid": pid, "tid": tid or 0,
                "args": {"sort_index": sort}})
    if labels is not None:
        out.append({"name": "process_labels", "ph": "M", "pid": pid, "tid": 0, "args": {"labels": labels}})


def kernel_args(k: KernelLaunch, index: int) -> dict[str, Any]:
    """The arguments of a kernel's stream slice: owner op, cycles, block_dim, bound pipe, pipe use."""
    run = k.run
    return {"launch": index, "op": k.op.name if k.op is not None else None, "kernel": k.name,
            "cycles": k.cycles, "start cycle": k.start_cycle, "block_dim": int(run.block_dim),
            "active cores": int(run.profile.active_cores), "bound pipe": run.profile.bound_pipe,
            "efficiency": round(float(run.efficiency), 4),
            "pipes": {p: round(u, 4) for p, u in run.pipes.items() if u}}


def core_events(k: KernelLaunch, index: int, start_ns: float, core_pid0: int, out: list[dict[str, Any]],
                used: dict[int, set[int]], flow: Iterator[int], instructions: bool,
                max_events: int | None) -> None:
    """The kernel's slice on every (core, pipe) track it used, starting at `start_ns` on the trace's
    clock, and, inside, the instruction events of its own trace (flag arrows get ids from `flow`).
    `used` collects {core: pipes} for `core_metadata`."""
    prof = k.run.profile
    per_ns = 1000.0 / k.run.cfg.clock_mhz
    inner: list[dict[str, Any]] = []
    tracks: dict[int, set[int]] = {}
    if instructions:
        flows: dict[int, int] = {}
        for e in chrome_trace_events(prof, max_events):
            ph = e["ph"]
            if ph == "M":
                continue
            e["ts"] = (start_ns + round(e["ts"] * 1000)) / 1e3
            core = e["pid"]
            e["pid"] = core_pid0 + core
            if ph == "X":
                tracks.setdefault(core, set()).add(e["tid"])
            else:   # flag arrows: ids unique over the whole trace
                if e["id"] not in flows:
                    flows[e["id"]] = next(flow)
                e["id"] = flows[e["id"]]
            inner.append(e)
    for c in prof.per_core:
        if not c.n_events:
            continue
        pipes = tracks.setdefault(c.core, set())
        pipes.update(int(PIPE_IDS[p]) for p, b in c.busy.items() if b)
        start = start_ns + round(c.start_cycle * per_ns)
        end = start_ns + round(c.end_cycle * per_ns)
        for p in sorted(pipes):
            out.append({"name": k.label, "cat": "kernel", "ph": "X", "pid": core_pid0 + c.core, "tid": p,
                        "ts": start / 1e3, "dur": (end - start) / 1e3,
                        "args": {"launch": index, "core cycles": c.cycles,
                                 "pipe busy cycles": int(c.busy.get(pipe_name(p), 0))}})
        used.setdefault(c.core, set()).update(pipes)
    out.extend(inner)


def core_metadata(out: list[dict[str, Any]], used: dict[int, set[int]], core_pid0: int,
                  name: str = "npu core {core}", sort0: int = 0) -> None:
    """Process and track names of the cores and pipes in `used` (from `core_events`)."""
    for core in sorted(used):
        meta(out, core_pid0 + core, None, name.format(core=core), sort0 + core)
        for p in sorted(used[core]):
            meta(out, core_pid0 + core, p, pipe_name(p), p)
