"""UB economy: results computed in place, temporaries sharing UB by lifetime, cube epilogues streamed
out of L0C in row chunks, and E301 texts that name what would help.

The UB figures are the placement's own (the end of the last UB buffer, every slot counted), exact,
so a regression in the allocator fails here. Every new schedule runs natively and in the reference
interpreter: same bits, same event records, same cycles.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from layer_norm import layer_norm
from softmax import softmax
from swish import swish_backward

import dsl
from compiler.frontend.lower import lower
from compiler.ir import For, Move, walk
from compiler.passes import verify as V
from compiler.passes.budget import argv_for, usage
from compiler.pipeline import stages, to_core
from dsl import GM, Const, f16, f32
from dsl.errors import KernelError
from dsl.types import Mem
from simulator.config import load_config
from tests.compiler.test_errors import expect
from tests.compiler.test_interpret import both, same, same_runs

rng = np.random.default_rng(11)
linear_kernel = importlib.import_module("op_library.matmul").linear_kernel


@dsl.kernel
def log_softmax(x: GM[f32], y: GM[f32], R: Const[int] = 8):
    for r in dsl.tiles(x.shape[0], R):
        xt = x[r, :]
        m = dsl.max(xt, axis=1, keepdims=True)
        s = dsl.sum(dsl.exp(xt - m), axis=1, keepdims=True)
        y[r, :] = xt - m - dsl.log(s)


@dsl.kernel
def lin_relu(a: GM, b: GM, bias: GM, c: GM, BM: Const[int] = 128, BN: Const[int] = 128, BK: Const[int] = 64):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[k, n]
        c[m, n] = dsl.relu(acc + bias[n])


@dsl.kernel
def epilogue_mix(a: GM, b: GM, r: GM, c: GM, s: GM, BM: Const[int] = 128, BN: Const[int] = 256,
                 BK: Const[int] = 32):
    """An epilogue with a residual window, a row reduction, a broadcast column and a cast out."""
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[k, n]
        h = acc + r[m, n]
        mx = dsl.max(h, axis=1, keepdims=True)
        c[m, n] = dsl.cast(h - mx, f16)
        s[m, n] = dsl.exp(h - mx) * 0.5


@dsl.kernel
def still_live(x: GM[f32], y: GM[f32], TILE: Const[int] = 1024):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        u = xt * 2.0           # xt is read again below: u needs its own buffer
        y[t] = u + xt


def _core(k, args: list, consts: dict | None = None, options: dict | None = None, config: str | None = None):  # type: ignore[no-untyped-def]
    values, infos = k.bind(args, consts or {})
    params, _ = k.params_for(values, infos)
    cfg = load_config(config) if config else load_config()
    ir = lower(k.fdef, k.env, params, {**k.options, **(options or {})})
    V.verify(ir, "tile", cfg)
    for name, fn in stages():
        ir = fn(ir, cfg)
        V.verify(ir, name, cfg)  # every stage's promises hold for the new schedules too
    return ir


def _ub(k, args: list, consts: dict | None = None, options: dict | None = None) -> int:  # type: ignore[no-untyped-def]
    ir = _core(k, args, consts, options)
    shapes = {p.name: a.shape for p, a in zip(k.decls, args) if isinstance(a, np.ndarray)}
    return usage(ir, argv_for(ir, shapes))[Mem.UB]


def _mm_args(M: int, K: int, N: int) -> list:
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    return [a, b, rng.standard_normal(N).astype(np.float32), np.zeros((M, N), np.float32)]


# ------------------------------------------------------------------ UB figures
F = np.float32
UB_FIGURES = [
    # (what, kernel, args, consts, bytes now); before this work: 160512, 80128, 123008, 65536, 132096, E301, E301
    ("log_softmax 8x1000", log_softmax, [np.zeros((8, 1000), F), np.zeros((8, 1000), F)], {}, 128512),
    ("softmax 64x1000", softmax, [np.zeros((64, 1000), F), np.zeros((64, 1000), F)], {}, 48128),
    ("layer_norm 64x1024", layer_norm, [np.zeros((64, 1024), F), np.zeros(1024, F), np.zeros(1024, F),
                                        np.zeros((64, 1024), F)], {}, 106624),
    ("swish_backward 1M", swish_backward, [np.zeros(1 << 20, F)] * 3, {}, 49152),
    ("linear + bias 64x128", linear_kernel, _mm_args(256, 256, 256), {}, 99328),
    ("relu(acc + bias) 128x128", lin_relu, _mm_args(256, 256, 256), {}, 132096),
    ("relu(acc + bias) 128x256, 64-row chunks", lin_relu, _mm_args(256, 256, 256), {"BN": 256, "BK": 32}, 133120),
]


@pytest.mark.parametrize("i", range(len(UB_FIGURES)), ids=[c[0] for c in UB_FIGURES])
def test_ub_figures(i: int) -> None:
    _, k, args, consts, want = UB_FIGURES[i]
    assert _ub(k, args, consts) == want


def test_log_softmax_shares_the_loaded_tile() -> None:
    """y = xt - m - log(s) is computed in xt's own buffers and stored from there: xt in three slots
    (MTE2 loads one while V computes on the next and MTE3 stores the third), one temporary, m, s."""
    x = np.zeros((8, 1000), F)
    ir = _core(log_softmax, [x, x.copy()])
    p = {b.name: ir.placement[b.id] for b in ir.bufs if b.id in ir.placement}
    assert p["xt.1"].slots == 3 and p["xt.1"].share is None
    stored = [s for s in walk(ir.body) if type(s).__name__ == "Store"][0]
    q = ir.placement[stored.src.id]
    assert (q.offset, q.slots, q.share) == (p["xt.1"].offset, 3, [b for b in ir.bufs if b.name == "xt.1"][0].id)
    # buffers=2 keeps two slots: 1900 columns fit (3 x 8 x 1904 x 4 bytes), 2000 do not
    assert _ub(log_softmax, [np.zeros((8, 1900), F)] * 2, options={"buffers": 2}) == 3 * 8 * 1904 * 4 + 512
    assert _ub(log_softmax, [np.zeros((8, 1000), F)] * 2, options={"buffers": 2}) == 96512


def test_no_in_place_while_the_operand_lives() -> None:
    x = np.zeros(4096, F)
    ir = _core(still_live, [x, x.copy()])
    by = {b.name: ir.placement[b.id] for b in ir.bufs if b.id in ir.placement}
    assert by["u.2"].share is None and by["u.2"].offset != by["xt.1"].offset
    end = {n: p.offset.value + p.slot_bytes.value * p.slots for n, p in by.items()}
    assert max(end.values()) == 4 * 4096  # xt x2 and u x2 (the stored sum is computed in u's place)


def test_buffers_one_single_buffers_everything() -> None:
    x = np.zeros((8, 1000), F)
    assert _ub(log_softmax, [x, x.copy()], options={"buffers": 1}) == 2 * 32000 + 512


# ------------------------------------------------------------------ native == interpreter
def test_log_softmax_bit_exact() -> None:
    x = (rng.standard_normal((37, 1000)) * 4).astype(F)
    na, ia, nr, ir = both(log_softmax[3], [x, np.zeros_like(x)], profile=True)
    same(na[1], ia[1])
    same_runs(nr, ir)
    ref = x - x.max(1, keepdims=True)
    ref = ref - np.log(np.exp(ref).sum(1, keepdims=True))
    np.testing.assert_allclose(na[1], ref, rtol=0, atol=2e-5)


@pytest.mark.parametrize("M,K,N,BN", [(256, 96, 256, 128), (200, 100, 300, 256), (17, 40, 256, 256),
                                      (128, 64, 512, 256)])
def test_cube_epilogue_bit_exact(M: int, K: int, N: int, BN: int) -> None:
    args = _mm_args(M, K, N)
    na, ia, nr, ir = both(lin_relu[3], args, profile=True, BN=BN, BK=32)
    same(na[3], ia[3])
    same_runs(nr, ir)
    a, b, bias = (x.astype(np.float64) for x in args[:3])
    np.testing.assert_allclose(na[3], np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 300), st.integers(1, 90), st.integers(1, 600), st.integers(1, 4))
def test_chunked_epilogue_any_shape(M: int, K: int, N: int, cores: int) -> None:
    """Row chunks over every tail: short last chunk, short last block, fewer rows than one chunk."""
    args = _mm_args(M, K, N)
    na, ia, nr, ir = both(lin_relu[cores], args, profile=True, BN=256, BK=32)
    same(na[3], ia[3])
    same_runs(nr, ir)


@dsl.kernel
def chain(x: GM[f32], z: GM[f32], y: GM[f32], TILE: Const[int] = 1024):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        a = xt * 2.0 + 1.0          # in xt's buffers (two slots: MTE2 and V)
        b = dsl.exp(a - z[t])       # a lives on, z's tile dies: b in z's buffers
        y[t] = b * a                # in b's, stored from there (three slots: MTE2, V, MTE3)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 5000), st.integers(1, 3))
def test_in_place_chain_any_length(n: int, cores: int) -> None:
    x = rng.standard_normal(n).astype(F)
    z = rng.standard_normal(n).astype(F)
    ir0 = _core(chain, [x, z, np.zeros(n, F)])
    slots = {b.name: (ir0.placement[b.id].offset, ir0.placement[b.id].slots) for b in ir0.bufs}
    assert slots["a.3"] == slots["xt.1"] and slots["xt.1"][1] == 2
    assert slots["b.6"] == slots["t4"] and slots["t4"][1] == 3 and slots["t4"] != slots["xt.1"]
    na, ia, nr, ir = both(chain[cores], [x, z, np.zeros(n, F)], profile=True)
    same(na[2], ia[2])
    same_runs(nr, ir)
    a = x * np.float32(2) + np.float32(1)
    np.testing.assert_allclose(na[2], np.exp(a - z) * a, rtol=2e-6, atol=1e-30)


def test_chunked_epilogue_structure() -> None:
    """128x256 f32 (128 KiB) cannot be double-buffered in UB whole: FIX moves 64-row chunks in a loop,
    each chunk's tile double-buffered by that loop; with buffers=1 the whole accumulator fits once."""
    args = _mm_args(256, 64, 512)
    ir = _core(lin_relu, args, {"BN": 256, "BK": 32})
    loops = [s for s in walk(ir.body) if isinstance(s, For) and s.var.startswith("l0c.row")]
    assert len(loops) == 1 and loops[0].step.value == 64
    mv = [s for s in walk(loops[0].body) if isinstance(s, Move)][0]
    assert mv.row0 is not None and ir.placement[mv.dst.id].slots == 2
    assert mv.dst.cap[0].value == 64
    single = _core(lin_relu, args, {"BN": 256, "BK": 32}, options={"buffers": 1})
    assert not [s for s in walk(single.body) if isinstance(s, For) and s.var.startswith("l0c.row")]
    whole = _core(lin_relu, args, {"BN": 128})
    assert not [s for s in walk(whole.body) if isinstance(s, For) and s.var.startswith("l0c.row")]


def test_chunked_mixed_epilogue_bit_exact() -> None:
    M, K, N = 150, 70, 300
    a = rng.standard_normal((M, K)).astype(F)
    b = rng.standard_normal((K, N)).astype(F)
    r = rng.standard_normal((M, N)).astype(F)
    args = [a, b, r, np.zeros((M, N), np.float16), np.zeros((M, N), F)]
    ir = _core(epilogue_mix, args)
    assert [s for s in walk(ir.body) if isinstance(s, For) and s.var.startswith("l0c.row")]
    na, ia, nr, irun = both(epilogue_mix[2], args, profile=True)
    same(na[3], ia[3])
    same(na[4], ia[4])
    same_runs(nr, irun)
    h = a.astype(np.float64) @ b + r
    for j in range(0, N, 256):  # the row max is over each output block's columns
        blk = h[:, j:j + 256]
        np.testing.assert_allclose(na[4][:, j:j + 256], np.exp(blk - blk.max(1, keepdims=True)) * 0.5, rtol=1e-3,
                                   atol=1e-5)


def test_any_accumulator_that_fits_l0c_on_310p() -> None:
    """ascend310p: L0C 256 KiB, UB 256 KiB: a 256x256 f32 accumulator (all of L0C) takes a vector
    epilogue through 64-row chunks."""
    args = _mm_args(256, 48, 256)
    ir = _core(lin_relu, args, {"BM": 256, "BN": 256, "BK": 16}, config="ascend310p")
    loops = [s for s in walk(ir.body) if isinstance(s, For) and s.var.startswith("l0c.row")]
    assert len(loops) == 1
    na, ia, nr, irun = both(lin_relu[1].on("ascend310p"), args, profile=True, BM=256, BN=256, BK=16)
    same(na[3], ia[3])
    same_runs(nr, irun)


# ------------------------------------------------------------------ error texts
def test_hint_names_the_const_that_fits(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], TILE: Const[int] = 1048576):
            for t in dsl.tiles(x.shape[0], TILE):
                y[t] = x[t] * 2.0
    """)
    x = np.zeros(1 << 21, F)
    text = expect(lambda: m.k(x, x.copy()), "E301", "tile of 1048576 f32 needs 12 MiB (12582912 bytes) "
                  "(3 buffers of 4 MiB) but UB has 184 KiB (188416 bytes) free", "x[t] * 2.0",
                  hint="lower the tile size: TILE (TILE=32768 fits)")
    assert "buffers=1" not in text  # one buffer of 4 MiB does not fit either


def test_hint_suggests_buffers_one_only_when_it_helps(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], z: GM[f32], TILE: Const[int] = 16384):
            for t in dsl.tiles(x.shape[0], TILE):
                z[t] = x[t] * y[t] + 1.0
    """)
    x = np.zeros(1 << 16, F)
    expect(lambda: m.k(x, x.copy(), x.copy()), "E301", "tile of 16384 f32 needs 128 KiB", "x[t] * y[t]",
           hint="lower the tile size: TILE (TILE=8192 fits); or use buffers=1 (@dsl.kernel(buffers=1) single-buffers the other "
                "tiles, which frees 64 KiB)")
    m.k.with_options(buffers=1)(x, x.copy(), x.copy())  # and it does


def test_hint_for_an_accumulator_too_big_for_l0c() -> None:
    args = _mm_args(256, 64, 256)
    with pytest.raises(KernelError) as ei:
        lin_relu[2](*args, BM=256, BN=256)
    text = str(ei.value)
    assert "error[E301]: tile of 256x256 f32 for 'acc' needs 512 KiB" in text and "L0C has 128 KiB" in text
    assert "hint: lower the tile size: BM or BN (BM=128 or BN=128 fits); the accumulator itself must fit L0C (256 KiB here)" in text


def test_hint_skips_consts_that_cannot_help() -> None:
    args = _mm_args(256, 64, 256)
    with pytest.raises(KernelError) as ei:
        lin_relu[2](*args, BK=1024)
    assert "hint: lower the tile size: BK (BK=128 fits)" in str(ei.value)


def test_runtime_e301_names_rows_that_fit(source):  # type: ignore[no-untyped-def]
    x = np.zeros((4, 12000), F)
    with pytest.raises(KernelError) as ei:
        softmax[1](x, np.zeros_like(x))
    text = str(ei.value)
    assert ("error[E301]: tile of [4, x.shape[1]] f32 for 'xt' needs 576000 bytes (3 buffers of 192000) but UB "
            "has 188288 bytes free; at most 1 rows fit in 3 buffers, 1 in 2, 3 in 1 (core 0)") in text
    assert ("hint: lower the tile size: ROWS (the tile's rows) to the rows that fit, or tile the columns too if "
            "none does") in text
    assert "buffers=" not in text  # one buffer of 192000 bytes does not fit either
    x = np.zeros((4, 6000), F)  # 96000 per buffer: one fits, two do not
    with pytest.raises(KernelError) as ei:
        softmax[1](x, np.zeros_like(x))
    assert "at most 2 rows fit in 3 buffers, 3 in 2, 7 in 1" in str(ei.value)
    assert "; or use buffers=1 (one buffer of this tile fits)" in str(ei.value)
    softmax.with_options(buffers=1)[1](x, np.zeros_like(x))
    x = np.zeros((4, 4000), F)  # 64000 per buffer: two fit, three do not
    with pytest.raises(KernelError) as ei:
        softmax[1](x, np.zeros_like(x))
    assert "; or use buffers=2 (2 buffers of this tile fit)" in str(ei.value)
    softmax.with_options(buffers=2)[1](x, np.zeros_like(x))


def test_bad_buffers_option() -> None:
    x = np.zeros(1024, F)
    with pytest.raises(KernelError) as ei:
        swish_backward.with_options(buffers=3)(x, x.copy(), x.copy())
    assert "error[E207]: buffers=3: a kernel's tiles take 1 or 2 buffers" in str(ei.value)


def test_to_core_without_hints_keeps_the_estimate() -> None:
    args = _mm_args(256, 64, 256)
    values, infos = lin_relu.bind(args, {"BK": 1024})
    params, _ = lin_relu.params_for(values, infos)
    with pytest.raises(KernelError) as ei:
        to_core(lin_relu.fdef, lin_relu.env, params, {}, load_config(), hints=False)
    assert "hint: lower the tile size: BM or BN or BK" in str(ei.value)
