"""Per-call overhead of small ops: op_library's function, its `torch.ops.npu.*` op (when torch_bridge
imports) and the ordinary (unplanned) op_library path, against torch's same op on the same small
tensors, in the same run, one host thread each (`torch.set_num_threads(1)`, `VINCI_THREADS=1`).

Each number is the best over `--reps` rounds (the candidates interleaved round by round) of the mean
time of `--calls` back-to-back calls, after a warm-up that compiles the kernels and builds the plans
(op_library._plan). The aims: op_library's function <= 12 us per call on these shapes, and a
`torch.ops.npu` op under 20 us (issue 10, measured against torch.add). torch's AdamW runs its
single-tensor path (foreach=False), the one op_library's step follows operation for operation. Prints ratios; asserts nothing
(tests/op_library/test_plan_cache.py checks that the planned results are bit-identical).

    python bench/overhead.py [--op NAME ...] [--reps 7] [--calls 2000] [--clock wall|cpu] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ["VINCI_THREADS"] = "1"   # read by compiler.config at import: before anything imports it

import hostinfo  # noqa: E402  (before torch: caps torch's ISA alike when VINCI_HOST_ISA caps Vinci)

if __name__ == "__main__":
    hostinfo.cap_torch()

AIM_LIB, AIM_NPU = 12.0, 20.0   # us per call

Fn = Callable[[], Any]


def cases() -> list[tuple[str, str, Fn, Fn | None, Fn]]:
    """(op, case, op_library call, torch.ops.npu call or None, torch call), on small tensors."""
    import torch
    import torch.nn.functional as F

    import op_library as L

    npu: Any = None
    try:
        import torch_bridge  # noqa: F401  (registers torch.ops.npu.*)

        npu = torch.ops.npu
    except Exception as e:   # another area half-built: the npu column reads n/a
        print(f"torch_bridge does not import ({type(e).__name__}: {e}); the npu column is skipped")

    def op(name: str, *args: Any, **kw: Any) -> Fn | None:
        if npu is None or not hasattr(npu, name):
            return None
        f = getattr(npu, name)
        return lambda: f(*args, **kw)

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, generator=g), torch.randn(64, generator=g)
    x2, row = torch.randn(4, 16, generator=g), torch.randn(16, generator=g)
    w16, b16 = torch.randn(16, generator=g), torch.randn(16, generator=g)
    a, b = torch.randn(8, 16, generator=g), torch.randn(16, 8, generator=g)
    w, bias = torch.randn(8, 16, generator=g), torch.randn(8, generator=g)
    xh = x.half()

    def adam_state(k: int) -> list[Any]:
        ps = [torch.randn(64, generator=g), torch.randn(8, 16, generator=g)][:k]
        return [ps, [torch.randn_like(p) for p in ps], [torch.zeros_like(p) for p in ps],
                [torch.zeros_like(p) for p in ps], [], [torch.tensor(0.0) for _ in ps]]

    s1, s2, s3 = adam_state(2), adam_state(2), adam_state(2)
    o1, o2, o3 = adam_state(1), adam_state(1), adam_state(1)
    hyper = dict(amsgrad=False, beta1=0.9, beta2=0.999, lr=1e-3, weight_decay=0.01, eps=1e-8, maximize=False)
    from torch.optim.adamw import adamw as torch_adamw

    return [
        ("add", "64 + 64", lambda: L.add(x, y), op("add", x, y), lambda: torch.add(x, y)),
        ("add", "64 + 2.0", lambda: L.add(x, 2.0), None, lambda: torch.add(x, 2.0)),
        ("add", "4x16 + 16", lambda: L.add(x2, row), op("add", x2, row), lambda: torch.add(x2, row)),
        ("add", "f16 64 + 64", lambda: L.add(xh, xh), op("add", xh, xh), lambda: torch.add(xh, xh)),
        ("sub", "64 - 64", lambda: L.sub(x, y), op("sub", x, y), lambda: torch.sub(x, y)),
        ("mul", "64 * 64", lambda: L.mul(x, y), op("mul", x, y), lambda: torch.mul(x, y)),
        ("mul", "64 * 0.5", lambda: L.mul(x, 0.5), None, lambda: torch.mul(x, 0.5)),
        ("div", "64 / 64", lambda: L.div(x, y), op("div", x, y), lambda: torch.div(x, y)),
        ("relu", "64", lambda: L.relu(x), op("relu", x), lambda: torch.relu(x)),
        ("gelu", "64", lambda: L.gelu(x), op("gelu", x), lambda: F.gelu(x)),
        ("silu", "64", lambda: L.silu(x), op("silu", x), lambda: F.silu(x)),
        ("sigmoid", "64", lambda: L.sigmoid(x), op("sigmoid", x), lambda: torch.sigmoid(x)),
        ("exp", "64", lambda: L.exp(x), op("exp", x), lambda: torch.exp(x)),
        ("neg", "64", lambda: L.neg(x), op("neg", x), lambda: torch.neg(x)),
        ("softmax", "4x16, -1", lambda: L.softmax(x2, -1), op("softmax", x2, -1), lambda: torch.softmax(x2, -1)),
        ("log_softmax", "4x16, -1", lambda: L.log_softmax(x2, -1), op("log_softmax", x2, -1),
         lambda: torch.log_softmax(x2, -1)),
        ("layer_norm", "4x16, w, b", lambda: L.layer_norm(x2, (16,), w16, b16),
         op("layer_norm", x2, [16], w16, b16), lambda: F.layer_norm(x2, (16,), w16, b16)),
        ("rms_norm", "4x16, w", lambda: L.rms_norm(x2, (16,), w16), op("rms_norm", x2, [16], w16),
         lambda: F.rms_norm(x2, (16,), w16)),
        ("npu_rms_norm", "4x16, w", lambda: L.npu_rms_norm(x2, w16), op("npu_rms_norm", x2, w16),
         lambda: F.rms_norm(x2, (16,), w16)),
        ("sum", "4x16, -1", lambda: L.sum(x2, -1), op("sum", x2, [-1]), lambda: torch.sum(x2, -1)),
        ("mean", "4x16, -1", lambda: L.mean(x2, -1), op("mean", x2, [-1]), lambda: torch.mean(x2, -1)),
        ("matmul", "8x16 @ 16x8", lambda: L.matmul(a, b), op("matmul", a, b), lambda: torch.matmul(a, b)),
        ("linear", "8x16, 8x16, 8", lambda: L.linear(a, w, bias), op("linear", a, w, bias),
         lambda: F.linear(a, w, bias)),
        ("adamw", "1 param (64)", lambda: L.adamw(*o1, **hyper), op("adamw", *o2, **hyper),
         lambda: torch_adamw(*o3, foreach=False, **hyper)),
        ("adamw", "2 params (64, 8x16)", lambda: L.adamw(*s1, **hyper), op("adamw", *s2, **hyper),
         lambda: torch_adamw(*s3, foreach=False, **hyper)),
    ]


def per_call(fn: Fn, calls: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Mean seconds per call over `calls` back-to-back calls."""
    t0 = clock()
    for _ in range(calls):
        fn()
    return (clock() - t0) / calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", action="append", help="only these ops (repeatable)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: time.perf_counter; cpu: this thread's CPU time (time.thread_time), steadier on a "
                         "host shared with other work (every candidate runs on this one thread)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from compiler import CONFIG
    from op_library._plan import PLANS

    print(hostinfo.header("per-call overhead of small ops (one host thread each)"))
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    print(f"VINCI_THREADS={CONFIG.threads}, torch threads {torch.get_num_threads()}, best of {args.reps} x "
          f"{args.calls} calls ({args.clock} clock); us per call; 'ordinary' is op_library with plans off")

    def unplanned(fn: Fn) -> Fn:
        def run() -> Any:
            with PLANS.disabled():
                return fn()
        return run

    rows = []
    hdr = f"{'op':13s} {'case':22s} {'op_library':>10s} {'npu op':>8s} {'ordinary':>9s} {'torch':>7s} " \
          f"{'lib/torch':>9s} {'npu/torch':>9s}  aim"
    print(hdr)
    print("-" * len(hdr))
    for name, case, lib, npu, ref in cases():
        if args.op and name not in args.op:
            continue
        cands: dict[str, Fn] = {"lib": lib, "ordinary": unplanned(lib), "torch": ref}
        if npu is not None:
            cands["npu"] = npu
        ok: dict[str, bool] = {}
        for k, fn in cands.items():   # warm-up: compile, build plans; an op that fails is reported
            try:
                for _ in range(20):
                    fn()
                ok[k] = True
            except Exception as e:
                print(f"  {name} {case}: {k} raised {type(e).__name__}: {str(e).splitlines()[0][:100]}")
                ok[k] = False
        best = {k: float("inf") for k in cands}
        for _ in range(args.reps):
            for k, fn in cands.items():
                if ok[k]:
                    n = args.calls // 10 if k == "ordinary" else args.calls   # the slow path: fewer calls
                    best[k] = min(best[k], per_call(fn, max(n, 50), clock))
        us = {k: (v * 1e6 if v != float("inf") else None) for k, v in best.items()}
        t = us["torch"]
        row = {"op": name, "case": case, "lib_us": us["lib"], "npu_us": us.get("npu"), "ordinary_us": us["ordinary"],
               "torch_us": t, "lib_ratio": us["lib"] / t if us["lib"] and t else None,
               "npu_ratio": us["npu"] / t if us.get("npu") and t else None}
        rows.append(row)

        def f(v: float | None, w: int, p: int = 1) -> str:
            return f"{v:{w}.{p}f}" if v is not None else f"{'n/a':>{w}s}"
        aim = hostinfo.verdict(us["lib"], AIM_LIB) if us["lib"] else "-"
        if us.get("npu"):
            aim += " / npu " + hostinfo.verdict(us["npu"], AIM_NPU)
        print(f"{name:13s} {case:22s} {f(us['lib'], 10)} {f(us.get('npu'), 8)} {f(us['ordinary'], 9)} {f(t, 7, 2)} "
              f"{f(row['lib_ratio'], 9)} {f(row['npu_ratio'], 9)}  {aim}", flush=True)
    lib = [r["lib_us"] for r in rows if r["lib_us"]]
    if lib:
        print(f"\nop_library: median {statistics.median(lib):.1f} us per call, {sum(v <= AIM_LIB for v in lib)} of "
              f"{len(lib)} cases within {AIM_LIB:.0f} us; plan cache: {len(PLANS)} plans, {PLANS.hits} hits, "
              f"{PLANS.misses} misses")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
