"""Registry entries (op_library.registry) for op_library.optim: adamw, adam, sgd.

The optimizer steps work in place on lists; each entry's `fn` wraps one step on one tensor: it
clones the inputs, runs the op on the clones and returns the updated (param, state...) so the
matrix can compare them with torch's functional reference (torch.optim.adamw.adamw /
torch.optim.adam.adam / torch.optim.sgd.sgd, foreach=False: the single-tensor path) run on its own
float32 copies. The step count enters as a float tensor argument (3 before the step: bias
corrections of step 4). Shapes: tails (37, 1025), size 0 and 1, a 2-D tensor, inf / NaN gradients;
with --full one large case (4096 x 4096). No backward: an optimizer step is not differentiated.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.optim.adam as torch_adam
import torch.optim.adamw as torch_adamw
import torch.optim.sgd as torch_sgd

import op_library.optim as O
from op_library.registry import FLOATS, Case, OpSpec, register


def _c(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def _adam_args(p: Any, g: Any, m: Any, v: Any, vmax: Any, step: Any) -> tuple[list[Any], ...]:
    return [_c(p)], [_c(g)], [_c(m)], [_c(v)], [_c(vmax)], [_c(step)]


def _adamw_fn(p: Any, g: Any, m: Any, v: Any, vmax: Any, step: Any, **kw: Any) -> tuple[Any, ...]:
    ps, gs, ms, vs, vm, st = _adam_args(p, g, m, v, vmax, step)
    O.adamw(ps, gs, ms, vs, vm, st, **kw)
    return ps[0], ms[0], vs[0], vm[0]


def _adamw_ref(p: Any, g: Any, m: Any, v: Any, vmax: Any, step: Any, **kw: Any) -> tuple[Any, ...]:
    ps, gs, ms, vs, vm, st = _adam_args(p, g, m, v, vmax, step)
    torch_adamw.adamw(ps, gs, ms, vs, vm, st, foreach=False, **kw)
    return ps[0], ms[0], vs[0], vm[0]


def _adam_fn(p: Any, g: Any, m: Any, v: Any, vmax: Any, step: Any, **kw: Any) -> tuple[Any, ...]:
    ps, gs, ms, vs, vm, st = _adam_args(p, g, m, v, vmax, step)
    O.adam(ps, gs, ms, vs, vm, st, **kw)
    return ps[0], ms[0], vs[0], vm[0]


def _adam_ref(p: Any, g: Any, m: Any, v: Any, vmax: Any, step: Any, **kw: Any) -> tuple[Any, ...]:
    ps, gs, ms, vs, vm, st = _adam_args(p, g, m, v, vmax, step)
    torch_adam.adam(ps, gs, ms, vs, vm, st, foreach=False, **kw)
    return ps[0], ms[0], vs[0], vm[0]


def _shapes(quick: bool) -> list[tuple[int, ...]]:
    s: list[tuple[int, ...]] = [(37,), (3, 1025), (1,), (0,)]
    return s if quick else s + [(8193,), (5, 7, 11)]


def _adam_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    def one(shape: tuple[int, ...], kw: dict[str, Any], label: str, special: bool = False,
            large: bool = False) -> Case:
        p, g = torch.randn(shape), torch.randn(shape)
        if special and g.numel() >= 3:
            g.view(-1)[0], g.view(-1)[1], g.view(-1)[2] = float("nan"), float("inf"), float("-inf")
        m = torch.randn(shape) * 0.1
        v = torch.rand(shape) * 0.01
        vmax = v + torch.rand(shape) * 0.01 * (torch.rand(shape) > 0.5)
        args = tuple(t.to(dtype) for t in (p, g, m, v, vmax)) + (torch.tensor(3.0),)
        base = {"amsgrad": False, "beta1": 0.9, "beta2": 0.999, "lr": 1e-2, "weight_decay": 0.1, "eps": 1e-8,
                "maximize": False}
        return Case(args, dict(base, **kw), label=label, large=large)

    out = [one(s, {}, "x".join(map(str, s))) for s in _shapes(quick)]
    out += [one((37,), {"amsgrad": True}, "amsgrad"),
            one((37,), {"maximize": True}, "maximize"),
            one((37,), {"weight_decay": 0.0, "beta1": 0.3, "lr": 0.1}, "no weight decay, beta1 0.3 (lerp >= 0.5)"),
            one((9,), {}, "NaN / inf gradients", special=True)]
    if not quick:
        out.append(one((4096, 4096), {"amsgrad": True}, "4096x4096 amsgrad", large=True))
    return out


def _sgd_fn(p: Any, g: Any, buf: Any, **kw: Any) -> tuple[Any, ...]:
    ps, gs = [_c(p)], [_c(g)]
    bufs: list[Any] = [None if buf is None else _c(buf)]
    O.sgd(ps, gs, bufs, **kw)
    return ps[0], bufs[0]


def _sgd_ref(p: Any, g: Any, buf: Any, **kw: Any) -> tuple[Any, ...]:
    ps, gs = [_c(p)], [_c(g)]
    bufs: list[Any] = [None if buf is None else _c(buf)]
    torch_sgd.sgd(ps, gs, bufs, foreach=False, **kw)
    return ps[0], bufs[0]


def _sgd_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    def one(shape: tuple[int, ...], kw: dict[str, Any], label: str, first: bool = False, large: bool = False) -> Case:
        p, g, b = (torch.randn(shape).to(dtype) for _ in range(3))
        base = {"weight_decay": 0.01, "momentum": 0.9, "lr": 0.1, "dampening": 0.0, "nesterov": False,
                "maximize": False}
        return Case((p, g, None if first else b), dict(base, **kw), label=label, large=large)

    out = [one(s, {}, "x".join(map(str, s))) for s in _shapes(quick)]
    out += [one((37,), {}, "first step (no momentum buffer yet)", first=True),
            one((37,), {"nesterov": True}, "nesterov"),
            one((37,), {"dampening": 0.3, "maximize": True, "weight_decay": 0.0}, "dampening, maximize"),
            one((37,), {"momentum": 0.0}, "no momentum")]
    if not quick:
        out.append(one((4096, 4096), {}, "4096x4096 momentum", large=True))
    return out


register(OpSpec("adamw", _adamw_fn, _adamw_ref, FLOATS, _adam_cases))
register(OpSpec("adam", _adam_fn, _adam_ref, FLOATS, _adam_cases))
register(OpSpec("sgd", _sgd_fn, _sgd_ref, FLOATS, _sgd_cases))
