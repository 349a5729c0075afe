"""Swish as a custom op, two ways, inside a small model that trains (docs/custom_ops.md walks through it).

    .venv/bin/python examples/custom_swish.py            # 50 Adam steps, three loss curves side by side
    .venv/bin/python examples/custom_swish.py --steps 10

1. `torch_bridge.custom_op`: the DSL kernels become the real op `torch.ops.examples.swish`, with a
   fake kernel (torch.compile traces it) and autograd through `torch.ops.examples.swish_backward`.
2. The classic `torch.autograd.Function`: forward saves the input and runs the forward kernel,
   backward runs the backward kernel, sigmoid(x) * (1 + x * (1 - sigmoid(x))) * grad.

Both sit in Linear -> swish -> Linear, trained on synthetic data next to the same model with
torch's own swish (F.silu); the three loss curves agree to f32 rounding.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

import dsl  # noqa: E402
import torch_bridge  # noqa: E402
from dsl import GM, Const, f32  # noqa: E402


# ------------------------------------------------------------------ the kernels
@dsl.kernel
def swish_fwd(x: GM[f32], y: GM[f32], TILE: Const[int] = 4096):
    """y = x * sigmoid(x), tile by tile over this core's share of x."""
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        y[t] = xt * dsl.sigmoid(xt)


@dsl.kernel
def swish_bwd(x: GM[f32], dy: GM[f32], dx: GM[f32], TILE: Const[int] = 2048):
    """dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x)."""
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        s = dsl.sigmoid(xt)
        dx[t] = dy[t] * s * (1.0 + xt * (1.0 - s))


# ------------------------------------------------------------------ way 1: a registered op
# The last GM parameter (y) is the output, shaped like x; the backward kernel takes the forward's
# input (x), the output's grad (dy) and writes the input's grad (dx). flatten=True hands the kernels
# 1-D views, so the op takes activations of any shape. replace=True: re-running this file in the
# same process (a notebook, the tests) redefines the op instead of raising.
swish = torch_bridge.custom_op("examples::swish", forward=swish_fwd, backward=swish_bwd, flatten=True,
                               replace=True)


# ------------------------------------------------------------------ way 2: autograd.Function
class CustomSwish(torch.autograd.Function):
    """The classic pattern: forward saves the input, backward recomputes sigmoid from it."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        ctx.save_for_backward(x)
        y = torch.empty_like(x)
        swish_fwd(x.view(-1), y.view(-1))  # the kernels take any-length 1-D tensors, zero-copy
        return y

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
        grad = grad.contiguous()
        dx = torch.empty_like(x)
        swish_bwd(x.view(-1), grad.view(-1), dx.view(-1))
        return dx


# ------------------------------------------------------------------ the model
class Swish(torch.nn.Module):
    def __init__(self, way: str):
        super().__init__()
        self.fn = {"custom_op": swish, "function": CustomSwish.apply, "torch": torch.nn.functional.silu}[way]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def model(way: str, d_in: int = 16, hidden: int = 64) -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights whatever the way
    return torch.nn.Sequential(torch.nn.Linear(d_in, hidden), Swish(way), torch.nn.Linear(hidden, 1))


def train(way: str, steps: int = 50, batch: int = 128, lr: float = 1e-2) -> list[float]:
    """Adam on y = sin(x . w) + noise; returns the loss per step."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 16, generator=gen)
    target = torch.sin(x @ torch.randn(16, 1, generator=gen)) + 0.05 * torch.randn(batch, 1, generator=gen)
    net = model(way)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    steps = ap.parse_args().steps
    curves = {way: train(way, steps) for way in ("custom_op", "function", "torch")}
    print(f"{'step':>4}  {'custom_op':>10}  {'Function':>10}  {'torch silu':>10}")
    for i in range(steps):
        if i < 5 or i % 5 == 4 or i == steps - 1:
            print(f"{i + 1:4d}  {curves['custom_op'][i]:10.6f}  {curves['function'][i]:10.6f}  {curves['torch'][i]:10.6f}")
    worst = max(abs(a - c) / max(abs(c), 1e-12) for way in ("custom_op", "function")
                for a, c in zip(curves[way], curves["torch"]))
    print(f"loss fell {curves['custom_op'][0]:.4f} -> {curves['custom_op'][-1]:.4f}; "
          f"largest relative difference from torch: {worst:.2e}")
    print(f"op: torch.ops.examples.swish{swish.schema}, backward {swish.backward_schema}")


if __name__ == "__main__":
    main()
