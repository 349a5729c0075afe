"""Dropout (training): y = x / (1 - p) where a uniform draw is >= p, else 0.

The draws come from `dsl.rand` (Philox 4x32-10): element i of x takes word `offset + i` of the stream of
`seed`, so a (seed, offset) pair gives the same mask on any number of cores, with any TILE and any
number of host threads. Like torch's generator, a model advances `offset` by `x.numel()` after each
call so that no two dropout layers share numbers. Any contiguous tensor works (pass it flattened).
"""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def dropout(x: GM[f32], y: GM[f32], p: float, seed: int, offset: int, TILE: Const[int] = 4096):
    for t in dsl.tiles(x.shape[0], TILE):
        keep = dsl.rand((t.len,), seed, offset + t.start) >= p
        y[t] = dsl.where(keep, x[t] / (1.0 - p), 0.0)


if __name__ == "__main__":
    import numpy as np

    x = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
    y = np.empty_like(x)
    dropout(x, y, 0.1, 1234, 0)
    print(f"kept {np.count_nonzero(y) / y.size:.4f} of the elements (expected 0.9)")
    print(dropout[24].profile(x, y, 0.1, 1234, 0).report())
