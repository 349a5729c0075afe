"""Optimizer steps as DSL kernels, in place on parameters, gradients and state, with the update rules
of torch.optim's single-tensor paths (torch/optim/adam.py `_single_tensor_adam` with
decoupled_weight_decay=True for AdamW, torch/optim/sgd.py `_single_tensor_sgd`), operation for
operation:

- `adamw(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, amsgrad, beta1, beta2,
  lr, weight_decay, eps, maximize)` (torch.optim.adamw.adamw's functional API without its foreach /
  fused / capturable / differentiable / grad_scale switches): per tensor
  step += 1; p *= 1 - lr * wd; m += (1 - beta1) * (g - m) (lerp); v = v * beta2 + (1 - beta2) * g * g;
  (amsgrad: vmax = max(vmax, v), used for v); p += (-lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),
  bc1 = 1 - beta1^step, bc2 = 1 - beta2^step; maximize negates g. `adam(...)` is the same with
  torch.optim.adam's L2 weight decay (g += wd * p) instead.
- `sgd(params, d_p_list, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov,
  maximize)` (torch.optim.sgd.sgd's functional API): g (+ wd * p); buf = g on the first step (a new
  tensor put into momentum_buffer_list, as torch does), else buf * momentum + (1 - dampening) * g;
  g = g + momentum * buf (nesterov) or buf; p += -lr * g.

One kernel (`adamw_kernel`, `sgd_kernel`) streams all of a tensor's operands through UB once and
writes every updated tensor (one read of each input, one write of each output). Host work: the
checks, the scalar bias corrections from the step count (a few numbers, as torch computes them in
Python), the step counters themselves (`step += 1` on the 1-element state tensors, as torch does)
and the launch plan.

Many tensors in one launch: a DSL kernel takes a fixed list of GM tensors, not a table of
pointers, so separate tensors need one launch each. When the lists are packed, i.e. each list's
tensors are contiguous, of one dtype and lie back to back in one storage (a flattened parameter
buffer, as in FSDP / apex multi-tensor setups), and all steps are equal, the whole list runs as one
launch over the flat range; otherwise one launch per tensor.

Repeated steps: a call whose lists hold the same tensors' dtypes and shapes as an earlier valid
call (contiguous CPU tensors; sgd with no momentum or with every buffer made) reuses that call's
plan (op_library._plan): the list checks are implied by the key, the hyperparameters are checked
again, and each tensor's launch patches its addresses and the step's scalars into an argument
block marshalled once.

Validation comes first: list lengths, shapes, dtypes (f32 / f16 / bf16; grads and state in the
param's dtype), step tensors, hyperparameter ranges. A call that fails leaves every tensor as it
was. f16 / bf16 tensors compute in f32 and round once per stored tensor (torch rounds after
every op in those dtypes; the difference is within their tolerance).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import dsl
from dsl import GM, Const, f32
from op_library._plan import PLANS, Launcher, Plan, Ref, fast_ok, sigs

__all__ = ["adamw", "adam", "sgd"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


@dsl.kernel
def adamw_kernel(p: GM, g: GM, m: GM, v: GM, vmax: GM, decay: float, b1w: float, beta2: float, b2w: float,
                 bc2s: float, eps: float, step_neg: float, wd: float, TILE: Const[int] = 2048,
                 AMS: Const[int] = 0, MAXIMIZE: Const[int] = 0, WD: Const[int] = 0, L2: Const[int] = 0,
                 LERP_HI: Const[int] = 0):
    """One Adam(W) step over flat tensors (module docstring; WD=1 decoupled decay p *= decay, L2=1 Adam's
    g += wd * p). b1w = 1 - beta1 (torch's lerp: m + w * (g - m), or g - (g - m) * (1 - w) when w >= 0.5:
    LERP_HI), b2w = 1 - beta2, bc2s = sqrt(1 - beta2^step), step_neg = -lr / (1 - beta1^step)."""
    for t in dsl.tiles(p.shape[0], TILE):
        gr = dsl.cast(g[t], f32)
        if MAXIMIZE:
            gr = -gr
        pr = dsl.cast(p[t], f32)
        if L2:
            gr = gr + wd * pr
        if WD:
            pr = pr * decay
        ea = dsl.cast(m[t], f32)
        if LERP_HI:
            ea = gr - (gr - ea) * (1.0 - b1w)
        else:
            ea = ea + b1w * (gr - ea)
        es = dsl.cast(v[t], f32) * beta2 + b2w * gr * gr
        if AMS:
            mx = dsl.maximum(dsl.cast(vmax[t], f32), es)
            vmax[t] = dsl.cast(mx, vmax.dtype)
            den = dsl.sqrt(mx) / bc2s + eps
        else:
            den = dsl.sqrt(es) / bc2s + eps
        p[t] = dsl.cast(pr + step_neg * ea / den, p.dtype)
        m[t] = dsl.cast(ea, m.dtype)
        v[t] = dsl.cast(es, v.dtype)


@dsl.kernel
def sgd_kernel(p: GM, g: GM, buf: GM, wd: float, mom: float, damp1: float, lr_neg: float, TILE: Const[int] = 4096,
               WD: Const[int] = 0, MOM: Const[int] = 0, NESTEROV: Const[int] = 0, MAXIMIZE: Const[int] = 0):
    """One SGD step over flat tensors. MOM: 0 no momentum, 1 first step (buf = g), 2 later steps
    (buf = buf * mom + damp1 * g, damp1 = 1 - dampening)."""
    for t in dsl.tiles(p.shape[0], TILE):
        gr = dsl.cast(g[t], f32)
        if MAXIMIZE:
            gr = -gr
        pr = dsl.cast(p[t], f32)
        if WD:
            gr = gr + wd * pr
        if MOM == 1:
            b = gr
            buf[t] = dsl.cast(b, buf.dtype)
            if NESTEROV:
                gr = gr + mom * b
        elif MOM == 2:
            b = dsl.cast(buf[t], f32) * mom + damp1 * gr
            buf[t] = dsl.cast(b, buf.dtype)
            if NESTEROV:
                gr = gr + mom * b
            else:
                gr = b
        p[t] = dsl.cast(pr + lr_neg * gr, p.dtype)


# host side ----------------------------------------------------------------------------------------

def _scalar(v: Any, name: str) -> float:
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise ValueError(f"{name} as a Tensor must have one element, got shape {list(v.shape)}")
        return float(v.item())
    if not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a float, not {type(v).__name__}")
    return float(v)


def _check_lists(op: str, names: Sequence[str], lists: Sequence[Sequence[Any]], optional: Sequence[bool]) -> None:
    """Same length; each entry a tensor of the param's shape and dtype (None allowed where optional)."""
    params = lists[0]
    for name, lst in zip(names, lists, strict=True):
        if not isinstance(lst, (list, tuple)):
            raise TypeError(f"{op}(): {name} must be a list of Tensors, not {type(lst).__name__}")
        if len(lst) != len(params):
            raise ValueError(f"{op}(): {name} has {len(lst)} tensors but params has {len(params)}")
    for i, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{op}(): params[{i}] must be a Tensor, not {type(p).__name__}")
        if p.dtype not in _FLOATS:
            raise RuntimeError(f"{op}(): params[{i}] must be float32, float16 or bfloat16, got {p.dtype}")
        for name, lst, opt in zip(names[1:], lists[1:], optional[1:], strict=True):
            t = lst[i]
            if t is None and opt:
                continue
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{op}(): {name}[{i}] must be a Tensor, not {type(t).__name__}")
            if t.shape != p.shape:
                raise RuntimeError(f"{op}(): {name}[{i}] has shape {list(t.shape)} but params[{i}] has "
                                   f"{list(p.shape)}")
            if t.dtype != p.dtype:
                raise RuntimeError(f"{op}(): {name}[{i}] has dtype {t.dtype} but params[{i}] has {p.dtype}")
            if t.is_sparse:
                raise RuntimeError(f"{op}(): {name}[{i}] is sparse; sparse gradients are not supported")


def _written_ok(op: str, name: str, lst: Sequence[Any]) -> None:
    """Tensors written in place must be contiguous (the kernel writes their storage directly)."""
    for i, t in enumerate(lst):
        if t is not None and not t.is_contiguous():
            raise RuntimeError(f"{op}(): {name}[{i}] must be contiguous (it is updated in place)")


def _flat(ts: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """A 1-D view over the tensors if they lie back to back in one storage (contiguous, one dtype),
    else None."""
    t0 = ts[0]
    if not all(t.is_contiguous() and t.dtype == t0.dtype for t in ts):
        return None
    ptr = t0.untyped_storage().data_ptr()
    off = t0.storage_offset()
    for t in ts:
        if t.untyped_storage().data_ptr() != ptr or t.storage_offset() != off:
            return None
        off += t.numel()
    return torch.as_strided(t0, (off - t0.storage_offset(),), (1,), t0.storage_offset())


def _groups(lists: Sequence[Sequence[Any]], steps: Sequence[float]) -> list[tuple[int, list[torch.Tensor]]]:
    """The launches as (index of a tensor whose step applies, one flat tensor per operand): one over
    flat views if every list packs and the steps agree, else one per tensor."""
    n = len(lists[0])
    if n > 1 and len(set(steps)) == 1:
        flats = [_flat(lst) for lst in lists]
        if all(f is not None for f in flats):
            return [(0, flats)]   # type: ignore[list-item]
    return [(i, [lst[i].reshape(-1) for lst in lists]) for i in range(n)]


def _adam_scalars(beta1: Any, beta2: Any, lr: Any, weight_decay: Any, eps: Any) -> tuple[float, ...]:
    """(beta1, beta2, lr, weight_decay, eps) as floats, each range checked (torch's messages)."""
    b1, b2, lrf = _scalar(beta1, "beta1"), _scalar(beta2, "beta2"), _scalar(lr, "lr")
    wd, epsf = _scalar(weight_decay, "weight_decay"), _scalar(eps, "eps")
    if not 0.0 <= lrf:
        raise ValueError(f"Invalid learning rate: {lrf}")
    if not 0.0 <= epsf:
        raise ValueError(f"Invalid epsilon value: {epsf}")
    if not 0.0 <= b1 < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {b1}")
    if not 0.0 <= b2 < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {b2}")
    if not 0.0 <= wd:
        raise ValueError(f"Invalid weight_decay value: {wd}")
    return b1, b2, lrf, wd, epsf


def _adam_consts(amsgrad: bool, maximize: bool, decoupled: bool, b1: float, wd: float) -> dict[str, int]:
    return dict(AMS=int(amsgrad), MAXIMIZE=int(maximize), WD=int(decoupled and wd != 0),
                L2=int(not decoupled and wd != 0), LERP_HI=int(1 - b1 >= 0.5))


def _adam_words(b1: float, b2: float, lrf: float, wd: float, epsf: float, step: float) -> tuple[float, ...]:
    """adamw_kernel's scalar arguments for one tensor at `step` (bias corrections as torch: Python floats)."""
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    step_size = lrf / bc1
    return 1 - lrf * wd, 1 - b1, b2, 1 - b2, bc2 ** 0.5, epsf, -step_size, wd


def _maybe_packed(lists: Sequence[Sequence[Any]]) -> bool:
    """False when `_groups` certainly launches per tensor: params[1] does not start where params[0]
    ends (packing needs every list back to back)."""
    p = lists[0]
    return len(p) > 1 and p[1].data_ptr() == p[0].data_ptr() + p[0].numel() * p[0].element_size()


def _adam_key(op: str, params: Any, grads: Any, exp_avgs: Any, exp_avg_sqs: Any, max_exp_avg_sqs: Any,
              state_steps: Any, amsgrad: bool, maximize: bool, decoupled: bool, consts: dict[str, int]) -> Any:
    """The plan key of an adam / adamw call: the flags and every tensor's (dtype, shape), contiguous
    CPU tensors only (None: no plan; the ordinary path validates)."""
    try:
        n = len(params)
        if n == 0 or not (len(grads) == len(exp_avgs) == len(exp_avg_sqs) == len(state_steps) == n) or \
                len(max_exp_avg_sqs) != (n if amsgrad else 0):
            return None
        s = sigs([*params, *grads, *exp_avgs, *exp_avg_sqs, *max_exp_avg_sqs, *state_steps])
    except TypeError:   # not lists: the ordinary path says so
        return None
    if s is None or None in s:
        return None
    return (op, amsgrad, maximize, decoupled, consts["WD"], consts["L2"], consts["LERP_HI"], *s)


def _adam_plan(params: Sequence[torch.Tensor], lists: Sequence[Sequence[torch.Tensor]], amsgrad: bool,
               consts: dict[str, int], words: tuple[float, ...]) -> list[tuple[Launcher, list[torch.Tensor]] | None]:
    """One launcher per tensor (None for an empty one); the env template is filled per call."""
    out: list[Any] = []
    for i, p in enumerate(params):
        if p.numel() == 0:
            out.append(None)
            continue
        env = [lst[i] for lst in lists]
        n = p.numel()
        refs = [Ref(j, (n,)) for j in range(4)] + [Ref(4 if amsgrad else 3, (n,))]
        out.append(Launcher(adamw_kernel, None, (*refs, *words), consts, env))
    return out


def _adam(op: str, params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
          exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor],
          amsgrad: bool, beta1: Any, beta2: Any, lr: Any, weight_decay: float, eps: float, maximize: bool,
          decoupled: bool) -> None:
    key = None
    if type(amsgrad) is bool and type(maximize) is bool and PLANS.enabled():
        # a call like an earlier one: the plan holds the validated lists' launchers; only the
        # hyperparameters (checked here) and the step counts change
        try:
            b1, b2, lrf, wd, epsf = _adam_scalars(beta1, beta2, lr, weight_decay, eps)
        except (TypeError, ValueError):
            b1 = None   # the ordinary path raises it, after checking the lists as it always has
        if b1 is not None:
            consts = _adam_consts(amsgrad, maximize, decoupled, b1, wd)
            key = _adam_key(op, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, amsgrad,
                            maximize, decoupled, consts)
            plan = PLANS.get(key) if key is not None else None
            if plan is not None:
                lists = (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs) if amsgrad else \
                    (params, grads, exp_avgs, exp_avg_sqs)
                if not _maybe_packed(lists):
                    for s in state_steps:
                        s += 1
                    fast = fast_ok()
                    words: dict[float, tuple[float, ...]] = {}   # per step count (usually one)
                    for i, ln in enumerate(plan.launches):
                        if ln is not None:
                            env = [lst[i] for lst in lists]
                            st = float(state_steps[i].item())
                            w = words.get(st)
                            if w is None:
                                w = words[st] = _adam_words(b1, b2, lrf, wd, epsf, st)
                            ln(env, w) if fast else ln.slow(env, w)
                    return
    names = ("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs")
    lists = [params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs]
    if not amsgrad:
        lists[4] = list(max_exp_avg_sqs) if isinstance(max_exp_avg_sqs, (list, tuple)) and \
            len(max_exp_avg_sqs) == len(params) else [None] * len(params)   # type: ignore[list-item]
    _check_lists(op, names, lists, (False, False, False, False, not amsgrad))
    if not isinstance(state_steps, (list, tuple)) or len(state_steps) != len(params):
        raise ValueError(f"{op}(): state_steps must be a list of {len(params)} tensors")
    for i, s in enumerate(state_steps):
        if not isinstance(s, torch.Tensor) or s.numel() != 1:
            raise TypeError(f"{op}(): state_steps[{i}] must be a one-element Tensor")
    b1, b2, lrf, wd, epsf = _adam_scalars(beta1, beta2, lr, weight_decay, eps)
    for name, lst in zip(names, lists, strict=True):
        if name != "grads":
            _written_ok(op, name, lst)
    # every check passed: from here on the tensors change
    for s in state_steps:
        s += 1
    steps = [float(s.item()) for s in state_steps]
    operands = lists if amsgrad else lists[:4]
    consts = _adam_consts(amsgrad, maximize, decoupled, b1, wd)
    for i, group in _groups(operands, steps):
        if group[0].numel() == 0:
            continue
        p, g, m, v = group[:4]
        vmax = group[4] if amsgrad else v
        adamw_kernel(p, g, m, v, vmax, *_adam_words(b1, b2, lrf, wd, epsf, steps[i]), **consts)
    if key is not None:
        plan = Plan((), ret=lambda env: None)
        plan.launches = _adam_plan(params, operands, amsgrad, consts, _adam_words(b1, b2, lrf, wd, epsf, steps[0]))
        PLANS.put(key, plan)


def adamw(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
          exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor],
          *, amsgrad: bool, beta1: float, beta2: float, lr: float, weight_decay: float, eps: float,
          maximize: bool) -> None:
    """torch.optim.adamw.adamw (functional AdamW, in place; module docstring)."""
    _adam("adamw", params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, amsgrad, beta1, beta2, lr,
          weight_decay, eps, maximize, decoupled=True)


def adam(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
         exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor],
         *, amsgrad: bool, beta1: float, beta2: float, lr: float, weight_decay: float, eps: float,
         maximize: bool, decoupled_weight_decay: bool = False) -> None:
    """torch.optim.adam.adam (functional Adam, in place; decoupled_weight_decay=True is AdamW)."""
    _adam("adam", params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, amsgrad, beta1, beta2, lr,
          weight_decay, eps, maximize, decoupled=decoupled_weight_decay)


def _sgd_checks(lrf: float, mom: float, wd: float, damp: float, nesterov: bool) -> None:
    if lrf < 0.0:
        raise ValueError(f"Invalid learning rate: {lrf}")
    if mom < 0.0:
        raise ValueError(f"Invalid momentum value: {mom}")
    if wd < 0.0:
        raise ValueError(f"Invalid weight_decay value: {wd}")
    if nesterov and (mom <= 0 or damp != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening")


def _sgd_key(params: Any, grads: Any, bufs: Any, mom: float, nesterov: Any, maximize: Any,
             kw: dict[str, int]) -> Any:
    """The plan key of an sgd call with no momentum or with every momentum buffer present (None:
    the ordinary path, which also makes the first step's buffers)."""
    if not PLANS.enabled() or type(nesterov) is not bool or type(maximize) is not bool or \
            not all(type(lst) in (list, tuple) for lst in (params, grads, bufs)):
        return None
    n = len(params)
    if n == 0 or len(grads) != n or len(bufs) != n:
        return None
    s = sigs([*params, *grads, *bufs])   # buffers too: the ordinary path checks them even unused
    if s is None or None in s[:4 * n] or (mom != 0 and None in s[4 * n:]):   # a None param / grad: invalid;
        return None                                                        # a None buffer: a first step
    return ("sgd", mom == 0, tuple(sorted(kw.items())), n, *s)


def _sgd_plan(key: Any, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], bufs: Sequence[Any],
              mom: float, words: tuple[float, ...], kw: dict[str, int]) -> None:
    """One launcher per tensor (None for an empty one), as `sgd` launches them per tensor."""
    plan = Plan((), ret=lambda env: None)
    for i, p in enumerate(params):
        n = p.numel()
        if n == 0:
            plan.launches.append(None)   # type: ignore[arg-type]
            continue
        env = [p, grads[i]] + ([bufs[i]] if mom != 0 else [])
        refs = (Ref(0, (n,)), Ref(1, (n,)), Ref(0 if mom == 0 else 2, (n,)))
        plan.launches.append(Launcher(sgd_kernel, None, (*refs, *words), dict(MOM=0 if mom == 0 else 2, **kw), env))
    PLANS.put(key, plan)


def sgd_check(params: list[torch.Tensor], d_p_list: list[torch.Tensor],
              momentum_buffer_list: list[torch.Tensor | None], *, weight_decay: float, momentum: float, lr: float,
              dampening: float, nesterov: bool) -> None:
    """Every check `sgd` makes before it writes (a caller that prepares the buffers itself runs it
    first, so a bad call still changes nothing)."""
    op = "sgd"
    wd, mom, lrf, damp = (_scalar(weight_decay, "weight_decay"), _scalar(momentum, "momentum"), _scalar(lr, "lr"),
                          _scalar(dampening, "dampening"))
    _check_lists(op, ("params", "d_p_list", "momentum_buffer_list"), [params, d_p_list, momentum_buffer_list],
                 (False, False, True))
    _sgd_checks(lrf, mom, wd, damp, nesterov)
    _written_ok(op, "params", params)
    _written_ok(op, "momentum_buffer_list", momentum_buffer_list)


def sgd(params: list[torch.Tensor], d_p_list: list[torch.Tensor], momentum_buffer_list: list[torch.Tensor | None],
        *, weight_decay: float, momentum: float, lr: float, dampening: float, nesterov: bool,
        maximize: bool) -> None:
    """torch.optim.sgd.sgd (functional SGD, in place; a None momentum buffer is created, as torch does)."""
    wd, mom, lrf, damp = (_scalar(weight_decay, "weight_decay"), _scalar(momentum, "momentum"), _scalar(lr, "lr"),
                          _scalar(dampening, "dampening"))
    bufs = momentum_buffer_list
    kw = dict(WD=int(wd != 0), NESTEROV=int(nesterov), MAXIMIZE=int(maximize))
    # a call like an earlier one (no momentum, or every buffer made): the plan's launchers, after the
    # checks that depend on the hyperparameters' values
    key = _sgd_key(params, d_p_list, bufs, mom, nesterov, maximize, kw)
    plan = PLANS.get(key) if key is not None else None
    if plan is not None:
        _sgd_checks(lrf, mom, wd, damp, nesterov)
        lists = (params, d_p_list) if mom == 0 else (params, d_p_list, bufs)
        if not _maybe_packed(lists):
            words = (wd, mom, 1 - damp, -lrf)
            fast = fast_ok()
            for i, ln in enumerate(plan.launches):
                if ln is not None:
                    env = [lst[i] for lst in lists]
                    ln(env, words) if fast else ln.slow(env, words)
            return
    sgd_check(params, d_p_list, bufs, weight_decay=wd, momentum=mom, lr=lrf, dampening=damp, nesterov=nesterov)
    # every check passed: from here on the tensors change
    if key is not None:
        _sgd_plan(key, params, d_p_list, bufs, mom, (wd, mom, 1 - damp, -lrf), kw)
    if mom == 0:
        for _, grp in _groups([params, d_p_list], [0.0] * len(params)):
            if grp[0].numel():
                sgd_kernel(grp[0], grp[1], grp[0], wd, mom, 1 - damp, -lrf, MOM=0, **kw)
        return
    first = [i for i, b in enumerate(bufs) if b is None]
    for i in first:
        bufs[i] = torch.empty_like(params[i], memory_format=torch.contiguous_format)
    later = [i for i in range(len(params)) if i not in first]
    for idx, mode in ((first, 1), (later, 2)):
        if not idx:
            continue
        sel = [[params[i] for i in idx], [d_p_list[i] for i in idx], [bufs[i] for i in idx]]
        for _, grp in _groups(sel, [0.0] * len(idx)):
            if grp[0].numel():
                sgd_kernel(grp[0], grp[1], grp[2], wd, mom, 1 - damp, -lrf, MOM=mode, **kw)


