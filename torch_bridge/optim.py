"""Optimizers whose step runs the fused in-place optimizer kernels: `torch.ops.npu.adamw`, `adam`, `sgd`.

`AdamW`, `Adam` and `SGD` subclass torch.optim's classes and override only `step`: the constructor
arguments and their checks, param_groups, state names (`step`, `exp_avg`, `exp_avg_sq`,
`max_exp_avg_sq`, `momentum_buffer`), `state_dict` / `load_state_dict` and `zero_grad` are torch's, so
a checkpoint moves between these and torch.optim in either direction. The update rule is torch's
single-tensor path operation for operation (op_library/optim.py), so 20 steps match torch.optim within
f32 rounding (tests/torch_bridge/test_optimizers.py).

One kernel launch per param group where the op allows it: the kernel streams every operand of a
flat range once, and a list whose tensors lie back to back in one storage runs as one launch. The
optimizer allocates each group's state that way (one flat buffer per state kind, each param's state
a view of it); params and grads pack too after `flatten_parameters(model)` (grads kept as views of
one flat buffer: zero them with `zero_grad(set_to_none=False)`). Otherwise the op makes one launch per
tensor.

Validation first: every group's hyperparameters and every param / grad (dtype f32 / f16 / bf16, the
grad's shape and dtype the param's, dense, the param contiguous) are checked before any state is
created or any tensor written, so a bad step leaves params and state as they were; the op checks
its own arguments again before it writes. (A failure inside a kernel itself, after every check passed,
stops the step at that group: the groups before it have been stepped.) Not supported (ValueError at construction): capturable,
differentiable, and torch's own fused=True / foreach=True switches (this is the fused path).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["AdamW", "Adam", "SGD", "flatten_parameters"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _reject(name: str, capturable: bool = False, differentiable: bool = False, foreach: bool | None = None,
            fused: bool | None = None) -> None:
    for flag, val in (("capturable", capturable), ("differentiable", differentiable), ("foreach", foreach),
                      ("fused", fused)):
        if val:
            raise ValueError(f"{name}: {flag}=True is not supported (torch_bridge.optim.{name} always runs the "
                             "fused npu kernel)")


def _check_params(name: str, group_index: int, group: dict[str, Any]) -> list[torch.Tensor]:
    """The group's params that have a grad, after checking each (nothing is written here)."""
    out = []
    for j, p in enumerate(group["params"]):
        g = p.grad
        if g is None:
            continue
        where = f"{name}: param_groups[{group_index}]['params'][{j}]"
        if p.dtype not in _FLOATS:
            raise RuntimeError(f"{where} has dtype {p.dtype}; the kernel takes float32, float16 or bfloat16")
        if g.is_sparse:
            raise RuntimeError(f"{name} does not support sparse gradients ({where})")
        if g.shape != p.shape:
            raise RuntimeError(f"{where}: grad has shape {list(g.shape)} but the param has {list(p.shape)}")
        if g.dtype != p.dtype:
            raise RuntimeError(f"{where}: grad has dtype {g.dtype} but the param has {p.dtype}")
        if not p.is_contiguous():
            raise RuntimeError(f"{where} must be contiguous (the kernel updates it in place)")
        out.append(p)
    return out


def _hyper(name: str, group: dict[str, Any], key: str, lo: float, hi: float | None = None) -> float:
    v = group[key]
    f = float(v.item()) if isinstance(v, torch.Tensor) else float(v)
    if not (lo <= f and (hi is None or f < hi)):
        raise ValueError(f"{name}: invalid {key} value: {f}")
    return f


def _packed_zeros(params: list[torch.Tensor]) -> list[torch.Tensor]:
    """Zeros shaped like each param, as views of one flat buffer per dtype (so the op can run a packed
    list as one launch)."""
    out: list[torch.Tensor | None] = [None] * len(params)
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, p in enumerate(params):
        by_dtype.setdefault(p.dtype, []).append(i)
    for dt, idx in by_dtype.items():
        flat = torch.zeros(sum(params[i].numel() for i in idx), dtype=dt)
        off = 0
        for i in idx:
            n = params[i].numel()
            out[i] = flat[off:off + n].view(params[i].shape)
            off += n
    return out  # type: ignore[return-value]


class _AdamStep:
    """step() of Adam / AdamW on torch.ops.npu.adam / adamw (module docstring)."""

    _op_name = "adam"

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One optimizer step over every group (closure: re-evaluates the model and returns the loss)."""
        opt: torch.optim.Adam = self  # type: ignore[assignment]
        name = type(self).__name__
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plans = []
        for gi, group in enumerate(opt.param_groups):   # every check before any state or tensor changes
            b1, b2 = (float(b.item()) if isinstance(b, torch.Tensor) else float(b) for b in group["betas"])
            for i, b in enumerate((b1, b2)):
                if not 0.0 <= b < 1.0:
                    raise ValueError(f"{name}: invalid beta parameter at index {i}: {b}")
            hyper = dict(lr=_hyper(name, group, "lr", 0.0), eps=_hyper(name, group, "eps", 0.0),
                         weight_decay=_hyper(name, group, "weight_decay", 0.0), beta1=b1, beta2=b2)
            plans.append((group, _check_params(name, gi, group), hyper))
        for group, params, hyper in plans:
            if not params:
                continue
            amsgrad = bool(group["amsgrad"])
            fresh = [p for p in params if len(opt.state[p]) == 0]
            if fresh:
                kinds = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
                bufs = {k: _packed_zeros(fresh) for k in kinds}
                for i, p in enumerate(fresh):
                    st = opt.state[p]
                    st["step"] = torch.tensor(0.0, dtype=torch.float32)
                    for k in kinds:
                        st[k] = bufs[k][i]
            st = [opt.state[p] for p in params]
            kw: dict[str, Any] = dict(amsgrad=amsgrad, maximize=bool(group["maximize"]), **hyper)
            if self._op_name == "adam":
                kw["decoupled_weight_decay"] = bool(group.get("decoupled_weight_decay", False))
            op = getattr(torch.ops.npu, self._op_name)
            op(params, [p.grad for p in params], [s["exp_avg"] for s in st], [s["exp_avg_sq"] for s in st],
               [s["max_exp_avg_sq"] for s in st] if amsgrad else [], [s["step"] for s in st], **kw)
        return loss


class Adam(_AdamStep, torch.optim.Adam):  # type: ignore[misc]
    """torch.optim.Adam (L2 weight decay, or decoupled_weight_decay=True) on `torch.ops.npu.adam`."""

    _op_name = "adam"

    def __init__(self, params: Iterable[Any], lr: float | torch.Tensor = 1e-3,
                 betas: tuple[float | torch.Tensor, float | torch.Tensor] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, decoupled_weight_decay: bool = False) -> None:
        _reject("Adam", capturable, differentiable, foreach, fused)
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=False, maximize=maximize,
                         decoupled_weight_decay=decoupled_weight_decay)


class AdamW(_AdamStep, torch.optim.AdamW):  # type: ignore[misc]
    """torch.optim.AdamW on `torch.ops.npu.adamw` (one fused kernel: decay, both moments, amsgrad max,
    the bias-corrected update)."""

    _op_name = "adamw"

    def __init__(self, params: Iterable[Any], lr: float | torch.Tensor = 1e-3,
                 betas: tuple[float | torch.Tensor, float | torch.Tensor] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        _reject("AdamW", capturable, differentiable, foreach, fused)
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, foreach=False)


class SGD(torch.optim.SGD):
    """torch.optim.SGD (momentum, dampening, nesterov, weight_decay, maximize) on `torch.ops.npu.sgd`.
    Params on their first momentum step go in one call with is_first_step=True (the op starts their
    new buffers from the gradient, torch's `buf = g.clone()`), the others in a second call."""

    def __init__(self, params: Iterable[Any], lr: float | torch.Tensor = 1e-3, momentum: float = 0,
                 dampening: float = 0, weight_decay: float | torch.Tensor = 0, nesterov: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        _reject("SGD", False, differentiable, foreach, fused)
        super().__init__(params, lr, momentum, dampening, weight_decay, nesterov, maximize=maximize, foreach=False)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One SGD step over every group (closure: re-evaluates the model and returns the loss)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plans = []
        for gi, group in enumerate(self.param_groups):   # every check before any state or tensor changes
            hyper = dict(lr=_hyper("SGD", group, "lr", 0.0), momentum=_hyper("SGD", group, "momentum", 0.0),
                         dampening=float(group["dampening"]),
                         weight_decay=_hyper("SGD", group, "weight_decay", 0.0))
            if group["nesterov"] and (hyper["momentum"] <= 0 or hyper["dampening"] != 0):
                raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
            plans.append((group, _check_params("SGD", gi, group), hyper))
        for group, params, hyper in plans:
            if not params:
                continue
            kw: dict[str, Any] = dict(nesterov=bool(group["nesterov"]), maximize=bool(group["maximize"]), **hyper)
            if hyper["momentum"] == 0:
                torch.ops.npu.sgd(params, [p.grad for p in params], [], is_first_step=False, **kw)
                continue
            first = [p for p in params if self.state[p].get("momentum_buffer") is None]
            later = [p for p in params if self.state[p].get("momentum_buffer") is not None]
            if first:   # new buffers, packed so a flattened model's first step packs too
                for p, buf in zip(first, _packed_zeros(first), strict=True):
                    self.state[p]["momentum_buffer"] = buf
            for ps, is_first in ((first, True), (later, False)):
                if ps:
                    torch.ops.npu.sgd(ps, [p.grad for p in ps], [self.state[p]["momentum_buffer"] for p in ps],
                                      is_first_step=is_first, **kw)
        return loss


def flatten_parameters(model: torch.nn.Module) -> torch.Tensor:
    """Move every parameter of `model` (one dtype) into one flat storage, in `model.parameters()` order,
    and give each a zero `.grad` that is a view of one flat gradient buffer: then the optimizers' lists
    pack and a group runs as one kernel launch. Keep the grads packed by zeroing them with
    `zero_grad(set_to_none=False)` (autograd then accumulates into the views). Returns the flat
    parameter buffer. Do this before building the optimizer."""
    params = list(model.parameters())
    if not params:
        raise ValueError("flatten_parameters: the model has no parameters")
    dtypes = {p.dtype for p in params}
    if len(dtypes) != 1:
        raise ValueError(f"flatten_parameters: the parameters must share one dtype, got {sorted(map(str, dtypes))}")
    total = sum(p.numel() for p in params)
    flat = torch.empty(total, dtype=params[0].dtype)
    gflat = torch.zeros(total, dtype=params[0].dtype)
    off = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            flat[off:off + n].copy_(p.reshape(-1))   # a one-time move of the weights, not a result
            p.data = flat[off:off + n].view(p.shape)
            p.grad = gflat[off:off + n].view(p.shape)
            off += n
    return flat
