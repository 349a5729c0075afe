"""Cube benchmarks: host GFLOP/s of the DSL matmul against torch (same run, one thread each), and
the simulated 2048^3 f16 matmul against the config's roofline. Prints ratios; asserts nothing."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "kernels"))
sys.path.insert(0, str(ROOT / "bench"))

from run import best  # noqa: E402  (bench/run.py: best-of-N wall time)


def host(n: int) -> None:
    import torch
    from matmul import matmul

    from compiler.config import CONFIG

    CONFIG.threads = 1
    torch.set_num_threads(1)
    flops = 2 * n ** 3
    print(f"== host, one thread: {n}^3 matmul, GFLOP/s (ratio = torch time / Vinci time; > 1: Vinci faster)")
    print(f"  {'inputs':<8}{'blocks':<12}{'Vinci':>8}{'torch f32':>11}{'torch same dtype':>18}{'vs f32':>8}{'vs same':>9}")
    # block sizes that suit this host best (bench/mmad_native.py --sweep); all fit L0A/L0B/L0C
    for dt, blk in ((torch.float32, (256, 128, 64)), (torch.float16, (256, 128, 64)), (torch.bfloat16, (256, 128, 128)),
                    (torch.float32, (128, 128, 64))):
        a = torch.randn(n, n).to(dt)
        b = torch.randn(n, n).to(dt)
        c = torch.empty(n, n)
        tv = best(lambda: matmul[24](a, b, c, BM=blk[0], BN=blk[1], BK=blk[2]))
        want = a.float() @ b.float()
        assert torch.allclose(c, want, atol=1e-2 * n ** 0.5, rtol=1e-2)
        af, bf = a.float(), b.float()
        tf = best(lambda: torch.matmul(af, bf))
        ts = tf if dt == torch.float32 else best(lambda: torch.matmul(a, b), 1 if dt == torch.float16 else 5)
        name = str(dt).replace("torch.", "")
        print(f"  {name:<8}{'x'.join(map(str, blk)):<12}{flops / tv / 1e9:>8.1f}{flops / tf / 1e9:>11.1f}"
              f"{flops / ts / 1e9:>18.1f}{tf / tv:>8.2f}{ts / tv:>9.2f}")


def simulated(n: int) -> None:
    import torch
    from matmul import matmul

    a = torch.randn(n, n).half()
    b = torch.randn(n, n).half()
    print(f"\n== simulated {n}^3 matmul, f16 inputs, ascend910b1 (24 cores)")
    print(f"  {'blocks':<14}{'out':<6}{'cycles':>9}{'us':>8}{'eff':>7}{'M busy':>8}{'MTE2':>7}{'TFLOPS':>8}{'peak':>7}")
    for (bm, bn, bk), out in (((128, 128, 64), torch.float16), ((256, 128, 64), torch.float32),
                              ((256, 128, 64), torch.float16)):
        c = torch.empty(n, n, dtype=out)
        run = matmul[24].profile(a, b, c, BM=bm, BN=bn, BK=bk)
        tflops = 2 * n ** 3 / run.seconds / 1e12
        peak = run.cfg.peak_flops("f16") / 1e12
        print(f"  {f'{bm}x{bn}x{bk}':<14}{str(out).replace('torch.', ''):<6}{run.cycles:>9}{run.seconds * 1e6:>8.1f}"
              f"{run.efficiency:>7.1%}{run.pipes['M']:>8.1%}{run.pipes['MTE2']:>7.1%}{tflops:>8.1f}{peak:>7.1f}")
    print("  (eff = roofline bound / cycles; the bound is the busiest pipe's work on the busiest core)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    ns = p.parse_args()
    host(512 if ns.quick else 1024)
    simulated(1024 if ns.quick else 2048)


if __name__ == "__main__":
    main()
