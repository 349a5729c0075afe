"""Elementwise add: the canonical vector kernel (MTE2 load, V add, MTE3 store, double-buffered)."""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def vadd(x: GM[f32], y: GM[f32], z: GM[f32], TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):  # this core's share of the tiles; the last one is short
        z[t] = x[t] + y[t]


@dsl.kernel
def vadd_any(x: GM, y: GM, z: GM, TILE: Const[int] = 4096):
    """The same for any dtype (f32, f16, bf16, i32, i8): one specialisation per dtype."""
    for t in dsl.tiles(x.shape[0], TILE):
        z[t] = x[t] + y[t]
