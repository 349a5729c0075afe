"""`vinci demo`: compile the example kernels, check them against torch, print their profiles."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TypedDict, Unpack

import numpy as np


class _Tol(TypedDict, total=False):
    atol: float
    rtol: float


def _examples() -> Path:
    return Path(__file__).resolve().parent.parent / "examples" / "kernels"


def main(quick: bool = False) -> int:
    import torch

    # the example kernels are importable only from here (examples/ is not type-checked: see pyproject)
    sys.path.insert(0, str(_examples()))
    from layer_norm import layer_norm  # type: ignore[import-not-found]
    from matmul import matmul  # type: ignore[import-not-found]
    from softmax import softmax  # type: ignore[import-not-found]
    from swish import swish, swish_backward  # type: ignore[import-not-found]
    from vadd import vadd, vadd_any  # type: ignore[import-not-found]

    rng = np.random.default_rng(0)
    n = (1 << 18) + 123 if quick else (1 << 22) + 123
    rows, cols = (256, 1000) if quick else (4096, 1000)
    failures = 0

    def check(name: str, got: object, want: object, **tol: Unpack[_Tol]) -> None:
        nonlocal failures
        g, w = torch.as_tensor(got).float(), torch.as_tensor(want).float()
        ok = torch.allclose(g, w, **tol) if tol else torch.equal(g, w)
        err = (g - w).abs().max().item() if g.numel() else 0.0
        failures += not ok
        print(f"  {'ok  ' if ok else 'FAIL'} {name:<34} max abs err {err:.3g}")

    print("== correctness against torch (n = %d, softmax/layer_norm %dx%d)" % (n, rows, cols))
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    y = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    z = torch.empty_like(x)
    t0 = time.perf_counter()
    vadd[8](x, y, z)
    first = (time.perf_counter() - t0) * 1e3
    check("vadd f32", z, x + y)
    for dt in (torch.float16, torch.bfloat16, torch.int32):
        a, b = (x * 50).to(dt), (y * 50).to(dt)
        c = torch.empty_like(a)
        vadd_any[8](a, b, c)
        check(f"vadd {dt}", c, a + b)
    s = torch.empty_like(x)
    swish[8](x, s)
    check("swish f32", s, torch.nn.functional.silu(x), atol=1e-6, rtol=1e-5)
    xh, sh = x.half(), torch.empty(n, dtype=torch.float16)
    swish[8](xh, sh)
    check("swish f16", sh, torch.nn.functional.silu(xh.float()).half(), atol=2e-3, rtol=2e-3)
    dy = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    dx = torch.empty_like(x)
    swish_backward[8](x, dy, dx)
    xr = x.clone().requires_grad_()
    torch.nn.functional.silu(xr).backward(dy)
    check("swish backward f32", dx, xr.grad, atol=1e-5, rtol=1e-4)
    X = torch.from_numpy(rng.standard_normal((rows, cols)).astype(np.float32))
    Y = torch.empty_like(X)
    softmax[8](X, Y)
    check("softmax rows f32", Y, torch.softmax(X, -1), atol=1e-6, rtol=1e-4)
    w = torch.from_numpy(rng.standard_normal(cols).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal(cols).astype(np.float32))
    layer_norm[8](X, w, b, Y)
    check("layer_norm f32", Y, torch.nn.functional.layer_norm(X, (cols,), w, b), atol=1e-4, rtol=1e-4)
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        A = torch.from_numpy(rng.standard_normal((300, 257)).astype(np.float32)).to(dt)
        B = torch.from_numpy(rng.standard_normal((257, 130)).astype(np.float32)).to(dt)
        C = torch.empty(300, 130)
        matmul[8](A, B, C)
        check(f"matmul {str(dt).replace('torch.', '')} 300x257x130 (cube)", C, A.float() @ B.float(), atol=1e-3, rtol=1e-3)
    print(f"  (first launch of vadd incl. compile or cache load: {first:.1f} ms)")

    print("\n== simulated profiles on the default config (24 cores)")
    runs = [
        ("vadd f32 (double-buffered)", vadd[24], (x, y, z)),
        ("vadd f32 (buffers=1)", vadd.with_options(buffers=1)[24], (x, y, z)),
        ("swish f32 (double-buffered)", swish[24], (x, s)),
        ("swish f32 (buffers=1)", swish.with_options(buffers=1)[24], (x, s)),
        ("swish backward f32", swish_backward[24], (x, dy, dx)),
        ("softmax rows f32", softmax[24], (X, Y)),
        ("layer_norm f32", layer_norm[24], (X, w, b, Y)),
    ]
    print(f"  {'kernel':<30}{'cycles':>10}{'time us':>10}{'bound':>10}{'eff':>8}  busiest pipes")
    for name, launch, args in runs:
        run = launch.profile(*args)
        pipes = sorted(run.pipes.items(), key=lambda kv: -kv[1])[:3]
        busy = ", ".join(f"{p} {u:.0%}" for p, u in pipes if u > 0)
        print(f"  {name:<30}{run.cycles:>10}{run.seconds * 1e6:>10.1f}{run.bound:>10}{run.efficiency:>8.1%}  {busy}")
    mm = 1024 if quick else 2048
    A = torch.randn(mm, mm).half()
    B = torch.randn(mm, mm).half()
    C = torch.empty(mm, mm, dtype=torch.float16)
    run = matmul[24].profile(A, B, C, BM=256, BN=128, BK=64)
    pipes = sorted(run.pipes.items(), key=lambda kv: -kv[1])[:3]
    busy = ", ".join(f"{p} {u:.0%}" for p, u in pipes if u > 0)
    name = f"matmul f16 {mm}^3 (cube)"
    print(f"  {name:<30}{run.cycles:>10}{run.seconds * 1e6:>10.1f}{run.bound:>10}{run.efficiency:>8.1%}  {busy}")
    print("\nfull report of the last one:\n" + run.report())
    print(f"\n{'all checks passed' if not failures else f'{failures} check(s) FAILED'}")
    return 1 if failures else 0
