"""Registration of the op library as `torch.ops.npu.*` (docs/torch_ops.md).

For every schema in torch_bridge.schemas this module

- defines the op in `Library("npu", "DEF")`;
- registers a CPU impl with `Library.impl` (the fast path: the dispatcher calls a closure that calls
  the op_library function with the arguments as they come, or through a converter prepared once when
  the schema's argument order differs from the function's); the impls are kept in `IMPLS`
  (qualified name -> callable) so another dispatch key (PrivateUse1, issue 11) can register the same
  ones with `register_impls(key)`;
- registers a fake kernel (torch_bridge._fake) for FakeTensor / meta / torch.compile tracing;
- gives mutating ops (`Tensor(a!)`: fill_, the optimizer steps) an ADInplaceOrView kernel that bumps
  the version counters of the tensors they write, as torch's in-place ops do;
- for each differentiable op `X`, defines `X_backward` (schema: the gradient(s), the forward's
  results, the forward's arguments -> one gradient per differentiable input), whose CPU impl calls the
  registry's `backward(grad, out, args, kwargs)` (torch_bridge._autograd), with its own fake kernel,
  and registers autograd for `X` through it, so aot_autograd traces backward graphs of npu ops.

Kernels do the work; this module only routes arguments. While a profile is open
(`torch_bridge.profiler._ACTIVE` non-empty) each impl runs through `profiler._run_profiled`.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch.library import Library

import op_library
from op_library import registry
from op_library.optim import adamw_kernel, sgd_check
from torch_bridge import _autograd, _fake, profiler
from torch_bridge.schemas import SCHEMAS, op_name

__all__ = ["IMPLS", "LIB", "OPS", "register_impls", "parse_args"]

LIB = Library("npu", "DEF")


_prof: Any = profiler   # ops._prof: the impls and _autograd read the hook through this name


# ------------------------------------------------------------------ schema text
def _split_top(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse_args(schema: str) -> list[tuple[str, str, bool]]:
    """[(type without alias annotation, name, kwarg_only)] of a schema string's arguments."""
    inner = schema[schema.index("(") + 1: schema.rindex(") ->")]
    out, kw_only = [], False
    for a in _split_top(inner):
        if a == "*":
            kw_only = True
            continue
        decl = a.split("=", 1)[0].strip()
        typ, name = decl.rsplit(" ", 1)
        for tag in ("(a!)", "(b!)", "(c!)", "(d!)", "(e!)", "(a)"):
            typ = typ.replace(tag, "")
        out.append((typ, name, kw_only))
    return out


def _n_returns(schema: str) -> int:
    ret = schema.rsplit("->", 1)[1].strip()
    if ret == "()":
        return 0
    return len(_split_top(ret[1:-1])) if ret.startswith("(") else 1


# ------------------------------------------------------------------ calling op_library functions
def _converter(fn: Callable[..., Any], args: list[tuple[str, str, bool]]) -> Callable[..., Any]:
    """fn called with the dispatcher's (args, kwargs): positionally while the schema's positional
    arguments line up with fn's parameters, by name after that. Worked out once per op."""
    params = inspect.signature(fn).parameters
    plist = list(params.values())
    pos = [name for _, name, kw in args if not kw]
    k = 0
    while k < len(pos) and k < len(plist) and plist[k].kind in (plist[k].POSITIONAL_ONLY,
                                                               plist[k].POSITIONAL_OR_KEYWORD, plist[k].VAR_POSITIONAL):
        if plist[k].kind == plist[k].VAR_POSITIONAL:
            k = len(pos)
            break
        if plist[k].name != pos[k] and pos[k] in params:
            break
        k += 1
    if k == len(pos):
        return fn
    names = tuple(pos[k:])

    def call(*a: Any, **kw: Any) -> Any:
        return fn(*a[:k], **dict(zip(names, a[k:])), **kw)
    return call


def _as_tuple(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*a: Any, **kw: Any) -> Any:
        return tuple(fn(*a, **kw))
    return call


# ------------------------------------------------------------------ impls that are not a plain call
def _max(input: torch.Tensor) -> torch.Tensor:
    return op_library.max(input)


def _min(input: torch.Tensor) -> torch.Tensor:
    return op_library.min(input)


def _max_dim(input: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    vals, idx = op_library.max(input, dim, keepdim)
    return vals, idx


def _min_dim(input: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    vals, idx = op_library.min(input, dim, keepdim)
    return vals, idx


def _fill_(input: torch.Tensor, value: Any) -> None:
    op_library.fill_(input, value)


def _max_pool2d(input: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    y, indices = op_library.max_pool2d(input, kernel_size, stride if len(stride) else None, padding, dilation,
                                       ceil_mode)
    return y, indices


def _avg_pool2d(input: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
                count_include_pad: bool = True, divisor_override: Any = None) -> torch.Tensor:
    return op_library.avg_pool2d(input, kernel_size, stride if len(stride) else None, padding, ceil_mode,
                                 count_include_pad, divisor_override)


def _adam_one(op: Callable[..., Any]) -> Callable[..., None]:
    def step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
             max_exp_avg_sq: torch.Tensor | None, step: torch.Tensor, **kw: Any) -> None:
        op([param], [grad], [exp_avg], [exp_avg_sq], [] if max_exp_avg_sq is None else [max_exp_avg_sq], [step],
           **kw)
    return step


def _sgd(params: list[torch.Tensor], d_p_list: list[torch.Tensor], momentum_buffer_list: list[torch.Tensor], *,
         weight_decay: float, momentum: float, lr: float, dampening: float, nesterov: bool, maximize: bool,
         is_first_step: bool = False) -> None:
    """op_library.sgd on buffers the caller owns: on the first step (torch: buf = g) the buffers are
    zeroed by a kernel and stepped with dampening 0 (buf * momentum + g = g exactly)."""
    if momentum == 0 and not momentum_buffer_list:
        momentum_buffer_list = [None] * len(params)  # type: ignore[list-item]
    elif len(momentum_buffer_list) != len(params):
        raise ValueError(f"sgd(): momentum_buffer_list has {len(momentum_buffer_list)} tensors but params has "
                         f"{len(params)}")
    if is_first_step and momentum != 0:
        # every check before the buffers are zeroed: a bad call changes nothing
        sgd_check(list(params), list(d_p_list), list(momentum_buffer_list), weight_decay=weight_decay,
                  momentum=momentum, lr=lr, dampening=dampening, nesterov=nesterov)
        for b in momentum_buffer_list:
            op_library.fill_(b, 0.0)
        dampening = 0.0
    op_library.sgd(list(params), list(d_p_list), list(momentum_buffer_list), weight_decay=weight_decay,
                   momentum=momentum, lr=lr, dampening=dampening, nesterov=nesterov, maximize=maximize)


def _sgd_one(param: torch.Tensor, grad: torch.Tensor, momentum_buffer: torch.Tensor | None, **kw: Any) -> None:
    _sgd([param], [grad], [] if momentum_buffer is None else [momentum_buffer], **kw)


def _npu_apply_adam_w(beta1_power: float, beta2_power: float, lr: float, weight_decay: float, beta1: float,
                      beta2: float, epsilon: float, grad: torch.Tensor, max_grad_norm: torch.Tensor | None,
                      amsgrad: bool | None, maximize: bool | None, *, var: torch.Tensor, m: torch.Tensor,
                      v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torch_npu.npu_apply_adam_w on op_library's AdamW kernel (bias corrections 1 - beta^step with
    beta_power = beta^(step - 1), as torch_npu); every argument is checked before anything is written."""
    ams = bool(amsgrad)
    for name, t in (("m", m), ("v", v), ("grad", grad)) + ((("max_grad_norm", max_grad_norm),) if ams else ()):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"npu_apply_adam_w(): {name} must be a Tensor")
        if t.shape != var.shape or t.dtype != var.dtype:
            raise RuntimeError(f"npu_apply_adam_w(): {name} has shape {list(t.shape)} and dtype {t.dtype} but var has "
                               f"{list(var.shape)} and {var.dtype}")
    for name, t in (("var", var), ("m", m), ("v", v)):
        if not t.is_contiguous():
            raise RuntimeError(f"npu_apply_adam_w(): {name} must be contiguous (it is updated in place)")
    if var.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise RuntimeError(f"npu_apply_adam_w(): var must be float32, float16 or bfloat16, got {var.dtype}")
    b1p, b2p = float(beta1_power) * float(beta1), float(beta2_power) * float(beta2)
    bc1, bc2 = 1.0 - b1p, 1.0 - b2p
    if bc1 == 0 or bc2 <= 0:
        raise ValueError(f"npu_apply_adam_w(): beta1_power * beta1 and beta2_power * beta2 must be < 1, got {b1p}, "
                         f"{b2p}")
    if var.numel():
        lrf, wd, b1 = float(lr), float(weight_decay), float(beta1)
        vmax = max_grad_norm.contiguous().reshape(-1).clone() if ams else v.reshape(-1)  # type: ignore[union-attr]
        adamw_kernel(var.reshape(-1), grad.contiguous().reshape(-1), m.reshape(-1), v.reshape(-1), vmax,
                     1 - lrf * wd, 1 - b1, float(beta2), 1 - float(beta2), bc2 ** 0.5, float(epsilon), -lrf / bc1, wd,
                     AMS=int(ams), MAXIMIZE=int(bool(maximize)), WD=int(wd != 0), L2=0, LERP_HI=int(1 - b1 >= 0.5))
    return var, m, v


def _dropout(input: torch.Tensor, p: float = 0.5, training: bool = True) -> torch.Tensor:
    # composite: the mask of native_dropout carries the backward (as aten's dropout)
    return torch.ops.npu.native_dropout(input, p, training)[0]


_CUSTOM: dict[str, Callable[..., Any]] = {
    "max": _max, "min": _min, "max.dim": _max_dim, "min.dim": _min_dim, "fill_": _fill_,
    "max_pool2d": _max_pool2d, "avg_pool2d": _avg_pool2d,
    "npu_linear": op_library.linear,
    "adamw_": _adam_one(op_library.adamw), "adam_": _adam_one(op_library.adam),
    "sgd": _sgd, "sgd_": _sgd_one, "npu_apply_adam_w.out": _npu_apply_adam_w,
}
_COMPOSITE: dict[str, Callable[..., Any]] = {"dropout": _dropout}


def _make_impl(qual: str, schema: str) -> Callable[..., Any]:
    fn = _CUSTOM.get(qual) or getattr(op_library, op_name(qual))
    call = _converter(fn, parse_args(schema))
    if _n_returns(schema) > 1 and qual not in _CUSTOM:
        call = _as_tuple(call)

    def impl(*args: Any, **kwargs: Any) -> Any:
        if _prof._ACTIVE:
            return _prof._run_profiled(qual, call, args, kwargs)
        return call(*args, **kwargs)
    impl.__name__ = f"npu_{qual.replace('.', '_')}"
    impl.__qualname__ = impl.__name__
    return impl


def _mutated(schema: str) -> tuple[list[int], list[str]]:
    """(positions, names) of the arguments a schema marks as written (`Tensor(a!)`)."""
    inner = schema[schema.index("(") + 1: schema.rindex(") ->")]
    pos, names, i = [], [], 0
    for a in _split_top(inner):
        if a == "*":
            continue
        if "!)" in a.split("=", 1)[0]:
            name = a.split("=", 1)[0].strip().rsplit(" ", 1)[1]
            pos.append(i)
            names.append(name)
        i += 1
    return pos, names


_PLAIN: set[int] = set()
_NOT_PLAIN: set[int] = set()


def _inplace_kernel(qual: str, schema: str, impl: Callable[..., Any]) -> Callable[..., Any]:
    """ADInplaceOrView kernel of a mutating op: bumps the version counter of every tensor it writes
    (autograd then refuses a backward through a tensor changed after it was saved, as for torch's
    in-place ops), then the CPU impl (plain CPU tensors) or a redispatch."""
    pos, names = _mutated(schema)
    op = getattr(getattr(torch.ops.npu, op_name(qual)), qual.split(".", 1)[1] if "." in qual else "default")
    below = torch._C._after_ADInplaceOrView_keyset
    cpu, bump = torch._C.DispatchKey.CPU, torch._C._increment_version

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        for p, n in zip(pos, names, strict=True):
            v = args[p] if p < len(args) else kwargs.get(n)
            if isinstance(v, torch.Tensor):
                bump((v,))
            elif isinstance(v, (list, tuple)):
                bump([t for t in v if isinstance(t, torch.Tensor)])
        r = keyset.raw_repr()
        if r in _PLAIN or (r not in _NOT_PLAIN and (keyset & below).highestPriorityTypeId() == cpu):
            _PLAIN.add(r)
            return impl(*args, **kwargs)
        _NOT_PLAIN.add(r)
        return op.redispatch(keyset & below, *args, **kwargs)
    return kernel


IMPLS: dict[str, Callable[..., Any]] = {}
OPS: list[str] = []   # every op defined here (qualified names, the `_backward` ops too)


def register_impls(dispatch_key: str, lib: Library | None = None,
                   wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]] | None = None) -> None:
    """Register every op's impl (forward and `_backward`) for `dispatch_key` ("PrivateUse1" for the
    npu device) in `lib` (default: this module's library); `wrap(qual, impl)`, if given, adapts each
    impl to the key's tensors (the npu device runs them on zero-copy CPU aliases)."""
    target = lib or LIB
    for qual, impl in IMPLS.items():
        target.impl(qual, wrap(qual, impl) if wrap else impl, dispatch_key)


def _register() -> None:
    for qual, schema in SCHEMAS.items():
        LIB.define(schema)
        OPS.append(qual)
        name = op_name(qual)
        if qual in _COMPOSITE:
            LIB.impl(qual, _COMPOSITE[qual], "CompositeImplicitAutograd")
            continue
        IMPLS[qual] = _make_impl(qual, schema)
        # factories (no tensor argument to dispatch on) take the backend-independent key
        factory = not any(t.startswith("Tensor") for t, _, _ in parse_args(schema))
        LIB.impl(qual, IMPLS[qual], "CompositeExplicitAutograd" if factory else "CPU")
        names = [n for _, n, kw in parse_args(schema) if not kw]
        torch.library.register_fake(f"npu::{qual}", _fake.fake_for(qual, name, names), lib=LIB)
        if "!" in schema.split("->")[0] and qual != "batch_norm":   # batch_norm: its Autograd kernel
            LIB.impl(qual, _inplace_kernel(qual, schema, IMPLS[qual]), "ADInplaceOrView", with_keyset=True)
    for qual, bwd in _autograd.register_all(LIB, SCHEMAS, registry).items():
        IMPLS[qual] = bwd
        OPS.append(qual)


_register()
