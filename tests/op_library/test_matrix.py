"""The op test matrix: every registry entry x dtype against torch (quick cases; every case with
`pytest --matrix-full` or VINCI_MATRIX=full), and the matrix machinery itself (`vinci matrix`)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from compiler.cli import main as vinci
from op_library import matrix
from op_library.matmul import matmul
from op_library.registry import LOAD_ERRORS, REGISTRY, Case, OpSpec, register, tolerance

PAIRS = [(name, dt) for name, spec in sorted(REGISTRY.items()) for dt in spec.dtypes]


def _full(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--matrix-full")) or os.environ.get("VINCI_MATRIX") == "full"


@pytest.mark.parametrize("op,dtype", PAIRS, ids=[f"{n}-{matrix.dtype_name(d)}" for n, d in PAIRS])
def test_op_matches_torch(op: str, dtype: torch.dtype, request: pytest.FixtureRequest) -> None:
    (row,) = matrix.run([op], [dtype], quick=not _full(request))
    assert row.ok, "\n".join(f"{f}\n  repeat: {c}" for f, c in zip(row.failures, row.repro, strict=True))
    assert row.cases > 0


def test_every_area_loads() -> None:
    assert not LOAD_ERRORS, LOAD_ERRORS


def test_tolerance_rule_scales_with_reduction_length() -> None:
    spec = REGISTRY["matmul"]
    assert tolerance(spec, torch.float32, 1) == (1.3e-6, 1e-5)
    rtol, atol = tolerance(spec, torch.float16, 100)
    assert rtol == pytest.approx(1e-2) and atol == pytest.approx(1e-4)
    assert tolerance(spec, torch.int32, 100) == (0.0, 0.0)
    assert tolerance(spec, torch.bool, 1) == (0.0, 0.0)


def test_compare() -> None:
    t = torch.tensor
    nan, inf = float("nan"), float("inf")
    assert matrix._compare(t([1.0, nan, inf]), t([1.0, nan, inf]), 0, 0)[0]
    assert not matrix._compare(t([1.0, 2.0]), t([1.0, nan]), 1, 1)[0]           # NaN where torch has none
    assert not matrix._compare(t([1.0, inf]), t([1.0, -inf]), 1, 1)[0]
    assert not matrix._compare(t([1.0, inf]), t([1.0, 5.0]), 1, 1)[0]
    assert not matrix._compare(t([1.0, 5.0]), t([1.0, inf]), 1, 1)[0]
    ok, a, r = matrix._compare(t([1.0, 2.1]), t([1.0, 2.0]), 0.1, 0)
    assert ok and a == pytest.approx(0.1) and r == pytest.approx(0.05)
    assert matrix._compare(t([3, 4], dtype=torch.int32), t([3, 4], dtype=torch.int32), 1, 1)[0]
    assert matrix._compare(t([3, 5], dtype=torch.int32), t([3, 4], dtype=torch.int32), 1, 1) == (False, 1.0, 1.0)
    assert not matrix._compare(t([3, 4], dtype=torch.int32), t([3, 4]), 1, 1)[0]   # dtype is part of it
    assert not matrix._compare(t([True, False]), t([True, True]), 1, 1)[0]
    assert matrix._compare(t([True, False]), t([True, False]), 0, 0)[0]
    assert "shape (2,)" in matrix._mismatch(t([1, 2]), t([1, 2, 3]))


# deliberately wrong entries: each must fail with a repro line, the others must go on -----------------

@pytest.fixture
def entries() -> Iterator[list[str]]:
    """Names of the test entries registered (removed again after the test)."""
    names: list[str] = []
    yield names
    for n in names:
        del REGISTRY[n]


def _add(names: list[str], spec: OpSpec) -> str:
    register(spec)
    names.append(spec.name)
    return spec.name


def _wrong_matmul(names: list[str]) -> str:
    """matmul whose reference adds 1."""
    base = REGISTRY["matmul"]
    return _add(names, OpSpec("wrong_matmul", base.fn, lambda a, b, **kw: torch.matmul(a, b) + 1, (torch.float32,),
                              lambda quick, dt: base.cases(quick, dt)[:2]))


def test_cli_fails_with_repro_line(entries: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    wrong = _wrong_matmul(entries)
    assert vinci(["matrix", "--op", wrong, "--dtype", "float32", "--no-perf"]) == 1
    out = capsys.readouterr().out
    assert "FAIL wrong_matmul float32 case 0" in out and "forward: worst abs" in out
    assert f"repeat: vinci matrix --op {wrong} --dtype float32 --case 0" in out
    assert vinci(["matrix", "--op", wrong, "--dtype", "float32", "--case", "1"]) == 1
    assert "--case 1" in capsys.readouterr().out
    # the full mode's repro line says --full
    assert vinci(["matrix", "--op", wrong, "--full", "--case", "0", "--no-perf"]) == 1
    assert f"repeat: vinci matrix --op {wrong} --dtype float32 --case 0 --full" in capsys.readouterr().out


def _mm_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    return [Case((torch.randn(3, 4).to(dt), torch.randn(4, 2).to(dt)), label="3x4x2", k=4),
            Case((torch.randn(5, 6).to(dt), torch.randn(6, 3).to(dt)), label="5x6x3", k=6)]


class _Doubled(torch.autograd.Function):
    """a @ b with a backward twice too large: a reference whose autograd is wrong."""
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return 2 * g @ b.mT, 2 * a.mT @ g


def test_gradcheck_catches_a_wrong_reference(entries: list[str]) -> None:
    # the backward agrees with the reference's (wrong) autograd, so only the f64 check can tell
    name = _add(entries, OpSpec("doubled_mm", matmul, _Doubled.apply, (torch.float32, torch.float16), _mm_cases,
                                lambda g, out, args, kw: (2 * g.float() @ args[1].float().mT,
                                                          2 * args[0].float().mT @ g.float()), (0, 1)))
    rows = matrix.run([name])
    assert [(r.dtype, r.cases, r.passed, r.fd) for r in rows] == [("float32", 2, 2, "FAIL"), ("float16", 2, 0, "-")]
    assert not rows[0].ok
    assert any("gradcheck of the reference in float64" in f for f in rows[0].failures)
    assert rows[0].repro[-1] == f"vinci matrix --op {name} --dtype float32 --case 0"   # the smallest case
    # float16's gradients come back as float32: a dtype failure, named
    assert "backward grad of arg 0: dtype float32 where torch gives float16" in rows[1].failures[0]
    # a right reference passes the same check
    name2 = _add(entries, OpSpec("good_mm", matmul, torch.matmul, (torch.float32,), _mm_cases,
                                 lambda g, out, args, kw: (g @ args[1].mT, args[0].mT @ g), (0, 1)))
    (row,) = matrix.run([name2])
    assert row.ok and row.fd == "ok" and row.bwd_abs is not None


def _int_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    a = torch.randint(-3, 3, (7, 5), dtype=dt) if dt != torch.bool else torch.rand(7, 5) > 0.5
    b = torch.randint(-3, 3, (5,), dtype=dt) if dt != torch.bool else torch.rand(5) > 0.5
    return [Case((a, b), label="7x5 == 5")]


def test_int_and_bool_dtypes_exact(entries: list[str]) -> None:
    # test-only entries (torch does the work: this checks the matrix, not an op)
    ok = _add(entries, OpSpec("t_eq", torch.eq, torch.eq, (torch.int32, torch.int8, torch.bool), _int_cases))
    wrong = _add(entries, OpSpec("t_ne", torch.ne, torch.eq, (torch.int32, torch.bool), _int_cases))
    narrow = _add(entries, OpSpec("t_sum", lambda a, b: (a + b).sum(0, dtype=torch.int32),
                                  lambda a, b: (a + b).sum(0), (torch.int32,), _int_cases))
    rows = {(r.op, r.dtype): r for r in matrix.run([ok, wrong, narrow])}
    assert [d for o, d in rows if o == ok] == ["int32", "int8", "bool"]
    assert all(rows[ok, d].ok and rows[ok, d].bwd_abs is None for d in ("int32", "int8", "bool"))
    assert not rows[wrong, "int32"].ok and not rows[wrong, "bool"].ok
    assert rows[wrong, "bool"].fwd_abs == 1.0
    # torch sums int32 into int64: returning int32 is a failure that names the dtypes
    assert "dtype int32 where torch gives int64" in rows[narrow, "int32"].failures[0]


def _raising_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    raise ValueError("half-written cases")


def test_entries_that_raise_fail_and_the_run_goes_on(entries: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    def boom(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("kernel not written yet")

    bad_fwd = _add(entries, OpSpec("t_boom", boom, torch.matmul, (torch.float32,), _mm_cases))
    bad_cases = _add(entries, OpSpec("t_nocases", matmul, torch.matmul, (torch.float32,), _raising_cases))
    bad_ref = _add(entries, OpSpec("t_badref", matmul, lambda a, b: a @ b.T, (torch.float32,), _mm_cases))
    assert vinci(["matrix", "--op", bad_fwd, "--op", bad_cases, "--op", bad_ref, "--op", "matmul",
                  "--dtype", "float32", "--no-perf"]) == 1
    out = capsys.readouterr().out
    assert "forward raised RuntimeError: kernel not written yet" in out
    assert "raised ValueError: half-written cases" in out
    assert f"repeat: vinci matrix --op {bad_cases} --dtype float32\n" in out
    assert "the reference raised RuntimeError" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("matmul "))
    assert line.split()[2:4] == ["5", "5"] and line.endswith("ok")


def test_load_errors_fail_the_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(LOAD_ERRORS, "op_library/specs/x.py:3", "ImportError: cannot import name 'y'")
    assert vinci(["matrix", "--op", "avg_pool2d", "--dtype", "float32", "--case", "0"]) == 1
    assert "FAIL loading op_library/specs/x.py:3: ImportError" in capsys.readouterr().out


def test_cli_json_and_perf_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.json"
    assert vinci(["matrix", "--op", "avg_pool2d", "--dtype", "float32", "--json", str(out), "--reps", "1"]) == 0
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["load_errors"] == {}
    (row,) = doc["rows"]
    assert (row["op"], row["dtype"], row["cases"], row["passed"], row["ok"], row["fd"]) == \
        ("avg_pool2d", "float32", 4, 4, True, "ok")
    assert row["failures"] == [] and row["repro"] == []
    # measured at the largest quick case: every kernel avg_pool2d launched, one host thread each
    assert row["perf_case"] and row["perf_large"] is False
    assert row["cycles"] > 0 and 0 < row["efficiency"] <= 1 and row["bound"] in ("memory", "vector", "cube")
    assert row["kernels"] and row["host_s"] > 0 and row["torch_s"] > 0
    assert row["host_ratio"] == pytest.approx(row["host_s"] / row["torch_s"])
    text = capsys.readouterr().out
    assert "the largest quick case" in text and "host/torch" in text


def test_perf_case_prefers_the_large_case() -> None:
    cs = [Case((torch.zeros(100),)), Case((torch.zeros(10),), large=True), Case((torch.zeros(5),))]
    assert matrix.perf_case(cs, quick=False) == 1
    assert matrix.perf_case(cs, quick=True) == 0
    assert matrix.perf_case(cs[:1] + cs[2:], quick=False) == 0


def test_cli_unknown_op(capsys: pytest.CaptureFixture[str]) -> None:
    assert vinci(["matrix", "--op", "nope"]) == 2
    assert "no op 'nope'" in capsys.readouterr().err


def _tanh_cases(quick: bool, dt: torch.dtype) -> list[Case]:
    return [Case((torch.linspace(-5, 5, 41).to(dt),), label="41 in [-5, 5]")]


def test_low_precision_may_match_torch_own_result(entries: list[str]) -> None:
    # torch's bfloat16 tanh backward uses the rounded output: 1 - out^2 is 0 where out rounds to 1,
    # far from the float32 reference there; an op doing what torch does passes, one that is off fails
    def like_torch(g: Any, out: Any, args: Any, kw: Any) -> tuple[torch.Tensor]:
        return ((g.float() * (1 - out.float() ** 2)).to(out.dtype),)

    ok = _add(entries, OpSpec("t_tanh", torch.tanh, torch.tanh, (torch.bfloat16,), _tanh_cases, like_torch, (0,)))
    off = _add(entries, OpSpec("t_tanh_off", torch.tanh, torch.tanh, (torch.bfloat16,), _tanh_cases,
                               lambda g, out, args, kw: (like_torch(g, out, args, kw)[0] * 1.05,), (0,)))
    (good,), (bad,) = matrix.run([ok]), matrix.run([off])
    assert good.ok, good.failures
    assert not bad.ok and "backward grad of arg 0: worst abs" in bad.failures[0]
    x = _tanh_cases(True, torch.bfloat16)[0].args[0].float().requires_grad_()
    (g32,) = torch.autograd.grad(torch.tanh(x), x, torch.ones(41))
    out = torch.tanh(x.detach().bfloat16())
    assert not matrix._compare(like_torch(torch.ones(41, dtype=torch.bfloat16), out, (), {})[0], g32.bfloat16(),
                               *tolerance(REGISTRY[ok], torch.bfloat16, 1))[0]   # float32 alone would fail it


def _load_bench_ops() -> Any:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / "ops.py"
    spec = importlib.util.spec_from_file_location("bench_ops", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_ops(entries: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                   monkeypatch: pytest.MonkeyPatch) -> None:
    from op_library.pool import avg_pool2d

    def small_large(quick: bool, dt: torch.dtype) -> list[Case]:
        return [Case((torch.randn(2, 3, 9, 9).to(dt), 3, 2, 1), label="2x3x9x9", k=9, large=not quick)]

    timed = _add(entries, OpSpec("t_bench", avg_pool2d, torch.nn.functional.avg_pool2d, (torch.float32,),
                                 small_large))
    none = _add(entries, OpSpec("t_nolarge", avg_pool2d, torch.nn.functional.avg_pool2d, (torch.float32,),
                                lambda q, dt: small_large(True, dt)))
    out = tmp_path / "ops.json"
    bench = _load_bench_ops()
    # the host header probes torch in a subprocess and checks VINCI_HOST_ISA's caps on torch, which
    # only a fresh process can set (bench/hostinfo.py): stubbed here
    monkeypatch.setattr(bench.hostinfo, "header", lambda what: f"== {what}")
    assert bench.main(["--op", timed, "--op", none, "--reps", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    row, skipped = doc["rows"]
    assert row["op"] == timed and row["case"] == "2x3x9x9" and row["cycles"] > 0 and row["kernels"] >= 1
    assert row["ratio"] == pytest.approx(row["host_ms"] / row["torch_ms"]) and row["bound"] in matrix.BOUND_CLASS.values()
    assert skipped == {"op": none, "dtype": "float32", "note": "no large case"}
    s = doc["summary"]
    assert s["measured"] == 1 and s["no_large_case"] == [none] and s["median_ratio"] == row["ratio"]
    assert (timed in s["memory_bound_below_85pct"]) == (row["bound"] == "memory" and row["eff"] < 0.85)
    text = capsys.readouterr().out
    assert "== op library" in text and "median host/torch" in text and "no large case: t_nolarge" in text


def test_the_op_catalogue_is_current():
    """docs/ops.md is made from the registry (python -m op_library.catalog): adding an op without
    regenerating it fails here."""
    from op_library import catalog

    assert catalog.main(["--check"]) == 0, "run: python -m op_library.catalog"
