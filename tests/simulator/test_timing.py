"""The timing model, against cycle counts derived by hand from the default config.

Default ascend910b1 numbers used below (pinned by `test_default_numbers`):
issue 1 cycle, start-up dma 12 / vector 2 / cube 2 / scalar 0, flag latency 2,
vector 256 B per repeat, DMA L1->L0A 512, L1->L0B 256, UB->L1 128, UB->GM 64, L0C->GM 128
(bounded by the L2 write rate 86), L2 read hit 110, HBM 32 bytes/cycle, L2 lines of 128 B.
"""
import dataclasses
import gzip
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import (
    EVENT_DTYPE,
    CubeType,
    Instr,
    L2Model,
    Pipe,
    SyncError,
    load_config,
    simulate,
    write_chrome_trace,
)
from simulator.isa import INFO

I, P = Instr, Pipe
CFG = load_config("ascend910b1")
LOCS = [("k.py", 7, 8, "    y = x + 1"), ("k.py", 9, 4, "    store(out, y)")]


def rec(instr: Instr, a: int = 0, b: int = 0, c: int = 0, d: int = 0, e: int = 0, *,
        pipe: int | None = None, loc: int = -1) -> tuple:
    return (int(instr), int(INFO[instr][1] if pipe is None else pipe), loc, a, b, c, d, e)


def set_(src: Pipe, dst: Pipe, eid: int, loc: int = -1) -> tuple:
    """set_flag(src -> dst, eid), issued on the producer `src`."""
    return rec(I.SET_FLAG, dst, eid, pipe=src, loc=loc)


def wait(src: Pipe, dst: Pipe, eid: int, loc: int = -1) -> tuple:
    """wait_flag(src -> dst, eid), issued on the consumer `dst`."""
    return rec(I.WAIT_FLAG, src, eid, pipe=dst, loc=loc)


def prog(*records: tuple) -> np.ndarray:
    return np.array(list(records), dtype=EVENT_DTYPE)


def run(*records: tuple, **kw):
    return simulate([prog(*records)], CFG, **kw)


def test_default_numbers():
    oh = CFG.overhead
    assert (oh.issue, oh.dma, oh.vector, oh.cube, oh.scalar, oh.flag_latency) == (1, 12, 2, 2, 0, 2)
    assert CFG.vector_bytes_per_repeat == 256 and CFG.alignment == 32
    assert (CFG.dma.L1_L0A, CFG.dma.L1_L0B, CFG.dma.UB_L1, CFG.dma.UB_GM) == (512, 256, 128, 64)
    assert (CFG.l2.read_bytes_per_cycle, CFG.l2.write_bytes_per_cycle,
            CFG.l2.hbm_bytes_per_cycle, CFG.l2.line_bytes) == (110, 86, 32, 128)


# ---------------------------------------------------------------------------- single costs

def test_single_dma_startup_and_work():
    p = run(rec(I.COPY_L1_L0A, 4096, 1))  # 12 + 4096/512
    assert p.cycles == 20
    assert p.busy["MTE1"] == 20 and p.work["MTE1"] == 8
    assert p.bound == 8 and p.bound_pipe == "MTE1"
    assert p.efficiency == pytest.approx(8 / 20)
    assert p.utilization["MTE1"] == 1.0 and p.utilization["V"] == 0.0
    assert p.seconds == pytest.approx(20 / 1.85e9)


def test_dma_bursts_round_up_to_32_byte_blocks():
    # 3 bursts of 100 B -> 3 x 128 B = 384 B at 256 B/cycle = 1.5 -> 2, plus 12
    p = run(rec(I.COPY_L1_L0B, 100, 3))
    assert p.cycles == 14 and p.work["MTE1"] == 2


def test_single_vector_costs():
    assert run(rec(I.VADD, 1024, 4)).cycles == 2 + 16  # 4096 B = 16 repeats x 1
    assert run(rec(I.VEXP, 1000, 2)).cycles == 2 + 8 * 2  # 2000 B -> 8 repeats x 2
    assert run(rec(I.VGELU, 64, 4)).cycles == 2 + 6
    # rows: each of 10 rows starts its own repeat
    assert run(rec(I.VREDUCE_SUM, 640, 4, 10)).cycles == 2 + 10 * 1 * 2
    assert run(rec(I.VREDUCE_SUM, 650, 4, 10)).cycles == 2 + 10 * 2 * 2  # 65 x 4 B = 2 repeats
    assert run(rec(I.VADD, 0, 4)).cycles == 2  # start-up only


def test_single_mmad_costs():
    assert run(rec(I.MMAD, 32, 64, 128, CubeType.F16)).cycles == 2 + 2 * 4 * 8
    assert run(rec(I.MMAD, 32, 64, 128, CubeType.I8)).cycles == 2 + 2 * 4 * 4
    assert run(rec(I.MMAD, 32, 64, 128, CubeType.F32)).cycles == 2 + 2 * 4 * 16
    assert run(rec(I.MMAD, 1, 16, 16, CubeType.F16)).cycles == 2 + 1  # GEMV pads m to 16
    p = run(rec(I.MMAD, 17, 16, 16, CubeType.F16))
    assert p.cycles == 4 and p.work["M"] == 2 and p.busy["M"] == 4


def test_scalar_blocks_issue():
    p = run(rec(I.SCALAR, 5), rec(I.VADD, 1024, 4))
    core = p.per_core[0]
    assert core.start.tolist() == [0, 5] and core.end.tolist() == [5, 23]
    assert p.busy["S"] == 5 and p.cycles == 23


def test_same_pipe_runs_in_order():
    p = run(rec(I.VADD, 1024, 4), rec(I.VADD, 1024, 4))
    assert p.per_core[0].start.tolist() == [0, 18] and p.cycles == 36


# ---------------------------------------------------------------------------- flags

def test_two_pipes_overlap_without_flags():
    p = run(rec(I.COPY_L1_L0A, 4096, 1), rec(I.VADD, 1024, 4))
    assert p.per_core[0].start.tolist() == [0, 1]  # issued one cycle apart
    assert p.cycles == 20  # MTE1 [0, 20) and V [1, 19) in parallel
    assert p.busy["MTE1"] == 20 and p.busy["V"] == 18


def test_set_wait_serialises():
    p = run(rec(I.COPY_L1_L0A, 4096, 1), set_(P.MTE1, P.V, 0), wait(P.MTE1, P.V, 0),
            rec(I.VADD, 1024, 4))
    core = p.per_core[0]
    # copy [0, 20); set at 20, visible at 22; wait on V from its issue (2) to 22; add [22, 40)
    assert core.start.tolist() == [0, 20, 2, 22]
    assert core.end.tolist() == [20, 20, 22, 40]
    assert p.cycles == 40
    assert core.flag_src.tolist() == [-1, -1, 1, -1]
    assert p.busy["V"] == 18  # waiting is not busy
    assert p.warnings == []


def test_counting_semantics():
    p = run(rec(I.VADD, 1024, 4), set_(P.V, P.MTE3, 0),  # [0, 18), set 18 -> 20
            rec(I.VADD, 1024, 4), set_(P.V, P.MTE3, 0),  # [18, 36), set 36 -> 38
            wait(P.V, P.MTE3, 0), rec(I.COPY_UB_L1, 2048, 1),  # wait -> 20, copy [20, 48)
            wait(P.V, P.MTE3, 0), rec(I.COPY_UB_L1, 2048, 1))  # wait -> 48, copy [48, 76)
    core = p.per_core[0]
    assert core.end.tolist() == [18, 18, 36, 36, 20, 48, 48, 76]
    assert core.flag_src.tolist()[4] == 1 and core.flag_src.tolist()[6] == 3
    assert p.cycles == 76 and p.warnings == []


def test_unconsumed_set_is_a_warning():
    p = run(set_(P.MTE2, P.V, 3, loc=1), set_(P.MTE2, P.V, 3), wait(P.MTE2, P.V, 3),
            locs=LOCS)
    assert p.warnings == [("core 0: 1 set_flag(MTE2->V, id 3) never waited for "
                           "(first at event 1)")]
    p = run(set_(P.MTE2, P.V, 3, loc=1), locs=LOCS)
    assert p.warnings == [("core 0: 1 set_flag(MTE2->V, id 3) never waited for "
                           "(first at event 0, k.py:9: store(out, y))")]
    assert "warning: core 0: 1 set_flag" in p.report()


def test_wait_without_set_deadlocks():
    with pytest.raises(SyncError) as info:
        run(set_(P.MTE2, P.V, 0), wait(P.MTE2, P.V, 0), wait(P.MTE2, P.V, 0, loc=0),
            set_(P.MTE2, P.V, 0), locs=LOCS)
    assert str(info.value) == (
        "core 0, event 2: wait_flag(MTE2->V, id 0) has no pending set_flag: the kernel "
        "deadlocks (every set_flag must come before its wait_flag in program order)\n"
        "  at k.py:7: y = x + 1")
    assert (info.value.core, info.value.index, info.value.source) == (0, 2, "k.py:7: y = x + 1")


def test_wait_on_other_pair_or_id_does_not_match():
    with pytest.raises(SyncError, match=r"wait_flag\(MTE2->V, id 1\)"):
        run(set_(P.MTE2, P.V, 0), wait(P.MTE2, P.V, 1))
    with pytest.raises(SyncError, match=r"wait_flag\(MTE3->V, id 0\)"):
        run(set_(P.MTE2, P.V, 0), wait(P.MTE3, P.V, 0))


def test_event_id_out_of_range():
    with pytest.raises(SyncError) as info:
        run(set_(P.MTE2, P.V, 7), wait(P.MTE2, P.V, 7), set_(P.MTE2, P.V, 8, loc=1), locs=LOCS)
    assert str(info.value) == (
        "core 0, event 2: set_flag(MTE2->V, id 8): event id out of range (this chip has 8 ids "
        "per pipe pair, 0..7)\n  at k.py:9: store(out, y)")
    with pytest.raises(SyncError, match="pipes must be one of S, V, M, MTE1, MTE2, MTE3, FIX"):
        run(rec(I.SET_FLAG, 9, 0, pipe=P.V))


def test_flags_on_the_scalar_pipe_block_issue():
    # wait_flag(MTE2 -> S) stalls the scalar unit, so the VADD after it issues late
    p = run(rec(I.COPY_L1_UB, 1280, 1), set_(P.MTE2, P.S, 0), wait(P.MTE2, P.S, 0),
            rec(I.VADD, 64, 4))
    core = p.per_core[0]
    # copy 12 + 10 = [0, 22), set 22 -> 24, wait [2, 24), add issued at 24
    assert core.end.tolist() == [22, 22, 24, 27] and core.start[3] == 24


def test_barrier():
    p = run(rec(I.COPY_L1_L0A, 4096, 1), rec(I.MMAD, 16, 16, 16, CubeType.F16),
            rec(I.BARRIER, pipe=P.ALL), rec(I.VADD, 1024, 4), rec(I.VADD, 1024, 4))
    core = p.per_core[0]
    # copy [0, 20), mmad [1, 4); barrier at 20; the next issue is at 20
    assert core.start.tolist() == [0, 1, 20, 20, 38]
    assert p.cycles == 56
    without = run(rec(I.COPY_L1_L0A, 4096, 1), rec(I.VADD, 1024, 4))
    assert without.cycles == 20


# ---------------------------------------------------------------------------- pipeline

def pipeline(tiles: int, nbuf: int, tile: int = 8192) -> np.ndarray:
    """Load (MTE2) -> gelu (V) -> store (MTE3) over `tiles` tiles with `nbuf` buffers."""
    r = []
    for b in range(nbuf):  # every buffer starts free
        r += [set_(P.V, P.MTE2, b), set_(P.MTE3, P.V, b)]
    for t in range(tiles):
        b = t % nbuf
        r += [wait(P.V, P.MTE2, b),
              rec(I.COPY_GM_UB, tile, 1, 0, t * tile, loc=0),
              set_(P.MTE2, P.V, b),
              wait(P.MTE2, P.V, b), wait(P.MTE3, P.V, b),
              rec(I.VGELU, tile // 4, 4),
              set_(P.V, P.MTE2, b), set_(P.V, P.MTE3, b),
              wait(P.V, P.MTE3, b),
              rec(I.COPY_UB_GM, tile, 1, 1, t * tile, loc=1),
              set_(P.MTE3, P.V, b)]
    for b in range(nbuf):
        r += [wait(P.V, P.MTE2, b), wait(P.MTE3, P.V, b)]
    return prog(*r)


def test_double_buffered_pipeline_reaches_steady_state():
    # stages: load 12 + 8192/32 (L2 miss) = 268, gelu 2 + 32 x 6 = 194, store 12 + 8192/64 = 140.
    # The first load is issued at cycle 5 (after 4 prologue sets and a wait); MTE2 then runs
    # back to back, so the last load ends at 5 + 16 x 268. Tail: +2 flag, gelu 194, +2 flag,
    # store 140, +2 for the final wait on MTE3 -> V.
    tiles = 16
    p = simulate([pipeline(tiles, 2)], CFG, LOCS, [tiles * 8192] * 2)
    assert p.cycles == 5 + tiles * 268 + 2 + 194 + 2 + 140 + 2 == 4633
    assert p.bound == tiles * 256 and p.bound_pipe == "MTE2"
    assert p.efficiency == pytest.approx(4096 / 4633)
    assert p.efficiency > 0.85
    starts = p.per_core[0].start[p.per_core[0].events["instr"] == I.COPY_GM_UB]
    assert np.diff(starts).tolist() == [268] * (tiles - 1)  # no bubbles on MTE2
    assert p.l2_miss_bytes == tiles * 8192 and p.l2_hit_bytes == 0
    assert p.gm_write_bytes == tiles * 8192
    assert p.warnings == []


def test_single_buffered_pipeline_is_slower():
    # one buffer: each tile is load 268 + 2 + gelu 194 + 2 before the next load may start;
    # first load starts at 3, the first gelu ends at 3 + 268 + 2 + 194 = 467, then + 466 per
    # tile; the last store and the final wait add 2 + 140 + 2.
    tiles = 16
    p = simulate([pipeline(tiles, 1)], CFG, LOCS, [tiles * 8192] * 2)
    assert p.cycles == 467 + (tiles - 1) * 466 + 2 + 140 + 2 == 7601
    assert p.efficiency < 0.55
    double = simulate([pipeline(tiles, 2)], CFG, LOCS, [tiles * 8192] * 2)
    assert double.cycles < p.cycles


# ---------------------------------------------------------------------------- L2

def gm_read(arg: int, offset: int, nbytes: int) -> tuple:
    return rec(I.COPY_GM_UB, nbytes, 1, arg, offset)


def test_l2_first_read_misses_second_hits():
    p = run(gm_read(0, 0, 4096), gm_read(0, 0, 4096), gm_read(0, 2048, 4096),
            gm_nbytes=[1 << 20])
    core = p.per_core[0]
    miss, hit = 12 + 4096 // 32, 12 + 38  # 4096 / 110 = 37.2 -> 38
    half = 12 + 83  # 2048 B hit + 2048 B miss: 2048/110 + 2048/32 = 82.6 -> 83
    assert (core.end - core.start).tolist() == [miss, hit, half]
    assert p.l2_hit_bytes == 4096 + 2048 and p.l2_miss_bytes == 4096 + 2048
    assert p.l2_hit_rate == pytest.approx(0.5)
    assert p.work["MTE2"] == 128 + 38 + 83


def test_l2_write_makes_lines_resident():
    p = run(rec(I.COPY_UB_GM, 4096, 1, 1, 0),  # 12 + 4096/64 = 76
            rec(I.COPY_L0C_GM, 4096, 1, 2, 0),  # 12 + 4096/min(128, 86) = 12 + 48
            gm_read(1, 0, 4096), gm_read(2, 0, 4096))  # both hits: 12 + 38
    assert (p.per_core[0].end - p.per_core[0].start).tolist() == [76, 60, 50, 50]
    assert p.gm_write_bytes == 8192 and p.l2_miss_bytes == 0


def test_l2_capacity_evicts_oldest_first():
    small = dataclasses.replace(CFG, l2=dataclasses.replace(CFG.l2, capacity=8192))
    # A and B fill the 8 KiB exactly; C evicts A (the oldest); B still hits, A misses again
    events = prog(gm_read(0, 0, 4096), gm_read(1, 0, 4096), gm_read(2, 0, 4096),
                  gm_read(1, 0, 4096), gm_read(0, 0, 4096))
    p = simulate([events], small)
    assert (p.per_core[0].end - p.per_core[0].start).tolist() == [140, 140, 140, 50, 140]
    big = simulate([events], CFG)
    assert (big.per_core[0].end - big.per_core[0].start).tolist() == [140, 140, 140, 50, 50]


def test_l2_model_partial_eviction_and_strides():
    l2 = L2Model(dataclasses.replace(CFG, l2=dataclasses.replace(CFG.l2, capacity=64 * 128)))
    assert l2.touch(0, 0, 6144, 1, 0) == 0  # lines 0..47 of arg 0
    assert l2.touch(1, 0, 4096, 1, 0) == 0  # 32 more: 80 > 64, lines 0..15 of arg 0 go
    assert l2.resident_bytes == 64 * 128
    assert l2.touch(0, 0, 6144, 1, 0) == 32 * 128  # lines 16..47 were still there
    l2 = L2Model(CFG)
    assert l2.touch(5, 0, 64, 4, 256) == 0  # 4 bursts of 64 B: lines 0, 2, 4, 6
    assert l2.touch(5, 0, 1024, 1, 0) == 4 * 128  # residency is per line
    assert l2.touch(6, 0, 128, 8, 0) == 7 * 128  # a broadcast row misses once
    assert l2.touch(7, 64, 128, 1, 0) == 0 and l2.touch(7, 0, 64, 1, 0) == 64
    assert l2.resident_bytes == (8 + 1 + 2) * 128


class RefL2:
    """Line-by-line reference of the L2 rules: bytes in lines resident before the DMA, or
    already touched by an earlier burst of it, hit; a contiguous copy is one burst; lines
    become resident in ascending order per DMA; the oldest go first past the capacity."""

    def __init__(self, capacity_lines: int, line: int = 128) -> None:
        self.capacity, self.line = capacity_lines, line
        self.lines: dict[tuple[int, int], None] = {}  # insertion-ordered

    def touch(self, arg: int, offset: int, length: int, count: int, stride: int) -> int:
        if count == 1 or stride == length:
            length, count = length * count, 1
        hit, seen, line = 0, set(), self.line
        for i in range(count):
            lo = offset + i * stride
            hi = lo + length
            for ln in range(lo // line, (hi - 1) // line + 1):
                if (arg, ln) in self.lines or ln in seen:
                    hit += min(hi, (ln + 1) * line) - max(lo, ln * line)
                seen.add(ln)
        for ln in sorted(seen):
            if (arg, ln) not in self.lines:
                self.lines[(arg, ln)] = None
        while len(self.lines) > self.capacity:
            del self.lines[next(iter(self.lines))]
        return hit


access = st.tuples(st.integers(0, 2), st.integers(0, 3000), st.integers(1, 700),
                   st.integers(1, 5), st.one_of(st.integers(0, 1000),
                                                st.sampled_from([128, 256, 384, 768])))


@settings(max_examples=300, deadline=None)
@given(st.lists(access, min_size=1, max_size=12), st.sampled_from([8, 16, 64, 10_000]))
def test_l2_model_matches_line_by_line_reference(accesses, capacity_lines):
    cfg = dataclasses.replace(CFG, l2=dataclasses.replace(CFG.l2, capacity=capacity_lines * 128))
    l2, ref = L2Model(cfg, [1000, 2000, 3000]), RefL2(capacity_lines)
    for arg, offset, length, count, stride in accesses:
        if length % 32:  # the timing model always passes whole 32-byte blocks
            length += 32 - length % 32
        assert l2.touch(arg, offset, length, count, stride) == ref.touch(
            arg, offset, length, count, stride)
        resident = {(a, int(ln)) for a, m in l2.maps.items()
                    for ln in np.flatnonzero(np.frombuffer(m, np.uint8))}
        assert resident == set(ref.lines)
        assert l2.resident_lines == len(resident) <= capacity_lines


def test_l2_unknown_sizes_grow_on_demand():
    p = run(gm_read(3, 1 << 20, 4096), gm_read(3, 1 << 20, 4096))  # no gm_nbytes
    assert p.l2_hit_bytes == 4096 and p.l2_miss_bytes == 4096


# ---------------------------------------------------------------------------- multi-core

def test_multi_core_cycles_and_utilization():
    c0 = prog(rec(I.VADD, 1024, 4))
    c1 = prog(rec(I.VADD, 1024, 4), rec(I.VADD, 1024, 4), rec(I.VADD, 1024, 4))
    p = simulate([c0, c1], CFG)
    assert [c.cycles for c in p.per_core] == [18, 54]
    assert p.cycles == 54 and p.n_cores == 2
    assert p.busy["V"] == 72 and p.utilization["V"] == pytest.approx(72 / (54 * 2))
    # efficiency sums every core's bound (16 and 48) over all cores' cycles: core 0 idles
    # after cycle 18, so the launch is not as good as its critical core alone (48 / 54)
    assert p.bound == 48 and p.efficiency == pytest.approx((16 + 48) / (2 * 54))
    assert p.active_cores == 2
    assert p.instr_counts == {"VADD": 4}


def test_idle_cores_count_against_efficiency():
    # four cores launched, one with work; the idle ones only set and wait a flag (as a
    # compiled kernel's cores with no blocks do): no work, so their bound is 0
    busy = prog(rec(I.VADD, 1024, 4), rec(I.VADD, 1024, 4))  # 2 x (2 + 16) = 36, work 32
    idle = prog(set_(P.V, P.MTE2, 0), wait(P.V, P.MTE2, 0))
    one = simulate([busy], CFG)
    four = simulate([busy, idle, idle, idle], CFG)
    assert one.cycles == four.cycles == 36 and one.bound == four.bound == 32
    assert one.efficiency == pytest.approx(32 / 36)
    assert four.efficiency == pytest.approx(32 / (4 * 36))
    assert (one.active_cores, four.active_cores) == (1, 1)
    assert four.report().count("efficiency") == 1
    assert f"efficiency {100 * 32 / 144:.1f}% (1 of 4 cores had work)" in four.report()
    assert "cores had work" not in one.report()  # a one-core launch has nothing to say there


def test_cube_utilization_against_the_peak_of_the_dtype_that_ran():
    # 64 x 64 x 64 = 262144 MACs per mmad; f16 steps 16x16x16 -> 64 cycles + 2,
    # f32 16x8x16 -> 128 cycles + 2. The peak is the chip's: 24 cores.
    f16 = run(rec(I.MMAD, 64, 64, 64, CubeType.F16))
    f32 = run(rec(I.MMAD, 64, 64, 64, CubeType.F32))
    assert (f16.cycles, f32.cycles) == (66, 130)
    assert f16.cube_macs == {"f16": 64 ** 3} and f32.cube_macs == {"f32": 64 ** 3}
    assert f32.cube_flops == 2 * 64 ** 3
    assert f32.peak_cube_flops == CFG.peak_flops("f32") == CFG.peak_flops("f16") / 2
    # one core's mmad at full rate for 128 of 130 cycles: 128 / 130 of one core's f32 peak
    assert f32.cube_utilization == pytest.approx(128 / 130 / 24)
    assert f16.cube_utilization == pytest.approx(64 / 66 / 24)
    text = f32.report()
    assert "peak (f32: 24 cores x 2048 MAC x 2 x 1.85 GHz)" in text
    assert f"{f32.cube_utilization:.1%}" in text.split("cube:")[1]
    assert "peak (f16/bf16: 24 cores x 4096 MAC x 2 x 1.85 GHz)" in f16.report()
    assert "cube:" not in run(rec(I.VADD, 1024, 4)).report()


def test_mixed_cube_dtypes_use_the_mac_weighted_peak():
    p = run(rec(I.MMAD, 64, 64, 64, CubeType.F16), rec(I.MMAD, 64, 64, 64, CubeType.F32))
    assert p.cube_macs == {"f16": 64 ** 3, "f32": 64 ** 3}
    # half the MACs at each peak: the weighted (harmonic) peak is 2 / (1/P16 + 1/P32)
    peak = 2 / (1 / CFG.peak_flops("f16") + 1 / CFG.peak_flops("f32"))
    assert p.peak_cube_flops == pytest.approx(peak)
    # the same as adding each dtype's time at its own peak: 64 + 128 full-rate cycles
    assert p.cube_utilization == pytest.approx((64 + 128) / p.cycles / 24)
    assert "f16/bf16 50% + f32 50% of the MACs" in p.report()


def test_cores_reach_l2_in_order_of_simulated_time():
    # core 0 reads at cycle 10 (after a 10-cycle scalar op), core 1 at cycle 0: core 1 misses
    # and core 0 hits, although core 0 comes first in the list
    c0 = prog(rec(I.SCALAR, 10), gm_read(0, 0, 4096))
    c1 = prog(gm_read(0, 0, 4096))
    p = simulate([c0, c1], CFG, gm_nbytes=[4096])
    assert p.per_core[0].end.tolist() == [10, 60] and p.per_core[1].end.tolist() == [140]
    assert (p.per_core[0].l2_hit_bytes, p.per_core[1].l2_miss_bytes) == (4096, 4096)
    assert p.cycles == 140


def test_start_cycle_offsets():
    c = prog(rec(I.VADD, 1024, 4))
    p = simulate([c, c], CFG, start_cycle=[0, 100])
    assert [(x.start_cycle, x.end_cycle) for x in p.per_core] == [(0, 18), (100, 118)]
    assert p.cycles == 118
    assert simulate([c], CFG, start_cycle=7).per_core[0].start.tolist() == [7]


def test_raw_int64_records_and_errors():
    raw = np.array([rec(I.VADD, 1024, 4)], dtype=np.int64)
    assert simulate([raw], CFG).cycles == 18
    with pytest.raises(ValueError, match="core 0, event 1: unknown instruction code 99"):
        simulate([np.array([rec(I.VADD, 1), (99, 0, -1, 0, 0, 0, 0, 0)], np.int64)], CFG)
    empty = simulate([prog()], CFG)
    assert empty.cycles == 0 and empty.efficiency == 0.0
    assert simulate([], CFG).cycles == 0


# ---------------------------------------------------------------------------- output

def test_report():
    p = simulate([pipeline(4, 2)], CFG, LOCS, [4 * 8192] * 2)
    text = p.report()
    assert text.splitlines()[0] == (
        f"ascend910b1: 1 core, {p.cycles} cycles = {p.cycles / 1850:.3f} us at 1850 MHz")
    assert "MTE2" in text and "FIX" not in text  # only pipes that did work
    assert f"bound {4 * 256} cycles (MTE2), efficiency {100 * p.efficiency:.1f}%" in text
    assert "hit rate 0.0%" in text and "COPY_GM_UB 4" in text


def test_chrome_trace(tmp_path):
    p = simulate([pipeline(3, 2), pipeline(2, 2)], CFG, LOCS, [3 * 8192] * 2)
    path = tmp_path / "trace.json"
    p.save_trace(str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    for e in events:
        assert {"ph", "pid", "tid", "name"} <= e.keys()
        if e["ph"] != "M":
            assert isinstance(e["ts"], float)
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert {(0, "MTE2"), (0, "V"), (0, "MTE3"), (1, "MTE2")} <= names
    procs = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert procs == {"core 0", "core 1"}
    loads = [e for e in events if e["name"] == "COPY_GM_UB" and e["pid"] == 0]
    assert len(loads) == 3 and all(e["tid"] == P.MTE2 and e["ph"] == "X" for e in loads)
    assert loads[0]["args"]["source"] == "k.py:7: y = x + 1"
    assert loads[0]["args"]["burst_bytes"] == 8192 and loads[0]["args"]["cycles"] == 268
    assert loads[0]["ts"] == 0.003 and loads[0]["dur"] == 0.145  # cycles 5..273 at 1850 MHz
    waits = [e for e in events if e["name"] == "wait MTE2->V #0" and e["pid"] == 0]
    assert waits and waits[0]["tid"] == P.V and waits[0]["args"]["event_id"] == 0
    flows = [e for e in events if e["ph"] in "sf"]
    assert len(flows) == 2 * sum(int((c.flag_src >= 0).sum()) for c in p.per_core)
    assert doc["otherData"]["cycles"] == p.cycles


def test_chrome_trace_gzip_and_limit(tmp_path):
    p = simulate([pipeline(3, 2)], CFG, LOCS, [3 * 8192] * 2)
    path = tmp_path / "trace.json.gz"
    write_chrome_trace(p, path, max_events_per_core=5)
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert [e["name"] for e in events if e["ph"] == "X"] == [
        "set V->MTE2 #0", "set MTE3->V #0", "set V->MTE2 #1", "set MTE3->V #1",
        "wait V->MTE2 #0"]


def test_trace_needs_timeline(tmp_path):
    p = simulate([prog(rec(I.VADD, 1024, 4))], CFG, keep_timeline=False)
    assert p.per_core[0].start is None and p.cycles == 18
    with pytest.raises(ValueError, match="keep_timeline=True"):
        p.save_trace(str(tmp_path / "t.json"))
