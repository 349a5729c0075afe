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
             resident (write-back L2; HBM write traffic is not modelled).
    VECTOR   ``overhead.vector + repeats * VECTOR_REPEAT_COST[instr]``, repeats =
             ``ceil(a * b / bytes_per_repeat)`` (a elements of b bytes). If c (rows) > 1,
             every row starts a fresh repeat: ``c * ceil(ceil(a / c) * b / bytes_per_repeat)``.
    CUBE     ``overhead.cube + ceil(m/m0) * ceil(n/n0) * ceil(k/k0)`` with the config's
             [m0, k0, n0] for the CubeType in d (f16 16x16x16, i8 16x32x16, f32 16x8x16).
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
    utilization[p] = busy[p] / (cycles * n_cores). The roofline bound of a core is the largest
    per-pipe work; `bound` is the largest over cores and `efficiency = bound / cycles`.

Performance: costs that are pure functions of the record are computed with numpy, then one
tight Python loop per core walks the events; GM DMAs go through the L2 model (numpy and
bytearray operations on line ranges). About 1e6 events per second on one host core.
"""
# The replay loop compares (`if s < t: s = t`) instead of calling max(): 6x cheaper per event.
from __future__ import annotations

import gc
import heapq
import os
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from simulator.config import HwConfig
from simulator.isa import (
    EVENT_DTYPE,
    EVENT_WORDS,
    INFO,
    PIPES,
    ROUTE,
    VECTOR_REPEAT_COST,
    CubeType,
    Instr,
    Kind,
    Mem,
    Pipe,
)

#: a source location as the launcher passes it: (file, line, col, text of the line)
Loc = tuple[str, int, int, str]

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
for _i, (_k, _p) in INFO.items():
    _KIND[_i] = _k
    _PIPE[_i] = _p
for _i, _c in VECTOR_REPEAT_COST.items():
    _VREP[_i] = _c
for _i, (_src, _dst) in ROUTE.items():
    _GM_READ[_i] = _src == Mem.GM
    _GM_WRITE[_i] = _dst == Mem.GM


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


def _pipe_name(p: int) -> str:
    return PIPE_NAMES[p] if 0 <= p < N_PIPES else str(p)


def _ceil_div(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    return -(-a // b)


def format_loc(locs: Sequence[Loc] | None, loc: int) -> str | None:
    """`"file:line: text"` for a location index, or None when unknown."""
    if not locs or loc < 0 or loc >= len(locs):
        return None
    file, line, _col, text = locs[loc]
    return f"{file}:{line}: {text.strip()}" if text else f"{file}:{line}"


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

    @property
    def microseconds(self) -> float:
        return self.seconds * 1e6

    @property
    def l2_hit_rate(self) -> float:
        """Fraction of GM bytes read that hit L2 (0 when nothing was read)."""
        total = self.l2_hit_bytes + self.l2_miss_bytes
        return self.l2_hit_bytes / total if total else 0.0

    def report(self) -> str:
        """A compact human summary: cycles, time, busy pipes, bound, efficiency, L2, counts."""
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
        lines.append(f"  bound {self.bound} cycles ({self.bound_pipe}), "
                     f"efficiency {100 * self.efficiency:.1f}%")
        if self.l2_hit_bytes or self.l2_miss_bytes or self.gm_write_bytes:
            lines.append(f"  L2 read {_kib(self.l2_hit_bytes)} hit / {_kib(self.l2_miss_bytes)} "
                         f"miss (hit rate {100 * self.l2_hit_rate:.1f}%), "
                         f"GM written {_kib(self.gm_write_bytes)}")
        if self.instr_counts:
            counts = sorted(self.instr_counts.items(), key=lambda kv: (-kv[1], kv[0]))
            lines.append("  instructions: " + ", ".join(f"{k} {v}" for k, v in counts))
        lines.extend(f"  warning: {w}" for w in self.warnings)
        return "\n".join(lines)

    def save_trace(self, path: str | os.PathLike[str]) -> None:
        """Write a Chrome trace JSON (open in Perfetto / chrome://tracing; gzip if the path ends
        in .gz). Needs `simulate(..., keep_timeline=True)`."""
        from simulator.trace import write_chrome_trace
        write_chrome_trace(self, path)


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


# --------------------------------------------------------------------------------------------
# L2

class L2Model:
    """Residency of GM lines in the shared L2: one byte per line and GM argument (a bytearray,
    so the common contiguous access is a few C calls), FIFO eviction."""

    def __init__(self, cfg: HwConfig, gm_nbytes: Sequence[int] | None = None) -> None:
        self.line = cfg.l2.line_bytes
        self.capacity_lines = cfg.l2.capacity // self.line
        self.maps: dict[int, bytearray] = {}
        for arg, nbytes in enumerate(gm_nbytes or ()):
            self.maps[arg] = bytearray(-(-int(nbytes) // self.line))
        self.fifo: deque[tuple[int, tuple[int, int] | np.ndarray]] = deque()
        self.resident_lines = 0

    @property
    def resident_bytes(self) -> int:
        return self.resident_lines * self.line

    def _bitmap(self, arg: int, last_line: int) -> bytearray:
        m = self.maps.get(arg)
        if m is None:
            m = self.maps[arg] = bytearray(last_line + 1)
        elif len(m) <= last_line:
            grown = bytearray(max(last_line + 1, 2 * len(m)))
            grown[:len(m)] = m
            m = self.maps[arg] = grown
        return m

    def touch(self, arg: int, offset: int, length: int, count: int, stride: int) -> int:
        """Access `count` ranges of `length` bytes at `offset + i * stride` of GM argument
        `arg`; mark their lines resident. Returns how many of the bytes were resident before."""
        if length <= 0 or count <= 0:
            return 0
        line = self.line
        if count == 1 or stride == length:  # one contiguous range
            lo, hi = offset, offset + length * count
            if lo < 0:
                raise ValueError(f"GM access at negative offset {lo} of argument {arg}")
            l0, l1 = lo // line, (hi - 1) // line + 1
            m = self._bitmap(arg, l1 - 1)
            n_res = m.count(1, l0, l1)
            if n_res == 0:
                m[l0:l1] = b"\x01" * (l1 - l0)
                self._admit(arg, (l0, l1), l1 - l0)
                return 0
            hit = n_res * line
            if m[l0]:
                hit -= lo - l0 * line
            if m[l1 - 1]:
                hit -= l1 * line - hi
            if n_res < l1 - l0:
                seg = np.frombuffer(m, dtype=np.uint8)[l0:l1]
                new = np.flatnonzero(seg == 0) + l0
                seg[:] = 1
                self._admit(arg, new, new.size)
            return hit
        if offset < 0:
            raise ValueError(f"GM access at negative offset {offset} of argument {arg}")
        span = (offset % line + length - 1) // line + 1  # lines per burst
        if stride > 0 and stride % line == 0 and span <= stride // line:
            return self._touch_rows(arg, offset, length, count, stride // line, span)
        starts = offset + np.arange(count, dtype=np.int64) * stride
        if int(starts.min()) < 0:
            raise ValueError(f"GM access at negative offset {int(starts.min())} of argument {arg}")
        ends = starts + length
        first, last = starts // line, (ends - 1) // line
        k = int((last - first).max()) + 1
        lines = first[:, None] + np.arange(k, dtype=np.int64)
        valid = lines <= last[:, None]
        overlap = (np.minimum(ends[:, None], (lines + 1) * line)
                   - np.maximum(starts[:, None], lines * line))
        lines, overlap = lines[valid], overlap[valid]
        bits = np.frombuffer(self._bitmap(arg, int(lines.max())), dtype=np.uint8)
        resident = bits[lines] != 0
        # a line touched by several bursts of this DMA can only miss on its first touch
        uniq, first_touch = np.unique(lines, return_index=True)
        if uniq.size < lines.size:
            again = np.ones(lines.size, dtype=bool)
            again[first_touch] = False
            resident |= again
        hit = int(overlap[resident].sum())
        new = uniq[bits[uniq] == 0]
        if new.size:
            bits[new] = 1
            self._admit(arg, new, new.size)
        return hit

    def _touch_rows(self, arg: int, offset: int, length: int, count: int, step: int,
                    span: int) -> int:
        """Bursts a whole number of lines apart that share no line: every burst covers `span`
        lines at the same position within them, so the lines form a (count, span) strided
        view of the bitmap."""
        line = self.line
        l0 = offset // line
        m = np.frombuffer(self._bitmap(arg, l0 + count * step - 1), dtype=np.uint8)
        rows = m[l0:l0 + count * step].reshape(count, step)[:, :span]
        n_res = int(np.count_nonzero(rows))
        hit = n_res * line
        if n_res:
            head = offset % line  # bytes of the first line before each burst
            tail = span * line - head - length  # bytes of the last line after it
            if head:
                hit -= head * int(np.count_nonzero(rows[:, 0]))
            if tail:
                hit -= tail * int(np.count_nonzero(rows[:, -1]))
        if n_res < rows.size:
            lines = (l0 + step * np.arange(count, dtype=np.int64))[:, None] + np.arange(span)
            new = lines[rows == 0] if n_res else lines.reshape(-1)
            rows[:] = 1
            self._admit(arg, new, new.size)
        return hit

    def _admit(self, arg: int, lines: tuple[int, int] | np.ndarray, count: int) -> None:
        """Lines just made resident: a range (lo, hi) or an array of line numbers."""
        self.fifo.append((arg, lines))
        self.resident_lines += count
        excess = self.resident_lines - self.capacity_lines
        while excess > 0:
            victim_arg, victims = self.fifo.popleft()
            m = self.maps[victim_arg]
            if isinstance(victims, tuple):
                lo, hi = victims
                if hi - lo > excess:
                    self.fifo.appendleft((victim_arg, (lo + excess, hi)))
                    hi = lo + excess
                m[lo:hi] = bytes(hi - lo)
                k = hi - lo
            else:
                if victims.size > excess:
                    self.fifo.appendleft((victim_arg, victims[excess:]))
                    victims = victims[:excess]
                np.frombuffer(m, dtype=np.uint8)[victims] = 0
                k = int(victims.size)
            self.resident_lines -= k
            excess -= k


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
            _GM_READ[instr[gm_idx]].tolist())))

        # VECTOR: repeats of bytes_per_repeat, each row starting a fresh repeat
        sel = np.flatnonzero(kind == Kind.VECTOR)
        rows = np.maximum(field("c", sel), 1)
        per_row = _ceil_div(np.maximum(field("a", sel), 0), rows) * np.maximum(field("b", sel), 0)
        w = rows * _ceil_div(per_row, cfg.vector_bytes_per_repeat) * _VREP[instr[sel]]
        work[sel] = w
        cost[sel] = w + oh.vector

        # CUBE: fractal steps of the dtype's [m0, k0, n0]
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
                t += ic
        self.i, self.t = self.n, t
        return None

    def finish_gm(self, l2: L2Model) -> None:
        """Complete the GM DMA `run` stopped at, going through the shared L2."""
        i, s = self.i, self.pending
        e = s + self._gm_cost(i, l2)
        self.free[self.pipe[i]] = e
        self.starts[i] = s
        self.ends[i] = e
        self.t += self.issue
        self.i = i + 1

    def _gm_cost(self, i: int, l2: L2Model) -> int:
        """Cycles of GM DMA `i` (start-up included) given the L2 state; updates the L2."""
        arg, offset, burst, count, stride, route, is_read = self.gm[i]
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
                           self.gm_written)
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
    return Profile(
        config=cfg, cycles=cycles, seconds=cycles / cfg.clock_hz, n_cores=n_cores, busy=busy,
        utilization=utilization, work=work, bound=bound,
        bound_pipe=top.bound_pipe if top else PIPE_NAMES[0],
        efficiency=bound / cycles if cycles else 0.0, per_core=per_core,
        l2_hit_bytes=sum(c.l2_hit_bytes for c in per_core),
        l2_miss_bytes=sum(c.l2_miss_bytes for c in per_core),
        gm_write_bytes=sum(c.gm_write_bytes for c in per_core),
        instr_counts=instr_counts, warnings=warnings, locs=list(locs or []))
