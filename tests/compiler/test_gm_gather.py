"""GM gathers and scatter-adds addressed by a UB index tile: `x[idx, :]` (rows), `x[t, idx]` /
`w[idx]` (one element per index), `y[a, idx, c]` with an index per element, and
`dsl.atomic_add(y[idx, :], tile)`. Every kernel runs natively and in the reference interpreter:
bit-identical results and the same trace records (one MTE2 / MTE3 instruction of a burst per row
or element, no scalar reads on S); a bad index fails before any byte moves, with its value, its
position and the bound, pointing at the subscript."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dsl
from compiler.config import CONFIG
from compiler.host import runnable_levels
from compiler.ir import GMGather, GMScatter, dump, walk
from dsl import GM, Const
from simulator.isa import Instr
from tests.compiler.test_errors import expect
from tests.compiler.test_gather import core_ir
from tests.compiler.test_interpret import both, interpreting, same, same_runs

rng = np.random.default_rng(404)
BF16 = np.dtype(ml_dtypes.bfloat16)
NP = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16, "i32": np.dtype(np.int32),
      "i8": np.dtype(np.int8)}


def values(shape: tuple[int, ...], dt: str) -> np.ndarray:
    if dt in ("i32", "i8"):
        return rng.integers(-100, 100, shape).astype(NP[dt])
    return (rng.standard_normal(shape) * 10).astype(NP[dt])


@dsl.kernel
def take_rows(idx: GM, w: GM, y: GM, R: Const[int] = 8):
    for t in dsl.tiles(idx.shape[0], R):
        y[t, :] = w[idx[t], :]


@dsl.kernel
def take_rows_col(idx: GM, w: GM, y: GM, R: Const[int] = 8, BD: Const[int] = 16):
    for t in dsl.tiles(idx.shape[0], R):
        ix = idx[t, 0:1]                           # an (R, 1) index tile
        for c in dsl.range(0, w.shape[1], BD):     # column windows
            y[t, c] = w[ix, c]


@dsl.kernel
def pick(x: GM, tgt: GM, y: GM, R: Const[int] = 8):
    for t in dsl.tiles(x.shape[0], R):
        y[t] = x[t, tgt[t]]                        # 1-D index: element tgt[r] of row t.start + r


@dsl.kernel
def pick_cols(x: GM, tgt: GM, y: GM, R: Const[int] = 4):
    for t in dsl.tiles(x.shape[0], R):
        y[t, :] = x[t, tgt[t, :]]                  # (R, K): torch.gather(x, 1, tgt) from GM


@dsl.kernel
def lookup(w: GM, idx: GM, y: GM, T: Const[int] = 16):
    for t in dsl.tiles(idx.shape[0], T):
        y[t] = w[idx[t]] * 2.0                     # a 1-D table


@dsl.kernel
def take_mid(x: GM, idx: GM, y: GM, BJ: Const[int] = 4, BC: Const[int] = 8):
    for a, jt in dsl.tiles2d((idx.shape[0], idx.shape[1]), (1, BJ)):
        for c in dsl.range(0, idx.shape[2], BC):
            y[a.start, jt, c] = x[a.start, idx[a.start, jt, c], c]   # an index per element


@dsl.kernel
def scatter_rows(idx: GM, g: GM, y: GM, R: Const[int] = 8):
    for t in dsl.tiles(idx.shape[0], R):
        dsl.atomic_add(y[idx[t], :], g[t, :])


@dsl.kernel
def scatter_mid(idx: GM, src: GM, y: GM, BJ: Const[int] = 4, BC: Const[int] = 8):
    for a, jt in dsl.tiles2d((idx.shape[0], idx.shape[1]), (1, BJ)):
        for c in dsl.range(0, idx.shape[2], BC):
            dsl.atomic_add(y[a.start, idx[a.start, jt, c], c], src[a.start, jt, c])


@dsl.kernel
def scalar_rows(idx: GM, w: GM, y: GM, R: Const[int] = 8):
    for t in dsl.tiles(idx.shape[0], R):
        for r in dsl.range(t.len):
            y[t.start + r, :] = w[idx[t.start + r], :]


# ------------------------------------------------------------------ values, native vs interpreter
@pytest.mark.parametrize("wdt", ["f32", "f16", "bf16", "i32", "i8"])
@pytest.mark.parametrize("idt", ["i32", "i8"])
def test_rows(wdt: str, idt: str) -> None:
    V, D, n = 37, 45, 29
    w = values((V, D), wdt)
    idx = rng.integers(0, V, n).astype(NP[idt])
    for cores in (1, 3):
        na, ia, nr, ir = both(take_rows[cores], [idx, w, np.zeros((n, D), NP[wdt])], profile=True)
        same(na[2], ia[2])
        same(na[2], w[idx.astype(np.int64)])
        same_runs(nr, ir)
    na, ia, nr, ir = both(take_rows_col[2], [idx.reshape(n, 1), w, np.zeros((n, D), NP[wdt])], profile=True)
    same(na[2], ia[2])
    same(na[2], w[idx.astype(np.int64)])
    same_runs(nr, ir)


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "i32"])
def test_one_element_per_row(dt: str) -> None:
    M, C = 37, 70
    x = values((M, C), dt)
    tgt = rng.integers(0, C, M).astype(np.int32)
    na, ia, nr, ir = both(pick[3], [x, tgt, np.zeros(M, NP[dt])], profile=True)
    same(na[2], ia[2])
    same(na[2], x[np.arange(M), tgt])
    same_runs(nr, ir)
    t2 = rng.integers(0, C, (M, 5)).astype(np.int32)
    na, ia, nr, ir = both(pick_cols[2], [x, t2, np.zeros((M, 5), NP[dt])], profile=True)
    same(na[2], ia[2])
    same(na[2], np.take_along_axis(x, t2.astype(np.int64), 1))
    same_runs(nr, ir)


def test_table_and_index_per_element() -> None:
    w = values((50,), "f32")
    idx = rng.integers(0, 50, 41).astype(np.int32)
    na, ia, nr, ir = both(lookup[2], [w, idx, np.zeros(41, np.float32)], profile=True)
    same(na[2], ia[2])
    same(na[2], w[idx] * np.float32(2))
    same_runs(nr, ir)
    A, D, n, B = 3, 9, 7, 13
    x = values((A, D, B), "bf16")
    ix = rng.integers(0, D, (A, n, B)).astype(np.int32)
    na, ia, nr, ir = both(take_mid[4], [x, ix, np.zeros((A, n, B), BF16)], profile=True)
    same(na[2], ia[2])
    same(na[2], np.take_along_axis(x, ix.astype(np.int64), 1))
    same_runs(nr, ir)


@pytest.mark.parametrize("dt", ["f32", "i32", "f16", "bf16"])
def test_scatter_add_repeats(dt: str) -> None:
    V, D, n = 11, 19, 40
    idx = rng.integers(0, V, n).astype(np.int32)   # many repeats
    g = values((n, D), dt)
    y0 = values((V, D), dt)
    for cores in (1, 3):
        na, ia, nr, ir = both(scatter_rows[cores], [idx, g, y0], profile=True)
        same(na[2], ia[2])
        same_runs(nr, ir)
    ref = y0.astype(np.float64) if dt != "i32" else y0.astype(np.int64)
    np.add.at(ref, idx, g.astype(ref.dtype))
    if dt == "i32":
        np.testing.assert_array_equal(na[2], ref.astype(np.int32))
    else:
        tol = 1e-4 if dt == "f32" else 0.1
        np.testing.assert_allclose(na[2].astype(np.float64), ref, rtol=tol, atol=tol * 20)
    A, Dm, m, B = 2, 5, 9, 11
    ix = rng.integers(0, Dm, (A, m, B)).astype(np.int32)
    src = values((A, m, B), dt)
    na, ia, nr, ir = both(scatter_mid[3], [ix, src, np.zeros((A, Dm, B), NP[dt])], profile=True)
    same(na[2], ia[2])
    same_runs(nr, ir)


def test_scatter_add_exact_in_row_major_order() -> None:
    """f16 sums rounded per add, in the order of the index tile: native equals a sequential loop."""
    idx = np.zeros(16, np.int32)
    g = np.full((16, 3), 0.1, np.float16)
    y = np.full((1, 3), 2048, np.float16)
    na, ia, _, _ = both(scatter_rows[1], [idx, g, y])
    acc = np.float16(2048)
    for _ in range(16):
        acc = np.float16(np.float32(acc) + np.float32(np.float16(0.1)))
    same(na[2], ia[2])
    same(na[2], np.full((1, 3), acc, np.float16))


# ------------------------------------------------------------------ bounds errors
def test_bad_row_index_reports_value_position_and_bound() -> None:
    w = values((37, 8), "f32")
    idx = rng.integers(0, 37, 20).astype(np.int32)
    idx[13] = 40
    for interp in (False, True):
        with interpreting() if interp else _nothing():
            expect(lambda: take_rows[1](idx, w, np.zeros((20, 8), np.float32)), "E404",
                   "index 40 at position 5 of the index tile is outside dimension 0 of 'w' (size 37)",
                   caret_under="w[idx[t], :]", hint="clamp them first")
    idx[13] = -1
    expect(lambda: take_rows[1](idx, w, np.zeros((20, 8), np.float32)), "E404",
           "index -1 at position 5 of the index tile")


def test_bad_element_index() -> None:
    x = values((10, 6), "f32")
    tgt = np.full(10, 2, np.int32)
    tgt[7] = 6
    for interp in (False, True):
        with interpreting() if interp else _nothing():
            expect(lambda: pick[1](x, tgt, np.zeros(10, np.float32)), "E404",
                   "index 6 at position 7 of the index tile is outside dimension 1 of 'x' (size 6)",
                   caret_under="x[t, tgt[t]]")
    t2 = np.zeros((10, 3), np.int32)
    t2[4, 2] = 9
    expect(lambda: pick_cols[1](x, t2, np.zeros((10, 3), np.float32)), "E404",
           "index 9 at [0, 2] of the index tile is outside dimension 1 of 'x' (size 6)")


def test_bad_scatter_index_adds_nothing() -> None:
    """The whole index tile is checked before the first add: y is untouched."""
    idx = np.array([0, 1, 2, 3, 4, 5, 6, 99], np.int32)
    y = np.ones((7, 4), np.float32)
    for interp in (False, True):
        with interpreting() if interp else _nothing():
            expect(lambda: scatter_rows[1](idx, np.ones((8, 4), np.float32), y), "E404",
                   "index 99 at position 7 of the index tile is outside dimension 0 of 'y' (size 7)",
                   caret_under="y[idx[t], :]")
            np.testing.assert_array_equal(y, np.ones((7, 4), np.float32))


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


# ------------------------------------------------------------------ lowering errors
def test_lowering_errors(source) -> None:  # type: ignore[no-untyped-def]
    k = source("""
        @dsl.kernel
        def k(idx: GM[f32], w: GM[f32], y: GM[f32]):
            for t in dsl.tiles(idx.shape[0], 8):
                y[t, :] = w[idx[t], :]
    """).k
    expect(lambda: k(np.zeros(8, np.float32), np.zeros((4, 4), np.float32), np.zeros((8, 4), np.float32)),
           "E204", "an index tile must be i32 or i8, got f32", caret_under="idx[t]")
    k2 = source("""
        @dsl.kernel
        def k2(idx: GM[i32], g: GM[f32], y: GM[f32]):
            for t in dsl.tiles(idx.shape[0], 8):
                y[idx[t], :] = g[t, :]
    """).k2
    expect(lambda: k2(np.zeros(8, np.int32), np.zeros((8, 4), np.float32), np.zeros((4, 4), np.float32)),
           "E210", "a store through an index tile into 'y' is an atomic add", hint="dsl.atomic_add")
    k3 = source("""
        @dsl.kernel
        def k3(idx: GM[i32], w: GM[f32], y: GM[f32]):
            for t in dsl.tiles(idx.shape[0], 8):
                y[t, :] = w[idx[t], 2]
    """).k3
    expect(lambda: k3(np.zeros(8, np.int32), np.zeros((4, 4), np.float32), np.zeros((8, 4), np.float32)),
           "E205", "the last dimension must be a window")


# ------------------------------------------------------------------ timing: MTE2 bursts, no S reads
def test_timing_is_mte2_bursts_not_scalar_reads() -> None:
    V, D, n = 64, 64, 32
    w, idx = values((V, D), "f32"), rng.integers(0, V, n).astype(np.int32)
    run = take_rows[1].profile(idx, w, np.zeros((n, D), np.float32))
    old = scalar_rows[1].profile(idx, w, np.zeros((n, D), np.float32))
    counts = run.profile.instr_counts
    assert "LOAD_GM_S" not in counts and old.profile.instr_counts["LOAD_GM_S"] == n
    ev = run.profile.per_core[0].events
    gathers = ev[(ev["instr"] == Instr.COPY_GM_UB) & (ev["a"] == D * 4)]
    assert list(gathers["b"]) == [8, 8, 8, 8]   # one instruction per tile, a burst per row
    assert run.profile.busy["S"] < old.profile.busy["S"]
    assert run.profile.work["MTE2"] > 0
    assert run.cycles < old.cycles
    x, tgt = values((n, D), "f32"), rng.integers(0, D, n).astype(np.int32)
    ev = pick[1].profile(x, tgt, np.zeros(n, np.float32)).profile.per_core[0].events
    per_elem = ev[(ev["instr"] == Instr.COPY_GM_UB) & (ev["a"] == 4) & (ev["b"] == 8)]
    assert len(per_elem) == 4   # a 4-byte burst per row's element
    ev = scatter_rows[1].profile(idx, np.ones((n, D), np.float32), np.zeros((V, D), np.float32)).profile
    adds = ev.per_core[0].events
    adds = adds[adds["instr"] == Instr.COPY_UB_GM_ATOMIC]
    assert list(adds["b"]) == [8, 8, 8, 8] and set(adds["a"]) == {D * 4}


def test_core_ir_names_the_index_tile() -> None:
    idx, w = np.zeros(8, np.int32), np.zeros((4, 4), np.float32)
    k = core_ir(take_rows, idx, w, np.zeros((8, 4), np.float32))
    assert any(isinstance(s, GMGather) for s in walk(k.body))
    assert " by %" in dump(k, core=True) and "COPY_GM_UB" in dump(k, core=True)
    k = core_ir(scatter_rows, idx, w, w)
    assert any(isinstance(s, GMScatter) and s.instr == Instr.COPY_UB_GM_ATOMIC for s in walk(k.body))


# ------------------------------------------------------------------ every host ISA level
@pytest.fixture(params=runnable_levels())
def level(request, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(CONFIG, "host_isa", request.param)
    return request.param


def test_every_host_level(level: str) -> None:
    w, idx = values((50, 70), "bf16"), rng.integers(0, 50, 33).astype(np.int32)
    y = np.zeros((33, 70), BF16)
    take_rows[3](idx, w, y)
    same(y, w[idx])
    x, tgt = values((33, 70), "f16"), rng.integers(0, 70, 33).astype(np.int32)
    out = np.zeros(33, np.float16)
    pick[2](x, tgt, out)
    same(out, x[np.arange(33), tgt])
    acc = np.zeros((50, 70), np.float32)
    scatter_rows[3](idx, np.ones((33, 70), np.float32), acc)
    ref = np.zeros((50, 70), np.float32)
    np.add.at(ref, idx, np.float32(1))
    same(acc, ref)


def test_readme_example(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The index-tile kernel of the README's "Gathers and scalars from GM" paragraph, as written there."""
    from pathlib import Path

    from tests.conftest import load_source

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    part = text[text.index("**Gathers and scalars from GM.**"):]
    code = part[part.index("```python") + len("```python"):part.index("```\n", part.index("```python") + 9)]
    m = load_source(tmp_path, code)
    x, tgt = values((300, 70), "f32"), rng.integers(0, 70, 300).astype(np.int32)
    loss = np.zeros(300, np.float32)
    m.nll_rows(x, tgt, loss)
    same(loss, -x[np.arange(300), tgt])
