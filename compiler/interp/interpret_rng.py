"""The reference rule of `dsl.rand` / `dsl.randint` (VRAND / VRANDINT): Philox 4x32-10 in numpy uint64
arithmetic, with the numbering of `compiler.frontend.lower_rng` and the native code of
`compiler.backend.codegen_rng` (which computes each block once; here every element computes its own
block and keeps one word: the same bits, more work).
"""
from __future__ import annotations

import numpy as np

M32 = 0xFFFFFFFF
M0, M1 = 0xD2511F53, 0xCD9E8D57  # Random123 philox.h: PHILOX_M4x32_0, _1
W0, W1 = 0x9E3779B9, 0xBB67AE85  # PHILOX_W32_0, _1 (golden ratio, sqrt(3) - 1)
ROUNDS = 10


def philox4x32_10(ctr: tuple[np.ndarray | int, ...], key: tuple[int, int],
                  rounds: int = ROUNDS) -> tuple[np.ndarray, ...]:
    """Philox 4x32 of `rounds` rounds: four counter words (arrays or ints, < 2**32) under the two key words
    -> the four output words (uint32 arrays)."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in ctr)
    k0, k1 = key[0] & M32, key[1] & M32
    m0, m1, sh, lo = np.uint64(M0), np.uint64(M1), np.uint64(32), np.uint64(M32)
    for r in range(rounds):
        if r:  # the key is bumped before every round but the first
            k0, k1 = (k0 + W0) & M32, (k1 + W1) & M32
        p0, p1 = c0 * m0, c2 * m1  # < 2**64: exact in uint64
        c0, c1, c2, c3 = (p1 >> sh) ^ c1 ^ np.uint64(k0), p1 & lo, (p0 >> sh) ^ c3 ^ np.uint64(k1), p0 & lo
    return tuple(x.astype(np.uint32) for x in (c0, c1, c2, c3))


def words(seed: int, n: np.ndarray) -> np.ndarray:
    """Words number `n` (a uint64 array) of the stream of `seed` (an i64, read as a u64)."""
    s = seed & ((1 << 64) - 1)
    b = n >> np.uint64(2)
    out = philox4x32_10((b & np.uint64(M32), b >> np.uint64(32), 0, 0), (s & M32, s >> 32))
    lane = (n & np.uint64(3)).astype(np.intp)
    return np.choose(lane, out).astype(np.uint32)


def rng_values(uniform: bool, seed: int, offset: int, stride: int, rows: int, cols: int) -> np.ndarray:
    """A rows x cols tile: element (r, c) is word offset + r * stride + c (i64 wrap-around, as a u64),
    as f32 in [0, 1) from its high 24 bits (`uniform`) or as the i32 of the same bits."""
    rows, cols = max(rows, 0), max(cols, 0)
    mask = (1 << 64) - 1
    r = np.arange(rows, dtype=np.uint64)[:, None]
    c = np.arange(cols, dtype=np.uint64)[None, :]
    n = np.uint64(offset & mask) + r * np.uint64(stride & mask) + c  # uint64 arrays wrap like i64
    w = words(seed, n)
    if uniform:
        return (w >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    return w.view(np.int32)
