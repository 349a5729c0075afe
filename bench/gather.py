"""Gathers on one host thread against torch (same run, interleaved, best of N): embedding lookup
(`examples/kernels/embedding.py`, scalar reads of the indices + row DMAs) against
`torch.nn.functional.embedding`, and per-row cross entropy (`examples/kernels/cross_entropy.py`,
`dsl.gather` of the target logit) against `torch.nn.functional.cross_entropy(reduction='none')`,
with the simulated cycles of the same launch on ascend910b1. Prints ratios (Vinci / torch: > 1 means
slower); asserts nothing."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "examples" / "kernels"))

import hostinfo  # noqa: E402

if __name__ == "__main__":
    hostinfo.cap_torch()  # torch at the same ISA cap as Vinci (VINCI_HOST_ISA), before torch loads

from run import best_of_both, table  # noqa: E402  (bench/run.py: interleaved best-of-N, the table)


def rows(quick: bool) -> list[dict]:
    import torch
    from cross_entropy import cross_entropy
    from embedding import embedding

    from compiler.config import CONFIG

    CONFIG.threads = 1
    torch.set_num_threads(1)
    reps = 3 if quick else 7
    out = []
    vocab, dim, tokens = (5000, 256, 1024) if quick else (50000, 512, 8192)
    for dt in (torch.float32, torch.bfloat16):
        w = torch.randn(vocab, dim).to(dt)
        idx = torch.randint(0, vocab, (tokens,), dtype=torch.int32)
        y = torch.empty(tokens, dim, dtype=dt)
        il = idx.long()
        tv, tt = best_of_both(lambda: embedding[24](idx, w, y), lambda: torch.nn.functional.embedding(il, w), reps)
        assert torch.equal(y, torch.nn.functional.embedding(il, w)), "embedding gave a wrong result"
        run = embedding[24].profile(idx, w, y)
        name = str(dt).replace("torch.", "")
        out.append({"what": f"embedding {name} {tokens} of {vocab}x{dim}", "vinci_ms": tv * 1e3,
                    "torch_ms": tt * 1e3, "ratio": tv / tt, "sim_us": run.seconds * 1e6,
                    "busiest pipe": _busiest(run)})
    n, c = (256, 1000) if quick else (4096, 1000)
    x = torch.randn(n, c)
    tgt = torch.randint(0, c, (n, 1), dtype=torch.int32)
    loss = torch.empty(n, 1)
    tl = tgt[:, 0].long()
    tv, tt = best_of_both(lambda: cross_entropy[24](x, tgt, loss),
                          lambda: torch.nn.functional.cross_entropy(x, tl, reduction="none"), reps)
    run = cross_entropy[24].profile(x, tgt, loss)
    out.append({"what": f"cross entropy f32 {n}x{c}", "vinci_ms": tv * 1e3, "torch_ms": tt * 1e3,
                "ratio": tv / tt, "sim_us": run.seconds * 1e6, "busiest pipe": _busiest(run)})
    return out


def _busiest(run) -> str:  # type: ignore[no-untyped-def]
    pipe, busy = max(run.pipes.items(), key=lambda kv: kv[1])
    return f"{pipe} {busy:.1%}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    ns = p.parse_args()
    print("== gathers, one host thread: Vinci (examples/kernels/embedding.py, cross_entropy.py) / torch")
    table(rows(ns.quick))


if __name__ == "__main__":
    main()
