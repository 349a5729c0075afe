"""The op test matrix: every registry entry (op_library.registry) x dtype x case against torch.

`run()` returns one `Result` row per (op, dtype); `main(argv)` is `vinci matrix`: a progress bar,
then the table, a one-line repro command per failing case, exit status 1 on any failure.

What one row checks and measures:

- every case: the forward against the torch reference run on float32 copies of the floating
  inputs (integer and bool inputs as they are), rounded to the dtype torch itself returns for the
  case's inputs (found by running the reference on meta tensors); the outputs' shapes and dtypes
  must be torch's. Floating outputs within the tolerance rule (registry.tolerance, keyed by the
  output's dtype), NaN where torch has NaN, inf where torch has inf; integer and bool outputs
  exactly. Then the backward (`spec.backward`) against torch autograd of the float32 reference,
  each gradient in its input's dtype.
- once per op (on the row of its first floating dtype): the f64 finite-difference check,
  `torch.autograd.gradcheck` of the *reference* in float64 on the smallest non-empty finite case,
  so that a hand-written reference is proven differentiable-correct before its autograd is trusted
  as the backward's yardstick (column `fd`: ok / FAIL / - for none).
- with `perf` (vinci matrix's default; not in pytest): at the perf case (the `large=True` case with
  --full, else the largest case) the op runs once inside `dsl.record()` (simulated cycles of every
  kernel it launched, roofline efficiency, bound class), then host time against torch's reference,
  one host thread each, best of `reps` after a warm-up.

An entry that raises anywhere (its cases, its reference, its forward, backward or timing) fails its
row with the exception's text; the run goes on.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from op_library.registry import LOAD_ERRORS, REGISTRY, Case, OpSpec, get, tolerance

DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
               "int64": torch.int64, "int32": torch.int32, "int8": torch.int8, "bool": torch.bool}
_SHORT = {v: k for k, v in DTYPE_NAMES.items()}

# the pipe that bounds a kernel (simulator.timing.Profile.bound_pipe) -> what bounds it
BOUND_CLASS = {"M": "cube", "V": "vector", "S": "scalar",
               "MTE1": "memory", "MTE2": "memory", "MTE3": "memory", "FIX": "memory"}

FD_FULL_LIMIT = 600   # gradcheck element by element up to this many input elements, fast_mode above


def dtype_name(dt: torch.dtype) -> str:
    return _SHORT.get(dt, str(dt).removeprefix("torch."))


@dataclass
class Result:
    """One (op, dtype) row. abs/rel errors are the worst over all cases (forward / backward);
    cycles, efficiency, bound and host ratio are at `perf_case` (None when not measured)."""
    op: str
    dtype: str
    cases: int = 0
    passed: int = 0
    fwd_abs: float = 0.0
    fwd_rel: float = 0.0
    bwd_abs: float | None = None   # None: the op has no backward (at this dtype)
    bwd_rel: float | None = None
    fd: str = "-"                  # the f64 gradcheck of the reference: "ok", "FAIL", "-" (not run here)
    perf_case: str = ""            # label of the case measured ("" = none)
    perf_large: bool = False       # it is the entry's large=True case
    cycles: int | None = None      # simulated cycles of every kernel the op launched
    efficiency: float | None = None  # roofline bound / cycles over those kernels
    bound: str | None = None       # memory / cube / vector / scalar: the pipe class with most bound cycles
    kernels: list[str] = field(default_factory=list)
    host_s: float | None = None    # best host time of the op, one thread
    torch_s: float | None = None   # best host time of torch's reference, one thread
    seconds: float = 0.0           # wall time of the whole row (checks, compiles, measuring)
    failures: list[str] = field(default_factory=list)   # "case I (label): what"
    repro: list[str] = field(default_factory=list)      # one command per failure

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def host_ratio(self) -> float | None:
        return self.host_s / self.torch_s if self.host_s is not None and self.torch_s else None


def _outputs(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _compare(got: Any, want: Any, rtol: float, atol: float) -> tuple[bool, float, float]:
    """(close, worst abs error, worst rel error): floating outputs within atol + rtol*|want| with
    NaN where torch has NaN and the same infinities; integer and bool outputs exactly; shapes and
    dtypes must match."""
    if got is None or want is None:
        return got is None and want is None, 0.0, 0.0
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
        return False, float("inf"), float("inf")
    if not want.is_floating_point():
        if want.dtype == torch.bool:
            worst = float((got != want).sum()) and 1.0
        else:
            diff = (got.to(torch.int64) - want.to(torch.int64)).abs()
            worst = float(diff.max()) if diff.numel() else 0.0
        return worst == 0, worst, worst
    g, w = got.double(), want.double()
    nan_ok = bool(torch.equal(g.isnan(), w.isnan()))
    same = g == w   # exact (and inf == inf of the same sign)
    inf = (g.isinf() | w.isinf()) & ~same   # an inf where torch has a finite value or the other inf
    rest = ~(g.isnan() | w.isnan() | same | inf)
    if bool(inf.any()):
        return False, float("inf"), float("inf")
    diff, wa = (g - w).abs()[rest], w.abs()[rest]
    if diff.numel() == 0:
        return nan_ok, 0.0, 0.0
    close = bool((diff <= atol + rtol * wa).all())
    big = wa > atol
    rel = float((diff[big] / wa[big]).max()) if bool(big.any()) else 0.0
    return nan_ok and close, float(diff.max()), rel


def _mismatch(got: Any, want: Any) -> str:
    """Why _compare failed before looking at values ("" when shapes and dtypes agree)."""
    if got is None or want is None:
        return f"{'None' if got is None else 'a tensor'} where torch gives {'None' if want is None else 'a tensor'}"
    if not isinstance(got, torch.Tensor):
        return f"a {type(got).__name__} where torch gives a tensor"
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)} where torch gives {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {dtype_name(got.dtype)} where torch gives {dtype_name(want.dtype)}"
    return ""


def _f32(a: Any, grad: bool = False) -> Any:
    """The reference's copy of an argument: floating tensors as float32 (always a copy, so a
    reference that works in place cannot touch the op's inputs), other values as they are."""
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return a.detach().to(torch.float32, copy=True).requires_grad_(grad)
    return a


def _meta(a: Any) -> Any:
    return a.detach().to("meta") if isinstance(a, torch.Tensor) else a


def _torch_dtypes(spec: OpSpec, case: Case, n: int) -> list[torch.dtype | None] | None:
    """The dtypes of torch's outputs for the case's own inputs (the reference run on meta tensors);
    None when the reference cannot run on meta (data-dependent shapes, .item(), ...)."""
    try:
        with torch.no_grad():
            outs = _outputs(spec.ref(*map(_meta, case.args), **{k: _meta(v) for k, v in case.kwargs.items()}))
    except Exception:
        return None
    if len(outs) != n:
        return None
    return [o.dtype if isinstance(o, torch.Tensor) else None for o in outs]


def _rounded(w: Any, dt: torch.dtype | None, got: Any) -> Any:
    """The reference output as torch would return it: in torch's dtype `dt` (from meta); without
    it (the reference cannot run on meta), a floating result in the floating dtype the op returned."""
    if not isinstance(w, torch.Tensor):
        return w
    w = w.detach()
    if dt is not None:
        return w.to(dt)
    if w.is_floating_point() and isinstance(got, torch.Tensor) and got.is_floating_point():
        return w.to(got.dtype)
    return w


def _raised(e: BaseException) -> str:
    """One line for an exception: its type and first line, and where in the op library it came from."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    where = ""
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        if "op_library" in fr.filename and not fr.filename.endswith("matrix.py"):
            where = f" at {fr.filename.split('op_library', 1)[1].lstrip('/')}:{fr.lineno}"
            break
    return f"{type(e).__name__}: {text}{where}"


def _has_bwd(spec: OpSpec, dtype: torch.dtype) -> bool:
    return spec.backward is not None and dtype.is_floating_point and (spec.bwd_dtypes is None or dtype in spec.bwd_dtypes)


def _check(labels: Sequence[str], got: Sequence[Any], want: Sequence[Any], alt: Callable[[], Sequence[Any] | None],
           spec: OpSpec, case: Case, dtype: torch.dtype) -> tuple[bool, float, float, list[str]]:
    """Compare outputs (or gradients) one by one against the float32 reference `want`; one that
    misses is compared against `alt()` (torch's own result at the case's dtype, None when there is
    none) and passes if close to that. Returns (ok, worst abs, worst rel, failure texts)."""
    ok, fa, fr, whats = True, 0.0, 0.0, []
    alts: Sequence[Any] | None = None
    tried = False
    for j, (g, w) in enumerate(zip(got, want, strict=True)):
        if w is not None and not isinstance(w, torch.Tensor):
            continue   # a non-tensor output (a seed, a count): not compared
        rtol, atol = tolerance(spec, w.dtype if w is not None and w.is_floating_point() else dtype, case.k)
        c, a, r = _compare(g, w, rtol, atol)
        if not c and w is not None and w.is_floating_point() and w.dtype != torch.float32 and not _mismatch(g, w):
            if not tried:
                alts, tried = alt(), True
            if alts is not None and isinstance(alts[j], torch.Tensor) and alts[j].dtype == w.dtype:
                c2, a2, r2 = _compare(g, alts[j], rtol, atol)
                if c2:
                    c, a, r = c2, a2, r2
        ok, fa, fr = ok and c, max(fa, a), max(fr, r)
        if not c:
            why = _mismatch(g, w) or f"worst abs {a:.3g} rel {r:.3g} (rtol {rtol:.3g}, atol {atol:.3g})"
            if not _mismatch(g, w) and w is not None and w.is_floating_point() \
                    and not torch.equal(g.isnan(), w.isnan()):
                why += ", NaN where torch has none or none where torch has NaN"
            whats.append(f"{labels[j]}: {why}")
    return ok, fa, fr, whats


def _native(spec: OpSpec, case: Case, grads: Sequence[torch.Tensor] | None = None) -> list[Any] | None:
    """torch's own result for the case's tensors at their dtypes (forward outputs, or with `grads`
    the gradients of grad_args, one per index); None if torch cannot run it at that dtype."""
    try:
        args = [a.detach().clone().requires_grad_(grads is not None and i in spec.grad_args
                                                  and a.is_floating_point())
                if isinstance(a, torch.Tensor) else a for i, a in enumerate(case.args)]
        with torch.set_grad_enabled(grads is not None):
            outs = _outputs(spec.ref(*args, **case.kwargs))
        if grads is None:
            return [o.detach() if isinstance(o, torch.Tensor) else o for o in outs]
        inputs = [args[i] for i in spec.grad_args if isinstance(args[i], torch.Tensor)]
        got = iter(torch.autograd.grad([outs[j] for j in spec.grad_outputs], inputs, list(grads), allow_unused=True))
        res = [next(got) if isinstance(args[i], torch.Tensor) else None for i in spec.grad_args]
        return [torch.zeros_like(args[i]) if r is None and args[i] is not None else r
                for r, i in zip(res, spec.grad_args, strict=True)]
    except Exception:
        return None


def run_case(spec: OpSpec, dtype: torch.dtype, case: Case, cores: int | None = None) -> dict[str, Any]:
    """Forward (and backward) of one case against the float32 reference (or, at float16 / bfloat16,
    torch's own result at that dtype where the op matches that instead): returns
    {"ok", "fwd": (abs, rel), "bwd": (abs, rel) or None, "what": failure text}."""
    kwargs = dict(case.kwargs, **({"cores": cores} if cores and spec.takes_cores else {}))
    want_grad = _has_bwd(spec, dtype)
    inf = (float("inf"), float("inf"))
    try:
        ref_args = [_f32(a, want_grad and i in spec.grad_args) for i, a in enumerate(case.args)]
        ref_out = _outputs(spec.ref(*ref_args, **{k: _f32(v) for k, v in case.kwargs.items()}))
        dts = _torch_dtypes(spec, case, len(ref_out))
    except Exception as e:
        return {"ok": False, "fwd": inf, "bwd": None, "what": f"the reference raised {_raised(e)}"}
    try:
        got = _outputs(spec.fn(*case.args, **kwargs))
    except Exception as e:  # an op that raises fails its case, the matrix goes on
        return {"ok": False, "fwd": inf, "bwd": None, "what": f"forward raised {_raised(e)}"}
    if len(got) != len(ref_out):
        return {"ok": False, "fwd": inf, "bwd": None,
                "what": f"forward returned {len(got)} outputs, torch {len(ref_out)}"}
    want_out = [_rounded(w, None if dts is None else dts[j], g)
                for j, (w, g) in enumerate(zip(ref_out, got, strict=True))]
    labels = ["forward"] if len(got) == 1 else [f"forward output {j}" for j in range(len(got))]
    ok, fa, fr, whats = _check(labels, got, want_out, lambda: _native(spec, case), spec, case, dtype)
    what = "; ".join(whats)
    if not want_grad or spec.backward is None:  # (the second test narrows the type for mypy)
        return {"ok": ok, "fwd": (fa, fr), "bwd": None, "what": what}
    try:
        outs_dt = [want_out[j].dtype for j in spec.grad_outputs]
        grads = [torch.randn(ref_out[j].shape).to(d) for j, d in zip(spec.grad_outputs, outs_dt, strict=True)]
        inputs = [ref_args[i] for i in spec.grad_args if ref_args[i] is not None]
        ref_grads = iter(torch.autograd.grad([ref_out[j] for j in spec.grad_outputs], inputs,
                                             [g.float() for g in grads], allow_unused=True))
        want = [None if ref_args[i] is None else next(ref_grads) for i in spec.grad_args]
        want = [torch.zeros_like(ref_args[i]) if w is None and ref_args[i] is not None else w
                for w, i in zip(want, spec.grad_args, strict=True)]
        want = [None if w is None else w.to(case.args[i].dtype) for w, i in zip(want, spec.grad_args, strict=True)]
    except Exception as e:
        return {"ok": False, "fwd": (fa, fr), "bwd": inf, "what": f"autograd of the reference raised {_raised(e)}"}
    grad = grads[0] if len(grads) == 1 else tuple(grads)
    try:
        have = list(spec.backward(grad, got if len(got) > 1 else got[0], case.args, case.kwargs))
    except Exception as e:
        bad = f"backward raised {_raised(e)}"
        return {"ok": False, "fwd": (fa, fr), "bwd": inf, "what": f"{what}; {bad}" if what else bad}
    if len(have) != len(want):
        bad = f"backward returned {len(have)} gradients for grad_args {spec.grad_args}"
        return {"ok": False, "fwd": (fa, fr), "bwd": inf, "what": f"{what}; {bad}" if what else bad}
    bok, ba, br, bwhats = _check([f"backward grad of arg {i}" for i in spec.grad_args], have, want,
                                 lambda: _native(spec, case, grads), spec, case, dtype)
    if not bok:
        what = "; ".join([what] + bwhats if what else bwhats)
    return {"ok": ok and bok, "fwd": (fa, fr), "bwd": (ba, br), "what": what}


# the f64 finite-difference check of the reference ------------------------------------------------

def _finite_and_full(spec: OpSpec, case: Case) -> bool:
    for i, a in enumerate(case.args):
        if isinstance(a, torch.Tensor):
            if i in spec.grad_args and a.numel() == 0:
                return False
            if a.is_floating_point() and not bool(a.isfinite().all()):
                return False
    return any(isinstance(case.args[i], torch.Tensor) for i in spec.grad_args if i < len(case.args))


def _numel(case: Case) -> int:
    vals = [*case.args, *case.kwargs.values()]
    return sum(a.numel() for a in vals if isinstance(a, torch.Tensor))


def fd_case(spec: OpSpec, cases: Sequence[Case]) -> int | None:
    """Index of the case the f64 gradcheck runs on: the smallest with no empty gradient input and
    finite floating inputs (None if there is none)."""
    ok = [i for i, c in enumerate(cases) if _finite_and_full(spec, c)]
    return min(ok, key=lambda i: _numel(cases[i])) if ok else None


def fd_check(spec: OpSpec, case: Case) -> str:
    """torch.autograd.gradcheck of spec.ref in float64 on the case; "" when it passes, else why."""
    def up(a: Any, grad: bool) -> Any:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return a.detach().to(torch.float64, copy=True).requires_grad_(grad)
        return a

    args = [up(a, i in spec.grad_args) for i, a in enumerate(case.args)]
    kwargs = {k: up(v, False) for k, v in case.kwargs.items()}
    idx = [i for i in spec.grad_args if isinstance(args[i], torch.Tensor) and args[i].is_floating_point()]

    def f(*xs: torch.Tensor) -> tuple[Any, ...]:
        a = list(args)
        for i, x in zip(idx, xs, strict=True):
            a[i] = x
        outs = _outputs(spec.ref(*a, **kwargs))
        return tuple(outs[j] for j in spec.grad_outputs)

    xs = tuple(args[i] for i in idx)
    try:
        torch.autograd.gradcheck(f, xs, fast_mode=sum(x.numel() for x in xs) > FD_FULL_LIMIT)
    except Exception as e:
        return f"gradcheck of the reference in float64: {_raised(e)}"
    return ""


# performance at one case -------------------------------------------------------------------------

def perf_case(cases: Sequence[Case], quick: bool) -> int | None:
    """The case measured: the first large=True one (--full), else the largest by input elements."""
    if not cases:
        return None
    if not quick:
        large = [i for i, c in enumerate(cases) if c.large]
        if large:
            return large[0]
    return max(range(len(cases)), key=lambda i: _numel(cases[i]))


def best_of_both(fa: Callable[[], Any], fb: Callable[[], Any], reps: int) -> tuple[float, float]:
    """Best-of-N wall time of two functions timed in turn (a, b, a, b, ...) after one warm-up call
    of each (which compiles): on a shared machine both see the same moments of contention."""
    fa()
    fb()
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(reps):
        for fn, ts in ((fa, ta), (fb, tb)):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    return min(ta), min(tb)


def bound_class(rec: Any) -> str:
    """What bounds a recording: the class (BOUND_CLASS) of the pipe with most roofline cycles,
    each kernel's bound cycles counted for the pipe that bounds it."""
    by: dict[str, int] = {}
    for _, run in rec.runs:
        cls = BOUND_CLASS.get(run.profile.bound_pipe, run.profile.bound_pipe)
        by[cls] = by.get(cls, 0) + run.bound
    return max(by, key=lambda k: by[k]) if by else "-"


def _contiguous(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.contiguous()
    if isinstance(out, (tuple, list)):
        return [_contiguous(o) for o in out]
    return out


def _torch_call(spec: OpSpec, case: Case) -> Callable[[], Any]:
    """torch's reference on the case's own tensors (float32 copies if torch has no kernel for the dtype),
    its outputs made contiguous as ours are (torch's transpose / permute return views: timing the view
    alone would compare a copy with no work)."""
    args = [a.detach() if isinstance(a, torch.Tensor) else a for a in case.args]
    kwargs = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in case.kwargs.items()}

    def native() -> Any:
        with torch.no_grad():
            return _contiguous(spec.ref(*args, **kwargs))

    try:
        native()
        return native
    except Exception:
        args32 = [_f32(a) for a in args]
        kw32 = {k: _f32(v) for k, v in kwargs.items()}

        def upcast() -> Any:
            with torch.no_grad():
                return _contiguous(spec.ref(*args32, **kw32))
        return upcast


def measure(spec: OpSpec, case: Case, cores: int | None = None, reps: int = 3) -> dict[str, Any]:
    """Simulated cycles, efficiency, bound class and kernels of one call (dsl.record), then host time
    of the op and of torch's reference, one host thread each (restored after), best of `reps`."""
    import dsl
    from compiler.config import CONFIG

    kwargs = dict(case.kwargs, **({"cores": cores} if cores and spec.takes_cores else {}))
    with dsl.record() as rec:
        spec.fn(*case.args, **kwargs)
    out: dict[str, Any] = {"cycles": rec.cycles, "efficiency": rec.efficiency, "bound": bound_class(rec),
                           "kernels": rec.kernels(), "seconds": rec.seconds}
    threads, torch_threads = CONFIG.threads, torch.get_num_threads()
    CONFIG.threads = 1
    torch.set_num_threads(1)
    try:
        out["host_s"], out["torch_s"] = best_of_both(lambda: spec.fn(*case.args, **kwargs),
                                                     _torch_call(spec, case), reps)
    finally:
        CONFIG.threads = threads
        torch.set_num_threads(torch_threads)
    return out


# the matrix ----------------------------------------------------------------------------------------

def cases_for(spec: OpSpec, dtype: torch.dtype, quick: bool) -> list[Case]:
    """The cases of spec at dtype, the same on every call (seeded from nothing but the order)."""
    torch.manual_seed(0)
    return spec.cases(quick, dtype)


def repro(op: str, dtype: torch.dtype, index: int | None, quick: bool) -> str:
    case = "" if index is None else f" --case {index}"
    return f"vinci matrix --op {op} --dtype {dtype_name(dtype)}{case}{'' if quick else ' --full'}"


def fd_dtype(spec: OpSpec) -> torch.dtype | None:
    """The dtype whose row carries the op's f64 gradcheck: its first floating dtype with a backward."""
    if spec.backward is None or not spec.fd_check:
        return None
    return next((d for d in spec.dtypes if _has_bwd(spec, d)), None)


def _fail(row: Result, what: str, cmd: str) -> None:
    row.failures.append(what)
    row.repro.append(cmd)


def run_row(spec: OpSpec, dt: torch.dtype, quick: bool = True, cores: int | None = None, case: int | None = None,
            progress: Callable[[str], None] | None = None, perf: bool = False, reps: int = 3) -> Result:
    """One (op, dtype) row: every case (or case `case`), the fd check on the op's fd row, and with
    `perf` the measurement at the perf case (not with `case`)."""
    t0 = time.perf_counter()
    row = _run_row(spec, dt, quick, cores, case, progress, perf, reps)
    row.seconds = time.perf_counter() - t0
    return row


def _run_row(spec: OpSpec, dt: torch.dtype, quick: bool, cores: int | None, case: int | None,
             progress: Callable[[str], None] | None, perf: bool, reps: int) -> Result:
    name = spec.name
    has_bwd = _has_bwd(spec, dt)
    row = Result(name, dtype_name(dt), bwd_abs=0.0 if has_bwd else None, bwd_rel=0.0 if has_bwd else None)
    try:
        cs = cases_for(spec, dt, quick)
    except Exception as e:
        _fail(row, f"cases({quick}, {dtype_name(dt)}) raised {_raised(e)}", repro(name, dt, None, quick))
        if progress is not None:
            progress(f"{name} {dtype_name(dt)}")
        return row
    if not cs and case is None:
        _fail(row, "the entry has no cases at this dtype", repro(name, dt, None, quick))
    for i, c in enumerate(cs):
        if case is not None and i != case:
            continue
        r = run_case(spec, dt, c, cores)
        row.cases += 1
        row.passed += bool(r["ok"])
        row.fwd_abs, row.fwd_rel = max(row.fwd_abs, r["fwd"][0]), max(row.fwd_rel, r["fwd"][1])
        if r["bwd"] is not None and row.bwd_abs is not None and row.bwd_rel is not None:
            row.bwd_abs, row.bwd_rel = max(row.bwd_abs, r["bwd"][0]), max(row.bwd_rel, r["bwd"][1])
        if not r["ok"]:
            _fail(row, f"case {i} ({c.label}): {r['what']}", repro(name, dt, i, quick))
        if progress is not None:
            progress(f"{name} {dtype_name(dt)} {i}")
    if fd_dtype(spec) == dt:
        fi = fd_case(spec, cs)
        if fi is None:
            row.fd = "FAIL"
            _fail(row, "fd check: no case with non-empty finite gradient inputs", repro(name, dt, None, quick))
        elif case is None or case == fi:
            why = fd_check(spec, cs[fi])
            row.fd = "FAIL" if why else "ok"
            if why:
                _fail(row, f"case {fi} ({cs[fi].label}): {why}", repro(name, dt, fi, quick))
    pi = perf_case(cs, quick)
    if perf and case is None and pi is not None and not any(f.startswith(f"case {pi} ") for f in row.failures):
        c = cs[pi]
        row.perf_case, row.perf_large = c.label, c.large
        try:
            m = measure(spec, c, cores, reps)
        except Exception as e:
            _fail(row, f"case {pi} ({c.label}): measuring raised {_raised(e)}", repro(name, dt, pi, quick))
        else:
            row.cycles, row.efficiency, row.bound, row.kernels = m["cycles"], m["efficiency"], m["bound"], m["kernels"]
            row.host_s, row.torch_s = m["host_s"], m["torch_s"]
    return row


def _selected(ops: Sequence[str] | None, want: Sequence[torch.dtype] | None) -> list[tuple[OpSpec, torch.dtype]]:
    return [(get(name), dt) for name in (ops or sorted(REGISTRY)) for dt in get(name).dtypes
            if want is None or dt in want]


def _dtypes(dtypes: Sequence[torch.dtype | str] | None) -> list[torch.dtype] | None:
    return None if dtypes is None else [DTYPE_NAMES[d] if isinstance(d, str) else d for d in dtypes]


def run(ops: Sequence[str] | None = None, dtypes: Sequence[torch.dtype | str] | None = None, quick: bool = True,
        cores: int | None = None, case: int | None = None, progress: Callable[[str], None] | None = None,
        perf: bool = False, reps: int = 3) -> list[Result]:
    """Run the matrix (all ops / all their dtypes by default; `case` picks one case index).
    `progress`, if given, is called once per case; `perf` measures each row at its perf case."""
    return [run_row(spec, dt, quick, cores, case, progress, perf, reps)
            for spec, dt in _selected(ops, _dtypes(dtypes))]


def count(ops: Sequence[str] | None, dtypes: Sequence[torch.dtype] | None, quick: bool, case: int | None) -> int:
    """How many times run() calls `progress`."""
    n = 0
    for spec, dt in _selected(ops, dtypes):
        try:
            k = len(cases_for(spec, dt, quick))
        except Exception:
            n += 1
            continue
        n += k if case is None else int(case < k)
    return n


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.3g}ms" if s >= 1e-3 else f"{s * 1e6:.3g}us"


def table(results: Sequence[Result], perf: bool = False, quick: bool = True) -> str:
    def e(v: float | None) -> str:
        return "-" if v is None else f"{v:.2e}"

    head = ["op", "dtype", "cases", "passed", "fwd abs", "fwd rel", "bwd abs", "bwd rel", "fd"]
    if perf:
        head += ["cycles", "eff", "bound", "host", "torch", "host/torch"]
    rows = [head]
    for r in results:
        row = [r.op, r.dtype, str(r.cases), str(r.passed), e(r.fwd_abs), e(r.fwd_rel), e(r.bwd_abs), e(r.bwd_rel), r.fd]
        if perf:
            mark = "" if quick or r.perf_large or r.cycles is None else "*"
            ratio = r.host_ratio
            row += ["-" if r.cycles is None else f"{r.cycles}{mark}",
                    "-" if r.efficiency is None else f"{r.efficiency:.0%}", r.bound or "-", _fmt_time(r.host_s),
                    _fmt_time(r.torch_s), "-" if ratio is None else f"{ratio:.2f}"]
        rows.append(row + ["ok" if r.ok else "FAIL"])
    head.append("")
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def header(quick: bool, perf: bool, cores: int | None) -> str:
    lines = ["vinci matrix: forward against torch's reference (float32, rounded to torch's output dtype), "
             "backward against its autograd; fd = float64 gradcheck of the reference"]
    if perf:
        at = ("the largest quick case (quick mode: --full measures each op's large case)" if quick else
              "each op's large case ('*': the op has no large case, its largest case)")
        lines.append(f"cycles (simulated, every kernel the op launched{f', cores={cores}' if cores else ''}), "
                     f"eff (roofline bound / cycles), bound class and host time against torch (one host thread "
                     f"each, best of a few) at {at}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", action="append", metavar="NAME", help=f"op to run (repeatable; default all: "
                   f"{', '.join(sorted(REGISTRY))})")
    p.add_argument("--dtype", action="append", choices=list(DTYPE_NAMES), help="dtype (repeatable; default all)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="quick", action="store_true", default=True, help="the quick cases (default)")
    g.add_argument("--full", dest="quick", action="store_false", help="every case, including the large one")
    p.add_argument("--json", metavar="OUT", default=None, help="also write the rows as JSON")
    p.add_argument("--cores", type=int, default=None, help="block_dim for ops that take one")
    p.add_argument("--case", type=int, default=None, metavar="I", help="run only case I of each (op, dtype)")
    p.add_argument("--no-perf", dest="perf", action="store_false", default=True,
                   help="skip the cycles / efficiency / host-time columns")
    p.add_argument("--reps", type=int, default=3, help="timing: best of this many runs (default 3)")


def main(argv: Sequence[str] | None = None, ns: argparse.Namespace | None = None) -> int:
    """`vinci matrix`: progress bar, table, repro lines; 1 if any case failed (or an entry failed to load)."""
    from tqdm import tqdm

    if ns is None:
        p = argparse.ArgumentParser(prog="vinci matrix", description="op x dtype x case against torch")
        add_arguments(p)
        ns = p.parse_args(argv)
    for name in ns.op or []:
        if name not in REGISTRY:
            print(f"vinci matrix: no op {name!r} (ops: {', '.join(sorted(REGISTRY))})", file=sys.stderr)
            return 2
    dtypes = _dtypes(ns.dtype)
    perf = ns.perf and ns.case is None
    with tqdm(total=count(ns.op, dtypes, ns.quick, ns.case), desc="matrix", unit="case", file=sys.stderr) as bar:
        def step(what: str) -> None:
            bar.set_postfix_str(what)
            bar.update()

        results = run(ns.op, dtypes, ns.quick, ns.cores, ns.case, progress=step, perf=perf, reps=ns.reps)
    print(header(ns.quick, perf, ns.cores))
    print(table(results, perf, ns.quick))
    for where, err in LOAD_ERRORS.items():
        print(f"FAIL loading {where}: {err}")
    failed = [r for r in results if not r.ok]
    for r in failed:
        for f, cmd in zip(r.failures, r.repro, strict=True):
            print(f"FAIL {r.op} {r.dtype} {f}\n  repeat: {cmd}")
    n_cases, n_passed = sum(r.cases for r in results), sum(r.passed for r in results)
    print(f"{len(results) - len(failed)} of {len(results)} rows ok, {n_passed} of {n_cases} cases passed")
    if ns.json:
        with open(ns.json, "w") as fh:
            json.dump({"quick": ns.quick, "load_errors": dict(LOAD_ERRORS),
                       "rows": [_jsonable(asdict(r) | {"ok": r.ok, "host_ratio": r.host_ratio}) for r in results]},
                      fh, indent=1)
    return 1 if failed or LOAD_ERRORS else 0


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    """inf / nan as strings (JSON has neither)."""
    return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


if __name__ == "__main__":
    sys.exit(main())
