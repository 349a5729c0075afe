"""torch.ops.npu.*: values against the op_library functions and torch, autograd through them, registry
coverage, bad input, the GIL released while kernels run, the torch_npu-like module attributes."""
from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.nn.functional as F

import op_library
import torch_bridge
from op_library import registry
from torch_bridge.schemas import EXTRA, SCHEMAS, VARIANTS, op_name

npu = torch.ops.npu


def test_every_registry_entry_is_covered() -> None:
    names = {op_name(q) for q in SCHEMAS}
    for entry in registry.REGISTRY:
        assert entry in names or VARIANTS.get(entry) in names, f"registry entry {entry!r} has no torch.ops.npu op"
    for variant, op in VARIANTS.items():
        assert variant in registry.REGISTRY and op in names
    for qual, entry in EXTRA.items():
        assert qual in SCHEMAS and (entry is None or entry in registry.REGISTRY)
    assert not registry.LOAD_ERRORS


def test_module_attributes_are_the_ops() -> None:
    assert torch_bridge.npu_rms_norm is torch.ops.npu.npu_rms_norm
    assert torch_bridge.softmax is torch.ops.npu.softmax
    assert torch_bridge.softmax_backward is torch.ops.npu.softmax_backward
    for qual in SCHEMAS:
        assert getattr(torch_bridge, op_name(qual)) is getattr(torch.ops.npu, op_name(qual))
    x, g = torch.randn(4, 8), torch.randn(8)
    y, rstd = torch_bridge.npu_rms_norm(x, g)
    torch.testing.assert_close(y, op_library.npu_rms_norm(x, g)[0], rtol=0, atol=0)
    assert rstd.shape == (4, 1) and rstd.dtype == torch.float32


def _grads(f, inputs):  # type: ignore[no-untyped-def]
    xs = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    y = f(*xs)
    y = y[0] if isinstance(y, tuple) else y
    w = torch.linspace(-1, 1, y.numel()).reshape(y.shape)
    (y * w).sum().backward()
    return y.detach(), [x.grad for x in xs]


r = torch.randn


def _rot(x, r1, r2):  # type: ignore[no-untyped-def]
    x1, x2 = x.chunk(2, -1)
    return x * r1 + torch.cat([-x2, x1], -1) * r2


AUTOGRAD = {
    "linear": (npu.linear, F.linear, (r(5, 7), r(3, 7), r(3))),
    "npu_linear": (npu.npu_linear, F.linear, (r(5, 7), r(3, 7), r(3))),
    "matmul": (npu.matmul, torch.matmul, (r(5, 7), r(7, 3))),
    "bmm": (npu.bmm, torch.bmm, (r(2, 5, 7), r(2, 7, 3))),
    "conv2d": (lambda x, w, b: npu.conv2d(x, w, b, 1, 1), lambda x, w, b: F.conv2d(x, w, b, 1, 1),
               (r(2, 3, 8, 8), r(4, 3, 3, 3), r(4))),
    "relu": (npu.relu, F.relu, (r(10),)),
    "gelu": (npu.gelu, F.gelu, (r(10),)),
    "silu": (npu.silu, F.silu, (r(10),)),
    "max_pool2d": (lambda x: npu.max_pool2d(x, 2)[0], lambda x: F.max_pool2d(x, 2), (r(2, 3, 8, 8),)),
    "avg_pool2d": (lambda x: npu.avg_pool2d(x, 2), lambda x: F.avg_pool2d(x, 2), (r(2, 3, 8, 8),)),
    "adaptive_avg_pool2d": (lambda x: npu.adaptive_avg_pool2d(x, 1), lambda x: F.adaptive_avg_pool2d(x, 1),
                            (r(2, 3, 8, 8),)),
    "softmax": (lambda x: npu.softmax(x, -1), lambda x: F.softmax(x, -1), (r(4, 9),)),
    "log_softmax": (lambda x: npu.log_softmax(x, 0), lambda x: F.log_softmax(x, 0), (r(4, 9),)),
    "layer_norm": (lambda x, w, b: npu.layer_norm(x, [9], w, b), lambda x, w, b: F.layer_norm(x, [9], w, b),
                   (r(4, 9), r(9), r(9))),
    "rms_norm": (lambda x, w: npu.rms_norm(x, [9], w), lambda x, w: F.rms_norm(x, [9], w), (r(4, 9), r(9))),
    "npu_rms_norm": (lambda x, w: npu.npu_rms_norm(x, w)[0], lambda x, w: F.rms_norm(x, [9], w, 1e-6),
                     (r(4, 9), r(9))),
    "embedding": (npu.embedding, F.embedding, (torch.randint(0, 10, (3, 4)), r(10, 5))),
    "cross_entropy": (npu.cross_entropy, F.cross_entropy, (r(6, 5), torch.randint(0, 5, (6,)))),
    "mse_loss": (npu.mse_loss, F.mse_loss, (r(6, 5), r(6, 5))),
    "nll_loss": (npu.nll_loss, F.nll_loss, (r(6, 5).log_softmax(-1), torch.randint(0, 5, (6,)))),
    "add": (lambda a, b: npu.add(a, b, alpha=2), lambda a, b: torch.add(a, b, alpha=2), (r(4, 5), r(5))),
    "mul": (npu.mul, torch.mul, (r(4, 5), r(4, 1))),
    "npu_rotary_mul": (npu.npu_rotary_mul, _rot, (r(2, 3, 5, 8), r(1, 1, 5, 8), r(1, 1, 5, 8))),
    "npu_swiglu": (npu.npu_swiglu, lambda x: F.silu(x.chunk(2, -1)[0]) * x.chunk(2, -1)[1], (r(4, 10),)),
    "sdpa": (lambda q, k, v: npu.scaled_dot_product_attention(q, k, v, is_causal=True),
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             (r(2, 2, 5, 8), r(2, 2, 5, 8), r(2, 2, 5, 8))),
    "npu_fusion_attention": (lambda q, k, v: npu.npu_fusion_attention(q, k, v, 2, "BSH", scale=0.3)[0],
                             lambda q, k, v: F.scaled_dot_product_attention(
                                 *(t.view(2, -1, 2, 8).transpose(1, 2) for t in (q, k, v)),
                                 scale=0.3).transpose(1, 2).reshape(2, -1, 16),
                             (r(2, 5, 16), r(2, 6, 16), r(2, 6, 16))),
    "batch_norm": (lambda x, w, b: npu.batch_norm(x, torch.zeros(3), torch.ones(3), w, b, True),
                   lambda x, w, b: F.batch_norm(x, torch.zeros(3), torch.ones(3), w, b, True),
                   (r(4, 3, 5, 5), r(3), r(3))),
    "cat": (lambda a, b: npu.cat([a, b], 1), lambda a, b: torch.cat([a, b], 1), (r(3, 4), r(3, 2))),
    "stack": (lambda a, b: npu.stack([a, b], 1), lambda a, b: torch.stack([a, b], 1), (r(3, 4), r(3, 4))),
    "max.dim": (lambda a: npu.max(a, 1)[0], lambda a: torch.max(a, 1)[0], (r(3, 4),)),
    "sum": (lambda a: npu.sum(a, [1], True), lambda a: torch.sum(a, 1, True), (r(3, 4),)),
    "mean": (lambda a: npu.mean(a), torch.mean, (r(3, 4),)),
    "npu_dtype_cast": (lambda a: npu.npu_dtype_cast(a, torch.bfloat16).float(),
                       lambda a: a.to(torch.bfloat16).float(), (r(3, 4),)),
    "where": (npu.where, torch.where, (torch.rand(3, 4) > 0.5, r(3, 4), r(3, 4))),
    "clamp": (lambda a: npu.clamp(a, -0.5, 0.5), lambda a: torch.clamp(a, -0.5, 0.5), (r(3, 4),)),
    "masked_fill": (lambda a, m: npu.masked_fill(a, m, 2.0), lambda a, m: a.masked_fill(m, 2.0),
                    (r(3, 4), torch.rand(3, 4) > 0.5)),
}


@pytest.mark.parametrize("name", list(AUTOGRAD))
def test_values_and_grads_match_torch(name: str) -> None:
    torch.manual_seed(0)
    f_npu, f_ref, inputs = AUTOGRAD[name]
    y, g = _grads(f_npu, inputs)
    y_ref, g_ref = _grads(f_ref, inputs)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
    for i, (a, b) in enumerate(zip(g, g_ref, strict=True)):
        if b is None:
            assert a is None, f"input {i}"
        else:
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=lambda m, i=i: f"grad of input {i}: {m}")


def test_non_differentiable_outputs() -> None:
    x, g = torch.randn(4, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    y, rstd = npu.npu_rms_norm(x, g)
    assert y.requires_grad and not rstd.requires_grad
    vals, idx = npu.max(x, 1)
    assert vals.requires_grad and not idx.requires_grad and idx.dtype == torch.int64
    out, mask = npu.native_dropout(x, 0.5, True)
    assert not mask.requires_grad and mask.dtype == torch.bool
    yp, ind = npu.max_pool2d(torch.randn(1, 1, 4, 4, requires_grad=True), 2)
    assert not ind.requires_grad and ind.dtype == torch.int64


def test_values_match_op_library_exactly() -> None:
    torch.manual_seed(0)
    x, w, b = torch.randn(6, 33), torch.randn(17, 33), torch.randn(17)
    torch.testing.assert_close(npu.linear(x, w, b), op_library.linear(x, w, b), rtol=0, atol=0)
    torch.testing.assert_close(npu.softmax(x, 0), op_library.softmax(x, 0), rtol=0, atol=0)
    torch.testing.assert_close(npu.layer_norm(x, [33]), op_library.layer_norm(x, [33]), rtol=0, atol=0)
    torch.testing.assert_close(npu.var(x, [1], correction=0), op_library.var(x, 1, correction=0), rtol=0, atol=0)


def test_non_contiguous_inputs() -> None:
    a = torch.randn(9, 13).t()
    b = torch.randn(13, 9)
    torch.testing.assert_close(npu.add(a, b), a + b)
    torch.testing.assert_close(npu.softmax(a, -1), torch.softmax(a, -1))
    c = torch.randn(5, 9).t()
    torch.testing.assert_close(npu.matmul(a, c), a @ c, rtol=1e-4, atol=1e-4)


def test_half_dtypes() -> None:
    for dt in (torch.float16, torch.bfloat16):
        x = torch.randn(4, 40).to(dt)
        y = npu.gelu(x)
        assert y.dtype == dt
        torch.testing.assert_close(y.float(), F.gelu(x.float()), rtol=2e-2, atol=2e-2)


def test_optimizer_steps_match_torch() -> None:
    import torch.optim.adamw as tadamw
    import torch.optim.sgd as tsgd
    torch.manual_seed(0)
    kw = dict(amsgrad=False, beta1=0.9, beta2=0.999, lr=0.01, weight_decay=0.1, eps=1e-8, maximize=False)
    p, g, m, v = torch.randn(40), torch.randn(40), torch.randn(40), torch.rand(40)
    refs = [t.clone() for t in (p, m, v)]
    step, step_ref = torch.tensor(3.0), torch.tensor(3.0)
    npu.adamw_(p, g, m, v, None, step, **kw)
    tadamw.adamw([refs[0]], [g], [refs[1]], [refs[2]], [], [step_ref], foreach=False, **kw)
    for a, b in zip((p, m, v, step), (*refs, step_ref), strict=True):
        torch.testing.assert_close(a, b)
    ps = [torch.randn(5), torch.randn(3)]
    gs = [torch.randn(5), torch.randn(3)]
    bufs = [torch.full((5,), 7.0), torch.full((3,), 7.0)]   # garbage: the first step must not read it
    ps_ref, bufs_ref = [t.clone() for t in ps], [None, None]
    skw = dict(weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.2, nesterov=False, maximize=False)
    npu.sgd(ps, gs, bufs, **skw, is_first_step=True)
    tsgd.sgd(ps_ref, gs, bufs_ref, foreach=False, **skw)
    npu.sgd(ps, gs, bufs, **skw)
    tsgd.sgd(ps_ref, gs, bufs_ref, foreach=False, **skw)
    for a, b in zip(ps + bufs, ps_ref + bufs_ref, strict=True):
        torch.testing.assert_close(a, b)


def test_npu_apply_adam_w_matches_torch_npu_formula() -> None:
    torch.manual_seed(0)
    var, m, v, grad = torch.randn(30), torch.randn(30), torch.rand(30), torch.randn(30)
    lr, wd, b1, b2, eps, b1p, b2p = 0.01, 0.1, 0.9, 0.999, 1e-8, 0.9 ** 3, 0.999 ** 3
    # torch_npu's documented formula (beta*_power are beta^(step - 1))
    m_ref = m * b1 + (1 - b1) * grad
    v_ref = v * b2 + (1 - b2) * grad * grad
    var_ref = var * (1 - lr * wd) - lr * m_ref / (1 - b1p * b1) / ((v_ref / (1 - b2p * b2)).sqrt() + eps)
    out = npu.npu_apply_adam_w(b1p, b2p, lr, wd, b1, b2, eps, grad, None, False, False, var=var, m=m, v=v)
    assert out[0] is var and out[1] is m and out[2] is v
    torch.testing.assert_close(var, var_ref)
    torch.testing.assert_close(m, m_ref)
    torch.testing.assert_close(v, v_ref)


def test_bad_input_errors() -> None:
    with pytest.raises(RuntimeError, match="input: expected a floating point tensor"):
        npu.softmax(torch.arange(6, dtype=torch.int32).reshape(2, 3), -1)
    with pytest.raises(RuntimeError, match=r"size of tensor a \(4\) must match the size of tensor b \(5\)"):
        npu.add(torch.randn(3, 4), torch.randn(5))
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        npu.relu(torch.arange(4))
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[5\]"):
        npu.layer_norm(torch.randn(3, 4), [5])
    with pytest.raises(RuntimeError, match="npu_apply_adam_w\\(\\): m has shape"):
        npu.npu_apply_adam_w(0.9, 0.9, 0.1, 0.0, 0.9, 0.9, 1e-8, torch.randn(4), None, False, False,
                             var=torch.randn(4), m=torch.randn(5), v=torch.randn(4))
    with pytest.raises(RuntimeError, match="Expected a value of type 'Tensor' for argument 'other'"):
        npu.add(torch.randn(3), "x")
    with pytest.raises(RuntimeError, match="found at least two devices, cpu and meta! .when checking argument for "
                                           "argument weight in method npu::linear"):
        npu.linear(torch.randn(3, 4), torch.randn(5, 4, device="meta"))
    assert npu.softmax(torch.randn(3, 4, device="meta"), -1).shape == (3, 4)   # meta: the fake kernel


def test_bad_input_leaves_optimizer_state_untouched() -> None:
    p, m, v = torch.randn(4), torch.randn(4), torch.rand(4)
    before = [t.clone() for t in (p, m, v)]
    with pytest.raises(RuntimeError):
        npu.adamw_(p, torch.randn(5), m, v, None, torch.tensor(0.0), amsgrad=False, beta1=0.9, beta2=0.999, lr=0.1,
                   weight_decay=0.0, eps=1e-8, maximize=False)
    for a, b in zip((p, m, v), before, strict=True):
        assert torch.equal(a, b)


def test_gil_released_while_a_kernel_runs() -> None:
    """One long launch: with the GIL held for the whole kernel the main thread could not run at all
    until it returned (at most a tick at its ends); released, it ticks all along. (Three short launches
    on a fast AVX-512 host gave the main thread too few 0.5 ms ticks to tell the two apart.)"""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    npu.matmul(a, b)   # compiled before timing
    span: list[float] = []

    def worker() -> None:
        t0 = time.perf_counter()
        npu.matmul(a, b)
        span.extend([t0, time.perf_counter()])
    ticks: list[float] = []
    th = threading.Thread(target=worker)
    th.start()
    while th.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.0005)
    th.join()
    inside = [t for t in ticks if span[0] < t < span[1]]
    assert len(inside) >= 4, (len(inside), span[1] - span[0])


def test_profiler_hook_sees_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_bridge import ops
    seen: list[str] = []

    class Prof:
        _ACTIVE = [object()]

        @staticmethod
        def _run_profiled(name, fn, args, kwargs):  # type: ignore[no-untyped-def]
            seen.append(name)
            return fn(*args, **kwargs)
    monkeypatch.setattr(ops, "_prof", Prof)
    x = torch.randn(5, requires_grad=True)
    npu.relu(x).sum().backward()
    assert seen == ["relu", "relu_backward"]


def test_impl_table_is_keyed_for_other_dispatch_keys() -> None:
    from torch_bridge import ops
    assert set(ops.IMPLS) >= {q for q in SCHEMAS if q != "dropout"}
    assert "softmax_backward" in ops.IMPLS and "max_backward.dim" in ops.IMPLS
    assert ops.IMPLS["relu"](torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]


def test_torch_compile_aot_eager_traces_forward_and_backward() -> None:
    torch.manual_seed(0)
    x, w, b, g = torch.randn(4, 16), torch.randn(8, 16), torch.randn(8), torch.randn(8)
    t = torch.randint(0, 8, (4,))

    def step(x, w, b, g):  # type: ignore[no-untyped-def]
        h = npu.gelu(npu.linear(x, w, b))
        h = npu.npu_rms_norm(h, g)[0]
        return npu.cross_entropy(npu.mul(h, 2.0), t)

    def grads(f):  # type: ignore[no-untyped-def]
        ps = [p.clone().requires_grad_() for p in (x, w, b, g)]
        loss = f(*ps)
        loss.backward()
        return loss.detach(), [p.grad for p in ps[1:]]
    ref = grads(step)
    got = grads(torch.compile(step, backend="aot_eager", fullgraph=True))
    torch.testing.assert_close(got[0], ref[0])
    for a, b_ in zip(got[1], ref[1], strict=True):
        torch.testing.assert_close(a, b_)


def test_docs_list_every_schema() -> None:
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[2] / "docs" / "torch_ops.md").read_text()
    for schema in SCHEMAS.values():
        assert f"`{schema}`" in doc, schema


def test_sdpa_dropout_backward_uses_the_forwards_mask() -> None:
    # y = A v with A the dropped-out attention of (q, k): the same seed gives A back as y(v = I), and
    # the gradient of sum(y * w) with respect to v must be A^T w
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 6, 8)
    v = torch.randn(1, 2, 6, 6, requires_grad=True)
    w = torch.randn(1, 2, 5, 6)
    torch.manual_seed(5)
    (npu.scaled_dot_product_attention(q, k, v, dropout_p=0.4) * w).sum().backward()
    torch.manual_seed(5)
    a = npu.scaled_dot_product_attention(q, k, torch.eye(6).expand(1, 2, 6, 6).contiguous(), dropout_p=0.4)
    assert bool((a == 0).any())   # some weights dropped
    torch.testing.assert_close(v.grad, a.transpose(-1, -2) @ w, rtol=1e-4, atol=1e-5)


def test_npu_fusion_attention_dropout_backward_uses_the_forwards_seed() -> None:
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 8, 8)
    v = torch.randn(1, 2, 8, 8, requires_grad=True)
    w = torch.randn(1, 2, 5, 8)
    torch.manual_seed(7)
    out = npu.npu_fusion_attention(q, k, v, 2, "BNSD", scale=0.3, keep_prob=0.6)
    assert out[4] != 0   # the seed torch_npu returns
    (out[0] * w).sum().backward()
    torch.manual_seed(7)
    a = npu.npu_fusion_attention(q, k, torch.eye(8).expand(1, 2, 8, 8).contiguous(), 2, "BNSD", scale=0.3,
                                 keep_prob=0.6)[0]
    torch.testing.assert_close(v.grad, a.transpose(-1, -2) @ w, rtol=1e-4, atol=1e-5)


def test_in_place_ops_bump_version_counters() -> None:
    x = torch.randn(3, requires_grad=True)
    y = npu.exp(x)   # exp's backward reads its result
    with torch.no_grad():
        npu.fill_(y, 0.0)
    assert torch.equal(y, torch.zeros(3))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    ps = [torch.randn(3)]
    v0 = ps[0]._version
    npu.sgd(ps, [torch.randn(3)], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0, nesterov=False,
            maximize=False)
    assert ps[0]._version > v0


@pytest.mark.parametrize("bad", [{"lr": -1.0}, {"nesterov": True, "dampening": 0.5}])
def test_sgd_first_step_checks_before_it_zeroes_the_buffers(bad: dict) -> None:
    p, g, buf = torch.randn(5), torch.randn(5), torch.full((5,), 7.0)
    p0 = p.clone()
    kw = dict(weight_decay=0.0, momentum=0.9, lr=0.1, dampening=0.0, nesterov=False, maximize=False) | bad
    with pytest.raises(ValueError):
        torch.ops.npu.sgd([p], [g], [buf], is_first_step=True, **kw)
    assert torch.equal(p, p0) and torch.equal(buf, torch.full((5,), 7.0))
