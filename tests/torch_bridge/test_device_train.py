"""Stock torch.nn models and torch.optim.AdamW on the npu device: `model.to("npu")` only."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

import torch_bridge


def _train(model: torch.nn.Module, xs: torch.Tensor, ys: torch.Tensor, device: str, steps: int = 5,
           loss_fn=F.cross_entropy) -> tuple[list[float], torch.nn.Module]:
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    losses = []
    x, y = xs.to(device), ys.to(device)
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def _new_fallbacks(before: dict[str, int]) -> dict[str, int]:
    after = torch_bridge.fallback_ops()
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_mlp_adamw_matches_cpu_without_fallbacks():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4))
    ref = copy.deepcopy(model)
    xs, ys = torch.randn(8, 16), torch.randint(0, 4, (8,))
    before = torch_bridge.fallback_ops()
    losses, model = _train(model, xs, ys, "npu")
    assert _new_fallbacks(before) == {}          # nothing in the training step ran on the CPU fallback
    ref_losses, ref = _train(ref, xs, ys, "cpu")
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-5)
    assert losses[-1] < losses[0]
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.is_npu
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-4)
    # the optimizer state lives on the device too
    st = torch.optim.AdamW(model.parameters()).state
    assert st == {} or all(v.is_npu for s in st.values() for v in s.values() if torch.is_tensor(v) and v.dim())


def test_cnn_forward_backward_matches_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))
    ref = copy.deepcopy(model)
    xs, ys = torch.randn(2, 3, 8, 8), torch.randint(0, 3, (2,))
    before = torch_bridge.fallback_ops()
    losses, model = _train(model, xs, ys, "npu", steps=2)
    assert _new_fallbacks(before) == {}
    ref_losses, ref = _train(ref, xs, ys, "cpu", steps=2)
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-4)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-3, atol=1e-4)


def test_layer_norm_embedding_softmax_match_cpu():
    torch.manual_seed(0)
    emb, ln = torch.nn.Embedding(10, 8), torch.nn.LayerNorm(8)
    idx = torch.tensor([[1, 2, 3], [4, 5, 9]])
    ref = F.softmax(ln(emb(idx)), -1)
    ref.sum().backward()
    ref_grads = [p.grad.clone() for p in (*emb.parameters(), *ln.parameters())]
    emb.zero_grad()
    ln.zero_grad()
    emb.npu()
    ln.npu()
    before = torch_bridge.fallback_ops()
    out = F.softmax(ln(emb(idx.npu())), -1)
    out.sum().backward()
    assert _new_fallbacks(before) == {}
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    for p, g in zip((*emb.parameters(), *ln.parameters()), ref_grads):
        torch.testing.assert_close(p.grad.cpu(), g, rtol=1e-4, atol=1e-5)
    y, mean, rstd = torch.ops.aten.native_layer_norm(emb.weight.detach(), [8], None, None, 1e-5)
    w = emb.weight.detach().cpu()
    torch.testing.assert_close(mean.cpu(), w.mean(-1, keepdim=True))
    torch.testing.assert_close(rstd.cpu(), (w.var(-1, unbiased=False, keepdim=True) + 1e-5).rsqrt())


def test_torch_ops_npu_on_npu_tensors():
    x = torch.randn(4, 8)
    g = torch.rand(8) + 0.5
    y, rstd = torch.ops.npu.npu_rms_norm(x.npu(), g.npu())
    ry, rr = torch.ops.npu.npu_rms_norm(x, g)
    assert y.is_npu and rstd.is_npu
    torch.testing.assert_close(y.cpu(), ry)
    torch.testing.assert_close(torch_bridge.softmax(x.npu(), -1).cpu(), torch_bridge.softmax(x, -1))
