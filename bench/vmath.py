"""The vector builtins (compiler/backend/vmath.py) against torch on one thread: time on 4M f32 elements and
ulp error against float64 on the same strided sweep of f32 bit patterns.

Prints per function: vinci ms, torch ms, their ratio and whether the 1.5x target is met, then the
max ulp error of vinci and of torch. Each pair is timed in turn (vinci, torch, vinci, ...) so both see
the same contention on a shared machine. Asserts nothing. `--quick` uses 1M elements and a coarser sweep;
`--tile N` sets the tile (default 2048 elements; the lead measures 1 KiB tiles stream better).
"""
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

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dsl  # noqa: E402
from bench.run import best_of_both  # noqa: E402
from compiler.backend import vmath as M  # noqa: E402
from compiler.config import CONFIG  # noqa: E402
from dsl import GM, Const, f32  # noqa: E402
from simulator.isa import Instr  # noqa: E402


@dsl.kernel
def vm(x: GM[f32], y: GM[f32], OP: Const[str] = "exp", TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        a = x[t]
        if OP == "exp":
            y[t] = dsl.exp(a)
        elif OP == "log":
            y[t] = dsl.log(a)
        elif OP == "tanh":
            y[t] = dsl.tanh(a)
        elif OP == "sigmoid":
            y[t] = dsl.sigmoid(a)
        elif OP == "silu":
            y[t] = a * dsl.sigmoid(a)
        elif OP == "erf":
            y[t] = dsl.erf(a)
        elif OP == "gelu":
            y[t] = dsl.gelu(a)
        elif OP == "gelu_tanh":
            y[t] = dsl.gelu(a, approximate="tanh")
        elif OP == "softplus":
            y[t] = dsl.softplus(a)
        elif OP == "sin":
            y[t] = dsl.sin(a)
        elif OP == "cos":
            y[t] = dsl.cos(a)
        elif OP == "sqrt":
            y[t] = dsl.sqrt(a)
        elif OP == "rsqrt":
            y[t] = dsl.rsqrt(a)
        elif OP == "reciprocal":
            y[t] = dsl.reciprocal(a)


@dsl.kernel
def vpow(x: GM[f32], e: GM[f32], y: GM[f32], TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.pow(x[t], e[t])


#: name -> (instr, torch function, input kind): "any" = randn * 3, "pos" = uniform (0.01, 10]
CASES = {
    "exp": (Instr.VEXP, torch.exp, "any"), "log": (Instr.VLOG, torch.log, "pos"),
    "tanh": (Instr.VTANH, torch.tanh, "any"), "sigmoid": (Instr.VSIGMOID, torch.sigmoid, "any"),
    "silu": (None, F.silu, "any"), "erf": (Instr.VERF, torch.erf, "any"), "gelu": (Instr.VGELU, F.gelu, "any"),
    "gelu_tanh": (Instr.VGELU_TANH, lambda t: F.gelu(t, approximate="tanh"), "any"),
    "softplus": (Instr.VSOFTPLUS, F.softplus, "any"), "sin": (Instr.VSIN, torch.sin, "any"),
    "cos": (Instr.VCOS, torch.cos, "any"), "sqrt": (Instr.VSQRT, torch.sqrt, "pos"),
    "rsqrt": (Instr.VRSQRT, torch.rsqrt, "pos"), "reciprocal": (Instr.VRECIP, torch.reciprocal, "pos"),
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tile", type=int, default=2048)
    p.add_argument("--reps", type=int, default=11, help="timed runs of each side, interleaved (best of)")
    ns = p.parse_args()
    n = (1 << 20) if ns.quick else (4 << 20)
    CONFIG.threads = 1
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    inputs = {"any": torch.randn(n, generator=g) * 3, "pos": torch.rand(n, generator=g) * 10 + 0.01}
    sweep = M.sweep(4001 if ns.quick else 1999)
    sweep_slow = M.sweep(16001 if ns.quick else 8009)  # erf / gelu references call math.erf(c) per element
    with np.errstate(all="ignore"):
        sd = sweep.astype(np.float64)
    print(f"{'function':12s} {'vinci ms':>9s} {'torch ms':>9s} {'ratio':>6s} {'1.5x':>7s}   "
          f"{'vinci ulp':>9s} {'torch ulp':>9s} {'bound':>5s}")
    for name, (instr, tf, kind) in CASES.items():
        x = inputs[kind]
        y, out = torch.empty_like(x), torch.empty_like(x)
        tfn = lambda: tf(x)  # noqa: E731
        try:  # torch's out= form where it has one (no fresh 16 MiB result per call)
            tf(x, out=out)
            tfn = lambda: tf(x, out=out)  # noqa: E731
        except TypeError:
            pass
        tv, tt = best_of_both(lambda: vm[24](x, y, OP=name, TILE=ns.tile), tfn, ns.reps)
        ulps = "", "", ""
        if instr is not None:
            s = sweep_slow if instr in (Instr.VERF, Instr.VGELU) else sweep
            ys = np.empty_like(s)
            vm[2](s, ys, OP=name)
            with np.errstate(all="ignore"):
                sdd = s.astype(np.float64) if s is sweep_slow else sd
                ref = M.REFERENCE[instr](sdd)
                ev = M.ulp_error(ys, ref).max()
                et = M.ulp_error(tf(torch.from_numpy(s)).numpy(), ref).max()
            ulps = f"{ev:.3f}", f"{et:.3g}", f"{M.BOUND[instr]:g}"
        r = tv / tt
        print(f"{name:12s} {tv * 1e3:9.2f} {tt * 1e3:9.2f} {r:6.2f} {'met' if r <= 1.5 else 'MISSED':>7s}   "
              f"{ulps[0]:>9s} {ulps[1]:>9s} {ulps[2]:>5s}", flush=True)
    # pow: tensor ** tensor on positive bases
    x, e = inputs["pos"], inputs["any"] / 3
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    tv, tt = best_of_both(lambda: vpow[24](x, e, y, TILE=ns.tile), lambda: torch.pow(x, e, out=out), ns.reps)
    xs = np.abs(sweep)
    es = (np.random.default_rng(0).standard_normal(xs.size) * 8).astype(np.float32)
    ys = np.empty_like(xs)
    vpow[2](xs, es, ys)
    with np.errstate(all="ignore"):
        ref = np.power(xs.astype(np.float64), es.astype(np.float64))
        ev = M.ulp_error(ys, ref).max()
        et = M.ulp_error(torch.pow(torch.from_numpy(xs), torch.from_numpy(es)).numpy(), ref).max()
    r = tv / tt
    print(f"{'pow':12s} {tv * 1e3:9.2f} {tt * 1e3:9.2f} {r:6.2f} {'met' if r <= 1.5 else 'MISSED':>7s}   "
          f"{ev:9.3f} {et:9.3g} {M.BOUND[Instr.VPOW]:5g}")


if __name__ == "__main__":
    main()
