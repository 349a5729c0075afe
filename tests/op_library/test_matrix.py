"""The op test matrix: every registry entry x dtype (quick cases) against torch, and `vinci matrix`."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from compiler.cli import main as vinci
from op_library import matrix
from op_library.registry import REGISTRY, OpSpec, register, tolerance

PAIRS = [(name, dt) for name, spec in sorted(REGISTRY.items()) for dt in spec.dtypes]


@pytest.mark.parametrize("op,dtype", PAIRS, ids=[f"{n}-{str(d).removeprefix('torch.')}" for n, d in PAIRS])
def test_op_matches_torch(op: str, dtype: torch.dtype) -> None:
    (row,) = matrix.run([op], [dtype], quick=True)
    assert row.cases > 0
    assert row.ok, "\n".join(f"{f}\n  repeat: {c}" for f, c in zip(row.failures, row.repro, strict=True))


def test_tolerance_rule_scales_with_reduction_length() -> None:
    spec = REGISTRY["matmul"]
    assert tolerance(spec, torch.float32, 1) == (1.3e-6, 1e-5)
    rtol, atol = tolerance(spec, torch.float16, 100)
    assert rtol == pytest.approx(1e-2) and atol == pytest.approx(1e-4)


@pytest.fixture
def wrong_matmul() -> Iterator[str]:
    """A deliberately wrong entry: matmul whose reference adds 1."""
    base = REGISTRY["matmul"]
    spec = OpSpec("wrong_matmul", base.fn, lambda a, b, **kw: torch.matmul(a, b) + 1, (torch.float32,),
                  lambda quick, dt: base.cases(quick, dt)[:2])
    register(spec)
    yield spec.name
    del REGISTRY[spec.name]


def test_cli_fails_with_repro_line(wrong_matmul: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert vinci(["matrix", "--op", wrong_matmul, "--dtype", "float32"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out
    assert f"repeat: vinci matrix --op {wrong_matmul} --dtype float32 --case 0" in out
    assert vinci(["matrix", "--op", wrong_matmul, "--dtype", "float32", "--case", "1"]) == 1
    assert "--case 1" in capsys.readouterr().out


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.json"
    assert vinci(["matrix", "--op", "avg_pool2d", "--dtype", "float32", "--case", "0", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["op"], r["dtype"], r["cases"], r["passed"], r["ok"]) for r in rows] == \
        [("avg_pool2d", "float32", 1, 1, True)]
    assert "avg_pool2d" in capsys.readouterr().out


def test_cli_unknown_op(capsys: pytest.CaptureFixture[str]) -> None:
    assert vinci(["matrix", "--op", "nope"]) == 2
    assert "no op 'nope'" in capsys.readouterr().err
