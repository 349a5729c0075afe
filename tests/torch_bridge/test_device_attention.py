"""F.scaled_dot_product_attention on npu tensors: the op library's flash attention kernels through
`_fused_sdp_choice` / `_scaled_dot_product_fused_attention_overrideable` (+ backward), the math path
for the rest; forward and backward against torch's CPU SDPA.

Tolerance: f32 kernels accumulate QK^T, the online softmax and P @ V in f32 in another order than
torch's CPU math path (tiles of 64 keys, running max / sum); the differences are a few f32 ulps of
values of order 1 (seen: <= 2e-6), so outputs and gradients are compared at rtol = atol = 1e-5.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import op_library
import torch_bridge
from torch_bridge.device import attention

FUSED = "ScaledDotProductFusedAttentionOverrideableBackward0"


def _new_fallbacks(before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in torch_bridge.fallback_ops().items() if v != before.get(k, 0)}


def _run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None, **kw):
    """SDPA forward and backward on npu copies of q, k, v (their strides kept) checked against the same
    call on the CPU; returns (the npu output's grad_fn name, the ops that fell back)."""
    ins = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    nins = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="npu").copy_(t).requires_grad_()
            for t in (q, k, v)]
    nkw = {a: (b.npu() if torch.is_tensor(b) else b) for a, b in kw.items()}
    before = torch_bridge.fallback_ops()
    out = F.scaled_dot_product_attention(*nins, **nkw)
    g = torch.randn(out.shape) if g is None else g
    out.backward(g.npu())
    new = _new_fallbacks(before)
    ref = F.scaled_dot_product_attention(*ins, **kw)
    ref.backward(g)
    for a, b in zip((out, *(t.grad for t in nins)), (ref, *(t.grad for t in ins))):
        assert a.is_npu
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-5)
    return type(out.grad_fn).__name__, new


def _bsnd(*shape: int) -> torch.Tensor:
    """(B, N, S, D) view of a contiguous (B, S, N, D) tensor: what x.view(B, S, N, D).transpose(1, 2) gives."""
    B, N, S, D = shape
    return torch.randn(B, S, N, D).transpose(1, 2)


B, H, L, E = 2, 4, 24, 16
CASES = {
    # name: (route, q, k, v, kwargs)
    "bnsd": ("BNSD", lambda: (torch.randn(B, H, L, E), torch.randn(B, H, L, E), torch.randn(B, H, L, E)), {}),
    "bsnd causal": ("BSND", lambda: (_bsnd(B, H, L, E), _bsnd(B, H, L, E), _bsnd(B, H, L, E)), {"is_causal": True}),
    "causal L < S": ("BSND", lambda: (_bsnd(B, H, 8, E), _bsnd(B, H, L, E), _bsnd(B, H, L, E)), {"is_causal": True}),
    "gqa": ("BSND", lambda: (_bsnd(B, H, L, E), _bsnd(B, 2, L, E), _bsnd(B, 2, L, E)),
            {"is_causal": True, "enable_gqa": True}),
    "scale": ("BNSD", lambda: (torch.randn(B, H, L, E), torch.randn(B, H, L, E), torch.randn(B, H, L, E)),
              {"scale": 0.3}),
    "bool mask (B, 1, L, S)": ("BNSD", lambda: (torch.randn(B, H, L, E), torch.randn(B, H, L, E),
                                                torch.randn(B, H, L, E)),
                               {"attn_mask": torch.rand(B, 1, L, L) > 0.3}),
    "bool mask (L, S), a row with no key": (
        "BNSD", lambda: (torch.randn(B, H, L, E), torch.randn(B, H, L, E), torch.randn(B, H, L, E)),
        {"attn_mask": torch.cat([torch.zeros(1, L, dtype=torch.bool), torch.rand(L - 1, L) > 0.3])}),
    "bool mask (B, H, L, S)": ("BNSD", lambda: (torch.randn(B, H, L, E), torch.randn(B, H, L, E),
                                                torch.randn(B, H, L, E)),
                               {"attn_mask": torch.rand(B, H, L, L) > 0.3}),
    "float mask": ("sdpa", lambda: (torch.randn(B, H, L, E), torch.randn(B, H, L, E), torch.randn(B, H, L, E)),
                   {"attn_mask": torch.randn(B, 1, L, L)}),
    "padding mask (B, 1, 1, S)": ("sdpa", lambda: (torch.randn(B, H, L, E), torch.randn(B, H, L, E),
                                                   torch.randn(B, H, L, E)),
                                  {"attn_mask": torch.rand(B, 1, 1, L) > 0.3}),
    "causal and a bool mask": ("sdpa", lambda: (torch.randn(B, H, L, E), torch.randn(B, H, L, E),
                                                torch.randn(B, H, L, E)),
                               {"attn_mask": torch.rand(L, L) > 0.3, "is_causal": True}),
    "3-D": ("sdpa", lambda: (torch.randn(H, L, E), torch.randn(H, L, E), torch.randn(H, L, E)), {"is_causal": True}),
    "value head dim 8": ("sdpa", lambda: (torch.randn(B, H, L, E), torch.randn(B, H, L, E), torch.randn(B, H, L, 8)),
                         {}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sdpa_runs_on_the_kernels_and_matches_cpu(name):
    torch.manual_seed(0)
    route, make, kw = CASES[name]
    q, k, v = make()
    nkw = {a: (b.npu() if torch.is_tensor(b) else b) for a, b in kw.items()}
    assert attention.plan(q.npu(), k.npu(), v.npu(), nkw.get("attn_mask"), 0.0, kw.get("is_causal", False),
                          kw.get("enable_gqa", False)) == route
    grad_fn, new = _run(q, k, v, **kw)
    assert grad_fn == FUSED
    assert new == {}


def test_bsnd_views_go_in_without_a_copy_and_come_back_as_views():
    q, k, v = (_bsnd(B, H, L, E).npu() for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.shape == (B, H, L, E) and out.transpose(1, 2).is_contiguous()   # the BSND result, viewed


def test_choice_is_the_aten_op():
    q = torch.randn(B, H, L, E, device="npu")
    assert torch.ops.aten._fused_sdp_choice(q, q, q) == int(SDPBackend.OVERRIDEABLE)
    assert torch.ops.aten._fused_sdp_choice(q.double(), q.double(), q.double()) == int(SDPBackend.MATH)
    with sdpa_kernel([SDPBackend.MATH]):
        assert torch.ops.aten._fused_sdp_choice(q, q, q) == int(SDPBackend.MATH)
        grad_fn, _ = _run(q.cpu(), q.cpu(), q.cpu())
    assert grad_fn != FUSED                       # sdpa_kernel(MATH) is honoured: torch's decomposition


def test_backward_follows_the_forward_whatever_sdpa_kernel_says_by_then():
    q = torch.randn(B, H, L, E)
    qn = q.npu().requires_grad_()
    out = F.scaled_dot_product_attention(qn, qn, qn, is_causal=True)
    with sdpa_kernel([SDPBackend.MATH]):
        out.sum().backward()
    qc = q.clone().requires_grad_()
    F.scaled_dot_product_attention(qc, qc, qc, is_causal=True).sum().backward()
    torch.testing.assert_close(qn.grad.cpu(), qc.grad, rtol=1e-5, atol=1e-5)


def test_math_path_cases_match_cpu():
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, L, E) for _ in range(3))
    # a mask that needs a gradient: the kernels give none, so torch's math path runs (mask grad too)
    m = torch.randn(B, 1, L, L, requires_grad=True)
    mn = m.detach().npu().requires_grad_()
    assert attention.plan(q.npu(), k.npu(), v.npu(), mn).startswith("math")
    out = F.scaled_dot_product_attention(q.npu(), k.npu(), v.npu(), attn_mask=mn)
    out.sum().backward()
    F.scaled_dot_product_attention(q, k, v, attn_mask=m).sum().backward()
    torch.testing.assert_close(mn.grad.cpu(), m.grad, rtol=1e-5, atol=1e-5)
    # float64 (no kernels): still correct
    grad_fn, _ = _run(q.double(), k.double(), v.double(), g=torch.randn(B, H, L, E, dtype=torch.float64))
    assert grad_fn != FUSED


@pytest.mark.parametrize("bad", ["mask shape", "gqa off"])
def test_bad_calls_raise_torchs_errors(bad):
    q = torch.randn(B, H, L, E)
    if bad == "mask shape":
        args, kw = (q, q, q), {"attn_mask": torch.ones(3, L, dtype=torch.bool)}
    else:
        args, kw = (q, q[:, :2], q[:, :2]), {}
    with pytest.raises(RuntimeError) as cpu:
        F.scaled_dot_product_attention(*args, **kw)
    with pytest.raises(RuntimeError) as npu:
        F.scaled_dot_product_attention(*(t.npu() for t in args), **{a: (b.npu() if torch.is_tensor(b) else b)
                                                                    for a, b in kw.items()})
    assert str(npu.value).split("\n")[0] == str(cpu.value).split("\n")[0]


def test_dropout_uses_the_forwards_mask_in_the_backward():
    """The kernels draw dropout from a seed of torch's CPU generator; the fused backward must replay the
    forward's mask (the seed travels in philox_seed). Reference: the op library's own SDPA backward
    with the seed of the same draw."""
    causal = True
    q, k, v = (torch.randn(B, H, L, E) for _ in range(3))
    g = torch.randn(B, H, L, E)
    nins = [t.npu().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(7)
    out = F.scaled_dot_product_attention(*nins, dropout_p=0.3, is_causal=causal)
    out.backward(g.npu())
    torch.manual_seed(7)
    ref = op_library.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=causal)
    grads = op_library.scaled_dot_product_attention_backward(g, q, k, v, ref, dropout_p=0.3, is_causal=causal)
    torch.testing.assert_close(out.detach().cpu(), ref, rtol=1e-5, atol=1e-5)
    for t, r in zip(nins, grads):
        torch.testing.assert_close(t.grad.cpu(), r, rtol=1e-5, atol=1e-5)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert (out.detach().cpu() - plain).abs().max() > 1e-2     # dropout did drop something
    torch.manual_seed(7)
    again = F.scaled_dot_product_attention(*(t.detach() for t in nins), dropout_p=0.3, is_causal=causal)
    torch.testing.assert_close(again.cpu(), out.detach().cpu(), rtol=0, atol=0)


def test_inference_mode_uses_the_kernels():
    q = torch.randn(B, H, L, E)
    before = torch_bridge.fallback_ops()
    with torch.inference_mode():
        out = F.scaled_dot_product_attention(q.npu(), q.npu(), q.npu(), is_causal=True)
    assert _new_fallbacks(before) == {}           # the math path would fall back (_safe_softmax's isneginf)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, q, q, is_causal=True),
                               rtol=1e-5, atol=1e-5)


def test_bf16_matches_cpu_in_f32():
    """bf16 runs on the kernels (P cast to bf16 before P @ V, f32 accumulation); compared with torch's
    f32 result at bf16's resolution."""
    dtype = torch.bfloat16
    torch.manual_seed(0)
    q, k, v = (_bsnd(B, H, L, E) for _ in range(3))
    out = F.scaled_dot_product_attention(*(t.to(dtype).npu() for t in (q, k, v)), is_causal=True)
    assert out.dtype == dtype
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.float().cpu(), ref, rtol=4e-2, atol=4e-2)
