"""The op test matrix: every registry entry (op_library.registry) x dtype x case against torch.

`run()` returns one `Result` row per (op, dtype); `main(argv)` is `vinci matrix`: a progress bar,
then the table, a one-line repro command per failing case, exit status 1 on any failure.

Not measured yet (left out rather than faked): simulated cycles / roofline efficiency at the large
case and host time against torch.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from op_library.registry import REGISTRY, Case, OpSpec, get, tolerance

DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_SHORT = {v: k for k, v in DTYPE_NAMES.items()}


@dataclass
class Result:
    """One (op, dtype) row. abs/rel errors are the worst over all cases (forward / backward)."""
    op: str
    dtype: str
    cases: int = 0
    passed: int = 0
    fwd_abs: float = 0.0
    fwd_rel: float = 0.0
    bwd_abs: float | None = None   # None: the op has no backward
    bwd_rel: float | None = None
    failures: list[str] = field(default_factory=list)   # "case I (label): what"
    repro: list[str] = field(default_factory=list)      # one command per failing case

    @property
    def ok(self) -> bool:
        return self.passed == self.cases


def _outputs(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _compare(got: Any, want: Any, rtol: float, atol: float) -> tuple[bool, float, float]:
    """(close, worst abs error, worst rel error): floating outputs within atol + rtol*|want| with
    NaN where torch has NaN; integer outputs (indices) exactly."""
    if got is None or want is None:
        return got is None and want is None, 0.0, 0.0
    if tuple(got.shape) != tuple(want.shape):
        return False, float("inf"), float("inf")
    if not want.is_floating_point():
        diff = (got.to(torch.int64) - want.to(torch.int64)).abs()
        worst = float(diff.max()) if diff.numel() else 0.0
        return worst == 0, worst, worst
    g, w = got.double(), want.double()
    nan_ok = bool(torch.equal(g.isnan(), w.isnan()))
    fin = ~(g.isnan() | w.isnan())
    same_inf = (g == w) & fin   # inf == inf counts as exact
    diff = torch.where(same_inf, torch.zeros_like(g), (g - w).abs())[fin]
    wa = w.abs()[fin]
    if diff.numel() == 0:
        return nan_ok, 0.0, 0.0
    close = bool((diff <= atol + rtol * wa).all())
    big = wa > atol
    rel = float((diff[big] / wa[big]).max()) if bool(big.any()) else 0.0
    return nan_ok and close, float(diff.max()), rel


def _f32(a: Any, grad: bool = False) -> Any:
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return a.detach().float().requires_grad_(grad)
    return a


def run_case(spec: OpSpec, dtype: torch.dtype, case: Case, cores: int | None = None) -> dict[str, Any]:
    """Forward (and backward) of one case against the float32 reference rounded to dtype: returns
    {"ok", "fwd": (abs, rel), "bwd": (abs, rel) or None, "what": failure text}."""
    rtol, atol = tolerance(spec, dtype, case.k)
    kwargs = dict(case.kwargs, **({"cores": cores} if cores and spec.takes_cores else {}))
    want_grad = spec.backward is not None and (spec.bwd_dtypes is None or dtype in spec.bwd_dtypes)
    ref_args = [_f32(a, want_grad and i in spec.grad_args) for i, a in enumerate(case.args)]
    ref_out = _outputs(spec.ref(*ref_args, **case.kwargs))
    try:
        got = _outputs(spec.fn(*case.args, **kwargs))
    except Exception as e:  # an op that raises fails its case, the matrix goes on
        return {"ok": False, "fwd": (float("inf"), float("inf")), "bwd": None, "what": f"forward raised {e!r}"}
    ok, fa, fr = True, 0.0, 0.0
    for g, w in zip(got, ref_out, strict=True):
        w = w.detach()
        c, a, r = _compare(g, w.to(dtype) if w.is_floating_point() else w, rtol, atol)
        ok, fa, fr = ok and c, max(fa, a), max(fr, r)
    what = "" if ok else f"forward: worst abs {fa:.3g} rel {fr:.3g} (rtol {rtol:.3g}, atol {atol:.3g})"
    if not want_grad or spec.backward is None:  # (the second test narrows the type for mypy)
        return {"ok": ok, "fwd": (fa, fr), "bwd": None, "what": what}
    grads = [torch.randn(ref_out[j].shape).to(dtype) for j in spec.grad_outputs]
    inputs = [ref_args[i] for i in spec.grad_args if ref_args[i] is not None]
    ref_grads = iter(torch.autograd.grad([ref_out[j] for j in spec.grad_outputs], inputs, [g.float() for g in grads],
                                         allow_unused=True))
    want = [None if ref_args[i] is None else next(ref_grads) for i in spec.grad_args]
    want = [torch.zeros_like(ref_args[i]) if w is None and ref_args[i] is not None else w
            for w, i in zip(want, spec.grad_args, strict=True)]
    grad = grads[0] if len(grads) == 1 else tuple(grads)
    try:
        have = list(spec.backward(grad, got if len(got) > 1 else got[0], case.args, case.kwargs))
    except Exception as e:
        return {"ok": False, "fwd": (fa, fr), "bwd": (float("inf"), float("inf")), "what": f"backward raised {e!r}"}
    bok, ba, br = len(have) == len(want), 0.0, 0.0
    for g, w in zip(have, want, strict=False):
        c, a, r = _compare(g, None if w is None else w.to(dtype), rtol, atol)
        bok, ba, br = bok and c, max(ba, a), max(br, r)
    if not bok:
        bad = f"backward: worst abs {ba:.3g} rel {br:.3g} (rtol {rtol:.3g}, atol {atol:.3g})"
        what = f"{what}; {bad}" if what else bad
    return {"ok": ok and bok, "fwd": (fa, fr), "bwd": (ba, br), "what": what}


def cases_for(spec: OpSpec, dtype: torch.dtype, quick: bool) -> list[Case]:
    """The cases of spec at dtype, the same on every call (seeded from nothing but the order)."""
    torch.manual_seed(0)
    return spec.cases(quick, dtype)


def repro(op: str, dtype: torch.dtype, index: int, quick: bool) -> str:
    return f"vinci matrix --op {op} --dtype {_SHORT[dtype]} --case {index}{'' if quick else ' --full'}"


def run(ops: Sequence[str] | None = None, dtypes: Sequence[torch.dtype | str] | None = None, quick: bool = True,
        cores: int | None = None, case: int | None = None, progress: Any = None) -> list[Result]:
    """Run the matrix (all ops / all their dtypes by default; `case` picks one case index).
    `progress`, if given, is called once per case."""
    results = []
    want = None if dtypes is None else [DTYPE_NAMES[d] if isinstance(d, str) else d for d in dtypes]
    for name in ops or sorted(REGISTRY):
        spec = get(name)
        for dt in spec.dtypes:
            if want is not None and dt not in want:
                continue
            has_bwd = spec.backward is not None and (spec.bwd_dtypes is None or dt in spec.bwd_dtypes)
            row = Result(name, _SHORT[dt], bwd_abs=0.0 if has_bwd else None, bwd_rel=0.0 if has_bwd else None)
            for i, c in enumerate(cases_for(spec, dt, quick)):
                if case is not None and i != case:
                    continue
                r = run_case(spec, dt, c, cores)
                row.cases += 1
                row.passed += bool(r["ok"])
                row.fwd_abs, row.fwd_rel = max(row.fwd_abs, r["fwd"][0]), max(row.fwd_rel, r["fwd"][1])
                if r["bwd"] is not None and row.bwd_abs is not None and row.bwd_rel is not None:
                    row.bwd_abs, row.bwd_rel = max(row.bwd_abs, r["bwd"][0]), max(row.bwd_rel, r["bwd"][1])
                if not r["ok"]:
                    row.failures.append(f"case {i} ({c.label}): {r['what']}")
                    row.repro.append(repro(name, dt, i, quick))
                if progress is not None:
                    progress(f"{name} {_SHORT[dt]} {i}")
            results.append(row)
    return results


def _count(ops: Sequence[str] | None, dtypes: Sequence[torch.dtype] | None, quick: bool, case: int | None) -> int:
    n = 0
    for name in ops or sorted(REGISTRY):
        spec = get(name)
        for dt in spec.dtypes:
            if dtypes is None or dt in dtypes:
                k = len(cases_for(spec, dt, quick))
                n += k if case is None else int(case < k)
    return n


def table(results: Sequence[Result]) -> str:
    def e(v: float | None) -> str:
        return "-" if v is None else f"{v:.2e}"

    head = ("op", "dtype", "cases", "passed", "fwd abs", "fwd rel", "bwd abs", "bwd rel", "")
    rows = [head] + [(r.op, r.dtype, str(r.cases), str(r.passed), e(r.fwd_abs), e(r.fwd_rel), e(r.bwd_abs),
                      e(r.bwd_rel), "ok" if r.ok else "FAIL") for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", action="append", metavar="NAME", help=f"op to run (repeatable; default all: "
                   f"{', '.join(sorted(REGISTRY))})")
    p.add_argument("--dtype", action="append", choices=sorted(DTYPE_NAMES), help="dtype (repeatable; default all)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="quick", action="store_true", default=True, help="the quick cases (default)")
    g.add_argument("--full", dest="quick", action="store_false", help="every case, including the large one")
    p.add_argument("--json", metavar="OUT", default=None, help="also write the rows as JSON")
    p.add_argument("--cores", type=int, default=None, help="block_dim for ops that take one")
    p.add_argument("--case", type=int, default=None, metavar="I", help="run only case I of each (op, dtype)")


def main(argv: Sequence[str] | None = None, ns: argparse.Namespace | None = None) -> int:
    """`vinci matrix`: progress bar, table, repro lines; 1 if any case failed."""
    from tqdm import tqdm

    if ns is None:
        p = argparse.ArgumentParser(prog="vinci matrix", description="op x dtype x case against torch")
        add_arguments(p)
        ns = p.parse_args(argv)
    for name in ns.op or []:
        if name not in REGISTRY:
            print(f"vinci matrix: no op {name!r} (ops: {', '.join(sorted(REGISTRY))})", file=sys.stderr)
            return 2
    dtypes = [DTYPE_NAMES[d] for d in ns.dtype] if ns.dtype else None
    with tqdm(total=_count(ns.op, dtypes, ns.quick, ns.case), desc="matrix", unit="case", file=sys.stderr) as bar:
        def step(what: str) -> None:
            bar.set_postfix_str(what)
            bar.update()

        results = run(ns.op, dtypes, ns.quick, ns.cores, ns.case, progress=step)
    print(table(results))
    failed = [r for r in results if not r.ok]
    for r in failed:
        for f, cmd in zip(r.failures, r.repro, strict=True):
            print(f"FAIL {r.op} {r.dtype} {f}\n  repeat: {cmd}")
    if ns.json:
        with open(ns.json, "w") as fh:
            json.dump([asdict(r) | {"ok": r.ok} for r in results], fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
