"""RMS norm over the last dimension, with weight (f32 statistics): y = x / sqrt(mean(x^2) + eps) * w."""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def rms_norm(x: GM[f32], w: GM[f32], y: GM[f32], eps: float = 1e-6, ROWS: Const[int] = 4):
    d = x.shape[1]
    wt = w[:]                                          # loaded once per core, a row vector
    for r in dsl.tiles(x.shape[0], ROWS):
        xt = x[r, :]
        ms = dsl.sum(xt * xt, axis=1, keepdims=True) / d
        y[r, :] = xt * dsl.rsqrt(ms + eps) * wt
