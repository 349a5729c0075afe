"""Profiles of real kernels that don't flatter: idle cores count against the efficiency, and the
cube's utilisation is measured against the peak of the dtype that ran."""
from __future__ import annotations

import numpy as np
import pytest

import dsl
from dsl import GM, Const, f32
from simulator import load_config

CFG = load_config("ascend910b1")
TILE = 1024


@dsl.kernel
def scale(x: GM, y: GM, TILE: Const[int] = TILE):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = x[t] * 2.0


@dsl.kernel
def mm(a: GM, b: GM, c: GM, BM: Const[int] = 64, BN: Const[int] = 64, BK: Const[int] = 64):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[k, n]
        c[m, n] = dsl.cast(acc, c.dtype)


def test_idle_cores_lower_the_efficiency_and_are_reported() -> None:
    x = np.arange(2 * TILE, dtype=np.float32)  # two tiles of work
    y = np.empty_like(x)
    two = scale[2].profile(x, y)
    eight = scale[8].profile(x, y)
    np.testing.assert_array_equal(y, 2 * x)
    # the six extra cores get no tile: the same time, the same critical core ...
    assert eight.cycles == two.cycles and eight.bound == two.bound
    # ... but a quarter of the launched cores did the work
    assert eight.efficiency == pytest.approx(two.efficiency * 2 / 8)
    assert eight.efficiency < 0.3 < two.efficiency
    assert (two.profile.active_cores, eight.profile.active_cores) == (2, 2)
    text = eight.report()
    assert f"efficiency {100 * eight.efficiency:.1f}% (2 of 8 cores had work)" in text
    assert "(2 of 2 cores had work)" in two.report()
    assert repr(eight).endswith(", 2 of 8 cores had work>")


@pytest.mark.parametrize("dtype, name, macs", [(np.float32, "f32", 2048), (np.float16, "f16/bf16", 4096)])
def test_matmul_utilisation_is_against_the_peak_of_its_dtype(dtype: type, name: str, macs: int) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 64)).astype(dtype), rng.standard_normal((64, 64)).astype(dtype)
    c = np.empty((64, 64), np.float32)
    run = mm[1].profile(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-2)
    peak = CFG.peak_flops("f32" if dtype is np.float32 else "f16")
    cube = run.report().split("cube: ")[1].splitlines()[0]
    assert f"of {peak / 1e12:.1f} peak ({name}: 24 cores x {macs} MAC x 2 x 1.85 GHz)" in cube
    utilisation = 2 * 64 ** 3 / run.seconds / peak
    assert cube.endswith(f", {utilisation:.1%}")
    p = run.profile
    assert run.cube_flops == p.cube_flops == 2 * 64 ** 3
    assert p.peak_cube_flops == peak
    assert p.cube_utilization == pytest.approx(utilisation)


def test_f32_peak_is_half_the_f16_peak() -> None:
    # the same mmad count and shape: f32 steps 16x8x16 take twice the M-pipe cycles of f16's
    # 16x16x16, and its utilisation is taken against a peak half as high
    a16, b16 = np.ones((64, 64), np.float16), np.ones((64, 64), np.float16)
    c = np.empty((64, 64), np.float32)
    r16 = mm[1].profile(a16, b16, c)
    r32 = mm[1].profile(a16.astype(np.float32), b16.astype(np.float32), c)
    assert r32.profile.work["M"] == 2 * r16.profile.work["M"] == 2 * 64
    assert CFG.peak_flops("f32") == CFG.peak_flops("f16") / 2
    assert r32.profile.peak_cube_flops == CFG.peak_flops("f32")
