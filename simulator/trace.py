"""Chrome trace JSON of a timed launch (open in https://ui.perfetto.dev or chrome://tracing).

Layout: one process per core ("core 3"), one thread (track) per pipe ("MTE2", "V", ...,
"ALL" for barriers). Every instruction is a complete event (``"ph": "X"``) named after it
("COPY_GM_UB", "VADD", "MMAD"); flags are named "set MTE2->V #1" (0-length slice on the
producer) and "wait MTE2->V #1" (a slice on the consumer as long as the stall), joined by a
flow arrow. Times are microseconds at the config clock (cycles / clock_mhz), rounded to whole
nanoseconds. `args` hold the source line ("file:line: text"), the cycle numbers and the
instruction's operands.
"""
from __future__ import annotations

import gc
import gzip
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.isa import INFO, CubeType, Instr, Kind, Pipe

if TYPE_CHECKING:
    from simulator.timing import Profile

#: a source location as the launcher passes it: (file, line, col, text of the line)
Loc = tuple[str, int, int, str]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: replay and trace building allocate millions of small tuples and
    dicts but no cycles, and the collector's scans cost up to 40% of the time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def format_loc(locs: Sequence[Loc] | None, loc: int) -> str | None:
    """`"file:line: text"` for a location index, or None when unknown."""
    if not locs or loc < 0 or loc >= len(locs):
        return None
    file, line, _col, text = locs[loc]
    return f"{file}:{line}: {text.strip()}" if text else f"{file}:{line}"


_TRACK_NAMES = {int(p): p.name for p in Pipe}


def _pipe_name(p: int) -> str:
    return Pipe(p).name if 0 <= p < len(Pipe) else str(p)


def _args(kind: Kind, a: int, b: int, c: int, d: int, e: int) -> dict[str, Any]:
    if kind == Kind.DMA:
        out: dict[str, Any] = {"burst_bytes": a, "bursts": b}
        if c >= 0:
            out.update(gm_arg=c, gm_offset=d, gm_stride=e)
        return out
    if kind == Kind.VECTOR:
        return {"elements": a, "bytes_per_element": b, "rows": c}
    if kind == Kind.CUBE:
        return {"m": a, "n": b, "k": c,
                "dtype": CubeType(d).name if 0 <= d < len(CubeType) else d}
    if kind == Kind.SCALAR:
        return {"ops": a}
    if kind == Kind.FLAG:
        return {"event_id": b}
    return {}


def chrome_trace_events(profile: Profile, max_events_per_core: int | None = None
                        ) -> list[dict[str, Any]]:
    """The `traceEvents` list for `profile` (which must have been simulated with
    keep_timeline=True). `max_events_per_core` keeps only the first events of each core."""
    with gc_paused():
        return _trace_events(profile, max_events_per_core)


def _trace_events(profile: Profile, max_events_per_core: int | None) -> list[dict[str, Any]]:
    mhz = float(profile.config.clock_mhz)
    locs = profile.locs
    src_cache: dict[int, str | None] = {}
    out: list[dict[str, Any]] = []
    info_cache: dict[int, tuple[Instr, Kind, int, str]] = {}
    flow_id = 0
    for core in profile.per_core:
        if core.events is None or core.start is None or core.end is None:
            raise ValueError("the profile has no timeline: simulate(..., keep_timeline=True)")
        pid = core.core
        ev = core.events
        n = ev.size if max_events_per_core is None else min(ev.size, max_events_per_core)
        out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"name": f"core {pid}"}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"sort_index": pid}})
        instr_l = ev["instr"][:n].tolist()
        pipe_l = ev["pipe"][:n].tolist()
        loc_l = ev["loc"][:n].tolist()
        a_l, b_l, c_l, d_l, e_l = (ev[f][:n].tolist() for f in "abcde")
        start_l = core.start[:n].tolist()
        end_l = core.end[:n].tolist()
        # whole nanoseconds (Perfetto's resolution), rounded monotonically so back-to-back
        # slices on one track never overlap
        start_ns = np.rint(core.start[:n] * (1000.0 / mhz)).astype(np.int64)
        end_ns = np.rint(core.end[:n] * (1000.0 / mhz)).astype(np.int64)
        ts_l = (start_ns / 1000.0).tolist()
        end_us = (end_ns / 1000.0).tolist()
        dur_l = ((end_ns - start_ns) / 1000.0).tolist()
        src = core.flag_src[:n].tolist() if core.flag_src is not None else [-1] * n
        tids: list[int] = []
        used: set[int] = set()
        for i in range(n):
            code = instr_l[i]
            info = info_cache.get(code)
            if info is None:
                instr = Instr(code)
                kind, pipe = INFO[instr]
                info = info_cache[code] = (instr, kind, int(pipe), kind.name.lower())
            instr, kind, tid, cat = info
            if kind == Kind.FLAG:
                tid = pipe_l[i]
                pair = (f"{_pipe_name(pipe_l[i])}->{_pipe_name(a_l[i])}" if instr == Instr.SET_FLAG
                        else f"{_pipe_name(a_l[i])}->{_pipe_name(pipe_l[i])}")
                name = f"{'set' if instr == Instr.SET_FLAG else 'wait'} {pair} #{b_l[i]}"
            else:
                name = instr.name
            tids.append(tid)
            used.add(tid)
            args = _args(kind, a_l[i], b_l[i], c_l[i], d_l[i], e_l[i])
            args["start_cycle"] = start_l[i]
            args["cycles"] = end_l[i] - start_l[i]
            loc = loc_l[i]
            if loc not in src_cache:
                src_cache[loc] = format_loc(locs, loc)
            if src_cache[loc] is not None:
                args["source"] = src_cache[loc]
            out.append({"name": name, "cat": cat, "ph": "X", "pid": pid,
                        "tid": tid, "ts": ts_l[i], "dur": dur_l[i], "args": args})
            j = src[i]
            if 0 <= j < i:
                flow_id += 1
                out.append({"name": "flag", "cat": "flag", "ph": "s", "id": flow_id,
                            "pid": pid, "tid": tids[j], "ts": ts_l[j]})
                out.append({"name": "flag", "cat": "flag", "ph": "f", "bp": "e", "id": flow_id,
                            "pid": pid, "tid": tid, "ts": end_us[i]})
        for tid in sorted(used):
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"name": _TRACK_NAMES.get(tid, str(tid))}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"sort_index": tid}})
    return out


def write_chrome_trace(profile: Profile, path: str | os.PathLike[str],
                       max_events_per_core: int | None = None) -> None:
    """Write the Chrome trace of `profile` to `path` (gzip-compressed if it ends in .gz)."""
    doc = {
        "traceEvents": chrome_trace_events(profile, max_events_per_core),
        "displayTimeUnit": "ns",
        "otherData": {"config": profile.config.name, "cycles": profile.cycles,
                      "clock_mhz": profile.config.clock_mhz,
                      "bound_pipe": profile.bound_pipe,
                      "efficiency": round(profile.efficiency, 4),
                      "cores": profile.n_cores, "active_cores": profile.active_cores},
    }
    write_trace_json(doc, path)


def write_trace_json(doc: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write a Chrome trace document (`{"traceEvents": [...], ...}`) to `path`, gzip-compressed if
    the name ends in .gz (also used by torch_bridge.profiler for a whole step's trace)."""
    with gc_paused():
        text = json.dumps(doc, separators=(",", ":"))
    if os.fspath(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
