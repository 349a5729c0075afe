"""Swish (SiLU) y = x * sigmoid(x) and its backward, fused in one pass each."""
import dsl
from dsl import GM, Const


@dsl.kernel
def swish(x: GM, y: GM, TILE: Const[int] = 4096):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        y[t] = xt * dsl.sigmoid(xt)


@dsl.kernel
def swish_backward(x: GM, dy: GM, dx: GM, TILE: Const[int] = 2048):
    """dx = dy * s * (1 + x * (1 - s)) with s = sigmoid(x)."""
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        s = dsl.sigmoid(xt)
        dx[t] = dy[t] * s * (1.0 + xt * (1.0 - s))
