"""Stepped windows `x[a:b:s]` are bounds-checked on the elements they touch, natively and in the
interpreter alike: a stop past the end is legal when no touched element is (numpy's x[0:12:3] of
10 elements is 0, 3, 6, 9); an element really outside is E404 naming the index and the bound,
before anything is written."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl import KernelError
from tests.compiler.test_interpret import both, interpreting, same, same_runs

KERNELS = """
    @dsl.kernel
    def gather(x: GM[f32], y: GM[f32], START: Const[int] = 0, STOP: Const[int] = 12, STEP: Const[int] = 3):
        for t in dsl.tiles(1, 1):
            y[:] = x[START:STOP:STEP] + 1.0

    @dsl.kernel
    def rows(x: GM[f32], y: GM[f32], stop: int):
        for r in dsl.tiles(x.shape[0], 2):
            y[r, :] = x[r, 1:stop:4] * 2.0

    @dsl.kernel
    def scatter(x: GM[f32], y: GM[f32], stop: int):
        for t in dsl.tiles(1, 1):
            y[0:stop:3] = x[:]
"""


@pytest.fixture
def m(source):  # type: ignore[no-untyped-def]
    return source(KERNELS)


def test_a_stop_past_the_end_touching_only_elements_inside(m) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(10, dtype=np.float32)
    for start, stop, step in ((0, 12, 3), (0, 11, 3), (1, 12, 4), (9, 10, 5), (9, 16, 7), (2, 12, 5)):
        n = len(range(start, stop, step))
        assert range(start, stop, step)[-1] < 10 < stop or stop == 10  # every element inside, the stop not
        na, ia, nr, ir = both(m.gather[1], [x, np.zeros(n, np.float32)], profile=True,
                              START=start, STOP=stop, STEP=step)
        np.testing.assert_array_equal(na[1], x[start:stop:step] + 1.0)
        same(na[1], ia[1])
        same_runs(nr, ir)


def test_row_windows_with_a_runtime_stop_past_the_end(m) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(3).random((5, 10)).astype(np.float32)
    for stop in (10, 11, 13):  # columns 1, 5, 9 each time
        na, ia, nr, ir = both(m.rows[2], [x, np.zeros((5, 3), np.float32), stop], profile=True)
        np.testing.assert_array_equal(na[1], x[:, 1::4] * 2.0)
        same(na[1], ia[1])
        same_runs(nr, ir)


def test_a_stepped_store_past_the_end(m) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(1, 5, dtype=np.float32)
    na, ia, _, _ = both(m.scatter[1], [x, np.zeros(10, np.float32), 12])
    expect = np.zeros(10, np.float32)
    expect[0:12:3] = x
    np.testing.assert_array_equal(na[1], expect)
    same(na[1], ia[1])


def _error(fn) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelError) as ei:
        fn()
    return str(ei.value)


@pytest.mark.parametrize("interp", [False, True])
def test_an_element_outside_is_e404_with_index_and_bound(m, interp: bool) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(10, dtype=np.float32)
    y = np.full(5, -1.0, np.float32)
    with interpreting() if interp else _nothing():
        text = _error(lambda: m.gather[1](x, y, STOP=13))  # touches 0, 3, 6, 9, 12
    first = text.splitlines()[0]
    assert "error[E404]: slice [0:13:3] touches index 12, outside dimension 0 of 'x' (size 10)" in first, text
    assert re.match(r"^\S+\.py:8:18: error", first), text  # file:line:col of the slice (after the header)
    lines = text.splitlines()
    assert lines[1][lines[2].index("^"):].startswith("START:STOP:STEP"), text
    assert "hint: a stepped slice may stop past the end, but every element it touches must be inside" in text
    np.testing.assert_array_equal(y, -1.0)  # nothing was written


@pytest.mark.parametrize("interp", [False, True])
def test_rows_and_stores_outside_are_e404(m, interp: bool) -> None:  # type: ignore[no-untyped-def]
    x = np.zeros((4, 10), np.float32)
    y = np.full((4, 3), -1.0, np.float32)
    with interpreting() if interp else _nothing():
        text = _error(lambda: m.rows[2](x, y, 14))  # columns 1, 5, 9, 13
        assert "slice [1:14:4] touches index 13, outside dimension 1 of 'x' (size 10)" in text, text
        np.testing.assert_array_equal(y, -1.0)
        z = np.full(10, -1.0, np.float32)
        text = _error(lambda: m.scatter[1](np.ones(5, np.float32), z, 13))  # 0, 3, 6, 9, 12
        assert "slice [0:13:3] touches index 12, outside dimension 0 of 'y' (size 10)" in text, text
        np.testing.assert_array_equal(z, -1.0)


@pytest.mark.parametrize("interp", [False, True])
def test_a_negative_start_or_a_reversed_slice_stays_e404(m, interp: bool) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(10, dtype=np.float32)
    with interpreting() if interp else _nothing():
        text = _error(lambda: m.gather[1](x, np.zeros(1, np.float32), START=-3, STOP=1))
        assert "slice [-3:1:3] is outside dimension 0 of 'x' (size 10)" in text, text
        text = _error(lambda: m.gather[1](x, np.zeros(1, np.float32), START=5, STOP=2))
        assert "slice [5:2:3] is outside dimension 0 of 'x' (size 10)" in text, text


def test_plain_slices_past_the_end_are_still_e404(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], stop: int):
            for t in dsl.tiles(1, 1):
                y[0:stop] = x[0:stop]
    """)
    text = _error(lambda: m.k[1](np.zeros(10, np.float32), np.zeros(11, np.float32), 11))
    assert "slice [0:11] is outside dimension 0 of 'x' (size 10)" in text, text


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
