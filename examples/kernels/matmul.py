"""Matrix multiply on the cube: GM -> L1 (MTE2, ND->NZ), L1 -> L0A/L0B (MTE1), mmad (M), L0C -> GM (FIX)."""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def matmul(a: GM, b: GM, c: GM, BM: Const[int] = 128, BN: Const[int] = 128, BK: Const[int] = 64):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):   # output blocks over cores
        acc = dsl.zeros((BM, BN), f32)                                # lives in L0C
        for k in dsl.range(0, a.shape[1], BK):                        # K loop: k is the window [k, k+BK)
            acc += a[m, k] @ b[k, n]                                  # MTE2 -> L1, MTE1 -> L0A/L0B, M
        c[m, n] = dsl.cast(acc, c.dtype)                              # L0C -> GM on FIX, cast fused
