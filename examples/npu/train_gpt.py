"""A GPT-style decoder written with stock torch.nn, trained on the npu device: `model.to("npu")` and
torch.optim.AdamW, nothing else changes.

The model is issue 10's decoder (examples/models/gpt.py) in plain torch: nn.Embedding, pre-norm
blocks of (nn.RMSNorm, q / k / v projections, rotary position embedding, causal
F.scaled_dot_product_attention, output projection) and (nn.RMSNorm, a gate+up projection, SwiGLU
= F.silu(gate) * up, the down projection), a final norm and the LM head. On npu tensors every op
of a training step runs on a DSL kernel (torch_bridge.fallback_ops() stays empty): SDPA on the
flash attention kernels, nn.RMSNorm on the fused RMSNorm kernel.

    python examples/npu/train_gpt.py [--steps 8] [--layers 2] [--dim 64] [--heads 4] [--seq 32] [--cpu]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import torch_bridge  # noqa: E402
from examples.models.common import token_data  # noqa: E402

MiB = 2 ** 20


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)); q, k, v as three projections (B, S, heads, head_dim)."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(dim, eps=1e-6)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.RMSNorm(dim, eps=1e-6)
        self.up = nn.Linear(dim, 2 * hidden, bias=False)   # gate and up halves
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, S, C = x.shape
        h = self.norm1(x)
        shape = (B, S, self.heads, C // self.heads)
        q = self.q(h).view(shape)
        k = self.k(h).view(shape)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        v = self.v(h).view(shape)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(o.transpose(1, 2).reshape(B, S, C))
        gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class GPT(nn.Module):
    """Decoder-only language model; `forward(tokens)` gives (B, S, vocab) logits."""

    def __init__(self, vocab: int = 256, dim: int = 64, heads: int = 4, layers: int = 2, seq: int = 32,
                 hidden: int | None = None) -> None:
        super().__init__()
        if dim % heads or (dim // heads) % 2:
            raise ValueError(f"dim {dim} must split into {heads} heads of an even size")
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden or 4 * dim) for _ in range(layers))
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv = 1.0 / 10000 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float().view(1, seq, 1, hd), persistent=False)
        self.register_buffer("sin", ang.sin().float().view(1, seq, 1, hd), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        S = tokens.shape[1]
        x = self.embed(tokens)
        cos, sin = self.cos[:, :S], self.sin[:, :S]
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.head(self.norm(x))


def train(model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], device: str, lr: float = 3e-3,
          on_step: object = None) -> list[float]:
    """Stock training: the model and each batch `.to(device)`, torch.optim.AdamW, cross entropy over the
    vocabulary; returns the losses."""
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    for i, (x, y) in enumerate(data):
        opt.zero_grad(set_to_none=True)
        logits = model(x.to(device))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.to(device).reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if callable(on_step):
            on_step(i, losses[-1])
    return losses


def main(argv: list[str] | None = None) -> list[float]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--cpu", action="store_true", help="also train the same model on the CPU and compare")
    a = p.parse_args(argv)
    torch.manual_seed(0)
    model = GPT(a.vocab, a.dim, a.heads, a.layers, a.seq)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    data = token_data(a.steps, a.batch, a.seq, a.vocab)
    print(f"GPT on {torch.npu.get_device_name()}: {sum(p.numel() for p in model.parameters()):,} parameters, "
          f"batch {a.batch} x {a.seq} tokens")
    torch.npu.reset_peak_memory_stats()
    t0 = time.perf_counter()
    last = [t0]
    mark = [torch.npu.Event(enable_timing=True)]
    mark[0].record()

    def show(i: int, loss: float) -> None:
        now = time.perf_counter()
        end = torch.npu.Event(enable_timing=True)   # simulated device time of the step
        end.record()
        print(f"step {i:3d}  loss {loss:.4f}  host {now - last[0]:6.2f} s  device {mark[0].elapsed_time(end):6.3f} ms  "
              f"allocated {torch.npu.memory_allocated() / MiB:7.2f} MiB  "
              f"peak {torch.npu.max_memory_allocated() / MiB:7.2f} MiB  "
              f"reserved {torch.npu.memory_reserved() / MiB:7.2f} MiB")
        last[0], mark[0] = now, end

    losses = train(model, data, "npu", on_step=show)
    print(f"npu: {time.perf_counter() - t0:.2f} s for {a.steps} steps; ops on the CPU fallback: "
          f"{torch_bridge.fallback_ops() or 'none'}")
    stats = torch.npu.memory_stats()
    print(f"memory: {stats['num_alloc_retries']} alloc retries, {stats['num_ooms']} OOMs, "
          f"peak reserved {stats['reserved_bytes.all.peak'] / MiB:.2f} MiB")
    if a.cpu:
        ref = GPT(a.vocab, a.dim, a.heads, a.layers, a.seq)
        ref.load_state_dict(init)
        t0 = time.perf_counter()
        ref_losses = train(ref, data, "cpu")
        diff = max(abs(x - y) for x, y in zip(losses, ref_losses))
        print(f"cpu: {time.perf_counter() - t0:.2f} s; max |loss npu - loss cpu| = {diff:.2e}")
    return losses


if __name__ == "__main__":
    main()
