"""End-to-end kernels: DSL -> native code on the simulated cores, checked against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dsl
from dsl import GM, Const, f16, f32, i32

rng = np.random.default_rng(1)


@dsl.kernel
def axpy(x: GM[f32], y: GM[f32], out: GM[f32], alpha: float, TILE: Const[int] = 512):
    for t in dsl.tiles(x.shape[0], TILE):
        out[t] = x[t] * alpha + y[t]


@pytest.mark.parametrize("n", [0, 1, 7, 511, 512, 513, 4096, 100_001])
@pytest.mark.parametrize("cores", [1, 3, 8, 24])
def test_tails_and_core_counts(n: int, cores: int) -> None:
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    axpy[cores](x, y, out, 1.5)
    np.testing.assert_array_equal(out, (torch.from_numpy(x) * 1.5 + torch.from_numpy(y)).numpy())


def test_torch_tensors_zero_copy() -> None:
    x = torch.randn(3000)
    y = torch.randn(3000)
    out = torch.empty(3000)
    ptr = out.data_ptr()
    axpy[4](x, y, out, alpha=-2.0)
    assert out.data_ptr() == ptr
    assert torch.equal(out, x * -2.0 + y)


def test_default_core_count_and_const_override() -> None:
    x = np.arange(10000, dtype=np.float32)
    out = np.zeros_like(x)
    axpy(x, x, out, 1.0, TILE=256)
    np.testing.assert_array_equal(out, 2 * x)


@dsl.kernel
def elementwise(x: GM, y: GM, out: GM, OP: Const[str] = "add", TILE: Const[int] = 1024):
    for t in dsl.tiles(x.shape[0], TILE):
        a = x[t]
        b = y[t]
        if OP == "add":
            out[t] = a + b
        elif OP == "sub":
            out[t] = a - b
        elif OP == "mul":
            out[t] = a * b
        elif OP == "div":
            out[t] = a / b
        elif OP == "max":
            out[t] = dsl.maximum(a, b)
        elif OP == "min":
            out[t] = dsl.min(a, b)
        elif OP == "where":
            out[t] = dsl.where(a > b, a, b * 2)


TORCH_OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "max": torch.maximum,
             "min": torch.minimum, "where": lambda a, b: torch.where(a > b, a, b * 2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", list(TORCH_OPS))
def test_float_binary_bit_exact(dtype: torch.dtype, op: str) -> None:
    n = 3001
    a = torch.randn(n).to(dtype)
    b = torch.randn(n).to(dtype)
    b[::7] = a[::7]  # ties for max/min/where
    out = torch.empty(n, dtype=dtype)
    elementwise[5](a, b, out, OP=op)
    assert torch.equal(out, TORCH_OPS[op](a, b)), (out - TORCH_OPS[op](a, b)).abs().max()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min", "where"])
def test_int_binary(dtype: torch.dtype, op: str) -> None:
    a = torch.randint(-100, 100, (2049,), dtype=dtype)
    b = torch.randint(-100, 100, (2049,), dtype=dtype)
    out = torch.empty_like(a)
    elementwise[3](a, b, out, OP=op)
    want = TORCH_OPS[op](a, b).to(dtype)
    assert torch.equal(out, want)


@dsl.kernel
def unary(x: GM, y: GM, OP: Const[str] = "exp", TILE: Const[int] = 1024):
    for t in dsl.tiles(x.shape[0], TILE):
        v = x[t]
        if OP == "exp":
            y[t] = dsl.exp(v)
        elif OP == "log":
            y[t] = dsl.log(v)
        elif OP == "sqrt":
            y[t] = dsl.sqrt(v)
        elif OP == "rsqrt":
            y[t] = dsl.rsqrt(v)
        elif OP == "abs":
            y[t] = dsl.abs(v)
        elif OP == "neg":
            y[t] = -v
        elif OP == "relu":
            y[t] = dsl.relu(v)
        elif OP == "sigmoid":
            y[t] = dsl.sigmoid(v)
        elif OP == "tanh":
            y[t] = dsl.tanh(v)


TORCH_UNARY = {"exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "abs": torch.abs,
               "neg": torch.neg, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}


@pytest.mark.parametrize("op", list(TORCH_UNARY))
def test_unary_f32(op: str) -> None:
    x = torch.randn(5000) * 3
    if op in ("log", "sqrt", "rsqrt"):
        x = x.abs() + 1e-3
    y = torch.empty_like(x)
    unary[4](x, y, OP=op)
    torch.testing.assert_close(y, TORCH_UNARY[op](x), atol=1e-6, rtol=2e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["exp", "sigmoid", "tanh", "relu", "abs", "sqrt"])
def test_unary_half(dtype: torch.dtype, op: str) -> None:
    x = (torch.randn(3000) * 2).to(dtype)
    if op == "sqrt":
        x = x.abs()
    y = torch.empty_like(x)
    unary[4](x, y, OP=op)
    torch.testing.assert_close(y.float(), TORCH_UNARY[op](x).float(), atol=0, rtol=1e-2 if dtype == torch.bfloat16 else 2e-3)


@dsl.kernel
def cast(x: GM, y: GM, TILE: Const[int] = 512):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.cast(x[t], y.dtype)


@pytest.mark.parametrize("src", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8])
@pytest.mark.parametrize("dst", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8])
def test_casts(src: torch.dtype, dst: torch.dtype) -> None:
    if src.is_floating_point:
        x = (torch.randn(1000) * 50).to(src)
        x[:4] = torch.tensor([0.5, 1.5, 2.5, -2.5])  # ties round to even
    else:
        x = torch.randint(-128, 128, (1000,), dtype=torch.int32).to(src)
    y = torch.empty(1000, dtype=dst)
    cast[2](x, y)
    if src.is_floating_point and not dst.is_floating_point:
        info = torch.iinfo(dst)
        want = torch.round(x.double()).clamp(info.min, info.max).to(dst)
    else:
        want = x.to(dst)
    assert torch.equal(y, want), (src, dst, y[:8], want[:8])


@dsl.kernel
def reduce2d(x: GM[f32], rows: GM[f32], cols: GM[f32], total: GM[f32], R: Const[int] = 8):
    for r in dsl.tiles(x.shape[0], R):
        xt = x[r, :]
        rows[r] = dsl.sum(xt, axis=1)


def test_row_reduction_without_keepdims() -> None:
    x = torch.randn(37, 53)
    rows = torch.empty(37)
    reduce2d[4](x, rows, torch.empty(1), torch.empty(1))
    torch.testing.assert_close(rows, x.sum(1), atol=1e-5, rtol=1e-5)


@dsl.kernel
def col_stats(x: GM[f32], mx: GM[f32], mn: GM[f32], s: GM[f32]):
    # one core does it all: a column reduction over row blocks, accumulated in UB
    if dsl.core_id() == 0:
        amax = dsl.full((x.shape[1],), -1e30, f32) if False else dsl.full((64,), -1e30, f32)
        amin = dsl.full((64,), 1e30, f32)
        asum = dsl.zeros((64,), f32)
        for i in dsl.range(0, x.shape[0], 16):
            xt = x[i:dsl.min(i + 16, x.shape[0]), :]
            amax = dsl.maximum(amax, dsl.max(xt, axis=0))
            amin = dsl.minimum(amin, dsl.min(xt, axis=0))
            asum = asum + dsl.sum(xt, axis=0)
        mx[:] = amax
        mn[:] = amin
        s[:] = asum


def test_column_reductions_loop_carried() -> None:
    # dsl.full((x.shape[1],), ...) is a tile sized by a tensor shape (a runtime tile), no longer E207
    x = torch.randn(50, 64)
    mx, mn, s = torch.empty(64), torch.empty(64), torch.empty(64)
    col_stats[2](x, mx, mn, s)
    torch.testing.assert_close(mx, x.max(0).values)
    torch.testing.assert_close(mn, x.min(0).values)
    torch.testing.assert_close(s, x.sum(0), atol=1e-5, rtol=1e-5)


@dsl.kernel
def col_stats_fixed(x: GM[f32], mx: GM[f32], s: GM[f32], R: Const[int] = 16):
    if dsl.core_id() == 0:
        amax = dsl.full((64,), -1e30, f32)
        asum = dsl.zeros((64,), f32)
        for i in dsl.range(0, x.shape[0], R):
            xt = x[i:dsl.min(i + R, x.shape[0]), :]  # a static bound (R rows), a runtime extent
            amax = dsl.maximum(amax, dsl.max(xt, axis=0))
            asum = asum + dsl.sum(xt, axis=0)
        mx[:] = amax
        s[:] = asum


def test_column_reductions_accumulate_across_iterations() -> None:
    x = torch.randn(50, 64)
    mx, s = torch.empty(64), torch.empty(64)
    col_stats_fixed[3](x, mx, s)
    torch.testing.assert_close(mx, x.max(0).values)
    torch.testing.assert_close(s, x.sum(0), atol=1e-5, rtol=1e-5)


@dsl.kernel
def spmd_rows(x: GM[f32], y: GM[f32]):
    """Hand-written SPMD: core c takes rows c, c + num_cores, ..."""
    for i in dsl.range(dsl.core_id(), x.shape[0], dsl.num_cores()):
        row = x[i, :]
        y[i, :] = row - dsl.max(row)  # x[i, :] is a 1-D row, as in numpy


def test_hand_written_spmd_and_scalar_row_index() -> None:
    x = torch.randn(13, 40)
    y = torch.empty_like(x)
    spmd_rows[5](x, y)
    torch.testing.assert_close(y, x - x.max(1, keepdim=True).values)


@dsl.kernel
def nested(x: GM[f32], y: GM[f32], RB: Const[int] = 4, CB: Const[int] = 64):
    """2-D blocks: rows split over cores, columns looped on each core, an if on scalars."""
    for r in dsl.tiles(x.shape[0], RB):
        for c in dsl.tiles(x.shape[1], CB):
            blk = x[r, c]
            if c.start == 0:
                y[r, c] = blk * 0.0
            else:
                y[r, c] = blk + r.start


def test_nested_loops_2d_blocks_and_if() -> None:
    x = torch.randn(10, 150)
    y = torch.empty_like(x)
    nested[3](x, y)
    want = x + torch.arange(10).div(4, rounding_mode="floor").mul(4)[:, None].float()
    want[:, :64] = 0
    torch.testing.assert_close(y, want)


@dsl.kernel
def explicit(x: GM[f32], y: GM[f32], TILE: Const[int] = 256):
    """Explicit placement: named UB buffers, double-buffered input, dsl.copy for the DMA."""
    xin = dsl.alloc(dsl.UB, (TILE,), f32, buffers=2)
    yout = dsl.alloc(dsl.UB, (TILE,), f32, buffers=2)
    for t in dsl.tiles(x.shape[0], TILE):
        dsl.copy(xin, x[t])
        dsl.copy(yout, dsl.relu(xin) + 1.0)
        dsl.copy(y[t], yout)


def test_explicit_alloc_and_copy() -> None:
    x = torch.randn(1000)
    y = torch.empty_like(x)
    explicit[3](x, y)
    torch.testing.assert_close(y, torch.relu(x) + 1)
    core = explicit.emit("core", x, y)
    assert "in UB @ 0 " in core and "x2" in core


@dsl.kernel
def show(x: GM[f32], k: int):
    if dsl.core_id() == 0:
        t = x[0:4]
        dsl.print("k =", k, "half =", k / 2, "tile:", t * 2.0)


def test_print(capsys: pytest.CaptureFixture[str]) -> None:
    show[2](np.arange(4, dtype=np.float32), 3)
    out = capsys.readouterr().out
    assert out.strip() == "[core 0] k = 3 half = 1.5 tile: [[0. 2. 4. 6.]]"


@dsl.kernel
def int_math(a: GM[i32], b: GM[i32], q: GM[i32], r: GM[i32], TILE: Const[int] = 256):
    for t in dsl.tiles(a.shape[0], TILE):
        at = a[t]
        bt = b[t]
        q[t] = at // bt
        r[t] = at % bt


def test_integer_floordiv_mod_python_semantics_and_zero() -> None:
    a = torch.randint(-50, 50, (1000,), dtype=torch.int32)
    b = torch.randint(-7, 8, (1000,), dtype=torch.int32)
    q, r = torch.empty_like(a), torch.empty_like(a)
    int_math[2](a, b, q, r)
    nz = b != 0
    assert torch.equal(q[nz], torch.div(a[nz], b[nz], rounding_mode="floor"))
    assert torch.equal(r[nz], torch.remainder(a[nz], b[nz]))
    assert (q[~nz] == 0).all() and (r[~nz] == 0).all()


@dsl.kernel
def half_scalar(x: GM[f16], y: GM[f16], TILE: Const[int] = 256):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = x[t] * 0.1 + 3


def test_half_with_python_scalars_matches_torch() -> None:
    x = torch.randn(999).half()
    y = torch.empty_like(x)
    half_scalar[2](x, y)
    assert torch.equal(y, x * 0.1 + 3)


def test_failed_launch_keeps_compile_cache_and_tensors() -> None:
    x = torch.randn(100)
    out = torch.zeros(50)
    before = out.clone()
    with pytest.raises(dsl.KernelError, match="E404"):
        axpy[1](x, torch.randn(100), out, 1.0, TILE=64)  # out too short: the second store fails
    assert torch.equal(out[:0], before[:0])
    good = torch.empty(100)
    axpy[1](x, x, good, 1.0, TILE=64)  # the same compiled kernel still works
    assert torch.equal(good, 2 * x)


@dsl.kernel
def strided(x: GM[f32], y: GM[f32], S: Const[int] = 3):
    """Stepped windows: every S-th element of each row (a gather) and back (a scatter)."""
    n = (x.shape[1] + S - 1) // S
    for r in dsl.tiles(x.shape[0], 2):
        y[r, 0:n] = x[r, 0:x.shape[1]:S] * 2.0
        y[r, 1:x.shape[1]:S] = x[r, 1:x.shape[1]:S] + 100.0


@pytest.mark.parametrize("interpret", [False, True])
def test_stepped_windows(interpret: bool) -> None:
    from compiler.config import CONFIG

    x = torch.randn(5, 20)
    y = torch.zeros(5, 20)
    old = CONFIG.interpret
    CONFIG.interpret = interpret
    try:
        strided[3](x, y)
    finally:
        CONFIG.interpret = old
    want = torch.zeros(5, 20)
    want[:, 0:7] = x[:, 0:20:3] * 2
    want[:, 1:20:3] = x[:, 1:20:3] + 100
    torch.testing.assert_close(y, want)


def test_prepared_launch_reuses_marshalled_arguments() -> None:
    x, y = torch.randn(1000), torch.randn(1000)
    out = torch.zeros(1000)
    run = axpy[3].prepare(x, y, out, 2.0)
    run()
    assert torch.equal(out, x * 2.0 + y)
    x.mul_(3)  # same storage, new contents: the prepared launch sees them
    run()
    assert torch.equal(out, x * 2.0 + y)
    assert run.profile().cycles > 0
