"""The cube unit's native code (compiler/backend/cube.py), each emitter compiled standalone and checked
against numpy models of the NZ / zZ / L0B / L0C layouts."""
from __future__ import annotations

import ctypes
import functools

import ml_dtypes
import numpy as np
import pytest

from compiler import jit
from compiler.backend import cube
from compiler.backend.cube_micro import MicroTarget, Tile, choose_tile
from compiler.backend.gen import Gen
from compiler.config import CONFIG
from compiler.host import LEVEL_FEATURES, LEVELS, runnable_levels
from compiler.interp.interpret_rules import fma32
from compiler.ir import Kernel
from dsl.types import DType, bf16, f16, f32, i8, i32

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i8": np.int8, "i32": np.int32}
DT = {"f32": f32, "f16": f16, "bf16": bf16, "i8": i8}
HOST = cube.host_isa()
ISAS = ["generic", "avx512"] + (["amx"] if HOST == "amx" else [])
if HOST == "generic":
    ISAS = ["generic"]
rng = np.random.default_rng(7)


# ------------------------------------------------------------------ harness
_keep: list[object] = []


def build(params: list[tuple[str, str]], emit, extra: str = ""):  # type: ignore[no-untyped-def]
    """Compile `define void @t(params)` whose body `emit(g, *names)` writes; returns a ctypes callable."""
    g = Gen(k=Kernel("t", [], (), 0, []), sym="t")
    emit(g, *["%" + n for n, _ in params])
    text = cube.module(g, "t", ", ".join(f"{t} %{n}" for n, t in params)) + extra
    obj, _ = jit.optimize_to_object(text)
    cty = {"ptr": ctypes.c_void_p, "i64": ctypes.c_int64, "float": ctypes.c_float}
    fn = ctypes.CFUNCTYPE(None, *[cty[t] for _, t in params])(jit.load_object(obj, "t"))
    _keep.append(fn)

    def call(*args: object) -> None:
        fn(*[a.ctypes.data if isinstance(a, np.ndarray) else a for a in args])

    return call


def buffer(n: int, dtype: object, fill: object = 0, align: int = 32) -> np.ndarray:
    """n elements at an address that is `align`-aligned but not 64-aligned when align == 32 (as
    on-chip buffers may be)."""
    dt = np.dtype(dtype)
    raw = np.zeros(n * dt.itemsize + 128, np.uint8)
    off = (-raw.ctypes.data) % 64 + (32 if align == 32 else 0)
    a = raw[off: off + n * dt.itemsize].view(dt)
    a[...] = fill
    return a


def c0(d: DType) -> int:
    return 32 // d.itemsize


def up(x: int, m: int) -> int:
    return -(-x // m) * m


# numpy models of the layouts
def to_nz(x: np.ndarray, rows_pad: int, cols_pad: int, c: int) -> np.ndarray:
    z = np.zeros((rows_pad, cols_pad), x.dtype)
    z[: x.shape[0], : x.shape[1]] = x
    return z.reshape(rows_pad, cols_pad // c, c).transpose(1, 0, 2).reshape(-1)


def to_zz(a: np.ndarray, m_pad: int, k_pad: int, c: int) -> np.ndarray:
    z = np.zeros((m_pad, k_pad), a.dtype)
    z[: a.shape[0], : a.shape[1]] = a
    return z.reshape(m_pad // 16, 16, k_pad // c, c).transpose(0, 2, 1, 3).reshape(-1)


def to_l0b(b: np.ndarray, k_pad: int, n_pad: int, c: int) -> np.ndarray:
    z = np.zeros((k_pad, n_pad), b.dtype)
    z[: b.shape[0], : b.shape[1]] = b
    return z.reshape(k_pad // c, c, n_pad // 16, 16).transpose(0, 2, 1, 3).reshape(-1)


def to_l0c(cm: np.ndarray) -> np.ndarray:
    m_pad, n_pad = cm.shape
    return cm.reshape(m_pad, n_pad // 16, 16).transpose(1, 0, 2).reshape(-1)


def from_l0c(flat: np.ndarray, m_pad: int, n_pad: int) -> np.ndarray:
    return flat.reshape(n_pad // 16, m_pad, 16).transpose(1, 0, 2).reshape(m_pad, n_pad)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a.view(np.uint8), b.view(np.uint8))


def ints(shape: tuple[int, int], dt: str, lo: int = -4, hi: int = 5) -> np.ndarray:
    return rng.integers(lo, hi, shape).astype(NP[dt])


# ------------------------------------------------------------------ compiled emitters (one per variant)
@functools.lru_cache(maxsize=None)
def nd2nz_fn(dt: str):  # type: ignore[no-untyped-def]
    return build([("d", "ptr"), ("s", "ptr"), ("r", "i64"), ("c", "i64"), ("st", "i64"), ("rp", "i64"), ("cp", "i64")],
                 lambda g, *a: cube.gen_nd2nz(g, *a, DT[dt]))


@functools.lru_cache(maxsize=None)
def l0a_fn(dt: str, tr: bool):  # type: ignore[no-untyped-def]
    return build([("d", "ptr"), ("s", "ptr"), ("m", "i64"), ("k", "i64"), ("mp", "i64"), ("kp", "i64")],
                 lambda g, *a: cube.gen_l1_to_l0a(g, *a, DT[dt], tr))


@functools.lru_cache(maxsize=None)
def l0b_fn(dt: str, tr: bool):  # type: ignore[no-untyped-def]
    return build([("d", "ptr"), ("s", "ptr"), ("k", "i64"), ("n", "i64"), ("kp", "i64"), ("np", "i64")],
                 lambda g, *a: cube.gen_l1_to_l0b(g, *a, DT[dt], tr))


MMAD_PARAMS = [("c", "ptr"), ("a", "ptr"), ("b", "ptr"), ("m", "i64"), ("n", "i64"), ("k", "i64"), ("mp", "i64"),
               ("kp", "i64"), ("np", "i64"), ("init", "i64"), ("s", "ptr")]
# lets a test play the kernel refusing AMX state (the global the AMX path consults)
SET_AMX = "\ndefine void @set_amx(i32 %v) {\n  store i32 %v, ptr @vinci_amx_state, align 4\n  ret void\n}\n"


@functools.lru_cache(maxsize=None)
def mmad_fn(dt: str, isa: str):  # type: ignore[no-untyped-def]
    return build(MMAD_PARAMS, lambda g, *a: cube.gen_mmad(g, *a[:9], DT[dt], a[9], a[10], isa=isa))


@functools.lru_cache(maxsize=None)
def fix_fn(acc: str, out: str, relu: bool, scaled: bool):  # type: ignore[no-untyped-def]
    params = [("d", "ptr"), ("s", "ptr"), ("r", "i64"), ("c", "i64"), ("st", "i64"), ("mp", "i64"), ("sc", "float")]
    return build(params, lambda g, d, s, r, c, st, mp, sc: cube.gen_fix(
        g, d, s, r, c, st, mp, {"f32": f32, "i32": i32}[acc], {**DT, "i32": i32}[out], relu, sc if scaled else None))


# ------------------------------------------------------------------ ND -> NZ
SHAPES_2D = [(1, 1), (17, 31), (16, 32), (5, 97), (32, 64), (3, 33)]


@pytest.mark.parametrize("dt", list(DT))
@pytest.mark.parametrize("rows,cols", SHAPES_2D)
def test_nd2nz(dt: str, rows: int, cols: int) -> None:
    c = c0(DT[dt])
    rp, cp = up(rows, 16) + 16, up(cols, c) + c  # room to check the zero fill
    stride = cols + 5
    src = ints((rows, stride), dt)
    dst = buffer(rp * cp, NP[dt], fill=7)
    nd2nz_fn(dt)(dst, src, rows, cols, stride, rp, cp)
    assert same_bits(dst, to_nz(src[:, :cols], rp, cp, c))


def test_nd2nz_exact_fit_reads_only_the_window() -> None:
    # the window ends at the last element of the array: a tail run must not read past it
    rows, cols = 3, 13
    src = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    dst = buffer(16 * 16, np.float32, fill=np.nan)
    nd2nz_fn("f32")(dst, src, rows, cols, cols, 16, 16)
    assert same_bits(dst, to_nz(src, 16, 16, 8))


# ------------------------------------------------------------------ L1 -> L0A / L0B
@pytest.mark.parametrize("dt", list(DT))
@pytest.mark.parametrize("tr", [False, True])
@pytest.mark.parametrize("m,k", [(1, 1), (17, 31), (16, 32), (33, 69), (48, 64)])
def test_l1_to_l0a(dt: str, tr: bool, m: int, k: int) -> None:
    c = c0(DT[dt])
    mp, kp = up(m, 16) + 16, up(k, c) + c
    a = ints((m, k), dt)
    l1 = to_nz(a.T.copy(), up(kp, 16), up(mp, c), c) if tr else to_nz(a, mp, kp, c)
    src = buffer(l1.size, NP[dt])
    src[:] = l1
    dst = buffer(mp * kp, NP[dt])
    l0a_fn(dt, tr)(dst, src, m, k, mp, kp)
    assert same_bits(dst, to_zz(a, mp, kp, c))


@pytest.mark.parametrize("dt", list(DT))
@pytest.mark.parametrize("tr", [False, True])
@pytest.mark.parametrize("k,n", [(1, 1), (31, 17), (32, 16), (69, 33), (64, 48)])
def test_l1_to_l0b(dt: str, tr: bool, k: int, n: int) -> None:
    c = c0(DT[dt])
    kp, np_ = up(k, c) + c, up(n, 16) + 16
    b = ints((k, n), dt)
    l1 = to_nz(b.T.copy(), np_, kp, c) if tr else to_nz(b, up(kp, 16), up(np_, c), c)
    src = buffer(l1.size, NP[dt])
    src[:] = l1
    dst = buffer(kp * np_, NP[dt])
    l0b_fn(dt, tr)(dst, src, k, n, kp, np_)
    assert same_bits(dst, to_l0b(b, kp, np_, c))


@pytest.mark.parametrize("dt", ["f32", "i8"])
@pytest.mark.parametrize("tr", [False, True])
def test_l1_taller_than_l0(dt: str, tr: bool) -> None:
    """An L1 buffer with more rows than the L0 one (src_rows_pad) feeds both L0A and L0B."""
    c = c0(DT[dt])
    m = k = n = 40
    pad = 64  # L0 pads; the L1 buffers are 96 rows tall
    a, b = ints((m, k), dt), ints((k, n), dt)
    la = to_nz(a.T.copy(), 96, pad, c) if tr else to_nz(a, 96, pad, c)
    lb = to_nz(b.T.copy(), 96, pad, c) if tr else to_nz(b, 96, pad, c)
    fa = build([("d", "ptr"), ("s", "ptr")], lambda g, d, s: cube.gen_l1_to_l0a(
        g, d, s, str(m), str(k), str(pad), str(pad), DT[dt], tr, src_rows_pad="96"))
    fb = build([("d", "ptr"), ("s", "ptr")], lambda g, d, s: cube.gen_l1_to_l0b(
        g, d, s, str(k), str(n), str(pad), str(pad), DT[dt], tr, src_rows_pad="96"))
    for fn, l1, want in ((fa, la, to_zz(a, pad, pad, c)), (fb, lb, to_l0b(b, pad, pad, c))):
        src, dst = buffer(l1.size, NP[dt]), buffer(pad * pad, NP[dt])
        src[:] = l1
        fn(dst, src)
        assert same_bits(dst, want)


# ------------------------------------------------------------------ Mmad
MNK = [(1, 1, 1), (17, 31, 13), (16, 16, 16), (33, 47, 69), (64, 64, 64), (5, 80, 3), (3, 5, 0), (40, 100, 77),
       (1, 1, 33), (128, 128, 64)]


def run_mmad(dt: str, isa: str, a: np.ndarray, b: np.ndarray, c_init: np.ndarray | None,
             pads: tuple[int, int, int], fn: object = None) -> np.ndarray:
    """C[:m, :n] after one Mmad. Everything in A and B outside the m x k and k x n operands is
    garbage (NaN / 99): only exactly k terms may reach the result, and rows / columns past m / n
    only reach C's padding."""
    d = DT[dt]
    c = c0(d)
    (m, k), n = a.shape, b.shape[1]
    mp, kp, np_ = pads
    acc = np.int32 if dt == "i8" else np.float32
    junk = np.nan if d.is_float else 99
    da = np.full((mp, kp), junk).astype(NP[dt])
    db = np.full((kp, np_), junk).astype(NP[dt])
    da[:m, :k], db[:k, :n] = a, b
    ab, bb = buffer(mp * kp, NP[dt]), buffer(kp * np_, NP[dt])
    ab[:], bb[:] = to_zz(da, mp, kp, c), to_l0b(db, kp, np_, c)
    cm = np.zeros((mp, np_), acc) if c_init is None else c_init
    cb = buffer(mp * np_, acc)
    cb[:] = to_l0c(cm)
    scratch = buffer(mp * kp + kp * np_ + 16, np.float32, fill=np.nan, align=64)
    (fn or mmad_fn(dt, isa))(cb, ab, bb, m, n, k, mp, kp, np_, 1 if c_init is None else 0, scratch)
    return from_l0c(cb, mp, np_)[:m, :n]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dt", list(DT))
@pytest.mark.parametrize("m,n,k", MNK)
@pytest.mark.parametrize("init", [True, False])
def test_mmad_exact(isa: str, dt: str, m: int, n: int, k: int, init: bool) -> None:
    """Small integers: every product and sum is exact, so all paths must agree bit for bit."""
    c = c0(DT[dt])
    pads = (up(m, 16) + 16, up(k, c) + c, up(n, 16))
    a, b = ints((m, k), dt), ints((k, n), dt)
    acc = np.int32 if dt == "i8" else np.float32
    c_init = None if init else rng.integers(-3, 4, (pads[0], pads[2])).astype(acc)
    got = run_mmad(dt, isa, a, b, c_init, pads)
    want = a.astype(np.float64) @ b.astype(np.float64)
    if c_init is not None:
        want += c_init[:m, :n]
    np.testing.assert_array_equal(got, want.astype(acc))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m,n,k", [(17, 31, 13), (64, 96, 200), (128, 128, 64)])
def test_mmad_random_floats(isa: str, dt: str, m: int, n: int, k: int) -> None:
    c = c0(DT[dt])
    pads = (up(m, 16), up(k, c), up(n, 16))
    a = rng.standard_normal((m, k)).astype(NP[dt])
    b = rng.standard_normal((k, n)).astype(NP[dt])
    got = run_mmad(dt, isa, a, b, None, pads)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * k)


def test_micro_tiles() -> None:
    """The micro-tile each vector ISA gets (compiler/backend/cube_micro.py's table)."""
    assert choose_tile(16, 32, True) == Tile(8, 48, 16)  # AVX-512: 24 zmm accumulators
    assert choose_tile(8, 16, True) == Tile(6, 16, 8)  # AVX2 + FMA: 12 ymm
    assert choose_tile(4, 16, False) == Tile(5, 8, 4)  # SSE4.2, fmul + fadd: 10 xmm
    for lv in LEVELS:
        t = MicroTarget.of(LEVEL_FEATURES[lv])
        assert (t.lanes, t.vregs) == {"x86-64-v2": (4, 16), "x86-64-v3": (8, 16), "x86-64-v4": (16, 32)}[lv]


@functools.lru_cache(maxsize=None)
def mmad_level_fn(dt: str, level: str):  # type: ignore[no-untyped-def]
    """The Mmad generated for `level`'s vector ISA, compiled for that level when this host can run it
    (else for the host: a wider level's vectors are legalised onto this host's)."""
    t = MicroTarget.of(LEVEL_FEATURES[level])
    old = CONFIG.host_isa
    CONFIG.host_isa = level if level in runnable_levels() else old
    try:
        return build(MMAD_PARAMS, lambda g, *a: cube.gen_mmad(g, *a[:9], DT[dt], a[9], a[10], isa="generic",
                                                               target=t))
    finally:
        CONFIG.host_isa = old


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dt", list(DT))
@pytest.mark.parametrize("m,n,k", MNK + [(80, 40, 21), (96, 144, 40)])
def test_mmad_every_level(level: str, dt: str, m: int, n: int, k: int) -> None:
    """Each level's micro-tile (rows not dividing 16 with their row tails, columns narrower than a
    fractal, fmul + fadd without FMA, f16 without F16C), exact on small integers, accumulating."""
    c = c0(DT[dt])
    pads = (up(m, 16) + 16, up(k, c) + c, up(n, 16))
    a, b = ints((m, k), dt), ints((k, n), dt)
    acc = np.int32 if dt == "i8" else np.float32
    c_init = rng.integers(-3, 4, (pads[0], pads[2])).astype(acc)
    fn = mmad_level_fn(dt, level)
    got = run_mmad(dt, "generic", a, b, c_init, pads, fn=fn)
    want = a.astype(np.float64) @ b.astype(np.float64) + c_init[:m, :n]
    np.testing.assert_array_equal(got, want.astype(acc))


@pytest.mark.parametrize("level", LEVELS)
def test_mmad_rounding_every_level(level: str) -> None:
    """Random f32: one rounding per k (fma) where the level has FMA, two (fmul, fadd) on x86-64-v2,
    k in order, as compiler.interp.interpret_rules.mmad_values models it."""
    m, n, k = 29, 40, 37
    pads = (up(m, 16), up(k, 8), up(n, 16))
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    got = run_mmad("f32", "generic", a, b, None, pads, fn=mmad_level_fn("f32", level))
    want = np.zeros((m, n), np.float32)
    fused = MicroTarget.of(LEVEL_FEATURES[level]).has("fma")
    for kk in range(k):
        x, y = a[:, kk, None], b[None, kk, :]
        want = fma32(x, y, want) if fused else want + x * y
    np.testing.assert_array_equal(got, want)


def test_mmad_i8_extremes() -> None:
    """-128 * -128 summed over k: the full i8 range, accumulated in i32."""
    for isa in ISAS:
        a = np.full((16, 64), -128, np.int8)
        b = np.full((64, 16), -128, np.int8)
        b[::3] = 127
        got = run_mmad("i8", isa, a, b, None, (16, 64, 16))
        np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_mmad_accumulates_over_calls() -> None:
    """init on the first k-slice, accumulate the rest: the k loop of a kernel."""
    for isa in ISAS:
        m, n, k = 40, 50, 96
        a, b = ints((m, k), "f16"), ints((k, n), "f16")
        cm = None
        for k0 in range(0, k, 32):
            out = run_mmad("f16", isa, a[:, k0:k0 + 32], b[k0:k0 + 32], cm, (48, 32, 64))
            cm = np.zeros((48, 64), np.float32)
            cm[:m, :n] = out
        np.testing.assert_array_equal(cm[:m, :n], (a.astype(np.float32) @ b.astype(np.float32)))


@pytest.mark.skipif(HOST != "amx", reason="host has no AMX")
def test_mmad_amx_refused_falls_back() -> None:
    """If the OS refuses AMX state, the same code runs the vector path instead."""
    def emit(g, *a):  # type: ignore[no-untyped-def]
        # play the answer the process got from the kernel (0: not asked yet, 1: granted, 2: refused)
        g.emit(f"store i32 {g.op(f'trunc i64 {a[11]} to i32')}, ptr @vinci_amx_state, align 4")
        cube.gen_mmad(g, *a[:9], bf16, a[9], a[10], isa="amx")

    fn = build(MMAD_PARAMS + [("state", "i64")], emit)
    m, n, k = 33, 47, 69
    mp, kp, np_ = 48, 80, 48
    a, b = ints((m, k), "bf16"), ints((k, n), "bf16")
    a[0, :2] = 3, 1  # tells the paths' scratch contents apart (below)
    la, lb = buffer(mp * kp, NP["bf16"]), buffer(kp * np_, NP["bf16"])
    la[:], lb[:] = to_zz(a, mp, kp, 16), to_l0b(b, kp, np_, 16)
    for state in (2, 1, 0):
        cb = buffer(mp * np_, np.float32, fill=np.nan)
        scratch = buffer(mp * kp + kp * np_ + 16, np.float32, fill=np.nan, align=64)
        fn(cb, la, lb, m, n, k, mp, kp, np_, 1, scratch, state)
        np.testing.assert_array_equal(from_l0c(cb, mp, np_)[:m, :n], (a.astype(np.float64) @ b).astype(np.float32))
        # the vector path leaves A converted to f32 in scratch; AMX leaves bf16 tiles there
        assert (scratch[0] == np.float32(a[0, 0])) == (state == 2)


# ------------------------------------------------------------------ Fixpipe
def fix_ref(acc: np.ndarray, out: str, relu: bool, scale: float | None) -> np.ndarray:
    x = acc.astype(np.int64) if acc.dtype == np.int32 else acc.astype(np.float64)
    if scale is not None:
        x = (acc.astype(np.float32) * np.float32(scale)).astype(np.float64)
    if relu:
        x = np.maximum(x, 0)
    if out in ("f32", "f16", "bf16"):
        with np.errstate(over="ignore"):  # overflows to inf, as the hardware cast does
            if acc.dtype == np.int32 and scale is None:
                return x.astype(NP[out])  # i32 -> f16/bf16 directly: one rounding
            return x.astype(np.float32).astype(NP[out])
    info = np.iinfo(NP[out])
    return np.clip(np.rint(x), info.min, info.max).astype(NP[out])


FIX_CASES = [("f32", "f32"), ("f32", "f16"), ("f32", "bf16"), ("f32", "i8"), ("f32", "i32"), ("i32", "i32"),
             ("i32", "i8"), ("i32", "f32"), ("i32", "f16"), ("i32", "bf16")]


@pytest.mark.parametrize("acc,out", FIX_CASES)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("scale", [None, 0.37])
@pytest.mark.parametrize("rows,cols", [(1, 1), (17, 31), (32, 48), (5, 16)])
def test_fix(acc: str, out: str, relu: bool, scale: float | None, rows: int, cols: int) -> None:
    mp, np_ = up(rows, 16) + 16, up(cols, 16) + 16
    if acc == "f32":
        cm = (rng.standard_normal((mp, np_)) * 300).astype(np.float32)
        cm[0, 0] = 2.5  # ties round to even
        cm.flat[1 % cm.size] = -1e9  # saturates
    else:
        cm = rng.integers(-70000, 70000, (mp, np_)).astype(np.int32)
    src = buffer(mp * np_, NP[acc])
    src[:] = to_l0c(cm)
    stride = cols + 3
    dst = buffer(rows * stride + 16, NP[out], fill=0)
    dst_view = dst[: rows * stride].reshape(rows, stride)
    sentinel = dst_view[:, cols:].copy()
    fix_fn(acc, out, relu, scale is not None)(dst, src, rows, cols, stride, mp, scale or 0.0)
    want = fix_ref(cm[:rows, :cols], out, relu, scale)
    assert same_bits(np.ascontiguousarray(dst_view[:, :cols]), want)
    assert same_bits(dst_view[:, cols:].copy(), sentinel)  # nothing written past cols


# ------------------------------------------------------------------ the whole chain
@pytest.mark.parametrize("dt", list(DT))
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_chain_gm_to_gm(dt: str, ta: bool, tb: bool) -> None:
    """GM -> nd2nz -> L1 -> L0A/L0B (transposed or not) -> mmad -> fix -> GM, as a kernel runs it."""
    d = DT[dt]
    c = c0(d)
    m, n, k = 37, 45, 51
    mp, kp, np_ = up(m, 16), up(k, c), up(n, 16)
    a, b = ints((m, k), dt), ints((k, n), dt)
    ga = a.T.copy() if ta else a
    gb = b.T.copy() if tb else b
    acc = i32 if dt == "i8" else f32
    out = "i32" if dt == "i8" else "f32"

    def emit(g, pa, pb, pc, l1a, l1b, l0a, l0b, l0c, s):  # type: ignore[no-untyped-def]
        if ta:  # L1 holds K x M
            cube.gen_nd2nz(g, l1a, pa, str(k), str(m), str(m), up(kp, 16), up(mp, c), d)
        else:
            cube.gen_nd2nz(g, l1a, pa, str(m), str(k), str(k), mp, kp, d)
        if tb:  # L1 holds N x K
            cube.gen_nd2nz(g, l1b, pb, str(n), str(k), str(k), np_, kp, d)
        else:
            cube.gen_nd2nz(g, l1b, pb, str(k), str(n), str(n), up(kp, 16), up(np_, c), d)
        cube.gen_l1_to_l0a(g, l0a, l1a, str(m), str(k), mp, kp, d, ta)
        cube.gen_l1_to_l0b(g, l0b, l1b, str(k), str(n), kp, np_, d, tb)
        cube.gen_mmad(g, l0c, l0a, l0b, str(m), str(n), str(k), mp, kp, np_, d, "1", s)
        cube.gen_fix(g, pc, l0c, str(m), str(n), str(n), mp, acc, {"f32": f32, "i32": i32}[out], False, None)

    fn = build([(x, "ptr") for x in ("a", "b", "c", "l1a", "l1b", "l0a", "l0b", "l0c", "s")], emit)
    big = up(max(mp, np_, kp), 32) ** 2
    bufs = [buffer(big, NP[dt], fill=np.nan if d.is_float else 0) for _ in range(4)]
    l0c = buffer(mp * np_, np.float32)
    scratch = buffer(mp * kp + kp * np_ + 16, np.float32, align=64)
    cout = np.full((m, n), -1, NP[out])
    fn(np.ascontiguousarray(ga), np.ascontiguousarray(gb), cout, *bufs, l0c, scratch)
    np.testing.assert_array_equal(cout, (a.astype(np.int64) @ b.astype(np.int64)).astype(NP[out]))
