"""op_library.data (data movement, npu_rotary_mul, adaptive_avg_pool2d): the registry's quick
matrix for these ops is in test_matrix.py; here the paths the matrix does not pin down (permute
plans, chunked gathers, int64 results, in-place fill_), torch's error texts and types for bad
input, and the same kernels compiled for an x86-64-v2 host."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import op_library as L
from compiler.host import runnable_levels
from op_library import data as D

ROOT = Path(__file__).resolve().parents[2]


# paths ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,perm", [
    ((4, 6, 5), (1, 0, 2)),            # last dim stays: copy4
    ((4, 6, 5), (2, 1, 0)),            # transpose4 with an 'other' dim
    ((2, 3, 1, 4, 5), (4, 2, 0, 3, 1)),  # a size-1 dim dropped
    ((2, 3, 4, 5), (0, 1, 2, 3)),      # identity: a flat copy
    ((3, 4, 5, 6), (1, 2, 3, 0)),      # merged to a 2-D transpose
    ((2, 3, 2, 3, 2, 3, 2), (6, 4, 2, 0, 1, 3, 5)),  # six 'other' dims
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool])
def test_permute_plans(shape: tuple[int, ...], perm: tuple[int, ...], dtype: torch.dtype) -> None:
    x = torch.randint(0, 100, shape).to(dtype)
    y = D.permute(x, perm)
    assert y.is_contiguous() and torch.equal(y, x.permute(perm))


def test_permute_plan_merges_neighbours() -> None:
    assert D._plan([2, 3, 4, 5], [0, 2, 3, 1]) == ([2, 3, 20], [0, 2, 1])
    assert D._plan([2, 1, 4, 5], [1, 0, 3, 2]) == ([2, 4, 5], [0, 2, 1])


def test_gather_chunks_of_a_long_dim() -> None:
    x = torch.randn(3, 5000)
    idx = torch.randint(0, 5000, (3, 300))
    assert torch.equal(D.gather(x, 1, idx), torch.gather(x, 1, idx))
    x = torch.randn(2, 3000, 5)
    idx = torch.randint(0, 3000, (2, 70, 5))
    assert torch.equal(D.gather(x, 1, idx), torch.gather(x, 1, idx))



def test_wide_rows_take_the_split_paths() -> None:
    """Rows wider than one block (SPLIT=1) and rows that move whole (SPLIT=0) give the same results:
    index_select, gather along the last dim and tril / triu."""
    g = torch.Generator().manual_seed(8)
    for cols in (300, 5000):
        x = torch.randn(6, cols, generator=g)
        i = torch.randint(0, 6, (9,), generator=g)
        assert torch.equal(D.index_select(x, 0, i), x[i])
        idx = torch.randint(0, cols, (6, 40), generator=g)
        assert torch.equal(D.gather(x, 1, idx), torch.gather(x, 1, idx))
        assert torch.equal(D.tril(x, 3), torch.tril(x, 3))
        assert torch.equal(D.triu(x.reshape(2, 3, cols), -1), torch.triu(x.reshape(2, 3, cols), -1))

def test_int64_results_and_fill_in_place() -> None:
    assert torch.equal(D.arange(10), torch.arange(10))
    assert D.arange(10).dtype == torch.int64
    assert torch.equal(D.arange(2, 11, 3), torch.arange(2, 11, 3))
    f = D.full((2, 3), 7)
    assert f.dtype == torch.int64 and torch.equal(f, torch.full((2, 3), 7))
    assert D.full((2,), True).dtype == torch.bool
    t = torch.zeros(5, 7, dtype=torch.float16)
    assert D.fill_(t, 2.5) is t and bool((t == 2.5).all())
    t = torch.zeros(3, dtype=torch.int32)
    D.fill_(t, torch.tensor(4))
    assert t.tolist() == [4, 4, 4]


def test_ops_reachable_from_the_package() -> None:
    for name in ("transpose", "permute", "cat", "stack", "index_select", "gather", "scatter_add", "tril", "triu",
                 "pad", "arange", "full", "fill_", "npu_rotary_mul", "adaptive_avg_pool2d"):
        assert getattr(L, name) is getattr(D, name)
        if name not in ("arange", "full", "fill_"):
            assert callable(getattr(L, f"{name}_backward"))


def test_cat_and_stack_backward_are_slices() -> None:
    a, b = torch.randn(3, 4), torch.randn(3, 2)
    g = torch.randn(3, 6)
    ga, gb = D.cat_backward(g, [4, 2], 1)
    assert torch.equal(ga, g[:, :4]) and torch.equal(gb, g[:, 4:])
    gs = D.stack_backward(torch.randn(2, 3, 4), 2, 0)
    assert [tuple(t.shape) for t in gs] == [(3, 4), (3, 4)]
    assert torch.equal(D.cat([a, torch.empty(0), b], 1), torch.cat([a, torch.empty(0), b], 1))   # legacy empty


def test_scatter_add_accumulates_repeats() -> None:
    x = torch.zeros(3, 4)
    idx = torch.zeros(5, 4, dtype=torch.int64)
    src = torch.ones(5, 4)
    assert torch.equal(D.scatter_add(x, 0, idx, src), torch.scatter_add(x, 0, idx, src))
    xi = torch.zeros(3, 4, dtype=torch.int32)
    assert torch.equal(D.scatter_add(xi, 0, idx, src.int()), torch.scatter_add(xi, 0, idx, src.int()))
    src = torch.randn(6, 5)   # larger than index: only index's part is added
    idx = torch.randint(0, 3, (4, 2))
    assert torch.allclose(D.scatter_add(x, 0, idx, src), torch.scatter_add(x, 0, idx, src))
    gin, gsrc = D.scatter_add_backward(torch.ones(3, 4), 0, idx, src.shape)
    assert torch.equal(gin, torch.ones(3, 4)) and gsrc.shape == (6, 5) and float(gsrc.sum()) == 8.0



@pytest.mark.parametrize("pads", [(1, 1, 1, 1), (3, 130), (0, 0, 20, 5), (-5, 2, -2, 3), (-50, -40, -2, -3),
                                  (2, 2, 40, 1), (1, 2, 0, 0), (0, 0, 1, 0, 0, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_pad_last_two_dims_one_pass(pads: tuple[int, ...], dtype: torch.dtype) -> None:
    """Padding of the last dim or two is one pad2d launch: borders, crops (negative widths), pads wider
    than the input, integer / bool values, rows that move whole and rows wider than one block."""
    g = torch.Generator().manual_seed(5)
    for shape in ((3, 37, 100), (2, 3, 6000)):
        x = (torch.randn(*shape, generator=g) * 4).to(dtype)
        v = True if dtype == torch.bool else 7 if not dtype.is_floating_point else 2.5
        try:
            want = F.pad(x, pads, value=v)
        except RuntimeError:   # cropped below zero: torch's error
            with pytest.raises(RuntimeError, match="non-negative"):
                D.pad(x, pads, value=v)
            continue
        assert torch.equal(D.pad(x, pads, value=v), want)

def test_adaptive_avg_pool2d_empty_batch() -> None:
    for x in (torch.randn(0, 2, 3, 3), torch.randn(2, 0, 5, 5)):
        size = (2, 1)
        want = F.adaptive_avg_pool2d(x, size)
        got = D.adaptive_avg_pool2d(x, size)
        assert got.shape == want.shape and torch.allclose(got, want, equal_nan=True)


def test_adaptive_avg_pool2d_large_window_chunks() -> None:
    x = torch.randn(1, 2, 300, 300)
    assert torch.allclose(D.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, 1), rtol=1e-5, atol=1e-6)
    g = torch.randn(1, 2, 1, 1)
    gx = D.adaptive_avg_pool2d_backward(g, x.shape)
    assert torch.allclose(gx, g.expand(1, 2, 300, 300) / 90000)


# bad input: torch's exception types and words ------------------------------------------------------

def _raises_like_torch(ours, theirs, typ: type[BaseException], words: str) -> None:
    with pytest.raises(typ) as ti:
        theirs()
    assert words in str(ti.value)   # the words are torch's
    with pytest.raises(typ, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ours()


X = torch.randn(3, 4)


@pytest.mark.parametrize("ours,theirs,typ,words", [
    (lambda: D.index_select(X, 0, torch.tensor([5])), lambda: torch.index_select(X, 0, torch.tensor([5])),
     IndexError, "index out of range in self"),
    (lambda: D.index_select(X, 0, torch.tensor([-1])), lambda: torch.index_select(X, 0, torch.tensor([-1])),
     IndexError, "index out of range in self"),
    (lambda: D.index_select(X, 0, torch.tensor([[1]])), lambda: torch.index_select(X, 0, torch.tensor([[1]])),
     IndexError, "Index is supposed to be a vector"),
    (lambda: D.gather(X, 0, torch.tensor([[5]])), lambda: torch.gather(X, 0, torch.tensor([[5]])),
     RuntimeError, "index 5 is out of bounds for dimension 0 with size 3"),
    (lambda: D.gather(X, 1, torch.tensor([[-1]])), lambda: torch.gather(X, 1, torch.tensor([[-1]])),
     RuntimeError, "index -1 is out of bounds for dimension 1 with size 4"),
    (lambda: D.gather(X, 1, torch.tensor([[1.0]])), lambda: torch.gather(X, 1, torch.tensor([[1.0]])),
     RuntimeError, "Expected dtype int32/int64 for index"),
    (lambda: D.gather(X, 0, torch.tensor([1])), lambda: torch.gather(X, 0, torch.tensor([1])),
     RuntimeError, "Index tensor must have the same number of dimensions"),
    (lambda: D.gather(X, 2, torch.tensor([[1]])), lambda: torch.gather(X, 2, torch.tensor([[1]])),
     IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda: D.scatter_add(X, 0, torch.tensor([[5]]), X), lambda: torch.scatter_add(X, 0, torch.tensor([[5]]), X),
     RuntimeError, "index 5 is out of bounds for dimension 0 with size 3"),
    (lambda: D.transpose(X, 0, 2), lambda: torch.transpose(X, 0, 2),
     IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda: D.permute(X, (0, 0)), lambda: X.permute(0, 0), RuntimeError, "duplicate dims are not allowed"),
    (lambda: D.permute(X, (0,)), lambda: X.permute(0), RuntimeError, "is not equal to len(dims) = 1"),
    (lambda: D.cat([X, torch.randn(3, 5)], 0), lambda: torch.cat([X, torch.randn(3, 5)], 0),
     RuntimeError, "Sizes of tensors must match except in dimension 0. Expected size 4 but got size 5 for tensor "
                   "number 1 in the list."),
    (lambda: D.cat([], 0), lambda: torch.cat([], 0), ValueError, "expected a non-empty list of Tensors"),
    (lambda: D.stack([X, torch.randn(3, 5)]), lambda: torch.stack([X, torch.randn(3, 5)]),
     RuntimeError, "stack expects each tensor to be equal size, but got [3, 4] at entry 0 and [3, 5] at entry 1"),
    (lambda: D.tril(torch.randn(3)), lambda: torch.tril(torch.randn(3)),
     RuntimeError, "tril: input tensor must have at least 2 dimensions"),
    (lambda: D.pad(X, (1,)), lambda: F.pad(X, (1,)), RuntimeError, "Padding length must be divisible by 2"),
    (lambda: D.pad(X, (-3, -2)), lambda: F.pad(X, (-3, -2)), RuntimeError, "narrow(): length must be non-negative."),
    (lambda: D.arange(0, 10, 0), lambda: torch.arange(0, 10, 0), RuntimeError, "step must be nonzero"),
    (lambda: D.arange(10, 0, 1), lambda: torch.arange(10, 0, 1),
     RuntimeError, "upper bound and lower bound inconsistent with step sign"),
    (lambda: D.adaptive_avg_pool2d(torch.randn(3), 1), lambda: F.adaptive_avg_pool2d(torch.randn(3), 1),
     IndexError, "Dimension out of range (expected to be in range of [-1, 0], but got -2)"),
    (lambda: D.adaptive_avg_pool2d(torch.randn(2, 3, 4, 5, 6), 2), lambda: F.adaptive_avg_pool2d(torch.randn(2, 3, 4, 5, 6), 2),
     RuntimeError, "Expected 3D or 4D tensor, but got [2, 3, 4, 5, 6]"),
    (lambda: D.adaptive_avg_pool2d(torch.randn(2, 3, 0, 3), 2), lambda: F.adaptive_avg_pool2d(torch.randn(2, 3, 0, 3), 2),
     RuntimeError, "Expected input to have non-zero size for non-batch dimensions, but input has sizes [2, 3, 0, 3] "
                   "with dimension 2 being empty"),
])
def test_errors_in_torchs_words(ours, theirs, typ, words) -> None:
    _raises_like_torch(ours, theirs, typ, words)


def test_errors_of_our_own() -> None:
    with pytest.raises(NotImplementedError, match="mode 'reflect'"):
        D.pad(X, (1, 1), mode="reflect")
    with pytest.raises(ValueError, match="rotary_mode must be 'half' or 'interleave'"):
        D.npu_rotary_mul(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4), "full")
    with pytest.raises(RuntimeError, match="does not broadcast"):
        D.npu_rotary_mul(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4))
    with pytest.raises(RuntimeError, match="must be a 4-D tensor"):
        D.npu_rotary_mul(torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="expected all tensors to have the dtype"):
        D.cat([X, X.half()])
    with pytest.raises(TypeError, match="dtype torch.float64 is not supported"):
        D.transpose(X.double(), 0, 1)


# the same kernels for an x86-64-v2 host ------------------------------------------------------------

V2_SCRIPT = """
import sys, torch, torch.nn.functional as F
from op_library import data as D
torch.manual_seed(0)
h = torch.randn(37, 70).half()
b = torch.randn(2, 3, 9, 8).bfloat16()
q = torch.randint(-100, 100, (5, 37, 3), dtype=torch.int8)
i = torch.randint(0, 37, (45,))
g = torch.randint(0, 70, (37, 9))
x4 = torch.randn(2, 3, 10, 64).half()
r = torch.randn(1, 1, 10, 64).half()
checks = {
    "transpose f16": torch.equal(D.transpose(h, 0, 1), h.t().contiguous()),
    "permute i8": torch.equal(D.permute(q, (2, 0, 1)), q.permute(2, 0, 1).contiguous()),
    "cat bf16": torch.equal(D.cat([b, b], 2), torch.cat([b, b], 2)),
    "index_select f16": torch.equal(D.index_select(h, 0, i), h[i]),
    "gather f16": torch.equal(D.gather(h, 1, g), torch.gather(h, 1, g)),
    "scatter_add bf16": torch.allclose(D.scatter_add(b, 3, g[:2, :3].reshape(2, 3, 1, 1).expand(2, 3, 9, 1) % 8,
                                                     b[..., :1]).float(),
                                       torch.scatter_add(b.float(), 3, g[:2, :3].reshape(2, 3, 1, 1).expand(2, 3, 9, 1)
                                                         % 8, b[..., :1].float()).bfloat16().float(), atol=0.05),
    "tril f16": torch.equal(D.tril(h, 2), torch.tril(h, 2)),
    "pad bf16": torch.equal(D.pad(b, (1, 2, 0, 1), value=1.5), F.pad(b, (1, 2, 0, 1), value=1.5)),
    "arange f16": torch.equal(D.arange(0, 37, 1, dtype=torch.float16), torch.arange(0, 37, 1, dtype=torch.float16)),
    "full bf16": torch.equal(D.full((5, 9), 2.5, dtype=torch.bfloat16), torch.full((5, 9), 2.5, dtype=torch.bfloat16)),
    "rotary f16": torch.allclose(D.npu_rotary_mul(x4, r, r).float(),
                                 (x4.float() * r.float() + torch.cat((-x4[..., 32:], x4[..., :32]), -1).float()
                                  * r.float()).half().float(), rtol=1e-3, atol=1e-3),
    "adaptive bf16": torch.allclose(D.adaptive_avg_pool2d(b, (3, 5)).float(),
                                    F.adaptive_avg_pool2d(b.float(), (3, 5)).bfloat16().float(), rtol=1e-2, atol=1e-2),
}
bad = [k for k, ok in checks.items() if not ok]
print(bad)
sys.exit(1 if bad else 0)
"""


@pytest.mark.skipif("x86-64-v2" not in runnable_levels(), reason="this host cannot run x86-64-v2 code")
def test_x86_64_v2() -> None:
    """One call of each op (f16 / bf16 / i8: the software conversions of an SSE4.2 host) compiled for x86-64-v2."""
    env = dict(os.environ, VINCI_HOST_ISA="x86-64-v2")
    p = subprocess.run([sys.executable, "-c", V2_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
