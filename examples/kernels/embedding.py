"""Embedding lookup: row idx[j] of the table w becomes row j of y (torch.nn.functional.embedding).

The scalar unit reads each index from GM (`idx[j]`, S pipe) and the row it names is a window of w
like any other: MTE2 loads it, MTE3 stores it. An index outside the table is E404 before its row
moves."""
import dsl
from dsl import GM, Const


@dsl.kernel
def embedding(idx: GM, w: GM, y: GM, R: Const[int] = 8):
    for t in dsl.tiles(idx.shape[0], R):        # blocks of R tokens dealt over the cores
        for r in dsl.range(t.len):
            j = t.start + r
            y[j, :] = w[idx[j], :]
