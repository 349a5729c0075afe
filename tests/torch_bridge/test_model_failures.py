"""A kernel that fails inside a model's forward or backward: the exception carries the DSL location,
and the parameters and the fused optimizer's state are as they were before the failing step."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import dsl
import torch_bridge
from dsl import GM, Const, f32, i32
from torch_bridge import nn, optim

HERE = Path(__file__).resolve()


@dsl.kernel
def rows(w: GM[f32, 2], idx: GM[i32], y: GM[f32, 2], R: Const[int] = 8):
    for t in dsl.tiles(idx.shape[0], R):
        for r in dsl.range(t.len):
            j = t.start + r
            y[j, :] = w[idx[j], :]


@dsl.kernel
def rows_bwd(w: GM[f32, 2], idx: GM[i32], dy: GM[f32, 2], dw: GM[f32, 2], R: Const[int] = 8):
    for t in dsl.tiles(idx.shape[0], R):
        for r in dsl.range(t.len):
            j = t.start + r
            dsl.atomic_add(dw[idx[j] + 1, :], dy[j, :])   # wrong on purpose: one row past the last


class Model(torch.nn.Module):
    def __init__(self, op: torch_bridge.custom.CustomOp) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(10, 16))
        self.head = nn.Linear(16, 4)
        self.op = op

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.op(self.table, idx)).pow(2).mean()


def snapshot(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return [t.detach().clone() for t in (*model.parameters(), *state)]


def unchanged(before: list[torch.Tensor], model: torch.nn.Module, opt: torch.optim.Optimizer) -> bool:
    return all(torch.equal(a, b) for a, b in zip(before, snapshot(model, opt), strict=True))


@pytest.fixture
def op():  # type: ignore[no-untyped-def]
    made = torch_bridge.custom_op("failtest::rows", forward=rows, backward=rows_bwd, outputs="[idx.0, w.1]",
                                  grad_inputs=("w",))
    yield made
    made.remove()


def test_forward_failure_names_the_dsl_line_and_keeps_params_and_state(op) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = Model(op)
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    good = torch.tensor([0, 3, 5], dtype=torch.int32)
    model.head(model.table[good]).pow(2).mean().backward()   # one good step on stock indexing: state exists
    opt.step()
    opt.zero_grad()
    before = snapshot(model, opt)
    line = HERE.read_text().splitlines().index("            y[j, :] = w[idx[j], :]") + 1
    with pytest.raises(dsl.KernelError, match=re.escape(f"{HERE}:{line}:")) as e:
        model(torch.tensor([1, 10], dtype=torch.int32)).backward()   # row 10 of a 10-row table
    assert e.value.code == "E404"
    assert unchanged(before, model, opt)
    assert all(p.grad is None for p in model.parameters())


def test_backward_failure_names_the_dsl_line_and_keeps_params_and_state(op) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = Model(op)
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    loss = model(torch.tensor([0, 2], dtype=torch.int32))   # forward is fine; backward writes row 3
    loss.backward()
    opt.step()
    opt.zero_grad()
    before = snapshot(model, opt)
    loss = model(torch.tensor([1, 9], dtype=torch.int32))   # backward would write row 10
    line = HERE.read_text().splitlines().index("            dsl.atomic_add(dw[idx[j] + 1, :], dy[j, :])   "
                                               "# wrong on purpose: one row past the last") + 1
    with pytest.raises(dsl.KernelError, match=re.escape(f"{HERE}:{line}:")):
        loss.backward()
    assert model.table.grad is None
    assert unchanged(before, model, opt)
