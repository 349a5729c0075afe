"""Matrix multiply with A's row panel kept in L1 and reused across column blocks of B.

Each tile is one BM-row block of A against NB column blocks of BN: the first column block loads
the BM x K panel of A into L1 one K step at a time (`a1[:, k]`), the other NB - 1 multiply the same
L1 sub-windows again, so A crosses GM -> L1 once per tile instead of once per output block.
The panel must fit L1: BM x K elements (f16: 176 x 1024 is 352 KiB of the 512). NB = 1 is the
streaming matmul of matmul.py (no panel), so the autotuner weighs reuse against larger blocks.
"""
import dsl
from dsl import GM, Const, f32


@dsl.autotune(BM=[96, 112, 128, 176, 208], BN=[128, 176, 256], BK=[32, 64], NB=[1, 2, 4])
@dsl.kernel
def matmul_panel(a: GM, b: GM, c: GM, BM: Const[int] = 176, BN: Const[int] = 128, BK: Const[int] = 32,
                 NB: Const[int] = 2):
    if NB > 1:
        a1 = dsl.alloc(dsl.L1, (BM, a.shape[1]), a.dtype)          # the A panel: BM rows, all of K
    for m, p in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN * NB)):  # a row block x NB column blocks
        for n in dsl.range(p.start, p.start + p.len, BN):
            acc = dsl.zeros((BM, BN), f32)                         # L0C
            for k in dsl.range(0, a.shape[1], BK):
                if NB == 1:
                    acc += a[m, k] @ b[k, n]                       # streaming: GM -> L1 -> L0A every block
                else:
                    if n == p.start:
                        dsl.copy(a1[:, k], a[m, k])                # the first block fills the panel (MTE2)
                    acc += a1[:, k] @ b[k, n]                      # L1 sub-window -> L0A (MTE1), mmad (M)
            c[m, n] = dsl.cast(acc, c.dtype)                       # L0C -> GM on FIX
