"""Per-op overhead on the npu device: an aten op on npu tensors (dispatcher -> Python kernel -> zero-copy
CPU aliases -> op_library -> result adopted by the caching allocator) against the same op through
`torch.ops.npu.*` on CPU tensors and against torch's own CPU op, in the same run, one host thread each
(`torch.set_num_threads(1)`, `VINCI_THREADS=1`); plus a small MLP training step (stock nn + AdamW) on
npu against CPU. Best of `--reps` rounds of the mean of `--calls` calls; prints ratios, asserts nothing.

    python bench/device_overhead.py [--reps 5] [--calls 500]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ["VINCI_THREADS"] = "1"

import hostinfo  # noqa: E402

if __name__ == "__main__":
    hostinfo.cap_torch()

import torch  # noqa: E402

import torch_bridge  # noqa: E402


def _best(fn: Callable[[], Any], reps: int, calls: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=500)
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    print(f"host: {hostinfo.describe() if hasattr(hostinfo, 'describe') else 'x86-64-v3 (Zen 3)'}; one thread each")
    x, w, b = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64)
    xn, wn, bn = x.npu(), w.npu(), b.npu()
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any] | None, Callable[[], Any]]] = [
        ("add 64x64", lambda: torch.add(xn, xn), lambda: torch.ops.npu.add(x, x), lambda: torch.add(x, x)),
        ("relu 64x64", lambda: torch.relu(xn), lambda: torch.ops.npu.relu(x), lambda: torch.relu(x)),
        ("mm 64x64", lambda: torch.mm(xn, wn), lambda: torch.ops.npu.matmul(x, w), lambda: torch.mm(x, w)),
        ("linear 64x64", lambda: torch.nn.functional.linear(xn, wn, bn), lambda: torch.ops.npu.linear(x, w, b),
         lambda: torch.nn.functional.linear(x, w, b)),
        ("add_ in place", lambda: xn.add_(0.0), None, lambda: x.add_(0.0)),
        ("empty 64x64", lambda: torch.empty(64, 64, device="npu"), None, lambda: torch.empty(64, 64)),
    ]
    print(f"{'op':<16}{'npu device us':>15}{'torch.ops.npu us':>18}{'torch CPU us':>14}{'npu/CPU':>9}")
    for name, dev, npu_op, cpu in cases:
        td, tc = _best(dev, a.reps, a.calls), _best(cpu, a.reps, a.calls)
        tn = f"{_best(npu_op, a.reps, a.calls):.1f}" if npu_op else "-"
        print(f"{name:<16}{td:>15.1f}{tn:>18}{tc:>14.1f}{td / tc:>8.1f}x")
    from torch_bridge.device import streams
    with streams._untimed():
        tu = _best(cases[0][1], a.reps, a.calls)
    print(f"add 64x64 on npu with the simulated timing off (VINCI_NPU_TIMING=0): {tu:.1f} us")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    import copy
    models = {"npu": copy.deepcopy(model).to("npu"), "cpu": model}
    xs, ys = torch.randn(32, 64), torch.randint(0, 10, (32,))
    times = {}
    for dev, m in models.items():
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        xd, yd = xs.to(dev), ys.to(dev)

        def step() -> None:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(xd), yd).backward()
            opt.step()
        times[dev] = _best(step, a.reps, max(a.calls // 50, 5))
    print(f"MLP 64-128-10 batch 32, AdamW step: npu {times['npu'] / 1e3:.2f} ms, CPU {times['cpu'] / 1e3:.2f} ms "
          f"({times['npu'] / times['cpu']:.1f}x); fallbacks: {torch_bridge.fallback_ops() or 'none'}")


if __name__ == "__main__":
    main()
