"""The reference interpreter on the cube: matmuls run natively and interpreted, compared.

GM -> L1 (NZ), L1 -> L0A/L0B (transposed or not), Mmad into L0C and the FIX pipe out of it, in
the example and op_library kernels, for every operand type, with tails in M, N and K, every
transpose and the FIX epilogues (scale, relu, casts). Outputs must be bit-identical, except bf16
products on AMX hosts (see `compiler.interp.interpret`: the tile unit's accumulation order is not
modelled), which agree to rounding; profiled runs give the same event records and cycles.
"""
from __future__ import annotations

import ctypes
import functools

import ml_dtypes
import numpy as np
import pytest
from matmul import matmul as example_matmul
from test_interpret import both as _both  # noqa: E402
from test_interpret import interpreting, same, same_runs  # noqa: E402, F401

import dsl
from compiler.interp import interpret as I
from compiler.interp import interpret_rules as R
from dsl import GM, Const, f16, f32, i8, i32
from op_library.matmul import bmm_kernel, linear_kernel, mm_kernel

rng = np.random.default_rng(11)
BF16 = np.dtype(ml_dtypes.bfloat16)
NP = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16, "i8": np.dtype(np.int8)}
SHAPES = [(1, 1, 1), (17, 31, 13), (70, 150, 33)]  # M, K, N: tails everywhere with 32 x 32 x 16 blocks
SMALL = {"BM": 32, "BN": 32, "BK": 16}
TRANSPOSES = [(False, False), (False, True), (True, False), (True, True)]
APPROX = I.host_isa() == "amx"  # bf16 products: AMX is approximated (to rounding)


# ------------------------------------------------------------------ harness (shared with test_interpret)
def both(launch, args: list, profile: bool = True, **consts):  # type: ignore[no-untyped-def]
    """test_interpret.both, profiled by default: every cube run compares event streams too."""
    return _both(launch, args, profile, **consts)


def agree(native: np.ndarray, interp: np.ndarray, dt: str) -> None:
    """Bit-identical, or for bf16 products on AMX equal to the rounding of the accumulation."""
    if dt == "bf16" and APPROX:
        assert native.dtype == interp.dtype
        rtol = 2 ** -7 if native.dtype == BF16 else 2 ** -12  # an ulp of bf16, or cancellation in f32 sums
        np.testing.assert_allclose(interp.astype(np.float64), native.astype(np.float64), rtol=rtol, atol=1e-3)
    else:
        same(native, interp)


def operand(shape: tuple[int, ...], dt: str, ints: bool = False) -> np.ndarray:
    if dt == "i8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    if ints:  # small integers: every product and sum is exact, on every path
        return rng.integers(-4, 5, shape).astype(NP[dt])
    return rng.standard_normal(shape).astype(NP[dt])


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


# ------------------------------------------------------------------ examples/kernels/matmul.py
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("cores", [1, 3])
def test_example_matmul(dt: str, shape: tuple[int, int, int], cores: int) -> None:
    M, K, N = shape
    a, b = operand((M, K), dt), operand((K, N), dt)
    c = np.full((M, N), np.nan, NP[dt])
    na, ia, nr, ir = both(example_matmul[cores], [a, b, c], **SMALL)
    agree(na[2], ia[2], dt)
    np.testing.assert_allclose(ia[2].astype(np.float64), reference(a, b), rtol=2e-2, atol=2e-2 * np.sqrt(K))
    same_runs(nr, ir)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_example_matmul_f32_result(dt: str) -> None:
    """An f32 result shows the accumulators unrounded: f16 products are one fma per k, in order."""
    a, b = operand((70, 150), dt), operand((150, 33), dt)
    na, ia, nr, ir = both(example_matmul[2], [a, b, np.zeros((70, 33), np.float32)], **SMALL)
    agree(na[2], ia[2], dt)
    same_runs(nr, ir)


def test_example_matmul_default_blocks() -> None:
    """128 x 128 x 64 blocks: several K steps accumulate, partial blocks in M and N."""
    a, b = operand((150, 200), "f32"), operand((200, 130), "f32")
    na, ia, nr, ir = both(example_matmul[2], [a, b, np.zeros((150, 130), np.float32)])
    same(na[2], ia[2])
    same_runs(nr, ir)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_example_matmul_exact_on_integers(dt: str) -> None:
    """Small integer operands: exact on every path, AMX included, so bit-identical everywhere."""
    a, b = operand((70, 150), dt, ints=True), operand((150, 33), dt, ints=True)
    na, ia, nr, ir = both(example_matmul[2], [a, b, np.zeros((70, 33), NP[dt])], **SMALL)
    same(na[2], ia[2])
    same(ia[2], reference(a, b).astype(NP[dt]))
    same_runs(nr, ir)


# ------------------------------------------------------------------ op_library: mm, bmm, linear
def _stored(M: int, K: int, N: int, dt: str, ta: bool, tb: bool) -> tuple[np.ndarray, np.ndarray]:
    """Operands as stored: a is K x M when transposed, b is N x K."""
    a = operand((K, M) if ta else (M, K), dt)
    b = operand((N, K) if tb else (K, N), dt)
    return a, b


def _logical(a: np.ndarray, b: np.ndarray, ta: bool, tb: bool) -> tuple[np.ndarray, np.ndarray]:
    return (a.T if ta else a), (b.T if tb else b)


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "i8"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
def test_mm_kernel(dt: str, shape: tuple[int, int, int], ta: bool, tb: bool) -> None:
    M, K, N = shape
    a, b = _stored(M, K, N, dt, ta, tb)
    out = np.dtype(np.int32) if dt == "i8" else NP[dt]  # f16 / bf16 results are cast by the FIX pipe
    c = np.zeros((M, N), out)
    na, ia, nr, ir = both(mm_kernel[2], [a, b, c], TA=ta, TB=tb, **SMALL)
    agree(na[2], ia[2], dt)
    want = reference(*_logical(a, b, ta, tb))
    if dt == "i8":
        same(ia[2], want.astype(np.int32))
    else:
        np.testing.assert_allclose(ia[2].astype(np.float64), want, rtol=2e-2, atol=2e-2 * np.sqrt(K))
    same_runs(nr, ir)


@pytest.mark.parametrize("ta,tb", TRANSPOSES)
def test_mm_kernel_i8_extremes(ta: bool, tb: bool) -> None:
    """-128 * -128 over all of K, accumulated exactly in i32."""
    M, K, N = 33, 150, 40
    a = np.full((K, M) if ta else (M, K), -128, np.int8)
    b = np.full((N, K) if tb else (K, N), -128, np.int8)
    b[..., ::3] = 127
    na, ia, nr, ir = both(mm_kernel[3], [a, b, np.zeros((M, N), np.int32)], TA=ta, TB=tb, **SMALL)
    same(na[2], ia[2])
    same(ia[2], reference(*_logical(a, b, ta, tb)).astype(np.int32))
    same_runs(nr, ir)


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "i8"])
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
def test_bmm_kernel(dt: str, ta: bool, tb: bool) -> None:
    B, M, K, N = 3, 17, 70, 33
    a = np.stack([_stored(M, K, N, dt, ta, tb)[0] for _ in range(B)])
    b = np.stack([_stored(M, K, N, dt, ta, tb)[1] for _ in range(B)])
    out = np.dtype(np.int32) if dt == "i8" else NP[dt]
    na, ia, nr, ir = both(bmm_kernel[4], [a, b, np.zeros((B, M, N), out)], TA=ta, TB=tb, **SMALL)
    agree(na[2], ia[2], dt)
    want = np.stack([reference(*_logical(a[i], b[i], ta, tb)) for i in range(B)])
    if dt == "i8":
        same(ia[2], want.astype(np.int32))
    else:
        np.testing.assert_allclose(ia[2].astype(np.float64), want, rtol=2e-2, atol=0.2)
    same_runs(nr, ir)


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_linear_kernel(dt: str, shape: tuple[int, int, int]) -> None:
    """y = x @ w.T + bias: L0C -> UB on the FIX pipe, the bias add on the vector unit."""
    M, K, N = shape
    x, w, bias = operand((M, K), dt), operand((N, K), dt), operand((N,), dt)
    na, ia, nr, ir = both(linear_kernel[3], [x, w, bias, np.zeros((M, N), NP[dt])], **SMALL)
    agree(na[3], ia[3], dt)
    np.testing.assert_allclose(ia[3].astype(np.float64), reference(x, w.T) + bias.astype(np.float64), rtol=2e-2,
                               atol=2e-2 * np.sqrt(K))
    same_runs(nr, ir)


# ------------------------------------------------------------------ FIX epilogues
@dsl.kernel
def mm_fix(a: GM, b: GM, c: GM, s: float, OP: Const[str] = "relu_scale", BM: Const[int] = 32,
           BN: Const[int] = 32, BK: Const[int] = 16):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), i32 if a.dtype == i8 else f32)
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[k, n]
        if OP == "relu_scale":
            c[m, n] = dsl.relu(acc * 0.5)
        if OP == "relu":
            c[m, n] = dsl.relu(acc)
        if OP == "cast_f16":
            c[m, n] = dsl.cast(acc, f16)
        if OP == "scale_relu_cast":
            c[m, n] = dsl.cast(dsl.relu(acc * s), c.dtype)
        if OP == "via_ub":
            c[m, n] = dsl.relu(acc * 0.5) + 1.0


# what each epilogue computes on the f64 product, and the output type (None: the accumulator's)
EPILOGUES = {
    "relu_scale": (lambda x, s: np.maximum(x * 0.5, 0), None),
    "relu": (lambda x, s: np.maximum(x, 0), None),
    "cast_f16": (lambda x, s: x, np.float16),
    "scale_relu_cast": (lambda x, s: np.maximum(x * s, 0), None),
    "via_ub": (lambda x, s: np.maximum(x * 0.5, 0) + 1, None),
}


# an i32 accumulator cannot meet a float scalar on the vector unit (E204), so i8 has no "via_ub" case
@pytest.mark.parametrize("op,dt", [(op, dt) for op in EPILOGUES for dt in ("f32", "f16", "bf16", "i8")
                                   if not (dt == "i8" and op == "via_ub")])
def test_fix_epilogues(op: str, dt: str) -> None:
    fn, out = EPILOGUES[op]
    acc = np.dtype(np.int32) if dt == "i8" else np.dtype(np.float32)
    if op == "scale_relu_cast" and dt in ("f16", "bf16"):
        out = NP[dt]  # scale, relu and the cast back to the operand type, all on the way out
    out = np.dtype(out or acc)
    M, K, N = 70, 150, 33
    a, b = operand((M, K), dt, ints=dt != "f32"), operand((K, N), dt, ints=dt != "f32")
    s = -0.375 if dt == "i8" else 0.3  # i32 * scale: converted to f32, rounded back to even
    na, ia, nr, ir = both(mm_fix[2], [a, b, np.full((M, N), 7, out), s], OP=op)
    same(na[2], ia[2])
    want = fn(reference(a, b), s)
    with np.errstate(over="ignore"):  # f16 may overflow to inf
        want = np.rint(want) if out.kind == "i" else want.astype(out).astype(np.float64)
    np.testing.assert_allclose(ia[2].astype(np.float64), want, rtol=1e-2 if out != acc else 1e-5, atol=1e-3)
    same_runs(nr, ir)


def test_fix_relu_of_negative_zero_and_nan() -> None:
    """relu on the FIX pipe is llvm.maximum: NaN stays NaN, -0 becomes +0 (as on the vector unit).
    An accumulator is never -0 (it starts at +0), but scaling it by -1 makes every zero -0."""
    a = np.zeros((20, 16), np.float32)
    b = np.zeros((16, 20), np.float32)
    a[1, 0] = np.inf  # row 1: inf * 0 = NaN
    a[2, 1], b[1, 2] = -3.0, 1.0
    na, ia, nr, ir = both(mm_fix[1], [a, b, np.zeros((20, 20), np.float32), -1.0], OP="scale_relu_cast")
    same(na[2], ia[2])
    out = ia[2]
    assert np.isnan(out[1]).all() and out[2, 2] == 3
    zeros = np.ones(out.shape, bool)
    zeros[1], zeros[2, 2] = False, False
    assert np.all(out[zeros] == 0) and not np.signbit(out[zeros]).any()
    same_runs(nr, ir)


@dsl.kernel
def mm_tiny_bf16(a: GM, b: GM, c: GM, s: float):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (16, 16)):
        acc = dsl.zeros((16, 16), f32)
        acc += a[m, 0:a.shape[1]] @ b[0:b.shape[0], n]
        c[m, n] = dsl.cast(acc * s, c.dtype)


def _tiny() -> tuple[list, np.ndarray]:
    a, b = np.eye(16, dtype=np.float32), rng.standard_normal((16, 16)).astype(np.float32)
    s = 2.0 ** -130  # every result is an f32 subnormal
    return [a, b, np.zeros((16, 16), BF16), s], (b * np.float32(s)).astype(BF16)


def test_fix_bf16_keeps_subnormals() -> None:
    """The FIX pipe rounds to bf16 as the vector unit's stores and torch do: subnormals stay (the
    host's vcvtneps2bf16 would flush them)."""
    args, want = _tiny()
    na, ia, nr, ir = both(mm_tiny_bf16[1], args)
    same(na[2], ia[2])
    same(ia[2], want)
    same_runs(nr, ir)


# ------------------------------------------------------------------ errors
def _error(launch, args: list, **consts) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(dsl.KernelError) as e:
        launch(*args, **consts)
    return str(e.value)


def test_inner_dimension_error_same_text() -> None:
    a, b = np.ones((17, 31), np.float32), np.ones((30, 13), np.float32)
    args = [a, b, np.zeros((17, 13), np.float32)]
    native = _error(example_matmul[2], args, **SMALL)
    with interpreting():
        interp = _error(example_matmul[2], args, **SMALL)
    assert interp == native and "error[E501]" in interp


def test_store_outside_result_same_text() -> None:
    """The FIX store checks its GM window before writing, in both runs."""
    a, b = np.ones((40, 16), np.float32), np.ones((16, 40), np.float32)
    args = [a, b, np.zeros(10, np.float32).reshape(1, 10)]
    native = _error(example_matmul[1], args, **SMALL)
    with interpreting():
        interp = _error(example_matmul[1], args, **SMALL)
    assert interp == native and "error[E404]" in interp


# ------------------------------------------------------------------ the models themselves
def test_fma32_rounds_once() -> None:
    """1 + 2^-23 + (2^-24 - 2^-70): just below the halfway point, so it rounds down to 1 + 2^-23;
    rounding to f64 first would land on the halfway point and then round up to even."""
    a, b, c = np.float32(1 + 2.0 ** -23), np.float32(2.0 ** -24 * (1 - 2.0 ** -23)), np.float32(1 + 2.0 ** -23)
    assert R.fma32(np.array([a]), np.array([b]), np.array([c]))[0] == c
    assert np.float32(np.float64(a) * np.float64(b) + np.float64(c)) != c  # the double rounding it avoids


@functools.lru_cache(maxsize=None)
def _native_mmad(dt: str, isa: str):  # type: ignore[no-untyped-def]
    """cube.gen_mmad compiled on its own for one path, as a ctypes function."""
    from compiler import jit
    from compiler.backend import cube
    from compiler.backend.gen import Gen
    from compiler.ir import Kernel

    params = [("c", "ptr"), ("a", "ptr"), ("b", "ptr"), ("m", "i64"), ("n", "i64"), ("k", "i64"), ("mp", "i64"),
              ("kp", "i64"), ("np", "i64"), ("init", "i64"), ("s", "ptr")]
    g = Gen(k=Kernel("t", [], (), 0, []), sym="t")
    names = ["%" + n for n, _ in params]
    cube.gen_mmad(g, *names[:9], {"f32": f32, "f16": f16, "bf16": dsl.bf16, "i8": i8}[dt], names[9], names[10], isa=isa)
    obj, _ = jit.optimize_to_object(cube.module(g, "t", ", ".join(f"{t} %{n}" for n, t in params)))
    cty = [ctypes.c_void_p if t == "ptr" else ctypes.c_int64 for _, t in params]
    return ctypes.CFUNCTYPE(None, *cty)(jit.load_object(obj, "t"))


def _aligned(x: np.ndarray) -> np.ndarray:
    """x flattened into 64-byte aligned memory (the cube code uses aligned vector loads)."""
    raw = np.zeros(x.nbytes + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    out = raw[off:off + x.nbytes].view(x.dtype)
    out[:] = x.reshape(-1)
    return out


def _paths() -> list[str]:
    host = I.host_isa()
    return ["generic"] + (["avx512"] if host in ("avx512", "amx") else [])


@pytest.mark.parametrize("isa", _paths())
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "i8"])
def test_mmad_model_matches_each_vector_path(isa: str, dt: str) -> None:
    """`interpret.mmad_values` against cube.gen_mmad's vector paths, bit for bit, on random data
    (whichever path the host's kernels take, the model for it is exact; AMX excepted)."""
    m, n, k = 40, 50, 77
    c0 = 32 // NP[dt].itemsize
    mp, kp, np_ = 48, -(-k // c0) * c0, 64
    a, b = operand((m, k), dt), operand((k, n), dt)
    acc = np.int32 if dt == "i8" else np.float32
    c = (rng.integers(-9, 9, (mp, np_)) if dt == "i8" else rng.standard_normal((mp, np_))).astype(acc)
    za = np.zeros((mp, kp), NP[dt])
    za[:m, :k] = a
    zb = np.zeros((kp, np_), NP[dt])
    zb[:k, :n] = b
    la = _aligned(za.reshape(mp // 16, 16, kp // c0, c0).transpose(0, 2, 1, 3))
    lb = _aligned(zb.reshape(kp // c0, c0, np_ // 16, 16).transpose(0, 2, 1, 3))
    lc = _aligned(c.reshape(mp, np_ // 16, 16).transpose(1, 0, 2))
    scratch = _aligned(np.zeros(mp * kp + kp * np_ + 16, np.float32))
    _native_mmad(dt, isa)(lc.ctypes.data, la.ctypes.data, lb.ctypes.data, m, n, k, mp, kp, np_, 0,
                          scratch.ctypes.data)
    got = lc.reshape(np_ // 16, mp, 16).transpose(1, 0, 2).reshape(mp, np_)[:48, :64]
    with np.errstate(all="ignore"):
        want = I.mmad_values(za[:48, :k], zb[:k, :64], c[:48, :64], isa)
    same(got, want.astype(acc))


@dsl.kernel
def staged_in_ub(a: GM, b: GM, c: GM):
    """An operand computed on the vector unit, then moved UB -> L1 (NZ) for the cube."""
    a1 = dsl.alloc(dsl.L1, (32, 48), a.dtype)
    dsl.copy(a1, a[0:32, 0:48] * 2.0)
    acc = dsl.zeros((32, 40), f32)
    acc += a1 @ b[0:48, 0:40]
    c[0:32, 0:40] = acc


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_ub_to_l1_move_feeds_the_cube(dt) -> None:  # type: ignore[no-untyped-def]
    a = rng.standard_normal((32, 48)).astype(dt)
    b = rng.standard_normal((48, 40)).astype(dt)
    na, ia, nr, ir = both(staged_in_ub[1], [a, b, np.zeros((32, 40), np.float32)], profile=True)
    want = (2 * a.astype(np.float32)).astype(dt).astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(na[2], want, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(ia[2], na[2], rtol=1e-6, atol=1e-6)
    same_runs(nr, ir)


@dsl.kernel
def mm_copy_out(a: GM, b: GM, c: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = 16):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[k, n]
        t = dsl.alloc(dsl.UB, (BM, BN), f32)
        dsl.copy(t, acc)  # L0C -> UB on FIX, converting nothing
        c[m, n] = t * 2.0


@pytest.mark.parametrize("shape", [(32, 32, 32), (20, 37, 19)])
def test_copy_out_of_l0c(shape: tuple[int, int, int]) -> None:
    M, K, N = shape
    a, b = operand((M, K), "f16"), operand((K, N), "f16")
    na, ia, nr, ir = both(mm_copy_out[2], [a, b, np.zeros((M, N), np.float32)])
    same(na[2], ia[2])
    np.testing.assert_allclose(na[2], 2 * reference(a, b), rtol=1e-5, atol=1e-5)
    same_runs(nr, ir)
