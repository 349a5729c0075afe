"""torch_bridge.custom_op: DSL kernels as real torch.library ops (schema, fake, autograd, opcheck)."""
from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from swish import swish as swish_any
from swish import swish_backward as swish_any_bwd

import dsl
from dsl import GM, Const, f32, i32
from torch_bridge.custom import REGISTERED, custom_op

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve()


# ---------------------------------------------------------------------------------------------- kernels
@dsl.kernel
def swish_fwd(x: GM[f32], y: GM[f32], TILE: Const[int] = 4096):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        y[t] = xt * dsl.sigmoid(xt)


@dsl.kernel
def swish_bwd(x: GM[f32], dy: GM[f32], dx: GM[f32], TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        s = dsl.sigmoid(xt)
        dx[t] = dy[t] * s * (1.0 + xt * (1.0 - s))


@dsl.kernel
def scaled_add(x: GM, y: GM, z: GM, alpha: float = 1.0, TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        z[t] = x[t] + y[t] * alpha


@dsl.kernel
def scaled_add_bwd(x: GM, y: GM, dz: GM, dx: GM, dy: GM, alpha: float = 1.0, TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        g = dz[t]
        dx[t] = g * 1.0
        dy[t] = g * alpha


@dsl.kernel
def sincos(x: GM[f32], s: GM[f32], c: GM[f32], TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        s[t] = dsl.sin(xt)
        c[t] = dsl.cos(xt)


@dsl.kernel
def sincos_bwd(x: GM[f32], ds: GM[f32], dc: GM[f32], dx: GM[f32], TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        xt = x[t]
        dx[t] = ds[t] * dsl.cos(xt) - dc[t] * dsl.sin(xt)


@dsl.kernel
def sig(x: GM, y: GM, TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.sigmoid(x[t])


@dsl.kernel
def sig_bwd(y: GM, dy: GM, dx: GM, TILE: Const[int] = 2048):
    for t in dsl.tiles(y.shape[0], TILE):
        yt = y[t]
        dx[t] = dy[t] * yt * (1.0 - yt)


@dsl.kernel
def rowmax(x: GM[f32, 2], m: GM[f32, 2], R: Const[int] = 8):
    for r in dsl.tiles(x.shape[0], R):
        m[r, 0:1] = dsl.max(x[r, :], axis=1, keepdims=True)


@dsl.kernel
def take(w: GM[f32, 2], idx: GM[i32], y: GM[f32, 2], R: Const[int] = 8):
    for t in dsl.tiles(idx.shape[0], R):
        for r in dsl.range(t.len):
            j = t.start + r
            y[j, :] = w[idx[j], :]


@dsl.kernel
def gelu_k(x: GM, y: GM, MODE: Const[str] = "none", TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        if MODE == "tanh":
            y[t] = dsl.gelu(x[t], approximate="tanh")
        else:
            y[t] = dsl.gelu(x[t])


@dsl.kernel
def swish_bwd_too_big(x: GM[f32], dy: GM[f32], dx: GM[f32], BIG: Const[int] = 1 << 16):
    for t in dsl.tiles(x.shape[0], BIG):
        dx[t] = dy[t] * dsl.sigmoid(x[t])


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture
def ops() -> Iterator[list]:
    """Ops made by a test are removed after it (names can be reused by the next test)."""
    made: list = []
    yield made
    for op in made:
        op.remove()


def make(ops: list, *args, **kwargs):  # type: ignore[no-untyped-def]
    op = custom_op(*args, **kwargs)
    ops.append(op)
    return op


def opcheck(op, args, kwargs=None) -> None:  # type: ignore[no-untyped-def]
    res = torch.library.opcheck(op, args, kwargs or {})
    assert all(v == "SUCCESS" for v in res.values()), res


# ---------------------------------------------------------------------------------------------- schema and values
def test_swish_forward_backward_and_torch_ops(ops: list) -> None:
    sw = make(ops, "cotest::swish", forward=swish_fwd, backward=swish_bwd)
    assert sw.schema == "(Tensor x) -> Tensor"
    assert sw.backward_schema == "(Tensor x, Tensor grad_y) -> Tensor"
    x = torch.randn(5000, requires_grad=True)
    y = sw(x)
    y.sum().backward()
    xr = x.detach().clone().requires_grad_()
    F.silu(xr).sum().backward()
    torch.testing.assert_close(y, F.silu(xr), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-6, rtol=1e-6)
    assert torch.equal(torch.ops.cotest.swish(x.detach()), y.detach())
    assert y.grad_fn is not None and "swish" in type(y.grad_fn).__name__
    opcheck(sw.op, (torch.randn(100, requires_grad=True),))
    opcheck(sw.op, (torch.randn(0, requires_grad=True),))


def test_non_contiguous_and_0d_inputs(ops: list) -> None:
    sw = make(ops, "cotest::swish", forward=swish_fwd, backward=swish_bwd)
    x = torch.randn(300)[::3]
    torch.testing.assert_close(sw(x), F.silu(x), atol=1e-6, rtol=1e-6)
    s = torch.tensor(0.7, requires_grad=True)
    y = sw(s)
    y.backward()
    assert y.shape == () and s.grad is not None and s.grad.shape == ()
    torch.testing.assert_close(y, F.silu(s), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_generic_kernel_dtypes_flatten_and_grad(ops: list, dtype: torch.dtype) -> None:
    """A bare `GM` kernel serves every dtype (one specialisation each); flatten=True takes any rank."""
    sw = make(ops, "cotest::swish_any", forward=swish_any, backward=swish_any_bwd, flatten=True,
              dtypes=[torch.float32, torch.float16, torch.bfloat16])
    x = torch.randn(7, 33).to(dtype).requires_grad_()
    dy = torch.randn(7, 33).to(dtype)
    y = sw(x)
    y.backward(dy)
    xr = x.detach().float().requires_grad_()
    F.silu(xr).backward(dy.float())
    tol = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    assert y.dtype == dtype and y.shape == (7, 33) and x.grad is not None and x.grad.dtype == dtype
    torch.testing.assert_close(y.float(), F.silu(xr).to(dtype).float(), atol=tol, rtol=tol)
    torch.testing.assert_close(x.grad.float(), xr.grad.to(dtype).float(), atol=4 * tol, rtol=4 * tol)
    opcheck(sw.op, (torch.randn(4, 9).to(dtype).requires_grad_(),))


def test_several_inputs_and_a_scalar(ops: list) -> None:
    op = make(ops, "cotest::scaled_add", forward=scaled_add, backward=scaled_add_bwd)
    assert op.schema == "(Tensor x, Tensor y, float alpha=1.0) -> Tensor"
    x, y = torch.randn(1000, requires_grad=True), torch.randn(1000, requires_grad=True)
    z = op(x, y, 0.5)
    (z * 2).sum().backward()
    torch.testing.assert_close(z, x + 0.5 * y)
    assert x.grad is not None and y.grad is not None
    assert torch.equal(x.grad, torch.full((1000,), 2.0)) and torch.equal(y.grad, torch.full((1000,), 1.0))
    torch.testing.assert_close(torch.ops.cotest.scaled_add(x, y), x + y)  # the default alpha
    opcheck(op.op, (torch.randn(50, requires_grad=True), torch.randn(50, requires_grad=True), 3.0))
    opcheck(op.op, (torch.randn(50).half(), torch.randn(50).half(), -1.0))


@dsl.kernel
def scaled_add_bwd_y(x: GM, y: GM, dz: GM, dy: GM, alpha: float = 1.0, TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        dy[t] = dz[t] * alpha


def test_grad_inputs_chosen(ops: list) -> None:
    op = make(ops, "cotest::scaled_add_y", forward=scaled_add, backward=scaled_add_bwd_y, grad_inputs=("y",))
    assert op.backward_schema == "(Tensor x, Tensor y, Tensor grad_z, float alpha) -> Tensor"
    x, y = torch.randn(100, requires_grad=True), torch.randn(100, requires_grad=True)
    op(x, y, 3.0).sum().backward()
    assert x.grad is None and y.grad is not None and torch.equal(y.grad, torch.full((100,), 3.0))
    with pytest.raises(ValueError, match=r"grad_inputs names \['z'\], which are not tensor inputs \(x, y\)"):
        custom_op("cotest::bad", forward=scaled_add, backward=scaled_add_bwd_y, grad_inputs=("z",))


def test_register_for_another_dispatch_key(ops: list) -> None:
    op = make(ops, "cotest::swish_pu1", forward=swish_fwd, backward=swish_bwd)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert has("cotest::swish_pu1", "CPU") and not has("cotest::swish_pu1", "PrivateUse1")
    op.register_for("PrivateUse1")
    assert has("cotest::swish_pu1", "PrivateUse1") and has("cotest::swish_pu1_backward", "PrivateUse1")


def test_two_outputs_and_an_unused_grad(ops: list) -> None:
    op = make(ops, "cotest::sincos", forward=sincos, backward=sincos_bwd, outputs=2)
    assert op.schema == "(Tensor x) -> (Tensor, Tensor)"
    x = torch.randn(777, requires_grad=True)
    s, c = op(x)
    torch.testing.assert_close(s, torch.sin(x))
    torch.testing.assert_close(c, torch.cos(x))
    s.sum().backward()  # c unused: its grad arrives as zeros
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.cos(x.detach()))
    x.grad = None
    s, c = op(x)
    (s * 2 + c * 3).sum().backward()
    torch.testing.assert_close(x.grad, 2 * torch.cos(x.detach()) - 3 * torch.sin(x.detach()))
    opcheck(op.op, (torch.randn(64, requires_grad=True),))


def test_save_outputs(ops: list) -> None:
    op = make(ops, "cotest::sig", forward=sig, backward=sig_bwd, save="outputs")
    assert op.backward_schema == "(Tensor x, Tensor y, Tensor grad_y) -> Tensor"
    x = torch.randn(300, requires_grad=True)
    op(x).sum().backward()
    xr = x.detach().clone().requires_grad_()
    torch.sigmoid(xr).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    opcheck(op.op, (torch.randn(30, requires_grad=True),))


def test_output_shape_rules(ops: list) -> None:
    a = make(ops, "cotest::rowmax", forward=rowmax, outputs="[x.0, 1]")
    b = make(ops, "cotest::rowmax2", forward=rowmax, outputs=lambda x: ((x.shape[0], 1), torch.float32))
    c = make(ops, "cotest::rowmax3", forward=rowmax, outputs={"m": "[x.0, 1]:f32"})
    x = torch.randn(37, 129)
    for op in (a, b, c):
        torch.testing.assert_close(op(x), x.amax(1, keepdim=True))
        opcheck(op.op, (torch.randn(13, 20),))
    t = make(ops, "cotest::take", forward=take, outputs="[idx.0, w.-1]")
    assert t.schema == "(Tensor w, Tensor idx) -> Tensor"
    w, idx = torch.randn(10, 16), torch.tensor([3, 0, 9, 3], dtype=torch.int32)
    assert torch.equal(t(w, idx), w[idx.long()])
    opcheck(t.op, (w, idx))


def test_exposed_const_and_bound_consts(ops: list) -> None:
    g = make(ops, "cotest::gelu", forward=gelu_k, expose=("MODE",), consts={"TILE": 256})
    assert g.schema == "(Tensor x, str MODE='none') -> Tensor"
    x = torch.randn(1000)
    torch.testing.assert_close(g(x), F.gelu(x), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(g(x, "tanh"), F.gelu(x, approximate="tanh"), atol=1e-6, rtol=1e-6)
    opcheck(g.op, (torch.randn(40), "tanh"))


def test_cores(ops: list) -> None:
    a = make(ops, "cotest::swish2", forward=swish_fwd[2], backward=swish_bwd[3])
    b = make(ops, "cotest::swish5", forward=swish_fwd, backward=swish_bwd, cores=5)
    x = torch.randn(20000, requires_grad=True)
    with dsl.record() as rec:
        a(x).sum().backward()
        b(x)
    assert [(name, run.block_dim) for name, run in rec.runs] == [("swish_fwd", 2), ("swish_bwd", 3), ("swish_fwd", 5)]


def test_compile_fullgraph(ops: list) -> None:
    sw = make(ops, "cotest::swish", forward=swish_fwd, backward=swish_bwd, flatten=True)
    lin = torch.nn.Linear(8, 8)

    def f(x: torch.Tensor) -> torch.Tensor:
        return sw(lin(x)).sum()

    x = torch.randn(4, 8)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    compiled(x).backward()
    got = [p.grad.clone() for p in lin.parameters()]  # type: ignore[union-attr]
    lin.zero_grad()
    F.silu(lin(x)).sum().backward()
    for g, p in zip(got, lin.parameters()):
        torch.testing.assert_close(g, p.grad)


# ---------------------------------------------------------------------------------------------- bad input
def test_wrong_dtype_and_rank_name_the_argument(ops: list) -> None:
    sw = make(ops, "cotest::swish", forward=swish_fwd, backward=swish_bwd)
    with pytest.raises(RuntimeError, match=re.escape("cotest::swish: expected argument 'x' to have dtype "
                                                     "torch.float32 (swish_fwd declares 'x: GM[f32]'), but got "
                                                     "torch.float16")):
        sw(torch.randn(8).half())
    with pytest.raises(RuntimeError, match="expected argument 'x' to have dtype"):  # the fake kernel checks too
        torch.compile(lambda t: sw(t), backend="aot_eager", fullgraph=True)(torch.randn(8, dtype=torch.float64))
    rm = make(ops, "cotest::rowmax", forward=rowmax, outputs="[x.0, 1]")
    with pytest.raises(RuntimeError, match=re.escape("expected argument 'x' to be a 2-D tensor (rowmax declares "
                                                     "'x: GM[f32, 2]'), but got a 1-D tensor of shape [5]")):
        rm(torch.randn(5))
    with pytest.raises(RuntimeError, match="expected argument 'idx' to have dtype torch.int32"):
        make(ops, "cotest::take", forward=take, outputs="[idx.0, w.1]")(torch.randn(4, 4), torch.tensor([1]))
    with pytest.raises(RuntimeError, match="for argument 'alpha'"):  # torch's own schema check
        make(ops, "cotest::sa", forward=scaled_add)(torch.randn(3), torch.randn(3), "x")


def test_kernel_failure_carries_the_dsl_location_and_leaves_inputs(ops: list) -> None:
    t = make(ops, "cotest::take", forward=take, outputs="[idx.0, w.1]")
    w, idx = torch.randn(10, 16), torch.tensor([1, 2, 10], dtype=torch.int32)
    w0, idx0 = w.clone(), idx.clone()
    line = HERE.read_text().splitlines().index("            y[j, :] = w[idx[j], :]") + 1
    with pytest.raises(dsl.KernelError, match=re.escape(f"{HERE}:{line}:")) as ei:
        t(w, idx)
    assert ei.value.code == "E404" and "10" in ei.value.message
    assert torch.equal(w, w0) and torch.equal(idx, idx0)


def test_backward_failure_leaves_grads_and_parameters(ops: list) -> None:
    sw = make(ops, "cotest::swish_badbwd", forward=swish_fwd, backward=swish_bwd_too_big, flatten=True)
    lin = torch.nn.Linear(4, 4)
    w0 = lin.weight.detach().clone()
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    loss = sw(lin(torch.randn(3, 4))).sum()
    with pytest.raises(dsl.KernelError, match=r"test_custom_op\.py:\d+:\d+: error\[E301\]"):
        loss.backward()
    assert lin.weight.grad is None and lin.bias.grad is None
    opt.step()  # nothing to apply
    assert torch.equal(lin.weight, w0)


def test_no_backward_is_not_differentiable(ops: list) -> None:
    sw = make(ops, "cotest::swish_nobwd", forward=swish_fwd)
    assert sw.backward_op is None and sw.backward_schema is None
    x = torch.randn(8)
    torch.testing.assert_close(sw(x), F.silu(x))
    opcheck(sw.op, (x,))
    y = sw(x.requires_grad_())
    with pytest.raises(RuntimeError, match="cotest::swish_nobwd has no backward: register it with "
                                           "custom_op\\(..., backward=<a backward kernel>\\)"):
        y.sum().backward()


def test_register_twice(ops: list) -> None:
    make(ops, "cotest::twice", forward=swish_fwd)
    with pytest.raises(RuntimeError, match=r"cotest::twice is already registered \(at .*test_custom_op.py:\d+\); "
                                           r"pick another name, or pass replace=True"):
        custom_op("cotest::twice", forward=sig)
    op = make(ops, "cotest::twice", forward=sig, replace=True)
    x = torch.randn(10)
    torch.testing.assert_close(torch.ops.cotest.twice(x), torch.sigmoid(x))
    assert REGISTERED["cotest::twice"] is op


def test_definition_errors() -> None:
    with pytest.raises(ValueError, match=re.escape("backward kernel swish_bwd has 3 GM parameters (x, dy, dx) but "
                                                   "the layout is 4: x, y, grad_y, grad_x")):
        custom_op("cotest::bad", forward=swish_fwd, backward=swish_bwd, save="both")
    with pytest.raises(ValueError, match="output rule 'z' names 'z', which is not a tensor input"):
        custom_op("cotest::bad", forward=swish_fwd, outputs="z")
    with pytest.raises(ValueError, match="cannot read output rule"):
        custom_op("cotest::bad", forward=swish_fwd, outputs="x.0")
    with pytest.raises(ValueError, match=r"consts \['NOPE'\] are not parameters"):
        custom_op("cotest::bad", forward=swish_fwd, consts={"NOPE": 1})
    with pytest.raises(ValueError, match="name must look like 'namespace::op'"):
        custom_op("swish", forward=swish_fwd)
    with pytest.raises(TypeError, match="forward must be a @dsl.kernel"):
        custom_op("cotest::bad", forward=lambda x: x)
    op = custom_op("cotest::bad", forward=swish_fwd, outputs="x:f16")
    try:
        with pytest.raises(RuntimeError, match=re.escape("output 0 ('y') would be torch.float16 by the output rule, "
                                                         "but swish_fwd declares 'y: GM[f32]'")):
            op(torch.randn(3))
    finally:
        op.remove()


# ---------------------------------------------------------------------------------------------- the example
def _example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("custom_swish_example", ROOT / "examples" / "custom_swish.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_example_models_train_and_match_torch() -> None:
    ex = _example()
    for way in ("custom_op", "function"):
        losses, ref = ex.train(way, steps=12), ex.train("torch", steps=12)
        assert losses[-1] < 0.7 * losses[0]
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref), atol=1e-5, rtol=1e-4)


def test_walkthrough_runs(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("custom_op_walkthrough", ROOT / "examples" / "custom_op_walkthrough.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    try:
        mod.main()
    finally:
        for name in ("walk::leaky", "walk::row_stats"):
            REGISTERED[name].remove()
    out = capsys.readouterr().out
    assert out.count("'test_aot_dispatch_dynamic': 'SUCCESS'") == 2 and "compiled == eager: True" in out
    losses = [float(v) for v in re.findall(r"loss ([\d.]+)", out)]
    assert len(losses) == 5 and losses[-1] < losses[0]
