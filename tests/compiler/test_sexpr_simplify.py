"""Window extents that are constant differences of loop-dependent bounds fold to constants, so
`x[j:j + 999 * C + 1]` and `xp[p, h:h + (R - 1) * S + 1:S, ...]` are static-size tiles (no E207)."""
from __future__ import annotations

import numpy as np

from compiler import sexpr as S


def test_constant_differences_fold() -> None:
    h, n = S.var("h"), S.var("n")
    assert S.sub(S.add(S.add(h, 6), 1), h) == S.const(7)  # ((h + 6) + 1) - h
    assert S.sub(S.add(h, 5), S.add(h, 2)) == S.const(3)
    assert S.sub(S.add(S.mul(h, 3), 4), S.add(S.mul(h, 3), 1)) == S.const(3)
    assert S.sub(S.add(S.add(h, n), 2), S.add(n, h)) == S.const(2)
    assert S.sub(S.sub(S.add(h, 9), 4), h) == S.const(5)
    assert S.ceil_div(S.sub(S.add(S.add(h, 6), 1), h), 2) == S.const(4)


def test_non_constant_differences_stay() -> None:
    h, n = S.var("h"), S.var("n")
    assert not S.sub(S.add(h, 3), n).is_const
    assert not S.sub(S.add(S.mul(h, 2), 3), h).is_const
    assert not S.sub(S.add(S.binary("//", h, 2), 1), h).is_const
    assert S.sub(S.add(S.binary("//", h, 2), 1), S.binary("//", h, 2)) == S.const(1)


def test_slice_with_nested_constant_bound(source):  # type: ignore[no-untyped-def]
    # `j + 999 * C + 1` parses as ((j + 999 * C) + 1): its length must still be static
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], C: Const[int] = 1):
            for t in dsl.tiles(x.shape[0] // 1000, 1):
                j = t.start * 1000
                y[j:j + 999 * C + 1] = x[j:j + 999 * C + 1] * 2.0
    """)
    x = np.random.rand(4000).astype(np.float32)
    y = np.zeros_like(x)
    m.k[2](x, y)
    np.testing.assert_array_equal(y, x * 2.0)


def test_strided_2d_window_in_a_loop(source):  # type: ignore[no-untyped-def]
    # a (R, 4) window every S rows and columns of a plane, starting at a loop variable
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], R: Const[int] = 2, S: Const[int] = 2):
            for b in dsl.tiles(x.shape[0], 1):
                for i in dsl.range(y.shape[1] // R):
                    h = i * R * S
                    y[b.start, i * R:i * R + R, :] = x[b.start, h:h + (R - 1) * S + 1:S, 1:1 + 3 * S + 1:S]
    """)
    x = np.random.rand(3, 9, 9).astype(np.float32)
    y = np.zeros((3, 4, 4), np.float32)
    m.k[2](x, y)
    np.testing.assert_array_equal(y, x[:, 0:8:2, 1:8:2])
