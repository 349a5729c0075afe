"""Per-call overhead of torch.ops.npu.* on a small tensor (64 f32 elements) against torch.add and the
op_library function itself, measured in the same run, one thread each (torch.set_num_threads(1),
VINCI_THREADS=1). The bridge's own cost is torch.ops.npu.X minus op_library.X (the dispatcher, the
Autograd fast path and the impl wrapper). Host: x86-64-v3 (AMD Zen 3, 2 cores, shared).

    VINCI_THREADS=1 .venv/bin/python bench/torch_ops_overhead.py
"""
from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("VINCI_THREADS", "1")

import torch  # noqa: E402

import op_library  # noqa: E402
import torch_bridge  # noqa: E402,F401


def per_call_us(f: Callable[[], object], n: int = 2000) -> float:
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    torch.set_num_threads(1)
    x, y = torch.randn(64), torch.randn(64)
    npu = torch.ops.npu
    # the floor: a Python op that only allocates its result, through the same dispatcher route
    lib = torch.library.Library("vinci_bench", "DEF")
    lib.define("alloc(Tensor input, Tensor other) -> Tensor")
    lib.impl("alloc", lambda a, b: torch.empty_like(a), "CPU")
    cases: dict[str, Callable[[], object]] = {
        "python op (floor)": lambda: torch.ops.vinci_bench.alloc(x, y),
        "torch.add": lambda: torch.add(x, y),
        "op_library.add": lambda: op_library.add(x, y),
        "torch.ops.npu.add": lambda: npu.add(x, y),
        "torch.relu": lambda: torch.relu(x),
        "op_library.relu": lambda: op_library.relu(x),
        "torch.ops.npu.relu": lambda: npu.relu(x),
    }
    for f in cases.values():
        per_call_us(f, 300)
    rounds: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(15):   # interleaved rounds; other load on a shared host only ever adds time, so the
        for k, f in cases.items():   # fastest round is the cleanest reading (the median is shown too)
            rounds[k].append(per_call_us(f, 1000))
    med = {k: min(v) for k, v in rounds.items()}
    print("per-call host time, 64 f32 elements, best (median) of 15 interleaved rounds (x86-64-v3, Zen 3)")
    for k, v in med.items():
        print(f"  {k:22s} {v:8.1f} us  ({statistics.median(rounds[k]):.1f})")
    for op, ref in (("add", "torch.add"), ("relu", "torch.relu")):
        npu_t, lib_t = med[f"torch.ops.npu.{op}"], med[f"op_library.{op}"]
        print(f"  npu.{op}: {npu_t / med[ref]:.1f}x {ref}; bridge's own cost {npu_t - lib_t:.1f} us "
              f"(a Python op that only allocates: {med['python op (floor)']:.1f} us)")


if __name__ == "__main__":
    main()
