"""torch_bridge.convert: modules swapped in place sharing their parameters, the report of what was not
swapped, and functional calls redirected to torch.ops.npu only while the converted model runs."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

import dsl
import torch_bridge
import torch_bridge.nn as tnn


class Attn(torch.nn.Module):
    """A user module whose forward calls F.* directly."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.heads = heads
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        q, k, v = self.qkv(F.layer_norm(x, (D,))).view(B, S, 3, self.heads, D // self.heads).unbind(2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.norm(F.gelu(o.transpose(1, 2).reshape(B, S, D)) + F.silu(x))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(Attn(), torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Dropout(0.0),
                               torch.nn.Identity(), torch.nn.Linear(8, 4))


def test_modules_swapped_in_place_sharing_parameters() -> None:
    model = _model()
    ref = copy.deepcopy(model)
    params = {n: p for n, p in model.named_parameters()}
    mods = dict(model.named_modules())
    out, report = torch_bridge.convert(model)
    assert out is model
    assert type(model[1]) is tnn.Linear and type(model[0].qkv) is tnn.Linear and type(model[0].norm) is tnn.LayerNorm
    assert type(model[2]) is tnn.ReLU and type(model[3]) is tnn.Dropout
    for n, p in model.named_parameters():
        assert p is params[n]   # the same tensors: nothing copied
    for n, m in model.named_modules():
        assert m is mods[n]
    assert ("1", "Linear") in report.swapped and ("0.norm", "LayerNorm") in report.swapped
    assert report.not_swapped == []
    assert ("0", "Attn") in report.custom
    x = torch.randn(2, 6, 16)
    xs, xn = x.clone().requires_grad_(), x.clone().requires_grad_()
    ys, yn = ref(xs), model(xn)
    torch.testing.assert_close(yn, ys, rtol=1e-5, atol=1e-5)
    ys.sum().backward()
    yn.sum().backward()
    torch.testing.assert_close(xn.grad, xs.grad, rtol=1e-5, atol=1e-5)
    for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=n)
    # converting again changes nothing
    _, again = torch_bridge.convert(model)
    assert again.swapped == [] and again.not_swapped == []


def test_functional_calls_run_on_kernels_only_inside_forward() -> None:
    model, report = torch_bridge.convert(_model())
    x = torch.randn(2, 6, 16)
    with dsl.record() as rec:
        model(x)
    names = [n for n, _ in rec.runs]
    # F.layer_norm, F.scaled_dot_product_attention, F.gelu and F.silu of Attn.forward ran as kernels (next
    # to the swapped modules: qkv / Linear x2, LayerNorm, ReLU, Dropout)
    assert names.count("layer_norm_rows") == 2, names
    assert names.count("attn_fwd") == 1, names
    assert names.count("unary_kernel") == 3, names   # gelu, silu, relu
    assert names.count("linear_kernel") == 3, names
    assert not report.fallbacks
    # outside the converted forward, F.* is stock torch again
    with dsl.record() as rec:
        F.softmax(x, -1)
        F.gelu(x)
    assert rec.runs == []


def test_fallbacks_are_counted() -> None:
    class Soft(torch.nn.Module):
        def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            # probability targets: npu::cross_entropy takes class indices only -> stock torch
            return F.cross_entropy(x, t) + F.cross_entropy(x, t.argmax(-1))

    m, report = torch_bridge.convert(Soft())
    x, t = torch.randn(4, 5), torch.softmax(torch.randn(4, 5), -1)
    torch.testing.assert_close(m(x, t), F.cross_entropy(x, t) + F.cross_entropy(x, t.argmax(-1)))
    assert report.fallbacks == {"cross_entropy": 1}
    assert "functional call on stock torch: cross_entropy x1" in str(report)


def test_report_lists_what_could_not_be_swapped() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), torch.nn.Conv1d(4, 4, 1),
                                torch.nn.LSTM(4, 4), torch.nn.Embedding(10, 4, max_norm=1.0),
                                torch.nn.Conv2d(3, 4, 3))
    _, report = torch_bridge.convert(model, functional=False)
    why = {n: w for n, _, w in report.not_swapped}
    assert "padding_mode='reflect'" in why["0"]
    assert why["1"] == "no torch_bridge.nn version" and why["2"] == "no torch_bridge.nn version"
    assert "max_norm" in why["3"]
    assert report.swapped == [("4", "Conv2d")]
    assert type(model[0]) is torch.nn.Conv2d and type(model[4]) is tnn.Conv2d
    text = str(report)
    assert "NOT swapped: 1 (Conv1d): no torch_bridge.nn version" in text
    assert "not redirected" in text


def test_subclass_of_torch_module_is_left_alone() -> None:
    class MyLinear(torch.nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) * 2

    m = torch.nn.Sequential(MyLinear(4, 4))
    _, report = torch_bridge.convert(m)
    assert type(m[0]) is MyLinear and report.custom == [("0", "MyLinear")]
    x = torch.randn(2, 4)
    # its F.linear still goes to the npu op through the functional mode
    with dsl.record() as rec:
        m(x)
    assert any("linear" in n for n, _ in rec.runs)


def test_transformer_encoder_layer() -> None:
    """A stock TransformerEncoderLayer: its Linear / LayerNorm / Dropout / MultiheadAttention (and the
    attention's out_proj) swap, F.relu is redirected, and the result is the stock layer's, in training
    and in eval under no_grad (its fused inference fast path stays off while the mode is active, since
    torch checks has_torch_function, so the swapped modules run)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    ref = copy.deepcopy(layer)
    _, report = torch_bridge.convert(layer)
    assert report.not_swapped == []
    assert ("self_attn.out_proj", "NonDynamicallyQuantizableLinear") in report.swapped
    x = torch.randn(2, 7, 32)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(7)
    torch.testing.assert_close(layer(x, src_mask=mask, is_causal=True), ref(x, src_mask=mask, is_causal=True),
                               rtol=1e-5, atol=1e-5)
    layer.eval()
    ref.eval()
    with torch.no_grad(), dsl.record() as rec:
        y = layer(x)
    assert [n for n, _ in rec.runs].count("linear_kernel") == 4 + 2   # q, k, v, out_proj, then linear1/2
    torch.testing.assert_close(y, ref(x), rtol=1e-5, atol=1e-5)
