"""`sc = rs` inside a loop, then sc reassigned: rs must keep its value (found by the group_norm
kernel: the reassignment was computed into rs's tile), natively and in the interpreter."""
import numpy as np
import pytest

import dsl
from compiler import CONFIG
from dsl import GM, f32


@dsl.kernel
def _rebind(x: GM[f32], w: GM[f32], y: GM[f32]):
    for t in dsl.tiles(1, 1):
        rs = x[0:1, 0:4] * 2.0
        for i in dsl.range(3):
            sc = rs
            sc = rs * w[i:i + 1, 0:4]
            y[i:i + 1, 0:4] = sc


@dsl.kernel
def _carried(x: GM[f32], y: GM[f32]):
    for t in dsl.tiles(1, 1):
        rs = x[0:1, 0:4] * 2.0
        for i in dsl.range(3):
            sc = rs
            for j in dsl.range(2):
                sc = sc * 2.0
            y[i:i + 1, 0:4] = sc + rs


@pytest.mark.parametrize("interpret", [False, True])
def test_an_alias_reassigned_leaves_the_original(interpret, monkeypatch):
    monkeypatch.setattr(CONFIG, "interpret", interpret)
    x = np.ones((1, 4), np.float32)
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.zeros((3, 4), np.float32)
    _rebind[1](x, w, y)
    np.testing.assert_array_equal(y, 2 * w)
    y2 = np.zeros((3, 4), np.float32)
    _carried[1](x, y2)
    np.testing.assert_array_equal(y2, np.full((3, 4), 10.0, np.float32))   # 2*2*2 + 2 each time


@dsl.kernel
def _if_assign(x: GM[f32], y: GM[f32], n: int):
    for t in dsl.tiles(1, 1):
        for i in dsl.range(2):
            a = x[0:1, 0:4] * 2.0
            if n > 3:
                a = a + 1.0
            else:
                a = a - 1.0
            y[i:i + 1, 0:4] = a


@pytest.mark.parametrize("interpret", [False, True])
def test_a_tile_assigned_in_a_runtime_if_is_seen_after_it(interpret, monkeypatch):
    """(was silently dropped: the branch bound a new tile to the name in its own scope)"""
    monkeypatch.setattr(CONFIG, "interpret", interpret)
    x = np.ones((1, 4), np.float32)
    for n, want in ((5, 3.0), (1, 1.0)):
        y = np.zeros((2, 4), np.float32)
        _if_assign[1](x, y, n)
        np.testing.assert_array_equal(y, np.full((2, 4), want, np.float32))
