"""What the example models share: synthetic data, the training loops (f32 and bf16 compute with f32
master weights), building a model twice (stock torch and torch.ops.npu) from one init, and the command
line every example script takes.

A model file defines `build(nn, **sizes)` taking the module namespace (`torch.nn` or `torch_bridge.nn`,
which has the same classes, constructor arguments, parameters and init), so the stock twin and the npu
model are the same architecture; `twins(...)` builds both and loads the stock weights into the npu model,
so both start from the very same numbers.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

Batch = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# synthetic data ---------------------------------------------------------------------------------

def classification_data(steps: int, batch: int, shape: Sequence[int], classes: int, seed: int = 0,
                        spread: float = 1.0) -> list[Batch]:
    """`steps` batches of (x, y): y uniform over `classes`, x (of `shape` per sample) the class's fixed
    random prototype plus N(0, spread^2) noise, so the classes are learnable and the loss falls."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(classes, *shape, generator=g)
    out = []
    for _ in range(steps):
        y = torch.randint(0, classes, (batch,), generator=g)
        out.append((protos[y] + spread * torch.randn(batch, *shape, generator=g), y))
    return out


def token_data(steps: int, batch: int, seq: int, vocab: int, seed: int = 0, noise: float = 0.1) -> list[Batch]:
    """`steps` batches of (tokens, next tokens), each (batch, seq) int64: a sequence follows a fixed random
    permutation of the vocabulary (next = perm[current]) except for a `noise` share of random tokens, so
    a language model's loss falls well below log(vocab)."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(vocab, generator=g)
    out = []
    for _ in range(steps):
        t = torch.empty(batch, seq + 1, dtype=torch.long)
        t[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
        for i in range(seq):
            rnd = torch.randint(0, vocab, (batch,), generator=g)
            keep = torch.rand(batch, generator=g) >= noise
            t[:, i + 1] = torch.where(keep, perm[t[:, i]], rnd)
        out.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
    return out


# building the twins ------------------------------------------------------------------------------

def twins(build: Callable[..., torch.nn.Module], seed: int = 0, **sizes: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(stock model, npu model) of one architecture with the same initial weights: `build(torch.nn,
    **sizes)` under `seed`, then `build(torch_bridge.nn, **sizes)` with the stock state_dict loaded."""
    import torch_bridge

    torch.manual_seed(seed)
    stock = build(torch.nn, **sizes)
    npu = build(torch_bridge.nn, **sizes)
    npu.load_state_dict(stock.state_dict())
    return stock, npu


# training loops ---------------------------------------------------------------------------------

def train(model: torch.nn.Module, data: Iterable[Batch], loss_fn: LossFn, opt: torch.optim.Optimizer,
          on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """Plain f32 training: one optimizer step per batch; returns the losses (before each step)."""
    model.train()
    losses = []
    for i, (x, y) in enumerate(data):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if on_step:
            on_step(i, losses[-1])
    return losses


def _stock_cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(dtype)


def npu_cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A dtype cast on the npu_dtype_cast kernel (the bf16 loop's casts are device work too); its
    gradient is the cast back (the op's registered autograd)."""
    return t if t.dtype == dtype else torch.ops.npu.npu_dtype_cast(t, dtype)


def train_bf16(model: torch.nn.Module, data: Iterable[Batch], loss_fn: LossFn, opt: torch.optim.Optimizer,
               cast: Callable[[torch.Tensor, torch.dtype], torch.Tensor] = _stock_cast,
               on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """bf16 compute with f32 master weights (what autocast + an f32 optimizer do on a device without
    f32 matmul speed): each step makes bf16 copies of the model's f32 parameters, runs forward and
    backward in bf16 on them (`torch.func.functional_call`), casts the logits to f32 for the loss and
    the bf16 gradients back to f32 into the masters' `.grad`, and steps `opt` (over the f32 masters).
    `cast` does the casts (`npu_cast` for the npu model)."""
    model.train()
    masters = dict(model.named_parameters())
    losses = []
    for i, (x, y) in enumerate(data):
        low = {n: cast(p.detach(), torch.bfloat16).requires_grad_() for n, p in masters.items()}
        xin = cast(x, torch.bfloat16) if x.is_floating_point() else x
        out = torch.func.functional_call(model, low, (xin,))
        loss = loss_fn(cast(out, torch.float32), y)
        loss.backward()
        for n, p in masters.items():
            g = low[n].grad
            p.grad = None if g is None else cast(g, torch.float32)
        opt.step()
        losses.append(float(loss.detach()))
        if on_step:
            on_step(i, losses[-1])
    return losses


def adamw(model: torch.nn.Module, npu: bool, lr: float = 3e-3, weight_decay: float = 0.01) -> torch.optim.Optimizer:
    """The fused AdamW (torch_bridge.optim.AdamW) for the npu model, torch.optim.AdamW (single-tensor
    path, the update rule the kernel follows op for op) for the stock twin."""
    if npu:
        import torch_bridge.optim

        return torch_bridge.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, foreach=False)


# command line -----------------------------------------------------------------------------------

def parser(doc: str | None) -> argparse.ArgumentParser:
    """The flags every example takes; a model script adds its size flags."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="training steps")
    p.add_argument("--batch", type=int, default=16, help="batch size")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="init and data seed")
    p.add_argument("--bf16", action="store_true", help="also train in bf16 compute with f32 master weights")
    p.add_argument("--no-stock", action="store_true", help="skip the stock-torch twin")
    return p


def run(args: argparse.Namespace, build: Callable[..., torch.nn.Module], sizes: dict[str, Any],
        data: list[Batch], loss: Callable[[Any], LossFn]) -> dict[str, list[float]]:
    """Train the npu model (and its stock twin unless --no-stock, and a bf16 run with --bf16) on `data`
    from one init, printing one row per step; `loss(nn)` makes the loss for a module namespace. Returns
    the loss curves by name."""
    import copy

    import torch_bridge

    stock, npu = twins(build, args.seed, **sizes)
    init = copy.deepcopy(stock.state_dict())
    nparams = sum(p.numel() for p in npu.parameters())
    print(f"{type(npu).__name__}: {nparams:,} parameters, {len(data)} steps")
    curves: dict[str, list[float]] = {}
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    curves["npu f32"] = train(npu, data, loss(torch_bridge.nn), adamw(npu, True, args.lr))
    times["npu f32"] = time.perf_counter() - t0
    if not args.no_stock:
        t0 = time.perf_counter()
        curves["torch f32"] = train(stock, data, loss(torch.nn), adamw(stock, False, args.lr))
        times["torch f32"] = time.perf_counter() - t0
    if args.bf16:
        low = build(torch_bridge.nn, **sizes)
        low.load_state_dict(init)
        t0 = time.perf_counter()
        curves["npu bf16"] = train_bf16(low, data, loss(torch_bridge.nn), adamw(low, True, args.lr), cast=npu_cast)
        times["npu bf16"] = time.perf_counter() - t0
    names = list(curves)
    both = "torch f32" in curves
    print("step " + " ".join(f"{n:>12}" for n in names) + ("   |npu-torch|" if both else ""))
    for i in range(len(data)):
        row = f"{i:4d} " + " ".join(f"{curves[n][i]:12.6f}" for n in names)
        if both:
            row += f"   {abs(curves['npu f32'][i] - curves['torch f32'][i]):.2e}"
        print(row)
    print("host time: " + ", ".join(f"{n} {t:.2f} s" for n, t in times.items()))
    return curves
