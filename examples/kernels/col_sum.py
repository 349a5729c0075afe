"""Column sums: y[c] = sum over rows of x[r, c]. Cores take blocks of C columns (the last block is
short); each keeps an accumulator of its block's runtime width and adds R rows at a time."""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def col_sum(x: GM[f32, 2], y: GM[f32], C: Const[int] = 64, R: Const[int] = 64):
    for c in dsl.tiles(x.shape[1], C):
        acc = dsl.zeros((c.len,), f32)
        for r in dsl.range(0, x.shape[0], R):
            acc += dsl.sum(x[r, c], axis=0)
        y[c] = acc
