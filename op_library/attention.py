"""Attention: torch's `scaled_dot_product_attention` and torch_npu's `npu_fusion_attention` /
`npu_fusion_attention_grad`, forward and backward, flash-style on the cube and vector units.

Kernels (op_library.attention_kernels):
- `attn_fwd`: per head and block of BQ queries, a loop over key blocks of BKV: S = Q K^T * scale
  on the cube (scale fused into the L0C -> UB move), mask / band / dropout on the vector unit, the
  online softmax in f32 (running max and sum, the accumulator rescaled), P @ V on the cube with P
  cast to the input dtype (f16 / bf16 / f32: the cube multiplies in the input dtype and
  accumulates in f32). The S x S matrix never reaches GM; per query row it writes the running max
  and sum (torch_npu's softmax_max / softmax_sum, (B, N, L, 8) f32).
- `attn_bwd_prep`: lse = max + log(sum) and rowsum(dO * O) per query row.
- `attn_bwd_dq`: per query block, over its key blocks: P recomputed from lse, dP = dO V^T,
  dS = P * (dP - rowsum(dO * O)), dQ += dS K (three cube products per block).
- `attn_bwd_dkv`: per key block of a key / value head, over the query heads of its group (GQA) and
  their query blocks, on the transposed scores: dV += P^T dO, dK += dS^T Q. No atomics: every
  gradient element has one writer, so results do not depend on the core count.
Blocks: BQ x BKV = 64 x 128 for f16 / bf16 and 64 x 64 for f32 at head dims up to 64 (what fits
L0A / L0B double-buffered), halved per doubling of the head dim.

Layouts: the kernels index every tensor as (G, S, W) and find a head by coefficients (see
attention_kernels), so BNSD, BSH, BSND and SBH run without a host-side transpose; non-contiguous
inputs are made contiguous first.

Masks: `attn_mask` bool (True = take part) or float (added to the scores), broadcastable to
(B..., H, L, S); the batch and head dims of the mask are broadcast inside the kernel, its last two
dims are expanded to (L, S) on the host (a mask of L x S per distinct batch / head). `is_causal`
is torch's top-left aligned tril(ones(L, S)) and combines with a mask (as torch's CPU kernel does).
Rows with no key left give output 0 (torch's CPU result) and zero gradients.

Dropout (`dropout_p`, `keep_prob`): from the kernel RNG (`dsl.rand`, Philox 4x32-10). Probability
(row r, key c) of head bn (= b * N + n) is kept when word `offset + (bn * L + r) * S + c` of the
stream `seed` is >= p, and scaled by 1 / (1 - p); the same words are drawn by the backward. The seed
is drawn from torch's default CPU generator (`torch.randint`), so `torch.manual_seed(s)` makes a run
reproducible, and the result does not depend on the core count. `scaled_dot_product_attention`
records it on its output as `out.dropout_seed` (the backward reads it from there unless given
`seed=`); `npu_fusion_attention` returns (seed, offset, numels) as torch_npu does, with offset 0 and
numels = B * N * S1 * S2.

Known limits: npu_fusion_attention raises for pse, padding_mask, prefix, actual_seq_qlen /
actual_seq_kvlen (TND) and sparse_mode other than 0, 2, 3; sparse_mode 2 / 3 take the 2048 x 2048
compressed mask torch_npu requires but generate the causal pattern in the kernel (the mask's
contents are not read). The SDPA backward recomputes the row max / sum with the forward kernel
(torch's signature returns the output only; a pass without P @ V).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from op_library.attention_kernels import attn_bwd_dkv, attn_bwd_dq, attn_bwd_prep, attn_fwd

__all__ = ["scaled_dot_product_attention", "scaled_dot_product_attention_backward", "npu_fusion_attention",
           "npu_fusion_attention_grad"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_BIG = 2147483647


@dataclass
class _Heads:
    """One tensor seen as (G, S, W) with head (b, n) at [b * gb + n * gn, :, c:c + D], c = b * cb + n * cn."""
    t: torch.Tensor
    gb: int
    gn: int
    cb: int
    cn: int

    def coeffs(self) -> tuple[int, int, int, int]:
        return self.gb, self.gn, self.cb, self.cn


@dataclass
class _Problem:
    """Everything the kernels need besides the tensors."""
    B: int
    N: int        # query heads
    Nk: int       # key / value heads
    L: int
    S: int
    D: int
    DV: int
    scale: float
    mask: torch.Tensor          # (M, L, S) or a dummy
    mask_kind: int              # 0 none, 1 bool keep, 2 bool masked-out, 3 additive
    mgb: int
    mgn: int
    band: bool
    lo: int
    hi: int
    p: float
    seed: int
    offset: int


def _blocks(D: int, dtype: torch.dtype, backward: bool = False, extra: bool = False) -> dict[str, int]:
    """(BQ, BKV): what fits L0A / L0B double-buffered (each cube product has its own buffers: the
    backward's three per block take three times the room) and UB, for the head dim and dtype.
    `extra`: the backward also holds a mask block or dropout draws in UB (an f16 / bf16 backward at
    head dim 64 with an additive mask, or a bool mask and causal, overflowed UB with BKV = 64)."""
    if backward:
        bq, bkv = (32, 32) if dtype == torch.float32 or extra else (32, 64)
    else:
        bq, bkv = 64, 64
    wide = max(D, 16)
    while wide > 64:
        wide = (wide + 1) // 2
        bkv = max(16, bkv // 2)
        bq = max(16, bq // 2)   # the (BQ, D) query block and accumulator grow with D too
    return {"BQ": bq, "BKV": bkv}


def _dummy_mask() -> torch.Tensor:
    return torch.zeros((1, 1, 1), dtype=torch.int8)


def _kernel_args(pb: _Problem, q: _Heads, k: _Heads) -> tuple[Any, ...]:
    lo, hi = max(pb.lo, -pb.L - 1), min(pb.hi, pb.S + 1)
    return (pb.scale, pb.N, pb.N // pb.Nk, *q.coeffs(), *k.coeffs(), pb.mgb, pb.mgn, lo, hi, pb.p, pb.seed,
            pb.offset)


def _consts(pb: _Problem, dtype: torch.dtype, backward: bool = False) -> dict[str, Any]:
    return dict(D=pb.D, DV=pb.DV, MASK=pb.mask_kind, BAND=pb.band, DROP=pb.p > 0,
                **_blocks(max(pb.D, pb.DV), dtype, backward, pb.mask_kind != 0 or pb.p > 0))


def _forward(pb: _Problem, q: _Heads, k: _Heads, v: _Heads, o: _Heads, pv: bool = True
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Run attn_fwd; returns (softmax_max, softmax_sum) as (B*N, L, 8) f32 (pv=False: only those)."""
    smax = torch.empty((pb.B * pb.N, pb.L, 8), dtype=torch.float32)
    ssum = torch.empty((pb.B * pb.N, pb.L, 8), dtype=torch.float32)
    if pb.B * pb.N * pb.L == 0:
        return smax, ssum
    attn_fwd(q.t, k.t, v.t, o.t, smax, ssum, pb.mask, *_kernel_args(pb, q, k), PV=pv, **_consts(pb, q.t.dtype))
    return smax, ssum


def _backward(pb: _Problem, q: _Heads, k: _Heads, v: _Heads, o: _Heads, do: _Heads, smax: torch.Tensor,
              ssum: torch.Tensor, dq: _Heads, dk: _Heads, dv: _Heads) -> None:
    """Run the three backward kernels into dq / dk / dv (laid out as q / k / v)."""
    rows = pb.B * pb.N * pb.L
    if rows == 0 or pb.S == 0:
        if dk.t.numel():
            dk.t.zero_()
            dv.t.zero_()
        if dq.t.numel():
            dq.t.zero_()
        return
    lse = torch.empty((pb.B * pb.N, pb.L), dtype=torch.float32)
    dsum = torch.empty((pb.B * pb.N, pb.L), dtype=torch.float32)
    attn_bwd_prep(o.t, do.t, smax, ssum, lse.view(-1, pb.L, 1), dsum.view(-1, pb.L, 1), pb.N, *q.coeffs(),
                  D=pb.D, DV=pb.DV, BQ=64)
    args = _kernel_args(pb, q, k)
    consts = _consts(pb, q.t.dtype, backward=True)
    attn_bwd_dq(q.t, k.t, v.t, do.t, dq.t, lse.view(-1, pb.L, 1), dsum.view(-1, pb.L, 1), pb.mask, *args, **consts)
    attn_bwd_dkv(q.t, k.t, v.t, do.t, dk.t, dv.t, lse, dsum, pb.mask, *args, **consts)


# scaled_dot_product_attention -------------------------------------------------------------------

def _check_sdpa(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float, enable_gqa: bool) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"scaled_dot_product_attention(): argument '{name}' must be Tensor, not {type(t).__name__}")
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise RuntimeError("Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: "
                           f"{query.dim()} key.dim: {key.dim()} and value.dim: {value.dim()} instead.")
    if not (query.dtype == key.dtype == value.dtype):
        raise RuntimeError("Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead.")
    if query.dtype not in _FLOATS:
        raise RuntimeError(f"scaled_dot_product_attention: expected query of dtype float32, float16 or bfloat16, "
                           f"got {query.dtype}")
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(f"scaled_dot_product_attention: query's last dim ({query.shape[-1]}) must equal key's "
                           f"({key.shape[-1]})")
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: key and value must have the same sequence length, got "
                           f"{key.shape[-2]} and {value.shape[-2]}")
    if attn_mask is not None and attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
        raise RuntimeError("Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                           f"attn_mask.dtype: {attn_mask.dtype} and  query.dtype: {query.dtype} instead.")
    if not 0.0 <= dropout_p <= 1.0:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")


def _lead(t: torch.Tensor) -> tuple[tuple[int, ...], int]:
    """(batch dims, heads) of a (B..., H, S, E) tensor (a 2-D tensor has one head, no batch)."""
    if t.dim() == 2:
        return (), 1
    return tuple(t.shape[:-3]), t.shape[-3]


def _sdpa_problem(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any, dropout_p: float,
                  is_causal: bool, scale: float | None, enable_gqa: bool, seed: int
                  ) -> tuple[_Problem, _Heads, _Heads, _Heads, tuple[int, ...]]:
    _check_sdpa(query, key, value, attn_mask, dropout_p, enable_gqa)
    (qb, H), (kb, Hk), (vb, Hv) = _lead(query), _lead(key), _lead(value)
    if Hk != Hv:
        raise RuntimeError(f"scaled_dot_product_attention: key and value must have the same number of heads, got "
                           f"{Hk} and {Hv}")
    if Hk != H and not (enable_gqa and H % Hk == 0):
        if enable_gqa:
            raise RuntimeError("Number of heads in key and value must divide the number of heads in query")
        raise RuntimeError(f"The size of tensor a ({H}) must match the size of tensor b ({Hk}) at non-singleton "
                           f"dimension {query.dim() - 3}")
    try:
        batch = torch.broadcast_shapes(qb, kb, vb)
    except RuntimeError as e:
        raise RuntimeError(f"scaled_dot_product_attention: batch dims of query {qb}, key {kb} and value {vb} do "
                           f"not broadcast ({e})") from None
    B = math.prod(batch)
    L, E = query.shape[-2], query.shape[-1]
    S, EV = key.shape[-2], value.shape[-1]

    def heads(t: torch.Tensor, tb: tuple[int, ...], h: int, shared: bool = True) -> _Heads:
        t4 = t.reshape(*tb, h, t.shape[-2], t.shape[-1]) if t.dim() == 2 else t
        if shared and tb != batch and math.prod(tb) == 1:   # one batch shared by all: gb = 0
            return _Heads(t4.contiguous().reshape(h, t.shape[-2], t.shape[-1]), 0, 1, 0, 0)
        t4 = t4.expand(*batch, h, t.shape[-2], t.shape[-1]).contiguous()
        return _Heads(t4.reshape(B * h, t.shape[-2], t.shape[-1]), h, 1, 0, 0)

    q, k, v = heads(query, qb, H, shared=False), heads(key, kb, Hk), heads(value, vb, Hk)
    mask, kind, mgb, mgn = _dummy_mask(), 0, 0, 0
    if attn_mask is not None:
        m = attn_mask
        full = (*batch, H, L, S)
        try:
            torch.broadcast_shapes(m.shape, full)
        except RuntimeError:
            raise RuntimeError(f"scaled_dot_product_attention: attn_mask of shape {tuple(m.shape)} does not "
                               f"broadcast to {full} (batch..., heads, L, S)") from None
        if len(full) - m.dim() > 0:
            m = m.reshape((1,) * (len(full) - m.dim()) + tuple(m.shape))
        mb, mh = m.shape[:-3], m.shape[-3]
        bshared = math.prod(mb) == 1
        hshared = mh == 1
        m = m.expand(*((1,) * len(batch) if bshared else batch), 1 if hshared else H, L, S).contiguous()
        m = m.reshape(-1, L, S)
        mask = m.view(torch.int8) if m.dtype == torch.bool else m
        kind = 1 if m.dtype == torch.bool else 3
        mgb, mgn = (0 if bshared else (1 if hshared else H)), (0 if hshared else 1)
    pb = _Problem(B, H, Hk, L, S, E, EV, 1.0 / math.sqrt(E) if scale is None else float(scale), mask, kind, mgb,
                  mgn, is_causal, -_BIG if not is_causal else -L - 1, 0 if is_causal else _BIG, float(dropout_p), seed,
                  0)
    if not is_causal:
        pb.lo, pb.hi = -L - 1, S + 1
    return pb, q, k, v, batch


def _draw_seed() -> int:
    return int(torch.randint(0, 2 ** 62, (), dtype=torch.int64).item())


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Any:
    """torch.nn.functional.scaled_dot_product_attention: (B..., H, L, E) query, (B..., Hk, S, E) key,
    (B..., Hk, S, Ev) value -> (B..., H, L, Ev). See the module docstring for masks, causal, GQA and
    dropout (the seed is recorded on the result as `out.dropout_seed`)."""
    seed = _draw_seed() if dropout_p > 0 else 0
    pb, q, k, v, batch = _sdpa_problem(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed)
    out = torch.empty((*batch, pb.N, pb.L, pb.DV) if query.dim() > 2 else (pb.L, pb.DV), dtype=query.dtype)
    _forward(pb, q, k, v, _Heads(out.view(-1, pb.L, pb.DV), pb.N, 1, 0, 0))
    if dropout_p > 0:
        out.dropout_seed = seed   # type: ignore[attr-defined]
    return out


def scaled_dot_product_attention_backward(grad: Any, query: Any, key: Any, value: Any, out: Any,
                                          attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
                                          scale: float | None = None, enable_gqa: bool = False,
                                          seed: int | None = None) -> tuple[Any, Any, Any]:
    """(grad_query, grad_key, grad_value) of scaled_dot_product_attention for grad of `out`. The row max
    and sum are recomputed with the forward kernel; with dropout the seed is `seed` or `out.dropout_seed`."""
    if dropout_p > 0 and seed is None:
        seed = getattr(out, "dropout_seed", None)
        if seed is None:
            raise RuntimeError("scaled_dot_product_attention_backward: dropout_p > 0 needs the forward's seed: pass "
                               "seed= or the output tensor scaled_dot_product_attention returned")
    pb, q, k, v, batch = _sdpa_problem(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                       seed or 0)
    if tuple(grad.shape) != tuple(out.shape):
        raise RuntimeError(f"scaled_dot_product_attention_backward: grad of shape {tuple(grad.shape)} does not match "
                           f"the output's {tuple(out.shape)}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if _lead(t)[0] != batch:
            raise NotImplementedError(f"scaled_dot_product_attention_backward: {name} is broadcast over the batch "
                                      f"({_lead(t)[0]} vs {batch}); expand it to the full batch first")
    o = _Heads(out.contiguous().view(-1, pb.L, pb.DV), pb.N, 1, 0, 0)
    do = _Heads(grad.to(query.dtype).contiguous().view(-1, pb.L, pb.DV), pb.N, 1, 0, 0)
    # the row max / sum do not depend on dropout: recompute them without it
    stats = _Problem(**{**pb.__dict__, "p": 0.0})
    smax, ssum = _forward(stats, q, k, v, o, pv=False)   # o is not written
    dq = _Heads(torch.empty_like(q.t), pb.N, 1, 0, 0)
    dk = _Heads(torch.empty(pb.B * pb.Nk, pb.S, pb.D, dtype=query.dtype), pb.Nk, 1, 0, 0)
    dv = _Heads(torch.empty(pb.B * pb.Nk, pb.S, pb.DV, dtype=query.dtype), pb.Nk, 1, 0, 0)
    _backward(pb, q, k, v, o, do, smax, ssum, dq, dk, dv)

    return dq.t.reshape(query.shape), dk.t.reshape(key.shape), dv.t.reshape(value.shape)


# npu_fusion_attention ---------------------------------------------------------------------------

_LAYOUTS = ("BNSD", "BSND", "BSH", "SBH")


def _npu_heads(t: torch.Tensor, layout: str, name: str, heads: int | None, D: int | None
               ) -> tuple[_Heads, int, int, int, int]:
    """(view, B, N, S, D) of a torch_npu layout; heads None: infer from D (key / value)."""
    want = 3 if layout in ("BSH", "SBH") else 4
    if t.dim() != want:
        raise RuntimeError(f"npu_fusion_attention: {name} must be {want}-D for input_layout {layout!r}, got shape "
                           f"{tuple(t.shape)}")
    t = t.contiguous()
    if layout == "BNSD":
        B, N, S, d = t.shape
        return _Heads(t.view(B * N, S, d), N, 1, 0, 0), B, N, S, d
    if layout == "BSND":
        B, S, N, d = t.shape
        return _Heads(t.view(B, S, N * d), 1, 0, 0, d), B, N, S, d
    if layout == "BSH":
        B, S, Hd = t.shape
    else:
        S, B, Hd = t.shape
    if heads is None:
        assert D is not None
        d = D
        if Hd % d:
            raise RuntimeError(f"npu_fusion_attention: {name}'s hidden size {Hd} is not a multiple of the head dim {d}")
        N = Hd // d
    else:
        if Hd % heads:
            raise RuntimeError(f"npu_fusion_attention: query's hidden size {Hd} is not a multiple of head_num {heads}")
        N, d = heads, Hd // heads
    if layout == "BSH":
        return _Heads(t.view(B, S, Hd), 1, 0, 0, d), B, N, S, d
    return _Heads(t.view(1, S, B * Hd), 0, 0, Hd, d), B, N, S, d


def _npu_problem(query: Any, key: Any, value: Any, head_num: int, input_layout: str, pse: Any, padding_mask: Any,
                 atten_mask: Any, scale: float, keep_prob: float, pre_tockens: int, next_tockens: int, prefix: Any,
                 actual_seq_qlen: Any, actual_seq_kvlen: Any, sparse_mode: int, seed: int, offset: int
                 ) -> tuple[_Problem, _Heads, _Heads, _Heads]:
    for what, val in (("pse", pse), ("padding_mask", padding_mask), ("prefix", prefix),
                      ("actual_seq_qlen", actual_seq_qlen), ("actual_seq_kvlen", actual_seq_kvlen)):
        if val is not None:
            raise NotImplementedError(f"npu_fusion_attention: {what} is not supported by op_library (pass None)")
    if input_layout not in _LAYOUTS:
        raise ValueError(f"npu_fusion_attention: input_layout must be one of {', '.join(_LAYOUTS)}, got "
                         f"{input_layout!r}" + (" (TND needs actual_seq_qlen, not supported)"
                                                if input_layout == "TND" else ""))
    if sparse_mode not in (0, 2, 3):
        raise NotImplementedError(f"npu_fusion_attention: sparse_mode {sparse_mode} is not supported (0, 2 and 3 are)")
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in _FLOATS:
        raise RuntimeError(f"npu_fusion_attention: query, key and value must share one dtype of float32, float16 or "
                           f"bfloat16, got {query.dtype}, {key.dtype}, {value.dtype}")
    if not 0.0 < keep_prob <= 1.0:
        raise ValueError(f"npu_fusion_attention: keep_prob must be in (0, 1], got {keep_prob}")
    if input_layout == "BNSD" and query.dim() == 4 and query.shape[1] != head_num:
        raise RuntimeError(f"npu_fusion_attention: head_num {head_num} does not match query's N ({query.shape[1]})")
    q, B, N, L, D = _npu_heads(query, input_layout, "query", head_num, None)
    if input_layout in ("BSND",) and N != head_num:
        raise RuntimeError(f"npu_fusion_attention: head_num {head_num} does not match query's N ({N})")
    k, Bk, Nk, S, Dk = _npu_heads(key, input_layout, "key", None, D)
    v, Bv, Nv, Sv, Dv = _npu_heads(value, input_layout, "value", None, D)
    if (Bk, Nk, S, Dk) != (Bv, Nv, Sv, Dv):
        raise RuntimeError(f"npu_fusion_attention: key and value must have the same shape, got {tuple(key.shape)} "
                           f"and {tuple(value.shape)}")
    if Bk != B or Dk != D:
        raise RuntimeError(f"npu_fusion_attention: key's batch / head dim ({Bk}, {Dk}) must match query's ({B}, {D})")
    if N % Nk:
        raise RuntimeError(f"npu_fusion_attention: key / value heads ({Nk}) must divide query heads ({N})")
    mask, kind, mgb, mgn, band, lo, hi = _dummy_mask(), 0, 0, 0, False, -L - 1, S + 1
    if sparse_mode in (2, 3):
        if atten_mask is None or tuple(atten_mask.shape) != (2048, 2048):
            raise RuntimeError(f"npu_fusion_attention: sparse_mode {sparse_mode} needs the compressed 2048 x 2048 "
                               f"atten_mask (torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1))")
        band, hi = True, (0 if sparse_mode == 2 else S - L)
    elif atten_mask is not None:
        if atten_mask.dtype not in (torch.bool, torch.uint8):
            raise RuntimeError(f"npu_fusion_attention: atten_mask must be bool or uint8, got {atten_mask.dtype}")
        m = atten_mask
        if m.dim() == 2:
            m = m.reshape(1, 1, *m.shape)
        ok = m.dim() == 4 and tuple(m.shape[2:]) == (L, S) and m.shape[0] in (1, B) and m.shape[1] in (1, N)
        if not ok:
            raise RuntimeError(f"npu_fusion_attention: atten_mask of shape {tuple(atten_mask.shape)} is not one of "
                               f"({L}, {S}), (1, 1, {L}, {S}), ({B}, 1, {L}, {S}), ({B}, {N}, {L}, {S})")
        mgn = 1 if m.shape[1] == N and N > 1 else 0
        mgb = (m.shape[1] if mgn else 1) if m.shape[0] == B and B > 1 else 0
        if m.shape[1] != N:
            m = m[:, :1]
        if m.shape[0] != B or B == 1:
            m = m[:1]
        mask, kind = m.contiguous().reshape(-1, L, S).view(torch.int8), 2
        if pre_tockens < L + 1 or next_tockens < S + 1:
            band, lo, hi = True, -pre_tockens, next_tockens
    pb = _Problem(B, N, Nk, L, S, D, D, float(scale), mask, kind, mgb, mgn, band, lo, hi, 1.0 - float(keep_prob),
                  seed, offset)
    return pb, q, k, v


def npu_fusion_attention(query: Any, key: Any, value: Any, head_num: int, input_layout: str, pse: Any = None,
                         padding_mask: Any = None, atten_mask: Any = None, scale: float = 1.0, keep_prob: float = 1.0,
                         pre_tockens: int = 2147483647, next_tockens: int = 2147483647, inner_precise: int = 0,
                         prefix: Any = None, actual_seq_qlen: Any = None, actual_seq_kvlen: Any = None,
                         sparse_mode: int = 0, gen_mask_parallel: bool = True, sync: bool = False
                         ) -> tuple[Any, Any, Any, Any, int, int, int]:
    """torch_npu.npu_fusion_attention: (attention_out, softmax_max, softmax_sum, softmax_out, seed, offset,
    numels). atten_mask True = masked out; sparse_mode 0 (atten_mask with pre_tockens / next_tockens: key j
    of row i takes part when -pre_tockens <= j - i <= next_tockens), 2 (leftUpCausal: j <= i) and 3
    (rightDownCausal: j <= i + S2 - S1). softmax_max / softmax_sum are f32 (B, N, S1, 8); softmax_out is
    empty (as torch_npu). inner_precise, gen_mask_parallel and sync change nothing here."""
    seed = _draw_seed() if keep_prob < 1.0 else 0
    pb, q, k, v = _npu_problem(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale,
                               keep_prob, pre_tockens, next_tockens, prefix, actual_seq_qlen, actual_seq_kvlen,
                               sparse_mode, seed, 0)
    out = torch.empty(query.shape, dtype=query.dtype)
    o, *_ = _npu_heads(out, input_layout, "query", head_num, None)
    smax, ssum = _forward(pb, q, k, v, o)
    shape = (pb.B, pb.N, pb.L, 8)
    return (out, smax.view(shape), ssum.view(shape), torch.empty(0, dtype=query.dtype), seed, 0,
            pb.B * pb.N * pb.L * pb.S)


def npu_fusion_attention_grad(query: Any, key: Any, value: Any, dy: Any, head_num: int, input_layout: str, *,
                              pse: Any = None, padding_mask: Any = None, atten_mask: Any = None,
                              softmax_max: Any = None, softmax_sum: Any = None, softmax_in: Any = None,
                              attention_in: Any = None, scale_value: float = 1.0, keep_prob: float = 1.0,
                              pre_tockens: int = 2147483647, next_tockens: int = 2147483647, inner_precise: int = 0,
                              seed: int = 0, offset: int = 0, numels: int = 0, prefix: Any = None,
                              actual_seq_qlen: Any = None, actual_seq_kvlen: Any = None, sparse_mode: int = 0,
                              gen_mask_parallel: bool = True, sync: bool = False) -> tuple[Any, Any, Any, Any]:
    """torch_npu.npu_fusion_attention_grad -> (dq, dk, dv, dpse): needs the forward's softmax_max,
    softmax_sum and attention_in (its attention_out), and its seed / offset when keep_prob < 1. dpse is
    an empty tensor (pse is not supported)."""
    for what, val in (("softmax_max", softmax_max), ("softmax_sum", softmax_sum), ("attention_in", attention_in)):
        if val is None:
            raise RuntimeError(f"npu_fusion_attention_grad: {what} is required (the forward's output)")
    pb, q, k, v = _npu_problem(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale_value,
                               keep_prob, pre_tockens, next_tockens, prefix, actual_seq_qlen, actual_seq_kvlen,
                               sparse_mode, seed, offset)
    shape = (pb.B, pb.N, pb.L, 8)
    for what, val in (("softmax_max", softmax_max), ("softmax_sum", softmax_sum)):
        if tuple(val.shape) != shape or val.dtype != torch.float32:
            raise RuntimeError(f"npu_fusion_attention_grad: {what} must be float32 of shape {shape}, got "
                               f"{val.dtype} {tuple(val.shape)}")
    for what, val in (("dy", dy), ("attention_in", attention_in)):
        if tuple(val.shape) != tuple(query.shape):
            raise RuntimeError(f"npu_fusion_attention_grad: {what} must have query's shape {tuple(query.shape)}, got "
                               f"{tuple(val.shape)}")
    o, *_ = _npu_heads(attention_in.to(query.dtype), input_layout, "attention_in", head_num, None)
    do, *_ = _npu_heads(dy.to(query.dtype), input_layout, "dy", head_num, None)
    dq_t, dk_t, dv_t = (torch.empty(t.shape, dtype=query.dtype) for t in (query, key, value))
    dq, *_ = _npu_heads(dq_t, input_layout, "query", head_num, None)
    dk, *_ = _npu_heads(dk_t, input_layout, "key", None, pb.D)
    dv, *_ = _npu_heads(dv_t, input_layout, "value", None, pb.D)
    _backward(pb, q, k, v, o, do, softmax_max.contiguous().view(-1, pb.L, 8),
              softmax_sum.contiguous().view(-1, pb.L, 8), dq, dk, dv)
    return dq_t, dk_t, dv_t, torch.empty(0, dtype=query.dtype)
