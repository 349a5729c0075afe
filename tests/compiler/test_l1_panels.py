"""L1 panels on the cube: sub-windows of L1 buffers as matmul operands and copy destinations, UB
tiles staged into L1 (P @ V), transposed operands on either side, and their error texts.

Every kernel runs natively and in the reference interpreter: outputs bit-identical, the same event
records and cycles (`test_interpret.both` / `same_runs`), checked against float64 products too.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from matmul import matmul as streaming_matmul
from matmul_panel import matmul_panel
from test_interpret import both, same, same_runs

from dsl import KernelError

rng = np.random.default_rng(8)
BF16 = np.dtype(ml_dtypes.bfloat16)
NP = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16, "i8": np.dtype(np.int8),
      "i32": np.dtype(np.int32)}
ACC = {"f32": "f32", "f16": "f32", "bf16": "f32", "i8": "i32"}
SHAPES = [(1, 1, 1), (40, 70, 33), (96, 128, 64)]  # M, K, N: tails in every dimension, and none


def operand(shape: tuple[int, ...], dt: str) -> np.ndarray:
    if dt == "i8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.integers(-4, 5, shape).astype(NP[dt])  # small integers: every sum is exact on every path


def check(launch, args: list, out: int, ref: np.ndarray, **consts) -> None:  # type: ignore[no-untyped-def]
    """Native == interpreted bit for bit with the same event records, and both equal `ref`."""
    na, ia, nr, ir = both(launch, args, True, **consts)
    same(na[out], ia[out])
    same_runs(nr, ir)
    np.testing.assert_array_equal(na[out].astype(np.float64), ref)


def expect(fn, code: str, message: str, hint: str | None = None, line: str | None = None) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelError) as ei:
        fn()
    text = str(ei.value)
    first = text.splitlines()[0]
    assert f"error[{code}]" in first and message in first, text
    assert ".py:" in first and "^" in text, text
    if hint:
        assert hint in text, text
    if line:
        assert line in text, text
    return text


PANEL = """
@dsl.kernel
def whole(a: GM, b: GM, c: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = {bk}):
    a1 = dsl.alloc(dsl.L1, (BM, a.shape[1]), a.dtype)
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        dsl.copy(a1, a[m, :])
        acc = dsl.zeros((BM, BN), {acc})
        for k in dsl.range(0, a.shape[1], BK):
            acc += a1[:, k] @ b[k, n]
        c[m, n] = acc

@dsl.kernel
def stepwise(a: GM, b: GM, c: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = {bk},
             KMAX: Const[int] = 256):
    a1 = dsl.alloc(dsl.L1, (BM, KMAX), a.dtype)
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), {acc})
        for k in dsl.range(0, a.shape[1], BK):
            dsl.copy(a1[:, k], a[m, k])
            acc += a1[:, k] @ b[k, n]
        c[m, n] = acc

@dsl.kernel
def bpanel(a: GM, b: GM, c: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = {bk}):
    b1 = dsl.alloc(dsl.L1, (b.shape[0], BN), b.dtype)
    held = -1
    for n, m in dsl.tiles2d((b.shape[1], a.shape[0]), (BN, BM)):
        if n.start != held:
            dsl.copy(b1, b[:, n])          # B's column panel, reused by this core's next row blocks
            held = n.start
        acc = dsl.zeros((BM, BN), {acc})
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b1[k, :]
        c[m, n] = acc
"""


@pytest.mark.parametrize("dt", ["f16", "bf16", "f32", "i8"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("cores", [1, 3])
@pytest.mark.parametrize("kernel", ["whole", "stepwise", "bpanel"])
def test_panel_operands(source, kernel: str, dt: str, shape: tuple[int, int, int], cores: int) -> None:  # type: ignore[no-untyped-def]
    M, K, N = shape
    bk = 32 if dt == "i8" else 16
    mod = source(PANEL.format(bk=bk, acc=ACC[dt]))
    a, b = operand((M, K), dt), operand((K, N), dt)
    c = np.full((M, N), -7, NP[ACC[dt]])
    check(getattr(mod, kernel)[cores], [a, b, c], 2, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (100, 200, 70), (176, 256, 256)])
@pytest.mark.parametrize("cores", [1, 4])
@pytest.mark.parametrize("nb", [1, 3])
def test_example_matmul_panel(dt: str, shape: tuple[int, int, int], cores: int, nb: int) -> None:
    """examples/kernels/matmul_panel.py: the panel filled by the first column block, reused by the
    others (NB = 1: the streaming matmul)."""
    M, K, N = shape
    a, b = operand((M, K), dt), operand((K, N), dt)
    c = np.full((M, N), np.nan, np.float32)
    small = {"BM": 32, "BN": 32, "BK": 32, "NB": nb}
    check(matmul_panel.base[cores], [a, b, c], 2, a.astype(np.float64) @ b.astype(np.float64), **small)


def test_every_stage_verifies() -> None:
    """The IR verifier after every stage, on the panel matmul and flash attention."""
    from flash_attention import flash_attention

    from compiler.frontend.lower import lower
    from compiler.passes import verify as V
    from compiler.pipeline import stages
    from simulator.config import load_config

    f16 = np.zeros((128, 64), np.float16)
    cfg = load_config()
    for k, args, consts in ((matmul_panel.base, (f16, f16.T.copy(), f16[:, :].copy()), {"NB": 2}),
                            (flash_attention, (f16, f16, f16, f16), {"scale": 0.125})):
        values, infos = k.bind(args, consts)
        params, _ = k.params_for(values, infos)
        ir = lower(k.fdef, k.env, params, k.options)
        V.verify(ir, "tile", cfg)
        for name, fn in stages():
            ir = fn(ir, cfg)
            V.verify(ir, name, cfg)


def test_panel_moves_less_than_streaming() -> None:
    """The point of the panel: A crosses GM -> L1 once per NB column blocks (the trace's MTE2 bytes)."""
    a, b = operand((128, 256), "f16"), operand((256, 256), "f16")
    consts = {"BM": 64, "BN": 64, "BK": 32}
    run_s = streaming_matmul[4].profile(a, b, np.zeros((128, 256), np.float16), **consts)
    run_p = matmul_panel.base[4].profile(a, b, np.zeros((128, 256), np.float16), NB=4, **consts)

    def mte2_bytes(run) -> int:  # type: ignore[no-untyped-def]
        return sum(int((e["a"] * e["b"])[e["instr"] == 12].sum()) for e in (p.events for p in run.profile.per_core))

    # streaming: 8 blocks of 64 x 64, each loading A's 64 x 256 and B's 256 x 64 (f16)
    assert mte2_bytes(run_s) == 8 * (64 * 256 + 256 * 64) * 2
    # panel: 2 tiles of 64 x 256, each loading A's 64 x 256 once and B's 256 x 64 four times
    assert mte2_bytes(run_p) == 2 * (64 * 256 + 4 * 256 * 64) * 2


SLICES = """
@dsl.kernel
def sliced(a: GM, b: GM, c: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = 32):
    a1 = dsl.alloc(dsl.L1, (BM, 128), a.dtype)
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        dsl.copy(a1, a[m, :])
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[1], BK):
            acc += a1[:, k:k + BK] @ b[k:k + BK, n]
        c[m, n] = acc

@dsl.kernel
def halves(a: GM, b: GM, c: GM):
    a1 = dsl.alloc(dsl.L1, (64, 64), a.dtype)
    dsl.copy(a1, a[0:64, 0:64])
    c[0:32, :] = a1[0:32, 0:32] @ b[0:32, :] + a1[0:32, 32:64] @ b[32:64, :]
    c[32:64, :] = a1[32:64, :] @ b[0:64, :]
"""


def test_slices_of_a_panel(source) -> None:  # type: ignore[no-untyped-def]
    mod = source(SLICES)
    a, b = operand((70, 128), "f16"), operand((128, 50), "f16")
    check(mod.sliced[2], [a, b, np.zeros((70, 50), np.float32)], 2, a.astype(np.float64) @ b.astype(np.float64))
    a, b = operand((64, 64), "f16"), operand((64, 48), "f16")
    check(mod.halves[1], [a, b, np.zeros((64, 48), np.float32)], 2, a.astype(np.float64) @ b.astype(np.float64))


# ------------------------------------------------------------------ UB -> L1, transposes
UB = """
@dsl.kernel
def pv(p: GM, v: GM, o: GM, BQ: Const[int] = 32, BKV: Const[int] = 32):
    for i in dsl.tiles(p.shape[0], BQ):
        acc = dsl.zeros((BQ, 32), f32)
        for j in dsl.range(0, v.shape[0], BKV):
            e = dsl.exp(p[i, j] - 1.0)                 # a UB tile (f32 on the vector unit)
            acc += dsl.cast(e, f16) @ v[j, :]           # UB -> L1 (MTE3) -> L0A
        o[i, :] = acc

@dsl.kernel
def relu_mm(x: GM, w: GM, y: GM, BM: Const[int] = 16):
    for m in dsl.tiles(x.shape[0], BM):
        h = dsl.relu(x[m, :])                           # UB
        y[m, :] = h @ w[:, :]

@dsl.kernel
def transposes(a: GM, b: GM, c: GM, d: GM, e: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = 16):
    for m, n in dsl.tiles2d((c.shape[0], c.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        acc2 = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[0], BK):
            acc += a.T[m, k] @ b[k, n]                 # A^T B
            acc2 += a.T[m, k] @ d.T[k, n]              # A^T D^T
        c[m, n] = acc
        e[m, n] = acc2

@dsl.kernel
def qk(q: GM, k: GM, s: GM, BQ: Const[int] = 32, BKV: Const[int] = 48):
    for i in dsl.tiles(q.shape[0], BQ):
        for j in dsl.range(0, k.shape[0], BKV):
            s[i, j] = q[i, :] @ k.T[:, j]
"""


def test_ub_tile_as_operand(source) -> None:  # type: ignore[no-untyped-def]
    mod = source(UB)
    p = rng.integers(-3, 4, (70, 100)).astype(np.float32)
    v = operand((100, 32), "f16")
    e = np.exp(p.astype(np.float32) - np.float32(1)).astype(np.float16)
    na, ia, nr, ir = both(mod.pv[3], [p, v, np.zeros((70, 32), np.float32)], True)
    same(na[2], ia[2])
    same_runs(nr, ir)
    np.testing.assert_allclose(na[2], e.astype(np.float64) @ v.astype(np.float64), rtol=1e-5, atol=1e-3)
    x, w = operand((40, 24), "f16"), operand((24, 20), "f16")
    check(mod.relu_mm[2], [x, w, np.zeros((40, 20), np.float32)], 2,
          np.maximum(x.astype(np.float64), 0) @ w.astype(np.float64))
    ev = nr.profile.per_core[0].events
    assert (ev["instr"] == 13).any(), "P reaches L1 from UB by COPY_UB_L1 (MTE3)"


@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_transposed_operands(source, dt: str) -> None:  # type: ignore[no-untyped-def]
    mod = source(UB)
    K, M, N = 40, 50, 36
    a, b, d = operand((K, M), dt), operand((K, N), dt), operand((N, K), dt)
    na, ia, nr, ir = both(mod.transposes[2], [a, b, np.zeros((M, N), np.float32), d, np.zeros((M, N), np.float32)],
                          True)
    for out in (2, 4):
        same(na[out], ia[out])
    same_runs(nr, ir)
    np.testing.assert_array_equal(na[2], a.T.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_array_equal(na[4], a.T.astype(np.float64) @ d.T.astype(np.float64))
    q, k = operand((64, 32), dt), operand((100, 32), dt)
    check(mod.qk[2], [q, k, np.zeros((64, 100), np.float32)], 2, q.astype(np.float64) @ k.T.astype(np.float64))


# ------------------------------------------------------------------ errors
BAD = """
@dsl.kernel
def past(a: GM, b: GM, c: GM):
    a1 = dsl.alloc(dsl.L1, (32, 64), a.dtype)
    dsl.copy(a1, a[0:32, 0:64])
    c[0:32, :] = a1[:, 64:96] @ b[0:32, :]

@dsl.kernel
def inside(a: GM, b: GM, c: GM):
    a1 = dsl.alloc(dsl.L1, (32, 64), a.dtype)
    dsl.copy(a1, a[0:32, 0:64])
    c[0:32, :] = a1[:, 8:40] @ b[0:32, :]

@dsl.kernel
def runtime(a: GM, b: GM, c: GM, BK: Const[int] = 32):
    a1 = dsl.alloc(dsl.L1, (32, 64), a.dtype)
    dsl.copy(a1, a[0:32, 0:64])
    acc = dsl.zeros((32, 32), f32)
    for k in dsl.range(0, b.shape[0], BK):
        acc += a1[:, k] @ b[k, 0:32]
    c[0:32, 0:32] = acc

@dsl.kernel
def runtime_misaligned(a: GM, b: GM, c: GM, s: int):
    a1 = dsl.alloc(dsl.L1, (32, 64), a.dtype)
    dsl.copy(a1, a[0:32, 0:64])
    c[0:32, :] = a1[:, s:s + 16] @ b[0:16, :]

@dsl.kernel
def single(a: GM, b: GM, c: GM):
    a1 = dsl.alloc(dsl.L1, (32, 64), a.dtype)
    c[0:1, :] = a1[0, 0:16] @ b[0:16, :]

@dsl.kernel
def one_index(a: GM, b: GM, c: GM):
    a1 = dsl.alloc(dsl.L1, (32, 64), a.dtype)
    c[0:32, :] = a1[0:16] @ b[0:16, :]

@dsl.kernel
def stepped(a: GM, b: GM, c: GM):
    a1 = dsl.alloc(dsl.L1, (32, 64), a.dtype)
    c[0:32, :] = a1[:, 0:32:2] @ b[0:16, :]

@dsl.kernel
def loop_shape(a: GM, b: GM, c: GM):
    for t in dsl.tiles(a.shape[0], 16):
        a1 = dsl.alloc(dsl.L1, (t.len, 64), a.dtype)

@dsl.kernel
def too_big(a: GM, b: GM, c: GM, BM: Const[int] = 512):
    a1 = dsl.alloc(dsl.L1, (BM, a.shape[1]), a.dtype)
    for m in dsl.tiles(a.shape[0], BM):
        dsl.copy(a1, a[m, :])
        c[m, :] = a1[:, 0:16] @ b[0:16, :]
"""


def _ops(M: int = 32, K: int = 64, N: int = 32) -> list[np.ndarray]:
    return [np.ones((M, K), np.float16), np.ones((K, N), np.float16), np.zeros((M, N), np.float32)]


def test_error_window_past_the_buffer(source) -> None:  # type: ignore[no-untyped-def]
    mod = source(BAD)
    text = expect(lambda: mod.past(*_ops()), "E404", "this window of 'buf' covers columns [64, 96)",
                  hint="'buf' holds 64 columns", line="a1[:, 64:96]")
    assert "(core" not in text  # found at compile time


def test_error_window_inside_a_fractal(source) -> None:  # type: ignore[no-untyped-def]
    mod = source(BAD)
    expect(lambda: mod.inside(*_ops()), "E302", "start at 8, inside a fractal", hint="multiples of 16")


def test_error_window_out_of_range_at_run_time(source) -> None:  # type: ignore[no-untyped-def]
    mod = source(BAD)
    a, b, c = _ops()
    mod.runtime(a, b, c)  # K = 64: inside
    np.testing.assert_array_equal(c, 64.0)
    big = np.ones((96, 32), np.float16)
    c = np.full((32, 32), 5.0, np.float32)
    text = expect(lambda: mod.runtime(a, big, c), "E404",
                  "window columns [64, 96) of L1 buffer 'buf' are outside the 64 it holds",
                  hint="keep the window inside what was copied into it", line="acc += a1[:, k] @ b[k, 0:32]")
    assert "(core 0)" in text
    assert (c == 5.0).all(), "nothing was written"


def test_error_misaligned_at_run_time(source) -> None:  # type: ignore[no-untyped-def]
    mod = source(BAD)
    a, b, c = _ops(K=64, N=16)
    b = np.ones((16, 16), np.float16)
    mod.runtime_misaligned(a, b, np.zeros((32, 16), np.float32), s=16)
    expect(lambda: mod.runtime_misaligned(a, b, np.zeros((32, 16), np.float32), s=8), "E302",
           "start at 8, inside a fractal", hint="multiples of 16")


@pytest.mark.parametrize("kernel,code,message,hint", [
    ("single", "E210", "single rows of an L1 buffer are not windows", "a dsl.range window"),
    ("one_index", "E205", "index the L1 buffer 'buf' with two windows", "rows then columns"),
    ("stepped", "E210", "L1 sub-windows cannot be stepped", "contiguous slice"),
    ("loop_shape", "E207", "an L1 buffer's shape must be positive compile-time integers or tensor shapes",
     "a.shape[1]"),
])
def test_error_texts(source, kernel: str, code: str, message: str, hint: str) -> None:  # type: ignore[no-untyped-def]
    mod = source(BAD)
    expect(lambda: getattr(mod, kernel)(*_ops()), code, message, hint=hint)


def test_error_panel_too_big_for_l1(source) -> None:  # type: ignore[no-untyped-def]
    mod = source(BAD)
    a = np.ones((512, 1024), np.float16)
    expect(lambda: mod.too_big(a, np.ones((16, 8), np.float16), np.zeros((512, 8), np.float32)), "E301",
           "but L1 has", line="dsl.alloc(dsl.L1, (BM, a.shape[1]), a.dtype)")
