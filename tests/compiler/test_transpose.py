"""Transposes: `t.T` / `dsl.transpose(t)` on UB tiles (VTRANSPOSE on V), `x[r, c].T` and `x.T[c, r]`
windows in vector code (loaded as stored, then transposed), stores into `y.T[...]`, the cube's
`x.T[m, k]` operands, the timing cost, and the error texts.

Every kernel runs natively and in the interpreter: outputs bit-identical and equal to numpy's
transpose, profiled runs with the same event records and cycles.
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transpose import transpose as transpose_example

import dsl
from compiler.config import CONFIG
from compiler.host import runnable_levels
from dsl import GM, Const, f32
from simulator import EVENT_DTYPE, Instr, load_config, simulate
from simulator.isa import INFO

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16, "i32": np.dtype(np.int32),
          "i8": np.dtype(np.int8)}
# square blocks, tails shorter than a register block (4/8/16), single rows and columns, large
SHAPES = [(1, 1), (5, 3), (16, 16), (17, 33), (64, 64), (37, 53), (130, 70), (3, 100), (100, 3), (1, 65), (65, 1)]
LEVELS = [lv for lv in ("x86-64-v2", "x86-64-v3") if lv in runnable_levels()]
rng = np.random.default_rng(11)


def data(shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    if dt.kind == "i":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dt)
    x = rng.standard_normal(shape).astype(np.float32).astype(dt)
    flat = x.reshape(-1)
    if flat.size >= 4:  # bit patterns a float path would disturb: a NaN payload, -0, inf
        bits = flat.view(np.uint16 if dt.itemsize == 2 else np.uint32)
        bits[0] = 0x7E01 if dt.itemsize == 2 and dt != BF16 else 0x7FC1 if dt == BF16 else 0x7FC00001
        flat[1], flat[2] = -0.0, np.inf
    return x


@contextlib.contextmanager
def interpreting() -> Iterator[None]:
    old = CONFIG.interpret
    CONFIG.interpret = True
    try:
        yield
    finally:
        CONFIG.interpret = old


def both(launch, args: list, **consts):  # type: ignore[no-untyped-def]
    """Profiled runs natively and interpreted on copies of args: (native args, interp args, runs)."""
    out = []
    for interp in (False, True):
        a = [x.copy() for x in args]
        with interpreting() if interp else contextlib.nullcontext():
            out.append((a, launch.profile(*a, **consts)))
    (na, nr), (ia, ir) = out
    for pn, pi in zip(nr.profile.per_core, ir.profile.per_core, strict=True):
        np.testing.assert_array_equal(pn.events, pi.events)
    assert nr.cycles == ir.cycles and nr.profile.busy == ir.profile.busy
    return na, ia, nr


def bits(x: np.ndarray) -> np.ndarray:
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(bits(a), bits(b))


@dsl.kernel
def t_window(x: GM, y: GM, BR: Const[int] = 32, BC: Const[int] = 48):
    """The issue's silently wrong kernel: a window of x.T in vector code."""
    for c, r in dsl.tiles2d((y.shape[0], y.shape[1]), (BC, BR)):
        y[c, r] = x.T[c, r]


@dsl.kernel
def t_store(x: GM, y: GM, BR: Const[int] = 32, BC: Const[int] = 48):
    """A store into a window of y.T."""
    for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (BR, BC)):
        y.T[r, c] = x[r, c]


@dsl.kernel
def t_builtin(x: GM, y: GM, BR: Const[int] = 48, BC: Const[int] = 32):
    """dsl.transpose of a tile computed in UB."""
    for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (BR, BC)):
        t = x[r, c]
        y[c, r] = dsl.transpose(t)


# ------------------------------------------------------------------ every dtype and shape
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("kernel", [transpose_example, t_window, t_store, t_builtin], ids=["example", "window", "store", "builtin"])
def test_transpose_dtypes_shapes(kernel, dt) -> None:  # type: ignore[no-untyped-def]
    for shape in SHAPES:
        x = data(shape, DTYPES[dt])
        y = np.zeros(shape[::-1], x.dtype)
        na, ia, run = both(kernel[3], [x, y])
        same_bits(na[1], np.ascontiguousarray(x.T))
        same_bits(ia[1], na[1])
        assert run.profile.work["V"] > 0


def test_square_64_is_the_transpose() -> None:
    """The issue's case: y[c, r] = x.T[c, r] on 64 x 64 used to give neither x nor x.T."""
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    y = np.zeros_like(x)
    t_window[24](x, y, BR=64, BC=64)
    assert np.array_equal(y, x.T)
    y2 = np.zeros_like(x)
    t_window[24](x, y2, BR=16, BC=32)
    assert np.array_equal(y2, x.T)


@pytest.mark.parametrize("level", LEVELS + ["native"])
def test_isa_levels(monkeypatch, level) -> None:  # type: ignore[no-untyped-def]
    """The register blocks differ by level (4x4 / 8x8 f32 on SSE / AVX2): same bits everywhere."""
    monkeypatch.setattr(CONFIG, "host_isa", level)
    for dt in DTYPES.values():
        for shape in ((37, 53), (64, 64), (9, 130), (1, 17)):
            x = data(shape, dt)
            y = np.zeros(shape[::-1], dt)
            transpose_example[2](x, y, BR=48, BC=64)
            same_bits(y, np.ascontiguousarray(x.T))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 90), cols=st.integers(1, 90), br=st.sampled_from([8, 16, 32, 40]),
       bc=st.sampled_from([8, 24, 32, 64]))
def test_property_shapes_and_blocks(rows, cols, br, bc) -> None:  # type: ignore[no-untyped-def]
    x = data((rows, cols), np.dtype(np.float32))
    y = np.zeros((cols, rows), np.float32)
    transpose_example[4](x, y, BR=br, BC=bc)
    same_bits(y, np.ascontiguousarray(x.T))


# ------------------------------------------------------------------ inside expressions
@dsl.kernel
def t_expr(a: GM, b: GM, z: GM, BR: Const[int] = 32, BC: Const[int] = 16):
    for r, c in dsl.tiles2d((a.shape[0], a.shape[1]), (BR, BC)):
        z[c, r] = (a[r, c].T + b[c, r]) * 2.0 - dsl.transpose(dsl.exp(a[r, c]))


@dsl.kernel
def t_tile_T(a: GM, z: GM, s: GM, BR: Const[int] = 16, BC: Const[int] = 24):
    for r, c in dsl.tiles2d((a.shape[0], a.shape[1]), (BR, BC)):
        u = a[r, c] * 3.0
        v = u.T
        z[c, r] = v.T.T + 1.0
        s[c, 0:1] = dsl.sum(u, axis=0, keepdims=True).T


def test_transpose_in_expressions() -> None:
    a = data((37, 45), np.dtype(np.float32))
    b = data((45, 37), np.dtype(np.float32))
    z = np.zeros((45, 37), np.float32)
    na, ia, _ = both(t_expr[2], [a, b, z])
    with np.errstate(all="ignore"):
        ref = (a.T + b) * np.float32(2.0) - np.exp(a).T
    np.testing.assert_allclose(na[2], ref, rtol=2e-6, atol=1e-6)
    same_bits(ia[2], na[2])


def test_tile_T_twice_and_reduction_rows() -> None:
    """u.T.T is u; the (1, C) row of a column sum, transposed, is a (C, 1) column."""
    a = data((16, 24), np.dtype(np.float32))
    a[np.isnan(a) | np.isinf(a)] = 1.0
    z = np.zeros((24, 16), np.float32)
    s = np.zeros((24, 1), np.float32)
    na, ia, _ = both(t_tile_T[1], [a, z, s])
    np.testing.assert_array_equal(na[1], (a * np.float32(3)).T + np.float32(1))
    np.testing.assert_allclose(na[2][:, 0], (a * np.float32(3)).sum(axis=0), rtol=1e-5)
    same_bits(ia[1], na[1])
    same_bits(ia[2], na[2])


def test_transposed_window_shape(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM, n: GM):
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (16, 32)):
                w = x.T[c, r]
                y[c, r] = w
                n[c, r] = w * 0.0 + (x[r, c].T.shape[0] * 1000 + x.T[c, r].shape[1])
    """)
    x = np.arange(20 * 40, dtype=np.float32).reshape(20, 40)
    y = np.zeros((40, 20), np.float32)
    n = np.zeros((40, 20), np.float32)
    m.k[1](x, y, n)
    same_bits(y, np.ascontiguousarray(x.T))
    # block (r, c) of x: rows 16 + 4, columns 32 + 8; its transpose has shape (cols, rows)
    assert n[0, 0] == 32 * 1000 + 16 and n[39, 19] == 8 * 1000 + 4 and n[0, 19] == 32 * 1000 + 4


def test_copy_into_explicit_buffers(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            buf = dsl.alloc(dsl.UB, (32, 16), f32)
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (16, 32)):
                dsl.copy(buf, x.T[c, r])
                dsl.copy(y[c, r], buf)
    """)
    x = data((20, 40), np.dtype(np.float32))
    y = np.zeros((40, 20), np.float32)
    na, ia, _ = both(m.k[2], [x, y])
    same_bits(na[1], np.ascontiguousarray(x.T))
    same_bits(ia[1], na[1])


def test_matmul_epilogue_stored_transposed(source) -> None:  # type: ignore[no-untyped-def]
    """An L0C accumulator stored into a window of c.T: through UB, transposed on V."""
    m = source("""
        @dsl.kernel
        def k(a: GM, b: GM, c: GM):
            for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (32, 48)):
                acc = dsl.zeros((32, 48), f32)
                for k in dsl.range(0, a.shape[1], 16):
                    acc += a[m, k] @ b[k, n]
                c.T[m, n] = acc
    """)
    a = data((40, 24), np.dtype(np.float32))
    b = data((24, 50), np.dtype(np.float32))
    a[~np.isfinite(a)] = 0.5
    b[~np.isfinite(b)] = 0.5
    c = np.zeros((50, 40), np.float32)
    na, ia, _ = both(m.k[3], [a, b, c])
    np.testing.assert_allclose(na[2], (a @ b).T, rtol=1e-5, atol=1e-5)
    same_bits(ia[2], na[2])


# ------------------------------------------------------------------ the cube keeps its own transpose
@dsl.kernel
def mm_t(a: GM, b: GM, c: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = 16):
    """c = a.T @ b, once as x.T[m, k] and once as x[k, m].T (the same operand)."""
    for m, n in dsl.tiles2d((a.shape[1], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[0], BK):
            acc += a.T[m, k] @ b[k, n]
        acc2 = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[0], BK):
            acc2 += a[k, m].T @ b[k, n]
        c[m, n] = (acc + acc2) * 0.5


def test_cube_operands_transpose_on_the_move() -> None:
    a = data((40, 36), np.dtype(np.float16))
    b = data((40, 20), np.dtype(np.float16))
    a[~np.isfinite(a.astype(np.float32))] = 1
    b[~np.isfinite(b.astype(np.float32))] = 1
    c = np.zeros((36, 20), np.float32)
    na, ia, _ = both(mm_t[2], [a, b, c])
    ref = a.astype(np.float32).T @ b.astype(np.float32)
    np.testing.assert_allclose(na[2], ref, rtol=1e-3, atol=1e-3)
    same_bits(ia[2], na[2])
    # no vector transposes of operands: both are transposed by the L1 -> L0A move
    core = mm_t.emit("core", a, b, c)
    assert core.count("(transposed)") == 2 and "vtranspose" not in core


# ------------------------------------------------------------------ the timing model
def test_transpose_cost_by_dtype() -> None:
    """ceil(R/16) * ceil(C * max(b, 2) / 32) blocks of 512 bytes, 2 repeats each, + start-up."""
    cfg = load_config("ascend910b1")
    pipe = int(INFO[Instr.VTRANSPOSE][1])

    def work(rows: int, cols: int, b: int) -> int:
        ev = np.array([(int(Instr.VTRANSPOSE), pipe, -1, rows * cols, b, rows, 0, 0)], dtype=EVENT_DTYPE)
        return simulate([ev], cfg).work["V"]

    assert work(16, 16, 2) == 2  # one 16 x 16 block of f16
    assert work(64, 64, 2) == 16 * 2
    assert work(64, 64, 4) == 32 * 2  # f32: 16 x 8 per block, twice the blocks of f16
    assert work(64, 64, 1) == 16 * 2  # i8: a byte per 16-bit lane, the blocks of f16
    assert work(17, 17, 2) == 4 * 2  # tails pad to whole blocks
    assert work(1, 1, 4) == 2
    assert work(0, 0, 4) == 0
    # against an elementwise add of the same f16 tile (1 repeat per row of 128 bytes): 64 vs 32
    add = np.array([(int(Instr.VADD), pipe, -1, 64 * 64, 2, 64, 0, 0)], dtype=EVENT_DTYPE)
    assert simulate([add], cfg).work["V"] == 64


def test_profile_counts_transposes() -> None:
    x = data((128, 128), np.dtype(np.float16))
    y = np.zeros_like(x)
    run = transpose_example[4].profile(x, y)
    ev = np.concatenate([p.events for p in run.profile.per_core])
    tr = ev[ev["instr"] == int(Instr.VTRANSPOSE)]
    assert len(tr) == 4 and set(tr["a"].tolist()) == {64 * 64} and set(tr["b"].tolist()) == {2}
    assert run.profile.work["V"] == 4 * 16 * 2


# ------------------------------------------------------------------ errors
def expect(fn, code: str, message: str, caret_under: str, hint: str | None = None) -> str:  # type: ignore[no-untyped-def]
    """A KernelError `file:line:col: error[code]: message`, the source line, a caret under
    `caret_under`, and the hint."""
    from dsl import KernelError

    with pytest.raises(KernelError) as ei:
        fn()
    text = str(ei.value)
    lines = text.splitlines()
    assert re.match(r"^\S+\.py:\d+:\d+: error\[" + code + r"\]: ", lines[0]), text
    assert message in lines[0], text
    col = lines[2].index("^")
    assert lines[1][col:].startswith(caret_under), text
    if hint is not None:
        assert "hint: " in text and hint in text, text
    return text


def x2(r: int = 32, c: int = 32, dt: type = np.float32) -> np.ndarray:
    return np.ones((r, c), dt)


def test_error_1d_tile(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for t in dsl.tiles(x.shape[0], 64):
                u = x[t] * 2.0
                y[t] = u.T
    """)
    expect(lambda: m.k[1](np.ones(100, np.float32), np.ones(100, np.float32)), "E205",
           "'.T' needs a 2-D tile; 'u' is 1-D [64]", "u.T", "has no rows to swap with its columns")


def test_error_1d_window(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for t in dsl.tiles(x.shape[0], 64):
                y[t] = dsl.transpose(x[t])
    """)
    expect(lambda: m.k[1](np.ones(100, np.float32), np.ones(100, np.float32)), "E205",
           "dsl.transpose() needs a 2-D tile; this window of 'x' is 1-D", "dsl.transpose(x[t])",
           "take a 2-D window")


def test_error_rank_3(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for r, c in dsl.tiles2d((x.shape[1], x.shape[2]), (16, 16)):
                y[0, c, r] = dsl.transpose(x)
    """)
    x = np.ones((2, 16, 16), np.float32)
    expect(lambda: m.k[1](x, x.copy()), "E205", "dsl.transpose() works on 2-D tiles; 'x' has rank 3",
           "dsl.transpose(x)", "tiles have at most 2 dimensions: transpose a 2-D window of it, e.g. x.T[i, c, r]")


def test_rank_3_windows_transpose(source) -> None:  # type: ignore[no-untyped-def]
    """The hint's remedy works: 2-D windows of a batched tensor, transposed."""
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for i in dsl.range(x.shape[0]):
                for r, c in dsl.tiles2d((x.shape[1], x.shape[2]), (16, 32)):
                    y[i, c, r] = x.T[i, c, r] + dsl.transpose(x[i, r, c])
    """)
    x = data((3, 20, 40), np.dtype(np.float32))
    y = np.zeros((3, 40, 20), np.float32)
    na, ia, _ = both(m.k[2], [x, y])
    same_bits(na[1], np.ascontiguousarray((x + x).transpose(0, 2, 1)))
    same_bits(ia[1], na[1])


def test_error_whole_gm_tensor(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (16, 16)):
                y[c, r] = dsl.transpose(x) + x[r, c]
    """)
    expect(lambda: m.k[1](x2(), x2()), "E205", "dsl.transpose() works on tiles, and 'x' is a whole GM tensor",
           "dsl.transpose(x)", "x.T[c, r] or x[r, c].T")


def test_error_1d_gm_T(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for t in dsl.tiles(x.shape[0], 64):
                y[t] = x.T[t]
    """)
    expect(lambda: m.k[1](np.ones(100, np.float32), np.ones(100, np.float32)), "E205",
           "'x.T' needs a tensor of rank 2 or more", "x.T", "no rows to swap")


def test_error_scalar(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM, n: int):
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (16, 16)):
                y[c, r] = x[r, c] + dsl.transpose(n)
    """)
    expect(lambda: m.k[1](x2(), x2(), 3), "E209", "dsl.transpose() needs a 2-D tile", "dsl.transpose(n)",
           "t.T, x[r, c].T")


def test_error_arity(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (16, 16)):
                y[c, r] = dsl.transpose(x[r, c], 1)
    """)
    expect(lambda: m.k[1](x2(), x2()), "E203", "dsl.transpose() takes at most 1 arguments (2 given)",
           "dsl.transpose(x[r, c], 1)", "dsl.transpose(x)")


def test_error_l1_tile(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            b = dsl.alloc(dsl.L1, (32, 32), f16)
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (32, 32)):
                dsl.copy(b, x[r, c])
                y[c, r] = b.T
    """)
    expect(lambda: m.k[1](x2(dt=np.float16), x2(dt=np.float16)), "E303",
           "'.T' runs on the vector unit, which works on UB; 'buf' is in L1", "b.T",
           "x.T[m, k] as a matmul operand is transposed on the L1 -> L0A move")


def test_error_store_into_T_dtype_and_shape(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (16, 32)):
                y.T[r, c] = x[r, c]

        @dsl.kernel
        def k2(x: GM, y: GM):
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (16, 32)):
                y.T[c, r] = x[r, c]

        @dsl.kernel
        def k3(x: GM, y: GM):
            for t in dsl.tiles(x.shape[0], 16):
                y.T[t, 0:16] = x[t]
    """)
    expect(lambda: m.k[1](x2(), x2(dt=np.float16)), "E204", "cannot store a f32 tile into 'y' of f16",
           "y.T[r, c] = x[r, c]", "dsl.cast(..., f16)")
    expect(lambda: m.k2[1](x2(), x2()), "E205", "shape mismatch in store rows: tiles of 16 vs 32",
           "y.T[c, r] = x[r, c]")
    expect(lambda: m.k3[1](np.ones(16, np.float32), x2(16, 16)), "E205",
           "cannot store a 1-D tile [16] into a window of y.T", "y.T[t, 0:16] = x[t]", "store a 2-D tile")


def test_store_into_T_out_of_bounds_writes_nothing(source) -> None:  # type: ignore[no-untyped-def]
    """A window of y.T past y's end: E404 before any byte of y is written."""
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (32, 32)):
                y.T[r, c] = x[r, c]
    """)
    y = np.full((16, 32), 7, np.float32)  # x is 32 x 32: y.T is only 32 x 16
    for interp in (False, True):
        with interpreting() if interp else contextlib.nullcontext():
            expect(lambda: m.k[1](x2(), y), "E404", "DMA would write elements [0, 1024) of 'y' (f32), which has 512",
                   "y.T[r, c] = x[r, c]", "outside the tensor")
        assert (y == 7).all()


# ------------------------------------------------------------------ the verifier
def _stages(kernel, args):  # type: ignore[no-untyped-def]
    """(stage name, IR) after lowering and after every schedule pass."""
    from compiler.frontend.lower import lower
    from compiler.pipeline import stages

    cfg = load_config()
    values, infos = kernel.bind(args, {})
    params, _ = kernel.params_for(values, infos)
    ir = lower(kernel.fdef, kernel.env, params, kernel.options)
    out = [("tile", ir)]
    for name, fn in stages():
        ir = fn(ir, cfg)
        out.append((name, ir))
    return out


def test_every_stage_verifies_and_broken_transposes_fail() -> None:
    import dataclasses

    from compiler.ir import Buf, VOp
    from compiler.passes import verify as V

    x, xt = np.zeros((40, 24), np.float16), np.zeros((24, 40), np.float16)
    a, at = x.astype(np.float32), xt.astype(np.float32)
    for kernel, args in ((transpose_example, (x, xt)), (t_store, (x, xt)), (t_expr, (a, at, at))):
        for name, ir in _stages(kernel, args):
            V.verify(ir, name, load_config())
    name, ir = _stages(transpose_example, (x, xt))[-1]
    s = next(s for s in _flat(ir.body) if isinstance(s, VOp) and s.instr == Instr.VTRANSPOSE)
    src = s.srcs[0]
    assert isinstance(src, Buf)
    for bad in (dataclasses.replace(s, srcs=(src, src)), dataclasses.replace(s, dst=src),
                dataclasses.replace(s, srcs=(dataclasses.replace(src, dtype=dsl.f32),))):
        broken = dataclasses.replace(ir, body=_swap(ir.body, s, bad))
        with pytest.raises(V.VerifyError, match="VTRANSPOSE"):
            V.verify(broken, name, load_config())


def _flat(body):  # type: ignore[no-untyped-def]
    from compiler.ir import walk

    return list(walk(body))


def _swap(body, old, new):  # type: ignore[no-untyped-def]
    """`body` with statement `old` (wherever it is nested) replaced by `new`."""
    import dataclasses

    from compiler.ir import For, If

    out = []
    for s in body:
        if s is old:
            out.append(new)
        elif isinstance(s, For):
            out.append(dataclasses.replace(s, body=_swap(s.body, old, new)))
        elif isinstance(s, If):
            out.append(dataclasses.replace(s, then=_swap(s.then, old, new), orelse=_swap(s.orelse, old, new)))
        else:
            out.append(s)
    return tuple(out)


def test_tile_carried_through_a_loop_transposed(source) -> None:  # type: ignore[no-untyped-def]
    """acc = acc.T in a loop updates acc in place: through a temporary, never transposed onto itself."""
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM, n: int):
            acc = x[0:32, 0:32] * 1.0
            for i in dsl.range(n):
                acc = acc.T
            y[0:32, 0:32] = acc
    """)
    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    for n in (1, 2, 3):
        na, ia, _ = both(m.k[1], [x, np.zeros_like(x)], n=n)
        np.testing.assert_array_equal(na[1], x.T if n % 2 else x)
        same_bits(ia[1], na[1])


def test_bool_tiles(source) -> None:  # type: ignore[no-untyped-def]
    """A comparison's bool tile transposes like the i8 it is stored as."""
    m = source("""
        @dsl.kernel
        def k(x: GM, y: GM):
            for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (16, 32)):
                y[c, r] = dsl.where((x[r, c] > 0.0).T, x.T[c, r], 0.0)
    """)
    x = rng.standard_normal((37, 45)).astype(np.float32)
    na, ia, _ = both(m.k[2], [x, np.zeros((45, 37), np.float32)])
    np.testing.assert_array_equal(na[1], np.where(x.T > 0, x.T, np.float32(0)))
    same_bits(ia[1], na[1])
