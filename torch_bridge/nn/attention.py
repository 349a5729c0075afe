"""MultiheadAttention on torch.ops.npu: the projections on `linear`, the attention itself on torch_npu's
fused `npu_fusion_attention` (BSH layout for batch_first, SBH otherwise: no permutes), or, when the
attention weights are asked for (need_weights=True, torch's default) or a mask is a float mask, on the
explicit path bmm -> masked_fill / add -> softmax -> dropout -> bmm, with the weights averaged by `mean`.
"""
from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["MultiheadAttention"]

_CAUSAL: dict[str, torch.Tensor] = {}


def _causal_mask() -> torch.Tensor:
    """torch_npu's compressed causal mask for sparse_mode=2 (made once)."""
    if "m" not in _CAUSAL:
        _CAUSAL["m"] = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    return _CAUSAL["m"]


class MultiheadAttention(torch.nn.MultiheadAttention):
    """torch.nn.MultiheadAttention on torch.ops.npu (module docstring). add_bias_kv and add_zero_attn are
    not supported (NotImplementedError at construction). Bool masks mean what torch's do (True: not
    allowed to attend); a float mask is added to the scores. With the same in_proj_weight the q / k / v
    projections use its three row blocks (views), as torch does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        why = self.unsupported(self)
        if why:
            raise NotImplementedError(f"MultiheadAttention: {why}")

    @staticmethod
    def unsupported(m: torch.nn.Module) -> str | None:
        """Why a torch.nn.MultiheadAttention with these settings cannot run here (None: it can)."""
        assert isinstance(m, torch.nn.MultiheadAttention)
        if m.bias_k is not None or m.bias_v is not None:
            return "add_bias_kv=True is not supported"
        if m.add_zero_attn:
            return "add_zero_attn=True is not supported"
        return None

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = True,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        why = self.unsupported(self)
        if why:
            raise NotImplementedError(f"MultiheadAttention: {why}")
        unbatched = query.dim() == 2
        if query.dim() not in (2, 3):
            raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.dim()}-D "
                                 "query tensor")
        bdim = 0 if self.batch_first else 1
        if unbatched:
            query, key, value = query.unsqueeze(bdim), key.unsqueeze(bdim), value.unsqueeze(bdim)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        E, H = self.embed_dim, self.num_heads
        if query.shape[-1] != E:
            raise AssertionError(f"was expecting embedding dimension of {E}, but got {query.shape[-1]}")
        B, L, S = query.shape[bdim], query.shape[1 - bdim], key.shape[1 - bdim]
        if self._qkv_same_embed_dim:
            wq, wk, wv = self.in_proj_weight.chunk(3)
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        bq, bk, bv = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None, None, None)
        q = torch.ops.npu.linear(query, wq, bq)
        k = torch.ops.npu.linear(key, wk, bk)
        v = torch.ops.npu.linear(value, wv, bv)

        mask = self._bool_mask(attn_mask, key_padding_mask, B, L, S)
        p = self.dropout if self.training else 0.0
        if need_weights or isinstance(mask, tuple):
            out, w = self._explicit(q, k, v, mask, p, B, L, S, average_attn_weights and need_weights)
            weights = w if need_weights else None
        else:
            sparse, am = 0, mask
            if am is None and is_causal and key_padding_mask is None:
                sparse, am = 2, _causal_mask()
            out = torch.ops.npu.npu_fusion_attention(q, k, v, H, "BSH" if self.batch_first else "SBH", atten_mask=am,
                                                     scale=1.0 / math.sqrt(self.head_dim), keep_prob=1.0 - p,
                                                     sparse_mode=sparse)[0]
            weights = None
        out = torch.ops.npu.linear(out, self.out_proj.weight, self.out_proj.bias)
        if unbatched:
            out = out.squeeze(bdim)
            if weights is not None:
                weights = weights.squeeze(0)
        return out, weights

    def _bool_mask(self, attn_mask: torch.Tensor | None, kpm: torch.Tensor | None, B: int, L: int, S: int
                   ) -> torch.Tensor | tuple[torch.Tensor | None, torch.Tensor | None] | None:
        """One bool mask (True: masked out) of a shape npu_fusion_attention takes, or (attn_mask, kpm)
        as 4-D float/bool pieces for the explicit path when either is a float mask."""
        H = self.num_heads
        if attn_mask is not None:
            if attn_mask.dim() == 3:
                if tuple(attn_mask.shape) != (B * H, L, S):
                    raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                       f"{(B * H, L, S)}.")
                attn_mask = attn_mask.view(B, H, L, S)
            elif attn_mask.dim() == 2:
                if tuple(attn_mask.shape) != (L, S):
                    raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                       f"{(L, S)}.")
                attn_mask = attn_mask.view(1, 1, L, S)
            else:
                raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")
        if kpm is not None:
            if tuple(kpm.shape) != (B, S):
                raise AssertionError(f"expecting key_padding_mask shape of {(B, S)}, but got {tuple(kpm.shape)}")
            kpm = kpm.view(B, 1, 1, S)
        floats = any(m is not None and m.dtype != torch.bool for m in (attn_mask, kpm))
        if floats:
            return attn_mask, kpm
        if attn_mask is None and kpm is None:
            return None
        if kpm is None:
            return attn_mask
        if attn_mask is None:
            return kpm.expand(B, 1, L, S)
        return torch.ops.npu.logical_or(attn_mask, kpm)

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: object, p: float, B: int, L: int,
                  S: int, average: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """softmax(q k^T * scale + mask) v with the weights, every step an npu op."""
        H, D = self.num_heads, self.head_dim
        # (B, H, rows, D) from BSH (batch_first) or SBH
        to_heads = [0, 2, 1, 3] if self.batch_first else [1, 2, 0, 3]

        def heads(t: torch.Tensor, rows: int) -> torch.Tensor:
            shape = (B, rows, H, D) if self.batch_first else (rows, B, H, D)
            return torch.ops.npu.permute(t.reshape(shape), to_heads).reshape(B * H, rows, D)

        qh, kh, vh = heads(q, L), heads(k, S), heads(v, S)
        scores = torch.ops.npu.bmm(qh, torch.ops.npu.transpose(kh, 1, 2))
        scale = torch.tensor(1.0 / math.sqrt(D), dtype=scores.dtype)
        scores = torch.ops.npu.mul(scores, scale).view(B, H, L, S)
        pieces = mask if isinstance(mask, tuple) else (mask,)
        for m in pieces:
            if m is None:
                continue
            if m.dtype == torch.bool:
                scores = torch.ops.npu.masked_fill(scores, m, float("-inf"))
            else:
                scores = torch.ops.npu.add(scores, m)
        attn = torch.ops.npu.softmax(scores, -1)
        if p > 0:
            attn = torch.ops.npu.dropout(attn, p, True)
        out = torch.ops.npu.bmm(attn.view(B * H, L, S), vh).view(B, H, L, D)
        out = torch.ops.npu.permute(out, [0, 2, 1, 3] if self.batch_first else [2, 0, 1, 3])
        out = out.reshape((B, L, H * D) if self.batch_first else (L, B, H * D))
        weights = torch.ops.npu.mean(attn, [1]) if average else attn
        return out, weights
