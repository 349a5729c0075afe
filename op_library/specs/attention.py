"""Registry entries (op_library.registry) for op_library.attention: `sdpa` (torch's
F.scaled_dot_product_attention, forward and backward against torch autograd in f32) and
`npu_fusion_attention` (against `npu_reference` below, a plain-torch statement of torch_npu's
semantics for layouts, masks and sparse modes; its backward is autograd of that reference).

Tolerances: f16 / bf16 round P (and in the backward dS) to the input dtype before the cube products,
as flash attention on the NPU does, so outputs carry about one ulp of the dtype times |V| (or |dO|)
on top of the reference's single rounding: atol is raised to about an ulp at 1 (then scaled by
sqrt(k) as every entry), rtol kept at torch's default. Dropout is not compared here (the reference
cannot draw our random mask): tests/op_library/test_attention.py checks it by statistics and by
forward / backward consistency.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from op_library.attention import (
    npu_fusion_attention,
    npu_fusion_attention_grad,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
)
from op_library.registry import FLOATS, Case, OpSpec, Tol, register

_WHY = ("P and dS are rounded to the input dtype before the cube products (as flash attention on the NPU), "
        "about one ulp of the dtype times |V| per output")
TOL = {torch.float16: Tol(1e-3, 1e-3, _WHY), torch.bfloat16: Tol(1.6e-2, 8e-3, _WHY)}


def _r(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


# sdpa -------------------------------------------------------------------------------------------

def _sdpa_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    def one(b: int, h: int, hk: int, L: int, S: int, E: int, mask: Any = None, label: str = "", **kw: Any) -> Case:
        args = (_r(b, h, L, E, dtype=dtype), _r(b, hk, S, E, dtype=dtype), _r(b, hk, S, E, dtype=dtype), mask)
        return Case(args, kw, label=label or f"{b}x{h}x{L}x{E} S={S}", k=max(L, S, E))

    # head dim 16 in the quick cases (one specialisation of each kernel to compile), more with quick=False
    out = [one(2, 3, 3, 37, 100, 16, label="tails 37 x 100"),
           one(1, 2, 2, 100, 37, 16, label="L > S causal", is_causal=True),
           one(1, 1, 1, 1, 1, 16, label="1-length"),
           one(2, 4, 2, 37, 45, 16, label="GQA 4 / 2 heads", enable_gqa=True),
           one(2, 2, 2, 37, 70, 16, torch.rand(37, 70) > 0.3, label="bool mask (L, S)"),
           one(2, 2, 2, 20, 33, 16, _r(2, 1, 1, 33, dtype=dtype), label="float mask (B, 1, 1, S)", scale=0.3)]
    q = _r(2, 37, 3, 16, dtype=dtype).transpose(1, 2)
    out.append(Case((q, _r(2, 3, 50, 16, dtype=dtype), _r(2, 3, 50, 16, dtype=dtype), None), label="query non-contiguous",
                    k=50))
    if not quick:
        out += [one(2, 3, 3, 37, 100, 64, label="tails 37 x 100, head dim 64"),
                one(2, 3, 3, 130, 130, 128, label="head dim 128", is_causal=True),
                one(1, 1, 1, 1, 1, 8, label="1-length, head dim 8"),
                one(1, 2, 2, 70, 70, 20, torch.rand(2, 70, 70) > 0.5, label="bool mask per head, E=20"),
                one(2, 2, 2, 37, 100, 64, torch.rand(37, 100) > 0.3, label="mask and causal", is_causal=True),
                one(4, 8, 8, 1024, 1024, 64, label="B=4 N=8 S=1024 D=64")]
        big = out.pop()
        out.append(Case(big.args, big.kwargs, label=big.label, k=big.k, large=True))
    return out


def _sdpa_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    q, k, v, mask = args
    return scaled_dot_product_attention_backward(grad, q, k, v, out, mask, **kw)


register(OpSpec("sdpa", scaled_dot_product_attention, F.scaled_dot_product_attention, FLOATS, _sdpa_cases, _sdpa_bwd,
                (0, 1, 2), tol=TOL))


# npu_fusion_attention ---------------------------------------------------------------------------

def _to_bnsd(t: torch.Tensor, layout: str, heads: int | None, D: int) -> torch.Tensor:
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.permute(0, 2, 1, 3)
    n = t.shape[-1] // D if heads is None else heads
    if layout == "BSH":
        return t.reshape(t.shape[0], t.shape[1], n, D).permute(0, 2, 1, 3)
    return t.reshape(t.shape[0], t.shape[1], n, D).permute(1, 2, 0, 3)   # SBH


def _from_bnsd(t: torch.Tensor, layout: str) -> torch.Tensor:
    B, N, S, D = t.shape
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.permute(0, 2, 1, 3)
    if layout == "BSH":
        return t.permute(0, 2, 1, 3).reshape(B, S, N * D)
    return t.permute(2, 0, 1, 3).reshape(S, B, N * D)


def npu_reference(query: Any, key: Any, value: Any, head_num: int, input_layout: str, atten_mask: Any = None,
                  scale: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = 2147483647,
                  next_tockens: int = 2147483647, sparse_mode: int = 0) -> tuple[Any, Any, Any]:
    """torch_npu.npu_fusion_attention's (attention_out, softmax_max, softmax_sum) in plain torch
    (no dropout): atten_mask True = masked out, sparse_mode 0 / 2 / 3 as op_library.attention says;
    a row with no key left gives 0, softmax_max -3e38 and softmax_sum 0."""
    D = query.shape[-1] if input_layout in ("BNSD", "BSND") else query.shape[-1] // head_num
    q = _to_bnsd(query, input_layout, head_num, D)
    k, v = (_to_bnsd(t, input_layout, None, D) for t in (key, value))
    N, Nk, L, S = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    k, v = k.repeat_interleave(N // Nk, 1), v.repeat_interleave(N // Nk, 1)
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    masked = torch.zeros(L, S, dtype=torch.bool)
    if sparse_mode == 2:
        masked = j > i
    elif sparse_mode == 3:
        masked = j > i + S - L
    elif atten_mask is not None:
        masked = atten_mask.bool() | (j - i > next_tockens) | (i - j > pre_tockens)
    s = (q @ k.transpose(-1, -2) * scale).masked_fill(masked, float("-inf"))
    mx = s.amax(-1, keepdim=True).clamp_min(-3.0e38)
    e = torch.exp(s - mx)
    sm = e.sum(-1, keepdim=True)
    out = (e / sm.clamp_min(1e-30)) @ v
    # torch_npu returns the row max / sum in float32 whatever the input dtype
    return (_from_bnsd(out, input_layout), mx.float().expand(*mx.shape[:-1], 8),
            sm.float().expand(*sm.shape[:-1], 8))


def _npu_fwd(*args: Any, **kw: Any) -> tuple[Any, Any, Any]:
    out, smax, ssum, *_ = npu_fusion_attention(*args, **kw)
    return out, smax, ssum


def _npu_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    q, k, v, heads, layout = args
    kw = dict(kw)
    scale = kw.pop("scale", 1.0)
    dq, dk, dv, _ = npu_fusion_attention_grad(q, k, v, grad, heads, layout, softmax_max=out[1], softmax_sum=out[2],
                                              attention_in=out[0], scale_value=scale, **kw)
    return dq, dk, dv


def _npu_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    B, N, L, S, D = 2, 2, 37, 45, 16
    shapes = {"BNSD": lambda n, s: (B, n, s, D), "BSND": lambda n, s: (B, s, n, D),
              "BSH": lambda n, s: (B, s, n * D), "SBH": lambda n, s: (s, B, n * D)}
    out = []
    for layout, shp in shapes.items():
        args = (_r(*shp(N, L), dtype=dtype), _r(*shp(N, S), dtype=dtype), _r(*shp(N, S), dtype=dtype), N, layout)
        out.append(Case(args, {"scale": 0.25}, label=f"{layout} 2x2x37x16 S2=45", k=S))
    comp = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    for mode in (2, 3):
        args = (_r(B, N, L, D, dtype=dtype), _r(B, N, S, D, dtype=dtype), _r(B, N, S, D, dtype=dtype), N, "BNSD")
        out.append(Case(args, {"scale": 0.25, "atten_mask": comp, "sparse_mode": mode}, label=f"sparse_mode {mode}",
                        k=S))
    mask = torch.rand(B, 1, L, S) > 0.7
    mask[..., 0] = False   # every row keeps a key
    args = (_r(B, 4, L, D, dtype=dtype), _r(B, N, S, D, dtype=dtype), _r(B, N, S, D, dtype=dtype), 4, "BNSD")
    out.append(Case(args, {"scale": 0.25, "atten_mask": mask, "pre_tockens": 20, "next_tockens": 5},
                    label="GQA 4 / 2, B1SS mask, pre 20 next 5", k=S))
    args = (_r(B, L, 2 * D, dtype=dtype), _r(B, S, D, dtype=dtype), _r(B, S, D, dtype=dtype), 2, "BSH")
    out.append(Case(args, {"scale": 0.25, "atten_mask": torch.rand(L, S) > 0.9}, label="BSH GQA 2 / 1, SS mask", k=S))
    if not quick:
        args = (_r(4, 8, 1024, 64, dtype=dtype), _r(4, 8, 1024, 64, dtype=dtype), _r(4, 8, 1024, 64, dtype=dtype), 8,
                "BNSD")
        out.append(Case(args, {"scale": 0.125}, label="B=4 N=8 S=1024 D=64", k=1024, large=True))
    return out


register(OpSpec("npu_fusion_attention", _npu_fwd, npu_reference, FLOATS, _npu_cases, _npu_bwd, (0, 1, 2), tol=TOL))
