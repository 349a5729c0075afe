"""Row softmax over a 2-D tensor, a block of rows per tile (numerically stable)."""
import dsl
from dsl import GM, Const


@dsl.kernel
def softmax(x: GM, y: GM, ROWS: Const[int] = 4):
    for r in dsl.tiles(x.shape[0], ROWS):
        xt = x[r, :]                                   # ROWS x n_cols tile in UB
        m = dsl.max(xt, axis=1, keepdims=True)         # ROWS x 1
        e = dsl.exp(xt - m)                            # broadcast the column vector
        y[r, :] = e / dsl.sum(e, axis=1, keepdims=True)
