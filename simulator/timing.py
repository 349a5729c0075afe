"""The timing model: per-core event records -> cycles, per-pipe busy time, roofline, trace.

A profiled kernel gives, per core, the instructions its scalar unit issued, in program order
(`isa.EVENT_DTYPE` records). `simulate` replays them on a model of the core:

Issue and pipes
    The scalar unit issues one instruction every `overhead.issue` cycles, in program order,
    into the queue of the instruction's pipe (S, V, M, MTE1, MTE2, MTE3, FIX). Each pipe runs
    its queue in order; pipes run in parallel. An instruction starts at
    ``max(its pipe's free time, its issue time)`` and holds its pipe for its cost. Queues are
    unbounded (issue never stalls on a full queue). Instructions on the S pipe (SCALAR, PRINT,
    flags whose pipe is S) execute on the issuing unit itself, so the next issue waits for
    them; so does the next issue after a BARRIER.

Flags (counting semantics)
    SET_FLAG(pipe=P, a=Q, id) happens on P once every earlier P instruction is done, and
    pushes ``that time + overhead.flag_latency`` onto a FIFO for (P, Q, id); it holds P for 0
    cycles. WAIT_FLAG(pipe=Q, a=P, id) pops the earliest pending set of (P, Q, id), and Q
    cannot proceed before the set's time. Several sets may be pending. A wait with nothing
    pending raises `SyncError`: the functional run executes the kernel in program order, so a
    set that comes later in program order than its wait would be a real deadlock or a data
    race, never a valid kernel. Ids must be < `event_ids_per_pair` (else `SyncError`). Sets
    never waited for are listed in `Profile.warnings`.

BARRIER
    Every pipe (and the issue) waits until every earlier instruction of every pipe is done.

Costs (cycles; "work" is the cost without the fixed start-up)
    DMA      ``overhead.dma + work``; bytes = bursts * (burst bytes rounded up to the
             `alignment` block). On-chip routes: ``ceil(bytes / route rate)``.
             GM reads (COPY_GM_*): bytes in 128-byte lines resident in L2 move at
             ``min(route, l2.read)``, the rest at ``min(route, hbm)`` and become resident.
             GM writes (COPY_*_GM): ``ceil(bytes / min(route, l2.write))``; the lines become
             resident (write-back L2; HBM write traffic is not modelled). Atomic adds
             (COPY_*_GM_ATOMIC) also pay the L2's read of the destination lines first:
             ``+ ceil(hit / l2.read + miss / hbm)`` (see `isa.ATOMIC`).
             LOAD_GM_S (a scalar read of one GM element) is such a GM read of one block at
             the GM -> UB route's rate, run on S: the issue waits for it, as for any S work.
    VECTOR   ``overhead.vector + repeats * VECTOR_REPEAT_COST[instr]``, repeats =
             ``ceil(a * b / bytes_per_repeat)`` (a elements of b bytes). If c (rows) > 1,
             every row starts a fresh repeat: ``c * ceil(ceil(a / c) * b / bytes_per_repeat)``.
             VTRANSPOSE: whole blocks of 16 rows x 32 bytes, 2 repeats each (`isa.TRANSPOSE_BLOCK`).
    CUBE     ``overhead.cube + ceil(m/m0) * ceil(n/n0) * ceil(k/k0)`` with [m0, k0, n0] from
             the config's [cube] table for the CubeType in d (the config is the only source of
             the cube rates: f16 (also bf16), i8 and f32 each have their own).
    SCALAR   ``overhead.scalar + a``.   Flags, barriers: 0.

L2 (shared by all cores)
    One residency byte per `l2.line_bytes` line per GM argument (sized from `gm_nbytes`, grown
    on demand). Nothing is evicted until the resident bytes exceed the capacity, then lines go
    in FIFO order of when they became resident. Residency is looked up once per DMA: a line
    touched again by a later burst of the same DMA hits (a broadcast row misses once); a
    contiguous copy (one burst, or stride == burst) counts as one burst. HBM and L2 bandwidth
    are per-core shares: contention between cores is not modelled.

Cores
    Cores are independent except through L2. They are simulated in lockstep: each core runs
    until its next GM DMA, and the GM DMA with the earliest start time across cores goes to the
    L2 first (a heap). Within one core, GM DMAs reach L2 in program order even when an MTE3
    store starts before an earlier-issued MTE2 load (an approximation).

Results
    `cycles` = latest end of any instruction over all cores minus the earliest core start.
    busy[p] = cycles pipe p was held (start-ups included), summed over cores;
    utilization[p] = busy[p] / (cycles * n_cores). n_cores counts every core the launch asked
    for (block_dim), including cores that got no work.
    The roofline bound of a core, bound_k, is its largest per-pipe work (start-ups excluded);
    `bound` is the largest over cores (the critical core) and `bound_pipe` its pipe.
    ``efficiency = sum_k bound_k / (n_cores * cycles)``: the share of the launch's core-cycles
    in which each core's busiest pipe did useful work. It drops with poor overlap on a core,
    uneven splits (cores finishing early) and idle cores (bound_k = 0); `active_cores` counts
    the cores with bound_k > 0. bound / cycles alone is the critical core's figure.
    `cube_macs[t]`: MACs (m * n * k, unpadded) of the mmads of CubeType t. `cube_utilization`
    = sum_t (cube_macs[t] / chip peak MAC/s of t) / seconds, i.e. achieved cube FLOP/s over
    the peak of the dtype that ran; for several dtypes the peak is their MAC-weighted harmonic
    mean (`peak_cube_flops`). The chip peak counts all `config.cores` cores.

Performance: costs that are pure functions of the record are computed with numpy, then one
tight Python loop per core walks the events; GM DMAs go through the L2 model (numpy and
bytearray operations on line ranges). About 1e6 events per second on one host core.
"""
# The replay loop compares (`if s < t: s = t`) instead of calling max(): 6x cheaper per event.
from __future__ import annotations

import heapq
import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from simulator.config import HwConfig
from simulator.isa import (
    ATOMIC,
    EVENT_DTYPE,
    EVENT_WORDS,
    INFO,
    PIPES,
    ROUTE,
    TRANSPOSE_BLOCK,
    TRANSPOSE_REPEATS,
    VECTOR_REPEAT_COST,
    CubeType,
    Instr,
    Kind,
    Mem,
    Pipe,
)
from simulator.l2 import L2Model
from simulator.trace import Loc, format_loc, gc_paused, write_chrome_trace

PIPE_NAMES: tuple[str, ...] = tuple(p.name for p in PIPES)
N_PIPES = len(PIPES)

# Opcodes of the replay loop.
_OP_PIPE, _OP_S, _OP_SET, _OP_WAIT, _OP_BARRIER, _OP_GM = range(6)

_TABLE = 128  # instr codes are < 128
_KIND = np.full(_TABLE, -1, dtype=np.int64)
_PIPE = np.zeros(_TABLE, dtype=np.int64)
_VREP = np.zeros(_TABLE, dtype=np.int64)
_GM_READ = np.zeros(_TABLE, dtype=bool)
_GM_WRITE = np.zeros(_TABLE, dtype=bool)
_GM_ATOMIC = np.zeros(_TABLE, dtype=bool)  # read-modify-write in the L2 (isa.ATOMIC)
for _i, (_k, _p) in INFO.items():
    _KIND[_i] = _k
    _PIPE[_i] = _p
for _i, _c in VECTOR_REPEAT_COST.items():
    _VREP[_i] = _c
for _i, (_src, _dst) in ROUTE.items():
    _GM_READ[_i] = _src == Mem.GM
    _GM_WRITE[_i] = _dst == Mem.GM
    _GM_ATOMIC[_i] = _i in ATOMIC.values()
_GM_READ[Instr.LOAD_GM_S] = True  # a scalar read of GM: one block through the L2, on S


class SyncError(RuntimeError):
    """The kernel's flags cannot work: a wait with no set before it, or a bad event id / pipe.

    Attributes name the spot: `core`, `index` (event index in that core's program order),
    `source` ("file:line: text" or None).
    """

    def __init__(self, message: str, core: int, index: int, source: str | None = None) -> None:
        self.core = core
        self.index = index
        self.source = source
        super().__init__(message + (f"\n  at {source}" if source else ""))


def _pipe_name(p: int) -> str:
    return PIPE_NAMES[p] if 0 <= p < N_PIPES else str(p)


def _ceil_div(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    return -(-a // b)


@dataclass
class CoreProfile:
    """The timing of one core. Times are absolute cycles (the core starts at `start_cycle`)."""

    core: int
    start_cycle: int
    end_cycle: int
    busy: dict[str, int]
    work: dict[str, int]
    bound: int
    bound_pipe: str
    n_events: int
    l2_hit_bytes: int = 0
    l2_miss_bytes: int = 0
    gm_write_bytes: int = 0
    #: MACs of the mmads per cube dtype ("f16", "i8", "f32"; m * n * k, unpadded)
    cube_macs: dict[str, int] = field(default_factory=dict)
    #: with keep_timeline: the records, start / end cycle per record, and for each WAIT_FLAG
    #: the index of the SET_FLAG it consumed (-1 elsewhere)
    events: np.ndarray | None = field(default=None, repr=False)
    start: np.ndarray | None = field(default=None, repr=False)
    end: np.ndarray | None = field(default=None, repr=False)
    flag_src: np.ndarray | None = field(default=None, repr=False)

    @property
    def cycles(self) -> int:
        return self.end_cycle - self.start_cycle


@dataclass
class Profile:
    """The timing of one launch over all its cores; see the module docstring for definitions."""

    config: HwConfig
    cycles: int
    seconds: float
    n_cores: int
    busy: dict[str, int]
    utilization: dict[str, float]
    work: dict[str, int]
    bound: int
    bound_pipe: str
    efficiency: float
    per_core: list[CoreProfile]
    l2_hit_bytes: int
    l2_miss_bytes: int
    gm_write_bytes: int
    instr_counts: dict[str, int]
    warnings: list[str]
    locs: list[Loc] = field(default_factory=list, repr=False)
    #: cores whose roofline bound is > 0 (the others got no work)
    active_cores: int = 0
    #: MACs of the mmads per cube dtype ("f16", "i8", "f32"; m * n * k, unpadded), all cores
    cube_macs: dict[str, int] = field(default_factory=dict)

    @property
    def microseconds(self) -> float:
        return self.seconds * 1e6

    @property
    def l2_hit_rate(self) -> float:
        """Fraction of GM bytes read that hit L2 (0 when nothing was read)."""
        total = self.l2_hit_bytes + self.l2_miss_bytes
        return self.l2_hit_bytes / total if total else 0.0

    @property
    def cube_flops(self) -> int:
        """FLOPs the cube did: 2 per MAC of every mmad (unpadded m x n x k), all dtypes."""
        return 2 * sum(self.cube_macs.values())

    @property
    def peak_cube_flops(self) -> float:
        """The chip's cube peak in FLOP/s for the dtype(s) that ran: with several, the peaks
        weighted by each dtype's share of the MACs (harmonic mean). 0.0 without cube work."""
        macs = sum(self.cube_macs.values())
        if not macs:
            return 0.0
        return macs / sum(m / self.config.peak_flops(t) for t, m in self.cube_macs.items())

    @property
    def cube_utilization(self) -> float:
        """Achieved cube FLOP/s over `peak_cube_flops` (0.0 without cube work or time)."""
        peak = self.peak_cube_flops
        return self.cube_flops / self.seconds / peak if peak and self.seconds else 0.0

    def report(self) -> str:
        """A compact human summary: cycles, time, busy pipes, bound, efficiency (and how many
        cores had work), cube TFLOPS against the peak of the dtype that ran, L2, counts."""
        cfg = self.config
        plural = "s" if self.n_cores != 1 else ""
        head = (f"{cfg.name}: {self.n_cores} core{plural}, {self.cycles} cycles = "
                f"{self.microseconds:.3f} us at {cfg.clock_mhz} MHz")
        lines = [head]
        rows = [(p, self.busy[p], self.work[p], self.utilization[p])
                for p in PIPE_NAMES if self.busy[p] or self.work[p]]
        if rows:
            lines.append(f"  {'pipe':<5} {'busy%':>7} {'busy':>12} {'work':>12}")
            for p, busy, work, util in rows:
                lines.append(f"  {p:<5} {100 * util:>6.1f}% {busy:>12} {work:>12}")
        eff = (f"  bound {self.bound} cycles ({self.bound_pipe}), "
               f"efficiency {100 * self.efficiency:.1f}%")
        if self.n_cores > 1:
            eff += f" ({self.active_cores} of {self.n_cores} cores had work)"
        lines.append(eff)
        if self.cube_macs:
            lines.append(self._cube_line())
        if self.l2_hit_bytes or self.l2_miss_bytes or self.gm_write_bytes:
            lines.append(f"  L2 read {_kib(self.l2_hit_bytes)} hit / {_kib(self.l2_miss_bytes)} "
                         f"miss (hit rate {100 * self.l2_hit_rate:.1f}%), "
                         f"GM written {_kib(self.gm_write_bytes)}")
        if self.instr_counts:
            counts = sorted(self.instr_counts.items(), key=lambda kv: (-kv[1], kv[0]))
            lines.append("  instructions: " + ", ".join(f"{k} {v}" for k, v in counts))
        lines.extend(f"  warning: {w}" for w in self.warnings)
        return "\n".join(lines)

    def _cube_line(self) -> str:
        cfg = self.config
        achieved = self.cube_flops / self.seconds / 1e12 if self.seconds else 0.0
        macs = sum(self.cube_macs.values())
        if len(self.cube_macs) == 1:
            (t,) = self.cube_macs
            rate = cfg.cube_rate(t).macs_per_cycle
            what = (f"{_CUBE_LABEL.get(t, t)}: {cfg.cores} cores x {rate} MAC x 2 x "
                    f"{cfg.clock_mhz / 1000:.2f} GHz")
        else:
            shares = " + ".join(f"{_CUBE_LABEL.get(t, t)} {m / macs:.0%}"
                                for t, m in sorted(self.cube_macs.items()))
            what = f"{shares} of the MACs, peaks weighted by MACs"
        return (f"  cube: {achieved:.1f} TFLOPS of {self.peak_cube_flops / 1e12:.1f} peak "
                f"({what}), {self.cube_utilization:.1%}")

    def save_trace(self, path: str | os.PathLike[str]) -> None:
        """Write a Chrome trace JSON (open in Perfetto / chrome://tracing; gzip if the path ends
        in .gz). Needs `simulate(..., keep_timeline=True)`."""
        write_chrome_trace(self, path)


#: how a cube dtype key reads in the report (the f16 rate also serves bf16)
_CUBE_LABEL = {"f16": "f16/bf16"}


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


# --------------------------------------------------------------------------------------------
# one core

def _as_events(arr: np.ndarray, core: int) -> np.ndarray:
    if arr.dtype == EVENT_DTYPE:
        return arr.reshape(-1)
    if arr.dtype == np.int64 and arr.ndim == 2 and arr.shape[1] == EVENT_WORDS:
        return np.ascontiguousarray(arr).view(EVENT_DTYPE).reshape(-1)
    raise TypeError(f"core {core}: events must be an isa.EVENT_DTYPE array or int64 "
                    f"(n, {EVENT_WORDS}), got {arr.dtype} {arr.shape}")


class _Core:
    """Replay state of one core. `run` replays until a GM DMA that other cores' GM DMAs must
    reach the shared L2 before, and returns its start cycle; the scheduler later calls
    `finish_gm` to complete it and `run` again; `run` returns None at the end."""

    def __init__(self, idx: int, ev: np.ndarray, cfg: HwConfig, start: int,
                 locs: Sequence[Loc] | None) -> None:
        self.idx, self.ev, self.cfg, self.locs = idx, ev, cfg, locs
        n = self.n = ev.size
        instr = np.ascontiguousarray(ev["instr"])
        if n and (instr.min() < 0 or instr.max() >= _TABLE or (_KIND[instr] < 0).any()):
            bad = int(np.flatnonzero((instr < 0) | (instr >= _TABLE)
                                     | (_KIND[np.clip(instr, 0, _TABLE - 1)] < 0))[0])
            raise ValueError(f"core {idx}, event {bad}: unknown instruction code "
                             f"{int(instr[bad])}")
        kind = _KIND[instr]
        pipe = _PIPE[instr]
        oh = cfg.overhead
        cost = np.zeros(n, dtype=np.int64)  # with start-ups
        work = np.zeros(n, dtype=np.int64)  # without; GM DMAs are filled in by _gm_cost

        def field(name: str, sel: np.ndarray) -> np.ndarray:
            return ev[name][sel]

        # DMA: whole 32-byte blocks per burst at the route rate (GM routes: see _gm_cost)
        sel = np.flatnonzero(kind == Kind.DMA)
        rate = np.ones(_TABLE, dtype=np.int64)
        for r in ROUTE:
            rate[r] = cfg.dma.rate(r)
        rate[Instr.LOAD_GM_S] = cfg.dma.GM_UB  # the GM read port (then bounded by L2 / HBM)
        block = cfg.alignment
        burst = _ceil_div(np.maximum(field("a", sel), 0), block) * block
        bursts = np.maximum(field("b", sel), 0)
        w = _ceil_div(burst * bursts, rate[instr[sel]])
        work[sel] = w
        cost[sel] = w + oh.dma
        gm = (_GM_READ | _GM_WRITE)[instr[sel]]
        gm_idx = sel[gm]
        self.gm = dict(zip(gm_idx.tolist(), zip(
            field("c", gm_idx).tolist(), field("d", gm_idx).tolist(), burst[gm].tolist(),
            bursts[gm].tolist(), field("e", gm_idx).tolist(), rate[instr[gm_idx]].tolist(),
            _GM_READ[instr[gm_idx]].tolist(), _GM_ATOMIC[instr[gm_idx]].tolist())))

        # VECTOR: repeats of bytes_per_repeat, each row starting a fresh repeat
        sel = np.flatnonzero(kind == Kind.VECTOR)
        rows = np.maximum(field("c", sel), 1)
        per_row = _ceil_div(np.maximum(field("a", sel), 0), rows) * np.maximum(field("b", sel), 0)
        w = rows * _ceil_div(per_row, cfg.vector_bytes_per_repeat) * _VREP[instr[sel]]
        tr = instr[sel] == Instr.VTRANSPOSE  # whole 16-row x 32-byte blocks (isa.TRANSPOSE_BLOCK)
        if tr.any():
            br, bb = TRANSPOSE_BLOCK
            cols = _ceil_div(np.maximum(field("a", sel[tr]), 0), rows[tr])
            lane = np.maximum(field("b", sel[tr]), 2)
            w[tr] = (_ceil_div(rows[tr], br) * _ceil_div(cols * lane, bb) * TRANSPOSE_REPEATS
                     * _VREP[Instr.VTRANSPOSE])
        work[sel] = w
        cost[sel] = w + oh.vector

        # CUBE: fractal steps of the dtype's [m0, k0, n0]
        self.cube_macs: dict[str, int] = {}
        sel = np.flatnonzero(kind == Kind.CUBE)
        if sel.size:
            ctype = field("d", sel)
            if ctype.min() < 0 or ctype.max() >= len(CubeType):
                bad = int(sel[(ctype < 0) | (ctype >= len(CubeType))][0])
                raise ValueError(f"core {idx}, event {bad}: bad CubeType {int(ev['d'][bad])}")
            m0, k0, n0 = (np.array([getattr(cfg.cube_rate(t), f) for t in CubeType])
                          for f in ("m0", "k0", "n0"))
            w = (_ceil_div(field("a", sel), m0[ctype]) * _ceil_div(field("b", sel), n0[ctype])
                 * _ceil_div(field("c", sel), k0[ctype]))
            work[sel] = w
            cost[sel] = w + oh.cube
            macs = (np.maximum(field("a", sel), 0) * np.maximum(field("b", sel), 0)
                    * np.maximum(field("c", sel), 0))
            for t in np.unique(ctype).tolist():
                self.cube_macs[CubeType(t).name.lower()] = int(macs[ctype == t].sum())

        sel = np.flatnonzero(kind == Kind.SCALAR)
        w = np.maximum(field("a", sel), 0)
        work[sel] = w
        cost[sel] = w + oh.scalar

        # flags: the pipe comes from the record; key = (producer, consumer, id) as one int
        op = np.full(n, _OP_PIPE, dtype=np.int64)
        op[pipe == Pipe.S] = _OP_S
        key = np.zeros(n, dtype=np.int64)
        sel = np.flatnonzero(kind == Kind.FLAG)
        if sel.size:
            f_instr, f_pipe = instr[sel], field("pipe", sel)
            f_a, f_b = field("a", sel), field("b", sel)
            self._check_flags(sel, f_instr, f_pipe, f_a, f_b)
            is_set = f_instr == Instr.SET_FLAG
            producer = np.where(is_set, f_pipe, f_a)
            consumer = np.where(is_set, f_a, f_pipe)
            key[sel] = (producer * N_PIPES + consumer) * cfg.event_ids_per_pair + f_b
            pipe[sel] = f_pipe
            op[sel] = np.where(is_set, _OP_SET, _OP_WAIT)
        op[kind == Kind.BARRIER] = _OP_BARRIER
        op[gm_idx] = _OP_GM

        self.instr, self.pipe_arr = instr, pipe
        self.work = work
        self.op = op.tolist()
        self.pipe = pipe.tolist()
        self.cost = cost.tolist()
        self.key = key.tolist()
        self.work_gm: dict[int, int] = {}
        self.dma_startup, self.issue = oh.dma, oh.issue
        self.l2_read = cfg.l2.read_bytes_per_cycle
        self.l2_write = cfg.l2.write_bytes_per_cycle
        self.hbm = cfg.l2.hbm_bytes_per_cycle
        self.starts = [0] * n
        self.ends = [0] * n
        self.flag_src: dict[int, int] = {}
        self.fifo: dict[int, deque[tuple[int, int]]] = {}
        self.free = [start] * N_PIPES
        self.t = start
        self.start_cycle = start
        self.i = 0
        self.pending = 0
        self.l2_hit = self.l2_miss = self.gm_written = 0

    def _source(self, i: int) -> str | None:
        return format_loc(self.locs, int(self.ev["loc"][i]))

    def _flag_text(self, i: int) -> str:
        instr, pipe, a, b = (int(self.ev[f][i]) for f in ("instr", "pipe", "a", "b"))
        if instr == Instr.SET_FLAG:
            return f"set_flag({_pipe_name(pipe)}->{_pipe_name(a)}, id {b})"
        return f"wait_flag({_pipe_name(a)}->{_pipe_name(pipe)}, id {b})"

    def _check_flags(self, sel: np.ndarray, instr: np.ndarray, pipe: np.ndarray,
                     a: np.ndarray, b: np.ndarray) -> None:
        """Flag records `sel` name real pipes and an id below event_ids_per_pair."""
        ids = self.cfg.event_ids_per_pair
        bad_pipe = (pipe < 0) | (pipe >= N_PIPES) | (a < 0) | (a >= N_PIPES)
        bad = bad_pipe | (b < 0) | (b >= ids)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            i = int(sel[j])
            what = (f"pipes must be one of {', '.join(PIPE_NAMES)}" if bad_pipe[j] else
                    f"event id out of range (this chip has {ids} ids per pipe pair, "
                    f"0..{ids - 1})")
            raise SyncError(f"core {self.idx}, event {i}: {self._flag_text(i)}: {what}",
                            self.idx, i, self._source(i))

    def _deadlock(self, i: int) -> SyncError:
        return SyncError(
            f"core {self.idx}, event {i}: {self._flag_text(i)} has no pending set_flag: the "
            f"kernel deadlocks (every set_flag must come before its wait_flag in program order)",
            self.idx, i, self._source(i))

    def run(self, l2: L2Model, limit: tuple[int, int] | None = None) -> int | None:
        """Replay events until a GM DMA that must wait for other cores' earlier GM DMAs (its
        (start, core) is after `limit`, the earliest pending one; None: always wait); return
        its start cycle, or None at the end. GM DMAs before `limit` go to `l2` directly."""
        op, pipe, cost, key = self.op, self.pipe, self.cost, self.key
        idx = self.idx
        limit_s, limit_k = limit if limit is not None else (-(1 << 62), 0)
        starts, ends, free, fifo = self.starts, self.ends, self.free, self.fifo
        flag_src = self.flag_src
        ic = self.cfg.overhead.issue
        lat = self.cfg.overhead.flag_latency
        t = self.t
        for i in range(self.i, self.n):
            o = op[i]
            if o == _OP_PIPE:
                p = pipe[i]
                s = free[p]
                if s < t:
                    s = t
                e = s + cost[i]
                free[p] = e
                starts[i] = s
                ends[i] = e
                t += ic
            elif o == _OP_S:  # runs on the issuing unit: free[S] <= t always
                e = t + cost[i]
                free[0] = e
                starts[i] = t
                ends[i] = e
                t = e if e > t + ic else t + ic
            elif o == _OP_SET:
                p = pipe[i]
                s = free[p]
                if s < t:
                    s = t
                free[p] = s
                starts[i] = s
                ends[i] = s
                q = fifo.get(key[i])
                if q is None:
                    fifo[key[i]] = deque(((s + lat, i),))
                else:
                    q.append((s + lat, i))
                t += ic
            elif o == _OP_WAIT:
                p = pipe[i]
                s = free[p]
                if s < t:
                    s = t
                q = fifo.get(key[i])
                if not q:
                    self.t = t
                    raise self._deadlock(i)
                ready, j = q.popleft()
                e = ready if ready > s else s
                free[p] = e
                starts[i] = s
                ends[i] = e
                flag_src[i] = j
                t = t + ic if p or e <= t + ic else e
            elif o == _OP_BARRIER:
                s = max(free)
                if s < t:
                    s = t
                free[:] = [s] * N_PIPES
                starts[i] = s
                ends[i] = s
                t = s if s > t + ic else t + ic
            else:  # a GM DMA: the shared L2 sees them in order of start time over all cores
                p = pipe[i]
                s = free[p]
                if s < t:
                    s = t
                if s > limit_s or (s == limit_s and idx > limit_k):
                    self.i, self.t, self.pending = i, t, s
                    return s
                e = s + self._gm_cost(i, l2)
                free[p] = e
                starts[i] = s
                ends[i] = e
                t = e if p == Pipe.S and e > t + ic else t + ic  # the scalar unit waits for its own read
        self.i, self.t = self.n, t
        return None

    def finish_gm(self, l2: L2Model) -> None:
        """Complete the GM DMA `run` stopped at, going through the shared L2."""
        i, s = self.i, self.pending
        e = s + self._gm_cost(i, l2)
        self.free[self.pipe[i]] = e
        self.starts[i] = s
        self.ends[i] = e
        t = self.t + self.issue
        self.t = e if self.pipe[i] == Pipe.S and e > t else t  # the scalar unit waits for its own read
        self.i = i + 1

    def _gm_cost(self, i: int, l2: L2Model) -> int:
        """Cycles of GM DMA `i` (start-up included) given the L2 state; updates the L2."""
        arg, offset, burst, count, stride, route, is_read, atomic = self.gm[i]
        total = burst * count
        hit = l2.touch(arg, offset, burst, count, stride)
        if is_read:
            miss = total - hit
            hit_rate = min(route, self.l2_read)
            miss_rate = min(route, self.hbm)
            work = -(-(hit * miss_rate + miss * hit_rate) // (hit_rate * miss_rate))
            self.l2_hit += hit
            self.l2_miss += miss
        else:
            work = -(-total // min(route, self.l2_write))
            self.gm_written += total
            if atomic:  # the L2 reads each destination line (from HBM if not resident) before adding
                miss = total - hit
                work += -(-(hit * self.hbm + miss * self.l2_read) // (self.l2_read * self.hbm))
                self.l2_hit += hit
                self.l2_miss += miss
        self.work_gm[i] = work
        c = self.cost[i] = self.dma_startup + work
        return c

    def unconsumed(self) -> list[str]:
        """Warnings for sets never waited for."""
        out = []
        for q in self.fifo.values():
            if q:
                j = q[0][1]
                src = self._source(j)
                out.append(f"core {self.idx}: {len(q)} {self._flag_text(j)} never waited for "
                           f"(first at event {j}{', ' + src if src else ''})")
        return out

    def profile(self, keep_timeline: bool) -> CoreProfile:
        cost = np.asarray(self.cost, dtype=np.int64)
        if self.work_gm:
            self.work[np.fromiter(self.work_gm.keys(), np.int64)] = np.fromiter(
                self.work_gm.values(), np.int64)
        busy = np.bincount(self.pipe_arr, weights=cost, minlength=N_PIPES + 1)
        work = np.bincount(self.pipe_arr, weights=self.work, minlength=N_PIPES + 1)
        busy_d = {name: int(busy[k]) for k, name in enumerate(PIPE_NAMES)}
        work_d = {name: int(work[k]) for k, name in enumerate(PIPE_NAMES)}
        bound_pipe = max(PIPE_NAMES, key=lambda p: work_d[p])
        ends = np.asarray(self.ends, dtype=np.int64)
        end_cycle = max(int(ends.max()) if self.n else self.start_cycle, self.start_cycle)
        prof = CoreProfile(self.idx, self.start_cycle, end_cycle, busy_d, work_d,
                           work_d[bound_pipe], bound_pipe, self.n, self.l2_hit, self.l2_miss,
                           self.gm_written, dict(self.cube_macs))
        if keep_timeline:
            src = np.full(self.n, -1, dtype=np.int64)
            if self.flag_src:
                src[np.fromiter(self.flag_src.keys(), np.int64)] = np.fromiter(
                    self.flag_src.values(), np.int64)
            prof.events = self.ev
            prof.start = np.asarray(self.starts, dtype=np.int64)
            prof.end = ends
            prof.flag_src = src
        return prof


# --------------------------------------------------------------------------------------------

def simulate(cores: list[np.ndarray], cfg: HwConfig, locs: list[Loc] | None = None,
             gm_nbytes: list[int] | None = None, *, keep_timeline: bool = True,
             start_cycle: int | Sequence[int] = 0) -> Profile:
    """Time a launch: `cores[i]` holds core i's event records (`isa.EVENT_DTYPE`, or int64
    (n, 8)) in program order. `locs[loc]` = (file, line, col, text) names source lines,
    `gm_nbytes[arg]` sizes the GM arguments for the L2 model. `start_cycle` (one value or one
    per core) offsets each core's start, for a stream model. Raises `SyncError` on bad flags."""
    with gc_paused():
        return _simulate(cores, cfg, locs, gm_nbytes, keep_timeline, start_cycle)


def _simulate(cores: list[np.ndarray], cfg: HwConfig, locs: list[Loc] | None,
              gm_nbytes: list[int] | None, keep_timeline: bool,
              start_cycle: int | Sequence[int]) -> Profile:
    n_cores = len(cores)
    starts = ([int(start_cycle)] * n_cores if isinstance(start_cycle, (int, np.integer))
              else [int(s) for s in start_cycle])
    if len(starts) != n_cores:
        raise ValueError(f"start_cycle has {len(starts)} entries for {n_cores} cores")
    sims = [_Core(k, _as_events(np.asarray(ev), k), cfg, starts[k], locs)
            for k, ev in enumerate(cores)]
    l2 = L2Model(cfg, gm_nbytes)
    heap: list[tuple[int, int]] = []
    for k, sim in enumerate(sims):
        s = sim.run(l2)
        if s is not None:
            heap.append((s, k))
    heapq.heapify(heap)
    while heap:
        _, k = heapq.heappop(heap)
        sims[k].finish_gm(l2)
        # run on until a GM DMA later than every other core's next one
        s = sims[k].run(l2, heap[0] if heap else (1 << 62, 0))
        if s is not None:
            heapq.heappush(heap, (s, k))

    per_core = [sim.profile(keep_timeline) for sim in sims]
    warnings = [w for sim in sims for w in sim.unconsumed()]
    counts = np.zeros(_TABLE, dtype=np.int64)
    for sim in sims:
        if sim.n:
            counts += np.bincount(sim.instr, minlength=_TABLE)
    instr_counts = {Instr(int(i)).name: int(counts[i]) for i in np.flatnonzero(counts)}
    if per_core:
        cycles = max(c.end_cycle for c in per_core) - min(c.start_cycle for c in per_core)
    else:
        cycles = 0
    busy = {p: sum(c.busy[p] for c in per_core) for p in PIPE_NAMES}
    work = {p: sum(c.work[p] for c in per_core) for p in PIPE_NAMES}
    denom = cycles * n_cores
    utilization = {p: busy[p] / denom if denom else 0.0 for p in PIPE_NAMES}
    top = max(per_core, key=lambda c: c.bound, default=None)
    bound = top.bound if top else 0
    cube_macs: dict[str, int] = {}
    for c in per_core:
        for t, m in c.cube_macs.items():
            cube_macs[t] = cube_macs.get(t, 0) + m
    return Profile(
        config=cfg, cycles=cycles, seconds=cycles / cfg.clock_hz, n_cores=n_cores, busy=busy,
        utilization=utilization, work=work, bound=bound,
        bound_pipe=top.bound_pipe if top else PIPE_NAMES[0],
        efficiency=sum(c.bound for c in per_core) / denom if denom else 0.0, per_core=per_core,
        l2_hit_bytes=sum(c.l2_hit_bytes for c in per_core),
        l2_miss_bytes=sum(c.l2_miss_bytes for c in per_core),
        gm_write_bytes=sum(c.gm_write_bytes for c in per_core),
        instr_counts=instr_counts, warnings=warnings, locs=list(locs or []),
        active_cores=sum(1 for c in per_core if c.bound > 0), cube_macs=cube_macs)
