"""Element types, argument annotations and memory spaces of the kernel language."""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
    """An element type. `llvm` is the LLVM IR spelling, `itemsize` bytes per element."""

    name: str
    itemsize: int
    llvm: str
    is_float: bool
    code: int

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:  # dtypes are singletons
        return self is other

    def __hash__(self) -> int:
        return self.code

    def __reduce__(self) -> str:  # pickles (compile-cache plans) restore the singleton
        return {"bool": "boolean"}.get(self.name, self.name)

    @property
    def np(self) -> np.dtype:
        return _NP[self.name]


f32 = DType("f32", 4, "float", True, 0)
f16 = DType("f16", 2, "half", True, 1)
bf16 = DType("bf16", 2, "bfloat", True, 2)
i32 = DType("i32", 4, "i32", False, 3)
i8 = DType("i8", 1, "i8", False, 4)
#: comparison results; stored one byte per element (0 / 1)
boolean = DType("bool", 1, "i8", False, 5)

DTYPES: dict[str, DType] = {d.name: d for d in (f32, f16, bf16, i32, i8, boolean)}
BY_CODE = {d.code: d for d in DTYPES.values()}
class _NumpyTypes(dict):
    """name -> numpy dtype; bf16 comes from ml_dtypes, imported on first use (it costs ~0.5 s)."""

    def __missing__(self, key: str) -> np.dtype:
        if key != "bf16":
            raise KeyError(key)
        import ml_dtypes

        self[key] = np.dtype(ml_dtypes.bfloat16)
        return self[key]


_NP: dict[str, np.dtype] = _NumpyTypes({
    "f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "i32": np.dtype(np.int32),
    "i8": np.dtype(np.int8), "bool": np.dtype(np.bool_),
})

_TORCH_NAMES = {"float32": f32, "float16": f16, "bfloat16": bf16, "int32": i32, "int8": i8, "bool": boolean}


def from_numpy(dt: np.dtype) -> DType | None:
    for d in DTYPES.values():
        if d.name in _NP and _NP[d.name] == dt:
            return d
    if dt.name == "bfloat16":
        return bf16
    return None


_BY_TORCH: dict[object, DType | None] = {}


def from_torch(dt: object) -> DType | None:
    hit = _BY_TORCH.get(dt, False)
    if hit is False:
        hit = _BY_TORCH[dt] = _TORCH_NAMES.get(str(dt).replace("torch.", ""))
    return hit  # type: ignore[return-value]


class Mem(enum.Enum):
    """Memory spaces a kernel can place buffers in (see `dsl.alloc`)."""

    GM = "GM"
    L1 = "L1"
    L0A = "L0A"
    L0B = "L0B"
    L0C = "L0C"
    UB = "UB"


class _GMType:
    """`GM[f32]` (any rank), `GM[f32, 2]` (rank 2): a tensor in global memory."""

    def __init__(self, dtype: DType | None = None, rank: int | None = None):
        self.dtype, self.rank = dtype, rank

    def __getitem__(self, item: object) -> "_GMType":
        if isinstance(item, tuple):
            return _GMType(*item)
        return _GMType(item)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"GM[{self.dtype}{'' if self.rank is None else ', ' + str(self.rank)}]"


class _ConstType:
    """`Const[int]`: a compile-time parameter; each value compiles its own specialisation."""

    def __init__(self, ty: object = None):
        self.ty = ty

    def __getitem__(self, item: object) -> "_ConstType":
        return _ConstType(item)

    def __repr__(self) -> str:
        return f"Const[{getattr(self.ty, '__name__', self.ty)}]"


GM = _GMType()
Const = _ConstType()
