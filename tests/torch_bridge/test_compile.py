"""torch.compile(fullgraph=True) of models calling torch.ops.npu: backend="aot_eager", our "npu" backend
(torch_bridge.compile) and inductor with the npu ops kept opaque (extern calls; its C++ codegen for the
aten ops around them uses g++, present on this host) give eager's loss and gradients."""
from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_bridge
import torch_bridge.compile as tc
from examples.models import common, gpt

BACKENDS = ["aot_eager", "npu", "inductor"]


def _mlp() -> tuple[torch.nn.Module, Callable[[], tuple[torch.Tensor, ...]], Any]:
    torch.manual_seed(0)
    nn = torch_bridge.nn
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 4))
    return m, lambda: (torch.randn(5, 8), torch.randint(0, 4, (5,))), nn.CrossEntropyLoss()


def _gpt() -> tuple[torch.nn.Module, Callable[[], tuple[torch.Tensor, ...]], Any]:
    _, m = common.twins(gpt.build, 0, vocab=64, dim=32, heads=2, layers=1, seq=16)
    return m, lambda: gpt.data(1, 2, 16, 64)[0], gpt.loss(torch_bridge.nn)


def _converted() -> tuple[torch.nn.Module, Callable[[], tuple[torch.Tensor, ...]], Any]:
    """A stock model after torch_bridge.convert: swapped modules and F.* calls redirected by the
    TorchFunctionMode inside forward, which dynamo traces."""
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(8, 16)
            self.b = torch.nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(torch.nn.functional.gelu(torch.nn.functional.softmax(self.a(x), -1)))

    torch.manual_seed(0)
    m, _ = torch_bridge.convert(Net())
    return m, lambda: (torch.randn(5, 8), torch.randint(0, 4, (5,))), torch.nn.CrossEntropyLoss()


MODELS = {"mlp": _mlp, "gpt": _gpt, "converted": _converted}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_matches_eager(name: str, backend: str) -> None:
    if backend == "inductor" and shutil.which("g++") is None:
        pytest.fail("inductor needs a C++ compiler and none is on PATH (g++)")   # say so, do not skip
    model, make, loss_fn = MODELS[name]()
    x, y = make()
    eager_loss = loss_fn(model(x), y)
    eager_loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    tc.clear_graphs()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    loss = loss_fn(compiled(x), y)
    loss.backward()
    torch.testing.assert_close(loss, eager_loss, rtol=1e-6, atol=1e-6)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], rtol=1e-5, atol=1e-6, msg=n)
    if backend == "npu":
        kinds = [g.kind for g in tc.graphs()]
        assert kinds == ["forward", "backward"], kinds
        fw, bw = tc.graphs()
        assert fw.npu_ops and not fw.other_ops, fw   # the forward is npu ops only (and views)
        assert all(k.endswith("_backward") for k in bw.npu_ops), bw
        assert set(bw.other_ops) <= {"aten.add"}, bw   # autograd's sum of a reused tensor's gradients


def test_npu_backend_is_registered_and_trains() -> None:
    assert "npu" in torch._dynamo.list_backends(exclude_tags=())
    model, make, loss_fn = _mlp()
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="npu", fullgraph=True)
    opt = torch_bridge.optim.AdamW(model.parameters(), lr=0.01)
    ropt = torch_bridge.optim.AdamW(ref.parameters(), lr=0.01)
    for _ in range(3):
        x, y = make()
        for m, o in ((compiled, opt), (ref, ropt)):
            o.zero_grad()
            loss_fn(m(x), y).backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_graph_info_text() -> None:
    info = tc.GraphInfo("forward")
    info.npu_ops["linear"] += 2
    assert str(info) == "forward: npu ops linear x2; other ops -"


def test_inductor_keeps_npu_ops_opaque() -> None:
    import re

    from torch._inductor.utils import run_and_get_code

    model, make, _ = _gpt()
    x, _ = make()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="inductor", fullgraph=True)
    out, code = run_and_get_code(compiled, x)
    called = set(re.findall(r"torch\.ops\.npu\.(\w+)", "\n".join(code)))
    # inductor's generated code calls the npu ops as they are (extern calls), one per op kind
    assert {"linear", "embedding", "npu_rms_norm", "npu_rotary_mul", "npu_fusion_attention", "npu_swiglu",
            "add"} <= called, called
    torch.testing.assert_close(out, model(x), rtol=1e-6, atol=1e-6)
