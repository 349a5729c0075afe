"""Runtime tiles and broadcasting (compiler/frontend/lower_runtime.py, compiler/extents.py).

Tiles whose length is a runtime value with a static bound (`dsl.zeros((c.len,), f32)`, windows
`x[i:dsl.min(i + R, n)]`) in every builtin, and numpy broadcasting of dimensions that are 1 only at
run time (`tgt[r, :]` of an (R, 1) tensor). Every kernel runs natively (on each x86-64 level the host
can run) and in the interpreter: outputs bit-identical, profiled runs with identical event records;
results are checked against numpy too. Bad input gets its error text tested.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import dsl
from compiler.config import CONFIG
from compiler.extents import dyn_broadcasts, same_extent
from compiler.host import runnable_levels
from compiler.ir import VOp, walk
from compiler.pipeline import to_core
from dsl import GM, Const, f32
from simulator.config import load_config
from tests.compiler.test_errors import expect
from tests.compiler.test_interpret import interpreting, same, same_runs
from tests.conftest import load_source

rng = np.random.default_rng(23)
LEVELS = [lv for lv in ("x86-64-v2", "x86-64-v3", "native") if lv in runnable_levels()]


@contextlib.contextmanager
def host_isa(level: str) -> Iterator[None]:
    old = CONFIG.host_isa
    CONFIG.host_isa = level
    try:
        yield
    finally:
        CONFIG.host_isa = old


def both(launch, args: list, level: str = "native", **consts):  # type: ignore[no-untyped-def]
    """Profiled runs, native (at `level`) and interpreted, on copies of `args`: outputs bit-identical,
    event records and cycles identical. Returns the native run's arguments."""
    out = []
    for interp in (False, True):
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        with host_isa(level), interpreting() if interp else contextlib.nullcontext():
            run = launch.profile(*a, **consts)
        out.append((a, run))
    (na, nr), (ia, ir) = out
    for x, y in zip(na, ia):
        if isinstance(x, np.ndarray):
            same(x, y)
    same_runs(nr, ir)
    return na


def f32s(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def seq_colsum(x: np.ndarray) -> np.ndarray:
    """Column sums added row by row in f32 (the kernel's order)."""
    acc = np.zeros(x.shape[1], np.float32)
    for row in x:
        acc = (acc + row).astype(np.float32)
    return acc


# ------------------------------------------------------------------ runtime-length accumulators
@dsl.kernel
def colsum(x: GM[f32, 2], y: GM[f32], C: Const[int] = 64):
    for c in dsl.tiles(x.shape[1], C):
        acc = dsl.zeros((c.len,), f32)  # 64 reserved, c.len computed (44 on the last tile of 1000)
        for r in dsl.range(x.shape[0]):
            acc += x[r, c]
        y[c] = acc


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape", [(7, 1000), (3, 64), (5, 65), (2, 1), (1, 130), (4, 0)])
def test_column_sum_with_a_short_last_tile(level: str, shape: tuple[int, int]) -> None:
    x = f32s(*shape)
    y = np.full(shape[1], np.nan, np.float32)
    _, y = both(colsum[4], [x, y], level)
    same(y, seq_colsum(x))


@dsl.kernel
def fill_scale(x: GM[f32], y: GM[f32], v: float, T: Const[int] = 48):
    for t in dsl.tiles(x.shape[0], T):
        y[t] = dsl.full((t.len,), v, f32) * x[t]


@pytest.mark.parametrize("n", [1, 47, 48, 100, 1000])
def test_full_of_a_runtime_length(n: int) -> None:
    x = f32s(n)
    _, y, _ = both(fill_scale[3], [x, np.zeros(n, np.float32), 2.5])
    same(y, x * np.float32(2.5))


@dsl.kernel
def block_rows(x: GM[f32, 2], y: GM[f32, 2], R: Const[int] = 8, C: Const[int] = 32):
    for r in dsl.tiles(x.shape[0], R):
        acc = dsl.zeros((r.len, C), f32)  # 2-D: a runtime row count, a static column count
        for j in dsl.range(0, x.shape[1], C):
            acc += x[r, j:j + C]
        y[r, :] = acc


@pytest.mark.parametrize("level", LEVELS)
def test_two_dimensional_runtime_rows(level: str) -> None:
    x = f32s(21, 96)  # 8 + 8 + 5 rows
    _, y = both(block_rows[2], [x, np.zeros((21, 32), np.float32)], level)
    want = np.zeros((21, 32), np.float32)
    for j in range(0, 96, 32):
        want = (want + x[:, j:j + 32]).astype(np.float32)
    same(y, want)


@dsl.kernel
def window_colsum(x: GM[f32, 2], y: GM[f32], R: Const[int] = 40):
    n = x.shape[1]
    for i in dsl.range(0, n, R):
        acc = dsl.zeros((dsl.min(R, n - i),), f32)  # the same length as the window, written another way
        for j in dsl.range(x.shape[0]):
            acc += x[j, i:dsl.min(i + R, n)]
        y[i:dsl.min(i + R, n)] = acc


def test_accumulator_over_min_windows() -> None:
    x = f32s(6, 130)
    _, y = both(window_colsum[1], [x, np.zeros(130, np.float32)])
    same(y, seq_colsum(x))
    # the two spellings of the length are seen to be equal: no check, no runtime broadcast
    k = core_of(window_colsum, [x, y])
    adds = [s for s in walk(k.body) if isinstance(s, VOp) and s.instr.name == "VADD"]
    assert adds and not any(any(dyn_broadcasts(b, s.dst)) for s in adds for b in s.srcs if hasattr(b, "ext"))


def core_of(k, args):  # type: ignore[no-untyped-def]
    values, infos = k.bind(args, {})
    params, _ = k.params_for(values, infos)
    return to_core(k.fdef, k.env, params, k.options, load_config("ascend910b1"))


# ------------------------------------------------------------------ every builtin on runtime tiles
# `a` is a runtime-length tile (dsl.full of c.len), `b` a window of the same runtime length;
# the lambda is the numpy meaning in f32
ELEMENTWISE = {
    "add": ("a + b", lambda a, b: a + b),
    "sub_scalar": ("a - 1.5", lambda a, b: a - np.float32(1.5)),
    "mul": ("b * a", lambda a, b: b * a),
    "div": ("a / b", lambda a, b: a / b),
    "floordiv": ("a // b", lambda a, b: np.floor(a / b)),
    "pow": ("dsl.abs(a) ** b", lambda a, b: np.abs(a) ** b),
    "maximum": ("dsl.maximum(a, b)", np.maximum),
    "minimum": ("dsl.min(b, a)", np.minimum),
    "neg": ("-a", lambda a, b: -a),
    "abs": ("dsl.abs(b)", lambda a, b: np.abs(b)),
    "relu": ("dsl.relu(b)", lambda a, b: np.maximum(b, 0)),
    "exp": ("dsl.exp(b)", lambda a, b: np.exp(b)),
    "log": ("dsl.log(dsl.abs(b) + a)", lambda a, b: np.log(np.abs(b) + a)),
    "sqrt": ("dsl.sqrt(dsl.abs(b))", lambda a, b: np.sqrt(np.abs(b))),
    "rsqrt": ("dsl.rsqrt(a)", lambda a, b: 1 / np.sqrt(a)),
    "sigmoid": ("dsl.sigmoid(b)", lambda a, b: 1 / (1 + np.exp(-b))),
    "tanh": ("dsl.tanh(b)", lambda a, b: np.tanh(b)),
    "erf": ("dsl.erf(b)", lambda a, b: np.vectorize(math.erf)(b)),
    "sin": ("dsl.sin(b)", lambda a, b: np.sin(b)),
    "cos": ("dsl.cos(b)", lambda a, b: np.cos(b)),
    "softplus": ("dsl.softplus(b)", lambda a, b: np.log1p(np.exp(b))),
    "reciprocal": ("dsl.reciprocal(a)", lambda a, b: np.float32(1) / a),
    "gelu": ("dsl.gelu(b, approximate='tanh')",
             lambda a, b: 0.5 * b * (1 + np.tanh(np.sqrt(2 / np.pi) * (b + 0.044715 * b ** 3)))),
    "where": ("dsl.where(b > a, b, a)", lambda a, b: np.where(b > a, b, a)),
    "where_scalar": ("dsl.where(a <= b, 0.0, b)", lambda a, b: np.where(a <= b, np.float32(0), b)),
    "compare": ("dsl.cast(b != a, f32)", lambda a, b: (b != a).astype(np.float32)),
    "cast_f16": ("dsl.cast(dsl.cast(b, f16), f32)", lambda a, b: b.astype(np.float16).astype(np.float32)),
    "cast_i32": ("dsl.cast(dsl.cast(b * 10.0, i32) % 7, f32)", lambda a, b: (np.rint(b * 10) % 7)),
    "sum_all": ("b - dsl.sum(a)", lambda a, b: b - a.sum()),
    "max_keep": ("b - dsl.max(b, axis=0, keepdims=True)", lambda a, b: b - b.max()),
    "min_all": ("dsl.min(b) + a", lambda a, b: b.min() + a),
}

ELEM_SRC = """
@dsl.kernel
def k(x: GM[f32, 2], w: GM[f32, 2], y: GM[f32, 2], C: Const[int] = 48):
    for c in dsl.tiles(x.shape[1], C):
        for r in dsl.range(x.shape[0]):
            a = dsl.full((c.len,), 0.75, f32) + x[r, c]
            b = w[r, c]
            y[r, c] = {expr}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):  # type: ignore[no-untyped-def]
    d: Path = tmp_path_factory.mktemp("rt")
    cache: dict[str, object] = {}

    def get(src: str):  # type: ignore[no-untyped-def]
        if src not in cache:
            cache[src] = load_source(d, src)
        return cache[src]
    return get


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_builtin_on_runtime_tiles(kernels, name: str) -> None:  # type: ignore[no-untyped-def]
    expr, ref = ELEMENTWISE[name]
    m = kernels(ELEM_SRC.format(expr=expr))
    x, w = np.abs(f32s(3, 100)) + np.float32(0.25), f32s(3, 100)  # 48 + 48 + 4 columns
    _, _, y = both(m.k[2], [x, w, np.full((3, 100), np.nan, np.float32)])
    a = (np.float32(0.75) + x).astype(np.float32)
    with np.errstate(all="ignore"):
        want = np.stack([np.concatenate([ref(a[r, c:c + 48].astype(np.float64), w[r, c:c + 48].astype(np.float64))
                                         for c in range(0, 100, 48)]) for r in range(3)])
        np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)


REDUCTIONS = {
    # (expression over the (r.len, c.len) tile a, output shape of (N, M) input, numpy meaning)
    "rows_keep": ("a - dsl.max(a, axis=1, keepdims=True)", lambda a: a - a.max(axis=1, keepdims=True)),
    "cols_keep": ("a - dsl.sum(a, axis=0, keepdims=True)", lambda a: a - a.sum(axis=0, keepdims=True)),
    "cols": ("dsl.min(a, axis=0) * a", lambda a: a.min(axis=0) * a),
    "all": ("a / dsl.max(a)", lambda a: a / a.max()),
    "all_keep": ("a - dsl.min(a, keepdims=True)", lambda a: a - a.min()),
}

RED_SRC = """
@dsl.kernel
def k(x: GM[f32, 2], y: GM[f32, 2], s: GM[f32, 2], R: Const[int] = 8, C: Const[int] = 32):
    for r in dsl.tiles(x.shape[0], R):
        for c in dsl.tiles(x.shape[1], C):
            a = dsl.zeros((r.len, c.len), f32) + x[r, c]
            y[r, c] = {expr}
            s[c.index, r] = dsl.sum(a, axis=1)
"""


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_on_runtime_tiles(kernels, name: str) -> None:  # type: ignore[no-untyped-def]
    expr, ref = REDUCTIONS[name]
    m = kernels(RED_SRC.format(expr=expr))
    x = np.abs(f32s(19, 70)) + np.float32(0.5)  # blocks of 8 x 32 with 3-row and 6-column tails
    ncb = -(-70 // 32)
    _, y, s = both(m.k[3], [x, np.full((19, 70), np.nan, np.float32), np.full((ncb, 19), np.nan, np.float32)])
    for r0 in range(0, 19, 8):
        for ci, c0 in enumerate(range(0, 70, 32)):
            blk = x[r0:r0 + 8, c0:c0 + 32]
            np.testing.assert_allclose(s[ci, r0:r0 + 8], blk.sum(axis=1), rtol=1e-5)
            np.testing.assert_allclose(y[r0:r0 + 8, c0:c0 + 32], ref(blk.astype(np.float64)), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ runtime 1s broadcast
@dsl.kernel
def sub_target(x: GM[f32, 2], tgt: GM[f32, 2], y: GM[f32, 2], R: Const[int] = 4):
    for r in dsl.tiles(x.shape[0], R):
        y[r, :] = x[r, :] - tgt[r, :]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("cols", [1000, 1])
def test_column_of_a_runtime_one_broadcasts(level: str, cols: int) -> None:
    x = f32s(10, 1000)
    t = f32s(10, cols)
    _, _, y = both(sub_target[3], [x, t, np.zeros_like(x)], level)
    same(y, x - t)


def test_runtime_one_equals_static_one() -> None:
    """`tgt[r, :]` (a runtime 1) and `tgt[r, 0:1]` (a static 1) give the same bits."""
    x, t = f32s(9, 300), f32s(9, 1)
    _, _, y = both(sub_target[2], [x, t, np.zeros_like(x)])
    _, _, y2 = both(sub_static[2], [x, t, np.zeros_like(x)])
    same(y, y2)


@dsl.kernel
def sub_static(x: GM[f32, 2], tgt: GM[f32, 2], y: GM[f32, 2], R: Const[int] = 4):
    for r in dsl.tiles(x.shape[0], R):
        y[r, :] = x[r, :] - tgt[r, 0:1]


@dsl.kernel
def outer(col: GM[f32, 2], row: GM[f32], y: GM[f32, 2], R: Const[int] = 4):
    for r in dsl.tiles(y.shape[0], R):
        y[r, :] = col[r, :] * row[:] + 1.0  # (R, 1) at run time against (C,): an (R, C) tile


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("c", [1, 33])
def test_outer_broadcast_of_runtime_column_and_row(level: str, c: int) -> None:
    col, row = f32s(11, 1), f32s(c)
    _, _, y = both(outer[2], [col, row, np.zeros((11, c), np.float32)], level)
    same(y, (col * row + np.float32(1)).astype(np.float32))


@dsl.kernel
def rows_of(x: GM[f32, 2], w: GM[f32, 2], y: GM[f32, 2], m: int, R: Const[int] = 4):
    for r in dsl.tiles(x.shape[0], R):
        y[r, :] = dsl.where(x[r, :] > w[0:m, :], x[r, :], w[0:m, :] * 2.0)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("m,wc", [(1, 50), (1, 1), (4, 50)])
def test_row_of_a_runtime_one_broadcasts(level: str, m: int, wc: int) -> None:
    """`w[0:m, :]` has m rows at run time: 1 broadcasts over the block's rows; with m equal to the
    block's rows it does not (the last block then must have as many: 12 rows in blocks of 4)."""
    x, w = f32s(12, 50), f32s(4, wc)
    _, _, y, _ = both(rows_of[3], [x, w, np.zeros_like(x), m], level)
    ww = np.broadcast_to(w[:m], (4, 50)) if m == 1 else w
    want = np.concatenate([np.where(x[i:i + 4] > ww[:4], x[i:i + 4], ww[:4] * np.float32(2))
                           for i in range(0, 12, 4)])
    same(y, want.astype(np.float32))


@dsl.kernel
def pick(x: GM[f32, 2], lo: GM[f32, 2], hi: GM[f32], y: GM[f32, 2], R: Const[int] = 4):
    for r in dsl.tiles(x.shape[0], R):
        y[r, :] = dsl.where(x[r, :] < lo[r, :], lo[r, :], dsl.minimum(x[r, :], hi[:]))


@pytest.mark.parametrize("lc,hc", [(1, 1), (1, 40), (40, 1), (40, 40)])
def test_where_with_every_combination_of_runtime_ones(lc: int, hc: int) -> None:
    x, lo, hi = f32s(9, 40), f32s(9, lc), f32s(hc)
    _, _, _, y = both(pick[2], [x, lo, hi, np.zeros_like(x)])
    same(y, np.where(x < lo, lo, np.minimum(x, hi)).astype(np.float32))


@dsl.kernel
def row_sum_1(x: GM[f32, 2], tgt: GM[f32, 2], y: GM[f32, 2], R: Const[int] = 4):
    for r in dsl.tiles(x.shape[0], R):
        e = dsl.exp(x[r, :] - tgt[r, :])
        y[r, :] = e / dsl.sum(e, axis=1, keepdims=True)


@pytest.mark.parametrize("tc", [1, 30])
def test_row_wise_ops_with_runtime_ones(tc: int) -> None:
    x, t = f32s(7, 30), f32s(7, tc)
    _, _, y = both(row_sum_1[2], [x, t, np.zeros_like(x)])
    e = np.exp((x - t).astype(np.float64))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=2e-6)


# ------------------------------------------------------------------ the fast path stays fast
def test_static_and_equal_extents_take_no_runtime_broadcast() -> None:
    """Kernels whose shapes are static, or whose extents are evidently equal, have no operand that
    broadcasts at run time: the plain loop, no per-instruction select."""
    for kern, args in ((colsum, [f32s(3, 100), np.zeros(100, np.float32)]),
                       (sub_static, [f32s(3, 10), f32s(3, 1), np.zeros((3, 10), np.float32)])):
        k = core_of(kern, args)
        assert not [s for s in walk(k.body) if isinstance(s, VOp)
                    and any(any(dyn_broadcasts(b, s.dst)) for b in s.srcs if hasattr(b, "ext"))]


def test_same_extent() -> None:
    from compiler import sexpr as S

    i, n = S.var("i"), S.arg(3)
    assert same_extent(S.sub(S.smin(S.add(i, 8), n), i), S.smin(8, S.sub(n, i)))
    assert same_extent(S.smin(64, S.sub(n, S.mul(i, 64))), S.smin(S.sub(n, S.mul(i, 64)), 64))
    assert not same_extent(S.smin(8, S.sub(n, i)), S.smin(9, S.sub(n, i)))
    assert not same_extent(S.smin(8, n), S.const(8))
    assert not same_extent(S.smin(8, n), S.smax(8, n))


# ------------------------------------------------------------------ errors
def test_broadcast_mismatch_is_a_runtime_error() -> None:
    x, t = f32s(10, 1000), f32s(10, 7)
    for interp in (False, True):
        with interpreting() if interp else contextlib.nullcontext():
            expect(lambda: sub_target[2](x, t, np.zeros_like(x)), "E205",
                   "shape mismatch in '-': 1000 vs 7 (shapes (4, 1000) and (4, 7))",
                   caret_under="x[r, :] - tgt[r, :]", hint="broadcasts only where its length is 1")


def test_mismatched_runtime_lengths_name_both(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32, 2], y: GM[f32], C: Const[int] = 64):
            for c in dsl.tiles(x.shape[1], C):
                acc = dsl.zeros((C,), f32)
                for r in dsl.range(x.shape[0]):
                    acc += x[r, c]
                y[c] = acc
    """)
    x = f32s(3, 1000)
    expect(lambda: m.k[4](x, np.zeros(1000, np.float32)), "E205",
           "shape mismatch in '+': 64 vs 40 (shapes (64,) and (40,))", caret_under="acc += x[r, c]",
           hint="other lengths must be equal")


def test_unbounded_runtime_shape(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for i in dsl.range(x.shape[0]):
                t = dsl.zeros((x.shape[0] - i,), f32)
                y[i:x.shape[0]] = t
    """)
    expect(lambda: m.k(f32s(10), f32s(10)), "E207",
           "the tile shape must be a compile-time integer, or a runtime length with a static bound",
           caret_under="dsl.zeros", hint="dsl.min(R, n - i)")


def test_runtime_length_below_zero(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            t = dsl.full((dsl.min(8, x.shape[0] - 100),), 1.0, f32)
            y[0:8] = t
    """)
    for interp in (False, True):
        with interpreting() if interp else contextlib.nullcontext():
            expect(lambda: m.k[1](f32s(10), f32s(10)), "E205",
                   "this tile's length is -90 at run time, outside its static bound 0..8", caret_under="dsl.full",
                   hint="dsl.min(BOUND, ...)")


def test_runtime_store_length_mismatch(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], T: Const[int] = 16):
            for t in dsl.tiles(x.shape[0], T):
                a = dsl.full((t.len,), 2.0, f32)
                y[0:16] = a * x[t]
    """)
    y = np.zeros(40, np.float32)
    expect(lambda: m.k[1](f32s(40), y), "E205", "shape mismatch in store columns: 8 vs 16")
    assert not y[16:].any()  # nothing written past the window that fits


def test_runtime_shape_not_in_cube_memories(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32, 2], y: GM[f32, 2]):
            for r in dsl.tiles(x.shape[0], 16):
                acc = dsl.zeros((r.len, 16), f32, mem=dsl.L0C)
                y[r, 0:16] = acc
    """)
    expect(lambda: m.k(f32s(20, 16), f32s(20, 16)), "E207", "the tile shape in L0C must be a compile-time integer",
           caret_under="dsl.zeros", hint="constant shapes")


INT_SRC = """
@dsl.kernel
def k(x: GM, w: GM, y: GM, T: Const[int] = 40):
    for t in dsl.tiles(x.shape[0], T):
        a = dsl.full((t.len,), 3, x.dtype)
        y[t] = (a * x[t] + w[t]) // a
"""


@pytest.mark.parametrize("dt", ["i32", "f16"])
def test_integer_and_half_runtime_tiles(kernels, dt: str) -> None:  # type: ignore[no-untyped-def]
    """Runtime tiles keep their dtype's rules: i32 wraps, f16 rounds per instruction (bit-exact
    against the interpreter), on a 100-element tensor in tiles of 40."""
    m = kernels(INT_SRC)
    npdt = np.dtype(dt.replace("i", "int").replace("f", "float"))
    x = (rng.standard_normal(100) * 1000).astype(npdt)
    w = (rng.standard_normal(100) * 1000).astype(npdt)
    _, _, y = both(m.k[2], [x, w, np.zeros(100, npdt)])
    if dt == "i32":
        same(y, (3 * x + w) // 3)
