"""Vinci's kernel language: write tile-level kernels in Python syntax, run them on the simulated core.

    import dsl
    from dsl import GM, Const, f32

    @dsl.kernel
    def vadd(x: GM[f32], y: GM[f32], z: GM[f32], TILE: Const[int] = 2048):
        for t in dsl.tiles(x.shape[0], TILE):
            z[t] = x[t] + y[t]

    vadd[8](x, y, z)                 # 8 simulated cores
    run = vadd[8].profile(x, y, z)   # cycles, per-pipe busy, trace

Offers: `kernel`, `autotune` (choose Const values on the timing model), the types (`GM`, `Const`,
`f32`, `f16`, `bf16`, `i32`, `i8`), memories (`GM_MEM` aside, `UB`, `L1`, `L0A`, `L0B`, `L0C`), the
builtins (`tiles`, `range`, `alloc`, `copy`, `exp`, `sum`, `cast`, `where`, ...) and `KernelError`.
"""
from dsl.builtins import BUILTINS as _BUILTINS
from dsl.errors import KernelError, SourceLoc
from dsl.types import GM, Const, DType, Mem, bf16, boolean, f16, f32, i8, i32

UB = Mem.UB
L1 = Mem.L1
L0A = Mem.L0A
L0B = Mem.L0B
L0C = Mem.L0C

globals().update(_BUILTINS)

from dsl.autotune import Autotuned, autotune  # noqa: E402
from dsl.kernel import Kernel, kernel  # noqa: E402
from dsl.record import Recording, record  # noqa: E402

__all__ = ["kernel", "Kernel", "autotune", "Autotuned", "record", "Recording", "KernelError", "SourceLoc", "GM", "Const", "DType", "Mem",
           "f32", "f16", "bf16", "i32", "i8", "boolean", "UB", "L1", "L0A", "L0B", "L0C", *_BUILTINS]
