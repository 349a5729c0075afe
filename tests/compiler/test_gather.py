"""Gathers and scalars from GM: `i = idx[r]` (one element into a scalar on the S pipe), windows
indexed by such scalars (embedding rows), `dsl.arange`, `dsl.gather`. Every kernel runs natively
and in the reference interpreter: bit-identical outputs and the same trace records; bad input gets
its error text."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsl
from compiler.config import CONFIG
from compiler.host import runnable_levels
from compiler.ir import Flag, For, LoadScalar, VIndexed, walk
from dsl import GM, Const, KernelError, f32, i32
from simulator.isa import Instr, Pipe
from tests.compiler.test_errors import expect
from tests.compiler.test_interpret import both, interpreting, same, same_runs

rng = np.random.default_rng(11)
BF16 = np.dtype(ml_dtypes.bfloat16)
NP = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16, "i32": np.dtype(np.int32),
      "i8": np.dtype(np.int8)}


def values(shape: tuple[int, ...], dt: str) -> np.ndarray:
    if dt in ("i32", "i8"):
        return rng.integers(-100, 100, shape).astype(NP[dt])
    return (rng.standard_normal(shape) * 10).astype(NP[dt])


def core_ir(kernel, *args):  # type: ignore[no-untyped-def]
    """The Core IR a launch of `kernel` with `args` runs."""
    from compiler.pipeline import to_core
    from simulator.config import load_config

    values_, infos = kernel.bind(args, {})
    params, _ = kernel.params_for(values_, infos)
    return to_core(kernel.fdef, kernel.env, params, kernel.options, load_config(CONFIG.hw))


# ------------------------------------------------------------------ embedding lookup
@dsl.kernel
def embed(idx: GM, w: GM, y: GM):
    for r in dsl.range(idx.shape[0]):
        y[r, :] = w[idx[r], :]


@dsl.kernel
def embed_tiled(idx: GM, w: GM, y: GM, BD: Const[int] = 32):
    for t in dsl.tiles(idx.shape[0], 1):  # one row per tile, the rows dealt over the cores
        i = idx[t.start]
        for c in dsl.range(0, w.shape[1], BD):  # column windows [c, min(c + BD, D))
            y[t.start, c] = w[i, c]


@dsl.kernel
def embed_blocks(idx: GM, w: GM, y: GM, R: Const[int] = 8):
    for t in dsl.tiles(idx.shape[0], R):
        for r in dsl.range(t.len):
            j = t.start + r
            y[j, :] = w[idx[j], :]


@pytest.mark.parametrize("wdt", ["f32", "f16", "bf16", "i32", "i8"])
@pytest.mark.parametrize("idt", ["i32", "i8"])
def test_embedding_lookup(wdt: str, idt: str) -> None:
    V, D, n = 37, 45, 29
    w = values((V, D), wdt)
    idx = rng.integers(0, V, n).astype(NP[idt])
    for kern, cores in ((embed, 1), (embed_tiled, 3), (embed_blocks, 2)):
        y = np.zeros((n, D), NP[wdt])
        na, ia, nr, ir = both(kern[cores], [idx, w, y], profile=True)
        same(na[2], ia[2])
        same(na[2], w[idx.astype(np.int64)])
        same_runs(nr, ir)
        counts = nr.profile.instr_counts
        assert counts["LOAD_GM_S"] == n * (cores if kern is embed else 1)


def test_embedding_matches_torch_on_torch_tensors() -> None:
    w = torch.randn(100, 64, dtype=torch.bfloat16)
    idx = torch.randint(0, 100, (50,), dtype=torch.int32)
    y = torch.zeros(50, 64, dtype=torch.bfloat16)
    embed_tiled[4](idx, w, y)
    assert torch.equal(y, torch.nn.functional.embedding(idx.long(), w))


def test_scalar_read_is_an_s_pipe_read_that_blocks_issue() -> None:
    idx = np.array([3, 1], np.int32)
    w = values((4, 16), "f32")
    y = np.zeros((2, 16), np.float32)
    run = embed[1].profile(idx, w, y)
    core = run.profile.per_core[0]
    ev = core.events
    reads = np.flatnonzero(ev["instr"] == Instr.LOAD_GM_S)
    assert len(reads) == 2 and (ev["pipe"][reads] == Pipe.S).all()
    assert list(ev["a"][reads]) == [4, 4] and list(ev["d"][reads]) == [0, 4]  # bytes, byte offset
    # the DMA that uses the index is issued only after the read has finished
    for i in reads:
        load = i + 1 + int(np.flatnonzero(ev["instr"][i + 1:] == Instr.COPY_GM_UB)[0])
        assert core.start[load] >= core.end[i]
        assert core.end[i] - core.start[i] >= 13  # one GM block through L2: DMA start-up + transfer
    assert core.busy["S"] >= 26


# ------------------------------------------------------------------ scalars of every dtype
@dsl.kernel
def scalars(x: GM, y: GM[f32]):
    for r in dsl.range(x.shape[0]):
        v = x[r]
        y[r:r + 1] = dsl.full((1,), v * 1.0, f32)


@dsl.kernel
def scale_rows(x: GM, s: GM, y: GM):
    for r in dsl.range(x.shape[0]):
        y[r, :] = x[r, :] * s[r, 0]  # a float scalar from GM meets a tile


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "i32", "i8"])
def test_scalars_of_every_dtype(dt: str) -> None:
    x = values((40,), dt)
    if dt == "f32":
        x[:4] = [np.inf, -np.inf, -0.0, 3e38]
    y = np.zeros(40, np.float32)
    na, ia, nr, ir = both(scalars[1], [x, y], profile=True)
    same(na[1], ia[1])
    same(na[1], x.astype(np.float64).astype(np.float32))
    same_runs(nr, ir)


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_float_scalars_scale_rows(dt: str) -> None:
    x, s = values((9, 33), dt), values((9, 1), dt)
    y = np.zeros((9, 33), NP[dt])
    na, ia, nr, ir = both(scale_rows[1], [x, s, y], profile=True)
    same(na[2], ia[2])
    same(na[2], (x.astype(np.float32) * s.astype(np.float32)).astype(NP[dt]))
    same_runs(nr, ir)


@dsl.kernel
def ragged(lens: GM[i32], x: GM[f32, 2], y: GM[f32, 2], C: Const[int] = 64):
    for r in dsl.range(x.shape[0]):
        ln = lens[r]
        y[r, 0:dsl.min(ln, C)] = x[r, 0:dsl.min(ln, C)] * 2.0  # a window sized by data


def test_data_dependent_window_lengths() -> None:
    x = values((6, 64), "f32")
    lens = np.array([0, 1, 17, 64, 100, 33], np.int32)
    y = np.zeros((6, 64), np.float32)
    na, ia, nr, ir = both(ragged[1], [lens, x, y], profile=True)
    same(na[2], ia[2])
    ref = np.zeros_like(x)
    for r, ln in enumerate(np.minimum(lens, 64)):
        ref[r, :ln] = x[r, :ln] * 2
    same(na[2], ref)
    same_runs(nr, ir)


# ------------------------------------------------------------------ ordering against DMA writes
@dsl.kernel
def write_then_read(x: GM[i32], tmp: GM[i32], w: GM[f32, 2], y: GM[f32, 2]):
    for t in dsl.tiles(x.shape[0], 16):
        tmp[t] = x[t] + 1
    for r in dsl.range(y.shape[0]):
        y[r, :] = w[tmp[r], :]


def test_scalar_read_waits_for_the_dma_that_wrote_it() -> None:
    x = rng.integers(0, 9, 40).astype(np.int32)
    tmp = np.full(40, -1, np.int32)
    w, y = values((10, 24), "f32"), np.zeros((40, 24), np.float32)
    k = core_ir(write_then_read, x, tmp, w, y)
    flags = [s for s in walk(k.body) if isinstance(s, Flag) and (s.src, s.dst) == (Pipe.MTE3, Pipe.S)]
    assert [f.wait for f in flags] == [False, True]  # set after the store loop, waited for before the reads
    na, ia, nr, ir = both(write_then_read[1], [x, tmp, w, y], profile=True)
    same(na[3], w[x + 1])
    same(na[3], ia[3])
    same_runs(nr, ir)
    core = nr.profile.per_core[0]
    ev = core.events
    last_store = int(np.flatnonzero(ev["instr"] == Instr.COPY_UB_GM)[2])  # the third tile: the last of x
    first_read = int(np.flatnonzero(ev["instr"] == Instr.LOAD_GM_S)[0])
    assert core.start[first_read] >= core.end[last_store]


@dsl.kernel
def read_then_write(x: GM[i32], y: GM[i32]):
    for t in dsl.tiles(x.shape[0], 8):
        v = y[t.start]  # may read what an earlier tile wrote: ordered across iterations
        y[t] = x[t] + v


def test_scalar_read_in_a_tile_loop_waits_for_earlier_iterations() -> None:
    k = core_ir(read_then_write, np.zeros(40, np.int32), np.zeros(40, np.int32))
    loop = next(s for s in k.body if isinstance(s, For))
    inner = [s for s in loop.body if isinstance(s, Flag) and (s.src, s.dst) == (Pipe.MTE3, Pipe.S)]
    assert [f.wait for f in inner] == [True, False]  # a loop-carried MTE3 -> S edge
    x, y = rng.integers(0, 9, 40).astype(np.int32), rng.integers(0, 9, 40).astype(np.int32)
    na, ia, nr, ir = both(read_then_write[1], [x, y], profile=True)
    ref = y.copy()
    for s in range(0, 40, 8):
        ref[s:s + 8] = x[s:s + 8] + y[s]
    same(na[1], ref)
    same(na[1], ia[1])
    same_runs(nr, ir)


# ------------------------------------------------------------------ arange
@dsl.kernel
def aranges(yi: GM[i32], yf: GM[f32], N: Const[int] = 300):
    yi[0:N] = dsl.arange(N)
    yf[0:N] = dsl.arange(N, f32) * 0.5


@dsl.kernel
def arange_tiles(y: GM[i32], TILE: Const[int] = 64):
    for t in dsl.tiles(y.shape[0], TILE):
        y[t] = dsl.arange(t.len, i32) + t.start  # a runtime length bounded by TILE


@dsl.kernel
def reverse_tiles(x: GM, y: GM, TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.gather(x[t], (t.len - 1) - dsl.arange(t.len))  # each tile reversed


def test_arange() -> None:
    yi, yf = np.zeros(300, np.int32), np.zeros(300, np.float32)
    na, ia, nr, ir = both(aranges[1], [yi, yf], profile=True)
    same(na[0], np.arange(300, dtype=np.int32))
    same(na[1], np.arange(300, dtype=np.float32) * 0.5)
    same(na[0], ia[0])
    same(na[1], ia[1])
    same_runs(nr, ir)
    assert nr.profile.instr_counts["VARANGE"] == 2
    for n in (1, 64, 200):
        y = np.full(n, -1, np.int32)
        na, ia, nr, ir = both(arange_tiles[3], [y], profile=True)
        same(na[0], np.arange(n, dtype=np.int32))
        same(na[0], ia[0])
        same_runs(nr, ir)
        x, y = values((n,), "bf16"), np.zeros(n, BF16)
        na, ia, nr, ir = both(reverse_tiles[2], [x, y], profile=True)
        same(na[1], np.concatenate([x[s:s + 64][::-1] for s in range(0, n, 64)]))
        same(na[1], ia[1])
        same_runs(nr, ir)


# ------------------------------------------------------------------ gather
@dsl.kernel
def gather1d(x: GM, idx: GM, y: GM, TILE: Const[int] = 64):
    table = x[0:x.shape[0]]
    for t in dsl.tiles(idx.shape[0], TILE):
        y[t] = dsl.gather(table, idx[t])


@dsl.kernel
def gather_cols(x: GM, idx: GM, y: GM, R: Const[int] = 8):
    for t in dsl.tiles(x.shape[0], R):
        y[t, :] = dsl.gather(x[t, :], idx[t, :], axis=1)


@dsl.kernel
def gather_rows(x: GM, idx: GM, y: GM, BC: Const[int] = 16):
    for t in dsl.tiles(x.shape[1], BC):
        y[:, t] = dsl.gather(x[:, t], idx[:, t], axis=0)


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "i32", "i8"])
@pytest.mark.parametrize("it", ["i32", "i8"])
def test_gather_1d(dt: str, it: str) -> None:
    x = values((100,), dt)
    if dt == "f32":
        x[:3] = [np.nan, -0.0, np.inf]
    for m in (1, 63, 200):
        idx = rng.integers(0, 100, m).astype(NP[it])
        y = np.zeros(m, NP[dt])
        na, ia, nr, ir = both(gather1d[2], [x, idx, y], profile=True)
        same(na[2], x[idx.astype(np.int64)])
        assert na[2].view(np.uint8).tobytes() == ia[2].view(np.uint8).tobytes()  # bits, NaN payloads too
        same_runs(nr, ir)


@pytest.mark.parametrize("dt", ["f32", "bf16", "i8"])
def test_gather_2d(dt: str) -> None:
    for rows, cols, k in ((21, 30, 1), (21, 30, 5), (8, 1, 3)):
        x = values((rows, cols), dt)
        idx = rng.integers(0, cols, (rows, k)).astype(np.int32)
        y = np.zeros((rows, k), NP[dt])
        na, ia, nr, ir = both(gather_cols[3], [x, idx, y], profile=True)
        same(na[2], np.take_along_axis(x, idx.astype(np.int64), 1))
        same(na[2], ia[2])
        same_runs(nr, ir)
        idx0 = rng.integers(0, rows, (k, cols)).astype(np.int8)
        y0 = np.zeros((k, cols), NP[dt])
        na, ia, nr, ir = both(gather_rows[2], [x, idx0, y0], profile=True)
        same(na[2], np.take_along_axis(x, idx0.astype(np.int64), 0))
        same(na[2], ia[2])
        same_runs(nr, ir)


def test_gather_cost_is_on_the_vector_pipe() -> None:
    x, idx = values((100,), "f32"), rng.integers(0, 100, 64).astype(np.int32)
    run = gather1d[1].profile(x, idx, np.zeros(64, np.float32))
    ev = run.profile.per_core[0].events
    g = ev[ev["instr"] == Instr.VGATHER][0]
    assert (g["pipe"], g["a"], g["b"], g["c"]) == (Pipe.V, 64, 4, 1)
    assert run.profile.work["V"] == 8  # 64 x 4 bytes: one 256-byte repeat at 8 cycles (isa.VECTOR_REPEAT_COST)


# ------------------------------------------------------------------ cross entropy: the target logit per row
@dsl.kernel
def cross_entropy(x: GM[f32, 2], tgt: GM[i32, 2], loss: GM[f32, 2], R: Const[int] = 4):
    for t in dsl.tiles(x.shape[0], R):
        row = x[t, :]
        m = dsl.max(row, axis=1, keepdims=True)
        lse = dsl.log(dsl.sum(dsl.exp(row - m), axis=1, keepdims=True)) + m
        loss[t, 0:1] = lse - dsl.gather(row, tgt[t, 0:1], axis=1)


def test_cross_entropy_picks_the_target_logit() -> None:
    n, c = 19, 1000
    x = (rng.standard_normal((n, c)) * 3).astype(np.float32)
    tgt = rng.integers(0, c, (n, 1)).astype(np.int32)
    loss = np.zeros((n, 1), np.float32)
    na, ia, nr, ir = both(cross_entropy[4], [x, tgt, loss], profile=True)
    same(na[2], ia[2])
    same_runs(nr, ir)
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(tgt[:, 0]).long(), reduction="none")
    np.testing.assert_allclose(na[2][:, 0], ref.numpy(), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ every x86-64 level
@pytest.fixture(params=runnable_levels())
def level(request, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(CONFIG, "host_isa", request.param)
    return request.param


def test_every_host_level(level: str) -> None:  # type: ignore[no-untyped-def]
    w, idx = values((50, 70), "bf16"), rng.integers(0, 50, 33).astype(np.int32)
    y = np.zeros((33, 70), BF16)
    embed_tiled[3](idx, w, y)
    same(y, w[idx])
    x, gi = values((300,), "f16"), rng.integers(0, 300, 257).astype(np.int8).astype(np.int32) % 300
    g = np.zeros(257, np.float16)
    gather1d[2](x, gi, g)
    same(g, x[gi])
    x2, t2 = values((13, 77), "f32"), rng.integers(0, 77, (13, 1)).astype(np.int32)
    loss = np.zeros((13, 1), np.float32)
    cross_entropy[2](x2, t2, loss)
    with interpreting():
        ref = np.zeros_like(loss)
        cross_entropy[2](x2, t2, ref)
    same(loss, ref)


# ------------------------------------------------------------------ run-time errors (E404), before any write
def test_embedding_index_out_of_range_fails_before_the_row_is_written() -> None:
    w = values((50, 16), "f32")
    for bad in (50, -1):
        idx = np.array([1, 2, bad, 3], np.int32)
        for interp in (False, True):
            y = np.zeros((4, 16), np.float32)
            with interpreting() if interp else _null():
                text = expect(lambda: embed[1](idx, w, y), "E404",
                              f"index {bad} is outside dimension 0 of 'w' (size 50)", caret_under="idx[r]")
            assert "core 0" in text
            same(y[:2], w[[1, 2]])
            assert (y[2:] == 0).all()


def test_gather_index_out_of_range_fails_before_any_write() -> None:
    x = values((5, 30), "f32")
    idx = rng.integers(0, 30, (5, 3)).astype(np.int32)
    idx[2, 1], idx[4, 0] = 30, -7
    for interp in (False, True):
        y = np.full((5, 3), 9.0, np.float32)
        with interpreting() if interp else _null():
            expect(lambda: gather_cols[1](x, idx, y), "E404",
                   "dsl.gather index 30 at [2, 1] is outside the 30 columns of the gathered tile (axis 1)",
                   caret_under="dsl.gather", hint="clamp them first")
        assert (y == 9.0).all()
    idx0 = np.array([[0, 5, 1]], np.int32)
    for interp in (False, True):
        with interpreting() if interp else _null():
            expect(lambda: gather_rows[1](x[:, :3].copy(), idx0, np.zeros((1, 3), np.float32)), "E404",
                   "dsl.gather index 5 at [0, 1] is outside the 5 rows of the gathered tile (axis 0)")
    gi = np.array([3, 99, 100, 0], np.int32)
    for interp in (False, True):
        y1 = np.zeros(4, np.float32)
        with interpreting() if interp else _null():
            expect(lambda: gather1d[1](values((100,), "f32"), gi, y1), "E404",
                   "dsl.gather index 100 at position 2 is outside 'table', which has 100 elements")
        assert (y1 == 0).all()


def test_scalar_read_index_out_of_range() -> None:
    @dsl.kernel
    def past_end(idx: GM[i32], y: GM[i32]):
        for r in dsl.range(y.shape[0]):
            y[r:r + 1] = dsl.full((1,), idx[r + 1], i32)

    for interp in (False, True):
        with interpreting() if interp else _null():
            expect(lambda: past_end[1](np.arange(5, dtype=np.int32), np.zeros(5, np.int32)), "E404",
                   "index 5 is outside dimension 0 of 'idx' (size 5)", caret_under="r + 1",
                   hint="an index runs from 0 to the dimension's size - 1")


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


# ------------------------------------------------------------------ compile-time errors
def test_gather_needs_an_integer_index_tile(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32, 2], i: GM[f32, 2], y: GM[f32, 2]):
            for t in dsl.tiles(x.shape[0], 8):
                y[t, :] = dsl.gather(x[t, :], i[t, :], axis=1)
    """)
    z = np.zeros((8, 8), np.float32)
    expect(lambda: m.k(z, z, z), "E204", "dsl.gather needs an integer index tile (i32 or i8), got f32",
           caret_under="dsl.gather", hint="dsl.cast(index, i32)")


@pytest.mark.parametrize("axis,code,message,hint", [
    ("axis=2", "E205", "axis 2 is out of range for a rank-2 tile", "axis 0 (rows) or 1 (columns)"),
    ("axis=-3", "E205", "axis -3 is out of range for a rank-2 tile", None),
    ("", "E203", "dsl.gather of a 2-D tile needs an axis", "axis=1) picks a column per row"),
])
def test_gather_axis_errors(source, axis: str, code: str, message: str, hint: str | None) -> None:  # type: ignore[no-untyped-def]
    m = source(f"""
        @dsl.kernel
        def k(x: GM[f32, 2], i: GM[i32, 2], y: GM[f32, 2]):
            for t in dsl.tiles(x.shape[0], 8):
                y[t, :] = dsl.gather(x[t, :], i[t, :]{', ' + axis if axis else ''})
    """)
    z, iz = np.zeros((8, 8), np.float32), np.zeros((8, 8), np.int32)
    expect(lambda: m.k(z, iz, z), code, message, caret_under="dsl.gather", hint=hint)


def test_gather_shape_errors(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def rank(x: GM[f32, 2], i: GM[i32], y: GM[f32]):
            y[0:4] = dsl.gather(x[0:4, :], i[0:4], axis=1)

        @dsl.kernel
        def rows(x: GM[f32, 2], i: GM[i32, 2], y: GM[f32, 2]):
            y[0:8, 0:1] = dsl.gather(x[0:4, :], i[0:8, 0:1], axis=1)

        @dsl.kernel
        def rows_runtime(x: GM[f32, 2], i: GM[i32, 2], y: GM[f32, 2]):
            y[:, 0:1] = dsl.gather(x[0:4, :], i[:, 0:1], axis=1)
    """)
    z = np.zeros((8, 8), np.float32)
    expect(lambda: m.rank(z, np.zeros(8, np.int32), z[0]), "E205", "the index tile has rank 1, the tile rank 2",
           caret_under="dsl.gather", hint="(R, 1) index tile")
    expect(lambda: m.rows(z, np.zeros((8, 8), np.int32), z), "E205", "the index tile has 8 rows, the tile only 4",
           caret_under="dsl.gather")
    expect(lambda: m.rows_runtime(z, np.zeros((8, 1), np.int32), np.zeros((8, 1), np.float32)), "E205",
           "the index tile has 8 rows, the tile only 4", caret_under="dsl.gather")


def test_arange_errors(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def runtime(y: GM[i32], n: int):
            y[0:n] = dsl.arange(n)

        @dsl.kernel
        def half(y: GM[f16]):
            y[0:8] = dsl.arange(8, f16)

        @dsl.kernel
        def floaty(y: GM[f32]):
            y[0:8] = dsl.arange(8.0, f32)
    """)
    expect(lambda: m.runtime(np.zeros(8, np.int32), 8), "E207",
           "the length of dsl.arange must be a compile-time integer or bounded by one", caret_under="dsl.arange",
           hint="t.len of dsl.tiles")
    expect(lambda: m.half(np.zeros(8, np.float16)), "E204", "dsl.arange makes i32 or f32 tiles, not f16",
           hint="dsl.cast(dsl.arange(n, f32), f16)")
    expect(lambda: m.floaty(np.zeros(8, np.float32)), "E204", "dsl.arange(n) needs an integer length")


def test_scalar_subscript_errors(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def store_one(y: GM[f32]):
            y[3] = 1.0

        @dsl.kernel
        def float_index(x: GM[f32], w: GM[f32, 2], y: GM[f32, 2]):
            y[0, :] = w[x[0], :]
    """)
    expect(lambda: m.store_one(np.zeros(8, np.float32)), "E210", "writing single elements of 'y' is not supported",
           caret_under="y[3]", hint="y[i:i + 1] = dsl.full((1,), v, f32)")
    z = np.zeros((4, 4), np.float32)
    expect(lambda: m.float_index(z[0], z, z), "E204", "GM indices must be integers", caret_under="x[0]")


def test_core_ir_names_the_new_statements() -> None:
    k = core_ir(embed, np.zeros(3, np.int32), np.zeros((4, 8), np.float32), np.zeros((3, 8), np.float32))
    assert any(isinstance(s, LoadScalar) for s in walk(k.body))
    k2 = core_ir(gather1d, np.zeros(8, np.float32), np.zeros(8, np.int32), np.zeros(8, np.float32))
    assert [s.arg for s in walk(k2.body) if isinstance(s, VIndexed)] == ["cols"]
    with pytest.raises(KernelError):  # a bad launch never leaves a half-made kernel behind
        embed[1](np.array([9], np.int32), np.zeros((4, 8), np.float32), np.zeros((1, 8), np.float32))


def test_every_stage_verifies() -> None:
    import dataclasses

    from compiler.frontend.lower import lower
    from compiler.passes import verify as V
    from compiler.pipeline import stages
    from simulator.config import load_config

    cfg = load_config()
    f, i = np.zeros((16, 40), np.float32), np.zeros((16, 1), np.int32)
    cases = [(embed_blocks, (i[:, 0], f, f)), (cross_entropy, (f, i, f[:, :1].copy())), (aranges, (i[:, 0], f[0])),
             (gather_rows, (f, i.T.copy(), f[:1].copy())), (read_then_write, (i[:, 0], i[:, 0]))]
    for k, args in cases:
        values_, infos = k.bind(args, {})
        params, _ = k.params_for(values_, infos)
        ir = lower(k.fdef, k.env, params, k.options)
        V.verify(ir, "tile", cfg)
        for name, fn in stages():
            ir = fn(ir, cfg)
            V.verify(ir, name, cfg)
    values_, infos = gather1d.bind((f[0], i[:, 0], f[0]), {})
    params, _ = gather1d.params_for(values_, infos)
    ir = lower(gather1d.fdef, gather1d.env, params, gather1d.options)

    def swap(body):  # type: ignore[no-untyped-def]
        out = []
        for s in body:
            if isinstance(s, For):
                s = dataclasses.replace(s, body=swap(s.body))
            elif isinstance(s, VIndexed):
                s = dataclasses.replace(s, srcs=(s.srcs[1], s.srcs[0]))  # a float tile as the index
            out.append(s)
        return tuple(out)

    with pytest.raises(V.VerifyError, match="VGATHER at line .* has bad operands"):
        V.verify(dataclasses.replace(ir, body=swap(ir.body)), "tile", cfg)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 20), cols=st.integers(1, 40), k=st.integers(1, 6), axis=st.sampled_from([0, 1]),
       seed=st.integers(0, 2**31))
def test_gather_matches_take_along_axis(rows: int, cols: int, k: int, axis: int, seed: int) -> None:
    r = np.random.default_rng(seed)
    x = r.standard_normal((rows, cols)).astype(np.float32)
    shape = (rows, k) if axis == 1 else (k, cols)
    idx = r.integers(0, x.shape[axis], shape).astype(np.int32)
    kern = gather_cols if axis == 1 else gather_rows
    outs = []
    for interp in (False, True):
        y = np.zeros(shape, np.float32)
        with interpreting() if interp else _null():
            kern[2](x, idx, y)
        outs.append(y)
    same(outs[0], np.take_along_axis(x, idx.astype(np.int64), axis))
    same(outs[0], outs[1])


@dsl.kernel
def segments(offsets: GM[i32], x: GM[f32, 2], y: GM[f32, 2]):
    for s in dsl.range(offsets.shape[0] - 1):  # segment s is rows offsets[s] .. offsets[s + 1] - 1
        acc = dsl.zeros((1, 32), f32)
        for r in dsl.range(offsets[s], offsets[s + 1]):  # a loop whose bounds are data
            acc = acc + x[r:r + 1, :]
        if offsets[s + 1] > offsets[s]:
            y[s:s + 1, :] = acc


def test_data_dependent_loop_bounds_and_branches() -> None:
    offsets = np.array([0, 3, 3, 10, 11], np.int32)
    x = values((11, 32), "f32")
    y = np.full((4, 32), 7.0, np.float32)
    na, ia, nr, ir = both(segments[1], [offsets, x, y], profile=True)
    same(na[2], ia[2])
    same_runs(nr, ir)
    ref = np.full((4, 32), 7.0, np.float32)
    for s in range(4):
        acc = np.zeros(32, np.float32)
        for r in range(offsets[s], offsets[s + 1]):
            acc = acc + x[r]
        if offsets[s + 1] > offsets[s]:
            ref[s] = acc
    same(na[2], ref)


def test_readme_example(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The code of the README's "Gathers and scalars from GM" paragraph, as written there."""
    from pathlib import Path

    from tests.conftest import load_source

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    part = text[text.index("**Gathers and scalars from GM.**"):]
    code = part[part.index("```python") + len("```python"):part.index("```\n", part.index("```python") + 9)]
    m = load_source(tmp_path, code)
    w, idx = values((300, 48), "f16"), rng.integers(0, 300, 77).astype(np.int32)
    y = np.zeros((77, 48), np.float16)
    m.embedding(idx, w, y)
    same(y, w[idx])
    x, tgt = values((21, 100), "f32"), rng.integers(0, 100, (21, 1)).astype(np.int32)
    loss = np.zeros((21, 1), np.float32)
    m.cross_entropy(x, tgt, loss)
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(tgt[:, 0]).long(), reduction="none")
    np.testing.assert_allclose(loss[:, 0], ref.numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_examples_against_torch(dt: torch.dtype) -> None:
    from cross_entropy import cross_entropy as xent_example
    from embedding import embedding

    w, idx = torch.randn(1000, 96).to(dt), torch.randint(0, 1000, (300,), dtype=torch.int32)
    y = torch.empty(300, 96, dtype=dt)
    embedding[6](idx, w, y)
    assert torch.equal(y, torch.nn.functional.embedding(idx.long(), w))
    x, tgt = torch.randn(50, 1000), torch.randint(0, 1000, (50, 1), dtype=torch.int32)
    loss = torch.empty(50, 1)
    xent_example[6](x, tgt, loss)
    ref = torch.nn.functional.cross_entropy(x, tgt[:, 0].long(), reduction="none")
    torch.testing.assert_close(loss[:, 0], ref, rtol=1e-5, atol=1e-5)


def test_the_scalar_read_checks_its_element_itself() -> None:
    """Lowering checks each subscript first; the read also checks its element against the tensor
    (as every DMA does), so Core IR without the first checks still cannot read outside GM."""
    import dataclasses

    from compiler import sexpr as S
    from compiler.backend.codegen import generate
    from compiler.interp.interpret import interpret_core
    from compiler.ir import Check
    from simulator.config import load_config

    idx, w, y = np.array([0, 1, 2], np.int32), np.zeros((4, 8), np.float32), np.zeros((3, 8), np.float32)
    k = core_ir(embed, idx, w, y)

    def unchecked(body):  # type: ignore[no-untyped-def]
        out = []
        for s in body:
            if isinstance(s, For):
                s = dataclasses.replace(s, body=unchecked(s.body))
            elif isinstance(s, LoadScalar):  # read one element past the end of idx
                s = dataclasses.replace(s, src=dataclasses.replace(s.src, offset=S.add(s.src.offset, 1)))
            if not (isinstance(s, Check) and s.code == "E404"):
                out.append(s)
        return tuple(out)

    bad = dataclasses.replace(k, body=unchecked(k.body))
    with pytest.raises(KernelError, match=r"scalar read of element 3 of 'idx' \(i32\), which has 3 elements"):
        interpret_core(bad, [idx, w, y], load_config(CONFIG.hw))
    _, checks, _ = generate(bad, "sym")
    assert any(c.code == "E404" and c.message.startswith("scalar read of element %d of 'idx'") for c in checks)
