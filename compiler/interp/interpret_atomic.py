"""The interpreter's rule for atomic stores (`dsl.atomic_add`, `codegen_atomic`): GM += values.

One element at a time natively, in one numpy expression here: the interpreter runs cores one
after another, so nothing else touches GM in between. Floats add in f32 and f16 / bf16 round the
sum to nearest even once (as the native compare-and-swap loop and torch do); i32 wraps. The
tensor's alignment is checked first, as the native code does (E405).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from compiler.backend.codegen_atomic import MISALIGNED, MISALIGNED_HINT
from compiler.interp.interpret_rules import storage
from compiler.ir import GMRef
from dsl.errors import SourceLoc


def accumulate(core: Any, ref: GMRef, g: np.ndarray, vals: np.ndarray, loc: SourceLoc) -> None:
    """g[...] += vals in ref's dtype arithmetic (g: the window, a view of GM in its storage type);
    `core` is the interpreter's `Core` (for its failure and GM arrays)."""
    d, es = ref.dtype, ref.dtype.itemsize
    if core.gm[ref.arg].ctypes.data % es:
        raise core.fail("E405", MISALIGNED.format(name=ref.name, dtype=d, es=es), [], MISALIGNED_HINT, loc)
    with np.errstate(all="ignore"):
        if d.is_float:
            g[...] = (g.astype(np.float32) + np.asarray(vals).astype(np.float32)).astype(storage(d))
        else:
            g[...] = g + np.asarray(vals).astype(storage(d))
