"""A GPT-style decoder trained on torch.ops.npu with the fused AdamW, next to the same model on stock torch:
token embedding, pre-norm blocks of (npu_rms_norm, q / k / v projections, rotary position embedding by
npu_rotary_mul, causal npu_fusion_attention in BSND layout, output projection) and (npu_rms_norm,
gate+up projection, npu_swiglu, down projection), a final norm and the LM head.

The stock twin computes the same functions with torch: RMSNorm, x * cos + rotate_half(x) * sin,
F.scaled_dot_product_attention(is_causal=True), silu(a) * b.

    python examples/models/gpt.py --steps 20 --layers 4 --dim 256 --heads 4 --seq 256 --batch 8 [--bf16]
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from examples.models import common  # noqa: E402


class _Stock:
    """The decoder's fused functions on stock torch ops."""

    add = staticmethod(torch.add)

    @staticmethod
    def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return x.to(dtype)

    @staticmethod
    def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    @staticmethod
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
        """Causal attention of (B, S, N, D) q, k, v (BSND) -> (B, S, N, D)."""
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return o.transpose(1, 2)

    @staticmethod
    def swiglu(x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return F.silu(a) * b


_CAUSAL: dict[str, torch.Tensor] = {}


class _Npu:
    """The same functions as single torch_npu-style ops (and the residual add and casts on kernels too)."""

    @staticmethod
    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.add(x, y)

    @staticmethod
    def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return x if x.dtype == dtype else torch.ops.npu.npu_dtype_cast(x, dtype)

    @staticmethod
    def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.npu_rotary_mul(x, cos, sin)

    @staticmethod
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
        # sparse_mode=2 (leftUpCausal) with torch_npu's compressed 2048 x 2048 mask: the kernel skips the
        # blocks above the diagonal instead of reading an S x S mask
        if "m" not in _CAUSAL:
            _CAUSAL["m"] = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
        return torch.ops.npu.npu_fusion_attention(q, k, v, heads, "BSND", atten_mask=_CAUSAL["m"],
                                                  scale=1.0 / math.sqrt(q.shape[-1]), sparse_mode=2)[0]

    @staticmethod
    def swiglu(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.npu_swiglu(x, -1)


class Block(torch.nn.Module):
    """Pre-norm decoder block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, nn: Any, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.fn = _Stock if nn is torch.nn else _Npu
        self.norm1 = nn.RMSNorm(dim, eps=1e-6)
        # q, k and v as three projections, not one qkv matmul sliced: slicing would make autograd assemble
        # the qkv gradient with aten copies on the host
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.RMSNorm(dim, eps=1e-6)
        self.up = nn.Linear(dim, 2 * hidden, bias=False)   # gate and up halves, for swiglu
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, S, C = x.shape
        h = self.norm1(x)
        q = self.fn.rotary(self.q(h).view(B, S, self.heads, C // self.heads), cos, sin)
        k = self.fn.rotary(self.k(h).view(B, S, self.heads, C // self.heads), cos, sin)
        v = self.v(h).view(B, S, self.heads, C // self.heads)
        x = self.fn.add(x, self.proj(self.fn.attention(q, k, v, self.heads).reshape(B, S, C)))
        return self.fn.add(x, self.down(self.fn.swiglu(self.up(self.norm2(x)))))


class GPT(torch.nn.Module):
    """Decoder-only language model; `forward(tokens)` returns (B, S, vocab) logits."""

    def __init__(self, nn: Any, vocab: int = 256, dim: int = 64, heads: int = 2, layers: int = 2, seq: int = 32,
                 hidden: int | None = None) -> None:
        super().__init__()
        if dim % heads or (dim // heads) % 2:
            raise ValueError(f"dim {dim} must split into {heads} heads of an even size")
        self.embed = nn.Embedding(vocab, dim)
        self.fn = _Stock if nn is torch.nn else _Npu
        self.blocks = nn.ModuleList(Block(nn, dim, heads, hidden or 4 * dim) for _ in range(layers))
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv = 1.0 / 10000 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)   # the 'half' layout: both halves see the same angle
        self.register_buffer("cos", ang.cos().float().view(1, seq, 1, hd), persistent=False)
        self.register_buffer("sin", ang.sin().float().view(1, seq, 1, hd), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        S = tokens.shape[1]
        x = self.embed(tokens)
        cos, sin = self.fn.cast(self.cos[:, :S], x.dtype), self.fn.cast(self.sin[:, :S], x.dtype)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.head(self.norm(x))


LR = 3e-3   # the AdamW learning rate the example and the tests use


def build(nn: Any, vocab: int = 256, dim: int = 64, heads: int = 2, layers: int = 2, seq: int = 32) -> GPT:
    """The decoder from `nn` (torch.nn for the stock twin, torch_bridge.nn for the npu model)."""
    return GPT(nn, vocab, dim, heads, layers, seq)


def loss(nn: Any) -> common.LossFn:
    ce = nn.CrossEntropyLoss()
    return lambda logits, y: ce(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def data(steps: int, batch: int, seq: int = 32, vocab: int = 256, seed: int = 0) -> list[common.Batch]:
    return common.token_data(steps, batch, seq, vocab, seed)


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = common.parser(__doc__)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=32)
    p.set_defaults(lr=LR)
    a = p.parse_args(argv)
    sizes = dict(vocab=a.vocab, dim=a.dim, heads=a.heads, layers=a.layers, seq=a.seq)
    return common.run(a, build, sizes, data(a.steps, a.batch, a.seq, a.vocab, a.seed), loss)


if __name__ == "__main__":
    main()
