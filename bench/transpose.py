"""2-D transposes on one host thread against torch's `x.t().contiguous()` (same run, interleaved,
best of N), with the simulated cycles of the same launch on ascend910b1. Prints ratios (Vinci /
torch: > 1 means slower); asserts nothing."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import hostinfo  # noqa: E402

if __name__ == "__main__":
    hostinfo.cap_torch()  # torch at the same ISA cap as Vinci (VINCI_HOST_ISA), before torch loads

from run import best_of_both, table  # noqa: E402  (bench/run.py: interleaved best-of-N, the table)


def rows(quick: bool) -> list[dict]:
    import importlib.util

    import torch

    # examples/kernels/transpose.py by path: this file's own name shadows it on sys.path
    spec = importlib.util.spec_from_file_location("transpose_example", ROOT / "examples/kernels/transpose.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    transpose = mod.transpose

    from compiler.config import CONFIG

    CONFIG.threads = 1
    torch.set_num_threads(1)
    out = []
    cases = [(torch.float32, 4096), (torch.float16, 2048), (torch.bfloat16, 2048)]
    for dt, n in cases:
        n = n // 4 if quick else n
        x = torch.randn(n, n).to(dt)
        y = torch.empty(n, n, dtype=dt)
        tv, tt = best_of_both(lambda: transpose[24](x, y), lambda: x.t().contiguous(), 3 if quick else 7)
        assert torch.equal(y, x.t()), "transpose gave a wrong result"
        run = transpose[24].profile(x, y)
        name = str(dt).replace("torch.", "")
        out.append({"what": f"transpose {name} {n}x{n} (64x64 blocks)", "vinci_ms": tv * 1e3, "torch_ms": tt * 1e3,
                    "ratio": tv / tt, "GB/s": 2 * x.numel() * x.element_size() / tv / 1e9,
                    "sim_us": run.seconds * 1e6, "V busy": f"{run.pipes['V']:.1%}",
                    "bound": max(run.pipes.items(), key=lambda kv: kv[1])[0]})
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    ns = p.parse_args()
    print("== transposes, one host thread: Vinci (examples/kernels/transpose.py) / torch x.t().contiguous()")
    table(rows(ns.quick))


if __name__ == "__main__":
    main()
