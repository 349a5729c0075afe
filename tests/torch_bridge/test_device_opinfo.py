"""PyTorch's own OpInfo samples (`op_db`, float32) on the npu device, against torch's CPU results.

Generator (`python tests/torch_bridge/test_device_opinfo.py`; `... --only KEY,KEY` re-runs some
OpInfos and keeps the JSON's other records): for every OpInfo of op_db that takes float32, every
float32 sample (`op.sample_inputs("cpu", torch.float32)`, seeded) runs on CPU and again with its
tensors moved to npu (same storage layout: views stay views) inside `dsl.record(timed=True)`, which
lists the op library's DSL kernels launched, while the CPU fallback's counter
(`torch_bridge.device.fallback.FALLBACKS`) says which aten ops fell back. Results are compared with
`torch.testing.assert_close` (the OpInfo's own float32 tolerance overrides where it has them, else
float32's defaults; equal_nan=True; exact dtype; npu results must be npu tensors; see check() for
ill-conditioned samples). Each OpInfo is classified into test_device_opinfo.json:

- covered: every sample runs without fallback, some launch DSL kernels, all match CPU;
- partial: some samples fall back; every sample matches (those without fallback are listed);
- failing: a sample CPU runs raises on npu or does not match (a bug; listed with the error);
- excluded: random (named below, or two unseeded CPU runs with different seeds differ; such samples
  are left out, the OpInfo only when all are), uninitialised memory, sparse layouts;
- unreached: no sample launches a DSL kernel (all fall back, or views / factories / copies only),
  or no sample can run on npu (CPU rejects them all, or factories without device=).

Workers (WORKERS subprocesses) write which OpInfo they start before running it: a worker that dies
(a segfault; faulthandler's stack is kept) marks that OpInfo "crashed", and a new worker carries on.

pytest re-runs the covered and partial OpInfos: at most MAX_SAMPLES of the samples the generator
ran without fallback (the first ones in sample order, to keep the run near a minute with -n 2),
which must match CPU and must not fall back. Other tests: the JSON lists op_db's float32 OpInfos and
the npu kernel table it was made with; nothing fails but KNOWN_FAILING and nothing crashed.
"""
from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

import dsl
import torch_bridge
from torch_bridge.device import fallback as _fallback
from torch_bridge.device.aten import KERNELS, PLAIN

JSON = Path(__file__).with_suffix(".json")
MAX_SAMPLES = 6            # samples per OpInfo re-run by pytest (the generator runs all of them)
F64_FACTOR = 8             # see check()
SAMPLE_TIMEOUT = 120       # seconds a sample may take in the generator
WORKERS = 2
NPU = torch.device("npu")

#: OpInfos whose results are not determined by their inputs (name prefix -> reason)
NONDETERMINISTIC = {
    "bernoulli": "random draws", "multinomial": "random draws", "normal": "random draws",
    "rand": "random draws", "randn": "random draws", "randint": "random draws", "randperm": "random draws",
    "uniform": "random draws", "cauchy": "random draws", "exponential": "random draws",
    "geometric": "random draws", "log_normal": "random draws", "nn.functional.dropout": "random draws",
    "nn.functional.alpha_dropout": "random draws", "nn.functional.feature_alpha_dropout": "random draws",
    "nn.functional.dropout2d": "random draws", "nn.functional.dropout3d": "random draws",
    "nn.functional.rrelu": "random draws", "nn.functional.fractional_max_pool2d": "random draws",
    "nn.functional.fractional_max_pool3d": "random draws", "nn.functional.gumbel_softmax": "random draws",
    "empty": "uninitialised memory", "empty_like": "uninitialised memory", "new_empty": "uninitialised memory",
    "new_empty_strided": "uninitialised memory", "empty_strided": "uninitialised memory",
    "empty_permuted": "uninitialised memory", "torch.empty": "uninitialised memory",
}


#: OpInfos whose extra tensor arguments torch requires on the CPU: only their input moves to npu
KEEP_ON_CPU = {"tensor_split": "tensor_indices_or_sections must be a CPU tensor"}


#: OpInfos that fail for a reason outside the npu kernels (reported; test_no_opinfo_fails_or_crashes)
KNOWN_FAILING: dict[str, str] = {}


def key(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def f32_ops() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db
    return [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]


def kernel_names() -> list[str]:
    """aten ops with an npu compute kernel (views, factories and copies are PLAIN: no device work)."""
    return sorted(n for n in KERNELS if n not in PLAIN)


def nondeterministic(op: Any) -> str | None:
    name = op.name
    for prefix, why in NONDETERMINISTIC.items():
        if name == prefix or name.startswith(prefix + "_") or name == f"{prefix}_like":
            return why
    return None


def tolerance(op: Any) -> dict[str, float]:
    """The OpInfo's own float32 tolerance (its toleranceOverride / precisionOverride decorators), the
    largest of them; assert_close needs both, so an atol alone keeps float32's default rtol."""
    rtol = atol = 0.0
    for info in getattr(op, "decorators", ()) or ():
        for dec in getattr(info, "decorators", ()) or ():
            tol = getattr(dec, "d", {}).get(torch.float32) if isinstance(getattr(dec, "d", None), dict) else None
            if isinstance(tol, float):          # precisionOverride: an atol
                atol = max(atol, tol)
            elif tol is not None:               # toleranceOverride: tol(atol, rtol)
                rtol, atol = max(rtol, tol.rtol), max(atol, tol.atol)
    return {"rtol": rtol or 1.3e-6, "atol": atol or 1e-5} if rtol or atol else {}


def samples(op: Any) -> list[Any]:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(op.sample_inputs("cpu", torch.float32, requires_grad=False))


def to_npu(x: Any, memo: dict[int, torch.Tensor] | None = None) -> Any:
    """A sample's tensors on npu with their storage, sizes, strides and offset (a view of a larger
    storage stays one, tensors sharing a storage share one on npu); a CPU device becomes npu."""
    memo = {} if memo is None else memo
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            return x.to(NPU)
        st = x.untyped_storage()
        flat = memo.get(st.data_ptr()) if st.nbytes() else None
        if flat is None or flat.dtype != x.dtype:
            flat = torch.empty(0, dtype=x.dtype).set_(st, 0, (st.nbytes() // x.element_size(),), (1,)).to(NPU)
            memo[st.data_ptr()] = flat
        return flat.as_strided(x.shape, x.stride(), x.storage_offset())
    if (isinstance(x, torch.device) and x.type == "cpu") or x == "cpu":   # `to`'s samples: .to("cpu", ...)
        return NPU
    if isinstance(x, (list, tuple)):
        vals = [to_npu(v, memo) for v in x]
        return type(x)(*vals) if hasattr(x, "_fields") else type(x)(vals)
    if isinstance(x, dict):
        return {k: (NPU if k == "device" and v in ("cpu", torch.device("cpu")) else to_npu(v, memo))
                for k, v in x.items()}
    return x


def moved(op: Any, s: Any) -> tuple[Any, Any, Any]:
    """(input, args, kwargs) of sample `s` for the npu run (KEEP_ON_CPU ops: only the input moves)."""
    memo: dict[int, torch.Tensor] = {}
    if getattr(op, "name", None) in KEEP_ON_CPU:
        return to_npu(s.input, memo), s.args, s.kwargs
    return to_npu(s.input, memo), to_npu(s.args, memo), to_npu(s.kwargs, memo)


def on_npu(x: Any) -> bool:
    """Whether a moved sample puts anything on npu (a factory sample without device= stays on the CPU)."""
    if isinstance(x, (torch.Tensor, torch.device)):
        return x.type == "npu" if isinstance(x, torch.device) else x.device.type == "npu"
    if isinstance(x, (list, tuple)):
        return any(on_npu(v) for v in x)
    if isinstance(x, dict):
        return any(on_npu(v) for v in x.values())
    return False


def has_sparse(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return x.layout != torch.strided
    if isinstance(x, (list, tuple)):
        return any(has_sparse(v) for v in x)
    if isinstance(x, dict):
        return any(has_sparse(v) for v in x.values())
    return False


def compare(actual: Any, expected: Any, tol: dict[str, float], where: str = "result") -> None:
    """assert_close over (nested) results; npu results must be npu tensors of the CPU result's dtype."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{where}: {type(actual).__name__}, expected a tensor"
        assert actual.device.type == "npu", f"{where}: on {actual.device}, expected npu"
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype}, expected {expected.dtype}"
        torch.testing.assert_close(actual.cpu(), expected, rtol=tol.get("rtol"), atol=tol.get("atol"), equal_nan=True,
                                   check_stride=False, msg=lambda m: f"{where}: {m}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), f"{where}: {actual!r}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            compare(a, e, tol, f"{where}[{i}]")
    else:
        assert actual == expected or (expected != expected and actual != actual), f"{where}: {actual!r} != {expected!r}"


@contextlib.contextmanager
def unseeded() -> Any:
    """op_db's random ops seed torch before each call (`wrapper_set_seed`): without that, two runs
    with different seeds tell a random sample."""
    from torch.testing._internal import common_methods_invocations as cmi
    saved = cmi.wrapper_set_seed
    cmi.wrapper_set_seed = lambda fn, *a, **kw: fn(*a, **kw)
    try:
        yield
    finally:
        cmi.wrapper_set_seed = saved


def deterministic(op: Any, s: Any) -> bool:
    with unseeded():
        torch.manual_seed(1)
        a = run_cpu(op, s)
        torch.manual_seed(2)
        return same(run_cpu(op, s), a)


def _f64(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.double() if x.dtype == torch.float32 else x
    if isinstance(x, (list, tuple)):
        vals = [_f64(v) for v in x]
        return type(x)(*vals) if hasattr(x, "_fields") else type(x)(vals)
    if isinstance(x, dict):
        return {k: _f64(v) for k, v in x.items()}
    return x


def _errors(actual: Any, expected: Any, ref: Any) -> list[tuple[float, float]]:
    """(npu error, CPU float32 error) against the float64 result, per floating tensor of the result."""
    if isinstance(expected, torch.Tensor):
        if not expected.is_floating_point() or not isinstance(ref, torch.Tensor) or ref.shape != expected.shape:
            return []
        ok = torch.isfinite(ref)
        r = torch.cat([ref[ok], torch.zeros(1, dtype=torch.float64)])

        def err(t: torch.Tensor) -> float:
            return float((torch.cat([t.cpu().double()[ok], torch.zeros(1, dtype=torch.float64)]) - r).abs().max())
        return [(err(actual), err(expected))]
    if isinstance(expected, (list, tuple)) and isinstance(ref, (list, tuple)):
        return [e for a, x, r in zip(actual, expected, ref, strict=False) for e in _errors(a, x, r)]
    return []


def check(op: Any, s: Any, actual: Any, expected: Any, tol: dict[str, float], where: str = "result") -> bool:
    """compare(); a float result that misses CPU's tolerance still matches when its error against the
    sample run in float64 on the CPU is at most F64_FACTOR times CPU float32's own error (an
    ill-conditioned sample: large values through softmax / long sums). Returns whether that rule was used."""
    try:
        compare(actual, expected, tol, where)
        return False
    except AssertionError:
        try:
            ref = op(_f64(s.input), *_f64(s.args), **_f64(s.kwargs))
        except Exception:     # noqa: BLE001 - no float64 run: the tolerance failure stands
            ref = None
        errs = _errors(actual, expected, ref) if ref is not None else []
        if not errs or any(e_npu > F64_FACTOR * max(e_cpu, 1e-30) for e_npu, e_cpu in errs):
            raise
        compare(actual, expected, {"rtol": 1.0, "atol": float("inf")}, where)   # dtypes, devices, shapes
        return True


def same(a: Any, b: Any) -> bool:
    """Two CPU results equal (NaNs equal): a sample that gives two answers is non-deterministic."""
    try:
        compare_cpu(a, b)
        return True
    except AssertionError:
        return False


def compare_cpu(a: Any, b: Any) -> None:
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor)
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)
    elif isinstance(b, (list, tuple)):
        assert isinstance(a, (list, tuple)) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            compare_cpu(x, y)


def run_npu(op: Any, s: Any) -> tuple[Any, list[str], set[str]]:
    """(result, DSL kernels launched, aten ops that fell back) of sample `s` on npu."""
    inp, args, kwargs = moved(op, s)
    before = dict(_fallback.FALLBACKS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dsl.record(timed=True) as launches:
            out = op(inp, *args, **kwargs)
    fell = {n.removeprefix("aten::") for n, c in _fallback.FALLBACKS.items() if c != before.get(n, 0)}
    return out, launches.kernels(), fell


def run_cpu(op: Any, s: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return op(s.input, *s.args, **s.kwargs)


# ------------------------------------------------------------------ generator
class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout(f"sample took over {SAMPLE_TIMEOUT} s")


def check_op(op: Any) -> dict[str, Any]:
    """One OpInfo's record: class, reason, sample counts, the samples that ran on kernels only."""
    why = nondeterministic(op)
    if why:
        return {"class": "excluded", "reason": why}
    tol = tolerance(op)
    rec: dict[str, Any] = {"samples": 0, "cpu_errors": 0, "matched": 0, "kernel_only": [], "fell_back": [], "launched": [],
                           "f64_matched": [],
                           "kernels": set(), "fallbacks": set(), "failures": [], "tol": tol}
    try:
        ss = samples(op)
    except Exception as e:    # noqa: BLE001 - an OpInfo whose sample generator fails on CPU
        return {"class": "unreached", "reason": f"sample_inputs raised {type(e).__name__}: {e}"[:300]}
    nondet = sparse = 0
    for i, s in enumerate(ss):
        try:
            expected = run_cpu(op, s)
        except Exception:     # noqa: BLE001 - torch rejects the sample on CPU: nothing to compare
            rec["cpu_errors"] += 1
            continue
        if not on_npu(moved(op, s)):
            rec["host_only"] = rec.get("host_only", 0) + 1
            continue
        if has_sparse((s.input, s.args, s.kwargs, expected)):
            sparse += 1
            continue
        if not deterministic(op, s):
            nondet += 1
            continue
        rec["samples"] += 1
        signal.alarm(SAMPLE_TIMEOUT)
        try:
            actual, kern, fell = run_npu(op, s)
            if check(op, s, actual, expected, tol):
                rec["f64_matched"].append(i)
        except (Exception, _Timeout) as e:   # noqa: BLE001 - recorded as a failure of this sample
            rec["failures"].append(f"sample {i}: {type(e).__name__}: {e}"[:600])
            continue
        finally:
            signal.alarm(0)
        rec["matched"] += 1
        rec["kernels"] |= set(kern)
        rec["fallbacks"] |= fell
        (rec["fell_back"] if fell else rec["kernel_only"]).append(i)
        if kern:
            rec["launched"].append(i)
    rec["kernels"], rec["fallbacks"] = sorted(rec["kernels"]), sorted(rec["fallbacks"])
    if nondet:
        rec["nondeterministic_samples"] = nondet
    if sparse:
        rec["sparse_samples"] = sparse
    if sparse:
        return {"class": "excluded", "reason": "sparse layouts (npu tensors are strided only)", **rec}
    if nondet and not rec["samples"]:
        return {"class": "excluded", "reason": "random: two CPU runs with different seeds differ", **rec}
    if rec["failures"]:
        return {"class": "failing", **rec}
    if not rec["kernels"]:
        reason = ("every sample raises on CPU" if not rec["samples"] else
                  "no sample launches a DSL kernel" + (f" (falls back: {', '.join(rec['fallbacks'])})"
                                                               if rec["fallbacks"] else ""))
        return {"class": "unreached", "reason": reason, **rec}
    if any(i not in rec["launched"] for i in rec["kernel_only"]):
        rec["no_launch"] = [i for i in rec["kernel_only"] if i not in rec["launched"]]
    return {"class": "partial" if rec["fell_back"] else "covered", **rec}


def worker(indices: list[int], out: str) -> None:
    ops = f32_ops()
    with open(out, "a") as f:
        for i in indices:
            op = ops[i]
            f.write(json.dumps({"start": key(op)}) + "\n")
            f.flush()
            t0 = time.perf_counter()
            r = check_op(op)
            f.write(json.dumps({"key": key(op), **r, "seconds": round(time.perf_counter() - t0, 2)}) + "\n")
            f.flush()


def _run_share(indices: list[int], out: str, names: list[str]) -> dict[str, Any]:
    """Run the OpInfos at `indices` in worker processes, a new one after each crash; records by key."""
    results: dict[str, Any] = {}
    while indices:
        p = subprocess.run([sys.executable, __file__, "--worker", ",".join(map(str, indices)), out], check=False,
                           stderr=subprocess.PIPE, text=True)
        started = None
        lines = Path(out).read_text().splitlines() if Path(out).exists() else []
        for line in lines:
            d = json.loads(line)
            if "start" in d:
                started = d["start"]
            else:
                results[d.pop("key")] = d
                started = None
        if p.returncode == 0:
            break
        if started is None:
            raise RuntimeError(f"a worker exited with {p.returncode} between OpInfos:\n{p.stderr[-3000:]}")
        where = [ln.strip() for ln in p.stderr.splitlines() if ln.strip().startswith("File ")][:8]
        results[started] = {"class": "crashed", "reason": f"the worker process died (exit {p.returncode})",
                            "stack": where}
        print(f"CRASH in {started}: exit {p.returncode}\n" + "\n".join(where), flush=True)
        indices = [i for i in indices if names[i] not in results]
    return results


def generate(only: list[str] | None = None) -> None:
    """Write the JSON; with `only` (OpInfo keys), re-run just those and keep the JSON's other records."""
    names = [key(op) for op in f32_ops()]
    todo = [i for i, n in enumerate(names) if only is None or n in only]
    with tempfile.TemporaryDirectory() as tmp:
        shares = [todo[k::WORKERS] for k in range(WORKERS)]    # interleaved: the slow ops spread out
        with ThreadPoolExecutor(WORKERS) as pool:
            parts = list(pool.map(lambda k: _run_share(shares[k], f"{tmp}/w{k}.jsonl", names), range(WORKERS)))
    ops: dict[str, Any] = {} if only is None else dict(_doc()["opinfos"])
    for part in parts:
        ops.update(part)
    summary: dict[str, Any] = {}
    for name in names:
        c = ops[name]["class"]
        summary[c] = summary.get(c, 0) + 1
    good = [r for r in ops.values() if r["class"] in ("covered", "partial")]
    summary["samples_run"] = sum(r.get("samples", 0) for r in ops.values())
    summary["samples_matched_covered_partial"] = sum(r["matched"] for r in good)
    summary["samples_matched_covered"] = sum(r["matched"] for r in good if r["class"] == "covered")
    summary["samples_kernel_only_matched"] = sum(len(r["kernel_only"]) for r in good)
    doc = {"torch": torch.__version__, "summary": summary, "npu_kernels": kernel_names(),
           "opinfos": {name: ops[name] for name in names}}
    JSON.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


# ------------------------------------------------------------------ pytest
def _doc() -> dict[str, Any]:
    return json.loads(JSON.read_text()) if JSON.exists() else {"opinfos": {}, "npu_kernels": []}


DOC = _doc()
RERUN = sorted(k for k, r in DOC["opinfos"].items() if r["class"] in ("covered", "partial"))
_OPS: dict[str, Any] = {}


def _op(name: str) -> Any:
    if not _OPS:
        _OPS.update((key(op), op) for op in f32_ops())
    return _OPS[name]


@pytest.mark.parametrize("name", RERUN)
def test_opinfo_samples_match_cpu_on_npu_kernels(name: str) -> None:
    rec = DOC["opinfos"][name]
    op = _op(name)
    ss = samples(op)
    picked = ([i for i in rec["kernel_only"] if i in rec["launched"]] or rec["kernel_only"]
              or rec["fell_back"])[:MAX_SAMPLES]
    assert picked
    for i in picked:
        s = ss[i]
        expected = run_cpu(op, s)
        actual, kern, fell = run_npu(op, s)
        check(op, s, actual, expected, rec["tol"], f"{name} sample {i}")
        if i in rec["kernel_only"]:
            assert not fell, f"{name} sample {i} fell back: {sorted(fell)}"
        if i in rec["launched"]:
            assert kern, f"{name} sample {i} ran no npu kernel"


def test_json_is_up_to_date() -> None:
    """The JSON lists every float32 OpInfo of op_db, under the npu kernel table it was generated with
    (regenerate with `python tests/torch_bridge/test_device_opinfo.py` after adding a kernel)."""
    assert DOC["opinfos"], f"{JSON.name} is missing: run the generator"
    assert list(DOC["opinfos"]) == [key(op) for op in f32_ops()]
    assert DOC["npu_kernels"] == kernel_names()


def test_no_opinfo_fails_or_crashes() -> None:
    """Every failing OpInfo is a known failure outside the kernels (KNOWN_FAILING, an exact list: a
    fixed one must leave it); none crashed."""
    bad = {k: r.get("failures", r.get("reason")) for k, r in DOC["opinfos"].items()
           if r["class"] == "crashed" or (r["class"] == "failing" and k not in KNOWN_FAILING)}
    assert not bad, bad
    assert {k for k, r in DOC["opinfos"].items() if r["class"] == "failing"} == set(KNOWN_FAILING)


def test_recorder_sees_kernels_and_fallbacks() -> None:
    """The harness itself: a kernel op is recorded as a kernel, a fallback op as a fallback, and a
    wrong npu result fails the comparison."""
    class S:
        def __init__(self, *a: Any) -> None:
            self.input, self.args, self.kwargs = a[0], a[1:], dict[str, Any]()
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    _, kern, fell = run_npu(torch.add, S(x, x))
    assert kern and not fell
    out, kern, fell = run_npu(torch.roll, S(x, 1, 1))
    assert "roll" in fell and not kern
    compare(out, torch.roll(x, 1, 1), {})
    with pytest.raises(AssertionError):
        compare(out, torch.roll(x, 1, 0), {})
    with pytest.raises(AssertionError):
        compare(out.cpu(), torch.roll(x, 1, 1), {})     # a result left on the CPU


if __name__ == "__main__":
    os.environ.setdefault("VINCI_CACHE_DIR", str(Path(__file__).resolve().parents[2] / ".vinci_cache" / "tests"))
    if sys.argv[1:2] == ["--worker"]:
        faulthandler.enable()               # a segfault prints the Python stack the generator keeps
        with contextlib.suppress(KeyboardInterrupt):
            worker([int(i) for i in sys.argv[2].split(",")], sys.argv[3])
    else:
        assert torch_bridge
        generate(sys.argv[2].split(",") if sys.argv[1:2] == ["--only"] else None)
