"""log_softmax over the last dimension: y = x - max(x) - log(sum(exp(x - max(x)))).

R rows of the full width per tile: 8 rows of 1000 f32 fit UB with the loads, the row statistics
and the stores double-buffered (the exp temporary and the result share the input's buffer)."""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def log_softmax(x: GM[f32, 2], y: GM[f32, 2], R: Const[int] = 8):
    for r in dsl.tiles(x.shape[0], R):
        xt = x[r, :]
        m = dsl.max(xt, axis=1, keepdims=True)
        s = dsl.sum(dsl.exp(xt - m), axis=1, keepdims=True)
        y[r, :] = xt - m - dsl.log(s)
