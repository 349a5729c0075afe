"""op_library.optim: several steps against torch.optim.AdamW / Adam / SGD, packed lists in one launch,
validation before any write."""
from __future__ import annotations

from typing import Any

import pytest
import torch

import dsl
import op_library.optim as O

SHAPES = [(37,), (5, 1025), (1,), (0,), (3, 4, 5)]


def _state(shapes: list[tuple[int, ...]], dtype: torch.dtype = torch.float32) -> dict[str, list[torch.Tensor]]:
    return {k: [torch.zeros(s, dtype=dtype) for s in shapes] for k in ("m", "v", "vmax")}


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("cls", ["AdamW", "Adam"])
def test_adam_five_steps_like_torch(amsgrad: bool, maximize: bool, cls: str) -> None:
    torch.manual_seed(0)
    ps = [torch.randn(s) for s in SHAPES]
    tp = [p.clone().requires_grad_() for p in ps]
    opt = getattr(torch.optim, cls)(tp, lr=3e-3, betas=(0.8, 0.99), weight_decay=0.05, amsgrad=amsgrad,
                                    maximize=maximize, eps=1e-6, foreach=False)
    st = _state(SHAPES)
    steps = [torch.tensor(0.0) for _ in SHAPES]
    fn = O.adamw if cls == "AdamW" else O.adam
    for _ in range(5):
        gs = [torch.randn(s) for s in SHAPES]
        for t, g in zip(tp, gs, strict=True):
            t.grad = g.clone()
        opt.step()
        fn(ps, gs, st["m"], st["v"], st["vmax"], steps, amsgrad=amsgrad, beta1=0.8, beta2=0.99, lr=3e-3,
           weight_decay=0.05, eps=1e-6, maximize=maximize)
    for i, t in enumerate(tp):
        s = opt.state[t]
        torch.testing.assert_close(ps[i], t.detach())
        torch.testing.assert_close(st["m"][i], s["exp_avg"])
        torch.testing.assert_close(st["v"][i], s["exp_avg_sq"])
        if amsgrad:
            torch.testing.assert_close(st["vmax"][i], s["max_exp_avg_sq"])
        assert steps[i].item() == s["step"].item() == 5


@pytest.mark.parametrize("momentum,nesterov,dampening,wd,maximize", [
    (0.0, False, 0.0, 0.0, False), (0.9, False, 0.1, 0.01, False), (0.9, True, 0.0, 0.01, True),
    (0.5, False, 0.0, 0.0, True)])
def test_sgd_five_steps_like_torch(momentum: float, nesterov: bool, dampening: float, wd: float,
                                   maximize: bool) -> None:
    torch.manual_seed(1)
    ps = [torch.randn(s) for s in SHAPES]
    tp = [p.clone().requires_grad_() for p in ps]
    opt = torch.optim.SGD(tp, lr=0.05, momentum=momentum, nesterov=nesterov, dampening=dampening, weight_decay=wd,
                          maximize=maximize, foreach=False)
    bufs: list[Any] = [None] * len(SHAPES)
    for _ in range(5):
        gs = [torch.randn(s) for s in SHAPES]
        for t, g in zip(tp, gs, strict=True):
            t.grad = g.clone()
        opt.step()
        O.sgd(ps, gs, bufs, weight_decay=wd, momentum=momentum, lr=0.05, dampening=dampening, nesterov=nesterov,
              maximize=maximize)
    for i, t in enumerate(tp):
        torch.testing.assert_close(ps[i], t.detach())
        if momentum:
            torch.testing.assert_close(bufs[i], opt.state[t]["momentum_buffer"])
        else:
            assert bufs[i] is None


def _packed(shapes: list[tuple[int, ...]], dtype: torch.dtype = torch.float32,
            fill: str = "randn") -> tuple[torch.Tensor, list[torch.Tensor]]:
    n = sum(torch.Size(s).numel() for s in shapes)
    flat = torch.randn(n).to(dtype) if fill == "randn" else torch.zeros(n, dtype=dtype)
    out, o = [], 0
    for s in shapes:
        k = torch.Size(s).numel()
        out.append(flat[o:o + k].view(s))
        o += k
    return flat, out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_lists_run_as_one_launch(dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    shapes = [(37,), (5, 1025), (1,), (64, 3)]
    _, ps = _packed(shapes, dtype)
    _, gs = _packed(shapes, dtype)
    _, ms = _packed(shapes, dtype, "zeros")
    _, vs = _packed(shapes, dtype, "zeros")
    rp = [p.float() for p in ps]   # copies in f32, before the step
    steps = [torch.tensor(0.0) for _ in shapes]
    kw = dict(amsgrad=False, beta1=0.9, beta2=0.999, lr=1e-2, weight_decay=0.1, eps=1e-8, maximize=False)
    with dsl.record() as rec:
        O.adamw(ps, gs, ms, vs, [], steps, **kw)
    assert rec.kernels() == ["adamw_kernel"]
    import torch.optim.adamw as TA

    TA.adamw(rp, [g.float() for g in gs], [torch.zeros_like(r) for r in rp], [torch.zeros_like(r) for r in rp], [],
             [torch.tensor(0.0) for _ in shapes], foreach=False, **kw)
    for p, r in zip(ps, rp, strict=True):
        torch.testing.assert_close(p, r.to(dtype))
    # separate tensors: one launch each
    qs = [torch.randn(s) for s in shapes]
    with dsl.record() as rec:
        O.sgd(qs, [torch.randn(s) for s in shapes], [None] * 4, weight_decay=0.0, momentum=0.9, lr=0.1,
              dampening=0.0, nesterov=False, maximize=False)
    assert rec.kernels() == ["sgd_kernel"] * 4


def _snapshot(*lists: list[Any]) -> list[torch.Tensor]:
    return [t.clone() for lst in lists for t in lst if t is not None]


@pytest.mark.parametrize("bad,match,exc", [
    (lambda a: a["grads"].pop(), "grads has 1 tensors but params has 2", ValueError),
    (lambda a: a["exp_avgs"].__setitem__(1, torch.zeros(4)), r"exp_avgs\[1\] has shape \[4\]", RuntimeError),
    (lambda a: a["grads"].__setitem__(1, torch.zeros(3, 5, dtype=torch.float16)), r"grads\[1\] has dtype", RuntimeError),
    (lambda a: a["state_steps"].__setitem__(0, 3), r"state_steps\[0\] must be a one-element Tensor", TypeError),
    (lambda a: a.__setitem__("lr", -1.0), "Invalid learning rate: -1.0", ValueError),
    (lambda a: a.__setitem__("beta2", 1.0), "Invalid beta parameter at index 1", ValueError),
    (lambda a: a.__setitem__("amsgrad", True), r"max_exp_avg_sqs has 0 tensors", ValueError),
    (lambda a: a["exp_avg_sqs"].__setitem__(1, torch.zeros(5, 3).t()), "must be contiguous", RuntimeError),
    (lambda a: a["params"].__setitem__(1, torch.zeros(3, 5, dtype=torch.int32)), "must be float32", RuntimeError),
], ids=["length", "shape", "dtype", "step", "lr", "beta2", "amsgrad list", "non-contiguous state", "int param"])
def test_adamw_bad_call_changes_nothing(bad: Any, match: str, exc: type) -> None:
    a: dict[str, Any] = {"params": [torch.randn(4), torch.randn(3, 5)], "grads": [torch.randn(4), torch.randn(3, 5)],
                         "exp_avgs": [torch.randn(4), torch.randn(3, 5)], "exp_avg_sqs": [torch.rand(4), torch.rand(3, 5)],
                         "max_exp_avg_sqs": [], "state_steps": [torch.tensor(1.0), torch.tensor(1.0)],
                         "amsgrad": False, "beta1": 0.9, "beta2": 0.999, "lr": 1e-3, "weight_decay": 0.01,
                         "eps": 1e-8, "maximize": False}
    bad(a)
    lists = [a[k] for k in ("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs")]
    before = _snapshot(*lists)
    steps = [s.clone() if isinstance(s, torch.Tensor) else s for s in a["state_steps"]]
    with pytest.raises(exc, match=match):
        O.adamw(a["params"], a["grads"], a["exp_avgs"], a["exp_avg_sqs"], a["max_exp_avg_sqs"], a["state_steps"],
                amsgrad=a["amsgrad"], beta1=a["beta1"], beta2=a["beta2"], lr=a["lr"],
                weight_decay=a["weight_decay"], eps=a["eps"], maximize=a["maximize"])
    after = _snapshot(*lists)
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))
    assert all((s == t) if not isinstance(s, torch.Tensor) else torch.equal(s, t)
               for s, t in zip(steps, a["state_steps"], strict=True))


def test_sgd_bad_call_changes_nothing() -> None:
    ps, gs = [torch.randn(4), torch.randn(6)], [torch.randn(4), torch.randn(5)]
    bufs: list[Any] = [None, torch.zeros(6)]
    before = _snapshot(ps, bufs)
    with pytest.raises(RuntimeError, match=r"d_p_list\[1\] has shape \[5\] but params\[1\] has \[6\]"):
        O.sgd(ps, gs, bufs, weight_decay=0.0, momentum=0.9, lr=0.1, dampening=0.0, nesterov=False, maximize=False)
    assert bufs[0] is None
    assert all(torch.equal(x, y) for x, y in zip(before, _snapshot(ps, bufs), strict=True))
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening"):
        O.sgd(ps, [torch.randn(4), torch.randn(6)], bufs, weight_decay=0.0, momentum=0.9, lr=0.1, dampening=0.5,
              nesterov=True, maximize=False)
    assert all(torch.equal(x, y) for x, y in zip(before, _snapshot(ps, bufs), strict=True))
