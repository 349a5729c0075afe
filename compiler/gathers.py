"""Gathers and scalars from GM: the rules lowering, codegen and the interpreter share, so that the
native code and the reference interpreter fail with the same text and read the same values.

- `LoadScalar` (`i = idx[r]`): one GM element into an i64 (integer tensors) or f64 (float tensors)
  scalar on the S pipe; `scalar_type` says which. The lowering checks each subscript against its
  dimension first (E404 "index ... is outside dimension ..."); the read itself is bounds-checked
  again against the tensor (`READ_MESSAGE`), like every DMA.
- `VIndexed` VGATHER: every index is checked before anything is written; the first offending one
  in row-major order is reported with its value, its position and the bound (`gather_message`).
"""
from __future__ import annotations

from compiler.ir import VIndexed
from compiler.sexpr import F64, I64
from dsl.types import DType

READ_MESSAGE = "scalar read of element %d of '{name}' ({dtype}), which has %d elements"
READ_HINT = "the element is outside the tensor: check the index"


def scalar_type(d: DType) -> str:
    """The scalar an element of a `d` tensor becomes: f64 for floats, i64 for integers."""
    return F64 if d.is_float else I64


def read_message(name: str, dtype: DType) -> str:
    return READ_MESSAGE.format(name=name, dtype=dtype)


def gather_message(s: VIndexed) -> tuple[str, str]:
    """(message, hint) of a VGATHER's index check. Values: (index, position, bound) for a 1-D tile,
    (index, row, column, bound) for a 2-D one."""
    raw = s.srcs[0].name
    unnamed = raw[:1] == "t" and raw[1:].isdigit()  # a temporary (see Lowerer.new_buf)
    name = "the gathered tile" if unnamed else f"'{raw.split('.')[0]}'"
    if s.dst.rank == 1:
        msg = f"dsl.gather index %d at position %d is outside {name}, which has %d elements"
    elif s.arg == "cols":
        msg = f"dsl.gather index %d at [%d, %d] is outside the %d columns of {name} (axis 1)"
    else:
        msg = f"dsl.gather index %d at [%d, %d] is outside the %d rows of {name} (axis 0)"
    hint = "indices must lie in [0, size) along the gathered axis; clamp them first if needed, " \
           "e.g. dsl.minimum(dsl.maximum(index, 0), size - 1)"
    return msg, hint
