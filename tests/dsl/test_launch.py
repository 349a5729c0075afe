"""The launch path's fast form (dsl.kernel._Binder): a repeated positional launch reuses a recipe
made by the first one. It must accept exactly what the full path accepts with the same
specialisation, hand everything else to the full path (same errors, same results), and leave
tensors and caches usable after a failed call."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dsl
from dsl import GM, Const, f32
from dsl.errors import KernelError


@dsl.kernel
def axpb(x: GM, y: GM, a: float, b: int, TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = x[t] * a + b


@dsl.kernel
def rows2(x: GM[f32, 2], y: GM[f32, 2], ROWS: Const[int] = 2):
    for r in dsl.tiles(x.shape[0], ROWS):
        y[r, :] = x[r, :] + 1.0


def binders(k) -> int:  # type: ignore[no-untyped-def]
    return sum(len(v) for v in k._binders.values())


def test_repeated_launches_use_the_recipe_and_see_new_arguments() -> None:
    k = axpb.with_options()
    x, y = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    k[2](x, y, 2.0, 3)
    assert binders(k) == 1
    for a, b in ((0.5, -1), (3, 7)):  # an int for a float parameter is fine, as on the full path
        x2 = np.random.default_rng(1).standard_normal(300).astype(np.float32)
        y2 = np.zeros(300, np.float32)
        k[2](x2, y2, a, b)
        np.testing.assert_array_equal(y2, x2 * np.float32(a) + np.float32(b))
    t = torch.arange(50, dtype=torch.float32)
    u = torch.zeros(50)
    k[2](t, u, 1.5, 2)
    assert torch.equal(u, t * 1.5 + 2)
    assert binders(k) == 2  # numpy and torch arguments: one recipe each


def test_what_does_not_fit_takes_the_full_path() -> None:
    k = axpb.with_options()
    x, y = np.ones(10, np.float32), np.zeros(10, np.float32)
    k[1](x, y, 1.0, 1)
    with pytest.raises(KernelError, match="E402"):  # an int parameter given a float
        k[1](x, y, 1.0, 1.5)
    with pytest.raises(KernelError, match="E403"):
        k[1](np.ones((10, 2), np.float32)[:, 0], y, 1.0, 1)
    with pytest.raises(KernelError, match="E402"):
        k[1]("not a tensor", y, 1.0, 1)
    # another dtype is another specialisation, compiled and then served by its own recipe
    xh, yh = np.ones(10, np.float16), np.zeros(10, np.float16)
    k[1](xh, yh, 2.0, 1)
    k[1](xh, yh, 2.0, 1)
    assert (yh == 3).all()
    k[1](x, y, 2.0, 2)
    assert (y == 4).all()
    # a positional Const with another value is another specialisation
    k[1](x, y, 1.0, 0, 8)
    assert (y == 1).all()
    # numpy scalars and bools go through the full path, with its conversions
    k[1](x, y, np.float32(2.0), True)
    assert (y == 3).all()


def test_keyword_arguments_have_recipes_too() -> None:
    """op_library passes Consts (and scalars) by keyword: such calls take the fast path as well, keyed
    by the names in the order given, and still see new values."""
    k = axpb.with_options()
    x, y = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    k[2](x, y, b=3, a=2.0, TILE=32)
    assert binders(k) == 1
    k[2](x, y, b=1, a=0.5, TILE=32)
    assert binders(k) == 1  # served by the recipe
    np.testing.assert_array_equal(y, x * np.float32(0.5) + 1)
    k[2](x, y, 2.0, b=5)  # other names: another recipe, the Const left to its default
    np.testing.assert_array_equal(y, x * 2 + 5)
    k[2](x, y, 2.0, b=6)
    np.testing.assert_array_equal(y, x * 2 + 6)
    assert binders(k) == 2
    k[2](x, y, b=1, a=1.0, TILE=16)  # another Const value: another specialisation
    np.testing.assert_array_equal(y, x + 1)
    with pytest.raises(KernelError, match="E402"):  # a bad keyword value is refused as on the full path
        k[2](x, y, b=1.5, a=1.0, TILE=16)
    k[2](y=y, x=x, a=1.0, b=2)  # tensors by keyword
    k[2](y=y, x=x, a=1.0, b=3)
    np.testing.assert_array_equal(y, x + 3)


def test_failed_launch_leaves_tensors_and_recipes_intact() -> None:
    k = rows2.with_options()
    x = np.ones((6, 5), np.float32)
    y = np.zeros((6, 5), np.float32)
    k[1](x, y)
    assert binders(k) == 1
    short = np.full((4, 5), -1.0, np.float32)
    with pytest.raises(KernelError, match="E404"):  # through the recipe: the same specialisation
        k[1](x, short)
    assert (short == 2).all()  # the two tiles that fit were written (core 0 runs them in order)
    y[:] = 0
    k[1](x, y)
    assert (y == 2).all()
    assert binders(k) == 1


def test_prepared_relaunch_and_many_cores() -> None:
    x = torch.randn(5000)
    y = torch.empty(5000)
    run = axpb[24].prepare(x, y, 2.0, 1)
    run()
    assert torch.equal(y, x * 2.0 + 1)
    x.add_(1)
    run()
    assert torch.equal(y, x * 2.0 + 1)
    big = torch.randn(1 << 17)  # past the inline size: the cores go to the thread pool
    out = torch.empty_like(big)
    axpb[24](big, out, 0.5, 0)
    axpb[24](big, out, 0.5, 0)
    assert torch.equal(out, big * 0.5)
