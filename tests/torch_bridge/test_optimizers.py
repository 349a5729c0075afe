"""torch_bridge.optim against torch.optim: 20 steps with the same gradients give the same parameters
and state (f32 rounding only), state_dicts move both ways, one launch per group for packed params,
and a bad step validates everything before it writes anything."""
from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch

import dsl
import torch_bridge  # noqa: F401
import torch_bridge.optim as topt

torch.manual_seed(0)
SHAPES = [(7, 5), (5,), (3, 4, 2), (1,)]


def _params() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randn(s, generator=g).requires_grad_() for s in SHAPES]


def _grads(step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g) * (0.1 if i % 2 else 1.0) for i, s in enumerate(SHAPES)]


def _run(opt_cls: Any, kw: dict[str, Any], steps: int = 20) -> tuple[list[torch.Tensor], Any]:
    ps = _params()
    opt = opt_cls(ps, **kw)
    for i in range(steps):
        for p, g in zip(ps, _grads(i), strict=True):
            p.grad = g.clone()
        opt.step()
    return ps, opt


def _assert_same(ps_a: list[torch.Tensor], ps_b: list[torch.Tensor], opt_a: Any, opt_b: Any) -> None:
    # f32 rounding: the kernel evaluates torch's single-tensor formulas in the same order, except that
    # division / sqrt of a vector unit may round differently by an ulp; 20 steps of updates of size lr
    # keep the difference at a few ulps of the parameters
    for a, b in zip(ps_a, ps_b, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6)
    for a, b in zip(ps_a, ps_b, strict=True):
        sa, sb = opt_a.state[a], opt_b.state[b]
        assert set(sa) == set(sb)
        for k in sa:
            torch.testing.assert_close(sa[k].float(), sb[k].float(), rtol=1e-5, atol=1e-6, msg=k)


ADAM_OPTS = [{}, {"weight_decay": 0.1}, {"amsgrad": True}, {"maximize": True}, {"betas": (0.3, 0.9), "lr": 0.01},
             {"amsgrad": True, "maximize": True, "weight_decay": 0.05, "eps": 1e-6}]


@pytest.mark.parametrize("kw", ADAM_OPTS, ids=str)
def test_adamw_matches_torch(kw: dict[str, Any]) -> None:
    a, oa = _run(topt.AdamW, kw)
    b, ob = _run(torch.optim.AdamW, {**kw, "foreach": False})
    _assert_same(a, b, oa, ob)


@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.1}, {"amsgrad": True, "maximize": True},
                                {"weight_decay": 0.1, "decoupled_weight_decay": True}], ids=str)
def test_adam_matches_torch(kw: dict[str, Any]) -> None:
    a, oa = _run(topt.Adam, kw)
    b, ob = _run(torch.optim.Adam, {**kw, "foreach": False})
    _assert_same(a, b, oa, ob)


SGD_OPTS = [{"lr": 0.1}, {"lr": 0.1, "momentum": 0.9}, {"lr": 0.1, "momentum": 0.9, "nesterov": True},
            {"lr": 0.1, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01},
            {"lr": 0.05, "momentum": 0.5, "maximize": True, "weight_decay": 0.1}]


@pytest.mark.parametrize("kw", SGD_OPTS, ids=str)
def test_sgd_matches_torch(kw: dict[str, Any]) -> None:
    a, oa = _run(topt.SGD, kw)
    b, ob = _run(torch.optim.SGD, {**kw, "foreach": False})
    _assert_same(a, b, oa, ob)


def test_param_groups_and_missing_grads() -> None:
    def make(cls: Any, **extra: Any) -> tuple[list[torch.Tensor], Any]:
        ps = _params()
        opt = cls([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.01, "weight_decay": 0.0}], lr=0.003, **extra)
        for i in range(5):
            for j, (p, g) in enumerate(zip(ps, _grads(i), strict=True)):
                p.grad = None if (j == 1 and i % 2) else g.clone()   # a param without grad on some steps
            opt.step()
        return ps, opt

    a, oa = make(topt.AdamW)
    b, ob = make(torch.optim.AdamW, foreach=False)
    _assert_same(a, b, oa, ob)


@pytest.mark.parametrize("pair", [(topt.AdamW, torch.optim.AdamW), (topt.SGD, torch.optim.SGD)])
def test_state_dict_round_trip(pair: tuple[Any, Any]) -> None:
    ours, theirs = pair
    kw: dict[str, Any] = {"lr": 0.01} | ({"momentum": 0.9} if ours is topt.SGD else {})
    a, oa = _run(ours, kw, steps=3)
    b, ob = _run(theirs, {**kw, "foreach": False}, steps=3)
    # continue each from the other's checkpoint: ours from torch's state and torch from ours
    a2 = [p.detach().clone().requires_grad_() for p in b]
    b2 = [p.detach().clone().requires_grad_() for p in a]
    oa2, ob2 = ours(a2, **kw), theirs(b2, **kw, foreach=False)
    oa2.load_state_dict(copy.deepcopy(ob.state_dict()))
    ob2.load_state_dict(copy.deepcopy(oa.state_dict()))
    for i in range(3, 6):
        for ps, o in ((a2, oa2), (b2, ob2)):
            for p, g in zip(ps, _grads(i), strict=True):
                p.grad = g.clone()
            o.step()
    _assert_same(a2, b2, oa2, ob2)


def test_one_launch_for_a_flattened_model() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    flat = topt.flatten_parameters(model)
    assert flat.numel() == sum(p.numel() for p in model.parameters())
    opt = topt.AdamW(model.parameters(), lr=0.01)
    ropt = torch.optim.AdamW(ref.parameters(), lr=0.01, foreach=False)
    x = torch.randn(5, 8)
    for _ in range(3):
        opt.zero_grad(set_to_none=False)
        ropt.zero_grad()
        model(x).square().sum().backward()
        ref(x).square().sum().backward()
        with dsl.record() as rec:
            opt.step()
        ropt.step()
        assert [name for name, _ in rec.runs] == ["adamw_kernel"], rec.runs   # 4 tensors, one launch
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)


def test_one_launch_per_tensor_otherwise() -> None:
    ps, opt = _run(topt.AdamW, {}, steps=1)
    for p, g in zip(ps, _grads(1), strict=True):
        p.grad = g
    with dsl.record() as rec:
        opt.step()
    assert len(rec.runs) == len(SHAPES)


def test_bad_grad_leaves_everything_untouched() -> None:
    ps = _params()
    opt = topt.AdamW([{"params": ps[:2]}, {"params": ps[2:]}], lr=0.1)
    for p, g in zip(ps, _grads(0), strict=True):
        p.grad = g.clone()
    opt.step()
    before_p = [p.detach().clone() for p in ps]
    before_s = copy.deepcopy(opt.state_dict())
    for p, g in zip(ps, _grads(1), strict=True):
        p.grad = g.clone()
    # the last group's first param made non-contiguous (the kernel updates params in place)
    ps[2].data = ps[2].detach().permute(2, 1, 0).contiguous().permute(2, 1, 0)
    with pytest.raises(RuntimeError, match=r"param_groups\[1\]\['params'\]\[0\] must be contiguous"):
        opt.step()
    for p, b in zip(ps, before_p, strict=True):
        assert torch.equal(p.detach(), b)
    after = opt.state_dict()
    for k, st in before_s["state"].items():
        for name, t in st.items():
            assert torch.equal(after["state"][k][name], t), (k, name)


def test_bad_hyperparameters() -> None:
    p = torch.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        topt.AdamW([p], lr=-1.0)
    with pytest.raises(ValueError, match="capturable"):
        topt.AdamW([p], capturable=True)
    with pytest.raises(ValueError, match="fused"):
        topt.SGD([p], fused=True)
    with pytest.raises(ValueError, match="Nesterov"):
        topt.SGD([p], lr=0.1, nesterov=True)
    opt = topt.AdamW([p], lr=0.1)
    p.grad = torch.ones(3)
    opt.param_groups[0]["lr"] = -0.5   # changed after construction: caught before any write
    with pytest.raises(ValueError, match="lr"):
        opt.step()
    assert torch.equal(p.detach(), torch.zeros(3)) and len(opt.state) == 0


def test_closure_and_bf16_params() -> None:
    p = torch.randn(64).to(torch.bfloat16).requires_grad_()
    q = p.detach().clone().requires_grad_()
    opt, ref = topt.AdamW([p], lr=0.01), torch.optim.AdamW([q], lr=0.01, foreach=False)

    def closure() -> float:
        opt.zero_grad()
        loss = (p.float() ** 2).sum()
        loss.backward()
        return float(loss)

    for _ in range(5):
        loss = opt.step(closure)
        ref.zero_grad()
        (q.float() ** 2).sum().backward()
        ref.step()
        assert math.isfinite(loss)
    # the kernel rounds to bf16 once per stored tensor, torch after every op: within bf16 tolerance
    torch.testing.assert_close(p.detach().float(), q.detach().float(), rtol=1.6e-2, atol=1e-2)
