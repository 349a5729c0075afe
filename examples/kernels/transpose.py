"""Transpose of a 2-D tensor: y = x.T, one block at a time.

Each core takes its share of the BR x BC blocks of x; a block is loaded into UB as it is stored
(MTE2), transposed by the vector unit (V: 16 x 16 blocks of 16-bit lanes, as Ascend's Transpose)
and stored into the mirrored block of y (MTE3). Tails in either dimension are exact.
"""
import dsl
from dsl import GM, Const


@dsl.kernel
def transpose(x: GM, y: GM, BR: Const[int] = 64, BC: Const[int] = 64):
    for r, c in dsl.tiles2d((x.shape[0], x.shape[1]), (BR, BC)):
        y[c, r] = x[r, c].T
