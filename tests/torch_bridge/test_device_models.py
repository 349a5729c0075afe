"""Issue 10's CNN and GPT-style decoder written with stock torch.nn, trained with `model.to("npu")` and
stock torch.optim.AdamW against the same models on the CPU; no op of a training step may run on the
CPU fallback. Plus the nn kernels they need (torch_bridge.device.kernels_nn): BatchNorm, the fused
RMSNorm, int64 index bookkeeping.

Tolerance. Every kernel computes in f32 but sums in another order than torch's CPU kernels (tiled
matmuls and convolutions, tree reductions, the flash attention's online softmax), so results differ
by a few f32 ulps: the first step's loss and gradients are compared at rtol = 1e-4, atol = 1e-6
(seen: <= 2e-7 absolute on gradients of order 0.1). Training then goes through AdamW, whose step
lr * m / (sqrt(v) + eps) is about lr whatever the gradient's size, except for a gradient near eps
(1e-8), where it is proportional to g / eps: a weight whose gradient is 0 up to rounding noise
(seen in the CNN: |g| = 3e-9 with a difference of 9e-8) moves by a different fraction of lr on the
two devices, and that difference spreads through the next steps. So after training, losses are
compared at rtol = atol = 1e-4 (seen: 9e-5 CNN, 5e-7 GPT) and weights at atol = lr, one AdamW step
(seen: 1.7e-3 CNN, 2e-5 GPT).
"""
from __future__ import annotations

import collections
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import torch_bridge
from examples.models.common import classification_data, token_data
from examples.npu.train_gpt import GPT, train


def _new_fallbacks(before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in torch_bridge.fallback_ops().items() if v != before.get(k, 0)}


class _Ops(TorchDispatchMode):
    """Counts the aten ops that reach the backends (below autograd)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen[func._schema.name.removeprefix("aten::")] += 1
        return func(*args, **(kwargs or {}))


LR = 3e-3
#: weights after training, against CPU: Adam's step is lr * m / sqrt(v), about +-lr for any gradient
#: component, so one near zero whose sign differs between the kernels' and torch's rounding moves its
#: weight up to 2 * lr apart in one step (the losses, compared at 1e-4, show the training agrees)
W_ATOL = 2 * LR


def _assert_same(model: nn.Module, ref: nn.Module, atol: float = 1e-5) -> None:
    """Weights and buffers (on npu) against the CPU model's."""
    for (name, p), q in zip(model.state_dict().items(), ref.state_dict().values()):
        assert p.is_npu, name
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=atol, msg=lambda m: f"{name}: {m}")


def _assert_first_step(model: nn.Module, ref: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    """The loss and every gradient of one forward / backward, npu against CPU (models already placed)."""
    def step(m: nn.Module, dev: str) -> float:
        out = m(x.to(dev))
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.to(dev).reshape(-1))
        loss.backward()
        return loss.item()
    torch.testing.assert_close(step(model, "npu"), step(ref, "cpu"), rtol=1e-4, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}.grad: {m}")
    model.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)


def cnn(classes: int = 10) -> nn.Module:
    """Issue 10's CNN (conv 3->16 -> relu -> maxpool -> conv 16->32 -> relu -> maxpool -> linear) with
    BatchNorm2d after each convolution and AdaptiveAvgPool2d before the classifier. The convolutions
    have no bias, as usual before a BatchNorm: its mean subtraction cancels a bias, whose gradient is
    then 0 up to rounding noise, and AdamW would turn that noise into full-size steps of random sign."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32 * 4, classes))


def _train_classifier(model: nn.Module, data, device: str) -> list[float]:
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_cnn_trains_like_cpu_without_fallbacks():
    torch.manual_seed(0)
    model = cnn()
    ref = copy.deepcopy(model)
    data = classification_data(5, 8, (3, 16, 16), 10, spread=0.5)
    before = torch_bridge.fallback_ops()
    _assert_first_step(model.npu().train(), ref.train(), *data[0])
    _assert_same(model, ref)       # BatchNorm's running statistics and num_batches_tracked after it
    x = data[1][0]                 # eval mode normalises with the running statistics
    torch.testing.assert_close(model.eval()(x.npu()).detach().cpu(), ref.eval()(x).detach(), rtol=1e-5, atol=1e-5)
    losses = _train_classifier(model, data, "npu")
    assert _new_fallbacks(before) == {}
    ref_losses = _train_classifier(ref, data, "cpu")
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-4)
    assert losses[-1] < losses[0]
    _assert_same(model, ref, atol=W_ATOL)


def test_gpt_trains_like_cpu_without_fallbacks():
    torch.manual_seed(0)
    model = GPT(vocab=128, dim=64, heads=4, layers=2, seq=32)
    ref = copy.deepcopy(model)
    data = token_data(6, 4, 32, 128)
    before = torch_bridge.fallback_ops()
    _assert_first_step(model.npu(), ref, *data[0])
    ops = _Ops()

    def count_last(i: int, loss: float) -> None:      # the last step's ops counted
        if i == len(data) - 2:
            ops.__enter__()
        elif i == len(data) - 1:
            ops.__exit__(None, None, None)
    losses = train(model, data, "npu", on_step=count_last)
    assert _new_fallbacks(before) == {}
    # attention on the fused kernels (no bmm / _safe_softmax decomposition), nn.RMSNorm on the fused norm
    assert ops.seen["_scaled_dot_product_fused_attention_overrideable"] == 2
    assert ops.seen["_scaled_dot_product_fused_attention_overrideable_backward"] == 2
    assert ops.seen["_fused_rms_norm"] == 5 and "_safe_softmax" not in ops.seen and "bmm" not in ops.seen
    ref_losses = train(ref, data, "cpu")
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-4)
    assert losses[-1] < losses[0]
    _assert_same(model, ref, atol=W_ATOL)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_matches_cpu(training, affine):
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(6, affine=affine).train(training)
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        if affine:
            bn.weight.normal_()
            bn.bias.normal_()
    nbn = copy.deepcopy(bn).npu()
    x = torch.randn(4, 6, 5, 5, requires_grad=True)
    xn = x.detach().npu().requires_grad_()
    g = torch.randn(4, 6, 5, 5)
    before = torch_bridge.fallback_ops()
    nbn(xn).backward(g.npu())
    assert _new_fallbacks(before) == {}
    bn(x).backward(g)
    torch.testing.assert_close(xn.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    _assert_same(nbn, bn)
    for p, q in zip(nbn.parameters(), bn.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)
    # aten's save_mean / save_invstd (batch statistics in training, empty in eval)
    args = (None, None, nbn.running_mean, nbn.running_var, training, 0.1, 1e-5)
    out = torch.ops.aten.native_batch_norm(xn.detach(), *args)
    ref = torch.ops.aten.native_batch_norm(x.detach(), None, None, bn.running_mean.clone(), bn.running_var.clone(),
                                           training, 0.1, 1e-5)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_is_one_fused_kernel_and_matches_cpu(affine):
    torch.manual_seed(0)
    rn = nn.RMSNorm(16, eps=1e-6, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            rn.weight.normal_()
    nrn = copy.deepcopy(rn).npu()
    x = torch.randn(3, 5, 16, requires_grad=True)
    xn = x.detach().npu().requires_grad_()
    g = torch.randn(3, 5, 16)
    ops = _Ops()
    with ops:
        y = nrn(xn)
    y.backward(g.npu())
    assert ops.seen["_fused_rms_norm"] == 1 and not {"pow", "mean", "rsqrt"} & set(ops.seen)
    rn(x).backward(g)
    torch.testing.assert_close(y.detach().cpu(), rn(x).detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xn.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    if affine:
        torch.testing.assert_close(nrn.weight.grad.cpu(), rn.weight.grad, rtol=1e-5, atol=1e-5)
    # eps=None: torch's default (float32 eps)
    torch.testing.assert_close(F.rms_norm(xn.detach(), [16]).cpu(), F.rms_norm(x.detach(), [16]))


def test_int64_and_bool_bookkeeping_runs_on_kernels():
    """Position ids, label padding and mask building (int64 in int32 on the kernels, widened)."""
    before = torch_bridge.fallback_ops()
    pos = torch.arange(3, 19, device="npu")
    assert pos.dtype == torch.int64
    torch.testing.assert_close((pos + 5).cpu(), torch.arange(8, 24))
    torch.testing.assert_close((pos + pos).cpu(), 2 * torch.arange(3, 19))
    labels = F.pad(pos, (0, 2), value=-100)
    torch.testing.assert_close(labels.cpu(), F.pad(torch.arange(3, 19), (0, 2), value=-100))
    causal = pos.view(1, -1) <= pos.view(-1, 1)
    torch.testing.assert_close(causal.cpu(), torch.ones(16, 16, dtype=torch.bool).tril())
    keep = causal & (pos.view(1, -1) != 7)
    assert int(keep.sum()) == 136 - 12 and (keep.sum() == 124).item()
    n = torch.zeros((), dtype=torch.long, device="npu")
    n += 1
    assert n.item() == 1
    assert _new_fallbacks(before) == {}
    # outside int32: the CPU computes it (recorded as a fallback), still right
    big = torch.tensor([2 ** 40], device="npu")
    assert (big + 1).item() == 2 ** 40 + 1
    assert _new_fallbacks(before) == {"aten::add.Tensor": 1}
