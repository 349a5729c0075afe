"""Random numbers in kernels: `dsl.rand` / `dsl.randint` (Philox 4x32-10).

Known answers from Random123's tests/kat_vectors (the reference numpy rule, the native emitter on its
own, and whole kernels), the numbering (an element's value depends on seed and its word number only:
not on block_dim, TILE, VINCI_THREADS or the host ISA), native == interpreter bit for bit with the
same trace events and cycles, the V-pipe cost, the distribution, errors, and the dropout example.
"""
from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

import numpy as np
import pytest
from dropout import dropout
from hypothesis import given, settings
from hypothesis import strategies as st

import dsl
from compiler import jit
from compiler.backend import codegen_rng, cube
from compiler.backend.gen import Gen
from compiler.config import CONFIG
from compiler.host import runnable_levels
from compiler.interp.interpret_rng import philox4x32_10, rng_values
from compiler.ir import Kernel
from dsl import GM, Const, f32, i32
from simulator.isa import VECTOR_REPEAT_COST, Instr
from tests.compiler.test_errors import expect

# Random123 tests/kat_vectors, the philox4x32 10 lines: counter (4 words), key (2 words) -> output (4 words)
KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
LEVELS = runnable_levels()
_keep: list[object] = []


@contextlib.contextmanager
def interpreting() -> Iterator[None]:
    old = CONFIG.interpret
    CONFIG.interpret = True
    try:
        yield
    finally:
        CONFIG.interpret = old


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    old = CONFIG.threads
    CONFIG.threads = n
    try:
        yield
    finally:
        CONFIG.threads = old


@dsl.kernel
def rand1d(y: GM[f32], seed: int, offset: int, TILE: Const[int] = 1000):
    for t in dsl.tiles(y.shape[0], TILE):
        y[t] = dsl.rand((t.len,), seed, offset + t.start)


@dsl.kernel
def bits1d(y: GM[i32], seed: int, offset: int, TILE: Const[int] = 256):
    for t in dsl.tiles(y.shape[0], TILE):
        y[t] = dsl.randint((t.len,), seed, offset + t.start)


@dsl.kernel
def rand2d(y: GM[f32, 2], seed: int, offset: int, BR: Const[int] = 8, BC: Const[int] = 40):
    """Blocks of an R x C tensor: each element takes the word of its flat position."""
    for r, c in dsl.tiles2d((y.shape[0], y.shape[1]), (BR, BC)):
        y[r, c] = dsl.rand((r.len, c.len), seed, offset + r.start * y.shape[1] + c.start, stride=y.shape[1])


@dsl.kernel
def rows2d(y: GM[i32, 2], seed: int, offset: int, BR: Const[int] = 5):
    """Whole rows: the default stride is the tile's width, so the tile is numbered row-major."""
    for r in dsl.tiles(y.shape[0], BR):
        y[r, :] = dsl.randint(y[r, :].shape, seed, offset + r.start * y.shape[1])


def want(seed: int, offset: int, shape: tuple[int, ...], uniform: bool = True) -> np.ndarray:
    """The reference: element at flat position i of the tensor takes word offset + i."""
    n = int(np.prod(shape))
    return rng_values(uniform, seed, offset, n, 1, n).reshape(shape)


# ------------------------------------------------------------------ known answers
@pytest.mark.parametrize("ctr,key,out", KAT)
def test_reference_matches_random123(ctr, key, out) -> None:  # type: ignore[no-untyped-def]
    assert tuple(int(w) for w in philox4x32_10(ctr, key)) == out


def _native_philox(n: int | None):  # type: ignore[no-untyped-def]
    """The emitter's Philox on its own: out[4 * i + k] = word k of block i, n lanes at a time (None: scalar)."""
    g = Gen(k=Kernel("t", [], (), 0, []), sym="t")
    lanes = 1 if n is None else n
    t = "i32" if n is None else f"<{n} x i32>"

    def at(base: str, i: str, w: int) -> str:
        first = g.op(f"mul i64 {i}, {4 * lanes}")
        return g.op(f"getelementptr i32, ptr {base}, i64 {g.op(f'add i64 {first}, {w * lanes}')}")

    def body(i: str) -> None:
        ctr = [g.op(f"load {t}, ptr {at('%ctr', i, w)}, align 4") for w in range(4)]
        k0 = g.op("load i32, ptr %key, align 4")
        k1 = g.op(f"load i32, ptr {g.op('getelementptr i32, ptr %key, i64 1')}, align 4")
        for w, v in enumerate(codegen_rng.philox(g, n, ctr, k0, k1)):
            g.emit(f"store {t} {v}, ptr {at('%out', i, w)}, align 4")

    g.loop("%n", body)
    obj, _ = jit.optimize_to_object(cube.module(g, "t", "ptr %out, ptr %ctr, ptr %key, i64 %n"))
    assert [s for s in jit.undefined_symbols(obj) if s != "_GLOBAL_OFFSET_TABLE_"] == []
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        jit.load_object(obj, "t"))
    _keep.append(fn)

    def run(ctrs: np.ndarray, key: tuple[int, int]) -> np.ndarray:
        """ctrs: (groups, 4, lanes) uint32 -> (groups, 4, lanes) outputs."""
        c = np.ascontiguousarray(ctrs, np.uint32)
        k = np.array(key, np.uint32)
        out = np.zeros_like(c)
        fn(out.ctypes.data, c.ctypes.data, k.ctypes.data, c.shape[0])
        return out

    return run


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("n", [None, 8])
def test_native_philox_matches_random123(level: str, n: int | None, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The native emitter (scalar and 8-lane vector forms) at every ISA level this host runs."""
    monkeypatch.setattr(CONFIG, "host_isa", level)
    run = _native_philox(n)
    lanes = 1 if n is None else n
    for ctr, key, out in KAT:
        ctrs = np.repeat(np.array(ctr, np.uint32)[None, :, None], lanes, axis=2)
        got = run(ctrs, key)
        assert (got == np.array(out, np.uint32)[None, :, None]).all(), [hex(w) for w in got[0, :, 0]]
    # and random counters: every lane its own, against the reference
    rng = np.random.default_rng(3)
    ctrs = rng.integers(0, 1 << 32, (5, 4, lanes), dtype=np.uint64).astype(np.uint32)
    got = run(ctrs, (0xDEADBEEF, 0x12345678))
    ref = philox4x32_10(tuple(ctrs[:, w, :] for w in range(4)), (0xDEADBEEF, 0x12345678))
    np.testing.assert_array_equal(got, np.stack(ref, axis=1))


def test_kernel_words_are_the_philox_blocks() -> None:
    """Word n of seed s is word n % 4 of the block with counter (n // 4, 0, 0, 0) and key (s lo, s hi)."""
    y = np.zeros(4, np.int32)
    bits1d[1](y, 0, 0)
    assert [int(w) & 0xFFFFFFFF for w in y] == list(KAT[0][2])
    seed = 0x299F31D0A4093822
    y = np.zeros(9, np.int32)
    bits1d[1](y, seed, 4 * 0x85A308D3 + 1)  # words 1..3 of block 0x85a308d3, then the next blocks
    blocks = [philox4x32_10((b, 0, 0, 0), (0xA4093822, 0x299F31D0)) for b in (0x85A308D3, 0x85A308D4, 0x85A308D5)]
    flat = [int(w) for blk in blocks for w in blk]
    assert [int(w) & 0xFFFFFFFF for w in y] == flat[1:10]


@pytest.mark.parametrize("level", LEVELS)
def test_machine_code_is_vectorised_with_no_runtime_calls(level: str, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """The 32x32 -> 64 multiplies are pmuludq (SSE4.1 and up); nothing calls a named helper (libm, compiler-rt)."""
    import re
    from pathlib import Path

    from compiler.cli import main

    monkeypatch.setattr(CONFIG, "host_isa", level)
    path = Path(__file__).resolve().parents[2] / "examples" / "kernels" / "dropout.py"
    assert main(["compile", f"{path}::dropout", "--shape", "x=10000", "--shape", "y=10000", "--const", "p=0.1",
                 "--const", "seed=1", "--const", "offset=0", "--emit", "asm"]) == 0
    asm = capsys.readouterr().out
    named = {m for m in re.findall(r"\bcall[a-z]*\s+([A-Za-z_.$][\w.$@]*)", asm) if not m.startswith("vinci_")}
    assert named == set(), named
    assert "pmuludq" in asm
    if level == "x86-64-v3":
        assert re.search(r"vpmuludq\s+%ymm", asm)


# ------------------------------------------------------------------ numbering and reproducibility
@pytest.mark.parametrize("cores", [1, 3, 24])
@pytest.mark.parametrize("tile", [40, 257, 1000, 4096])
def test_same_numbers_whatever_cores_and_tiles(cores: int, tile: int) -> None:
    n, seed, offset = 20_011, 0x5EED, 12_345
    y = np.full(n, -1, np.float32)
    rand1d[cores](y, seed, offset, TILE=tile)
    np.testing.assert_array_equal(y, want(seed, offset, (n,)))


@pytest.mark.parametrize("nthreads", [1, 2])
def test_same_numbers_whatever_host_threads(nthreads: int) -> None:
    y = np.zeros(50_000, np.float32)
    with threads(nthreads):
        rand1d[24](y, 99, 0)
    np.testing.assert_array_equal(y, want(99, 0, (50_000,)))


@pytest.mark.parametrize("offset", [0, 1, 2, 3, 5, 1 << 40, -7, (1 << 63) - 3])
@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 31, 32, 33, 35, 100, 1000])
def test_native_equals_interpreter_and_reference(offset: int, n: int) -> None:
    """Every alignment of the first word (partial blocks at either end of a row), short and long rows,
    offsets whose words wrap past 2**64."""
    seed = -(1 << 62) + 12345  # the key's high word matters
    for kern, dt, uniform in ((rand1d, np.float32, True), (bits1d, np.int32, False)):
        a, b = np.zeros(n, dt), np.zeros(n, dt)
        kern[2](a, seed, offset)
        with interpreting():
            kern[2](b, seed, offset)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, want(seed, offset, (n,), uniform))


@pytest.mark.parametrize("shape", [(1, 1), (8, 40), (13, 97), (30, 7)])
@pytest.mark.parametrize("cores", [1, 3, 24])
def test_2d_blocks_number_by_flat_position(shape: tuple[int, int], cores: int) -> None:
    a = np.zeros(shape, np.float32)
    rand2d[cores](a, 7, 3)
    np.testing.assert_array_equal(a, want(7, 3, shape))
    b = np.zeros(shape, np.float32)
    with interpreting():
        rand2d[cores](b, 7, 3)
    np.testing.assert_array_equal(a, b)
    c = np.zeros(shape, np.float32)
    rand2d[cores](c, 7, 3, BR=3, BC=16)  # other blocks, same numbers
    np.testing.assert_array_equal(a, c)


@dsl.kernel
def strided(y: GM[i32, 2], seed: int, offset: int, stride: int, BR: Const[int] = 4, BC: Const[int] = 48):
    for r, c in dsl.tiles2d((y.shape[0], y.shape[1]), (BR, BC)):
        y[r, c] = dsl.randint((r.len, c.len), seed, offset + r.start * stride + c.start, stride=stride)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 9), cols=st.integers(0, 150), seed=st.integers(-(1 << 63), (1 << 63) - 1),
       offset=st.integers(-(1 << 63), (1 << 63) - 1), stride=st.integers(-300, 300), cores=st.sampled_from([1, 3, 24]))
def test_any_numbering_matches_the_reference(rows: int, cols: int, seed: int, offset: int, stride: int,
                                             cores: int) -> None:
    """Element (r, c) is word offset + r * stride + c (wrapping), whatever the alignment, stride and sign."""
    y = np.full((rows, cols), -1, np.int32)
    strided[cores](y, seed, offset, stride)
    np.testing.assert_array_equal(y, rng_values(False, seed, offset, stride, rows, cols))


def test_2d_rows_default_stride_and_shape_of_a_window() -> None:
    a = np.zeros((23, 50), np.int32)
    rows2d[3](a, 11, 1)
    np.testing.assert_array_equal(a, want(11, 1, (23, 50), uniform=False))


def test_profiles_agree_and_cost_is_honest() -> None:
    """Same events and cycles natively and interpreted; the V pipe charges VRAND 25 cycles per 256-byte
    repeat (64 values), 25x an add."""
    n, tile = 10_000, 1000
    runs = []
    for interp in (False, True):
        y = np.zeros(n, np.float32)
        with interpreting() if interp else contextlib.nullcontext():
            runs.append(rand1d[3].profile(y, 1, 0, TILE=tile))
    nr, ir = runs
    for pn, pi in zip(nr.profile.per_core, ir.profile.per_core):
        np.testing.assert_array_equal(pn.events, pi.events)
    assert nr.cycles == ir.cycles and nr.profile.busy == ir.profile.busy
    assert VECTOR_REPEAT_COST[Instr.VRAND] == 25 and VECTOR_REPEAT_COST[Instr.VRANDINT] == 22
    repeats = (n // tile) * -(-tile * 4 // 256)
    assert nr.profile.work["V"] == repeats * 25
    ev = np.concatenate([p.events for p in nr.profile.per_core])
    r = ev[ev["instr"] == Instr.VRAND]
    assert len(r) == n // tile and (r["a"] == tile).all() and (r["b"] == 4).all() and (r["c"] == 1).all()


# ------------------------------------------------------------------ distribution
def test_uniform_distribution() -> None:
    n = 1_000_000
    y = np.zeros(n, np.float32)
    rand1d[24](y, 20240601, 0, TILE=4096)
    assert y.min() >= 0.0 and y.max() < 1.0
    assert abs(y.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)  # 5 sigma
    assert abs(y.var() - 1 / 12) < 1e-3
    counts = np.bincount((y * 100).astype(np.int64), minlength=100)
    chi2 = ((counts - n / 100) ** 2 / (n / 100)).sum()
    assert chi2 < 160.4  # the 0.9999 quantile of chi-square with 99 degrees of freedom
    # pairs of neighbours are independent too: a 10 x 10 grid of (y[2i], y[2i+1])
    pairs = np.bincount((y[0::2] * 10).astype(np.int64) * 10 + (y[1::2] * 10).astype(np.int64), minlength=100)
    chi2 = ((pairs - n / 200) ** 2 / (n / 200)).sum()
    assert chi2 < 160.4
    assert len(np.unique(y)) > 0.96 * n  # 24 bits: few repeats among 1e6


def test_rand_is_the_top_24_bits_of_randint() -> None:
    """Natively, rand = (word >> 8) * 2**-24 of randint's word, on 2**20 words: never 1.0, even for the
    largest words (the stream has some >= 0xffff0000 here); and the formula on the extreme words."""
    n = 1 << 20
    u, b = np.zeros(n, np.float32), np.zeros(n, np.int32)
    rand1d[4](u, 77, 5)
    bits1d[4](b, 77, 5)
    w = b.view(np.uint32)
    np.testing.assert_array_equal(u, (w >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24))
    assert w.max() >= 0xFFFF0000 and u.max() < 1.0 and u.min() >= 0.0
    top = np.array([0, 0xFF, 0x100, 0xFFFFFF00, 0xFFFFFFFF], np.uint32)
    got = (top >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    assert got.tolist() == [0.0, 0.0, 2.0 ** -24, 1 - 2.0 ** -24, 1 - 2.0 ** -24]


# ------------------------------------------------------------------ errors
def test_rand_of_a_3d_shape(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(y: GM[f32], seed: int):
            r = dsl.rand((2, 3, 4), seed, 0)
            y[0:4] = r[0]
    """)
    expect(lambda: m.k(np.zeros(4, np.float32), 1), "E205", "dsl.rand() makes tiles of one or two dimensions, "
           "got a 3-D shape", caret_under="(2, 3, 4)", hint="draw a 2-D tile per slice")


def test_rand_with_a_float_seed(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(y: GM[f32], seed: float):
            for t in dsl.tiles(y.shape[0], 64):
                y[t] = dsl.rand((t.len,), seed, t.start)
    """)
    expect(lambda: m.k(np.zeros(64, np.float32), 1.5), "E204", "the seed of dsl.rand() must be an integer, got a float",
           caret_under="seed, t.start)", hint="`seed: int`")


def test_randint_with_a_tile_offset(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(y: GM[i32], x: GM[i32]):
            for t in dsl.tiles(y.shape[0], 64):
                y[t] = dsl.randint((t.len,), 1, x[t])
    """)
    expect(lambda: m.k(np.zeros(64, np.int32), np.zeros(64, np.int32)), "E209",
           "the offset of dsl.randint() must be an integer, got a tile", caret_under="x[t]")


def test_rand_of_an_unbounded_length(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(y: GM[f32]):
            y[0:y.shape[0]] = dsl.rand((y.shape[0],), 1, 0)
    """)
    expect(lambda: m.k(np.zeros(64, np.float32)), "E207", "must be a compile-time integer or bounded by one",
           caret_under="(y.shape[0],)", hint="t.len")


def test_stride_of_a_1d_tile(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(y: GM[f32]):
            for t in dsl.tiles(y.shape[0], 64):
                y[t] = dsl.rand((t.len,), 1, t.start, stride=64)
    """)
    expect(lambda: m.k(np.zeros(64, np.float32)), "E209", "stride= of dsl.rand() numbers the rows of a 2-D tile",
           caret_under="64)", hint="leave it out")


def test_rand_missing_offset(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(y: GM[f32]):
            for t in dsl.tiles(y.shape[0], 64):
                y[t] = dsl.rand((t.len,), 1)
    """)
    expect(lambda: m.k(np.zeros(64, np.float32)), "E203", "dsl.rand() missing argument 'offset'",
           hint="dsl.rand(shape, seed, offset)")


# ------------------------------------------------------------------ the dropout example
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9])
def test_dropout_keeps_and_scales(p: float) -> None:
    n = 200_003
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32) + 3.0  # never 0
    y = np.empty_like(x)
    dropout[8](x, y, p, 42, 1000)
    kept = y != 0
    sigma = np.sqrt(p * (1 - p) / n)
    assert abs(kept.mean() - (1 - p)) <= 5 * sigma + 1e-12
    np.testing.assert_array_equal(y[kept], x[kept] / np.float32(1 - p))
    # the mask is the stream's: element i is kept where word 1000 + i is >= p
    np.testing.assert_array_equal(kept, want(42, 1000, (n,)) >= np.float32(p))


def test_dropout_mask_is_the_same_whatever_the_cores() -> None:
    x = np.ones(100_000, np.float32)
    masks = []
    for cores, tile in ((1, 4096), (3, 1000), (24, 4096), (7, 333)):
        y = np.empty_like(x)
        dropout[cores](x, y, 0.3, 7, 0, TILE=tile)
        masks.append(y != 0)
    for m in masks[1:]:
        np.testing.assert_array_equal(m, masks[0])
    y = np.empty_like(x)
    dropout[3](x, y, 0.3, 8, 0)  # another seed, another mask
    assert (masks[0] != (y != 0)).mean() > 0.3
    z = np.empty_like(x)
    with interpreting():
        dropout[5](x, z, 0.3, 7, 0)
    np.testing.assert_array_equal(z != 0, masks[0])
