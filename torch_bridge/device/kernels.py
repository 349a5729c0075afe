"""npu kernels of the aten compute ops, on the op library's DSL kernels.

Every kernel here is a plain function of CPU tensors: `npu_kernel` wraps it so the dispatcher's npu
tensors arrive as zero-copy CPU aliases (after torch's device check) and its CPU results go back as
npu tensors (adopted by the allocator, no copy; a result in an input's memory is that input or a
view of it). Where torch has functional, in-place and `out=` forms, all three are registered: the
functional form returns the op's result, the in-place and `out=` forms copy it into the destination
(the op library writes fresh outputs). A call the op library cannot take (a dtype it lacks, a
non-contiguous in-place fill, a transposed convolution, ...) goes to the CPU fallback, which
records it in `torch_bridge.fallback_ops()`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import op_library
from torch_bridge.device import memory as _mem
from torch_bridge.device.aten import KERNELS
from torch_bridge.device.fallback import cpu_fallback, run_on_cpu

F = (torch.float32, torch.float16, torch.bfloat16)
FI = F + (torch.int32, torch.int8)
FIB = FI + (torch.bool,)
_REDUCTION = {0: "none", 1: "mean", 2: "sum"}


class Unsupported(Exception):
    """Raised by a kernel body for a call the op library cannot take: the CPU fallback runs it."""


def _overload(name: str) -> Any:
    pkt, _, ov = name.partition(".")
    return getattr(getattr(torch.ops.aten, pkt), ov or "default")


def npu_kernel(*names: str, dtypes: Sequence[torch.dtype] = F, check: Sequence[int] = (0,),
               keep: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register fn (of CPU tensors) as the npu kernel of aten ops `names`. The tensors at positions
    `check` must have one of `dtypes` (else the CPU fallback runs the op); kwargs in `keep` (out=)
    reach fn as npu tensors."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for n in names:
            KERNELS[n] = _make(n, fn, tuple(dtypes), tuple(check), keep)
        return fn
    return deco


#: ops the CPU has no kernel for (hooks for out-of-tree devices), with the op their CPU fallback runs
#: instead: name -> f(args, kwargs) -> (op, args, kwargs)
HOST: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {}


#: composite ops whose kernel covers only some calls: the others run torch's own decomposition (the
#: op's CPU-key kernel, which is the CompositeExplicitAutograd one) on npu tensors, its pieces on npu
#: kernels, instead of falling back to the CPU
COMPOSITE: set[str] = set()


def fallback(name: str, ovl: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The CPU fallback of a call kernel `name` cannot take (HOST names the op to run if not `ovl`)."""
    if name in COMPOSITE:
        return ovl.redispatch(_mem._CPU_KEYS, *args, **kwargs)
    host = HOST.get(name)
    if host is not None:
        op, args, kwargs = host(args, kwargs)
        return cpu_fallback(op, *args, **kwargs)
    return cpu_fallback(ovl, *args, **kwargs)


def _make(name: str, fn: Callable[..., Any], dtypes: tuple[torch.dtype, ...], check: tuple[int, ...],
          keep: tuple[str, ...]) -> Callable[..., Any]:
    ovl = _overload(name)
    argnames = [a.name for a in ovl._schema.arguments]

    def k(*args: Any, **kwargs: Any) -> Any:
        for i in check:
            t = args[i] if i < len(args) else None
            if isinstance(t, torch.Tensor) and t.dtype not in dtypes and (t.dim() or t.device.type != "cpu"):
                return fallback(name, ovl, args, kwargs)
        try:
            return run_on_cpu(fn, name, args, kwargs, argnames, keep)
        except Unsupported:
            return fallback(name, ovl, args, kwargs)
    k.__name__ = f"npu_{name.replace('.', '_')}"
    return k


def into(out: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Write result `r` (CPU) into `out` (npu, or a CPU alias), resizing an `out=` tensor as torch does."""
    from torch_bridge.device.memory import _cpu_alias
    if out.shape != r.shape:
        if out.device.type != "npu":
            raise RuntimeError(f"output with shape {list(out.shape)} doesn't match the broadcast shape "
                               f"{list(r.shape)}")
        out.resize_(r.shape)
    _cpu_alias(out).copy_(r)
    return out


def family(base: str, fn: Callable[..., Any], overload: str = "", dtypes: Sequence[torch.dtype] = F,
           check: Sequence[int] = (0,), inplace: bool = True, out: bool = True) -> None:
    """Functional `base.overload`, in-place `base_.overload` and `base.out` kernels from one fn."""
    ov = f".{overload}" if overload else ""
    npu_kernel(f"{base}{ov}", dtypes=dtypes, check=check)(fn)
    tail = overload.split("_", 1)[1] if "_" in overload else ""
    if inplace:
        def inpl(self: torch.Tensor, *a: Any, **kw: Any) -> torch.Tensor:
            return into(self, fn(self, *a, **kw))
        name = _first(f"{base}_{ov}", f"{base}_.{tail}")
        if name:
            npu_kernel(name, dtypes=dtypes, check=check)(inpl)
    if out:
        def outf(*a: Any, out: torch.Tensor, **kw: Any) -> torch.Tensor:
            return into(out, fn(*a, **kw))
        name = _first(f"{base}.{overload}_out", f"{base}.out_{tail}", f"{base}.out")
        if name:
            npu_kernel(name, dtypes=dtypes, check=check, keep=("out",))(outf)


def _first(*names: str) -> str | None:
    """The first of `names` that is an aten overload (in-place and out= names vary between ops)."""
    for n in names:
        pkt, _, ov = n.partition(".")
        if ov and ov.startswith("_") or n.endswith("."):
            continue
        op = getattr(torch.ops.aten, pkt, None)
        if op is not None and (ov or "default") in op.overloads():
            return n
    return None


# ------------------------------------------------------------------ elementwise arithmetic
def _alpha(alpha: Any) -> Any:
    return 1 if alpha is None else alpha


family("add", lambda s, o, *, alpha=1: op_library.add(s, o, alpha=_alpha(alpha)), "Tensor", FI, (0, 1))
family("sub", lambda s, o, *, alpha=1: op_library.sub(s, o, alpha=_alpha(alpha)), "Tensor", FI, (0, 1))
family("mul", lambda s, o: op_library.mul(s, o), "Tensor", FI, (0, 1))
family("div", lambda s, o: op_library.div(s, o), "Tensor", FI, (0, 1))
family("div", lambda s, o, *, rounding_mode=None: op_library.div(s, o, rounding_mode=rounding_mode), "Tensor_mode",
       FI, (0, 1))
family("maximum", lambda s, o: op_library.maximum(s, o), "", FI, (0, 1), inplace=False)
family("minimum", lambda s, o: op_library.minimum(s, o), "", FI, (0, 1), inplace=False)
family("pow", lambda s, e: op_library.pow(s, e), "Tensor_Scalar", F)
family("pow", lambda s, e: op_library.pow(s, e), "Tensor_Tensor", F, (0, 1))
family("clamp", lambda s, min=None, max=None: op_library.clamp(s, min, max), "", FI)
family("clamp_min", lambda s, min: op_library.clamp(s, min, None), "", FI)
family("clamp_max", lambda s, max: op_library.clamp(s, None, max), "", FI)
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    for _ov in ("Tensor", "Scalar"):
        family(_cmp, lambda s, o, _f=getattr(op_library, _cmp): _f(s, o), _ov, FI, (0, 1), inplace=False)
family("where", lambda c, s, o: op_library.where(c, s, o), "self", FIB, (1, 2), inplace=False)
family("logical_not", lambda s: op_library.logical_not(s), "", FIB)
for _lg in ("logical_and", "logical_or", "logical_xor"):
    family(_lg, lambda s, o, _f=getattr(op_library, _lg): _f(s, o), "", FIB, (0, 1))


@npu_kernel("masked_fill_.Scalar", dtypes=FIB)
def masked_fill_(self: torch.Tensor, mask: torch.Tensor, value: Any) -> torch.Tensor:
    return into(self, op_library.masked_fill(self, mask, value))


@npu_kernel("masked_fill_.Tensor", dtypes=FIB)
def masked_fill_t(self: torch.Tensor, mask: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return into(self, op_library.masked_fill(self, mask, value.item()))


# lerp / addcmul / addcdiv (the optimizers' update steps) composed from the op library's kernels
family("lerp", lambda s, e, weight: op_library.add(s, op_library.sub(e, s), alpha=weight), "Scalar", F, (0, 1))
family("addcmul", lambda s, a, b, *, value=1: op_library.add(s, op_library.mul(a, b), alpha=value), "", F, (0, 1, 2))
family("addcdiv", lambda s, a, b, *, value=1: op_library.add(s, op_library.div(a, b), alpha=value), "", F, (0, 1, 2))


# ------------------------------------------------------------------ unary math and activations
for _u in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "erf",
           "expm1", "log1p", "floor", "ceil", "trunc", "sign", "silu", "hardswish"):
    family(_u, lambda s, _f=getattr(op_library, _u): _f(s), "", FI if _u in ("neg", "abs", "sign", "floor", "ceil",
                                                                              "trunc") else F)
family("round", lambda s: op_library.round(s), "", FI)
family("gelu", lambda s, *, approximate="none": op_library.gelu(s, approximate), "", F)
family("leaky_relu", lambda s, negative_slope=0.01: op_library.leaky_relu(s, negative_slope), "", F)
npu_kernel("relu", dtypes=FI)(lambda s: op_library.relu(s))
npu_kernel("relu_", dtypes=FI)(lambda s: into(s, op_library.relu(s)))


@npu_kernel("threshold_backward", "threshold_backward.grad_input", keep=("grad_input",))
def threshold_backward(grad_output: torch.Tensor, self: torch.Tensor, threshold: Any,
                       grad_input: torch.Tensor | None = None) -> torch.Tensor:
    if threshold != 0:
        raise Unsupported
    r = op_library.relu_backward(grad_output, self)
    return r if grad_input is None else into(grad_input, r)


def _bwd(name: str, fn: Callable[..., Any]) -> None:
    npu_kernel(name)(fn)

    def outf(*a: Any, grad_input: torch.Tensor, **kw: Any) -> torch.Tensor:
        return into(grad_input, fn(*a, **kw))
    npu_kernel(f"{name}.grad_input", keep=("grad_input",))(outf)


_bwd("gelu_backward", lambda g, s, *, approximate="none": op_library.gelu_backward(g, s, approximate))
_bwd("sigmoid_backward", lambda g, y: op_library.sigmoid_backward(g, y))
_bwd("tanh_backward", lambda g, y: op_library.tanh_backward(g, y))
npu_kernel("silu_backward")(lambda g, s: op_library.silu_backward(g, s))


# ------------------------------------------------------------------ fills
def _dense(t: torch.Tensor) -> torch.Tensor:
    """`t`'s elements as one contiguous 1-D view of its memory, when they fill it without gaps or
    overlap in some order (a permuted or channels-last tensor): a fill can write that. Unsupported
    otherwise (a strided slice: the CPU fallback fills it)."""
    if t.is_contiguous():
        return t
    if t.numel() == 0:
        return t.as_strided((0,), (1,))
    size = [n for n, _ in sorted(zip(t.shape, t.stride(), strict=True), key=lambda p: p[1]) if n != 1]
    strides = sorted(st for n, st in zip(t.shape, t.stride(), strict=True) if n != 1)
    expect = 1
    for n, st in zip(size, strides, strict=True):
        if st != expect:
            raise Unsupported
        expect *= n
    return t.as_strided((t.numel(),), (1,))


@npu_kernel("fill_.Scalar", "fill_.Tensor", dtypes=FIB)
def fill_(self: torch.Tensor, value: Any) -> torch.Tensor:
    op_library.fill_(_dense(self), value.item() if isinstance(value, torch.Tensor) else value)
    return self


@npu_kernel("zero_", dtypes=FIB)
def zero_(self: torch.Tensor) -> torch.Tensor:
    op_library.fill_(_dense(self), 0)
    return self


# ------------------------------------------------------------------ matmul
def _operand(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(contiguous matrix, transposed?): a transposed contiguous view goes in without a copy."""
    if t.dim() == 2 and t.stride(0) == 1 and t.stride(1) == t.shape[0] and not t.is_contiguous():
        return t.t(), True
    return t.contiguous(), False


def _zeros(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A product over an empty inner dimension: zeros (the op library's matmul writes nothing then)."""
    r = torch.empty(tuple(shape), dtype=dtype)
    return op_library.fill_(r, 0) if r.numel() else r


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape[1] == 0:
        return _zeros((a.shape[0], b.shape[1]), a.dtype)
    a2, ta = _operand(a)
    b2, tb = _operand(b)
    return op_library.matmul(a2, b2, transpose_a=ta, transpose_b=tb)


family("mm", _mm, "", F, (0, 1), inplace=False)


def _addmm(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> Any:
    b2, tb = _operand(mat2)
    if tb and beta == 1 and alpha == 1 and self.dim() == 1 and self.shape[0] == b2.shape[0] and mat1.shape[1]:
        return op_library.linear(mat1.contiguous(), b2, self)     # x @ w.T + bias: one kernel
    r = _mm(mat1, mat2)
    if alpha != 1:
        r = op_library.mul(r, alpha)
    return r if beta == 0 else op_library.add(r, self, alpha=beta)


family("addmm", _addmm, "", F, (0, 1, 2))


def _bmm_operand(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if t.dim() == 3 and not t.is_contiguous() and t.transpose(1, 2).is_contiguous():
        return t.transpose(1, 2), True
    return t.contiguous(), False


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape[2] == 0:
        return _zeros((a.shape[0], a.shape[1], b.shape[2]), a.dtype)
    a2, ta = _bmm_operand(a)
    b2, tb = _bmm_operand(b)
    return op_library.bmm(a2, b2, transpose_a=ta, transpose_b=tb)


family("bmm", _bmm, "", F, (0, 1), inplace=False)


# ------------------------------------------------------------------ softmax, losses, norms
def _half_to_float(x: torch.Tensor, half_to_float: bool) -> Any:
    return torch.float32 if half_to_float and x.dtype != torch.float32 else None


family("_softmax", lambda x, dim, half_to_float: op_library.softmax(x, dim, dtype=_half_to_float(x, half_to_float)),
       inplace=False)
family("_log_softmax", lambda x, dim, half_to_float: op_library.log_softmax(
    x, dim, dtype=_half_to_float(x, half_to_float)), inplace=False)
family("_softmax_backward_data", lambda g, y, dim, input_dtype: op_library.softmax_backward(g, y, dim, input_dtype),
       inplace=False)
family("_log_softmax_backward_data",
       lambda g, y, dim, input_dtype: op_library.log_softmax_backward(g, y, dim, input_dtype), inplace=False)


def _total_weight(target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
                  reduction: int, dtype: torch.dtype) -> torch.Tensor:
    """nll_loss_forward's total_weight on kernels: the summed weight of the non-ignored targets."""
    t32 = target.reshape(-1).to(torch.int32)         # host index conversion, as the op library does
    keep = op_library.npu_dtype_cast(op_library.ne(t32, ignore_index), torch.float32)
    if weight is not None:
        safe = op_library.where(op_library.ne(t32, ignore_index), t32, 0)
        keep = op_library.mul(keep, op_library.index_select(weight.to(torch.float32), 0, safe))
    total = op_library.sum(keep)
    return total if dtype == torch.float32 else op_library.npu_dtype_cast(total, dtype)


@npu_kernel("nll_loss_forward")
def nll_loss_forward(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                     ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    out = op_library.nll_loss(self, target, weight, ignore_index=ignore_index, reduction=_REDUCTION[reduction])
    return out, _total_weight(target, weight, ignore_index, reduction, self.dtype)


@npu_kernel("nll_loss_backward")
def nll_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                      weight: torch.Tensor | None, reduction: int, ignore_index: int,
                      total_weight: torch.Tensor) -> torch.Tensor:
    return op_library.nll_loss_backward(grad_output, self, target, weight, ignore_index, _REDUCTION[reduction])


npu_kernel("mse_loss")(lambda s, t, reduction=1: op_library.mse_loss(s, t, reduction=_REDUCTION[reduction]))
npu_kernel("mse_loss_backward")(lambda g, s, t, reduction: op_library.mse_loss_backward(
    g, s, t, reduction=_REDUCTION[reduction])[0])


@npu_kernel("native_layer_norm")
def native_layer_norm(input: torch.Tensor, normalized_shape: Any, weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y = op_library.layer_norm(input, normalized_shape, weight, bias, eps)
    # mean and rstd (aten returns them; our backward recomputes them in its kernel)
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    mean = op_library.mean(input, dims, True, dtype=torch.float32 if input.dtype != torch.float32 else None)
    var = op_library.var(input, dims, keepdim=True, correction=0)
    rstd = op_library.rsqrt(op_library.add(var, eps))
    return y, mean, rstd


@npu_kernel("native_layer_norm_backward")
def native_layer_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Any,
                               mean: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None,
                               bias: torch.Tensor | None, output_mask: Sequence[bool]) -> tuple[Any, Any, Any]:
    """From the forward's mean and rstd, as torch computes it (the op library's fused layer_norm_backward
    recomputes them with an eps this op is not given): with x^ = (x - mean) * rstd and g' = g * weight,
    grad_x = rstd * (g' - mean(g') - x^ * mean(g' * x^)) over the normalized dims, grad_weight = sum of
    g * x^ and grad_bias = sum of g over the others."""
    k = len(normalized_shape)
    dims, batch = list(range(input.dim() - k, input.dim())), list(range(input.dim() - k))
    if input.numel() == 0:
        raise Unsupported
    xhat = op_library.mul(op_library.sub(input, mean), rstd)
    gx = gw = gb = None
    if output_mask[0]:
        g = grad_out if weight is None else op_library.mul(grad_out, weight)
        a = op_library.mean(g, dims, True)
        b = op_library.mean(op_library.mul(g, xhat), dims, True)
        gx = _cast(op_library.mul(op_library.sub(op_library.sub(g, a), op_library.mul(xhat, b)), rstd), input.dtype)
    if output_mask[1] and weight is not None:
        gxh = op_library.mul(grad_out, xhat)
        gw = _cast(op_library.sum(gxh, batch, False) if batch else gxh, weight.dtype)
    if output_mask[2] and bias is not None:
        gb = _cast(op_library.sum(grad_out, batch, False) if batch else op_library.mul(grad_out, 1), bias.dtype)
    return gx, gw, gb


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else op_library.npu_dtype_cast(t, dtype)


# ------------------------------------------------------------------ reductions
def _dims(dim: Any) -> Any:
    return None if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0) else list(dim)


family("sum", lambda s, dim, keepdim=False, *, dtype=None: op_library.sum(s, _dims(dim), keepdim, dtype=dtype),
       "dim_IntList", inplace=False, out=False)
npu_kernel("sum.IntList_out", keep=("out",))(
    lambda s, dim, keepdim=False, *, dtype=None, out: into(out, op_library.sum(s, _dims(dim), keepdim, dtype=dtype)))
npu_kernel("sum")(lambda s, *, dtype=None: op_library.sum(s, dtype=dtype))
family("mean", lambda s, dim, keepdim=False, *, dtype=None: op_library.mean(s, _dims(dim), keepdim, dtype=dtype),
       "dim", inplace=False, out=False)
npu_kernel("mean.out", keep=("out",))(
    lambda s, dim, keepdim=False, *, dtype=None, out: into(out, op_library.mean(s, _dims(dim), keepdim, dtype=dtype)))
npu_kernel("mean")(lambda s, *, dtype=None: op_library.mean(s, dtype=dtype))
family("amax", lambda s, dim=(), keepdim=False: op_library.amax(s, list(dim), keepdim), "", inplace=False)
family("amin", lambda s, dim=(), keepdim=False: op_library.amin(s, list(dim), keepdim), "", inplace=False)
family("argmax", lambda s, dim=None, keepdim=False: op_library.argmax(s, dim, keepdim), "", inplace=False)
family("argmin", lambda s, dim=None, keepdim=False: op_library.argmin(s, dim, keepdim), "", inplace=False)
npu_kernel("max.dim")(lambda s, dim, keepdim=False: tuple(op_library.max(s, dim, keepdim)))
npu_kernel("min.dim")(lambda s, dim, keepdim=False: tuple(op_library.min(s, dim, keepdim)))
npu_kernel("max")(lambda s: op_library.max(s))
npu_kernel("min")(lambda s: op_library.min(s))
npu_kernel("max.unary_out", keep=("out",))(lambda s, *, out: into(out, op_library.max(s)))
npu_kernel("min.unary_out", keep=("out",))(lambda s, *, out: into(out, op_library.min(s)))


def _dim_out(values: torch.Tensor, indices: torch.Tensor, r: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return into(values, r[0]), into(indices, r[1])


npu_kernel("max.dim_max", keep=("max", "max_values"))(lambda s, dim, keepdim=False, *, max, max_values: _dim_out(
    max, max_values, op_library.max(s, dim, keepdim)))
npu_kernel("min.dim_min", keep=("min", "min_indices"))(lambda s, dim, keepdim=False, *, min, min_indices: _dim_out(
    min, min_indices, op_library.min(s, dim, keepdim)))
family("cumsum", lambda s, dim, *, dtype=None: op_library.cumsum(s, dim, dtype=dtype), "", inplace=False)
npu_kernel("var.correction")(lambda s, dim=None, *, correction=None, keepdim=False: op_library.var(
    s, _dims(dim), keepdim=keepdim, correction=correction))
npu_kernel("std.correction")(lambda s, dim=None, *, correction=None, keepdim=False: op_library.std(
    s, _dims(dim), keepdim=keepdim, correction=correction))
npu_kernel("var.correction_out", keep=("out",))(lambda s, dim=None, *, correction=None, keepdim=False, out: into(
    out, op_library.var(s, _dims(dim), keepdim=keepdim, correction=correction)))
npu_kernel("std.correction_out", keep=("out",))(lambda s, dim=None, *, correction=None, keepdim=False, out: into(
    out, op_library.std(s, _dims(dim), keepdim=keepdim, correction=correction)))


# ------------------------------------------------------------------ data movement
def _index_select(s: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    if s.dim() == 0:        # a scalar indexed by one index: the scalar (the op library indexes 1-D and up)
        return op_library.index_select(s.reshape(1), 0, index.reshape(-1)).reshape(())
    return op_library.index_select(s, dim, index)


def _gather(s: torch.Tensor, dim: int, index: torch.Tensor, *, sparse_grad: bool = False) -> torch.Tensor:
    if index.numel() == 0:  # nothing gathered: torch checks neither the index dtype nor the bounds then
        return torch.empty(index.shape, dtype=s.dtype)
    if s.dim() == 0:        # a scalar: the op library gathers from 1-D and up
        return op_library.gather(s.reshape(1), 0, index.reshape(-1)).reshape(index.shape)
    return op_library.gather(s, dim, index)


def _scatter_add(s: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    if index.numel() == 0:  # nothing scattered (torch checks neither the index dtype nor the bounds then)
        return op_library.add(s, 0)
    if s.dim() == 0:
        return op_library.scatter_add(s.reshape(1), 0, index.reshape(-1), src.reshape(-1)).reshape(())
    return op_library.scatter_add(s, dim, index, src)


family("index_select", _index_select, "", FIB, inplace=False)
family("gather", _gather, "", FI, inplace=False)
family("scatter_add", _scatter_add, "", FI, (0, 3))
family("tril", lambda s, diagonal=0: op_library.tril(s, diagonal), "", FIB)
family("triu", lambda s, diagonal=0: op_library.triu(s, diagonal), "", FIB)


@npu_kernel("cat", dtypes=FIB, check=())
def cat(tensors: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    if any(t.dtype not in FIB for t in tensors) or len({t.dtype for t in tensors}) > 1:
        raise Unsupported
    return op_library.cat(list(tensors), dim)


@npu_kernel("cat.out", dtypes=FIB, check=(), keep=("out",))
def cat_out(tensors: Sequence[torch.Tensor], dim: int = 0, *, out: torch.Tensor) -> torch.Tensor:
    return into(out, cat(tensors, dim))


# ------------------------------------------------------------------ nn
@npu_kernel("embedding", check=(0,))
def embedding(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> torch.Tensor:
    if sparse:
        raise Unsupported
    return op_library.embedding(indices, weight, padding_idx if padding_idx >= 0 else None)


npu_kernel("embedding_dense_backward")(
    lambda g, indices, num_weights, padding_idx, scale_grad_by_freq: op_library.embedding_backward(
        g, indices, num_weights, padding_idx, scale_grad_by_freq))


@npu_kernel("convolution_overrideable")
def convolution(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Any, padding: Any,
                dilation: Any, transposed: bool, output_padding: Any, groups: int) -> torch.Tensor:
    if transposed or input.dim() not in (3, 4):
        raise Unsupported
    return op_library.conv2d(input, weight, bias, stride, padding, dilation, groups)


def _conv_host(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    return torch.ops.aten.convolution.default, args, kwargs       # the same arguments


def _conv_bwd_host(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """convolution_backward takes the bias size (the output channels) after the weight."""
    a = list(args) + [kwargs[n] for n in ("stride", "padding", "dilation", "transposed", "output_padding", "groups",
                                          "output_mask") if n in kwargs]
    weight, transposed, groups = a[2], a[6], a[8]
    bias_sizes = [weight.shape[1] * groups if transposed else weight.shape[0]]
    return torch.ops.aten.convolution_backward.default, tuple(a[:3] + [bias_sizes] + a[3:]), {}


# the CPU has no convolution_overrideable (the hook out-of-tree devices implement): a convolution the op
# library cannot take (transposed, 3-D, float64) runs torch's own convolution on the host
HOST["convolution_overrideable"] = _conv_host
HOST["convolution_backward_overrideable"] = _conv_bwd_host


@npu_kernel("convolution_backward_overrideable")
def convolution_backward(grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, stride: Any,
                         padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: int,
                         output_mask: Sequence[bool]) -> tuple[Any, Any, Any]:
    if transposed or input.dim() not in (3, 4):
        raise Unsupported
    gx, gw, gb = op_library.conv2d_backward(grad_output, input, weight, stride, padding, dilation, groups,
                                            with_bias=bool(output_mask[2]))
    return (gx if output_mask[0] else None, gw if output_mask[1] else None, gb if output_mask[2] else None)


def _pair(v: Any) -> Any:
    """A pooling parameter as the op library takes it: aten's int[2] may hold one value for both sides."""
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[0])) if len(v) == 1 else tuple(int(x) for x in v)
    return v


def _stride(stride: Any) -> Any:
    return _pair(stride) if isinstance(stride, int) or len(stride) else None      # [] means kernel_size


def _batched(*ts: torch.Tensor) -> tuple[bool, list[torch.Tensor]]:
    """NCHW operands: an unbatched (C, H, W) call gets a batch of one; (unbatched?, operands)."""
    if ts[0].dim() == 3:
        return True, [t.unsqueeze(0) for t in ts]
    if ts[0].dim() != 4:
        raise Unsupported
    return False, list(ts)


@npu_kernel("max_pool2d_with_indices")
def max_pool2d_with_indices(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    one, (x,) = _batched(self)
    y, ind = op_library.max_pool2d(x, _pair(kernel_size), _stride(stride), _pair(padding), _pair(dilation), ceil_mode)
    return (y[0], ind[0]) if one else (y, ind)


@npu_kernel("max_pool2d_with_indices_backward")
def max_pool2d_with_indices_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any,
                                     padding: Any, dilation: Any, ceil_mode: bool,
                                     indices: torch.Tensor) -> torch.Tensor:
    one, (x, g, ind) = _batched(self, grad_output, indices)
    r = op_library.max_pool2d_backward(g, x.shape, ind, _pair(kernel_size), _stride(stride), _pair(padding),
                                       _pair(dilation), ceil_mode=ceil_mode)
    return r[0] if one else r


@npu_kernel("avg_pool2d")
def avg_pool2d(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Any = None) -> torch.Tensor:
    one, (x,) = _batched(self)
    y = op_library.avg_pool2d(x, _pair(kernel_size), _stride(stride), _pair(padding), ceil_mode, count_include_pad,
                              divisor_override)
    return y[0] if one else y


npu_kernel("avg_pool2d.out", keep=("out",))(lambda s, *a, out, **kw: into(out, avg_pool2d(s, *a, **kw)))


@npu_kernel("avg_pool2d_backward")
def avg_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any, padding: Any,
                        ceil_mode: bool, count_include_pad: bool, divisor_override: Any) -> torch.Tensor:
    one, (x, g) = _batched(self, grad_output)
    r = op_library.avg_pool2d_backward(g, x.shape, _pair(kernel_size), _stride(stride), _pair(padding),
                                       ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                                       divisor_override=divisor_override)
    return r[0] if one else r


npu_kernel("_adaptive_avg_pool2d")(lambda s, output_size: op_library.adaptive_avg_pool2d(s, output_size))
npu_kernel("_adaptive_avg_pool2d_backward")(lambda g, s: op_library.adaptive_avg_pool2d_backward(g, s.shape))


@npu_kernel("native_dropout")
def native_dropout(input: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    y, mask = op_library.native_dropout(input, p, train)
    return y, mask


npu_kernel("native_dropout_backward")(lambda g, mask, scale: op_library.native_dropout_backward(g, mask, scale))
