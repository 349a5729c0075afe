"""op_library._plan: the per-signature launch plans of the small-op fast path.

Every test calls an op on the ordinary path (`PLANS.disabled()`), then twice through the plan cache
(the first call builds the plan, the second runs it), and requires the three results to be
bit-identical; variants change one property at a time (dtype, shape, broadcast pattern, scalar
value, contiguity, arguments) so each gets its own plan and none is reused where it must not be.
Python-number operands and alpha share a plan per type: their values are per-call arguments."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import dsl
import op_library as L
from compiler import CONFIG
from op_library._plan import PLANS, PlanCache

F32, F16, BF16, I32 = torch.float32, torch.float16, torch.bfloat16, torch.int32


def _bits(t: Any) -> Any:
    """A result as exactly comparable data (NaN payloads and -0.0 included)."""
    if isinstance(t, (tuple, list)):
        return [_bits(x) for x in t]
    if t is None:
        return None
    t = t.contiguous()
    if t.dtype.is_floating_point:
        return (t.dtype, tuple(t.shape), t.view({F32: I32, F16: torch.int16, BF16: torch.int16}[t.dtype]).tolist())
    return (t.dtype, tuple(t.shape), t.tolist())


def _check(fn: Callable[..., Any], *args: Any, planned: bool = True, **kwargs: Any) -> None:
    """fn's result on the ordinary path == its result when a plan is built == when a plan is hit."""
    with PLANS.disabled():
        want = _bits(fn(*args, **kwargs))
    first = _bits(fn(*args, **kwargs))
    hits = PLANS.hits
    again = _bits(fn(*args, **kwargs))
    assert first == want
    assert again == want
    if planned:
        assert PLANS.hits > hits, "the second call did not run a plan"


def _r(*shape: int, dtype: torch.dtype = F32) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash(shape) % 1000)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g, dtype=dtype)


# ------------------------------------------------------------------ elementwise
@pytest.mark.parametrize("op", [L.add, L.sub, L.mul, L.div])
def test_binary_one_property_at_a_time(op: Callable[..., Any]) -> None:
    x, y = _r(4, 16), _r(4, 16) + 3.0
    _check(op, x, y)                                      # the base plan
    for dt in (F16, BF16):                                # dtype
        _check(op, x.to(dt), y.to(dt))
    _check(op, x.to(F16), y)                              # mixed dtypes (promotion in the kernel)
    _check(op, x.to(I32), (y * 4).to(I32).clamp(min=1))   # integers (div: true division to f32)
    _check(op, _r(3, 16), _r(3, 16) + 3.0)                # shape
    _check(op, x, _r(16) + 3.0)                           # broadcast: a row
    _check(op, x, _r(4, 1) + 3.0)                         # a column
    _check(op, _r(16), y)                                 # the other operand broadcast
    for s in (2.0, 0.5, -0.0, 0.0, 3, True, float("nan"), float("inf")):   # scalar value and kind
        _check(op, x, s)
        _check(op, x.to(F16), s)
    _check(op, 2.5, y)                                    # scalar first
    _check(op, x, torch.tensor(2.0))                      # a 0-dim tensor
    _check(op, x.t().contiguous().t(), y, planned=False)  # non-contiguous: the ordinary path
    _check(op, x, y.t().contiguous().t(), planned=False)
    _check(op, torch.empty(0, 16), torch.empty(0, 16), planned=False)


@pytest.mark.parametrize("dt", [F32, F16, BF16, I32])
def test_scalar_values_share_a_plan(dt: torch.dtype) -> None:
    """A new Python-number value (an optimizer's step-dependent factor) runs the plan of its type, with
    the value converted as the ordinary path converts it (rounded to f16 / bf16 first)."""
    x = _r(8, 32, dtype=dt)
    values = (3, -7, 11) if dt == I32 else (1e-3, 0.999, 1 / 3, -2.5e-5, float("nan"), -0.0)
    for op in (L.add, L.sub, L.mul, L.div):
        op(x, values[0])                                  # builds the plan for this type
        for v in values[1:]:
            hits = PLANS.hits
            got = _bits(op(x, v))
            assert PLANS.hits > hits, f"{op.__name__}({v}) built a new plan"
            with PLANS.disabled():
                assert got == _bits(op(x, v)), (op.__name__, v)
        for alpha in (0.5, 1e-3, 3) if dt != I32 else (2, 5):
            got = _bits(L.add(x, x, alpha=alpha))
            with PLANS.disabled():
                assert got == _bits(L.add(x, x, alpha=alpha)), alpha


def test_alpha_and_rounding_mode() -> None:
    x, y = _r(4, 16), _r(4, 16) + 3.0
    for alpha in (1, 2, 0.5, -1.5, 1.0):
        _check(L.add, x, y, alpha=alpha)
        _check(L.sub, x.to(BF16), y.to(BF16), alpha=alpha)
    _check(L.add, x.to(I32), y.to(I32), alpha=3)
    for mode in (None, "trunc", "floor"):
        _check(L.div, x, y, rounding_mode=mode)
        _check(L.div, x.to(I32), (y.abs() + 1).to(I32), rounding_mode=mode)


def test_leading_dims_loop_on_the_host() -> None:
    """More than three merged dims: several launches, no plan (the ordinary path each time)."""
    a, b = _r(2, 3, 4, 5, 6), _r(3, 1, 5, 1)
    _check(L.add, a, b, planned=False)


def test_errors_are_not_cached() -> None:
    x = _r(4, 16)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="must match the size"):
            L.add(x, _r(5, 16))
        with pytest.raises(TypeError, match="bool arithmetic"):
            L.add(x.bool(), x.bool())
        with pytest.raises(RuntimeError, match="rounding_mode"):
            L.div(x, x, rounding_mode="round")


# ------------------------------------------------------------------ activations
@pytest.mark.parametrize("op", [L.relu, L.gelu, L.silu, L.sigmoid, L.exp, L.neg])
def test_unary(op: Callable[..., Any]) -> None:
    x = _r(4, 16)
    _check(op, x)
    _check(op, x.to(F16))
    _check(op, x.to(BF16))
    _check(op, _r(7))
    _check(op, torch.tensor(1.5))
    _check(op, x.t(), planned=False)
    if op in (L.relu, L.neg, L.exp):
        _check(op, x.to(I32) if op is not L.exp else (x * 3).to(I32))


def test_unary_arguments() -> None:
    x = _r(64)
    _check(L.gelu, x, approximate="tanh")
    for slope in (0.01, 0.2, -0.0):
        _check(L.leaky_relu, x, slope)
    _check(L.elu, x, 0.5)
    _check(L.softplus, x, 2.0, 10.0)
    y = x.clone()
    L.relu(y, inplace=True)     # in place: the ordinary path, writing into y
    assert _bits(y) == _bits(L.relu(x))


# ------------------------------------------------------------------ softmax and norms
def test_softmax() -> None:
    x = _r(4, 16)
    for fn in (L.softmax, L.log_softmax):
        _check(fn, x, -1)
        _check(fn, x, 0)                      # columns
        _check(fn, x, None)
        _check(fn, x, -1, dtype=F32)
        _check(fn, x.to(BF16), -1)
        _check(fn, x.to(F16), -1, dtype=F32)
        _check(fn, _r(2, 3, 8), 1)
        _check(fn, x.t(), -1, planned=False)


def test_layer_norm_and_rms_norm() -> None:
    x, w, b = _r(4, 16), _r(16), _r(16)
    _check(L.layer_norm, x, (16,), w, b)
    _check(L.layer_norm, x, (16,), None, b)
    _check(L.layer_norm, x, (16,), w, None)
    _check(L.layer_norm, x, (16,))
    _check(L.layer_norm, x, [16], w, b, 1e-3)
    _check(L.layer_norm, x, (4, 16), _r(4, 16), None)
    _check(L.layer_norm, x.to(BF16), (16,), w.to(BF16), b.to(BF16))
    _check(L.layer_norm, _r(2, 3, 16), 16, w, b)
    _check(L.layer_norm, x.t().contiguous().t(), (16,), w, b, planned=False)
    _check(L.rms_norm, x, (16,), w)
    _check(L.rms_norm, x, (16,))
    _check(L.rms_norm, x, (16,), w, 1e-2)
    _check(L.rms_norm, x.to(F16), (16,), w.to(F16))
    _check(L.npu_rms_norm, x, w)
    _check(L.npu_rms_norm, x, w, 1e-3)
    _check(L.npu_rms_norm, _r(2, 3, 16), w)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        L.layer_norm(x, (8,))


# ------------------------------------------------------------------ reductions
def test_sum_mean() -> None:
    x = _r(4, 16)
    for fn in (L.sum, L.mean):
        _check(fn, x, -1)
        _check(fn, x, -1, True)
        _check(fn, x, 0)                      # columns
        _check(fn, x, None)
        _check(fn, x, (0, 1))
        _check(fn, x, -1, dtype=F32)
        _check(fn, x.to(BF16), -1)
        _check(fn, _r(3, 5000), -1)           # long rows: two launches
        _check(fn, _r(2, 3, 4), (0, 2), planned=False)   # non-adjacent dims: the ordinary path
        _check(fn, x.t(), -1, planned=False)


# ------------------------------------------------------------------ cube ops
def test_matmul_linear() -> None:
    a, b = _r(8, 16), _r(16, 8)
    _check(L.matmul, a, b)
    _check(L.matmul, a, b.t().contiguous(), transpose_b=True)
    _check(L.matmul, a.t().contiguous(), b, transpose_a=True)
    _check(L.matmul, a.to(F16), b.to(F16))
    _check(L.matmul, a.to(F16), b.to(F16), out_dtype=F32)
    w, bias = _r(8, 16), _r(8)
    _check(L.linear, a, w, bias)
    _check(L.linear, a, w)
    _check(L.linear, _r(2, 3, 16), w, bias)
    _check(L.linear, a.to(BF16), w.to(BF16), bias.to(BF16))
    _check(L.linear, a, w.t().contiguous().t(), bias, planned=False)


# ------------------------------------------------------------------ optimizer
@pytest.mark.parametrize("amsgrad", [False, True])
def test_adamw_steps(amsgrad: bool) -> None:
    """Three steps with a changing lr: planned == ordinary, state and step counters included."""
    def state() -> list[list[torch.Tensor]]:
        ps = [_r(64), _r(4, 8), _r(3, dtype=BF16)]
        return [ps, [p * 0.1 + 0.05 for p in ps], [torch.zeros_like(p) for p in ps],
                [torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps] if amsgrad else [],
                [torch.tensor(0.0) for _ in ps]]

    def run(st: list[list[torch.Tensor]], lr: float) -> None:
        L.adamw(*st, amsgrad=amsgrad, beta1=0.9, beta2=0.999, lr=lr, weight_decay=0.01, eps=1e-8, maximize=False)

    want, got = state(), state()
    hits = PLANS.hits
    for lr in (1e-3, 5e-4, 1e-2):
        with PLANS.disabled():
            run(want, lr)
        run(got, lr)
    assert PLANS.hits >= hits + 2
    assert _bits([t for lst in got for t in lst]) == _bits([t for lst in want for t in lst])
    with pytest.raises(ValueError, match="Invalid learning rate"):
        run(got, -1.0)


# ------------------------------------------------------------------ the cache itself
def test_lru_bound_and_config_change() -> None:
    c = PlanCache(maxsize=2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1       # a is now the most recent
    c.put("c", 3)
    assert len(c) == 2 and c.get("b") is None and c.get("a") == 1 and c.get("c") == 3
    old = CONFIG.threads
    CONFIG.threads = old + 1     # a setting a launch depends on: the cache starts over
    try:
        assert c.get("a") is None and len(c) == 0
    finally:
        CONFIG.threads = old


def test_global_cache_stays_bounded() -> None:
    x = _r(8)
    for i in range(PLANS.maxsize + 10):
        L.add(x, float(i))
    assert len(PLANS) <= PLANS.maxsize


def test_recording_sees_planned_kernels() -> None:
    """Inside dsl.record() a planned op's kernels run traced and are recorded."""
    x, y = _r(4, 16), _r(4, 16)
    L.add(x, y)
    L.add(x, y)
    with dsl.record() as rec:
        out = L.add(x, y)
        L.softmax(x, -1)
    assert rec.kernels() == ["ew_kernel", "softmax_rows"]
    assert _bits(out) == _bits(L.add(x, y))


@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_sgd_steps(momentum: float, nesterov: bool) -> None:
    """Three steps (the first makes the momentum buffers): planned == ordinary."""
    def state() -> list[list[Any]]:
        ps = [_r(64), _r(4, 8), _r(3, dtype=BF16)]
        return [ps, [p * 0.1 + 0.05 for p in ps], [None for _ in ps]]

    def run(st: list[list[Any]], lr: float) -> None:
        L.sgd(*st, weight_decay=0.01, momentum=momentum, lr=lr, dampening=0.0, nesterov=nesterov, maximize=False)

    want, got = state(), state()
    hits = PLANS.hits
    for lr in (0.1, 0.05, 0.2):
        with PLANS.disabled():
            run(want, lr)
        run(got, lr)
    assert PLANS.hits >= hits + 1
    flat = [[t for lst in st for t in lst if t is not None] for st in (got, want)]
    assert _bits(flat[0]) == _bits(flat[1])
    with pytest.raises(ValueError, match="Invalid learning rate"):
        run(got, -1.0)


def test_backward_plans() -> None:
    """The activations' and softmax's backward keep plans too."""
    x, g = _r(4, 16), _r(4, 16)
    y = L.softmax(x, -1)
    for fn in (L.softmax_backward, L.log_softmax_backward):
        _check(fn, g, y, -1)
        _check(fn, g, y, 0)
        _check(fn, g.to(BF16), y.to(BF16), -1)
        _check(fn, g, y, -1, F32)
        _check(fn, g.t().contiguous().t(), y, -1, planned=False)
    _check(L.npu_scaled_masked_softmax_backward, g, y, 0.5)
    _check(L.npu_scaled_masked_softmax_backward, g, y, -0.0)
    for fn, saved in ((L.relu_backward, L.relu(x)), (L.sigmoid_backward, L.sigmoid(x)), (L.gelu_backward, x),
                      (L.silu_backward, x), (L.exp_backward, L.exp(x))):
        _check(fn, g, saved)
        _check(fn, g.to(F16), saved.to(F16))
    _check(L.leaky_relu_backward, g, x, 0.2)
    _check(L.gelu_backward, g, x, "tanh")


def test_threads_share_plans() -> None:
    """Two threads running the same plans on their own tensors get their own results (each launch
    marshals into its own copy of the argument block)."""
    from concurrent.futures import ThreadPoolExecutor

    xs = [_r(4, 16) + i for i in range(8)]
    with PLANS.disabled():
        want = [_bits((L.add(x, 1.5), L.softmax(x, -1))) for x in xs]

    def work(k: int) -> list[Any]:
        return [_bits((L.add(xs[i], 1.5), L.softmax(xs[i], -1))) for _ in range(20) for i in range(k % 2, 8, 2)]

    with ThreadPoolExecutor(2) as ex:
        got = list(ex.map(work, range(2)))
    for k in range(2):
        idx = [i for _ in range(20) for i in range(k % 2, 8, 2)]
        assert got[k] == [want[i] for i in idx]
