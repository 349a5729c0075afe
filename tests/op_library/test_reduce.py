"""op_library.reduce: the registry's quick cases for every reduction (forward and backward against
torch), accuracy of long rows against float64, NaN / empty / bad-argument behaviour with torch's
exception types and texts, and the same runs with the JIT capped at x86-64-v2."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import op_library.reduce as R
from op_library.registry import REGISTRY

OPS = ["sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "logsumexp", "norm", "cumsum"]
ROOT = Path(__file__).resolve().parents[2]


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(((got.double() - want).abs() / want.abs()).max())


def test_long_row_accuracy_against_float64() -> None:
    """1M f32 N(1, 1) values: blocked sums stay near 1e-7 relative (a naive running f32 sum is ~1e-4)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1 << 20, generator=g) + 1.0
    xd = x.double()
    assert _rel(R.sum(x), xd.sum()) < 2e-6
    assert _rel(R.mean(x), xd.mean()) < 2e-6
    assert _rel(R.var(x), xd.var()) < 2e-6
    assert _rel(R.std(x), xd.std()) < 2e-6
    assert _rel(R.norm(x), xd.norm()) < 2e-6
    # a long column (dim 0 of (1M, 3)) uses the blocked panel accumulation
    x3 = torch.randn(1 << 20, 3, generator=g) + 1.0
    assert _rel(R.sum(x3, 0), x3.double().sum(0)) < 2e-6
    assert _rel(R.var(x3, 0), x3.double().var(0)) < 2e-6
    # f16 accumulates in f32: the f16 result is the f32 sum rounded once
    h = torch.rand(1 << 16, generator=g).half()
    assert R.sum(h).item() == pytest.approx(h.double().sum().item(), rel=1e-3)


def test_nan_and_inf() -> None:
    x = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [2.0, 2.0, 1.0, 2.0], [float("inf"), 1.0, -float("inf"), 0.0]])
    for d in (0, 1):
        assert torch.equal(R.argmax(x, d), torch.argmax(x, d))
        assert torch.equal(R.argmin(x, d), torch.argmin(x, d))
        torch.testing.assert_close(R.amax(x, d), torch.amax(x, d), equal_nan=True)
        torch.testing.assert_close(R.sum(x, d), torch.sum(x, d), equal_nan=True)
        v, i = R.max(x, d)
        tv, ti = torch.max(x, d)
        torch.testing.assert_close(v, tv, equal_nan=True)
        assert torch.equal(i, ti)
    assert R.argmax(x).item() == torch.argmax(x).item() == 1
    assert torch.isnan(R.max(x))
    assert isinstance(R.max(x, 1), torch.return_types.max) and isinstance(R.min(x, 1), torch.return_types.min)



def _rev_cumsum(x: torch.Tensor, d: int) -> torch.Tensor:
    return torch.flip(torch.cumsum(torch.flip(x, [d]), d), [d])


@pytest.mark.parametrize("shape,dim", [((5, 200), 1), ((200, 5), 0), ((3, 130, 20), 1)])
def test_cumsum_non_finite_as_torch(shape, dim) -> None:  # type: ignore[no-untyped-def]
    """The cube scan multiplies a block by a triangle of ones, so 0 * inf would put NaN before an inf;
    blocks whose carry ends non-finite are redone by sequential adds: NaN / +-inf land where torch
    puts them, in full blocks and in the tail, forward and backward (the reversed walk)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(*shape, generator=g)
    flat = x.view(-1)
    n = flat.numel()
    flat[n // 3] = float("inf")
    flat[n // 2] = -float("inf")
    flat[n - 2] = float("nan")
    flat[7] = float("inf")
    torch.testing.assert_close(R.cumsum(x, dim), torch.cumsum(x, dim), equal_nan=True, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(R.cumsum_backward(x, dim), _rev_cumsum(x, dim), equal_nan=True, rtol=1e-5, atol=1e-4)
    # rows / columns without a non-finite value next to ones with it stay finite
    assert torch.isfinite(R.cumsum(x, dim)).sum() == torch.isfinite(torch.cumsum(x, dim)).sum()


def test_cumsum_blocked_scan_accuracy() -> None:
    """Rows of 4100 (64-wide cube blocks + a 4-column tail) against float64, both walks and both
    forms; f16 multiplies by exact ones and accumulates in f32, rounded once per output."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 4100, generator=g) + 0.5
    want = torch.cumsum(x.double(), 1)
    assert float((R.cumsum(x, 1).double() - want).abs().max()) < 2e-3
    assert float((R.cumsum(x.t().contiguous(), 0).double() - want.t()).abs().max()) < 2e-3
    assert float((R.cumsum_backward(x, 1).double() - _rev_cumsum(x.double(), 1)).abs().max()) < 2e-3
    h = x.half()
    got = R.cumsum(h, 1, dtype=torch.float32)
    assert float((got.double() - torch.cumsum(h.double(), 1)).abs().max()) < 2e-3
    torch.testing.assert_close(R.cumsum(h, 1), torch.cumsum(h.float(), 1).half(), rtol=2e-3, atol=1e-2)

def test_backward_nan_and_ties_as_torch() -> None:
    x = torch.tensor([[1.0, float("nan"), 3.0], [3.0, 3.0, 1.0]])
    g = torch.ones(2)
    xr = x.clone().requires_grad_()
    torch.amax(xr, 1).backward(g)
    torch.testing.assert_close(R.amax_backward(g, x, R.amax(x, 1), 1), xr.grad, equal_nan=True)
    t = torch.tensor([[1.0, 3.0, 3.0]])
    tr = t.clone().requires_grad_()
    torch.max(tr).backward()
    torch.testing.assert_close(R.max_backward(torch.tensor(1.0), t, R.max(t)), tr.grad)
    z = torch.zeros(2, 3)
    zr = z.clone().requires_grad_()
    torch.norm(zr, 2, 1).backward(g)
    torch.testing.assert_close(R.norm_backward(g, z, R.norm(z, 2, 1), 2, 1), zr.grad)
    zr.grad = None
    torch.norm(zr, float("inf"), 1).backward(g)
    torch.testing.assert_close(R.norm_backward(g, z, R.norm(z, float("inf"), 1), float("inf"), 1), zr.grad)


def test_empty() -> None:
    e = torch.empty(3, 0)
    assert torch.equal(R.sum(e, 1), torch.zeros(3))
    assert R.sum(torch.empty(0)).item() == 0.0
    assert torch.isnan(R.mean(e, 1)).all()
    assert torch.equal(R.logsumexp(e, 1), torch.full((3,), -float("inf")))
    assert R.amax(e, 0).shape == (0,)


def _raises(fn, *args, **kwargs) -> tuple[type, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception) as ei:
        fn(*args, **kwargs)
    return ei.type, str(ei.value)


@pytest.mark.parametrize("call", [
    lambda m: m.amax(torch.empty(0)),
    lambda m: m.amax(torch.empty(3, 0), 1),
    lambda m: m.max(torch.empty(0)),
    lambda m: m.max(torch.empty(3, 0), 1),
    lambda m: m.argmax(torch.empty(0)),
    lambda m: m.argmin(torch.empty(3, 0), 1),
    lambda m: m.sum(torch.randn(2, 3), 2),
    lambda m: m.sum(torch.randn(2, 3), (0, -2)),
    lambda m: m.var(torch.randn(2, 3), 5),
    lambda m: m.mean(torch.ones(3, dtype=torch.int32)),
])
def test_errors_match_torch(call) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = _raises(call, R), _raises(call, torch)
    assert ours == theirs


def test_signatures_follow_torch() -> None:
    import inspect

    assert list(inspect.signature(R.norm).parameters)[:4] == ["input", "p", "dim", "keepdim"]
    assert inspect.signature(R.sum).parameters["dtype"].kind is inspect.Parameter.KEYWORD_ONLY
    assert R.sum(torch.ones(4, dtype=torch.float16), dtype=torch.float32).dtype == torch.float32
    assert R.argmax(torch.randn(3, 4), 1).dtype == torch.int64


def test_registry_entries_have_backward() -> None:
    for op in OPS:
        spec = REGISTRY[op]
        assert (spec.backward is None) == (op in ("argmax", "argmin"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="x86-64 levels are a Linux host feature")
def test_x86_64_v2_host() -> None:
    """The same matrix entries with the JIT capped at x86-64-v2 (SSE4.2): a fresh process, f32 + bf16."""
    code = ("from op_library import matrix; import sys\n"
            f"rows = matrix.run({OPS!r}, ['float32', 'bfloat16'], quick=True)\n"
            "bad = [f for r in rows for f in r.failures]\n"
            "print('\\n'.join(bad)); sys.exit(1 if bad else 0)\n")
    env = dict(os.environ, VINCI_HOST_ISA="x86-64-v2")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
