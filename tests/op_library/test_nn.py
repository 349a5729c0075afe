"""op_library.nn beyond the matrix: error texts and types (as torch's), dropout's reproducibility,
core-count independence and statistics, embedding's scatter-add under contention, the kernels'
own bounds checks."""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import dsl
import op_library.nn as N
import op_library.nn_kernels as K


def _torch_error(fn: Any) -> BaseException:
    with pytest.raises(Exception) as e:
        fn()
    return e.value


@pytest.mark.parametrize("call", [
    lambda m: m.cross_entropy(torch.randn(4, 5), torch.tensor([0, 1, 7, 2])),
    lambda m: m.cross_entropy(torch.randn(4, 5), torch.tensor([0, 1, -3, 2])),
    lambda m: m.nll_loss(torch.randn(4, 5), torch.tensor([0, 1, 7, 2])),
    lambda m: m.cross_entropy(torch.randn(2, 5, 3), torch.tensor([[0, 1, 2], [4, 5, 0]])),
    lambda m: m.embedding(torch.tensor([5]), torch.randn(5, 3)),
    lambda m: m.embedding(torch.tensor([[0, -1]]), torch.randn(5, 3)),
    lambda m: m.cross_entropy(torch.randn(4, 5), torch.tensor([0, 1, 2])),
    lambda m: m.cross_entropy(torch.randn(4, 5), torch.tensor([0, 1, 2, 3]), reduction="foo"),
    lambda m: m.nll_loss(torch.randn(4, 5), torch.tensor([0, 1, 2, 3]), weight=torch.ones(3)),
    lambda m: m.cross_entropy(torch.randn(4, 5), torch.tensor([0, 1, 2, 3]), label_smoothing=1.5),
    lambda m: m.cross_entropy(torch.randn(3, 5, 7), torch.zeros(3, 6, dtype=torch.long)),
    lambda m: m.dropout(torch.randn(3), 1.5),
    lambda m: m.dropout(torch.randn(3), -0.1),
    lambda m: m.embedding(torch.tensor([1.0]), torch.randn(5, 3)),
    lambda m: m.embedding(torch.tensor([1]), torch.randn(5)),
    lambda m: m.mse_loss(torch.randn(4, 5), torch.randn(4, 6)),
], ids=["target 7", "target -3", "nll target 7", "spatial target 5", "index 5", "index -1", "batch mismatch",
        "bad reduction", "weight size", "label_smoothing", "spatial target shape", "p 1.5", "p -0.1",
        "float indices", "1-D weight", "mse shapes"])
def test_errors_as_torch(call: Any) -> None:
    want = _torch_error(lambda: call(F))
    got = _torch_error(lambda: call(N))
    assert type(got) is type(want)
    assert str(want).split("(while")[0].strip() in str(got)


def test_error_texts() -> None:
    with pytest.raises(IndexError, match=r"^Target 7 is out of bounds\.$"):
        N.cross_entropy(torch.randn(4, 5), torch.tensor([0, 1, 7, 2]))
    with pytest.raises(IndexError, match=r"^index out of range in self$"):
        N.embedding(torch.tensor([5]), torch.randn(5, 3))
    with pytest.raises(IndexError, match="index out of range in self"):
        N.embedding_backward(torch.randn(1, 3), torch.tensor([9]), 5)
    with pytest.raises(NotImplementedError, match="max_norm"):
        N.embedding(torch.tensor([1]), torch.randn(5, 3), max_norm=1.0)
    with pytest.raises(NotImplementedError, match="sparse"):
        N.embedding(torch.tensor([1]), torch.randn(5, 3), sparse=True)
    with pytest.raises(NotImplementedError, match="probability"):
        N.cross_entropy(torch.randn(4, 5), torch.rand(4, 5))
    with pytest.raises(RuntimeError, match="expected target dtype to be Long or Byte, but got Float"):
        N.nll_loss(torch.randn(4, 5), torch.rand(4))
    with pytest.raises(RuntimeError, match="Mask should be Bool"):
        N.native_dropout_backward(torch.randn(3), torch.ones(3), 2.0)
    with pytest.raises(RuntimeError, match="'input' to be float32, float16 or bfloat16"):
        N.cross_entropy(torch.randint(0, 3, (4, 5)), torch.tensor([0, 1, 2, 3]))
    with pytest.raises(NotImplementedError, match="size_average"):
        N.mse_loss(torch.randn(3), torch.randn(3), size_average=True)


def test_ignored_target_may_be_out_of_range() -> None:
    x, t = torch.randn(3, 4), torch.tensor([1, -100, 3])
    torch.testing.assert_close(N.cross_entropy(x, t), F.cross_entropy(x, t))
    t2 = torch.tensor([1, 9, 3])   # ignore_index=9 is out of range and ignored
    torch.testing.assert_close(N.nll_loss(x, t2, ignore_index=9), F.nll_loss(x, t2, ignore_index=9))
    allign = torch.tensor([-100, -100, -100])   # mean over no targets: NaN, as torch
    assert N.cross_entropy(x, allign).isnan() and F.cross_entropy(x, allign).isnan()



@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("bad", [7, -3, 5, 2**33 + 1])
def test_nll_loss_reduced_target_checks(reduction: str, weighted: bool, bad: int) -> None:
    """sum / mean leave the targets' range check to the kernel's bounds-checked reads (E404): the text
    is still torch's, for targets past C, negative ones, and int64 ones int32 cannot hold."""
    x = torch.randn(70, 5).log_softmax(-1)
    w = torch.rand(5) if weighted else None
    t = torch.randint(0, 5, (70,))
    t[::9] = -100
    torch.testing.assert_close(N.nll_loss(x, t, w, reduction=reduction), F.nll_loss(x, t, w, reduction=reduction))
    t[66] = bad
    with pytest.raises(IndexError, match=rf"^Target {bad} is out of bounds\.$"):
        N.nll_loss(x, t, w, reduction=reduction)
    with pytest.raises(IndexError, match=rf"^Target {bad} is out of bounds\.$"):
        F.nll_loss(x, t, w, reduction=reduction)


def test_nll_loss_empty_and_all_ignored() -> None:
    x = torch.randn(0, 5)
    t = torch.zeros(0, dtype=torch.long)
    assert N.nll_loss(x, t).isnan() and F.nll_loss(x, t).isnan()
    assert N.nll_loss(x, t, reduction="sum").item() == 0.0 == F.nll_loss(x, t, reduction="sum").item()
    x2, t2 = torch.randn(3, 4), torch.full((3,), -100)
    assert N.nll_loss(x2, t2).isnan() and F.nll_loss(x2, t2).isnan()

def test_embedding_kernel_checks_indices_itself() -> None:
    """A bad index that reaches the kernel (here by calling it directly) is E404, not a wild read;
    the op translates it to torch's IndexError."""
    w, y = torch.randn(5, 3), torch.empty(2, 3)
    with pytest.raises(dsl.KernelError) as e:
        K.embedding_kernel(torch.tensor([1, 5], dtype=torch.int32), w, y)
    assert e.value.code == "E404"
    with pytest.raises(IndexError, match="index out of range in self"):
        N._run(K.embedding_kernel, torch.tensor([1, 5], dtype=torch.int32), w, y)


def test_embedding_backward_many_cores_one_row() -> None:
    """Every token hits the same few rows: the atomic adds from all cores must all land."""
    idx = torch.randint(0, 3, (4000,))
    g = torch.randn(4000, 70)
    want = torch.ops.aten.embedding_dense_backward(g, idx, 3, 1, False)
    torch.testing.assert_close(N.embedding_backward(g, idx, 3, 1), want, rtol=1e-5, atol=1e-4)
    want = torch.ops.aten.embedding_dense_backward(g, idx, 3, -1, True)
    torch.testing.assert_close(N.embedding_backward(g, idx, 3, -1, scale_grad_by_freq=True), want, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("cores", [1, 3, 8])
def test_dropout_mask_independent_of_core_count(cores: int) -> None:
    x = torch.randn(50_003)
    y1, m1 = torch.empty_like(x), torch.empty(x.shape, dtype=torch.int8)
    yn, mn = torch.empty_like(x), torch.empty(x.shape, dtype=torch.int8)
    K.dropout_kernel[1](x, y1, m1, 0.3, 1 / 0.7, 987654321, 0)
    K.dropout_kernel[cores](x, yn, mn, 0.3, 1 / 0.7, 987654321, 0)
    assert torch.equal(m1, mn) and torch.equal(y1, yn)
    y2, m2 = torch.empty_like(x), torch.empty(x.shape, dtype=torch.int8)
    K.dropout_kernel[cores](x, y2, m2, 0.3, 1 / 0.7, 987654321, 0, TILE=1024)   # another tiling
    assert torch.equal(m1, m2)


def test_dropout_reproducible_from_torch_seed() -> None:
    x = torch.randn(10_000)
    torch.manual_seed(7)
    a = N.dropout(x, 0.4)
    b, mb = N.native_dropout(x, 0.4, True)
    torch.manual_seed(7)
    a2 = N.dropout(x, 0.4)
    b2, mb2 = N.native_dropout(x, 0.4, True)
    assert torch.equal(a, a2) and torch.equal(b, b2) and torch.equal(mb, mb2)
    assert not torch.equal(a != 0, mb)   # consecutive calls draw new seeds


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_statistics(p: float) -> None:
    torch.manual_seed(0)
    n = 200_000
    x = torch.ones(n)
    y, mask = N.native_dropout(x, p, True)
    kept = mask.float().mean().item()
    sd = (p * (1 - p) / n) ** 0.5
    assert abs(kept - (1 - p)) < 5 * sd
    assert torch.equal(y, torch.where(mask, torch.tensor(1 / (1 - p)), torch.tensor(0.0)))
    assert abs(y.mean().item() - 1.0) < 5 * sd / (1 - p)   # the scale keeps the mean
    # neighbours are independent: P(both kept) ~ (1 - p)^2
    both = (mask[1:] & mask[:-1]).float().mean().item()
    assert abs(both - (1 - p) ** 2) < 6 * sd


def test_dropout_edges() -> None:
    x = torch.tensor([1.0, float("inf"), float("nan"), -2.0])
    assert torch.allclose(N.dropout(x, 0.0), x, equal_nan=True)
    z = N.dropout(x, 1.0)
    assert torch.allclose(z, F.dropout(x, 1.0), equal_nan=True)   # 0, NaN, NaN, -0
    y = N.dropout(x, 0.5, training=False)
    assert torch.allclose(y, x, equal_nan=True) and y.data_ptr() != x.data_ptr()
    xi = torch.randn(1000)
    before = xi.clone()
    torch.manual_seed(3)
    out = N.dropout(xi, 0.5, inplace=True)
    assert out is xi and not torch.equal(xi, before)
    torch.manual_seed(3)
    assert torch.equal(N.dropout(before, 0.5), xi)
    y, m = N.native_dropout(x, 0.5, False)
    assert bool(m.all()) and torch.allclose(y, x, equal_nan=True)


def test_cross_entropy_wide_rows_and_bf16() -> None:
    """A 32000-class vocabulary spans 16 class windows (online logsumexp)."""
    torch.manual_seed(0)
    x = torch.randn(6, 32000) * 3
    t = torch.randint(0, 32000, (6,))
    xr = x.clone().requires_grad_()
    want = F.cross_entropy(xr, t, label_smoothing=0.1)
    want.backward()
    torch.testing.assert_close(N.cross_entropy(x, t, label_smoothing=0.1), want.detach())
    torch.testing.assert_close(N.cross_entropy_backward(torch.tensor(1.0), x, t, label_smoothing=0.1), xr.grad)
    xb = x.bfloat16()
    torch.testing.assert_close(N.cross_entropy(xb, t), F.cross_entropy(xb.float(), t).bfloat16())


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mse_loss_many_windows(reduction: str) -> None:
    """Past one 8192-element window the partial sums are added by sum_kernel."""
    torch.manual_seed(4)
    a, b = torch.randn(5, 8193), torch.randn(5, 8193)
    torch.testing.assert_close(N.mse_loss(a, b, reduction=reduction), F.mse_loss(a, b, reduction=reduction),
                               rtol=1e-5, atol=1e-3)
    gx, gy = N.mse_loss_backward(torch.tensor(1.5), a, b, reduction)
    ar, br = a.clone().requires_grad_(), b.clone().requires_grad_()
    (F.mse_loss(ar, br, reduction=reduction) * 1.5).backward()
    torch.testing.assert_close(gx, ar.grad)
    torch.testing.assert_close(gy, br.grad)
