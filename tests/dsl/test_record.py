"""dsl.record(): every launch inside the block is traced and listed, results unchanged."""
import numpy as np

import dsl
from dsl import GM, Const, f32
from dsl.record import active


@dsl.kernel
def _vadd(x: GM[f32], y: GM[f32], z: GM[f32], TILE: Const[int] = 256):
    for t in dsl.tiles(x.shape[0], TILE):
        z[t] = x[t] + y[t]


def test_record_lists_each_launch_and_sums_cycles():
    x, y = np.arange(1000, dtype=np.float32), np.ones(1000, np.float32)
    z = np.zeros(1000, np.float32)
    with dsl.record() as outer:
        _vadd(x, y, z)
        with dsl.record() as inner:
            _vadd[2](x, y, z)
            _vadd[2].prepare(x, y, z)()
    np.testing.assert_array_equal(z, x + 1)
    assert outer.kernels() == ["_vadd"] * 3 and inner.kernels() == ["_vadd"] * 2
    one = _vadd[2].profile(x, y, z)
    assert inner.cycles == 2 * one.cycles and inner.bound == 2 * one.bound
    assert 0 < outer.efficiency <= 1.0 and outer.cycles == sum(r.cycles for _, r in outer.runs)


def test_no_recording_outside_the_block():
    x = np.ones(10, np.float32)
    z = np.zeros(10, np.float32)
    with dsl.record() as rec:
        pass
    _vadd(x, x, z)
    assert rec.runs == []


def test_nested_blocks_with_equal_contents_close_in_order():
    # the two recordings hold the same runs; each block must still remove its own (by identity)
    x = np.ones(10, np.float32)
    z = np.zeros(10, np.float32)
    with dsl.record() as outer:
        with dsl.record() as inner:
            _vadd(x, x, z)
        _vadd(x, x, z)
    assert inner.kernels() == ["_vadd"] and outer.kernels() == ["_vadd"] * 2
    assert active() is None
