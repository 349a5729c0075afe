"""Autograd for the npu ops through registered `<op>_backward` ops.

For a differentiable op `X` (a registry entry with a backward) this module defines
`npu::X_backward(<grad(s)>, <X's results>, <X's arguments>) -> <one gradient per differentiable
input>`, registers its CPU impl (the registry's `backward(grad, out, args, kwargs)`, the one way
every backward is reached) and its fake kernel, and registers autograd for `X` with
`torch.library.register_autograd`, whose backward calls `torch.ops.npu.X_backward`: a traced
backward graph (aot_autograd, torch.compile) holds that op, never kernel launches on FakeTensors.

Outputs that carry no gradient (rstd, indices, masks, softmax statistics) are marked
non-differentiable; inputs that are None get None; a `Tensor[]` input (cat, stack) gets a list.
The Autograd kernel is torch's own (`torch._library.autograd.make_autograd_impl`, what
register_autograd installs; used directly so that batch_norm, which mutates its running stats, gets
one too) behind a fast path: with no gradient wanted and plain CPU tensors the call goes straight to
the CPU impl instead of redispatching from Python.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import torch
from torch.library import Library

from op_library import data as D
from torch_bridge import _fake
from torch_bridge.schemas import op_name

# the registry entry whose backward an op uses (default: the op's own name)
ENTRY = {"npu_linear": "linear", "scaled_dot_product_attention": "sdpa", "max.dim": "max", "min.dim": "min"}
# how many leading arguments the registry's backward takes positionally (default: all positional
# ones of the schema); the rest go as keyword arguments when they differ from their default
NPOS = {
    "amax": 2, "amin": 2, "max.dim": 2, "min.dim": 2, "mean": 2, "sum": 2, "std": 2, "var": 2, "logsumexp": 2,
    "norm": 3, "avg_pool2d": 4, "max_pool2d": 4, "batch_norm": 6, "elu": 1, "leaky_relu": 1, "gelu": 1,
    "softplus": 1, "npu_swiglu": 1, "layer_norm": 4, "rms_norm": 3, "group_norm": 4, "npu_rms_norm": 2,
    "npu_add_rms_norm": 3, "npu_rotary_mul": 3, "cross_entropy": 2, "nll_loss": 2, "mse_loss": 2,
    "embedding": 2, "matmul": 2, "pad": 2, "scaled_dot_product_attention": 4, "npu_fusion_attention": 5,
    "softmax": 2, "log_softmax": 2, "native_dropout": 3,
}
NO_AUTOGRAD = {"dropout"}   # composite over native_dropout (its autograd applies)


def _cast_backward(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> list[Any]:
    import op_library
    return [op_library.npu_dtype_cast(grad, args[0].dtype)]


# backwards the registry has no entry for (torch_npu differentiates npu_dtype_cast: the gradient is
# cast back to the input's dtype, by the same cast kernel)
EXTRA_BACKWARD = {"npu_dtype_cast": SimpleNamespace(backward=_cast_backward, grad_args=(0,), grad_outputs=(0,))}
# ops whose forward records a dropout seed on its result (not a schema output): the backward op
# takes it as an extra argument (None under tracing: FakeTensors carry no seed)
SEED_ATTR = {"scaled_dot_product_attention": "dropout_seed"}
_PLAIN_CPU: set[int] = set()   # raw dispatch keysets that go straight to the CPU impl
_OTHER: set[int] = set()       # ... and those that take torch's autograd kernel


class _Missing:
    pass


_MISSING = _Missing()


def _defaults(qual: str) -> tuple[list[str], list[Any], list[bool]]:
    schema = getattr(torch.ops.npu, op_name(qual))
    ov = qual.split(".", 1)[1] if "." in qual else "default"
    s = getattr(schema, ov)._schema
    return ([a.name for a in s.arguments], [a.default_value if a.has_default_value() else _MISSING
                                            for a in s.arguments], [a.kwarg_only for a in s.arguments])


def _is_default(v: Any, d: Any) -> bool:
    if d is _MISSING or isinstance(v, torch.Tensor):
        return False
    if isinstance(v, (list, tuple)) and isinstance(d, (list, tuple)):
        return list(v) == list(d)
    return v is d or (v is not None and d is not None and type(v) is type(d) and v == d)


def _split_top(s: str) -> list[str]:
    from torch_bridge.ops import _split_top as split
    return split(s)


def _returns(schema: str) -> list[str]:
    ret = schema.rsplit("->", 1)[1].strip()
    if ret == "()":
        return []
    parts = _split_top(ret[1:-1]) if ret.startswith("(") else [ret]
    return [p.split(" ")[0] for p in parts]


def _pack(vals: Sequence[Any]) -> tuple[list[torch.Tensor], list[Any]]:
    tensors: list[torch.Tensor] = []
    struct: list[Any] = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            struct.append((0, len(tensors)))
            tensors.append(v)
        elif isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v):
            struct.append((1, len(tensors), len(v)))
            tensors.extend(v)
        else:
            struct.append((2, v))
    return tensors, struct


def _unpack(tensors: Sequence[torch.Tensor], struct: list[Any]) -> list[Any]:
    out: list[Any] = []
    for s in struct:
        if s[0] == 0:
            out.append(tensors[s[1]])
        elif s[0] == 1:
            out.append(list(tensors[s[1]: s[1] + s[2]]))
        else:
            out.append(s[1])
    return out


def _first_tensor(vals: Sequence[Any]) -> torch.Tensor:
    for v in vals:
        if isinstance(v, torch.Tensor):
            return v
        if isinstance(v, (list, tuple)) and v and isinstance(v[0], torch.Tensor):
            return v[0]
    raise RuntimeError("no tensor argument")


def _contig(t: Any) -> Any:
    return t.contiguous() if isinstance(t, torch.Tensor) and not t.is_contiguous() else t


def register_all(lib: Library, schemas: dict[str, str], registry: Any) -> dict[str, Callable[..., Any]]:
    """Define and register `X_backward` and autograd for every differentiable op in `schemas`;
    returns {backward op's qualified name: its CPU impl}."""
    import torch_bridge.ops as ops
    from torch_bridge.ops import parse_args

    impls: dict[str, Callable[..., Any]] = {}
    for qual, schema in schemas.items():
        spec = EXTRA_BACKWARD.get(qual) or registry.REGISTRY.get(ENTRY.get(qual, op_name(qual)))
        if qual in NO_AUTOGRAD or spec is None or spec.backward is None:
            continue
        args = parse_args(schema)
        rets = _returns(schema)
        name = op_name(qual)
        if name in ("cat", "stack"):
            diff = [0]
        else:
            diff = [i for i in spec.grad_args if i < len(args) and args[i][0].startswith("Tensor")]
        gout = list(spec.grad_outputs)
        ng, nr, nin = len(gout), len(rets), len(args)
        names, defaults, _ = _defaults(qual)
        npos = NPOS.get(qual, sum(1 for a in args if not a[2]))
        ov = "." + qual.split(".", 1)[1] if "." in qual else ""
        bname = f"{name}_backward"
        gdecl = ["Tensor grad_output"] if ng == 1 else [f"Tensor? grad_output{j}" for j in gout]
        rdecl = [f"{t.replace('(a!)', '')} result{j}" for j, t in enumerate(rets)]
        adecl = [f"{t} {n}" for t, n, _ in args]
        if qual in SEED_ATTR:   # the dropout seed the forward recorded on its result
            rdecl.append("int? dropout_seed")
            nr_b = nr + 1
        else:
            nr_b = nr
        rtypes = ["Tensor[]" if args[i][0] == "Tensor[]" else "Tensor" for i in diff]
        rdecl_s = rtypes[0] if len(rtypes) == 1 else "(" + ", ".join(rtypes) + ")"
        lib.define(f"{bname}{ov}({', '.join(gdecl + rdecl + adecl)}) -> {rdecl_s}")
        bqual = f"{bname}{ov}"

        def to_registry(fargs: Sequence[Any], outs: Sequence[Any], *, qual: str = qual, npos: int = npos,
                        names: list[str] = names, defaults: list[Any] = defaults) -> tuple[tuple[Any, ...],
                                                                                            dict[str, Any]]:
            if qual in ("max", "min"):
                return (fargs[0], None), {}
            if op_name(qual) == "cat":
                return tuple(fargs[0]), {"dim": fargs[1]}
            a = tuple(fargs[:npos])
            kw = {names[i]: fargs[i] for i in range(npos, len(fargs)) if not _is_default(fargs[i], defaults[i])}
            if qual == "npu_fusion_attention":   # the dropout mask's seed comes from the forward's results
                kw.update(seed=outs[4], offset=outs[5], numels=outs[6])
            return a, kw

        def bwd_impl(*a: Any, spec: Any = spec, ng: int = ng, nr: int = nr_b, diff: list[int] = diff,
                     to_registry: Any = to_registry, name: str = name) -> Any:
            grads, outs, fargs = a[:ng], a[ng:ng + nr], a[ng + nr:]
            g = grads[0] if ng == 1 else tuple(grads)
            if name == "stack":
                res: Any = [D.stack_backward(g, len(fargs[0]), fargs[1])]
            else:
                rargs, kw = to_registry(fargs, outs)
                if name in SEED_ATTR:
                    seed, outs = outs[-1], outs[:-1]
                    if seed is not None:
                        kw["seed"] = seed
                out = outs[0] if len(outs) == 1 else tuple(outs)
                got = spec.backward(g, out, rargs, kw)
                res = [got] if name == "cat" else [got[spec.grad_args.index(i)] for i in diff]
            ref = _first_tensor(a)
            fixed: list[Any] = []
            for i, r in zip(diff, res, strict=True):
                if isinstance(r, (list, tuple)):
                    fixed.append([_contig(t) for t in r])
                elif r is None or fargs[i] is None:
                    fixed.append(ref.new_empty((0,)))
                else:
                    fixed.append(_contig(r))
            return fixed[0] if len(fixed) == 1 else tuple(fixed)

        def bwd(*a: Any, bqual: str = bqual, bwd_impl: Any = bwd_impl, ops: Any = ops) -> Any:
            prof = ops._prof
            if prof._ACTIVE:
                return prof._run_profiled(bqual, bwd_impl, a, {})
            return bwd_impl(*a)
        bwd.__name__ = f"npu_{bqual.replace('.', '_')}"
        lib.impl(bqual, bwd, "CPU")
        fake = _fake.backward_fake(diff)
        lead = ng + nr_b
        torch.library.register_fake(f"npu::{bqual}", lambda *a, fake=fake, lead=lead: fake(lead, *a), lib=lib)
        impls[bqual] = bwd
        _register_autograd(lib, qual, bqual, nin, gout, nr, diff, ops.IMPLS[qual])
    return impls


def _register_autograd(lib: Library, qual: str, bqual: str, nin: int, gout: list[int], nr: int, diff: list[int],
                       fast_impl: Callable[..., Any]) -> None:
    name, ov = op_name(qual), (qual.split(".", 1)[1] if "." in qual else "default")
    bop = getattr(getattr(torch.ops.npu, op_name(bqual)), bqual.split(".", 1)[1] if "." in bqual else "default")
    nondiff = [j for j in range(nr) if j not in gout]
    names, defaults, kwonly = _defaults(qual)
    kw_names = [n for n, k in zip(names, kwonly, strict=True) if k]
    kw_defaults = {n: (None if d is _MISSING else d) for n, d in zip(names, defaults, strict=True)}

    seed_attr = SEED_ATTR.get(qual)

    def setup_context(ctx: Any, inputs: Sequence[Any], output: Any,
                      keyword_only_inputs: dict[str, Any] | None = None) -> None:
        ctx.n_positional = len(inputs)
        if kw_names:   # register_autograd passes kwarg-only arguments apart
            kwi = keyword_only_inputs or {}
            inputs = tuple(inputs) + tuple(kwi.get(n, kw_defaults[n]) for n in kw_names)
        outs = output if isinstance(output, tuple) else (output,)
        nd = [outs[j] for j in nondiff if isinstance(outs[j], torch.Tensor)]
        if nd:
            ctx.mark_non_differentiable(*nd)
        tensors, ctx.struct = _pack(tuple(inputs) + tuple(outs))
        ctx.save_for_backward(*tensors)
        ctx.extra = [getattr(outs[0], seed_attr, None)] if seed_attr else []

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        vals = _unpack(ctx.saved_tensors, ctx.struct)
        fargs, outs = vals[:nin], vals[nin:]
        g = []
        for j in gout:
            gj = grads[j]
            if gj is None:
                gj = torch.zeros_like(outs[j])
            g.append(gj)
        res = bop(*g, *outs, *ctx.extra, *fargs)
        res = (res,) if len(diff) == 1 else res
        result: list[Any] = [None] * nin
        for i, r in zip(diff, res, strict=True):
            if fargs[i] is not None and ctx.needs_input_grad[i]:
                result[i] = list(r) if isinstance(r, (list, tuple)) else r
        return tuple(result[:ctx.n_positional])

    op = getattr(getattr(torch.ops.npu, name), ov)
    kernel = torch._library.autograd.make_autograd_impl(op, torch._library.autograd.Info(backward, setup_context))
    impl = fast_impl
    after, cpu = torch._C._after_autograd_keyset, torch._C.DispatchKey.CPU
    grad_enabled, any_requires_grad = torch._C.is_grad_enabled, torch._C._any_requires_grad

    def autograd_impl(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        # no gradient wanted and plain CPU tensors: straight to the CPU impl (torch's generated
        # kernel would redispatch from Python, tens of us); otherwise torch's autograd kernel.
        # Keysets are sorted once by their raw bits (the DispatchKey test costs ~5 us a call).
        if not any_requires_grad(*args) or not grad_enabled():
            r = keyset.raw_repr()
            if r in _PLAIN_CPU:
                return impl(*args, **kwargs)
            if r not in _OTHER:
                if (keyset & after).highestPriorityTypeId() == cpu:
                    _PLAIN_CPU.add(r)
                    return impl(*args, **kwargs)
                _OTHER.add(r)
        return kernel(keyset, *args, **kwargs)
    lib.impl(qual, autograd_impl, "Autograd", with_keyset=True)
