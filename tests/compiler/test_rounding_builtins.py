"""dsl.floor / ceil / round / trunc (vector builtins: llvm.floor / ceil / rint / trunc natively,
numpy's floor / ceil / rint / trunc in the interpreter): exact against numpy for f32 / f16 / bf16
(signed zeros, halves, NaN, inf, values past 2**23), native == interpreter bit for bit with the
same trace and cycles, one simple V repeat each in the timing model, no helper calls on any target
(roundps needs SSE4.1, part of x86-64-v2), and float-only (E204 names the builtin)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dsl
from dsl import GM, Const, f32
from dsl.errors import KernelError
from simulator.isa import VECTOR_REPEAT_COST, Instr
from tests.compiler.test_cross_targets import cross, foreign_symbols  # noqa: F401
from tests.compiler.test_interpret import both, same, same_runs

NUMPY = {"floor": np.floor, "ceil": np.ceil, "round": np.rint, "trunc": np.trunc}
INSTR = {"floor": Instr.VFLOOR, "ceil": Instr.VCEIL, "round": Instr.VRINT, "trunc": Instr.VTRUNC}


@dsl.kernel
def rounding(x: GM, y: GM, OP: Const[str] = "floor", TILE: Const[int] = 512):
    for t in dsl.tiles(x.shape[0], TILE):
        v = x[t]
        if OP == "floor":
            y[t] = dsl.floor(v)
        elif OP == "ceil":
            y[t] = dsl.ceil(v)
        elif OP == "round":
            y[t] = dsl.round(v)
        else:
            y[t] = dsl.trunc(v)


@dsl.kernel
def rounding_all(x: GM[f32], y: GM[f32], TILE: Const[int] = 512):
    for t in dsl.tiles(x.shape[0], TILE):
        v = x[t]
        y[t] = dsl.floor(v) + dsl.ceil(v) + dsl.round(v) + dsl.trunc(v)


def _inputs(dtype: torch.dtype) -> torch.Tensor:
    special = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 1.0, -1.0, 3.7, -3.7,
               2.0 ** 23 + 1, -(2.0 ** 23) - 1, 2.0 ** 22 + 0.5, 1e30, -1e30, 1e-40, -1e-40,
               float("inf"), float("-inf"), float("nan")]
    x = torch.cat([torch.tensor(special), torch.randn(1000) * 10, torch.randint(-40, 40, (200,)) / 2.0])
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", list(NUMPY))
def test_exact_against_numpy(op: str, dtype: torch.dtype) -> None:
    x = _inputs(dtype)
    y = torch.empty_like(x)
    rounding[3](x, y, OP=op)
    want = torch.from_numpy(NUMPY[op](x.float().numpy())).to(dtype)
    assert torch.equal(y.isnan(), want.isnan())
    ok = ~want.isnan()
    assert torch.equal(y[ok], want[ok])
    assert torch.equal(y[ok].float().signbit(), want[ok].float().signbit())   # -0.5 -> -0.0


@pytest.mark.parametrize("op", list(NUMPY))
def test_native_equals_interpreter(op: str) -> None:
    x = _inputs(torch.float32).numpy()
    na, ia, nr, ir = both(rounding[2], [x, np.empty_like(x)], profile=True, OP=op)
    same(na[1], ia[1])
    same_runs(nr, ir)


def test_one_simple_repeat_each() -> None:
    for op, ins in INSTR.items():
        assert VECTOR_REPEAT_COST[ins] == VECTOR_REPEAT_COST[Instr.VADD] == 1, op
    x = np.linspace(-5, 5, 64 * 64, dtype=np.float32)   # 16 KiB: 64 repeats of 256 bytes
    run = rounding.with_options(buffers=1)[1].profile(x, np.empty_like(x), OP="trunc", TILE=4096)
    assert run.profile.work["V"] == 64


def test_float_only() -> None:
    x = np.arange(10, dtype=np.int32)
    with pytest.raises(KernelError, match=r"E204.*'dsl.floor' needs a float tile, got i32"):
        rounding[1](x, x.copy(), OP="floor")


def test_rounding_needs_no_helpers(cross) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    x = np.ones(4096, dtype=np.float32)
    assert foreign_symbols(rounding_all.emit("llvm", x, x.copy()), cross) == []
