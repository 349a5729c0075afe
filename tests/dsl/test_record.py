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


@dsl.kernel
def _vscale(x: GM[f32], z: GM[f32], a: float, TILE: Const[int] = 256):
    for t in dsl.tiles(x.shape[0], TILE):
        z[t] = x[t] * a


def test_timed_recording_reuses_the_run_of_a_like_launch():
    """record(timed=True): the first launch of a shape is traced and timed; later launches of that
    shape (other addresses, another float scalar) run untraced and reuse its Run; integer-valued
    changes that change the work (the shape) are timed afresh."""
    import importlib
    K = importlib.import_module("dsl.kernel")
    x = np.arange(3000, dtype=np.float32)
    z = np.zeros(3000, np.float32)
    full = _vscale[4].profile(x, z, 2.0)
    n0 = len(K._TIMES.runs)
    with dsl.record(timed=True) as rec:
        _vscale[4](x, z, 2.0)
        x2, z2 = x + 1, np.zeros(3000, np.float32)
        _vscale[4](x2, z2, 0.5)                      # other tensors, another float: the same Run
        _vscale[4].prepare(x, z, 3.0)()
        _vscale[4](x[:1000], z[:1000], 2.0)          # another shape: timed again
    np.testing.assert_array_equal(z2, (x + 1) * 0.5)
    np.testing.assert_array_equal(z[1000:], x[1000:] * 3.0)
    runs = [r for _, r in rec.runs]
    assert runs[0].cycles == full.cycles and runs[1] is runs[0] and runs[2] is runs[0]
    assert runs[3] is not runs[0] and runs[3].cycles < runs[0].cycles
    assert len(K._TIMES.runs) == n0 + 2


def test_a_full_recording_inside_a_timed_one_traces_every_launch():
    x = np.arange(3000, dtype=np.float32)
    z = np.zeros(3000, np.float32)
    with dsl.record(timed=True) as outer:
        _vscale[4](x, z, 2.0)
        with dsl.record() as inner:
            _vscale[4](x, z, 2.0)
    assert inner.runs[0][1] is outer.runs[1][1] and inner.runs[0][1] is not outer.runs[0][1]
    assert inner.runs[0][1].profile.per_core[0].events is not None     # a full trace, with its timeline
    assert inner.cycles == outer.runs[0][1].cycles
