"""Host-side streaming (compiler.backend.codegen_stream): a window's loads, vector instructions and store in
one pass. Every kernel runs three ways on copies of the same arguments: native with streaming, native
without (`CONFIG.stream` off) and interpreted. Outputs must be bit-identical, and profiled runs must
give the same event records, cycles and per-pipe busy time: streaming changes how the host does the
work, never what the simulated core issues."""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import numpy as np
import pytest
from layer_norm import layer_norm
from rms_norm import rms_norm
from softmax import softmax
from swish import swish

import dsl
from compiler.backend.codegen import generate
from compiler.backend.codegen_stream import describe
from compiler.config import CONFIG
from compiler.pipeline import to_core
from dsl import GM, Const, bf16, f16, f32, i8, i32
from dsl.errors import KernelError
from simulator.config import load_config
from tests.compiler.test_interpret import BF16, interpreting, same, same_runs

rng = np.random.default_rng(11)
NP = {f32: np.dtype(np.float32), f16: np.dtype(np.float16), bf16: BF16, i32: np.dtype(np.int32),
      i8: np.dtype(np.int8)}


@contextlib.contextmanager
def streaming(on: bool) -> Iterator[None]:
    old = CONFIG.stream
    CONFIG.stream = on
    try:
        yield
    finally:
        CONFIG.stream = old


def three(launch, args: list, profile: bool = True, **consts):  # type: ignore[no-untyped-def]
    """Run natively with and without streaming and interpreted, each on its own copy of `args`;
    check that all outputs agree bit for bit and (profiled) the runs are identical. Returns the
    streamed run's arguments."""
    out = []
    for mode in ("stream", "plain", "interp"):
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        with streaming(mode != "plain"), interpreting() if mode == "interp" else contextlib.nullcontext():
            run = launch.profile(*a, **consts) if profile else launch(*a, **consts)
        out.append((a, run))
    (sa, sr), (pa, pr), (ia, ir) = out
    for x, y, z in zip(sa, pa, ia):
        if isinstance(x, np.ndarray):
            same(x, y)
            same(x, z)
    if profile:
        same_runs(sr, pr)
        same_runs(sr, ir)
    return sa


def core_of(k, *args):  # type: ignore[no-untyped-def]
    values, infos = k.bind(args, {})
    params, _ = k.params_for(values, infos)
    return to_core(k.fdef, k.env, params, k.options, load_config("ascend910b1"))


def data(n: int | tuple[int, ...], dt) -> np.ndarray:  # type: ignore[no-untyped-def]
    x = rng.standard_normal(n) * (20 if dt in (i32, i8) else 3)
    return x.astype(NP[dt])


# ------------------------------------------------------------------ kernels
@dsl.kernel
def vadd(x: GM, y: GM, z: GM, TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        z[t] = x[t] + y[t]


@dsl.kernel
def chain(x: GM, y: GM, TILE: Const[int] = 64):
    """Several instructions in f16/bf16 round per instruction; the pass must round the same way."""
    for t in dsl.tiles(x.shape[0], TILE):
        a = x[t] * 3.0
        b = a + 0.1
        y[t] = dsl.exp(b * a) - a


@dsl.kernel
def casts(x: GM[f32], h: GM[f16], i: GM[i32], TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        h[t] = dsl.cast(xt * 1000.0, f16) * dsl.cast(xt, f16)
        i[t] = dsl.cast(dsl.cast(xt * 100.0, f16), i32) + 1


@dsl.kernel
def bcast(x: GM[f32], w: GM[f32], y: GM[f32], ROWS: Const[int] = 3):
    """A (C,) row loaded once and an (R, 1) column from a reduction, both broadcast in the pass."""
    wt = w[:]
    for r in dsl.tiles(x.shape[0], ROWS):
        xt = x[r, :]
        m = dsl.max(xt, axis=1, keepdims=True)
        y[r, :] = (xt - m) * wt + 1.0


@dsl.kernel
def explicit(x: GM[f32], y: GM[f32], TILE: Const[int] = 64):
    """Explicit buffers: the window of the last tile is shorter than the buffer's extent, so the
    pass must not run there (the vector instruction covers elements the load did not write)."""
    xin = dsl.alloc(dsl.UB, (TILE,), f32, buffers=2)
    for t in dsl.tiles(x.shape[0], TILE):
        dsl.copy(xin, x[t])
        y[t] = dsl.relu(xin) + 1.0


@dsl.kernel
def two_outputs(x: GM[f32], y: GM[f32], z: GM[f32], TILE: Const[int] = 64):
    """A loaded tile read after its group (by a second store): the pass also writes it to UB."""
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        y[t] = xt * 2.0
        z[t] = xt + 1.0


# ------------------------------------------------------------------ results and profiles
@pytest.mark.parametrize("dtype", [f32, f16, bf16, i32, i8])
@pytest.mark.parametrize("n", [0, 1, 37, 64, 200, 1000])
@pytest.mark.parametrize("cores", [1, 3])
def test_vadd_tails_and_sizes(dtype, n: int, cores: int) -> None:  # type: ignore[no-untyped-def]
    out = three(vadd[cores], [data(n, dtype), data(n, dtype), np.zeros(n, NP[dtype])])
    if dtype in (f32, i32):
        same(out[2], out[0] + out[1])


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
@pytest.mark.parametrize("n", [1, 100, 1000])
def test_rounding_per_instruction(dtype, n: int) -> None:  # type: ignore[no-untyped-def]
    three(chain[2], [data(n, dtype), np.zeros(n, NP[dtype])])


def test_casts() -> None:
    x = np.concatenate([data(500, f32), [0.0, -0.0, 1e6, -1e6, np.inf, -np.inf, np.nan, 0.49999997]])
    x = x.astype(np.float32)
    three(casts[2], [x, np.zeros(len(x), np.float16), np.zeros(len(x), np.int32)])


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
def test_swish(dtype) -> None:  # type: ignore[no-untyped-def]
    x = np.concatenate([data(700, dtype).astype(np.float32), [0.0, -0.0, np.inf, -np.inf, np.nan, 100, -100]])
    x = x.astype(NP[dtype])
    three(swish[3], [x, np.zeros_like(x)], TILE=128)


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 3), (7, 33), (10, 100)])
def test_broadcasts(shape: tuple[int, int]) -> None:
    three(bcast[2], [data(shape, f32), data(shape[1], f32), np.zeros(shape, np.float32)])


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (37, 129), (9, 1000)])
def test_row_kernels(shape: tuple[int, int]) -> None:
    x, w, b = data(shape, f32), data(shape[1], f32), data(shape[1], f32)
    three(softmax[3], [x, np.zeros(shape, np.float32)])
    three(layer_norm[3], [x, w, b, np.zeros(shape, np.float32)], eps=1e-5)
    three(rms_norm[3], [x, w, np.zeros(shape, np.float32)], eps=1e-6)


@pytest.mark.parametrize("n", [1, 63, 64, 65, 130])
def test_window_shorter_than_buffer_falls_back(n: int) -> None:
    out = three(explicit[2], [data(n, f32), np.zeros(n, np.float32)])
    np.testing.assert_array_equal(out[1], np.maximum(out[0], 0) + 1)


def test_loaded_tile_read_after_its_group() -> None:
    three(two_outputs[2], [data(300, f32), np.zeros(300, np.float32), np.zeros(300, np.float32)])


def test_aliased_tensors() -> None:
    """Overlapping views one element apart: z[i] is x[i + 1]. The instructions load a whole window
    before storing it; an element-by-element pass would read what it just wrote (a running sum), so
    the pass must not run there."""
    got = []
    for mode in ("stream", "plain", "interp"):
        buf = np.zeros(1001, np.float32)
        with streaming(mode != "plain"), interpreting() if mode == "interp" else contextlib.nullcontext():
            vadd[1](buf[:-1], np.ones(1000, np.float32), buf[1:])
        got.append(buf)
    same(got[0], got[1])
    same(got[0], got[2])
    assert got[0][64] == 1 and got[0][65] == 2  # window by window: no running sum inside a window


def test_in_place_same_array() -> None:
    outs = []
    for mode in ("stream", "plain", "interp"):
        x = data(777, f32)
        x[:] = np.arange(777, dtype=np.float32)
        with streaming(mode != "plain"), interpreting() if mode == "interp" else contextlib.nullcontext():
            vadd[3](x, x, x)
        outs.append(x)
    same(outs[0], outs[1])
    same(outs[0], outs[2])
    same(outs[0], np.arange(777, dtype=np.float32) * 2)


def test_large_tensors_stream_non_temporally() -> None:
    """Tensors past codegen_vector.STREAM_BYTES take the non-temporal path (rows staged in UB); a
    window starting off a 64-byte boundary exercises its head and tail."""
    n = (1 << 23) + 37
    x = data(n + 3, f32)[3:]
    y = data(n, f32)
    assert x.ctypes.data % 64 != 0
    out = three(vadd[2], [x, y, np.zeros(n, np.float32)], profile=False, TILE=8192)
    same(out[2], x + y)
    a = data((8200, 1024), f32)
    three(softmax[2], [a, np.zeros_like(a)], profile=False, ROWS=8)


def test_failed_launch_leaves_what_the_instructions_leave() -> None:
    """A store that fails its bounds check: tiles before it were stored, nothing after."""
    got = []
    for mode in ("stream", "plain", "interp"):
        z = np.full(150, -1.0, np.float32)
        with streaming(mode != "plain"), interpreting() if mode == "interp" else contextlib.nullcontext():
            with pytest.raises(KernelError, match="E404"):
                vadd[1](np.ones(200, np.float32), np.ones(200, np.float32), z)
        got.append(z)
    same(got[0], got[1])
    same(got[0], got[2])
    assert (got[0][:128] == 2).all() and (got[0][128:] == -1).all()


# ------------------------------------------------------------------ where it applies
def test_groups_of_the_examples() -> None:
    x, a = np.zeros(100, np.float32), np.zeros((8, 16), np.float32)
    assert [d.split(": ", 1)[1] for d in describe(core_of(vadd, x, x, x))] == [
        "COPY_GM_UB x, COPY_GM_UB y, VADD, COPY_UB_GM z (UB written: none)"]
    assert describe(core_of(swish, x, x)) == [
        "line 9: COPY_GM_UB x, VSIGMOID, VMUL, COPY_UB_GM y (UB written: none)"]
    # softmax reads its row twice: the load feeds the max and is written to UB for the subtraction,
    # exp's result feeds the sum and is written for the division (codegen_stream_reduce)
    assert describe(core_of(softmax, a, a)) == [
        "line 9: COPY_GM_UB x, VREDUCE_MAX (UB written: %m.2, %xt.1)",
        "line 11: VSUB, VEXP, VREDUCE_SUM (UB written: %e.4, %t5)", "line 12: VDIV, COPY_UB_GM y (UB written: none)"]
    ln = describe(core_of(layer_norm, a, a[0], a[0], a))
    assert ln[-1] == "line 16: VMUL, VMUL, VADD, COPY_UB_GM y (UB written: none)"
    # the loaded tile is read again by the second store: written to UB
    assert describe(core_of(two_outputs, x, x, x))[0].endswith("(UB written: %xt.1)")


def test_off_switch_and_codegen_marks() -> None:
    x = np.zeros(100, np.float32)
    k = core_of(vadd, x, x, x)
    on, _, _ = generate(k, "sym", stream=True)
    off, _, _ = generate(k, "sym", stream=False)
    assert len(re.findall(r"^stream\d+:", on, re.M)) == 1
    assert not re.search(r"^stream\d+:", off, re.M)
