"""Every kind of bad input gets a KernelError with file:line:col, the source line, a caret and a hint."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl import KernelError

N = 1000


def f32v(n=N):  # type: ignore[no-untyped-def]
    return np.ones(n, np.float32)


def expect(fn, code: str, message: str, caret_under: str | None = None, hint: str | None = None) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelError) as ei:
        fn()
    text = str(ei.value)
    first = text.splitlines()[0]
    assert re.match(r"^\S+\.py:\d+:\d+: error\[" + code + r"\]: ", first), text
    assert message in first, text
    if caret_under is not None:
        lines = text.splitlines()
        src, caret = lines[1], lines[2]
        col = caret.index("^")
        assert src[col:].startswith(caret_under), f"caret not under {caret_under!r}:\n{text}"
    if hint is not None:
        assert "hint: " in text and hint in text, text
    assert "Traceback" not in text
    return text


def test_while_is_unsupported(source):  # type: ignore[no-untyped-def]
    expect(lambda: source("""
        @dsl.kernel
        def k(x: GM[f32]):
            while True:
                pass
    """), "E101", "while", caret_under="while", hint="dsl.range")


def test_try_is_unsupported(source):  # type: ignore[no-untyped-def]
    expect(lambda: source("""
        @dsl.kernel
        def k(x: GM[f32]):
            try:
                pass
            except Exception:
                pass
    """), "E101", "try", caret_under="try")


def test_lambda_is_unsupported(source):  # type: ignore[no-untyped-def]
    expect(lambda: source("""
        @dsl.kernel
        def k(x: GM[f32]):
            f = lambda v: v
    """), "E102", "lambda", caret_under="lambda")


def test_unknown_builtin(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = dsl.expp(x[t])
    """)
    expect(lambda: m.k(f32v(), f32v()), "E202", "unknown builtin 'dsl.expp'", caret_under="dsl.expp",
           hint="dsl.exp")


def test_wrong_arity(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = dsl.exp(x[t], x[t])
    """)
    expect(lambda: m.k(f32v(), f32v()), "E203", "dsl.exp() takes at most 1 argument", hint="dsl.exp(x)")


def test_unknown_keyword(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = dsl.sum(x[t], axes=0)
    """)
    expect(lambda: m.k(f32v(), f32v()), "E203", "has no parameter 'axes'", hint="axis")


def test_dtype_mismatch(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], h: GM[f16], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = x[t] + h[t]
    """)
    expect(lambda: m.k(f32v(), f32v().astype(np.float16), f32v()), "E204", "dtype mismatch: f32 + f16",
           caret_under="x[t] + h[t]", hint="dsl.cast")


def test_store_dtype_mismatch(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f16]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = x[t]
    """)
    expect(lambda: m.k(f32v(), f32v().astype(np.float16)), "E204", "cannot store a f32 tile into 'y' of f16",
           hint="dsl.cast")


def test_float_op_on_int_tile(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[i32], y: GM[i32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = dsl.exp(x[t])
    """)
    expect(lambda: m.k(np.ones(N, np.int32), np.ones(N, np.int32)), "E204", "needs a float tile", hint="cast")


def test_rank_mismatch_too_many_indices(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = x[t, 0]
    """)
    expect(lambda: m.k(f32v(), f32v()), "E205", "too many indices: 2 for 'x' of rank 1")


def test_shape_mismatch_static(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            a = dsl.zeros((64,), f32)
            b = dsl.zeros((32,), f32)
            for t in dsl.tiles(x.shape[0], 64):
                y[t] = a + b
    """)
    expect(lambda: m.k(f32v(), f32v()), "E205", "shape mismatch: [64] + [32]", caret_under="a + b")


def test_shape_mismatch_at_runtime(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], w: GM[f32], y: GM[f32]):
            for r in dsl.tiles(x.shape[0], 4):
                y[r, :] = x[r, :] * w[:]
    """)
    x = np.ones((8, 16), np.float32)
    expect(lambda: m.k(x, np.ones(15, np.float32), x.copy()), "E205", "shape mismatch in '*': 16 vs 15")


def test_non_constant_tile_size(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], n: int):
            for t in dsl.tiles(x.shape[0], n):
                y[t] = x[t]
    """)
    expect(lambda: m.k(f32v(), f32v(), 128), "E207", "tile size must be a compile-time integer", hint="Const[int]")


def test_tile_too_large_for_ub(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], TILE: Const[int] = 65536):
            for t in dsl.tiles(x.shape[0], TILE):
                y[t] = x[t] * 2.0
    """)
    # 32768 fits now: one buffer, the product computed in place
    text = expect(lambda: m.k(f32v(), f32v()), "E301", "tile of 65536 f32", hint="TILE=32768 fits")
    assert "UB has" in text and "needs 768 KiB (786432 bytes) (3 buffers of 256 KiB)" in text and "free" in text


def test_runtime_tile_too_large_for_ub(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for r in dsl.tiles(x.shape[0], 8):
                y[r, :] = x[r, :] + 1.0
    """)
    x = np.ones((8, 10000), np.float32)
    text = expect(lambda: m.k(x, x.copy()), "E301", "tile of [8, x.shape[1]] f32")
    assert "UB has" in text and "bytes free" in text


def test_misaligned_explicit_placement(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            buf = dsl.alloc(dsl.UB, (256,), f32, offset=100)
            for t in dsl.tiles(x.shape[0], 256):
                dsl.copy(buf, x[t])
                dsl.copy(y[t], buf)
    """)
    expect(lambda: m.k(f32v(), f32v()), "E302", "offset 100 in UB is not 32-byte aligned", hint="96 or 128")


def test_overlapping_explicit_placement(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            a = dsl.alloc(dsl.UB, (256,), f32, offset=0)
            b = dsl.alloc(dsl.UB, (256,), f32, offset=512)
            for t in dsl.tiles(x.shape[0], 256):
                dsl.copy(a, x[t])
                dsl.copy(b, a)
                dsl.copy(y[t], b)
    """)
    expect(lambda: m.k(f32v(), f32v()), "E302", "overlaps")


def test_vector_op_on_l1(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            buf = dsl.alloc(dsl.L1, (256,), f32)
            for t in dsl.tiles(x.shape[0], 256):
                dsl.copy(buf, x[t])
                y[t] = buf * 2.0
    """)
    expect(lambda: m.k(f32v(), f32v()), "E303", "it is in L1, vector instructions work on UB", caret_under="buf * 2.0",
           hint="UB")


def test_illegal_data_path(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            buf = dsl.alloc(dsl.L1, (256,), f32)
            for t in dsl.tiles(x.shape[0], 256):
                dsl.copy(buf, x[t])
                dsl.copy(y[t], buf)
    """)
    expect(lambda: m.k(f32v(), f32v()), "E303", "no data path from L1 to GM", hint="UB first")


def test_assign_to_const(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], TILE: Const[int] = 256):
            TILE = 128
    """)
    expect(lambda: m.k(f32v(), f32v()), "E206", "cannot assign to 'TILE': it is a Const parameter",
           caret_under="TILE")


def test_assign_to_loop_variable(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for i in dsl.range(4):
                i = i + 1
    """)
    expect(lambda: m.k(f32v(), f32v()), "E206", "cannot assign to 'i': it is a loop variable")


def test_assign_to_argument(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            x = y
    """)
    expect(lambda: m.k(f32v(), f32v()), "E206", "cannot assign to 'x': it is a kernel argument")


def test_unknown_name(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = x[t] * scale
    """)
    expect(lambda: m.k(f32v(), f32v()), "E201", "unknown name 'scale'", caret_under="scale")


def test_missing_annotation(source):  # type: ignore[no-untyped-def]
    expect(lambda: source("""
        @dsl.kernel
        def k(x, y: GM[f32]):
            pass
    """), "E208", "parameter 'x' needs a type annotation", hint="GM[f32]")


def test_const_defaults_may_be_arithmetic(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], TILE: Const[int] = 1 << 10, S: Const[float] = 3 * 0.5):
            for t in dsl.tiles(x.shape[0], TILE):
                y[t] = x[t] * S
    """)
    x = np.arange(3000, dtype=np.float32)
    y = np.zeros_like(x)
    m.k(x, y)
    assert np.array_equal(y, x * 1.5)
    expect(lambda: source("""
        @dsl.kernel
        def k(x: GM[f32], TILE: Const[int] = len("abc")):
            pass
    """), "E208", "this expression is not allowed here", hint="arithmetic on them")


def test_if_on_tile(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                if x[t] > 0.0:
                    y[t] = x[t]
    """)
    expect(lambda: m.k(f32v(), f32v()), "E209", "'if' needs a scalar condition", hint="dsl.where")


def test_python_range_rejected(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for i in range(4):
                pass
    """)
    expect(lambda: m.k(f32v(), f32v()), "E202", "Python's range() is not available", hint="dsl.range")


def test_wrong_argument_count(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            pass
    """)
    expect(lambda: m.k(f32v()), "E401", "k() missing argument 'y'", hint="signature: k(x: GM[f32], y: GM[f32])")
    expect(lambda: m.k(f32v(), f32v(), f32v()), "E401", "k() takes 2 arguments, 3 given")


def test_wrong_argument_dtype(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            pass
    """)
    expect(lambda: m.k(f32v(), np.ones(3, np.int32)), "E402", "argument 'y' has dtype i32 but the kernel declares GM[f32]")
    expect(lambda: m.k(f32v(), np.ones(3, np.float64)), "E402", "float64")


def test_non_contiguous_argument(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            pass
    """)
    expect(lambda: m.k(f32v(10)[::2], f32v()), "E403", "not contiguous", hint="ascontiguousarray")


def test_out_of_bounds_dma_raises_before_writing(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = x[t] + 1.0
    """)
    x, y = f32v(1000), np.zeros(600, np.float32)
    text = expect(lambda: m.k[1](x, y), "E404", "DMA would write elements [512, 768) of 'y' (f32), which has 600")
    assert "core 0" in text
    assert (y[:512] == 2).all() and (y[512:] == 0).all()  # nothing past the failing DMA was written


def test_out_of_bounds_slice(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], a: int, b: int):
            y[0:8] = x[a:b]
    """)
    expect(lambda: m.k(f32v(100), f32v(100), 95, 103), "E404", "slice [95:103] is outside dimension 0 of 'x'")


def test_error_hides_compiler_frames(source):  # type: ignore[no-untyped-def]
    import traceback

    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = x[t] + undefined_thing
    """)
    try:
        m.k(f32v(), f32v())
    except KernelError as e:
        frames = traceback.extract_tb(e.__traceback__)
        from pathlib import Path

        pkg = str(Path(__file__).resolve().parents[2] / "compiler")
        assert not any(f.filename.startswith(pkg) for f in frames), frames
    else:  # pragma: no cover
        raise AssertionError("no error")
