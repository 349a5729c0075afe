"""Automatic mixed precision on the npu device: `torch.autocast("npu")` and `torch.amp.GradScaler("npu")`.

Autocast. torch 2.13 registers no kernel at all for the AutocastPrivateUse1 key (not even the
fallthrough that every other autocast key has, so without this module any op on an npu tensor
under `torch.autocast("npu")` raises NotImplementedError). This module registers, from Python, what
torch registers in C++ for AutocastCUDA (aten/src/ATen/autocast_mode.cpp / autocast_mode.h, the
`AT_FORALL_*` lists, which torch_npu registers for npu as well):

- a fallthrough for every other op (they run in the dtypes they are given);
- LOWER_PRECISION_FP (matmul family, convolutions, RNN cells, attention): floating npu arguments
  cast to the autocast dtype (`torch.get_autocast_dtype("npu")`, float16 unless set);
- FP32 (exp / log / pow / rsqrt ..., norms, losses, upsampling): cast to float32;
- FP32_SET_OPT_DTYPE (softmax, log_softmax, sum, prod, cumsum, cumprod, vector / matrix norms):
  `dtype=torch.float32` when the caller gave none and the first argument is a floating npu tensor;
- FP32_APPEND_DTYPE (`norm.Scalar`, `norm.ScalarOpt_dim`): redispatched to the overload that
  takes a dtype, with float32;
- PROMOTE (addcmul, addcdiv, index_put, scatter_add, ...): every floating argument cast to the
  widest floating dtype among them;
- BANNED: `binary_cross_entropy` raises torch's error (use binary_cross_entropy_with_logits).

A cast is `Tensor.to(dtype)` on the device (the op library's cast kernel), recorded by autograd as
on CUDA. One difference: torch's C++ autocast keeps a cache of the low-precision copies of float32
leaf weights for the life of the outermost autocast region; that cache is not reachable from
Python, so a weight used twice in one region is cast twice here (same values, one more cast).
`cudnn_convolution[_transpose]` (CUDA-only ops) are not registered.

GradScaler. `_amp_foreach_non_finite_check_and_unscale_` and `_amp_update_scale_` are npu kernels
(registered with aten's `@kernel`) that run DSL kernels on the tensors' device memory:
`unscale_kernel` multiplies each gradient by inv_scale in place (f32 math, rounded once to the
gradient's dtype) and counts its non-finite elements into a scratch word with an atomic add,
`flag_kernel` sets found_inf to 1.0 when the count is non-zero, `update_scale_kernel` is torch's
scale update (backoff on inf, growth every `growth_interval` clean steps, never to inf). The host
only checks arguments and launches. Float64 or non-dense gradients (the DSL has no float64; a
strided grad has no flat range to update in place) run on the CPU fallback, listed in
`torch_bridge.fallback_ops()`.

torch.npu. `install(runtime)` (run at import) gives the `torch.npu` module what torch.autocast asks
of a custom backend (`get_amp_supported_dtype`) and torch_npu's AMP API: `is_bf16_supported`,
`is_autocast_enabled`, `set_autocast_enabled`, `get_autocast_dtype`, `set_autocast_dtype`, and
`torch.npu.amp.autocast` / `torch.npu.amp.GradScaler` (torch.cuda.amp's device-bound twins). It
attaches them instead of runtime.py importing them: runtime is imported while aten.py is half
initialised, and this module needs aten's `kernel`.
"""
from __future__ import annotations

import functools
import operator
import struct
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, no_type_check

import torch
from torch.library import Library

import dsl
from dsl import GM, Const, f32
from torch_bridge.device import memory as _mem
from torch_bridge.device.aten import kernel
from torch_bridge.device.fallback import cpu_fallback

__all__ = ["get_amp_supported_dtype", "is_bf16_supported", "is_autocast_enabled", "set_autocast_enabled",
           "get_autocast_dtype", "set_autocast_dtype", "amp", "LOWER_PRECISION_FP", "FP32", "FP32_SET_OPT_DTYPE",
           "FP32_APPEND_DTYPE", "PROMOTE", "BANNED", "install"]

# ------------------------------------------------------------------ cast policies (torch 2.13 autocast_mode.h)
LOWER_PRECISION_FP = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr", "matmul",
    "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh",
    "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm", "native_layer_norm",
    "rms_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
    "pdist", "cdist", "renorm", "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d",
    "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d",
    "_upsample_bicubic2d_aa",
)
FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList",
)
#: registered overload -> the overload it redispatches to, with a trailing float32 dtype
FP32_APPEND_DTYPE = {"norm.Scalar": "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
           "tensordot", "scatter_add")
BANNED = {"binary_cross_entropy": (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.")}

# every autocast key: C++ excludes AutocastFunctionality (all of them) while an autocast kernel runs
_NO_AUTOCAST = functools.reduce(operator.or_, (torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, k))
                                               for k in dir(torch._C.DispatchKey) if k.startswith("Autocast")))
_Guard = torch._C._ExcludeDispatchKeyGuard
_F64 = torch.float64


def _overload(name: str) -> Any:
    pkt, _, ov = name.partition(".")
    return getattr(getattr(torch.ops.aten, pkt), ov or "default")


def _eligible(t: Any) -> bool:
    """torch's is_eligible for PrivateUse1: a defined floating npu tensor that is not float64."""
    return isinstance(t, torch.Tensor) and t.device.type == "npu" and t.is_floating_point() and t.dtype != _F64


def _cast(a: Any, dtype: torch.dtype) -> Any:
    """cached_cast (without the cache, see the module docstring): eligible tensors, also inside lists."""
    if isinstance(a, torch.Tensor):
        return a.to(dtype) if a.dtype != dtype and _eligible(a) else a
    if isinstance(a, (list, tuple)):
        return type(a)(_cast(x, dtype) for x in a)
    return a


def _low() -> torch.dtype:
    return torch.get_autocast_dtype("npu")


def _lower_precision_fp(op: Any) -> Callable[..., Any]:
    def k(*args: Any, **kwargs: Any) -> Any:
        dt = _low()
        with _Guard(_NO_AUTOCAST):
            return op(*_cast(args, dt), **{n: _cast(v, dt) for n, v in kwargs.items()})
    return k


def _fp32(op: Any) -> Callable[..., Any]:
    def k(*args: Any, **kwargs: Any) -> Any:
        with _Guard(_NO_AUTOCAST):
            return op(*_cast(args, torch.float32), **{n: _cast(v, torch.float32) for n, v in kwargs.items()})
    return k


def _fp32_set_opt_dtype(op: Any) -> Callable[..., Any]:
    """dtype=float32 where the caller left the op's `ScalarType?` argument unset (first arg eligible)."""
    text = str(op._schema)     # the argument types print as Optional[int]; the schema text says ScalarType?
    slots = [(i, a.name) for i, a in enumerate(op._schema.arguments) if f"ScalarType? {a.name}" in text]

    def k(*args: Any, **kwargs: Any) -> Any:
        with _Guard(_NO_AUTOCAST):
            if not (args and _eligible(args[0])):
                return op(*args, **kwargs)
            pos = list(args)
            for i, name in slots:
                if i < len(pos):
                    if pos[i] is None:
                        pos[i] = torch.float32
                elif kwargs.get(name) is None:
                    kwargs[name] = torch.float32
            return op(*pos, **kwargs)
    return k


def _full_args(op: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
    """Every positional argument of `op`'s schema: given, from kwargs, or its default."""
    out = list(args)
    for a in op._schema.arguments[len(args):]:
        if a.kwarg_only:
            break
        out.append(kwargs[a.name] if a.name in kwargs else a.default_value)
    return out


def _fp32_append_dtype(op: Any, target: Any) -> Callable[..., Any]:
    def k(*args: Any, **kwargs: Any) -> Any:
        with _Guard(_NO_AUTOCAST):
            dt = torch.float32 if _eligible(args[0]) else args[0].dtype
            return target(*_full_args(op, args, kwargs), dtype=dt)
    return k


def _prioritize(current: torch.dtype, a: Any, low: torch.dtype) -> torch.dtype:
    """at::autocast::prioritize: float32 beats the low dtype; float64 is ignored; others are an error."""
    if isinstance(a, (list, tuple)):
        for x in a:
            current = _prioritize(current, x, low)
        return current
    if not (isinstance(a, torch.Tensor) and a.device.type == "npu" and a.is_floating_point()):
        return current
    if a.dtype == _F64:
        return current
    if current == torch.float32 or a.dtype == torch.float32:
        return torch.float32
    if current == low and a.dtype == low:
        return low
    raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")


def _promote(op: Any) -> Callable[..., Any]:
    def k(*args: Any, **kwargs: Any) -> Any:
        with _Guard(_NO_AUTOCAST):
            low = _low()
            to = _prioritize(low, list(args) + list(kwargs.values()), low)
            return op(*_cast(args, to), **{n: _cast(v, to) for n, v in kwargs.items()})
    return k


def _banned(message: str) -> Callable[..., Any]:
    def k(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(message)
    return k


def policies() -> dict[str, str]:
    """{"mm": "lower_precision_fp", "softmax.int": "fp32_set_opt_dtype", ...}: every registered op."""
    out = {n: "lower_precision_fp" for n in LOWER_PRECISION_FP}
    out.update({n: "fp32" for n in FP32})
    out.update({n: "fp32_set_opt_dtype" for n in FP32_SET_OPT_DTYPE})
    out.update({n: "fp32_append_dtype" for n in FP32_APPEND_DTYPE})
    out.update({n: "promote" for n in PROMOTE})
    out.update({n: "banned" for n in BANNED})
    return out


_LIBS: list[Library] = []


def _register_autocast() -> None:
    """The fallthrough and the per-op cast kernels for AutocastPrivateUse1 (module docstring)."""
    fb = Library("_", "IMPL")
    fb.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    lib = Library("aten", "IMPL")
    make: dict[str, Callable[[Any], Callable[..., Any]]] = {
        "lower_precision_fp": _lower_precision_fp, "fp32": _fp32, "fp32_set_opt_dtype": _fp32_set_opt_dtype,
        "promote": _promote}
    for name, policy in policies().items():
        if policy == "banned":
            fn = _banned(BANNED[name])
        elif policy == "fp32_append_dtype":
            fn = _fp32_append_dtype(_overload(name), _overload(FP32_APPEND_DTYPE[name]))
        else:
            fn = make[policy](_overload(name))
        fn.__name__ = f"autocast_npu_{name.replace('.', '_')}"
        lib.impl(name, fn, "AutocastPrivateUse1")
    _LIBS[:] = [fb, lib]


# ------------------------------------------------------------------ GradScaler's kernels (DSL)
@dsl.kernel
@no_type_check   # DSL, not Python: mypy would misread it (pyproject)
def unscale_kernel(g: GM, inv: GM, bad: GM, TILE: Const[int] = 4096):
    """g *= inv[0] in place (f32 math, rounded once to g's dtype, as torch's opmath); bad[0] += the
    number of non-finite elements of g (x - x is NaN exactly for inf and NaN)."""
    s = inv[0]
    cnt = dsl.zeros((1,), f32)
    for t in dsl.tiles(g.shape[0], TILE):
        x = dsl.cast(g[t], f32)
        cnt += dsl.sum(dsl.cast((x - x) != 0.0, f32), axis=0, keepdims=True)
        g[t] = dsl.cast(x * s, g.dtype)
    dsl.atomic_add(bad[0:1], cnt)


@dsl.kernel
@no_type_check   # DSL, not Python: mypy would misread it (pyproject)
def flag_kernel(bad: GM, found: GM):
    """found[0] = 1.0 where the count bad[0] is non-zero, else unchanged (torch writes 1.0, never 0)."""
    for t in dsl.tiles(1, 1):
        found[t] = dsl.where(bad[t] != 0.0, 1.0, found[t])


@dsl.kernel
@no_type_check   # DSL, not Python: mypy would misread it (pyproject)
def update_scale_kernel(scale: GM, tracker: GM, found: GM, gh: float, gl: float, ghh: float, ghl: float, bh: float,
                        bl: float, bhh: float, bhl: float, interval: int, EXACT_G: Const[int] = 1,
                        EXACT_B: Const[int] = 1):
    """torch's _amp_update_scale_: found -> scale *= backoff, tracker = 0; else tracker + 1, and at
    `interval` scale *= growth (unless that is not finite) and tracker = 0.

    torch computes `float(scale * factor)` with the factor a double. A factor that is an f32
    (EXACT_*: 2.0, 0.5, ...) is one f32 product, rounded once: exactly torch's. Otherwise the factor is
    hi + lo (f32s; hi split by the host into hh + hl of 12 bits each) and the product is s * hi plus
    its exact rounding error (Dekker's product, Veltkamp-splitting s here) plus s * lo, rounded once
    (s above 1e30 is scaled by 2**-64 first, exactly, so the split cannot overflow)."""
    for t in dsl.tiles(1, 1):
        s = scale[t]
        k1 = tracker[t] + 1
        inf = found[t] != 0.0
        grow = k1 == interval
        big = s > 1.0e30                     # s * 4097 would overflow: split s * 2**-64 (exact), scale back
        u = dsl.where(big, s * 5.421010862427522e-20, s)
        cs = u * 4097.0
        sh = cs - (cs - u)
        sl = u - sh
        if EXACT_G:
            g = s * gh
        else:
            pg = u * gh
            g = pg + ((((sh * ghh - pg) + sh * ghl + sl * ghh) + sl * ghl) + u * gl)
            g = dsl.where(big, g * 1.8446744073709552e19, g)
        if EXACT_B:
            b = s * bh
        else:
            pb = u * bh
            b = pb + ((((sh * bhh - pb) + sh * bhl + sl * bhh) + sl * bhl) + u * bl)
            b = dsl.where(big, b * 1.8446744073709552e19, b)
        scale[t] = dsl.where(inf, b, dsl.where(grow & ((g - g) == 0.0), g, s))
        tracker[t] = dsl.where(inf | grow, 0, k1)


# ------------------------------------------------------------------ GradScaler's npu kernels
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_I32_MAX = 2 ** 31 - 1


def _check_scalar(t: torch.Tensor, name: str, dtype: torch.dtype) -> None:
    """torch's checks of a GradScaler state tensor (its CPU kernel's texts, with npu for CPU)."""
    if not isinstance(t, torch.Tensor) or t.device.type != "npu":
        raise RuntimeError(f"{name} must be an npu tensor.")
    if t.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if t.dtype != dtype:
        kind = "an int" if dtype == torch.int32 else "a float"
        raise RuntimeError(f"{name} must be {kind} tensor.")


def _flat(t: torch.Tensor) -> torch.Tensor | None:
    """A 1-D CPU alias over the memory of a dense tensor (any dim order, no gaps, no overlap), or None."""
    a = _mem._cpu_alias(t)
    if a.is_contiguous():
        return a.view(-1)
    dims = sorted((s, n) for s, n in zip(a.stride(), a.shape, strict=True) if n != 1)
    expect = 1
    for s, n in dims:
        if s != expect:
            return None
        expect *= n
    return a.as_strided((a.numel(),), (1,), a.storage_offset())


def _one(t: torch.Tensor) -> torch.Tensor:
    """A 1-element tensor's CPU alias as shape (1,) (a view: the kernels write the device memory)."""
    a = _mem._cpu_alias(t)
    return a.as_strided((1,), (1,), a.storage_offset())


@kernel("_amp_foreach_non_finite_check_and_unscale_")
def _amp_foreach_non_finite_check_and_unscale_(self: Sequence[torch.Tensor], found_inf: torch.Tensor,
                                               inv_scale: torch.Tensor) -> None:
    """Multiply every gradient by inv_scale in place and set found_inf to 1.0 if any holds an inf or
    NaN (module docstring), on the device."""
    grads = list(self)
    if not grads:
        return
    _check_scalar(inv_scale, "inv_scale", torch.float32)
    _check_scalar(found_inf, "found_inf", torch.float32)
    device = grads[0].device
    flats: list[torch.Tensor | None] = []
    for t in grads:
        if t.device.type != "npu":
            raise RuntimeError("one of scaled_grads was not an npu tensor.")
        if t.device != device or inv_scale.device != device or found_inf.device != device:
            raise RuntimeError("scaled_grads must be on the same device.")
        if t.layout != torch.strided:
            raise RuntimeError("one of scaled_grads was not a strided tensor.")
        flats.append(_flat(t) if t.dtype in _FLOATS else None)
    if any(f is None for f in flats):   # float64, non-float or strided: torch's CPU kernel (and errors)
        cpu_fallback(torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default, grads, found_inf, inv_scale)
        return
    bad = torch.zeros(1, dtype=torch.float32)    # the non-finite count (scratch word the kernels add into)
    inv = _one(inv_scale)
    for f in flats:
        if f is not None and f.numel():
            unscale_kernel(f, inv, bad)
    flag_kernel[1](bad, _one(found_inf))


def _f32(x: float) -> float:
    """x rounded to the nearest float32 (exact f32 arithmetic: an f32 op's double result, rounded)."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def _split(x: float) -> tuple[tuple[float, float, float, float], int]:
    """A double factor as (hi, lo, hh, hl): x ~ hi + lo in f32s, hi = hh + hl (Veltkamp, 12-bit halves),
    and whether hi is all of x."""
    hi = _f32(x)
    c = _f32(hi * 4097.0)
    hh = _f32(c - _f32(c - hi))
    return (hi, _f32(x - hi), hh, _f32(hi - hh)), int(hi == x)


@kernel("_amp_update_scale_")
def _amp_update_scale_(self: torch.Tensor, growth_tracker: torch.Tensor, found_inf: torch.Tensor,
                       scale_growth_factor: float, scale_backoff_factor: float, growth_interval: int) -> torch.Tensor:
    """torch's scale update on the device (update_scale_kernel); returns the scale tensor."""
    _check_scalar(growth_tracker, "growth_tracker", torch.int32)
    _check_scalar(self, "current_scale", torch.float32)
    _check_scalar(found_inf, "found_inf", torch.float32)
    if not (self.device == growth_tracker.device == found_inf.device):
        raise RuntimeError("current_scale, growth_tracker and found_inf must be on the same device.")
    g, ge = _split(scale_growth_factor)
    b, be = _split(scale_backoff_factor)
    # the tracker is an int32 that only counts up from 0: an interval it cannot reach never grows
    interval = growth_interval if -_I32_MAX <= growth_interval <= _I32_MAX else 0
    update_scale_kernel[1](_one(self), _one(growth_tracker), _one(found_inf), *g, *b, interval, EXACT_G=ge,
                           EXACT_B=be)
    return self


# ------------------------------------------------------------------ torch.npu's AMP API
def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes torch.autocast("npu") accepts (torch.autocast asks a custom backend module for it)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True: the op library computes bfloat16 (in f32, rounded per op, as torch's CPU kernels)."""
    return True


def is_autocast_enabled() -> bool:
    """Whether autocast is on for npu in this thread (`torch.is_autocast_enabled("npu")`)."""
    return torch.is_autocast_enabled("npu")


def set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("npu", enabled)


def get_autocast_dtype() -> torch.dtype:
    """The low-precision dtype of npu autocast (float16 unless set)."""
    return torch.get_autocast_dtype("npu")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("npu", dtype)


class _Autocast(torch.amp.autocast):
    """`torch.npu.amp.autocast(...)`: torch.autocast("npu", ...) (torch.cuda.amp.autocast's twin)."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True) -> None:
        super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class _GradScaler(torch.amp.GradScaler):
    """`torch.npu.amp.GradScaler(...)`: torch.amp.GradScaler("npu", ...)."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        super().__init__("npu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


_Autocast.__name__ = _Autocast.__qualname__ = "autocast"
_GradScaler.__name__ = _GradScaler.__qualname__ = "GradScaler"
amp = types.ModuleType("torch.npu.amp", "torch.npu.amp: autocast and GradScaler bound to the npu device.")
amp.autocast = _Autocast  # type: ignore[attr-defined]
amp.GradScaler = _GradScaler  # type: ignore[attr-defined]

_RUNTIME_API = ("get_amp_supported_dtype", "is_bf16_supported", "is_autocast_enabled", "set_autocast_enabled",
                "get_autocast_dtype", "set_autocast_dtype", "amp")


def install(runtime: types.ModuleType) -> None:
    """Give the torch.npu module (`runtime`) the AMP API above; `import torch.npu.amp` works too."""
    for name in _RUNTIME_API:
        setattr(runtime, name, globals()[name])
    sys.modules.setdefault("torch.npu.amp", amp)


_register_autocast()
from torch_bridge.device import runtime as _runtime  # noqa: E402  (complete by now: aten imported it)

install(_runtime)
