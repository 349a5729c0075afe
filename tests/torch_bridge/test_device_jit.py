"""torch.jit.trace of a stock CNN on the npu device: the traced graph runs on new npu inputs with the
eager model's results (and CPU's within f32 tolerance), its ops dispatch to the same npu kernels as
eager (none falls back to the CPU), its backward runs on npu, and torch.jit.save / load and
ScriptModule.to("npu") work."""
from __future__ import annotations

import io

import pytest
import torch

import torch_bridge


class CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.relu = torch.nn.ReLU()
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(x, 1))


def _cnn() -> CNN:
    torch.manual_seed(0)
    m = CNN().eval()
    with torch.no_grad():      # running statistics that are not the identity
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 1.5)
        m.bn.weight.uniform_(0.5, 1.5)
    return m


@pytest.fixture(scope="module")
def traced() -> tuple[CNN, CNN, torch.jit.ScriptModule]:
    cpu = _cnn()
    npu = _cnn().to("npu")
    return cpu, npu, torch.jit.trace(npu, torch.randn(2, 3, 8, 8, device="npu"))


def _fallbacks_of(fn: object) -> dict[str, int]:
    before = torch_bridge.fallback_ops()
    fn()  # type: ignore[operator]
    return {k: v - before.get(k, 0) for k, v in torch_bridge.fallback_ops().items() if v != before.get(k, 0)}


def test_traced_graph_is_on_npu(traced: tuple[CNN, CNN, torch.jit.ScriptModule]) -> None:
    _, _, tr = traced
    kinds = {n.kind() for n in tr.inlined_graph.nodes()}
    assert {"aten::_convolution", "aten::batch_norm", "aten::relu", "aten::max_pool2d", "aten::linear"} <= kinds
    assert all(p.device == torch.device("npu", 0) for p in tr.parameters())
    assert "device=npu:0" in str(tr.graph)


def test_traced_matches_eager_and_cpu_on_new_inputs(traced: tuple[CNN, CNN, torch.jit.ScriptModule]) -> None:
    cpu, npu, tr = traced
    x = torch.randn(5, 3, 8, 8)                 # another batch size than the example
    with torch.no_grad():
        y = tr(x.npu())
        assert y.is_npu and y.shape == (5, 10)
        assert torch.equal(y.cpu(), npu(x.npu()).cpu())      # the same kernels as eager
        torch.testing.assert_close(y.cpu(), cpu(x), rtol=1e-4, atol=1e-5)


def test_traced_ops_dispatch_to_npu_kernels(traced: tuple[CNN, CNN, torch.jit.ScriptModule]) -> None:
    _, npu, tr = traced
    x = torch.randn(3, 3, 8, 8, device="npu")
    with torch.no_grad():
        eager_fb = _fallbacks_of(lambda: npu(x))
        traced_fb = _fallbacks_of(lambda: tr(x))
        with torch_bridge.profile() as prof:
            tr(x)
    assert traced_fb == eager_fb == {}      # every op of the traced graph ran on an npu kernel
    rows = {r.key: r for r in prof.key_averages()}
    for op in ("aten::convolution_overrideable", "aten::native_batch_norm", "aten::relu",
               "aten::max_pool2d_with_indices", "aten::addmm"):
        assert rows[op].kernel_count >= 1 and rows[op].self_device_time_total > 0, op
    assert not [e.name for e in prof.events() if e.fallback]


def test_traced_backward_on_npu(traced: tuple[CNN, CNN, torch.jit.ScriptModule]) -> None:
    cpu, npu, tr = traced
    x = torch.randn(2, 3, 8, 8)
    tr(x.npu()).square().sum().backward()
    grads = {n: p.grad.detach().cpu() for n, p in tr.named_parameters()}
    for p in tr.parameters():
        p.grad = None
    cpu(x).square().sum().backward()
    for n, p in cpu.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-3, atol=1e-4)
        p.grad = None


def test_save_load_map_location_and_to(traced: tuple[CNN, CNN, torch.jit.ScriptModule]) -> None:
    _, _, tr = traced
    x = torch.randn(2, 3, 8, 8, device="npu")
    with torch.no_grad():
        ref = tr(x).cpu()
    buf = io.BytesIO()
    torch.jit.save(tr, buf)
    buf.seek(0)
    on_npu = torch.jit.load(buf, map_location="npu")
    assert all(p.is_npu for p in on_npu.parameters()) and all(b.is_npu for b in on_npu.buffers())
    buf.seek(0)
    on_cpu = torch.jit.load(buf, map_location="cpu")
    assert all(p.device.type == "cpu" for p in on_cpu.parameters())
    weight = on_cpu.fc.weight
    moved = on_cpu.to("npu")                    # a ScriptModule moves as a stock module does
    assert moved.fc.weight is weight and weight.is_npu
    with torch.no_grad():
        assert torch.equal(on_npu(x).cpu(), ref)
        assert torch.equal(moved(x).cpu(), ref)


def test_module_to_npu_keeps_parameters() -> None:
    """model.to("npu") moves each Parameter in place, as .to("cuda") does: an optimizer made before
    the move still holds the model's parameters."""
    m = torch.nn.Linear(4, 2)
    w = m.weight
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m.to("npu")
    assert m.weight is w and w.is_npu and opt.param_groups[0]["params"][0] is w
    m(torch.randn(3, 4, device="npu")).sum().backward()
    before = w.detach().cpu()
    opt.step()
    assert not torch.equal(w.detach().cpu(), before)
    p = torch.nn.Parameter(torch.randn(3))
    p.data = torch.zeros(3, device="npu")
    assert p.is_npu and isinstance(p, torch.nn.Parameter)
