"""Stream groups that end in a reduction (compiler.backend.codegen_stream_reduce): the reduced tile goes
from GM through the group's elementwise members straight into register accumulators. Every kernel runs
streamed, unstreamed and interpreted (`three`): outputs bit-identical (any NaN equals any NaN), the same
trace records, cycles and per-pipe busy time."""
from __future__ import annotations

import numpy as np
import pytest
from softmax import softmax

import dsl
from compiler.backend.codegen import generate
from compiler.backend.codegen_stream import describe
from dsl import GM, Const, bf16, f16, f32, i32
from tests.compiler.test_interpret import same
from tests.compiler.test_stream import NP, core_of, data, three

COLS = [1, 15, 16, 17, 63, 64, 65, 100, 129, 300, 1000]   # tails, whole chunks, the 4-accumulator steps


@dsl.kernel
def row_reduce(x: GM, y: GM, MODE: Const[str] = "sum", ROWS: Const[int] = 3):
    """One value per row (keepdims: a (ROWS, 1) column in UB)."""
    for r in dsl.tiles(x.shape[0], ROWS):
        xt = x[r, :]
        if MODE == "sum":
            y[r, 0:1] = dsl.sum(xt, axis=1, keepdims=True)
        if MODE == "max":
            y[r, 0:1] = dsl.max(xt, axis=1, keepdims=True)
        if MODE == "min":
            y[r, 0:1] = dsl.min(xt, axis=1, keepdims=True)


@dsl.kernel
def row_reduce_flat(x: GM, y: GM, ROWS: Const[int] = 4):
    """One value per row without keepdims: the results lie along a row of UB."""
    for r in dsl.tiles(x.shape[0], ROWS):
        y[r] = dsl.sum(x[r, :] * 2.0, axis=1)


@dsl.kernel
def dev_sum(x: GM[f32], a: GM[f32], y: GM[f32], ROWS: Const[int] = 2):
    """Elementwise members with a column broadcast, then the sum: rows_kernel's MODE 'dev'."""
    for r in dsl.tiles(x.shape[0], ROWS):
        m = a[r, 0:1]
        xt = x[r, :]
        d = xt - m
        y[r, 0:1] = dsl.sum(d * d, axis=1, keepdims=True) * 0.5


@dsl.kernel
def cast_sum(x: GM, y: GM[f32], ROWS: Const[int] = 2):
    """f16 / bf16 loaded, widened, summed in f32."""
    for r in dsl.tiles(x.shape[0], ROWS):
        y[r, 0:1] = dsl.sum(dsl.cast(x[r, :], f32), axis=1, keepdims=True)


@dsl.kernel
def whole_sum(x: GM, y: GM, TILE: Const[int] = 256):
    """A whole 1-D tile to one value ('all'), one partial per tile."""
    for t in dsl.tiles(x.shape[0], TILE):
        j = t.start // TILE
        y[j:j + 1] = dsl.sum(dsl.abs(x[t]), keepdims=True)


@dsl.kernel
def explicit_sum(x: GM[f32], y: GM[f32], TILE: Const[int] = 64):
    """An explicit buffer: the last window is shorter than its extent, so the pass must not run there."""
    xin = dsl.alloc(dsl.UB, (1, TILE), f32, buffers=2)
    for t in dsl.tiles(x.shape[1], TILE):
        dsl.copy(xin, x[0:1, t])
        y[0:1, t.start // TILE:t.start // TILE + 1] = dsl.max(xin, axis=1, keepdims=True)


def special(shape: tuple[int, int], dt) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Random values with NaN, infinities and signed zeros sprinkled in (floats)."""
    x = data(shape, dt).astype(np.float64)
    if dt in (f32, f16, bf16) and x.size >= 8:
        flat = x.reshape(-1)
        idx = np.random.default_rng(3).choice(flat.size, size=max(1, flat.size // 50), replace=False)
        flat[idx] = np.resize([np.nan, np.inf, -np.inf, 0.0, -0.0], idx.size)
    return x.astype(NP[dt])


# ------------------------------------------------------------------ results and profiles
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("mode", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype", [f32, f16, i32])
def test_row_reductions(dtype, mode: str, cols: int) -> None:  # type: ignore[no-untyped-def]
    x = data((7, cols), dtype)
    out = three(row_reduce[2], [x, np.zeros((7, 1), NP[dtype])], MODE=mode)
    if dtype == f32 and mode != "sum":
        ref = x.max(axis=1) if mode == "max" else x.min(axis=1)
        same(out[1][:, 0], ref)


@pytest.mark.parametrize("cols", [5, 64, 300])
@pytest.mark.parametrize("mode", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype", [f32, bf16])
def test_special_values(dtype, mode: str, cols: int) -> None:  # type: ignore[no-untyped-def]
    x = special((9, cols), dtype)
    x[0, :] = -0.0 if dtype == f32 else x[0, :]   # a row of negative zeros: max and min give -0.0
    three(row_reduce[3], [x, np.zeros((9, 1), NP[dtype])], MODE=mode, ROWS=4)


def test_sum_keeps_lane_sum_order() -> None:
    """Values whose f32 sum depends on the order: the streamed sum equals the interpreter's lane_sum."""
    x = (np.random.default_rng(5).standard_normal((5, 1000)) * np.logspace(-6, 6, 1000)).astype(np.float32)
    out = three(row_reduce[1], [x, np.zeros((5, 1), np.float32)], MODE="sum")
    assert np.allclose(out[1][:, 0], x.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("shape", [(1, 1), (5, 33), (8, 257)])
def test_results_along_a_row(shape: tuple[int, int]) -> None:
    three(row_reduce_flat[2], [data(shape, f32), np.zeros(shape[0], np.float32)])


@pytest.mark.parametrize("cols", [1, 31, 200])
def test_chain_with_broadcast_column(cols: int) -> None:
    x = data((9, cols), f32)
    a = data((9, 1), f32)
    three(dev_sum[2], [x, a, np.zeros((9, 1), np.float32)])


@pytest.mark.parametrize("dtype", [f16, bf16])
def test_widened_sums(dtype) -> None:  # type: ignore[no-untyped-def]
    three(cast_sum[2], [data((6, 333), dtype), np.zeros((6, 1), np.float32)])


@pytest.mark.parametrize("n", [1, 100, 256, 1000])
@pytest.mark.parametrize("dtype", [f32, i32])
def test_whole_tile_sums(dtype, n: int) -> None:  # type: ignore[no-untyped-def]
    three(whole_sum[2], [data(n, dtype), np.zeros(-(-n // 256), NP[dtype])])


@pytest.mark.parametrize("n", [1, 63, 64, 65, 200])
def test_window_shorter_than_buffer_falls_back(n: int) -> None:
    x = data((1, n), f32)
    out = three(explicit_sum[2], [x, np.zeros((1, -(-n // 64)), np.float32)])
    full = n // 64  # (a shorter last window leaves the buffer's other elements as they were)
    same(out[1][0, :full], np.array([x[0, i:i + 64].max() for i in range(0, full * 64, 64)], np.float32))


def test_reduction_result_overlapping_its_source_falls_back() -> None:
    """Softmax in place (x is y): every group still computes what the instructions do."""
    x = data((37, 129), f32)
    three(softmax[3], [x, x])


# ------------------------------------------------------------------ where it applies
def test_groups() -> None:
    x, col = np.zeros((8, 100), np.float32), np.zeros((8, 1), np.float32)
    assert [d.split(": ", 1)[1] for d in describe(core_of(row_reduce, x, col))] == [
        "COPY_GM_UB x, VREDUCE_SUM (UB written: %t2)"]
    assert [d.split(": ", 1)[1] for d in describe(core_of(dev_sum, x, col, col))] == [
        "COPY_GM_UB x, VSUB, VMUL, VREDUCE_SUM (UB written: %t5)", "VMUL, COPY_UB_GM y (UB written: none)"]
    assert [d.split(": ", 1)[1] for d in describe(core_of(whole_sum, x[0], x[0]))] == [
        "COPY_GM_UB x, VABS, VREDUCE_SUM (UB written: %t3)"]
    # an explicit buffer only reduced after its copy: the copy joins, the buffer is not written
    assert [d.split(": ", 1)[1] for d in describe(core_of(explicit_sum, x[:1], x[:1, :2]))] == [
        "COPY_GM_UB x, VREDUCE_MAX (UB written: %t2)"]


def test_no_ub_round_trip_in_the_pass() -> None:
    """The fused pass of a load + sum stores nothing but the row's value into UB."""
    x = np.zeros((8, 100), np.float32)
    text, _, _ = generate(core_of(row_reduce, x, np.zeros((8, 1), np.float32)), "sym", stream=True)
    fused = text.split("\nstream", 1)[1].split("\nunfused", 1)[0]
    assert fused.count("store float") == 1
    assert "<16 x float>" in fused
