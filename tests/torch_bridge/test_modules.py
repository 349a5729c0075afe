"""torch_bridge.nn modules against their torch.nn counterparts: same constructor, parameters, init,
state_dict keys and extra_repr; forward and backward results within the op's tolerance; kernels
actually launched; unsupported settings rejected with errors naming them."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

import dsl
import torch_bridge  # noqa: F401
import torch_bridge.nn as tnn

torch.manual_seed(0)

# (name, constructor args/kwargs, input factory); the loose tolerance scales with the longest sum
CASES: list[tuple[str, tuple[Any, ...], dict[str, Any], Callable[[], torch.Tensor]]] = [
    ("Linear", (20, 7), {}, lambda: torch.randn(3, 5, 20)),
    ("Linear", (20, 7), {"bias": False}, lambda: torch.randn(4, 20)),
    ("LayerNorm", (16,), {}, lambda: torch.randn(4, 6, 16)),
    ("LayerNorm", ((6, 16),), {"elementwise_affine": False}, lambda: torch.randn(4, 6, 16)),
    ("RMSNorm", (16,), {"eps": 1e-6}, lambda: torch.randn(4, 6, 16)),
    ("RMSNorm", (16,), {}, lambda: torch.randn(4, 16)),
    ("GroupNorm", (2, 6), {}, lambda: torch.randn(3, 6, 5, 5)),
    ("BatchNorm2d", (6,), {}, lambda: torch.randn(4, 6, 5, 5)),
    ("BatchNorm1d", (6,), {}, lambda: torch.randn(8, 6)),
    ("Conv2d", (3, 8, 3), {"padding": 1}, lambda: torch.randn(2, 3, 9, 9)),
    ("Conv2d", (4, 6, 3), {"stride": 2, "groups": 2, "bias": False}, lambda: torch.randn(2, 4, 9, 7)),
    ("Conv2d", (3, 4, 3), {"padding": "same"}, lambda: torch.randn(1, 3, 8, 8)),
    ("Conv2d", (3, 4, 2), {"padding": "same"}, lambda: torch.randn(1, 3, 8, 8)),
    ("MaxPool2d", (2,), {}, lambda: torch.randn(2, 3, 8, 8)),
    ("MaxPool2d", (3, 2, 1), {}, lambda: torch.randn(2, 3, 9, 9)),
    ("AvgPool2d", (3, 2, 1), {"count_include_pad": False}, lambda: torch.randn(2, 3, 9, 9)),
    ("AdaptiveAvgPool2d", ((3, None),), {}, lambda: torch.randn(2, 3, 9, 7)),
    ("AdaptiveAvgPool2d", (1,), {}, lambda: torch.randn(2, 3, 8, 8)),
    ("ReLU", (), {}, lambda: torch.randn(5, 7)),
    ("GELU", (), {}, lambda: torch.randn(5, 7)),
    ("GELU", (), {"approximate": "tanh"}, lambda: torch.randn(5, 7)),
    ("SiLU", (), {}, lambda: torch.randn(5, 7)),
    ("Sigmoid", (), {}, lambda: torch.randn(5, 7)),
    ("Tanh", (), {}, lambda: torch.randn(5, 7)),
    ("LeakyReLU", (0.2,), {}, lambda: torch.randn(5, 7)),
    ("ELU", (), {}, lambda: torch.randn(5, 7)),
    ("Hardswish", (), {}, lambda: torch.randn(5, 7)),
    ("Softplus", (2.0,), {}, lambda: torch.randn(5, 7)),
    ("Softmax", (-1,), {}, lambda: torch.randn(5, 7)),
    ("Softmax", (0,), {}, lambda: torch.randn(5, 7)),
    ("LogSoftmax", (1,), {}, lambda: torch.randn(5, 7)),
    ("Embedding", (30, 8), {"padding_idx": 2}, lambda: torch.randint(0, 30, (4, 6))),
]


def _pair(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(1)
    stock = getattr(torch.nn, name)(*args, **kwargs)
    torch.manual_seed(1)
    npu = getattr(tnn, name)(*args, **kwargs)
    return stock, npu


def _close(a: torch.Tensor, b: torch.Tensor, k: int = 1) -> None:
    s = math.sqrt(k)
    torch.testing.assert_close(a, b, rtol=1.3e-6 * s * 4, atol=1e-5 * s * 4)


@pytest.mark.parametrize("name,args,kwargs,make", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_module_matches_torch_nn(name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                                 make: Callable[[], torch.Tensor]) -> None:
    stock, npu = _pair(name, args, kwargs)
    assert isinstance(npu, getattr(torch.nn, name)) and type(npu) is not getattr(torch.nn, name)
    assert repr(npu) == repr(stock)   # extra_repr is torch's
    sd_s, sd_n = stock.state_dict(), npu.state_dict()
    assert list(sd_s) == list(sd_n)
    for k in sd_s:   # same init under the same seed
        assert torch.equal(sd_s[k], sd_n[k]), k
    # a state_dict loads both ways
    npu.load_state_dict(sd_s)
    stock.load_state_dict(npu.state_dict())

    x = make()
    xs, xn = x.clone(), x.clone()
    if x.is_floating_point():
        xs.requires_grad_()
        xn.requires_grad_()
    with dsl.record() as rec:
        yn = npu(xn)
    assert rec.runs, f"{name}: no kernel was launched"
    ys = stock(xs)
    k = max(x.shape[-1], x.numel() // max(1, x.shape[0]))
    _close(yn, ys, k)
    g = torch.randn_like(ys)
    ys.backward(g)
    with dsl.record() as rec:
        yn.backward(g)
    assert rec.runs, f"{name}: the backward launched no kernel"
    if x.is_floating_point():
        _close(xn.grad, xs.grad, k * 4)
    for (pn, p_s), (_, p_n) in zip(stock.named_parameters(), npu.named_parameters(), strict=True):
        _close(p_n.grad, p_s.grad, x.numel())
    for (bn, b_s), (_, b_n) in zip(stock.named_buffers(), npu.named_buffers(), strict=True):
        _close(b_n.float(), b_s.float(), x.numel())   # BatchNorm's running stats and batch count


def test_batchnorm_eval_and_momentum_none() -> None:
    stock, npu = _pair("BatchNorm2d", (3,), {"momentum": None})
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5)
        _close(npu(x), stock(x), 100)
    _close(npu.running_mean, stock.running_mean, 100)
    _close(npu.running_var, stock.running_var, 100)
    assert int(npu.num_batches_tracked) == 3
    npu.eval()
    stock.eval()
    x = torch.randn(2, 3, 5, 5)
    _close(npu(x), stock(x), 100)


def test_dropout_scales_and_zeroes() -> None:
    d = tnn.Dropout(0.25)
    x = torch.ones(4000)
    y = d(x)
    kept = y != 0
    assert torch.all(y[kept] == 1 / 0.75)
    assert 0.65 < kept.float().mean().item() < 0.85
    d.eval()
    assert torch.equal(d(x), x)


def test_maxpool_return_indices() -> None:
    stock, npu = _pair("MaxPool2d", (2,), {"return_indices": True})
    x = torch.randn(2, 3, 6, 6)
    (ys, is_), (yn, in_) = stock(x), npu(x)
    assert torch.equal(yn, ys) and torch.equal(in_, is_)


@pytest.mark.parametrize("name,kwargs", [("CrossEntropyLoss", {}), ("CrossEntropyLoss", {"label_smoothing": 0.1}),
                                         ("CrossEntropyLoss", {"reduction": "sum", "ignore_index": 1}),
                                         ("NLLLoss", {}), ("MSELoss", {}), ("MSELoss", {"reduction": "none"})])
def test_losses(name: str, kwargs: dict[str, Any]) -> None:
    stock, npu = _pair(name, (), kwargs)
    x = torch.randn(6, 5)
    if name == "NLLLoss":
        x = torch.log_softmax(x, -1)
    t = torch.randn(6, 5) if name == "MSELoss" else torch.randint(0, 5, (6,))
    xs, xn = x.clone().requires_grad_(), x.clone().requires_grad_()
    ls, ln = stock(xs, t), npu(xn, t)
    _close(ln, ls, 30)
    ls.sum().backward()
    ln.sum().backward()
    _close(xn.grad, xs.grad, 30)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("mask", ["none", "causal", "padding", "float"])
def test_multihead_attention(batch_first: bool, need_weights: bool, mask: str) -> None:
    E, H, B, L = 16, 2, 3, 6
    stock, npu = _pair("MultiheadAttention", (E, H), {"batch_first": batch_first})
    x = torch.randn(B, L, E) if batch_first else torch.randn(L, B, E)
    kw: dict[str, Any] = {"need_weights": need_weights}
    if mask == "causal":
        kw["attn_mask"] = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    elif mask == "padding":
        kpm = torch.zeros(B, L, dtype=torch.bool)
        kpm[0, -2:] = True
        kw["key_padding_mask"] = kpm
    elif mask == "float":
        kw["attn_mask"] = torch.randn(L, L)
    xs, xn = x.clone().requires_grad_(), x.clone().requires_grad_()
    (os_, ws), (on, wn) = stock(xs, xs, xs, **kw), npu(xn, xn, xn, **kw)
    _close(on, os_, 64)
    if need_weights:
        _close(wn, ws, 64)
    else:
        assert wn is None and ws is None
    g = torch.randn_like(os_)
    os_.backward(g)
    on.backward(g)
    _close(xn.grad, xs.grad, 256)
    _close(npu.in_proj_weight.grad, stock.in_proj_weight.grad, 256)


def test_multihead_attention_is_causal_hint_and_unbatched() -> None:
    stock, npu = _pair("MultiheadAttention", (8, 2), {"batch_first": True})
    x = torch.randn(5, 8)
    m = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    os_, _ = stock(x, x, x, attn_mask=m, need_weights=False, is_causal=True)
    on, _ = npu(x, x, x, need_weights=False, is_causal=True)   # the hint alone: sparse_mode=2
    _close(on, os_, 64)


def test_sequential_from_namespace() -> None:
    m = tnn.Sequential(tnn.Linear(4, 8), tnn.ReLU(), tnn.Flatten(), tnn.Linear(8, 2))
    assert m(torch.randn(3, 4)).shape == (3, 2)


def test_unsupported_settings_raise() -> None:
    with pytest.raises(NotImplementedError, match="padding_mode='reflect'"):
        tnn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")
    with pytest.raises(NotImplementedError, match="max_norm"):
        tnn.Embedding(10, 4, max_norm=1.0)
    with pytest.raises(NotImplementedError, match="sparse=True"):
        tnn.Embedding(10, 4, sparse=True)
    with pytest.raises(NotImplementedError, match="add_bias_kv"):
        tnn.MultiheadAttention(8, 2, add_bias_kv=True)


def test_bad_input_errors_like_torch() -> None:
    lin = tnn.Linear(4, 3)
    with pytest.raises(RuntimeError):
        torch.nn.Linear(4, 3)(torch.randn(2, 5))
    with pytest.raises(RuntimeError, match="5|4"):
        lin(torch.randn(2, 5))
    with pytest.raises((RuntimeError, TypeError), match="dtype|Long|int64|float"):
        lin(torch.ones(2, 4, dtype=torch.int64))
    with pytest.raises(RuntimeError, match=r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d"):
        tnn.Conv2d(3, 4, 3)(torch.randn(3, 8))


def test_unbatched_conv_and_pool() -> None:
    for name, args in (("Conv2d", (3, 4, 3)), ("MaxPool2d", (2,)), ("AvgPool2d", (2,))):
        stock, npu = _pair(name, args, {})
        x = torch.randn(3, 8, 8)
        _close(npu(x), stock(x), 27)


def test_softmax_implicit_dim_warns_like_torch() -> None:
    x = torch.randn(3, 4)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        y = tnn.Softmax()(x)
    with pytest.warns(UserWarning):
        ref = torch.nn.Softmax()(x)
    _close(y, ref, 4)
