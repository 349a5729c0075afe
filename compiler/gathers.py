"""Gathers and scalars from GM: the rules lowering, codegen and the interpreter share, so that the
native code and the reference interpreter fail with the same text and read the same values.

- `LoadScalar` (`i = idx[r]`): one GM element into an i64 (integer tensors) or f64 (float tensors)
  scalar on the S pipe; `scalar_type` says which. The lowering checks each subscript against its
  dimension first (E404 "index ... is outside dimension ..."); the read itself is bounds-checked
  again against the tensor (`READ_MESSAGE`), like every DMA.
- `VIndexed` VGATHER: every index is checked before anything is written; the first offending one
  in row-major order is reported with its value, its position and the bound (`gather_message`).
- `GMGather` / `GMScatter` (`x[idx, :]`, `x[t, idx]`, `dsl.atomic_add(y[idx, :], tile)`): GM windows
  whose rows or elements a UB index tile picks (`Indexed`). Every index is checked against its
  dimension before any byte moves (`index_message`: value, position, size), then the whole span
  the indices can reach against the tensor (`DMA_MESSAGE`). One MTE2 (MTE3 for the atomic add)
  instruction of `bursts` bursts (`contiguous`): a row per index when there is one index per row
  of contiguous columns, else an element per burst. The L2 model is told the first burst's offset
  and a stride between bursts: the bursts as if the indices were consecutive (the record has
  one offset; the hit/miss split of scattered rows is approximated, their count is not).
"""
from __future__ import annotations

from compiler.ir import GMRef, Indexed, VIndexed
from compiler.sexpr import F64, I64, const
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


DMA_MESSAGE = "DMA would {verb} elements [%d, %d) of '{name}' ({dtype}), which has %d elements"
DMA_HINT = "the window is outside the tensor: check the shapes and the tile indices"
INDEX_HINT = "indices must lie in [0, size) of the dimension they pick; clamp them first if needed, " \
             "e.g. dsl.minimum(dsl.maximum(idx, 0), size - 1), or dsl.where(ok, idx, 0)"


def index_message(by: Indexed, name: str) -> str:
    """The E404 text of a bad index of a GM gather / scatter. Values: (index, position, size) with
    one index per row or a 1-D index tile, (index, row, column, size) for a 2-D one per element."""
    where = "at [%d, %d]" if two_d_positions(by) else "at position %d"
    return f"index %d {where} of the index tile is outside dimension {by.dim} of '{name}' (size %d)"


def two_d_positions(by: Indexed) -> bool:
    """Whether a bad index is reported by (row, column) rather than one position."""
    return not by.per_row and by.index.rank == 2


def index_at(by: Indexed, r: int | str, c: int | str) -> tuple[int | str, int | str]:
    """(row, column) in the index tile of the index that addresses tile element (r, c)."""
    if by.per_row:
        return (0, r) if by.index.rank == 1 else (r, 0)
    return (r, c)


def contiguous(by: Indexed, ref: GMRef) -> bool:
    """One burst per row (a row of the tile, `cols` elements): one index per row, the columns
    consecutive in GM. Else every element is a burst of its own."""
    return by.per_row and ref.step == const(1)

