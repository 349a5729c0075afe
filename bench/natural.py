"""The nine kernels of issue 8, written the natural way (examples/kernels/), each checked against
torch, then profiled on the timing model (ascend910b1, 24 cores) and timed on one host thread
against torch single-thread in the same run. Prints; asserts nothing but correctness.

Columns: simulated cycles and microseconds, efficiency (each core's bound summed over every core
asked for), how many cores had work, the busiest pipe and its busy share, UB bytes the placement
uses (all slots), host time Vinci / torch (> 1: Vinci slower).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import hostinfo  # noqa: E402

if __name__ == "__main__":
    hostinfo.cap_torch()

from run import best_of_both, table  # noqa: E402


def example(name: str) -> Any:
    """examples/kernels/NAME.py's kernel NAME (by path: bench/ has modules of the same names)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / "kernels" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def ub_bytes(k: Any, args: tuple, kwargs: dict) -> int:
    """UB bytes the placement of this specialisation uses, sizes evaluated for these shapes."""
    from compiler import CONFIG
    from compiler.passes.budget import argv_for, usage
    from compiler.pipeline import to_core
    from dsl.types import Mem
    from simulator.config import load_config

    values, infos = k.bind(args, kwargs)
    params, _ = k.params_for(values, infos)
    ir = to_core(k.fdef, k.env, params, k.options, load_config(CONFIG.hw))
    shapes = {d.name: tuple(i.shape) for d, i in zip(k.decls, infos) if i is not None}
    return usage(ir, argv_for(ir, shapes)).get(Mem.UB, 0)


def cases(quick: bool) -> list[tuple[str, Any, tuple, dict, Callable[[], Any], Callable[[], float]]]:
    """(what, kernel, args, consts, torch's version, error of the kernel's result against it)."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    s = 4 if quick else 1

    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    out: list[tuple[str, Any, tuple, dict, Callable[[], Any], Callable[[], float]]] = []

    def add(what: str, k: Any, args: tuple, kw: dict, ref: Callable[[], Any], result: Callable[[], Any]) -> None:
        def err() -> float:
            return float((result().float() - ref().float()).abs().max())
        out.append((what, k, args, kw, ref, err))

    x, w = randn(8192 // s, 1024), randn(1024)
    y = torch.empty_like(x)
    add(f"rms_norm {x.shape[0]}x1024", example("rms_norm"), (x, w, y), {},
        lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, lambda: y)

    xg = randn((1 << 24) // s)
    yg = torch.empty_like(xg)
    add(f"gelu_tanh {xg.numel() >> 20}M", example("gelu_tanh"), (xg, yg), {}, lambda: F.gelu(xg, approximate="tanh"), lambda: yg)

    xl = randn(16384 // s, 1000)
    yl = torch.empty_like(xl)
    add(f"log_softmax {xl.shape[0]}x1000", example("log_softmax"), (xl, yl), {}, lambda: F.log_softmax(xl, -1), lambda: yl)

    xc = randn(4096 // s, 1000)
    yc = torch.empty(1000)
    add(f"col_sum {xc.shape[0]}x1000", example("col_sum"), (xc, yc), {}, lambda: xc.sum(0), lambda: yc)

    xt = randn(4096 // s, 4096 // s)
    yt = torch.empty(xt.shape[1], xt.shape[0])
    add(f"transpose {xt.shape[0]}^2 f32", example("transpose"), (xt, yt), {}, lambda: xt.t().contiguous(), lambda: yt)

    n = 2048 // s
    xm, wm, bm = randn(n, n, dtype=torch.float16), randn(n, n, dtype=torch.float16), randn(n)
    ym = torch.empty(n, n, dtype=torch.float16)
    add(f"linear_bias_relu {n}^3 f16", example("linear_bias_relu"), (xm, wm, bm, ym), {},
        lambda: torch.relu(xm.float() @ wm.float() + bm).half(), lambda: ym)

    xr, cr, sr = randn(8192 // s, 128), randn(8192 // s, 128), randn(8192 // s, 128)
    yr = torch.empty_like(xr)
    add(f"rotary {xr.shape[0]}x128", example("rotary"), (xr, cr, sr, yr), {},
        lambda: xr * cr + torch.cat([-xr[:, 64:], xr[:, :64]], 1) * sr, lambda: yr)

    S, D = 2048 // s, 64
    q, k, v = (randn(S, D, dtype=torch.float16) for _ in range(3))
    o = torch.empty(S, D, dtype=torch.float16)
    scale = 1 / math.sqrt(D)
    add(f"flash_attention S={S} D={D} f16", example("flash_attention"), (q, k, v, o, scale), {"D": D},
        lambda: F.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None])[0], lambda: o)

    xe = randn(8192 // s, 1000)
    te = torch.randint(0, 1000, (xe.shape[0], 1), generator=g, dtype=torch.int32)
    le = torch.empty(xe.shape[0], 1)
    add(f"cross_entropy {xe.shape[0]}x1000", example("cross_entropy"), (xe, te, le), {},
        lambda: F.cross_entropy(xe, te[:, 0].long(), reduction="none")[:, None], lambda: le)
    return out


def main() -> None:
    import torch

    from compiler.config import CONFIG

    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    ns = p.parse_args()
    CONFIG.threads = 1
    torch.set_num_threads(1)
    rows = []
    for what, k, args, kw, ref, err in cases(ns.quick):
        k(*args, **kw)
        e = err()
        run = k[24].profile(*args, **kw)
        busiest = max(run.pipes.items(), key=lambda kv: kv[1])
        tv, tt = best_of_both(lambda: k[24](*args, **kw), ref, 3 if ns.quick else 7)
        rows.append({"kernel": what, "max err": f"{e:.1e}", "cycles": run.cycles, "sim us": round(run.seconds * 1e6, 1),
                     "eff": f"{run.efficiency:.1%}", "cores": f"{run.profile.active_cores}/24",
                     "busiest": f"{busiest[0]} {busiest[1]:.0%}", "M": f"{run.pipes['M']:.0%}",
                     "UB bytes": ub_bytes(k, args, kw), "host/torch": round(tv / tt, 2)})
    print("== the nine natural kernels (examples/kernels): ascend910b1, 24 cores; host 1 thread vs torch 1 thread")
    table(rows)


if __name__ == "__main__":
    main()
