"""Attention ops against torch: the registry's quick matrix, each layout and sparse mode, rows with no
key, dropout (statistics and forward / backward consistency from one seed), error texts."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import op_library as L
from op_library.specs.attention import npu_reference

torch.manual_seed(0)


def _grads(fn, inputs, g):  # type: ignore[no-untyped-def]
    leaves = [t.detach().float().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out.backward(g.float())
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH"])
@pytest.mark.parametrize("mode", [0, 2, 3])
def test_npu_layouts_and_sparse_modes(layout: str, mode: int) -> None:
    B, N, Nk, Sq, Skv, D = 2, 4, 2, 40, 29, 16   # Sq > Skv: sparse_mode 3 leaves rows with no key
    shp = {"BNSD": lambda n, s: (B, n, s, D), "BSND": lambda n, s: (B, s, n, D), "BSH": lambda n, s: (B, s, n * D),
           "SBH": lambda n, s: (s, B, n * D)}[layout]
    q, k, v = torch.randn(*shp(N, Sq)), torch.randn(*shp(Nk, Skv)), torch.randn(*shp(Nk, Skv))
    kw: dict = {"scale": 0.3, "sparse_mode": mode}
    if mode:
        kw["atten_mask"] = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    else:
        kw["atten_mask"] = torch.rand(Sq, Skv) > 0.8
        kw["pre_tockens"], kw["next_tockens"] = 15, 3
    out, smax, ssum, sout, seed, offset, numels = L.npu_fusion_attention(q, k, v, N, layout, **kw)
    ref_kw = {a: b for a, b in kw.items() if a != "atten_mask" or mode == 0}
    want, wmax, wsum = npu_reference(q, k, v, N, layout, atten_mask=kw["atten_mask"] if mode == 0 else None, **{
        a: b for a, b in ref_kw.items() if a != "atten_mask"})
    assert out.shape == q.shape and smax.shape == (B, N, Sq, 8) and smax.dtype == torch.float32
    assert sout.numel() == 0 and (seed, offset, numels) == (0, 0, B * N * Sq * Skv)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(smax, wmax, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ssum, wsum, atol=1e-5, rtol=1e-5)
    g = torch.randn(q.shape)
    ref_fn = lambda a, b, c: npu_reference(a, b, c, N, layout, atten_mask=kw["atten_mask"] if mode == 0 else None,  # noqa: E731
                                           **{x: y for x, y in ref_kw.items() if x != "atten_mask"})[0]
    _, want_g = _grads(ref_fn, (q, k, v), g)
    dq, dk, dv, dpse = L.npu_fusion_attention_grad(q, k, v, g, N, layout, softmax_max=smax, softmax_sum=ssum,
                                                   attention_in=out, scale_value=0.3,
                                                   **{a: b for a, b in kw.items() if a != "scale"})
    for got, w in zip((dq, dk, dv), want_g, strict=True):
        torch.testing.assert_close(got, w, atol=1e-5, rtol=1e-5)
    if mode == 3:   # rows 0 .. Sq - Skv - 1 see no key: output 0, zero gradient
        rows = Sq - Skv
        o4 = out if layout == "BNSD" else None
        if o4 is not None:
            assert torch.equal(o4[:, :, :rows], torch.zeros_like(o4[:, :, :rows]))


def test_sdpa_fully_masked_rows_give_zero() -> None:
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    m = torch.rand(5, 6) > 0.5
    m[2] = False
    out = L.scaled_dot_product_attention(q, k, v, m)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, m), atol=1e-6, rtol=1e-5)
    assert torch.equal(out[:, :, 2], torch.zeros(1, 2, 8))
    dq, dk, dv = L.scaled_dot_product_attention_backward(torch.ones_like(out), q, k, v, out, m)
    assert torch.equal(dq[:, :, 2], torch.zeros(1, 2, 8))


def test_sdpa_batch_dims_2d_and_value_dim() -> None:
    q, k, v = torch.randn(2, 3, 4, 9, 16), torch.randn(2, 3, 4, 11, 16), torch.randn(2, 3, 4, 11, 5)
    torch.testing.assert_close(L.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v),
                               atol=1e-6, rtol=1e-5)
    q2, k2 = torch.randn(7, 16), torch.randn(9, 16)
    torch.testing.assert_close(L.scaled_dot_product_attention(q2, k2, k2), F.scaled_dot_product_attention(q2, k2, k2),
                               atol=1e-6, rtol=1e-5)


def test_dropout_statistics_and_reproducibility() -> None:
    # with V = identity rows, out[r] is row r of the dropped-out probabilities times 1 / (1 - p)
    Lq, S, p = 64, 256, 0.3
    q = torch.zeros(1, 1, Lq, 16)   # uniform P = 1 / S
    k = torch.randn(1, 1, S, 16)
    v = torch.eye(S)[None, None]
    torch.manual_seed(123)
    a = L.scaled_dot_product_attention(q, k, v, dropout_p=p)
    torch.manual_seed(123)
    b = L.scaled_dot_product_attention(q, k, v, dropout_p=p)
    assert torch.equal(a, b) and a.dropout_seed == b.dropout_seed
    kept = (a != 0).float().mean().item()
    assert abs(kept - (1 - p)) < 0.01   # 16384 draws: sigma 0.0036
    nz = a[a != 0]
    torch.testing.assert_close(nz, torch.full_like(nz, 1 / (S * (1 - p))))
    c = L.scaled_dot_product_attention(q, k, v, dropout_p=p)   # a new seed, another mask
    assert not torch.equal(a != 0, c != 0)


def test_dropout_backward_matches_the_forward_mask() -> None:
    """The gradient of a dropout run equals autograd of the reference with the kernel's own keep mask
    (read back through V = identity, which reveals the mask)."""
    B, H, Lq, S, E, p = 1, 2, 33, 40, 16, 0.25
    q, k = torch.randn(B, H, Lq, E), torch.randn(B, H, S, E)
    torch.manual_seed(7)
    eye = L.scaled_dot_product_attention(q, k, torch.eye(S).expand(B, H, S, S).contiguous(), dropout_p=p)
    keep = eye != 0
    seed = eye.dropout_seed
    v = torch.randn(B, H, S, E)
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    ref = (torch.softmax(qr @ kr.transpose(-1, -2) / math.sqrt(E), -1) * keep / (1 - p)) @ vr
    g = torch.randn(B, H, Lq, E)
    ref.backward(g)
    torch.manual_seed(7)   # the same seed again: the same mask on the real V
    out = L.scaled_dot_product_attention(q, k, v, dropout_p=p)
    assert out.dropout_seed == seed
    torch.testing.assert_close(out, ref.detach(), atol=1e-5, rtol=1e-4)
    dq, dk, dv = L.scaled_dot_product_attention_backward(g, q, k, v, out, dropout_p=p)   # seed read from out
    for got, want in ((dq, qr.grad), (dk, kr.grad), (dv, vr.grad)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_npu_keep_prob_round_trip() -> None:
    q, k, v = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 24, 16), torch.randn(1, 2, 24, 16)
    torch.manual_seed(3)
    out, smax, ssum, _, seed, offset, numels = L.npu_fusion_attention(q, k, v, 2, "BNSD", scale=0.25, keep_prob=0.8)
    assert seed != 0 and offset == 0 and numels == 2 * 20 * 24
    ref, *_ = npu_reference(q, k, v, 2, "BNSD", scale=0.25)
    assert not torch.allclose(out, ref)
    g = torch.randn(q.shape)
    d1 = L.npu_fusion_attention_grad(q, k, v, g, 2, "BNSD", softmax_max=smax, softmax_sum=ssum, attention_in=out,
                                     scale_value=0.25, keep_prob=0.8, seed=seed, offset=offset, numels=numels)
    d2 = L.npu_fusion_attention_grad(q, k, v, g, 2, "BNSD", softmax_max=smax, softmax_sum=ssum, attention_in=out,
                                     scale_value=0.25, keep_prob=0.8, seed=seed + 1, offset=offset, numels=numels)
    assert not torch.allclose(d1[2], d2[2])   # the mask follows the seed


def _raises(exc: type, text: str, fn, *a, **kw) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc) as e:
        fn(*a, **kw)
    assert text in str(e.value), str(e.value)


def test_errors() -> None:
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 6, 8)
    _raises(RuntimeError, "must match the size of tensor b (2)", L.scaled_dot_product_attention, q, k, k)
    _raises(RuntimeError, "must divide the number of heads", L.scaled_dot_product_attention, q, torch.randn(2, 3, 6, 8),
            torch.randn(2, 3, 6, 8), enable_gqa=True)
    _raises(RuntimeError, "same dtype", L.scaled_dot_product_attention, q, k.half(), k, enable_gqa=True)
    _raises(RuntimeError, "Expected attn_mask dtype to be bool or float", L.scaled_dot_product_attention, q, q, q,
            torch.ones(5, 5, dtype=torch.int32))
    _raises(RuntimeError, "dropout probability has to be between 0 and 1", L.scaled_dot_product_attention, q, q, q,
            dropout_p=1.5)
    _raises(RuntimeError, "at least 2 dimensional", L.scaled_dot_product_attention, q[0, 0, 0], q[0, 0, 0], q[0, 0, 0])
    _raises(RuntimeError, "does not broadcast", L.scaled_dot_product_attention, q, q, q, torch.ones(4, 5, dtype=torch.bool))
    _raises(RuntimeError, "needs the forward's seed", L.scaled_dot_product_attention_backward, q, q, q, q, q,
            dropout_p=0.5)
    qn = torch.randn(1, 2, 8, 16)
    for what in ("pse", "padding_mask", "prefix", "actual_seq_qlen", "actual_seq_kvlen"):
        _raises(NotImplementedError, f"{what} is not supported", L.npu_fusion_attention, qn, qn, qn, 2, "BNSD",
                **{what: [8] if what in ("prefix", "actual_seq_qlen", "actual_seq_kvlen") else qn})
    _raises(NotImplementedError, "sparse_mode 4 is not supported", L.npu_fusion_attention, qn, qn, qn, 2, "BNSD",
            sparse_mode=4)
    _raises(ValueError, "input_layout must be one of", L.npu_fusion_attention, qn, qn, qn, 2, "TND")
    _raises(RuntimeError, "compressed 2048 x 2048", L.npu_fusion_attention, qn, qn, qn, 2, "BNSD", sparse_mode=2)
    _raises(RuntimeError, "head_num 3 does not match", L.npu_fusion_attention, qn, qn, qn, 3, "BNSD")
    _raises(RuntimeError, "softmax_max is required", L.npu_fusion_attention_grad, qn, qn, qn, qn, 2, "BNSD")
    _raises(RuntimeError, "atten_mask of shape", L.npu_fusion_attention, qn, qn, qn, 2, "BNSD",
            atten_mask=torch.ones(3, 8, dtype=torch.bool))
