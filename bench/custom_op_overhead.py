"""Per-call overhead of a user custom op (torch_bridge.custom_op: examples/custom_swish.py's swish)
on a small tensor (64 f32 elements) against torch.add and F.silu, and against launching the DSL
kernel by hand, measured in the same run, one thread each (torch.set_num_threads(1),
VINCI_THREADS=1). The custom op's own cost is the op minus the bare kernel launch (dispatcher,
Autograd kernel, dtype checks, output allocation). Host: x86-64-v3 (AMD Zen 3, 2 cores, shared).

    VINCI_THREADS=1 .venv/bin/python bench/custom_op_overhead.py
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("VINCI_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from custom_swish import CustomSwish, swish, swish_fwd  # noqa: E402


def per_call_us(f: Callable[[], object], n: int = 2000) -> float:
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    torch.set_num_threads(1)
    x, out = torch.randn(64), torch.empty(64)
    xg = torch.randn(64, requires_grad=True)
    op = torch.ops.examples.swish
    cases: dict[str, Callable[[], object]] = {
        "torch.add": lambda: torch.add(x, x),
        "F.silu": lambda: F.silu(x),
        "swish_fwd(x, out) (bare kernel)": lambda: swish_fwd(x, out),
        "torch.ops.examples.swish": lambda: op(x),
        "custom op, requires_grad": lambda: swish(xg),
        "F.silu, requires_grad": lambda: F.silu(xg),
        "CustomSwish.apply, requires_grad": lambda: CustomSwish.apply(xg),
        "custom op fwd+bwd": lambda: swish(xg).sum().backward(),
        "F.silu fwd+bwd": lambda: F.silu(xg).sum().backward(),
    }
    for f in cases.values():
        per_call_us(f, 300)
    rounds: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(9):   # interleaved rounds; the median resists the other load on a shared host
        for k, f in cases.items():
            rounds[k].append(per_call_us(f, 1000))
    med = {k: statistics.median(v) for k, v in rounds.items()}
    print("per-call host time, 64 f32 elements, median of 9 interleaved rounds (x86-64-v3, Zen 3)")
    for k, v in med.items():
        print(f"  {k:34s} {v:8.1f} us  ({v / med['torch.add']:.1f}x torch.add)")
    own = med["torch.ops.examples.swish"] - med["swish_fwd(x, out) (bare kernel)"]
    print(f"  custom op's own cost (op - bare kernel): {own:.1f} us")


if __name__ == "__main__":
    main()
