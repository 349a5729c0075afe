"""dsl.atomic_add: GM windows += UB tiles (MTE3) and L0C accumulators (FIX), atomically across cores.

Native code and the interpreter must agree bit for bit wherever the result does not depend on the
order of the additions (one core, integers, exactly representable sums, each element touched by
one core); where several cores add floats into the same element the native order follows the host
threads, so those results are compared to a float64 reference with a stated tolerance. The event
records (and so cycles) always match exactly.
"""
from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dsl
from compiler import host, jit
from compiler.config import CONFIG
from compiler.host import runnable_levels
from dsl import GM, Const, KernelError, f32
from simulator import launch as L
from simulator import simulate
from simulator.config import load_config
from simulator.isa import INFO, Instr
from tests.compiler.test_errors import expect

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16, "i32": np.dtype(np.int32)}
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32}
rng = np.random.default_rng(11)


@contextlib.contextmanager
def interpreting(on: bool = True) -> Iterator[None]:
    old = CONFIG.interpret
    CONFIG.interpret = on
    try:
        yield
    finally:
        CONFIG.interpret = old


@contextlib.contextmanager
def threaded(threads: int = 4) -> Iterator[None]:
    """Every launch spread over `threads` host threads, however little data it moves."""
    old = CONFIG.threads, L.INLINE_BYTES
    CONFIG.threads, L.INLINE_BYTES = threads, 0
    try:
        yield
    finally:
        CONFIG.threads, L.INLINE_BYTES = old


def both(launch, args: list, profile: bool = False):  # type: ignore[no-untyped-def]
    """Native then interpreted, each on its own copy of `args`: (native args, interp args, runs)."""
    out = []
    for interp in (False, True):
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        with interpreting(interp):
            run = launch.profile(*a) if profile else launch(*a)
        out.append((a, run))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16) if a.dtype.itemsize == 2 else a.view(np.uint32)


def same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(bits(a), bits(b))


def same_events(nr, ir) -> None:  # type: ignore[no-untyped-def]
    for pn, pi in zip(nr.profile.per_core, ir.profile.per_core, strict=True):
        np.testing.assert_array_equal(pn.events, pi.events)
    assert nr.cycles == ir.cycles and nr.profile.busy == ir.profile.busy


def values(shape: tuple[int, ...], name: str) -> np.ndarray:
    if name == "i32":
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    return rng.standard_normal(shape).astype(np.float32).astype(DTYPES[name])


def torch_add(y: np.ndarray, x: np.ndarray, name: str) -> np.ndarray:
    """y + x as torch computes it in the dtype (f16 / bf16: in f32, rounded once)."""
    ty = torch.from_numpy(y.view(np.int16)).view(TORCH[name]) if name == "bf16" else torch.from_numpy(y)
    tx = torch.from_numpy(x.view(np.int16)).view(TORCH[name]) if name == "bf16" else torch.from_numpy(x)
    out = ty + tx
    return out.view(torch.int16).numpy().view(BF16) if name == "bf16" else out.numpy()


# ------------------------------------------------------------------ UB -> GM, every dtype and window
@dsl.kernel
def acc1d(x: GM, y: GM, TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        dsl.atomic_add(y[t], x[t])


@dsl.kernel
def acc2d(x: GM, y: GM, BR: Const[int] = 8, BC: Const[int] = 48):
    for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (BR, BC)):
        dsl.atomic_add(y[r, c], x[r, c] * 2)


@dsl.kernel
def acc_windows(x: GM, y: GM):
    """A row, a slice of a row, a stepped window and a block of whole rows, all of x's row 1 etc."""
    dsl.atomic_add(y[0, :], x[1, :])
    dsl.atomic_add(y[1, 3:x.shape[1] - 2], x[2, 5:x.shape[1]])
    dsl.atomic_add(y[2, 0:x.shape[1]:2], x[3, 0:(x.shape[1] + 1) // 2])
    dsl.atomic_add(y[3:5, :], x[0:2, :])


@pytest.mark.parametrize("name", list(DTYPES))
def test_ub_atomic_1d_every_dtype(name: str) -> None:
    x, y = values((1000,), name), values((1000,), name)  # 1000 = 15 tiles of 64 + a tail of 40
    na, ia, _, _ = both(acc1d[4], [x, y])
    same(na[1], torch_add(y, x, name))
    same(na[1], ia[1])


@pytest.mark.parametrize("name", list(DTYPES))
def test_ub_atomic_2d_tiles_with_tails(name: str) -> None:
    x, y = values((37, 101), name), values((37, 101), name)
    na, ia, _, _ = both(acc2d[6], [x, y])
    doubled = torch_add(x, x, name)  # x * 2 is exact, as x + x
    same(na[1], torch_add(y, doubled, name))
    same(na[1], ia[1])


@pytest.mark.parametrize("name", ["f32", "bf16", "i32"])
def test_ub_atomic_every_window_form(name: str) -> None:
    n = 11
    x, y = values((5, n), name), values((5, n), name)
    want = y.copy()
    want[0] = torch_add(y[0], x[1], name)
    want[1, 3:n - 2] = torch_add(y[1, 3:n - 2], x[2, 5:n], name)
    want[2, 0:n:2] = torch_add(y[2, 0:n:2], x[3, 0:(n + 1) // 2], name)
    want[3:5] = torch_add(y[3:5], x[0:2], name)
    na, ia, _, _ = both(acc_windows[1], [x, y])
    same(na[1], want)
    same(na[1], ia[1])


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(0, 70), cols=st.integers(1, 130), cores=st.integers(1, 24),
       name=st.sampled_from(["f32", "bf16", "i32"]))
def test_ub_atomic_any_shape(rows: int, cols: int, cores: int, name: str) -> None:
    """Any shape, tails in both dimensions, any core count: each element is added once, so the
    result is exact (torch's) and the interpreter's bits."""
    x, y = values((rows, cols), name), values((rows, cols), name)
    na, ia, _, _ = both(acc2d[cores], [x, y])
    same(na[1], torch_add(y, torch_add(x, x, name), name))
    same(na[1], ia[1])


def test_out_of_bounds_window_touches_nothing() -> None:
    x, y = np.ones(100, np.float32), np.zeros(90, np.float32)
    for interp in (False, True):
        yy = y.copy()
        with interpreting(interp), pytest.raises(KernelError, match=r"E404.*DMA would write elements \[64, 100\)"):
            acc1d[1](x, yy)
        assert not yy[64:].any()  # the tiles before the bad one were added; nothing past the end


def test_misaligned_tensor_is_refused() -> None:
    """A locked access that straddles its element could split a cache line: E405, nothing added."""
    raw = np.zeros(4 * 100 + 2, np.uint8)
    y = np.frombuffer(raw, dtype=np.float32, offset=2, count=100)
    assert not y.flags.aligned
    for interp in (False, True):
        with interpreting(interp), pytest.raises(KernelError) as ei:
            acc1d[1](np.ones(100, np.float32), y)
        assert re.match(r"^\S+\.py:\d+:\d+: error\[E405\]: atomic add into 'y' \(f32\): its data is not aligned "
                        r"to its 4-byte elements \(core 0\)", str(ei.value)), str(ei.value)
        assert "hint: pass an aligned copy" in str(ei.value) and not raw.any()


# ------------------------------------------------------------------ contention: many cores, one row
@dsl.kernel
def hammer(x: GM, y: GM, REPS: Const[int] = 1000):
    row = x[dsl.core_id(), :]
    for _ in dsl.range(REPS):
        dsl.atomic_add(y[0, :], row)


@pytest.mark.parametrize(("name", "reps"), [("i32", 1000), ("f32", 1000), ("f16", 10), ("bf16", 10)])
def test_24_cores_add_into_one_row(name: str, reps: int) -> None:
    """24 cores on 4 host threads each add their row into y[0] `reps` times. The addends are
    small integers and every partial sum is exact (f16 / bf16: at most 24 * 10 * 1 = 240), so
    the result is the same whatever the interleaving: a lost update would show."""
    cols = 160
    x = (np.arange(24 * cols).reshape(24, cols) % 3).astype(DTYPES[name]) if name != "f16" and name != "bf16" \
        else np.ones((24, cols), DTYPES[name])
    y = np.zeros((1, cols), DTYPES[name])
    want = (x.astype(np.float64).sum(axis=0) * reps).reshape(1, cols)
    with threaded():
        na, ia, _, _ = both(hammer[24], [x, y, reps])
    np.testing.assert_array_equal(na[1].astype(np.float64), want)
    same(na[1], ia[1])


def test_24_cores_random_floats_within_tolerance() -> None:
    """Random f32 rows from 24 cores, 1000 times: the order of the additions follows the host
    threads, so native and interpreter agree to rounding only. Tolerance: each of the 24000
    additions rounds by at most 2**-24 of a partial sum no larger than S = 1000 * sum |x|, so
    |error| <= 24000 * 2**-24 * S (~0.0014 S; a lost update would cost ~0.5 each, a race
    thousands of them). Here S is ~12000: the bound is ~17, the result is typically within 1."""
    x = rng.uniform(-1, 1, (24, 64)).astype(np.float32)
    y = np.zeros((1, 64), np.float32)
    want = x.astype(np.float64).sum(axis=0) * 1000
    tol = 24000 * 2.0**-24 * 1000 * np.abs(x.astype(np.float64)).sum(axis=0)
    with threaded():
        na, ia, _, _ = both(hammer[24], [x, y, 1000])
    assert (np.abs(na[1][0] - want) <= tol).all()
    assert (np.abs(ia[1][0] - want) <= tol).all()


def test_one_host_thread_matches_the_interpreter_bit_for_bit() -> None:
    """All 24 cores on one host thread take the lock-free path and add in core order, as the
    interpreter does: random floats from many cores then agree exactly."""
    x = rng.uniform(-1, 1, (24, 64)).astype(np.float32)
    for name in ("f32", "bf16"):
        xs, y = x.astype(DTYPES[name]), np.zeros((1, 64), DTYPES[name])
        with threaded(1):
            na, ia, nr, ir = both(hammer[24], [xs, y, 50], profile=True)
        same(na[1], ia[1])
        same_events(nr, ir)


def test_threads_and_records() -> None:
    """The profiled contention run: same event records and cycles natively (4 threads) and
    interpreted; the atomic copies are on MTE3 and named as atomic in the trace."""
    x = np.ones((24, 32), np.float32)
    y = np.zeros((1, 32), np.float32)
    with threaded():
        na, ia, nr, ir = both(hammer[24], [x, y, 5], profile=True)
    same_events(nr, ir)
    same(na[1], np.full((1, 32), 24 * 5 * 2, np.float32) / 2)
    ev = nr.profile.per_core[3].events
    atomic = ev[ev["instr"] == int(Instr.COPY_UB_GM_ATOMIC)]
    assert len(atomic) == 5 and (atomic["pipe"] == int(INFO[Instr.COPY_UB_GM_ATOMIC][1])).all()
    assert INFO[Instr.COPY_UB_GM_ATOMIC][1].name == "MTE3" and INFO[Instr.COPY_L0C_GM_ATOMIC][1].name == "FIX"
    assert "COPY_UB_GM_ATOMIC" in nr.report()


def test_trace_names_atomic_copies(tmp_path) -> None:  # type: ignore[no-untyped-def]
    x, y = np.ones(256, np.float32), np.zeros(256, np.float32)
    run = acc1d[2].profile(x, y)
    path = tmp_path / "t.json"
    run.save_trace(str(path))
    names = {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}
    assert "COPY_UB_GM_ATOMIC" in names and "COPY_UB_GM" not in names


# ------------------------------------------------------------------ timing
def test_atomic_costs_a_read_of_the_destination_more() -> None:
    """isa.ATOMIC: the L2 reads each destination line before adding (hit: 4096 / 110 -> 38
    cycles, miss: 4096 / 32 = 128), on top of the plain write (4096 / 64 = 64) and start-up 12."""
    cfg = load_config("ascend910b1")

    def rec(instr: Instr, arg: int) -> tuple:
        return (int(instr), int(INFO[instr][1]), -1, 4096, 1, arg, 0, 0)

    recs = [rec(Instr.COPY_UB_GM, 0), rec(Instr.COPY_UB_GM_ATOMIC, 1), rec(Instr.COPY_UB_GM_ATOMIC, 1),
            rec(Instr.COPY_L0C_GM_ATOMIC, 2)]
    ev = np.array(recs, dtype=np.int64)
    p = simulate([ev], cfg)
    core = p.per_core[0]
    # L0C -> GM: 4096 / min(128, 86) = 48 to write, + 128 to read the missing lines
    assert (core.end - core.start).tolist() == [12 + 64, 12 + 128 + 64, 12 + 38 + 64, 12 + 128 + 48]
    assert p.gm_write_bytes == 4 * 4096 and p.l2_hit_bytes == 4096 and p.l2_miss_bytes == 2 * 4096


def test_atomic_store_is_slower_than_a_plain_one_in_the_model(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def plain(x: GM, y: GM, TILE: Const[int] = 1024):
            for t in dsl.tiles(x.shape[0], TILE):
                y[t] = x[t] + 1.0

        @dsl.kernel
        def atomic(x: GM, y: GM, TILE: Const[int] = 1024):
            for t in dsl.tiles(x.shape[0], TILE):
                dsl.atomic_add(y[t], x[t] + 1.0)
    """)
    x, y = np.ones(1 << 16, np.float32), np.zeros(1 << 16, np.float32)
    p, a = m.plain[4].profile(x, y), m.atomic[4].profile(x, y)
    assert a.profile.work["MTE3"] > p.profile.work["MTE3"] * 2  # all misses: 3x the write
    assert a.cycles > p.cycles


# ------------------------------------------------------------------ split-K on the cube (FIX atomic)
@dsl.kernel
def splitk(a: GM, b: GM, c: GM, BM: Const[int] = 64, BN: Const[int] = 64, BK: Const[int] = 64):
    for kk in dsl.tiles(a.shape[1], BK):  # the K chunks are dealt over the cores
        for m in dsl.range(0, a.shape[0], BM):
            for n in dsl.range(0, b.shape[1], BN):
                acc = dsl.zeros((BM, BN), c.dtype)  # f32 (i32 for i8 operands)
                acc += a[m, kk] @ b[kk, n]
                dsl.atomic_add(c[m, n], acc)


@dsl.kernel
def splitk_spmd(a: GM, b: GM, c: GM, BM: Const[int] = 48, BN: Const[int] = 64, BK: Const[int] = 32):
    """Each core sums its own contiguous run of K chunks in L0C, then adds its partial product
    once (written with core_id / num_cores); the output cast to f16 on the FIX pipe first."""
    chunks = (a.shape[1] + BK - 1) // BK
    per = (chunks + dsl.num_cores() - 1) // dsl.num_cores()
    lo = dsl.core_id() * per * BK
    hi = dsl.min(lo + per * BK, a.shape[1])
    if lo < hi:
        for m in dsl.range(0, a.shape[0], BM):
            for n in dsl.range(0, b.shape[1], BN):
                acc = dsl.zeros((BM, BN), f32)
                for k in dsl.range(lo, hi, BK):
                    acc += a[m, k] @ b[k, n]
                dsl.atomic_add(c[m, n], dsl.cast(acc, c.dtype))


def _ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (torch.from_numpy(a.astype(np.float64)) @ torch.from_numpy(b.astype(np.float64))).numpy()


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_split_k_matmul_against_torch(dt) -> None:  # type: ignore[no-untyped-def]
    M, K, N = 100, 300, 70  # tails in M, N and K (300 = 4 chunks of 64 + 44)
    a = rng.standard_normal((M, K)).astype(dt)
    b = rng.standard_normal((K, N)).astype(dt)
    c = np.zeros((M, N), np.float32)
    with threaded():
        splitk[5](a, b, c)
    # f32 / f16 inputs accumulate in f32; 5 partial sums added in thread order: rounding only
    np.testing.assert_allclose(c, _ref(a, b), rtol=1e-4, atol=1e-3)


def test_split_k_one_core_is_bit_identical_to_the_interpreter() -> None:
    a = rng.standard_normal((70, 200)).astype(np.float16)
    b = rng.standard_normal((200, 90)).astype(np.float16)
    c = rng.standard_normal((70, 90)).astype(np.float32)  # adds onto what c holds
    na, ia, nr, ir = both(splitk[1], [a, b, c], profile=True)
    same(na[2], ia[2])
    same_events(nr, ir)
    np.testing.assert_allclose(na[2], c + _ref(a, b), rtol=1e-4, atol=1e-3)


def test_split_k_int8_is_exact_on_many_cores() -> None:
    """i8 x i8 accumulates in i32: the atomic adds are integer, so 6 cores give torch's exact
    result whatever the thread order, and the interpreter the same bits."""
    a = rng.integers(-128, 128, (50, 500)).astype(np.int8)
    b = rng.integers(-128, 128, (500, 40)).astype(np.int8)
    c = np.zeros((50, 40), np.int32)
    with threaded():
        na, ia, _, _ = both(splitk[6], [a, b, c])
    want = (torch.from_numpy(a).long() @ torch.from_numpy(b).long()).numpy().astype(np.int32)
    np.testing.assert_array_equal(na[2], want)
    same(na[2], ia[2])


@pytest.mark.parametrize("out", ["f32", "f16", "bf16"])
def test_split_k_spmd_fix_cast(out: str) -> None:
    M, K, N = 60, 250, 100
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), DTYPES[out])
    with threaded():
        splitk_spmd[4](a, b, c)
    # 4 partials, each rounded to the output type, then summed with a rounding per add:
    # |error| <= 8 half-ulps of values below ~64 (f16 ulp 2**-4 there, bf16 2**-1)
    tol = {"f32": 1e-3, "f16": 0.3, "bf16": 2.0}[out]
    np.testing.assert_allclose(c.astype(np.float64), _ref(a, b), atol=tol)


def test_split_k_one_core_fix_epilogues_match_the_interpreter(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(a: GM, b: GM, c: GM, d: GM, e: GM):
            acc = dsl.zeros((32, 48), f32)
            acc += a[0:32, :] @ b[:, 0:48]
            dsl.atomic_add(c[0:32, 0:48], dsl.relu(acc))
            dsl.atomic_add(d[0:32, 0:48], dsl.cast(acc * 0.25, bf16))
            dsl.atomic_add(e[0:32, 0:48], a[0:32, :] @ b[:, 0:48])
    """)
    a = rng.standard_normal((32, 40)).astype(np.float32)
    b = rng.standard_normal((40, 48)).astype(np.float32)
    c, d, e = values((32, 48), "f32"), values((32, 48), "bf16"), values((32, 48), "f32")
    na, ia, nr, ir = both(m.k[1], [a, b, c, d, e], profile=True)
    for i in (2, 3, 4):
        same(na[i], ia[i])
    same_events(nr, ir)
    prod = _ref(a, b)
    np.testing.assert_allclose(na[2], c + np.maximum(prod, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(na[3].astype(np.float64), d.astype(np.float64) + prod / 4, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(na[4], e + prod, rtol=1e-4, atol=1e-4)
    ev = nr.profile.per_core[0].events
    assert (ev["instr"] == int(Instr.COPY_L0C_GM_ATOMIC)).sum() == 3


# ------------------------------------------------------------------ every x86-64 level
ASM_LEVELS = [lv for lv in ("x86-64-v2", "x86-64-v3", "x86-64-v4") if lv in runnable_levels()]


@pytest.mark.parametrize("level", ASM_LEVELS)
@pytest.mark.parametrize("name", list(DTYPES))
def test_levels_need_no_runtime_symbol(level: str, name: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Real atomics (lock-prefixed instructions), no call to any named function (libatomic,
    compiler-rt), right results, on each level the host runs."""
    monkeypatch.setattr(CONFIG, "host_isa", level)
    if name == "i32":
        x, y = values((24, 40), name), values((1, 40), name)
    else:   # small integers: every partial sum (|.| <= 3 + 3 * 24 * 3 < 256) is exact in bf16 / f16 /
        # f32, so any thread order gives the exact sum and a lost update is an exact mismatch (random
        # normals left the bf16 rounding of 72 adds in thread order up to ~2.2 off: no fixed tolerance)
        x = rng.integers(-3, 4, (24, 40)).astype(np.float32).astype(DTYPES[name])
        y = rng.integers(-3, 4, (1, 40)).astype(np.float32).astype(DTYPES[name])
    asm = hammer.emit("asm", x, y, 3)
    calls = re.findall(r"^\s*(?:call|jmp)\w*\s+([A-Za-z_.$][\w.$@]*)", asm, re.M)
    assert calls == [] or all(c.startswith(".L") for c in calls), calls
    lock = {"i32": r"lock\s+(addl|xaddl)", "f32": r"lock\s+cmpxchgl", "f16": r"lock\s+cmpxchgw",
            "bf16": r"lock\s+cmpxchgw"}[name]
    assert re.search(lock, asm), f"no {lock} in the {level} code"
    want = y.copy()
    for _ in range(3):
        for r in range(24):
            want = torch_add(want, x[r:r + 1], name) if name == "i32" else want
    with threaded():
        na, ia, _, _ = both(hammer[24], [x, y, 3])
    if name == "i32":
        same(na[1], want)
        same(na[1], ia[1])
    else:  # floats from 24 cores in thread order: exact all the same (see above)
        ref = y.astype(np.float64) + 3 * x.astype(np.float64).sum(axis=0)
        np.testing.assert_array_equal(na[1].astype(np.float64), ref)
        np.testing.assert_array_equal(ia[1].astype(np.float64), ref)


CROSS = {"x86-64-v2": host.LEVEL_FEATURES["x86-64-v2"], "x86-64-v3": host.LEVEL_FEATURES["x86-64-v3"],
         "x86-64-v4": host.LEVEL_FEATURES["x86-64-v4"],
         "sapphirerapids": host.LEVEL_FEATURES["x86-64-v4"] | {"avx512bf16", "avx512fp16", "avx512vnni"}}


@pytest.mark.parametrize("cpu", list(CROSS))
def test_cross_compiled_levels_need_no_runtime_symbol(cpu: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Compiled (not run) for each level, AVX-512 ones included whatever this host is: the
    objects use lock-prefixed instructions and leave no symbol for the JIT to find."""
    t = host.HostTarget(f"cross-{cpu}", cpu, "", CROSS[cpu])
    real = host.make_target
    monkeypatch.setattr(host, "make_target", lambda name: t if name == t.name else real(name))
    monkeypatch.setattr(CONFIG, "host_isa", t.name)
    monkeypatch.setattr(CONFIG, "cube_isa", "")
    a, b = np.ones((32, 64), np.float16), np.ones((64, 32), np.float16)
    texts = [hammer.emit("llvm", values((24, 40), n), values((1, 40), n), 3) for n in DTYPES]
    texts += [splitk_spmd.emit("llvm", a, b, np.zeros((32, 32), dt)) for dt in (np.float16, np.float32)]
    for text in texts:
        tm = jit._machine(t)
        mod = llvm.parse_assembly(text)
        pb = llvm.create_pass_builder(tm, jit._tuning())
        pb.getModulePassManager().run(mod, pb)
        undefined = [x for x in jit.undefined_symbols(tm.emit_object(mod))
                     if x != "_GLOBAL_OFFSET_TABLE_" and not jit._in_process(x)]
        assert undefined == [], f"{cpu}: {undefined}"
        asm = tm.emit_assembly(mod)
        assert re.search(r"lock\s+(cmpxchg|add|xadd)", asm)
        assert re.findall(r"^\s*call\w*\s+([A-Za-z_$][\w.$@]*)", asm, re.M) == []


def test_splitk_asm_on_v2_has_no_calls(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(CONFIG, "host_isa", "x86-64-v2")
    a, b = np.ones((32, 64), np.float16), np.ones((64, 32), np.float16)
    c = np.zeros((32, 32), np.float16)
    asm = splitk_spmd.emit("asm", a, b, c)
    calls = re.findall(r"^\s*(?:call|jmp)\w*\s+([A-Za-z_$][\w.$@]*)", asm, re.M)
    assert calls == [], calls
    assert re.search(r"lock\s+cmpxchgw", asm)
    with threaded():
        splitk_spmd[3](a, b, c)
    np.testing.assert_array_equal(c, np.full((32, 32), 64, np.float16))


# ------------------------------------------------------------------ errors
def test_error_i8_destination(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for t in dsl.tiles(x.shape[0], 64):
                dsl.atomic_add(y[t], x[t])
    """)
    x = np.ones(100, np.int8)
    expect(lambda: m.k(x, x.copy()), "E204", "atomic add into 'y' of i8 is not supported", caret_under="y[t]",
           hint="f32, f16, bf16 and i32")


def test_error_bool_tile_into_i32(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for t in dsl.tiles(x.shape[0], 64):
                dsl.atomic_add(y[t], x[t] > 0)
    """)
    x = np.ones(100, np.int32)
    expect(lambda: m.k(x, x.copy()), "E204", "cannot add a bool tile into 'y' of i32", caret_under="x[t] > 0",
           hint="dsl.cast(..., i32)")


def test_error_destination_not_in_gm(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 64):
                acc = x[t] * 2
                dsl.atomic_add(acc, x[t])
    """)
    x = np.ones(100, np.float32)
    expect(lambda: m.k(x, x.copy()), "E303", "dsl.atomic_add() adds into GM, but 'acc' is a tile in UB",
           caret_under="acc, x[t]", hint="dsl.atomic_add(y[t], tile)")


def test_error_destination_is_a_scalar(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 64):
                dsl.atomic_add(t.start, x[t])
    """)
    x = np.ones(100, np.float32)
    expect(lambda: m.k(x, x.copy()), "E209", "adds into a window of a GM tensor", caret_under="t.start",
           hint="dsl.atomic_add(y[t], tile)")


def test_error_source_is_a_scalar(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 64):
                dsl.atomic_add(y[t], 1.0)
    """)
    x = np.ones(100, np.float32)
    expect(lambda: m.k(x, x.copy()), "E209", "dsl.atomic_add() adds a tile, got a scalar", caret_under="1.0",
           hint="dsl.full(")


def test_error_source_in_l1(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            buf = dsl.alloc(dsl.L1, (64,), f32)
            for t in dsl.tiles(x.shape[0], 64):
                dsl.copy(buf, x[t])
                dsl.atomic_add(y[t], buf)
    """)
    x = np.ones(100, np.float32)
    expect(lambda: m.k(x, x.copy()), "E303", "come from UB (MTE3) or L0C (FIX); 'buf' is in L1",
           caret_under="buf)", hint="dsl.copy it to a UB buffer")


def test_error_l0c_result_of_the_wrong_dtype(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(a: GM, b: GM, c: GM):
            acc = dsl.zeros((16, 16), f32)
            acc += a[0:16, 0:16] @ b[0:16, 0:16]
            dsl.atomic_add(c[0:16, 0:16], acc)
    """)
    a = np.ones((16, 16), np.float16)
    expect(lambda: m.k(a, a, a.copy()), "E204", "cannot add a f32 result into 'c' of f16", caret_under="acc)",
           hint="dsl.cast(acc, f16)")


def test_error_transposed_destination_and_shapes(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def tr(x: GM[f32], y: GM[f32]):
            dsl.atomic_add(y.T[0:4, 0:4], x[0:4, 0:4])

        @dsl.kernel
        def shape(x: GM[f32], y: GM[f32]):
            dsl.atomic_add(y[0:4, 0:8], x[0:4, 0:4])

        @dsl.kernel
        def arity(x: GM[f32], y: GM[f32]):
            dsl.atomic_add(y[0:4, 0:4])
    """)
    x = np.ones((8, 8), np.float32)
    expect(lambda: m.tr(x, x.copy()), "E210", "cannot add into a window of y.T", caret_under="y.T")
    expect(lambda: m.shape(x, x.copy()), "E205", "shape mismatch in atomic_add columns: 4 vs 8")
    expect(lambda: m.arity(x, x.copy()), "E203", "dsl.atomic_add() missing argument 'src'", hint="dsl.atomic_add(dst, src)")


# ------------------------------------------------------------------ scatter-add (data-dependent rows)
@dsl.kernel
def embedding_backward(idx: GM, grad: GM, w: GM):
    """w[idx[t], :] += grad[t, :] for every token t (tokens dealt over cores)."""
    for t in dsl.tiles(idx.shape[0], 1):
        i = idx[t.start]
        dsl.atomic_add(w[i, :], grad[t.start, :])


def _scatter_ref(idx: np.ndarray, grad: np.ndarray, w: np.ndarray) -> np.ndarray:
    out = torch.from_numpy(w.astype(np.float64))
    out.index_add_(0, torch.from_numpy(idx.astype(np.int64)), torch.from_numpy(grad.astype(np.float64)))
    return out.numpy()


def test_scatter_add_integers_exact_on_many_cores() -> None:
    idx = rng.integers(0, 7, 300).astype(np.int32)  # many tokens per row: real contention
    grad = rng.integers(-50, 50, (300, 40)).astype(np.int32)
    w = rng.integers(-50, 50, (7, 40)).astype(np.int32)
    with threaded():
        na, ia, _, _ = both(embedding_backward[24], [idx, grad, w])
    np.testing.assert_array_equal(na[2], _scatter_ref(idx, grad, w).astype(np.int32))
    same(na[2], ia[2])


@pytest.mark.parametrize("name", ["f32", "bf16"])
def test_scatter_add_floats_like_torch_index_add(name: str) -> None:
    idx = rng.integers(0, 10, 200).astype(np.int32)
    grad, w = values((200, 64), name), np.zeros((10, 64), DTYPES[name])
    with threaded():
        embedding_backward[8](idx, grad, w)
    # up to ~20 tokens per row in thread order; f32: rounding of sums below ~20; bf16: each add
    # rounds to 8 bits (half an ulp of |sum| < 32 is 2**-3), 20 adds
    tol = {"f32": 1e-4, "bf16": 20 * 2.0**-3}[name]
    np.testing.assert_allclose(w.astype(np.float64), _scatter_ref(idx, grad, np.zeros((10, 64))), atol=tol)
    one = np.zeros((10, 64), DTYPES[name])
    na, ia, nr, ir = both(embedding_backward[1], [idx, grad, one], profile=True)  # one core: exact
    same(na[2], ia[2])
    same_events(nr, ir)


def test_scatter_add_index_out_of_range() -> None:
    idx = np.array([0, 3, 10], np.int32)
    grad, w = np.ones((3, 8), np.float32), np.zeros((10, 8), np.float32)
    for interp in (False, True):
        ww = w.copy()
        with interpreting(interp), pytest.raises(KernelError, match=r"E404.*index 10 is outside dimension 0 of 'w'"):
            embedding_backward[1](idx, grad, ww)
        assert ww.sum() == 16  # rows 0 and 3 were added before the bad token; nothing else moved


# ------------------------------------------------------------------ the README's example
@dsl.kernel
def colsum(x: GM[f32, 2], y: GM[f32, 2], BR: Const[int] = 64):
    for r in dsl.tiles(x.shape[0], BR):                    # row blocks over cores
        dsl.atomic_add(y[0, :], dsl.sum(x[r, :], axis=0))  # each core adds its partial column sums


def test_readme_column_sum() -> None:
    x = rng.standard_normal((1000, 300)).astype(np.float32)
    y = np.zeros((1, 300), np.float32)
    with threaded():
        colsum(x, y)
    np.testing.assert_allclose(y[0], x.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-3)
