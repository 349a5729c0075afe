"""`F.scaled_dot_product_attention` on npu tensors, on the op library's flash attention kernels.

torch picks an SDPA backend per device with `_fused_sdp_choice_stub`, a C++ DispatchStub: a C++
backend registers it with `REGISTER_PRIVATEUSE1_DISPATCH`, which Python cannot do (with the stub
empty, torch takes the math path: matmul, `_safe_softmax`, matmul). So this module does what the
stub would, one dispatcher level up:

- `aten::_fused_sdp_choice` (npu) answers OVERRIDEABLE when the op library's kernels can take the
  call (see `plan`), MATH otherwise; it honours `torch.nn.attention.sdpa_kernel` (the OVERRIDEABLE
  flag);
- `aten::scaled_dot_product_attention` has an npu kernel at AutogradPrivateUse1 (and at
  PrivateUse1, for inference mode) that asks that choice and calls
  `aten::_scaled_dot_product_fused_attention_overrideable` (its autograd formula, torch's
  derivatives.yaml, calls the `_backward` op), or torch's own composite SDPA (the math path: its
  checks, error messages and decomposition) for the rest;
- `_scaled_dot_product_fused_attention_overrideable` and its `_backward` run the kernels:
  * `npu_fusion_attention` / `npu_fusion_attention_grad` for 4-D q, k, v with no mask, a causal
    mask (`is_causal`: sparse_mode 2, torch's top-left causal) or a bool mask of (L, S),
    (B or 1, H or 1, L, S): q, k, v laid out as (B, S, N, D) views (what `x.view(B, S, N, D)
    .transpose(1, 2)` makes) go in as BSND without a copy, the output comes back the same way; the
    forward's row statistics return as `logsumexp` (B, H, L) so the backward does not recompute
    them;
  * `op_library.scaled_dot_product_attention` (+ `_backward`, which recomputes the statistics) for
    float (additive) masks, masks broadcast inside (L, S), a mask with `is_causal` (both apply, as
    torch's CPU SDPA does), q / k / v of other ranks and a value head dim other than the query's.
  GQA (`enable_gqa`, fewer key / value heads), `scale` and dropout (`dropout_p`; the seed drawn
  from torch's CPU generator by the op library, carried to the backward in `philox_seed`) are
  supported by both.

MATH (correct, decomposed into aten ops) runs for: dtypes other than f32 / f16 / bf16, mixed
dtypes, masks that need a gradient, a float mask of another dtype, batch dims that differ between
q, k and v, empty sequences, `dropout_p >= 1`, nested tensors, GQA without `enable_gqa`, and
anything torch would reject (its math path raises its own error).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch.library import Library
from torch.nn.attention import SDPBackend

import op_library
from torch_bridge.device.aten import PLAIN, kernel
from torch_bridge.device.kernels import F, npu_kernel

OVERRIDEABLE: int = SDPBackend.OVERRIDEABLE.value
MATH: int = SDPBackend.MATH.value
_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_FUSED = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
_CHOICE = torch.ops.aten._fused_sdp_choice.default

#: torch_npu's compressed causal mask for sparse_mode 2 (the kernel makes the pattern; only its
#: shape is checked), built on first use
_CAUSAL: list[torch.Tensor] = []


# ------------------------------------------------------------------ which kernels take the call
def plan(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
         dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False) -> str:
    """How the npu runs this SDPA call: "BSND" or "BNSD" (npu_fusion_attention in that layout),
    "sdpa" (op_library.scaled_dot_product_attention), or, for the math path, the reason why not."""
    if not torch._C._get_overrideable_sdp_enabled():
        return "math: the OVERRIDEABLE backend is disabled (torch.nn.attention.sdpa_kernel)"
    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        return "math: attn_mask needs a gradient (the kernels give none)"
    return _route(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)


def _route(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
           dropout_p: float, is_causal: bool, enable_gqa: bool) -> str:
    """plan() from the shapes, dtypes and arguments alone: the kernels' own choice, the same in the
    forward and the backward whatever sdpa_kernel or the grad mode say by then."""
    ts = (query, key, value)
    if any(t.is_nested for t in ts):
        return "math: nested tensors"
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in F:
        return f"math: dtypes {query.dtype}, {key.dtype}, {value.dtype} (the kernels take one of f32, f16, bf16)"
    if not (query.dim() == key.dim() == value.dim() >= 3):
        return "math: q, k and v of different ranks or without a head dim"
    if any(t.device != query.device for t in (*ts, *(() if attn_mask is None else (attn_mask,)))):
        return "math: tensors on different devices (torch raises)"
    batch, (H, L, E), (Hk, S, Ek), (Hv, Sv, Ev) = query.shape[:-3], query.shape[-3:], key.shape[-3:], value.shape[-3:]
    if key.shape[:-3] != batch or value.shape[:-3] != batch:
        return "math: batch dims differ between q, k and v"
    if E != Ek or S != Sv or Hk != Hv or not (H == Hk or (enable_gqa and Hk and H % Hk == 0)):
        return "math: q, k, v shapes torch rejects (or GQA without enable_gqa)"
    if 0 in query.shape or 0 in key.shape or Ev == 0:
        return "math: an empty dim"
    if not 0.0 <= dropout_p < 1.0:
        return f"math: dropout_p {dropout_p}"
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
            return f"math: a {attn_mask.dtype} mask with {query.dtype} q"
        try:
            torch.broadcast_shapes(attn_mask.shape, (*batch, H, L, S))
        except RuntimeError:
            return "math: attn_mask does not broadcast (torch raises)"
    if query.dim() == 4 and Ev == E and (attn_mask is None or (not is_causal and
                                                                _fusion_mask_ok(attn_mask, batch[0], H, L, S))):
        return "BSND" if all(t.transpose(1, 2).is_contiguous() for t in ts) and not query.is_contiguous() else "BNSD"
    return "sdpa"


def _fusion_mask_ok(m: torch.Tensor, B: int, H: int, L: int, S: int) -> bool:
    """npu_fusion_attention's mask shapes: bool (L, S) or (1 or B, 1 or H, L, S)."""
    if m.dtype != torch.bool or m.dim() > 4 or tuple(m.shape[-2:]) != (L, S):
        return False
    lead = (1,) * (4 - m.dim()) + tuple(m.shape[:-2])
    return lead[0] in (1, B) and lead[1] in (1, H)


@kernel("_fused_sdp_choice")
def fused_sdp_choice(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
                     dropout_p: float = 0.0, is_causal: bool = False, *, scale: Any = None,
                     enable_gqa: bool = False) -> int:
    """The SDPA backend for npu tensors: OVERRIDEABLE (the op library's kernels) or MATH."""
    p = plan(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    return MATH if p.startswith("math") else OVERRIDEABLE


PLAIN.add("_fused_sdp_choice")


# ------------------------------------------------------------------ the kernels (on CPU aliases)
def _scale(scale: float | None, E: int) -> float:
    return 1.0 / math.sqrt(E) if scale is None else float(scale)


def _layout(t: torch.Tensor, route: str) -> torch.Tensor:
    """A (B, H, L, E) tensor as npu_fusion_attention takes it in `route`'s layout (a view for BSND)."""
    return t.transpose(1, 2) if route == "BSND" else t


def _fusion_args(attn_mask: torch.Tensor | None, is_causal: bool) -> dict[str, Any]:
    """npu_fusion_attention's atten_mask (True = masked out) and sparse_mode for torch's mask / causal."""
    if is_causal:
        if not _CAUSAL:
            _CAUSAL.append(torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1))
        return {"atten_mask": _CAUSAL[0], "sparse_mode": 2}
    if attn_mask is None:
        return {"atten_mask": None, "sparse_mode": 0}
    m = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    return {"atten_mask": op_library.logical_not(m), "sparse_mode": 0}


def _logsumexp(smax: torch.Tensor, ssum: torch.Tensor) -> torch.Tensor:
    """(B, N, L) f32 max + log(sum) from npu_fusion_attention's (B, N, L, 8) statistics; +inf for a row
    with no key (its probabilities are 0), as the backward kernels expect."""
    m, s = smax[..., 0], ssum[..., 0]
    return op_library.where(op_library.gt(s, 0.0), op_library.add(m, op_library.log(s)), math.inf)


def _seed(t: torch.Tensor) -> int:
    return int(t.item()) if t.numel() else 0


@npu_kernel("_scaled_dot_product_fused_attention_overrideable", check=(0, 1, 2))
def sdpa_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_bias: torch.Tensor | None = None,
                 dropout_p: float = 0.0, is_causal: bool = False, return_debug_mask: bool = False, *,
                 scale: float | None = None) -> tuple[Any, ...]:
    """(output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_attn_mask)."""
    route = _route(query, key, value, attn_bias, dropout_p, is_causal, True)
    if route.startswith("math"):
        raise RuntimeError(f"_scaled_dot_product_fused_attention_overrideable: the npu kernels cannot take this call "
                           f"({route[6:]}); call scaled_dot_product_attention")
    L, S = query.shape[-2], key.shape[-2]
    sc = _scale(scale, query.shape[-1])
    if route == "sdpa":
        out = op_library.scaled_dot_product_attention(query, key, value, attn_bias, dropout_p, is_causal, sc,
                                                      enable_gqa=query.shape[-3] != key.shape[-3])
        lse, seed, offset = torch.empty(0, dtype=torch.float32), getattr(out, "dropout_seed", 0), 0
    else:
        o, smax, ssum, _, seed, offset, _ = op_library.npu_fusion_attention(
            _layout(query, route), _layout(key, route), _layout(value, route), query.shape[1], route, scale=sc,
            keep_prob=1.0 - dropout_p, **_fusion_args(attn_bias, is_causal))
        out, lse = _layout(o, route), _logsumexp(smax, ssum)
    no_seq = torch.empty(0, dtype=torch.int64)       # cum_seq_q / cum_seq_k: no variable-length batches
    return (out, lse, no_seq, no_seq.clone(), L, S, torch.tensor(seed, dtype=torch.int64),
            torch.tensor(offset, dtype=torch.int64), torch.empty(0, dtype=query.dtype))


@npu_kernel("_scaled_dot_product_fused_attention_overrideable_backward", check=(0, 1, 2, 3))
def sdpa_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attn_bias: torch.Tensor | None, grad_input_mask: Any, out: torch.Tensor, logsumexp: torch.Tensor,
                  cum_seq_q: torch.Tensor, cum_seq_k: torch.Tensor, max_q: int, max_k: int, dropout_p: float,
                  is_causal: bool, philox_seed: torch.Tensor, philox_offset: torch.Tensor, *,
                  scale: float | None = None) -> tuple[Any, Any, Any, Any]:
    """(grad_query, grad_key, grad_value, grad_attn_bias); the mask gets no gradient (plan() sends a mask
    that needs one to the math path). The route is the forward's (_route of the same saved tensors)."""
    if attn_bias is not None and len(grad_input_mask) > 3 and grad_input_mask[3]:
        raise RuntimeError("_scaled_dot_product_fused_attention_overrideable_backward: the npu kernels give no "
                           "gradient for attn_bias")
    route = _route(query, key, value, attn_bias, dropout_p, is_causal, True)
    sc = _scale(scale, query.shape[-1])
    seed = _seed(philox_seed)
    if route == "sdpa":
        dq, dk, dv = op_library.scaled_dot_product_attention_backward(
            grad_out, query, key, value, out, attn_bias, dropout_p, is_causal, sc,
            enable_gqa=query.shape[-3] != key.shape[-3], seed=seed)
        return dq, dk, dv, None
    if route.startswith("math") or logsumexp.dim() != 3:
        raise RuntimeError(f"_scaled_dot_product_fused_attention_overrideable_backward: not a call of the npu "
                           f"forward ({route})")
    stats = logsumexp.unsqueeze(-1).expand(*logsumexp.shape, 8)
    dq, dk, dv, _ = op_library.npu_fusion_attention_grad(
        _layout(query, route), _layout(key, route), _layout(value, route), _layout(grad_out, route), query.shape[1],
        route, softmax_max=stats, softmax_sum=torch.ones(stats.shape), attention_in=_layout(out, route),
        scale_value=sc, keep_prob=1.0 - dropout_p, seed=seed, offset=_seed(philox_offset),
        **_fusion_args(attn_bias, is_causal))
    return _layout(dq, route), _layout(dk, route), _layout(dv, route), None


# ------------------------------------------------------------------ scaled_dot_product_attention itself
def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, *, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """aten::scaled_dot_product_attention for npu tensors: the fused op when `_fused_sdp_choice` says
    OVERRIDEABLE, else torch's composite implementation (the math path)."""
    if _CHOICE(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa) == OVERRIDEABLE:
        return _FUSED(query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]
    return _SDPA.decompose(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


_LIB = Library("aten", "IMPL")
# AutogradPrivateUse1: ahead of the op's CompositeImplicitAutograd kernel; the ops called above record
# autograd themselves. PrivateUse1: the same under torch.inference_mode (autograd keys excluded).
_LIB.impl("scaled_dot_product_attention", scaled_dot_product_attention, "AutogradPrivateUse1")
_LIB.impl("scaled_dot_product_attention", scaled_dot_product_attention, "PrivateUse1")
