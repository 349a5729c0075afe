"""Bad cube programs: each a KernelError with the location and a hint."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import KernelError


def expect(fn, code: str, message: str, hint: str | None = None) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelError) as ei:
        fn()
    text = str(ei.value)
    assert f"error[{code}]" in text.splitlines()[0] and message in text.splitlines()[0], text
    assert ".py:" in text.splitlines()[0] and "^" in text
    if hint:
        assert hint in text, text
    return text


MM = """
@dsl.kernel
def k(a: GM, b: GM, c: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = {bk}):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), {acc})
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[{kb}, n]
        c[m, n] = acc
"""


def test_mismatched_inner_dimensions_static(source):  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(a: GM, b: GM, c: GM):
            acc = dsl.zeros((32, 32), f32)
            acc += a[0:32, 0:16] @ b[0:8, 0:32]
            c[0:32, 0:32] = acc
    """)
    a = np.ones((32, 16), np.float16)
    expect(lambda: m.k(a, np.ones((8, 32), np.float16), np.zeros((32, 32), np.float32)), "E501",
           "mismatched inner dimensions: [32x16] @ [8x32]", hint="columns of A must equal the rows of B")


def test_mismatched_inner_dimensions_at_runtime(source):  # type: ignore[no-untyped-def]
    m = source(MM.format(bk=16, acc="f32", kb="k"))
    a = np.ones((32, 40), np.float16)
    b = np.ones((30, 32), np.float16)
    expect(lambda: m.k(a, b, np.zeros((32, 32), np.float32)), "E501", "mismatched inner dimensions")


def test_cube_cannot_take_int32(source):  # type: ignore[no-untyped-def]
    m = source(MM.format(bk=16, acc="f32", kb="k"))
    a = np.ones((32, 32), np.int32)
    expect(lambda: m.k(a, a, np.zeros((32, 32), np.float32)), "E502", "the cube cannot multiply i32 operands",
           hint="f16, bf16, f32 or i8")


def test_cube_cannot_mix_dtypes(source):  # type: ignore[no-untyped-def]
    m = source(MM.format(bk=16, acc="f32", kb="k"))
    expect(lambda: m.k(np.ones((32, 32), np.float16), np.ones((32, 32), np.float32), np.zeros((32, 32), np.float32)),
           "E502", "the cube cannot multiply f16 by f32")


def test_accumulator_type(source):  # type: ignore[no-untyped-def]
    m = source(MM.format(bk=16, acc="f32", kb="k"))
    a = np.ones((32, 32), np.int8)
    expect(lambda: m.k(a, a, np.zeros((32, 32), np.int32)), "E502", "accumulates in i32", hint="i32")


def test_operand_in_l0c(source):  # type: ignore[no-untyped-def]
    # (a UB tile is a legal operand: copied UB -> L1, see tests/compiler/test_l1_panels.py)
    m = source("""
        @dsl.kernel
        def k(a: GM, b: GM, c: GM):
            x = a[0:32, 0:32] @ b[0:32, 0:32]
            acc = dsl.zeros((32, 32), f32)
            acc += x @ b[0:32, 0:32]
            c[0:32, 0:32] = acc
    """)
    a = np.ones((32, 32), np.float32)
    expect(lambda: m.k(a, a, a.copy()), "E303", "'x' is in L0C", hint="L1")


def test_l0c_overflow(source):  # type: ignore[no-untyped-def]
    m = source(MM.format(bk=16, acc="f32", kb="k").replace("BM: Const[int] = 32", "BM: Const[int] = 512")
               .replace("BN: Const[int] = 32", "BN: Const[int] = 256"))
    a = np.ones((32, 32), np.float16)
    expect(lambda: m.k(a, a, np.zeros((32, 32), np.float32)), "E301", "L0C has", hint="tile size")


def test_l0a_overflow(source):  # type: ignore[no-untyped-def]
    m = source(MM.format(bk=1024, acc="f32", kb="k"))
    a = np.ones((32, 32), np.float32)
    text = expect(lambda: m.k(a, a, a.copy()), "E301", "L0A has")
    assert "32x1024 f32" in text


def test_store_needs_a_cast(source):  # type: ignore[no-untyped-def]
    m = source(MM.format(bk=16, acc="f32", kb="k"))
    a = np.ones((32, 32), np.float16)
    expect(lambda: m.k(a, a, np.zeros((32, 32), np.float16)), "E204", "cannot store a f32 result into 'c' of f16",
           hint="dsl.cast(acc, f16)")
