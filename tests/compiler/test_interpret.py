"""The reference interpreter against the native code: same outputs, errors, prints and traces.

Every kernel runs twice on copies of the same arguments: natively, then with
`CONFIG.interpret` on. Outputs must be bit-identical (NaNs compare equal), float sums included
(both add in the same fixed lane order); profiled runs must give the same event records and cycles.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest

import dsl
from compiler.config import CONFIG
from compiler.interp import interpret as I
from compiler.interp import interpret_rules as R
from compiler.ir import ParamSpec
from compiler.pipeline import to_core
from dsl import GM, Const, bf16, f16, f32, i8, i32
from simulator.config import load_config

rng = np.random.default_rng(7)
BF16 = np.dtype(ml_dtypes.bfloat16)
NP = {f32: np.dtype(np.float32), f16: np.dtype(np.float16), bf16: BF16}


@contextlib.contextmanager
def interpreting() -> Iterator[None]:
    old = CONFIG.interpret
    CONFIG.interpret = True
    try:
        yield
    finally:
        CONFIG.interpret = old


def both(launch, args: list, profile: bool = False, **consts):  # type: ignore[no-untyped-def]
    """Run `launch` natively and interpreted, each on its own copy of `args`.

    Returns (native args, interpreted args, native run, interpreted run)."""
    out = []
    for interp in (False, True):
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        with interpreting() if interp else contextlib.nullcontext():
            run = launch.profile(*a, **consts) if profile else launch(*a, **consts)
        out.append((a, run))
    (na, nr), (ia, ir) = out
    return na, ia, nr, ir


def same(a: np.ndarray, b: np.ndarray) -> None:
    """Bit-identical, except that any NaN equals any NaN."""
    assert a.dtype == b.dtype and a.shape == b.shape
    a, b = a.astype(np.float64) if a.dtype == BF16 else a, b.astype(np.float64) if b.dtype == BF16 else b
    nan = np.isnan(a) & np.isnan(b) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
    if a.dtype.kind == "f":
        assert np.array_equal(np.signbit(a)[~nan], np.signbit(b)[~nan])
    np.testing.assert_array_equal(a[~nan], b[~nan])


def same_runs(nr, ir) -> None:  # type: ignore[no-untyped-def]
    """Same trace records on every core (instr, pipe, loc, a..e) and the same cycle count."""
    assert len(nr.profile.per_core) == len(ir.profile.per_core)
    for pn, pi in zip(nr.profile.per_core, ir.profile.per_core):
        assert pn.events.dtype == pi.events.dtype
        np.testing.assert_array_equal(pn.events, pi.events)
    assert nr.cycles == ir.cycles
    assert nr.profile.busy == ir.profile.busy


# ------------------------------------------------------------------ elementwise
@dsl.kernel
def vadd(x: GM, y: GM, z: GM, TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        z[t] = x[t] + y[t]


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
@pytest.mark.parametrize("n", [0, 1, 37, 64, 200, 1000])
@pytest.mark.parametrize("cores", [1, 3])
def test_vadd_tails(dtype, n: int, cores: int) -> None:  # type: ignore[no-untyped-def]
    x = (rng.standard_normal(n) * 100).astype(NP[dtype])
    y = (rng.standard_normal(n) * 100).astype(NP[dtype])
    z = np.full(n, np.nan, NP[dtype])
    na, ia, nr, ir = both(vadd[cores], [x, y, z], profile=True)
    same(na[2], ia[2])
    same(ia[2], (x.astype(np.float32) + y.astype(np.float32)).astype(NP[dtype]))
    same_runs(nr, ir)


def test_torch_tensors_are_written_in_place() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(300, dtype=torch.bfloat16)
    y = torch.randn(300, dtype=torch.bfloat16)
    z = torch.zeros(300, dtype=torch.bfloat16)
    with interpreting():
        vadd[2](x, y, z)
    assert torch.equal(z, x + y)


@dsl.kernel
def swish(x: GM, y: GM, TILE: Const[int] = 128):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        y[t] = xt * dsl.sigmoid(xt)


@dsl.kernel
def unary(x: GM[f32], y: GM[f32, 2], TILE: Const[int] = 128):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        y[0, t] = dsl.exp(xt)
        y[1, t] = dsl.log(dsl.abs(xt))
        y[2, t] = dsl.tanh(xt)
        y[3, t] = dsl.gelu(xt)
        y[4, t] = dsl.abs(xt) ** xt
        y[5, t] = dsl.rsqrt(xt)
        y[6, t] = dsl.sqrt(xt)
        y[7, t] = dsl.reciprocal(xt)
        y[8, t] = dsl.relu(xt)
        y[9, t] = -xt


def _libm_exact() -> bool:
    """Transcendentals match bit for bit when the interpreter calls the same C library."""
    return R._LIBM is not None


def close_or_same(a: np.ndarray, b: np.ndarray) -> None:
    if _libm_exact():
        same(a, b)
    else:  # pragma: no cover - hosts without a C math library
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
def test_swish(dtype) -> None:  # type: ignore[no-untyped-def]
    x = np.concatenate([rng.standard_normal(500) * 8, [0.0, -0.0, np.inf, -np.inf, np.nan, 100, -100]])
    x = x.astype(NP[dtype])
    na, ia, nr, ir = both(swish[3], [x, np.zeros_like(x)], profile=True)
    close_or_same(na[1], ia[1])
    same_runs(nr, ir)


def test_unary_ops() -> None:
    x = np.concatenate([rng.standard_normal(700) * 4, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3.5, 88.8]])
    x = x.astype(np.float32)
    y = np.zeros((10, len(x)), np.float32)
    na, ia, _, _ = both(unary[2], [x, y])
    for row in range(10):
        close_or_same(na[1][row], ia[1][row])
    num = ~np.isnan(x)
    same(ia[1][8][num], np.where(x > 0, x, 0).astype(np.float32)[num])  # relu(-0) is +0
    assert np.isnan(ia[1][8][~num]).all()


@dsl.kernel
def binop(x: GM, y: GM, z: GM, OP: Const[str] = "+", TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        a = x[t]
        b = y[t]
        if OP == "+":
            z[t] = a + b
        elif OP == "-":
            z[t] = a - b
        elif OP == "*":
            z[t] = a * b
        elif OP == "/":
            z[t] = a / b
        elif OP == "//":
            z[t] = a // b
        elif OP == "%":
            z[t] = a % b
        elif OP == "**":
            z[t] = dsl.abs(a) ** b
        elif OP == "max":
            z[t] = dsl.maximum(a, b)
        elif OP == "min":
            z[t] = dsl.minimum(a, b)
        elif OP == "&":
            z[t] = a & b
        elif OP == "|":
            z[t] = a | b
        elif OP == "^":
            z[t] = a ^ b
        elif OP == "<<":
            z[t] = a << b
        elif OP == ">>":
            z[t] = a >> b
        elif OP == "+s":
            z[t] = a + 3
        elif OP == "s-":
            z[t] = 5 - a
        elif OP == "*s":
            z[t] = a * -2


@dsl.kernel
def unop(x: GM, z: GM, OP: Const[str] = "abs", TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        a = x[t]
        if OP == "abs":
            z[t] = dsl.abs(a)
        elif OP == "neg":
            z[t] = -a
        elif OP == "relu":
            z[t] = dsl.relu(a)
        elif OP == "not":
            z[t] = ~a
        elif OP == "exp":
            z[t] = dsl.exp(a)
        elif OP == "log":
            z[t] = dsl.log(a)
        elif OP == "sqrt":
            z[t] = dsl.sqrt(a)
        elif OP == "rsqrt":
            z[t] = dsl.rsqrt(a)
        elif OP == "recip":
            z[t] = dsl.reciprocal(a)
        elif OP == "sigmoid":
            z[t] = dsl.sigmoid(a)
        elif OP == "tanh":
            z[t] = dsl.tanh(a)
        elif OP == "gelu":
            z[t] = dsl.gelu(a)


FLOATS, INTS = (f32, f16, bf16), (np.int32, np.int8)
BIN_CASES = [(op, d) for op in ("+", "-", "*", "/", "//", "%", "**", "max", "min", "+s", "s-", "*s") for d in FLOATS] + \
    [(op, d) for op in ("+", "-", "*", "//", "%", "max", "min", "&", "|", "^", "<<", ">>", "+s", "s-", "*s")
     for d in INTS]
UN_CASES = [(op, d) for op in ("abs", "neg", "relu", "exp", "log", "sqrt", "rsqrt", "recip", "sigmoid", "tanh",
                               "gelu") for d in FLOATS] + [(op, d) for op in ("abs", "neg", "relu", "not") for d in INTS]


def _operands(dtype, n: int, op: str):  # type: ignore[no-untyped-def]
    if dtype in INTS:
        info = np.iinfo(dtype)
        x = np.concatenate([rng.integers(info.min, info.max, n - 4, endpoint=True), [info.min, info.max, -1, 0]])
        y = rng.integers(-9, 9, n) if op not in ("<<", ">>") else rng.integers(0, 8 * np.dtype(dtype).itemsize, n)
        return x.astype(dtype), y.astype(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5]
    x = np.concatenate([rng.standard_normal(n - len(special)) * 6, special])
    y = np.concatenate([rng.standard_normal(n - len(special)) * 3, special[::-1]])
    return x.astype(NP[dtype]), y.astype(NP[dtype])


@pytest.mark.parametrize("op,dtype", BIN_CASES)
def test_binary_ops(op: str, dtype) -> None:  # type: ignore[no-untyped-def]
    x, y = _operands(dtype, 150, op)
    na, ia, _, _ = both(binop[2], [x, y, np.zeros_like(x), op])
    close_or_same(na[2], ia[2]) if dtype not in INTS else same(na[2], ia[2])


@pytest.mark.parametrize("op,dtype", UN_CASES)
def test_unary_ops_matrix(op: str, dtype) -> None:  # type: ignore[no-untyped-def]
    x, _ = _operands(dtype, 150, op)
    na, ia, _, _ = both(unop[2], [x, np.zeros_like(x), op])
    close_or_same(na[1], ia[1]) if dtype not in INTS else same(na[1], ia[1])


# ------------------------------------------------------------------ rows, reductions
@dsl.kernel
def softmax(x: GM[f32], y: GM[f32], ROWS: Const[int] = 4):
    for r in dsl.tiles(x.shape[0], ROWS):
        xt = x[r, :]
        m = dsl.max(xt, axis=1, keepdims=True)
        e = dsl.exp(xt - m)
        y[r, :] = e / dsl.sum(e, axis=1, keepdims=True)


@pytest.mark.parametrize("shape", [(10, 37), (4, 8), (1, 1), (0, 5), (33, 300)])
@pytest.mark.parametrize("cores", [1, 4])
def test_softmax(shape: tuple[int, int], cores: int) -> None:
    x = rng.standard_normal(shape).astype(np.float32) * 3
    na, ia, nr, ir = both(softmax[cores], [x, np.zeros_like(x)], profile=True)
    close_or_same(na[1], ia[1])  # sums in a fixed lane order: bit for bit (exp: same C library)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(ia[1], ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    same_runs(nr, ir)


@dsl.kernel
def layernorm(x: GM[f32], w: GM[f32], b: GM[f32], y: GM[f32], eps: float = 1e-5, ROWS: Const[int] = 8):
    n = x.shape[1]
    for r in dsl.tiles(x.shape[0], ROWS):
        xt = x[r, :]
        mean = dsl.sum(xt, axis=1, keepdims=True) / n
        d = xt - mean
        var = dsl.sum(d * d, axis=1, keepdims=True) / n
        y[r, :] = d * dsl.rsqrt(var + eps) * w[:] + b[:]


@pytest.mark.parametrize("cores", [1, 3])
def test_layernorm(cores: int) -> None:
    x = (rng.standard_normal((19, 96)) * 2 + 1).astype(np.float32)
    w = rng.standard_normal(96).astype(np.float32)
    b = rng.standard_normal(96).astype(np.float32)
    na, ia, nr, ir = both(layernorm[cores], [x, w, b, np.zeros_like(x), 1e-5], profile=True)
    same(na[3], ia[3])  # float sums in a fixed lane order: bit for bit
    mu = x.mean(1, keepdims=True)
    ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(ia[3], ref, rtol=1e-4, atol=1e-4)
    same_runs(nr, ir)


@dsl.kernel
def reductions(x: GM, s: GM, ROWS: Const[int] = 4):
    for r in dsl.tiles(x.shape[0], ROWS):
        xt = x[r, :]
        s[0, r] = dsl.max(xt, axis=1)
        s[1, r] = dsl.min(xt, axis=1)
        s[2, r] = dsl.sum(xt, axis=1)
        s[3:4, 0:1] = dsl.max(xt, keepdims=True)
        s[4, :] = dsl.min(xt, axis=0)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8])
def test_reductions(dtype) -> None:  # type: ignore[no-untyped-def]
    if dtype == np.float32:
        x = rng.standard_normal((4, 29)).astype(dtype)
        x[0, :] = -0.0
        x[1, 3] = 0.0
        x[2, 5] = np.nan
    else:
        x = rng.integers(-120, 120, (4, 29)).astype(dtype)
    s = np.zeros((5, 29), dtype)
    na, ia, nr, ir = both(reductions[1], [x, s], profile=True)
    for row in (0, 1, 3, 4):  # max and min are exact, zeros and NaNs included
        same(na[1][row], ia[1][row])
    same(na[1][2], ia[1][2])  # float sums in a fixed lane order, integer sums wrap: bit for bit
    if dtype == np.float32:
        assert not np.signbit(ia[1][0][1]) and np.signbit(ia[1][0][0])  # max(-0, +0) = +0; all -0 -> -0
    same_runs(nr, ir)


# ------------------------------------------------------------------ casts, compares, integers
@dsl.kernel
def casts(x: GM[f32], h: GM[f16], b: GM[bf16], i: GM[i32], j: GM[i8], back: GM[f32, 2], TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        h[t] = dsl.cast(xt, f16)
        b[t] = dsl.cast(xt, bf16)
        i[t] = dsl.cast(xt, i32)
        j[t] = dsl.cast(xt, i8)
        back[0, t] = dsl.cast(h[t], f32)
        back[1, t] = dsl.cast(b[t], f32)
        back[2, t] = dsl.cast(i[t], f32)
        back[3, t] = dsl.cast(j[t], f32)
        back[4, t] = dsl.cast(dsl.cast(h[t], bf16), f32)


@dsl.kernel
def int_casts(x: GM[i32], h: GM[f16], b: GM[bf16], j: GM[i8], k: GM[i32], TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        h[t] = dsl.cast(xt, f16)
        b[t] = dsl.cast(xt, bf16)
        j[t] = dsl.cast(xt, i8)
        k[t] = dsl.cast(j[t], i32)


def test_float_casts() -> None:
    special = [0.5, 1.5, 2.5, -0.5, -2.5, 127.5, 128.0, -128.5, -129.0, 300.0, -300.0, 1e10, -1e10, 3e9,
               65504.0, 65520.0, 1e-8, 1e-30, 0.0, -0.0, np.inf, -np.inf, np.nan, 1.00390625, 1.0 + 2 ** -11]
    x = np.concatenate([special, rng.standard_normal(200) * 1000]).astype(np.float32)
    n = len(x)
    args = [x, np.zeros(n, np.float16), np.zeros(n, BF16), np.zeros(n, np.int32), np.zeros(n, np.int8),
            np.zeros((5, n), np.float32)]
    na, ia, nr, ir = both(casts[2], args, profile=True)
    for a, b in zip(na[1:], ia[1:]):
        same(a, b)
    with np.errstate(over="ignore"):
        same(ia[1], x.astype(np.float16))
    same(ia[2], x.astype(BF16))
    assert list(ia[3][:6]) == [0, 2, 2, 0, -2, 128] and ia[3][11:13].tolist() == [2**31 - 1, -2**31]
    assert ia[3][22] == 0  # NaN -> 0
    assert ia[4][7:11].tolist() == [-128, -128, 127, -128]  # saturation
    same_runs(nr, ir)


@dsl.kernel
def to_bf16(x: GM[f32], y: GM[bf16]):
    for t in dsl.tiles(x.shape[0], 64):
        y[t] = dsl.cast(x[t], bf16)


SUBNORMALS = np.array([1e-40, -1e-40, 1e-39, 3e-45], np.float32)


def test_bf16_keeps_subnormals() -> None:
    y = np.zeros(4, BF16)
    with interpreting():
        to_bf16[1](SUBNORMALS, y)
    same(y, SUBNORMALS.astype(BF16))  # as torch and ml_dtypes round: subnormals survive


def test_bf16_keeps_subnormals_native() -> None:
    y = np.zeros(4, BF16)
    to_bf16[1](SUBNORMALS, y)
    same(y, SUBNORMALS.astype(BF16))


def test_int_casts() -> None:
    x = np.array([16842753, -16842753, 3, -3, 2**31 - 1, -2**31, 127, 128, 255, -129, 65519, 65520, 70000],
                 np.int32)
    n = len(x)
    args = [x, np.zeros(n, np.float16), np.zeros(n, BF16), np.zeros(n, np.int8), np.zeros(n, np.int32)]
    na, ia, _, _ = both(int_casts[1], args)
    for a, b in zip(na[1:], ia[1:]):
        same(a, b)
    # i32 -> bf16 goes through f32 (as torch does): 2**24 + 2**16 + 1 rounds twice to 2**24
    assert float(ia[2][0]) == 2.0 ** 24
    same(ia[3], x.astype(np.int8))


@dsl.kernel
def compare(x: GM[f32], y: GM[f32], z: GM[f32, 2], c: GM[i8, 2], TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        yt = y[t]
        z[0, t] = dsl.where(xt > yt, xt, yt * 2.0)
        z[1, t] = dsl.where(xt != yt, xt, 0.5)
        z[2, t] = dsl.where(xt <= 0.0, -1.0, yt)
        z[3, t] = dsl.maximum(xt, yt)
        z[4, t] = dsl.minimum(xt, yt)
        z[5, t] = dsl.cast(xt == yt, f32)
        c[0, t] = dsl.cast(xt >= yt, i8)
        c[1, t] = dsl.cast(xt < 1.0, i8)
        c[2, t] = dsl.cast(~(xt < yt), i8)


def test_where_and_compare() -> None:
    x = np.concatenate([rng.standard_normal(150), [np.nan, 1.0, np.nan, 0.0, -0.0, 2.0, np.inf]]).astype(np.float32)
    y = np.concatenate([rng.standard_normal(150), [1.0, np.nan, np.nan, -0.0, 0.0, 2.0, np.inf]]).astype(np.float32)
    x[::7] = y[::7]
    n = len(x)
    na, ia, nr, ir = both(compare[2], [x, y, np.zeros((6, n), np.float32), np.zeros((3, n), np.int8)],
                          profile=True)
    same(na[2], ia[2])
    same(na[3], ia[3])
    with np.errstate(invalid="ignore"):
        same(ia[2][0], np.where(x > y, x, y * 2).astype(np.float32))
        same(ia[2][1], np.where(x != y, x, 0.5).astype(np.float32))
        same(ia[3][0], (x >= y).astype(np.int8))
    same_runs(nr, ir)


@dsl.kernel
def divmod_k(a: GM, b: GM, q: GM[i32, 2], k: int, TILE: Const[int] = 32):
    for t in dsl.tiles(a.shape[0], TILE):
        at = a[t]
        bt = b[t]
        q[0, t] = dsl.cast(at // bt, i32)
        q[1, t] = dsl.cast(at % bt, i32)
        q[2, t] = dsl.cast(at // k, i32)
        q[3, t] = dsl.cast(at % k, i32)
        q[4, t] = dsl.cast((at * bt) ^ (at & 5), i32)


@pytest.mark.parametrize("dtype", [np.int32, np.int8])
@pytest.mark.parametrize("k", [0, -1, -3, 7])
def test_integer_divmod(dtype, k: int) -> None:  # type: ignore[no-untyped-def]
    info = np.iinfo(dtype)
    a = np.concatenate([rng.integers(-100, 100, 80), [info.min, info.min, info.max, 7, -7, 7, -7, 0]]).astype(dtype)
    b = np.concatenate([rng.integers(-5, 5, 80), [-1, 0, -1, 2, 2, -2, -2, 0]]).astype(dtype)
    n = len(a)
    na, ia, _, _ = both(divmod_k[2], [a, b, np.zeros((5, n), np.int32), k])
    same(na[2], ia[2])
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    ok = (b64 != 0) & (b64 != -1)
    same(ia[2][0][ok], (a64 // np.where(ok, b64, 1))[ok].astype(np.int32))
    assert (ia[2][0][b64 == 0] == 0).all() and (ia[2][1][b64 == 0] == 0).all()  # x // 0 == x % 0 == 0
    same(ia[2][0][b64 == -1], (-a[b64 == -1]).astype(np.int32))  # wraps: min // -1 == min
    if k == 0:
        assert (ia[2][2] == 0).all() and (ia[2][3] == 0).all()


@dsl.kernel
def float_divmod(a: GM[f32], b: GM[f32], q: GM[f32, 2], TILE: Const[int] = 32):
    for t in dsl.tiles(a.shape[0], TILE):
        q[0, t] = a[t] // b[t]
        q[1, t] = a[t] % b[t]
        q[2, t] = 2.0 - a[t]


def test_float_divmod() -> None:
    a = np.concatenate([rng.standard_normal(60) * 10, [1.0, -1.0, 0.0, np.inf]]).astype(np.float32)
    b = np.concatenate([rng.standard_normal(60), [0.0, 0.0, 0.0, 2.0]]).astype(np.float32)
    na, ia, _, _ = both(float_divmod[1], [a, b, np.zeros((3, len(a)), np.float32)])
    same(na[2], ia[2])


# ------------------------------------------------------------------ scalars, prints, explicit buffers
@dsl.kernel
def scaled(x: GM, y: GM, a: float, b: int, TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = x[t] * a + b


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
def test_scalar_params(dtype) -> None:  # type: ignore[no-untyped-def]
    x = np.concatenate([np.ones(3), rng.standard_normal(100)]).astype(NP[dtype])
    # a scalar meets f16/bf16 tiles as an f32 value (not rounded to the tile's type): for bf16,
    # 1 * (1 + 2**-8 + 2**-30) is 1 + 2**-8 in f32, which ties down to 1.0 when stored
    a = 1.0 + 2.0 ** -8 + 2.0 ** -30
    na, ia, nr, ir = both(scaled[2], [x, np.zeros_like(x), a, -3], profile=True)
    same(na[1], ia[1])
    if dtype == bf16:
        same(ia[1][:3], np.full(3, -2.0, BF16))
    same_runs(nr, ir)


@dsl.kernel
def printer(x: GM[f32], k: int, s: float):
    dsl.print("shape", x.shape[0], "k//0", k // 0, "k%0", k % 0, "s", s * 2.0)
    for t in dsl.tiles(x.shape[0], 4):
        xt = x[t]
        dsl.print("tile", t.start, xt, "half", dsl.cast(xt, f16), "mask", xt > 1.0)
    for i in dsl.range(3):
        if i % 2 == 0:
            dsl.print("even", i, dsl.core_id(), dsl.num_cores())
        else:
            dsl.print("odd", i)


def test_print(capsys) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(10, dtype=np.float32) / 3
    printer[1](x, 7, 0.1)
    native = capsys.readouterr().out
    with interpreting():
        printer[1](x, 7, 0.1)
    interp = capsys.readouterr().out
    assert interp == native
    assert "[core 0] shape 10 k//0 0 k%0 0 s 0.2" in interp
    assert "[core 0] odd 1" in interp


def test_print_many_cores(capsys) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(10, dtype=np.float32)
    printer[3](x, -7, 1.5)
    native = capsys.readouterr().out
    with interpreting():
        printer[3](x, -7, 1.5)
    interp = capsys.readouterr().out
    assert sorted(interp.splitlines()) == sorted(native.splitlines())  # native cores print concurrently


@dsl.kernel
def staged(x: GM[f32], y: GM[f32], TILE: Const[int] = 64):
    a = dsl.alloc(dsl.UB, (TILE,), f32)
    b = dsl.alloc(dsl.UB, (TILE,), f32)
    for t in dsl.tiles(x.shape[0], TILE):
        dsl.copy(a, x[t])
        dsl.copy(b, a)
        dsl.copy(y[t], b)


def test_explicit_buffers_and_moves() -> None:
    x = rng.standard_normal(150).astype(np.float32)
    na, ia, nr, ir = both(staged[2], [x, np.zeros_like(x)], profile=True)
    same(na[1], ia[1])
    same(ia[1], x)
    same_runs(nr, ir)


# ------------------------------------------------------------------ errors
@dsl.kernel
def copy_prefix(x: GM[f32], y: GM[f32], m: int):
    y[0:m] = x[0:m]


@dsl.kernel
def copy_tiles(x: GM[f32], y: GM[f32], TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = x[t]


def _error(launch, args: list) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(dsl.KernelError) as e:
        launch(*args)
    return str(e.value)


def test_check_failure_same_text() -> None:
    x, y = np.ones(10, np.float32), np.zeros(10, np.float32)
    native = _error(copy_prefix[1], [x, y, 12])
    with interpreting():
        interp = _error(copy_prefix[1], [x, y, 12])
    assert interp == native
    assert "error[E404]: slice [0:12] is outside dimension 0 of 'x' (size 10) (core 0)" in interp


@pytest.mark.parametrize("cores", [1, 4])
def test_out_of_bounds_store(cores: int) -> None:
    x, y = np.ones(300, np.float32), np.zeros(150, np.float32)
    native = _error(copy_tiles[cores], [x, y])
    with interpreting():
        interp = _error(copy_tiles[cores], [x, y])
    assert interp == native
    assert "error[E404]: DMA would write elements [128, 192) of 'y' (f32), which has 150 elements" in interp


def test_runtime_capacity_check_same_text() -> None:
    x = np.zeros((4, 100_000), np.float32)
    native = _error(softmax[1], [x, np.zeros_like(x)])
    with interpreting():
        interp = _error(softmax[1], [x, np.zeros_like(x)])
    assert interp == native
    assert "error[E301]: tile of [4, x.shape[1]] f32 for 'xt' needs 4800000 bytes" in interp and "(core 0)" in interp


# ------------------------------------------------------------------ control flow
@dsl.kernel
def blocks(a: GM[f32, 2], b: GM[f32, 2], c: GM[f32, 2], BM: Const[int] = 8, BN: Const[int] = 16):
    for m, n in dsl.tiles2d((a.shape[0], a.shape[1]), (BM, BN)):
        acc = a[m, n]
        for k in dsl.range(3):
            acc = acc + b[m, n]
            if k == 1:
                c[m, n] = acc * 0.5
        if m.index % 2 == 0:
            c[m, n] = acc
        else:
            c[m, n] = acc - 1.0


@pytest.mark.parametrize("cores", [1, 5])
def test_nested_loops_and_ifs(cores: int) -> None:
    a = rng.standard_normal((37, 45)).astype(np.float32)
    b = rng.standard_normal((37, 45)).astype(np.float32)
    na, ia, nr, ir = both(blocks[cores], [a, b, np.zeros_like(a)], profile=True)
    same(na[2], ia[2])
    ref = a + b + b + b
    rows = (np.arange(37) // 8) % 2 == 1
    ref[rows] -= 1
    np.testing.assert_allclose(ia[2], ref, rtol=1e-6)
    same_runs(nr, ir)


# ------------------------------------------------------------------ Core IR directly
def test_interpret_core_from_ir() -> None:
    cfg = load_config()
    params = [ParamSpec("x", "gm", f32, 1, 0), ParamSpec("y", "gm", f32, 1, 3), ParamSpec("z", "gm", f32, 1, 6),
              ParamSpec("TILE", "const", value=16)]
    kir = to_core(vadd.fdef, vadd.env, params, {}, cfg)
    x = rng.standard_normal(50).astype(np.float32)
    z = np.zeros_like(x)
    events = I.interpret_core(kir, [x, x, z, None], cfg, n=2, trace=True)
    same(z, x + x)
    assert events is not None and len(events) == 2 and len(events[0]) > 0


def test_scalar_semantics() -> None:
    from compiler import sexpr as S

    v = S.var("v")
    env = {"v": 7}
    assert I.seval(S.binary("//", v, S.binary("-", v, 7)), env, []) == 0  # x // 0 == 0
    assert I.seval(S.binary("%", S.unary("neg", v), 3), env, []) == 2  # floor modulo
    assert I.seval(S.binary("*", v, 1 << 62), env, []) == I.wrap(7 << 62)  # i64 wraps
    assert I.seval(S.binary("/", S.to_float(v), S.binary("-", S.to_float(v), 7.0)), env, []) == float("inf")
    assert I.seval(S.unary("f2i", S.binary("*", S.to_float(v), 1e300)), env, []) == I.I64_MAX
    assert I.seval(S.unary("rint", S.const(2.5)), env, []) == 2.0


# ------------------------------------------------------------------ known codegen bugs
@dsl.kernel
def carried(x: GM[f32]):
    s = 0
    dsl.print("before", s)
    for i in dsl.range(3):
        dsl.print("in", s)
        s = s + 1
    dsl.print("after", s)


def test_loop_carried_scalar_interpreted(capsys) -> None:  # type: ignore[no-untyped-def]
    with interpreting():
        carried[1](np.zeros(1, np.float32))
    assert capsys.readouterr().out.split("\n")[1:5] == ["[core 0] in 0", "[core 0] in 1", "[core 0] in 2",
                                                        "[core 0] after 3"]


def test_loop_carried_scalar_native(capsys) -> None:  # type: ignore[no-untyped-def]
    carried[1](np.zeros(1, np.float32))
    assert capsys.readouterr().out.split("\n")[1:5] == ["[core 0] in 0", "[core 0] in 1", "[core 0] in 2",
                                                        "[core 0] after 3"]
