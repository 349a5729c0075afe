"""The code of docs/custom_ops.md, step by step: DSL kernels -> torch ops -> a model -> opcheck -> torch.compile.

    .venv/bin/python examples/custom_op_walkthrough.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

import dsl  # noqa: E402
import torch_bridge  # noqa: E402
from dsl import GM, Const  # noqa: E402


# -- step 1: kernels. A bare `GM` takes f32, f16 and bf16 alike (one compiled specialisation each).
@dsl.kernel
def leaky_fwd(x: GM, y: GM, slope: float = 0.01, TILE: Const[int] = 4096):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        y[t] = dsl.where(xt > 0.0, xt, xt * slope)


@dsl.kernel
def leaky_bwd(x: GM, dy: GM, dx: GM, slope: float = 0.01, TILE: Const[int] = 4096):
    for t in dsl.tiles(x.shape[0], TILE):
        g = dy[t]
        dx[t] = dsl.where(x[t] > 0.0, g, g * slope)


# A kernel with two outputs of another shape: per row, the max and the log-sum-exp.
@dsl.kernel
def row_stats(x: GM[dsl.f32, 2], m: GM[dsl.f32, 2], lse: GM[dsl.f32, 2], R: Const[int] = 8):
    for r in dsl.tiles(x.shape[0], R):
        row = x[r, :]
        mx = dsl.max(row, axis=1, keepdims=True)
        m[r, 0:1] = mx
        lse[r, 0:1] = dsl.log(dsl.sum(dsl.exp(row - mx), axis=1, keepdims=True)) + mx


def main() -> None:
    # -- step 2: register. x is the input, y (the last GM parameter) the output; slope a float arg.
    leaky = torch_bridge.custom_op("walk::leaky", forward=leaky_fwd, backward=leaky_bwd, flatten=True,
                                   dtypes=[torch.float32, torch.float16, torch.bfloat16], replace=True)
    print("walk::leaky", leaky.schema, "| backward:", leaky.backward_schema)
    stats = torch_bridge.custom_op("walk::row_stats", forward=row_stats, outputs="[x.0, 1], [x.0, 1]",
                                   replace=True)
    print("walk::row_stats", stats.schema)

    # -- step 3: call it, eagerly and through torch.ops, with autograd
    x = torch.randn(4, 8, requires_grad=True)
    y = leaky(x, 0.1)
    y.sum().backward()
    print("max |y - F.leaky_relu| =", (y - F.leaky_relu(x, 0.1)).abs().max().item(), "| grad_fn:", y.grad_fn)
    m, lse = torch.ops.walk.row_stats(x.detach())
    print("max |lse - logsumexp| =", (lse - torch.logsumexp(x.detach(), 1, keepdim=True)).abs().max().item())

    # -- step 4: in a model, trained a few steps in bf16
    class Leaky(torch.nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return leaky(h, 0.05)

    net = torch.nn.Sequential(torch.nn.Linear(8, 32), Leaky(), torch.nn.Linear(32, 1)).to(torch.bfloat16)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    data, target = torch.randn(64, 8).bfloat16(), torch.randn(64, 1).bfloat16()
    for step in range(5):
        opt.zero_grad()
        loss = F.mse_loss(net(data), target)
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}")

    # -- step 5: the checks torch's own custom ops must pass
    print(torch.library.opcheck(leaky.op, (torch.randn(3, 5, requires_grad=True), 0.2)))
    print(torch.library.opcheck(stats.op, (torch.randn(6, 10),)))

    # -- step 6: torch.compile sees an opaque op with a fake kernel (no graph break)
    f = torch.compile(lambda t: leaky(t * 2.0, 0.1).sum(), backend="aot_eager", fullgraph=True)
    t = torch.randn(16)
    print("compiled == eager:", torch.equal(f(t), leaky(t * 2.0, 0.1).sum()))


if __name__ == "__main__":
    main()
