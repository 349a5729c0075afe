"""Layer norm over the last dimension, with weight and bias (f32 statistics)."""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def layer_norm(x: GM[f32], w: GM[f32], b: GM[f32], y: GM[f32], eps: float = 1e-5, ROWS: Const[int] = 4):
    d = x.shape[1]
    wt = w[:]                                          # loaded once per core, a row vector
    bt = b[:]
    for r in dsl.tiles(x.shape[0], ROWS):
        xt = x[r, :]
        mean = dsl.sum(xt, axis=1, keepdims=True) / d
        xc = xt - mean
        var = dsl.sum(xc * xc, axis=1, keepdims=True) / d
        y[r, :] = xc * dsl.rsqrt(var + eps) * wt + bt
