"""Per-row cross entropy of logits x (N, C) against class indices tgt (N, 1):
loss[r] = logsumexp(x[r, :]) - x[r, tgt[r]] (torch's cross_entropy with reduction='none').

The target logit is picked in UB by `dsl.gather` (V pipe), each index checked against C first."""
import dsl
from dsl import GM, Const, f32, i32


@dsl.kernel
def cross_entropy(x: GM[f32, 2], tgt: GM[i32, 2], loss: GM[f32, 2], R: Const[int] = 4):
    for t in dsl.tiles(x.shape[0], R):
        row = x[t, :]                                               # R x C logits in UB
        m = dsl.max(row, axis=1, keepdims=True)
        lse = dsl.log(dsl.sum(dsl.exp(row - m), axis=1, keepdims=True)) + m
        loss[t, 0:1] = lse - dsl.gather(row, tgt[t, 0:1], axis=1)   # the target logit per row
