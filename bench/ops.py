"""Every registered op (op_library.registry) at its large case (`large=True`): host time against
torch's reference on one host thread each (best of N, interleaved, after a warm-up that compiles),
simulated cycles of every kernel the op launched (`dsl.record()`), roofline efficiency, and what
bounds it (memory: an MTE / FIX pipe, cube: M, vector: V; the pipe class with most roofline cycles
over the op's kernels, simulator.timing.Profile.bound_pipe). Ops without a large case are listed as
such. Then a summary against issue 9's aims: median host ratio (aim <= 1.2), ops above 1.2x and
above 2x, memory-bound ops below 85% of their roofline, and attention forward against torch's
unfused softmax(QK^T)V and F.scaled_dot_product_attention at B=4, N=8, S=1024, D=64 (when
`op_library.scaled_dot_product_attention` exists).

Prints ratios; asserts nothing (correctness of the same cases: `vinci matrix --full`).

    python bench/ops.py [--op NAME ...] [--dtype float32] [--reps 5] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import hostinfo  # noqa: E402  (before torch: caps torch's ISA alike when VINCI_HOST_ISA caps Vinci)

if __name__ == "__main__":
    hostinfo.cap_torch()

AIM_MEDIAN, AIM_MAX, AIM_ROOFLINE = 1.2, 2.0, 0.85
ATTN = (4, 8, 1024, 64)   # B, N, S, D


def bench_op(name: str, dtype_name: str | None, reps: int) -> dict[str, Any]:
    """One row: the op's large case at `dtype_name` (default: the op's first dtype)."""
    from op_library import matrix
    from op_library.registry import get

    spec = get(name)
    dt = matrix.DTYPE_NAMES[dtype_name] if dtype_name else spec.dtypes[0]
    row: dict[str, Any] = {"op": name, "dtype": matrix.dtype_name(dt)}
    if dt not in spec.dtypes:
        return row | {"note": f"does not take {matrix.dtype_name(dt)}"}
    try:
        cases = matrix.cases_for(spec, dt, quick=False)
    except Exception as e:
        return row | {"note": f"cases raised {type(e).__name__}: {e}"}
    large = [c for c in cases if c.large]
    if not large:
        return row | {"note": "no large case"}
    case = large[0]
    row["case"] = case.label
    try:
        m = matrix.measure(spec, case, reps=reps)
    except Exception as e:
        return row | {"note": f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    return row | {"host_ms": m["host_s"] * 1e3, "torch_ms": m["torch_s"] * 1e3, "ratio": m["host_s"] / m["torch_s"],
                  "cycles": m["cycles"], "sim_us": m["seconds"] * 1e6, "eff": m["efficiency"], "bound": m["bound"],
                  "kernels": len(m["kernels"])}


def attention(reps: int) -> dict[str, Any] | None:
    """op_library.scaled_dot_product_attention at B=4, N=8, S=1024, D=64 (float32) against torch's
    unfused softmax(QK^T / sqrt(D))V and F.scaled_dot_product_attention, one host thread each."""
    import torch
    import torch.nn.functional as F

    import dsl
    import op_library
    from compiler.config import CONFIG
    from op_library import matrix

    fn = getattr(op_library, "scaled_dot_product_attention", None)   # whatever its registry entry is called
    if fn is None:
        return None
    b, n, s, d = ATTN
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, n, s, d, generator=g) for _ in range(3))
    scale = 1 / math.sqrt(d)

    def unfused() -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v

    def sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)

    def ours() -> Any:
        return fn(q, k, v)

    out: dict[str, Any] = {"shape": f"B={b} N={n} S={s} D={d} float32"}
    try:
        with dsl.record() as rec:
            ours()
        out.update(cycles=rec.cycles, eff=rec.efficiency, bound=matrix.bound_class(rec))
        threads, torch_threads = CONFIG.threads, torch.get_num_threads()
        CONFIG.threads = 1
        torch.set_num_threads(1)
        try:
            t_ours, t_unfused = matrix.best_of_both(ours, unfused, reps)
            _, t_sdpa = matrix.best_of_both(ours, sdpa, reps)
        finally:
            CONFIG.threads = threads
            torch.set_num_threads(torch_threads)
        out.update(ours_ms=t_ours * 1e3, unfused_ms=t_unfused * 1e3, sdpa_ms=t_sdpa * 1e3,
                   vs_unfused=t_ours / t_unfused, vs_sdpa=t_ours / t_sdpa)
    except Exception as e:
        out["note"] = f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return out


def summary(rows: list[dict[str, Any]], attn: dict[str, Any] | None) -> dict[str, Any]:
    timed = [r for r in rows if "ratio" in r]
    ratios = [r["ratio"] for r in timed]
    return {
        "ops": len(rows), "measured": len(timed),
        "no_large_case": [r["op"] for r in rows if r.get("note") == "no large case"],
        "errors": {r["op"]: r["note"] for r in rows if "note" in r and r["note"] != "no large case"},
        "median_ratio": statistics.median(ratios) if ratios else None,
        "above_1.2x": {r["op"]: round(r["ratio"], 2) for r in timed if r["ratio"] > AIM_MEDIAN},
        "above_2x": {r["op"]: round(r["ratio"], 2) for r in timed if r["ratio"] > AIM_MAX},
        "memory_bound_below_85pct": {r["op"]: round(r["eff"], 3) for r in timed
                                     if r["bound"] == "memory" and r["eff"] < AIM_ROOFLINE},
        "attention": attn,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    cols: list[tuple[str, str, Callable[[Any], str]]] = [
        ("op", "op", str), ("dtype", "dtype", str), ("case", "large case", str),
        ("host_ms", "host ms", lambda v: f"{v:.3g}"), ("torch_ms", "torch ms", lambda v: f"{v:.3g}"),
        ("ratio", "host/torch", lambda v: f"{v:.2f}"), ("cycles", "cycles", str),
        ("sim_us", "sim us", lambda v: f"{v:.1f}"), ("eff", "eff", lambda v: f"{v:.0%}"),
        ("bound", "bound", str), ("kernels", "kernels", str), ("note", "", str)]
    table = [[h for _, h, _ in cols]] + [[f(r[k]) if k in r else "" for k, _, f in cols] for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(cols))]
    for t in table:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip())


def print_summary(s: dict[str, Any]) -> None:
    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    med = s["median_ratio"]
    print(f"\n{s['measured']} of {s['ops']} ops measured"
          + (f"; no large case: {', '.join(s['no_large_case'])}" if s["no_large_case"] else ""))
    for op, note in s["errors"].items():
        print(f"  {op}: {note}")
    if med is not None:
        print(f"median host/torch {med:.2f} (aim <= {AIM_MEDIAN}: {verdict(med <= AIM_MEDIAN)})")
    for key, what in (("above_1.2x", "above 1.2x"), ("above_2x", "above 2x (aim: none)"),
                      ("memory_bound_below_85pct", "memory-bound below 85% roofline (aim: none)")):
        items = s[key]
        print(f"{what}: {len(items)}" + (": " + ", ".join(f"{k} {v}" for k, v in items.items()) if items else ""))
    a = s["attention"]
    if a is None:
        print("attention: not measured (no op_library.scaled_dot_product_attention yet, or --op / --no-attention)")
    elif "note" in a:
        print(f"attention {a['shape']}: {a['note']}")
    else:
        print(f"attention forward {a['shape']}: {a['ours_ms']:.1f} ms, {a['cycles']} cycles, eff {a['eff']:.0%} "
              f"({a['bound']}); torch unfused softmax(QK^T)V {a['unfused_ms']:.1f} ms (ratio {a['vs_unfused']:.2f}, "
              f"aim < 1: {verdict(a['vs_unfused'] < 1)}), F.scaled_dot_product_attention {a['sdpa_ms']:.1f} ms "
              f"(ratio {a['vs_sdpa']:.2f}, aim <= 1.5: {verdict(a['vs_sdpa'] <= 1.5)})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--op", action="append", metavar="NAME", help="op to measure (repeatable; default all)")
    p.add_argument("--dtype", default=None, help="dtype of every op (default: each op's first dtype)")
    p.add_argument("--reps", type=int, default=5, help="best of this many runs (default 5)")
    p.add_argument("--json", metavar="OUT", default=None, help="also write rows and summary as JSON")
    p.add_argument("--attention", action=argparse.BooleanOptionalAction, default=None,
                   help="the attention comparison (default: on without --op, off with it)")
    ns = p.parse_args(argv)

    from op_library.registry import LOAD_ERRORS, REGISTRY

    print(hostinfo.header("op library: large cases, host 1 thread vs torch 1 thread, simulated on ascend910b1"))
    for where, err in LOAD_ERRORS.items():
        print(f"(registry: {where} failed to load: {err})")
    unknown = [o for o in ns.op or [] if o not in REGISTRY]
    if unknown:
        print(f"bench/ops.py: no op {', '.join(map(repr, unknown))} (ops: {', '.join(sorted(REGISTRY))})",
              file=sys.stderr)
        return 2
    rows = []
    for name in ns.op or sorted(REGISTRY):
        rows.append(bench_op(name, ns.dtype, ns.reps))
        print(f"  {name}: {rows[-1].get('ratio', rows[-1].get('note', ''))}", file=sys.stderr, flush=True)
    attn = attention(ns.reps) if (not ns.op if ns.attention is None else ns.attention) else None
    print()
    print_table(rows)
    s = summary(rows, attn)
    print_summary(s)
    if ns.json:
        Path(ns.json).write_text(json.dumps({"rows": rows, "summary": s}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
