"""op_library.elementwise: the matrix rows of its ops, broadcasting and type promotion against torch,
casts at the edges, sum_to_size, error texts, and a run with the JIT capped at x86-64-v2."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dsl
import op_library.elementwise as E
from op_library.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
OPS = sorted(name for name, spec in REGISTRY.items() if spec.cases.__module__ == "op_library.specs.elementwise")
PAIRS = [(name, dt) for name in OPS for dt in REGISTRY[name].dtypes]


def test_registry_has_every_op() -> None:
    want = {"add", "sub", "mul", "div", "maximum", "minimum", "pow", "where", "masked_fill", "clamp", "eq", "ne",
            "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not", "npu_dtype_cast",
            "sum_to_size"}
    assert want <= set(OPS)


# ------------------------------------------------------------------ broadcasting and the frame
def test_frame_merges_dims_that_broadcast_alike() -> None:
    dims, n = E._frame((2, 3, 4, 5), [(2, 3, 4, 5), (4, 5)])
    assert n == 2 and dims == [(6, (False, True)), (20, (False, False))]
    dims, _ = E._frame((2, 1, 4), [(2, 1, 4), (1, 1, 1)])   # size-1 dims dropped
    assert dims == [(8, (False, True))]


@pytest.mark.parametrize("sa,sb", [((2, 3, 4, 5, 6), (3, 1, 5, 1)), ((2, 1, 4, 1, 3), (1, 5, 1, 6, 1)),
                                   ((7, 1, 1), (1, 9, 1)), ((), (3, 4)), ((1, 1), (1,)), ((5, 0), (1,))])
def test_broadcast_shapes(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    """More than three merged dims loop on the host; 0-dim and size-0 shapes."""
    a, b = torch.randn(sa), torch.randn(sb)
    for op in ("add", "mul", "maximum", "lt"):
        got, want = getattr(E, op)(a, b), getattr(torch, op)(a, b)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.equal(got, want), op


@pytest.mark.parametrize("a,b", [
    (torch.randn(5, 7), torch.randn(7, dtype=torch.float16)),             # f32 + f16 -> f32
    (torch.randn(5, 7, dtype=torch.float16), torch.randn(7, dtype=torch.bfloat16)),   # -> f32
    (torch.randint(-99, 99, (5, 7), dtype=torch.int32), torch.randn(7, dtype=torch.float16) * 50),  # -> f16
    (torch.randint(-99, 99, (5, 7), dtype=torch.int32), 2.5),            # int + float scalar -> f32
    (torch.randint(-99, 99, (5, 7), dtype=torch.int8), torch.randint(-99, 99, (7,), dtype=torch.int32)),
    (torch.randn(5, 7, dtype=torch.bfloat16), torch.tensor(3.0)),        # 0-dim f32 tensor: bf16 result
    (torch.randn(5, 7, dtype=torch.float16), 1e-3),                      # the scalar meets f16 as f32
    (3, torch.randint(-99, 99, (5, 7), dtype=torch.int32)),              # scalar first operand
])
def test_type_promotion(a: object, b: object) -> None:
    ops = ("add", "sub", "mul", "div") + (("eq", "ge") if isinstance(a, torch.Tensor) else ())
    for op in ops:
        got, want = getattr(E, op)(a, b), getattr(torch, op)(a, b)
        assert got.dtype == want.dtype, op
        torch.testing.assert_close(got, want, equal_nan=True, msg=op)
    got, want = E.add(a, b, alpha=2), torch.add(a, b, alpha=2)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_half_scalars_as_torch(dt: torch.dtype) -> None:
    """f16 / bf16 with Python numbers: torch converts the number (and alpha) to the dtype, except in
    mul and div, which take it at f32; a + alpha * b computes in f32 and rounds once. (torch's vector
    path fuses a + alpha * b into one f32 FMA, which can differ by one ulp: not compared bit for bit.)"""
    a, b = torch.randn(4099).to(dt), torch.randn(4099).to(dt)
    a[:10] = 0.3
    al = float(torch.tensor(0.3).to(dt))
    assert torch.equal(E.add(a, b, alpha=0.3), (a.float() + b.float() * al).to(dt))
    assert torch.equal(E.sub(a, b, alpha=0.3), (a.float() - b.float() * al).to(dt))
    got, want = E.add(a, b, alpha=0.3).float(), torch.add(a, b, alpha=0.3).float()
    one_ulp = torch.finfo(dt).eps * torch.maximum(got.abs(), want.abs()) + torch.finfo(dt).tiny
    assert ((got - want).abs() <= one_ulp).all()     # at most torch's FMA's one ulp apart
    for op in ("add", "sub", "mul", "div", "eq", "gt", "le"):
        for s in (0.3, 1 / 3, 2.7, 1e-3):
            assert torch.equal(getattr(E, op)(a, s), getattr(torch, op)(a, s)), (op, s)
    for s in (0.3, 2.7):
        assert torch.equal(E.pow(a.abs(), s), torch.pow(a.abs(), s))
        assert torch.equal(E.mul(a, torch.tensor(s)), torch.mul(a, torch.tensor(s)))
        assert torch.equal(E.div(a, torch.tensor(s)), torch.div(a, torch.tensor(s)))


def test_nan_rules() -> None:
    nan, inf = float("nan"), float("inf")
    a = torch.tensor([nan, 1.0, nan, -inf, 0.0, -0.0, inf])
    b = torch.tensor([1.0, nan, nan, 2.0, -0.0, 0.0, inf])
    for op in ("maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_xor"):
        got, want = getattr(E, op)(a, b), getattr(torch, op)(a, b)
        torch.testing.assert_close(got, want, equal_nan=True, msg=op)
    torch.testing.assert_close(E.clamp(a, -1.0, 1.0), torch.clamp(a, -1.0, 1.0), equal_nan=True)
    torch.testing.assert_close(E.clamp(a, b, b + 1), torch.clamp(a, b, b + 1), equal_nan=True)


def test_integer_division() -> None:
    a = torch.tensor([7, -7, 7, -7, 0, 5, -128], dtype=torch.int32)
    b = torch.tensor([2, 2, -2, -2, 3, 5, 3], dtype=torch.int32)
    for mode in ("trunc", "floor"):
        assert torch.equal(E.div(a, b, rounding_mode=mode), torch.div(a, b, rounding_mode=mode))
    assert torch.equal(E.div(a, b), torch.div(a, b))


def test_float_floor_division_edges() -> None:
    a = torch.tensor([1.0, -1.0, 7.5, -7.5, 0.3, 1e-30, 5.0])
    b = torch.tensor([0.1, 0.1, -2.0, 2.0, -1.0, -1.0, 0.0])
    assert torch.equal(E.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="floor"))
    assert torch.equal(E.div(a, b, rounding_mode="trunc"), torch.div(a, b, rounding_mode="trunc"))


def test_where_and_masked_fill_scalars() -> None:
    c = torch.rand(6, 5) > 0.5
    for x, y in ((1.5, -2.0), (3, 4.5), (2.5, torch.randn(5)), (torch.randn(6, 1), 7)):
        got, want = E.where(c, x, y), torch.where(c, x, y)
        assert got.dtype == want.dtype and torch.equal(got, want)
    xi = torch.arange(30, dtype=torch.int32).view(6, 5)
    assert torch.equal(E.masked_fill(xi, c, 2.7), xi.masked_fill(c, 2.7))
    x = torch.randn(5)
    assert torch.equal(E.masked_fill(x, c, torch.tensor(9.0)), x.masked_fill(c, torch.tensor(9.0)))


# ------------------------------------------------------------------ casts
_EDGES = [200.7, -200.7, 1e10, float("nan"), float("inf"), -float("inf"), -0.7, 127.9, 128.5, 2147483520.0,
          -2147483648.0, 0.0, -0.0, 0.5, 1.5, 2.5]


@pytest.mark.parametrize("dst", [torch.int32, torch.int8, torch.bool, torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("src", [torch.float32, torch.float16, torch.bfloat16])
def test_cast_edges_match_torch(src: torch.dtype, dst: torch.dtype) -> None:
    """float -> int truncates; NaN, inf and out-of-range give what torch's CPU cast gives on x86."""
    x = torch.tensor(_EDGES * 5).to(src)
    got, want = E.npu_dtype_cast(x, dst), x.to(dst)
    assert got.dtype == dst and torch.equal(got.isnan() if dst.is_floating_point else got,
                                            want.isnan() if dst.is_floating_point else want)
    if dst.is_floating_point:
        torch.testing.assert_close(got, want, equal_nan=True, atol=0, rtol=0)
    assert E.to_dtype is E.npu_dtype_cast


@pytest.mark.parametrize("src", [torch.int32, torch.int8, torch.bool])
def test_cast_from_integers(src: torch.dtype) -> None:
    x = torch.tensor([0, 1, -1, 127, -128, 300, -300, 1 << 30, 16777217]).to(torch.int64)
    x = x.to(src) if src != torch.bool else x != 0
    for dst in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.bool):
        assert torch.equal(E.npu_dtype_cast(x, dst), x.to(dst)), dst


# ------------------------------------------------------------------ sum_to_size
@pytest.mark.parametrize("shape,size", [((3, 37, 100), (37, 1)), ((2, 3, 4, 5, 6), (3, 1, 5, 1)),
                                        ((2, 3, 4, 5, 6), (2, 1, 4, 1, 6)), ((3000, 5), (5,)), ((7, 3000), ())])
def test_sum_to_size(shape: tuple[int, ...], size: tuple[int, ...]) -> None:
    g = torch.randn(shape)
    want = g.double().sum_to_size(size) if size else g.double().sum()
    got = E.sum_to_size(g, size)
    assert got.shape == want.shape and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)
    assert E.sum_to_size(g.half(), size).dtype == torch.float16
    assert E.sum_to_size(g, size, torch.bfloat16).dtype == torch.bfloat16


def test_sum_to_size_is_one_launch_for_a_row_broadcast() -> None:
    with dsl.record() as rec:
        E.sum_to_size(torch.randn(64, 100), (100,))
    assert rec.kernels() == ["colsum_kernel"]
    with dsl.record() as rec:
        E.add(torch.randn(64, 100), torch.randn(100))
    assert rec.kernels() == ["ew_kernel"]


# ------------------------------------------------------------------ errors
def _same_error(fn: object, ref: object) -> None:
    with pytest.raises(Exception) as want:
        ref()  # type: ignore[operator]
    with pytest.raises(type(want.value)) as got:
        fn()  # type: ignore[operator]
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("name,ours,theirs", [
    ("shape", lambda: E.add(torch.ones(2, 3), torch.ones(2, 4)), lambda: torch.add(torch.ones(2, 3), torch.ones(2, 4))),
    ("shape dim 0", lambda: E.mul(torch.ones(3, 1), torch.ones(4, 2)), lambda: torch.mul(torch.ones(3, 1), torch.ones(4, 2))),
    ("where shapes", lambda: E.where(torch.ones(2, 3) > 0, torch.ones(2, 4), torch.ones(2, 3)),
     lambda: torch.where(torch.ones(2, 3) > 0, torch.ones(2, 4), torch.ones(2, 3))),
    ("where condition", lambda: E.where(torch.ones(2, 3), torch.ones(2, 3), 1.0),
     lambda: torch.where(torch.ones(2, 3), torch.ones(2, 3), 1.0)),
    ("mask dtype", lambda: E.masked_fill(torch.ones(2, 3), torch.ones(2, 3), 1.0),
     lambda: torch.ones(2, 3).masked_fill(torch.ones(2, 3), 1.0)),
    ("value dims", lambda: E.masked_fill(torch.ones(2, 3), torch.ones(3) > 0, torch.ones(2)),
     lambda: torch.ones(2, 3).masked_fill(torch.ones(3) > 0, torch.ones(2))),
    ("clamp bounds", lambda: E.clamp(torch.ones(2)), lambda: torch.clamp(torch.ones(2))),
    ("rounding mode", lambda: E.div(torch.ones(2), 2.0, rounding_mode="round"),
     lambda: torch.div(torch.ones(2), 2.0, rounding_mode="round")),
    ("int alpha", lambda: E.add(torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.int32), alpha=0.5),
     lambda: torch.add(torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.int32), alpha=0.5)),
    ("maximum scalar", lambda: E.maximum(torch.ones(2), 1.0), lambda: torch.maximum(torch.ones(2), 1.0)),
    ("logical scalar", lambda: E.logical_and(torch.ones(2), 1.0), lambda: torch.logical_and(torch.ones(2), 1.0)),
    ("sum_to_size", lambda: E.sum_to_size(torch.ones(2, 3), (4,)), lambda: torch.ones(2, 3).sum_to_size(4)),
])
def test_errors_as_torch(name: str, ours: object, theirs: object) -> None:
    _same_error(ours, theirs)


def test_the_size_message() -> None:
    with pytest.raises(RuntimeError, match=r"^The size of tensor a \(3\) must match the size of tensor b \(4\) at "
                                           r"non-singleton dimension 1$"):
        E.add(torch.ones(2, 3), torch.ones(2, 4))


def test_unsupported_dtypes_are_refused() -> None:
    with pytest.raises(TypeError, match="int64 is not supported by the DSL kernels"):
        E.add(torch.ones(2, dtype=torch.int64), 1)
    with pytest.raises(TypeError, match="float64"):
        E.mul(torch.ones(2, dtype=torch.float64), torch.ones(2))
    with pytest.raises(TypeError, match="integer pow"):
        E.pow(torch.ones(2, dtype=torch.int32), 2)
    with pytest.raises(TypeError, match="two scalars give torch.int64"):
        E.where(torch.ones(2) > 0, 3, 4)
    with pytest.raises(TypeError, match="npu_dtype_cast: dtype torch.int64"):
        E.npu_dtype_cast(torch.ones(2), torch.int64)


# ------------------------------------------------------------------ other hosts
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="x86-64 levels are a Linux host feature")
def test_x86_64_v2_host() -> None:
    """The matrix rows of the main ops with the JIT capped at x86-64-v2 (SSE4.2: no FMA, F16C or AVX;
    software f16 / bf16 conversions): a fresh process, f32, bf16 and int32."""
    ops = ["add", "div", "maximum", "pow", "where", "clamp", "lt", "logical_xor", "npu_dtype_cast", "sum_to_size"]
    code = ("from op_library import matrix; import sys\n"
            f"rows = matrix.run({ops!r}, ['float32', 'bfloat16', 'int32'], quick=True, perf=False)\n"
            "bad = [f for r in rows for f in r.failures]\n"
            "print('\\n'.join(bad)); sys.exit(1 if bad or not rows else 0)\n")
    env = dict(os.environ, VINCI_HOST_ISA="x86-64-v2")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
