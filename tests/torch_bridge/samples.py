"""Sample calls of every torch.ops.npu op, taken from the op registry's quick cases (the registry
stays the single source of samples): `sample(qual, dtype)` -> (args, kwargs) for the op's schema, the
smallest quick case that fits it (matrix adapters turned back into the real signature)."""
from __future__ import annotations

from typing import Any

import torch

from op_library import registry
from torch_bridge.schemas import SCHEMAS, VARIANTS

# the registry entry whose cases feed an op (default: the op's name)
SOURCE = {"max.dim": "max", "min.dim": "min", "npu_linear": "linear", "scaled_dot_product_attention": "sdpa",
          "adamw_": "adamw", "adam_": "adam", "sgd_": "sgd", "max": "max", "min": "min"}
# random ops: only their deterministic cases (p = 0) can be compared run against run
_DETERMINISTIC = {"dropout", "native_dropout"}


def _size(v: Any) -> int:
    if isinstance(v, torch.Tensor):
        return v.numel()
    if isinstance(v, (list, tuple)):
        return sum(_size(t) for t in v)
    return 0


def _put_scalars(case: registry.Case) -> tuple[tuple[Any, ...], dict[str, Any]]:
    kw = dict(case.kwargs)
    sc = kw.pop("scalars", None) or {}
    return tuple(sc.get(i, a) if a is None else a for i, a in enumerate(case.args)), kw


def _to_schema(qual: str, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The registry case's call turned into the schema's, or None if it does not fit."""
    name = qual.split(".")[0]
    if name in ("cat", "stack"):
        return (list(args),), kw
    if name in ("dropout", "native_dropout"):
        return args[:3], kw
    if name in ("adamw", "adam"):
        p, g, m, v, vmax, step = args
        return ([p.clone()], [g], [m.clone()], [v.clone()], [vmax.clone()] if kw.get("amsgrad") else [],
                [step.clone()]), kw
    if name in ("adamw_", "adam_"):
        p, g, m, v, vmax, step = args
        return (p.clone(), g, m.clone(), v.clone(), vmax.clone() if kw.get("amsgrad") else None, step.clone()), kw
    if name == "sgd":
        p, g, buf = args
        if buf is None:
            return ([p.clone()], [g], [torch.zeros_like(p)]), dict(kw, is_first_step=True)
        return ([p.clone()], [g], [buf.clone()]), dict(kw, is_first_step=False)
    if name == "sgd_":
        p, g, buf = args
        return (p.clone(), g, None if buf is None else buf.clone()), kw
    if qual in ("max", "min"):
        return (args[0],), {}
    if qual in ("max.dim", "min.dim") and args[1] is None:
        return None
    if name == "batch_norm":
        return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args), kw
    if name == "fill_":
        return (args[0].clone(),) + args[1:], kw
    return args, kw


def _fits(qual: str, args: tuple[Any, ...], kw: dict[str, Any]) -> bool:
    from torch_bridge.ops import parse_args
    sa = parse_args(SCHEMAS[qual])
    pos = [a for a in sa if not a[2]]
    for (typ, _, _), v in zip(pos, args, strict=False):
        if typ == "Tensor" and not isinstance(v, torch.Tensor):
            return False
        if typ.startswith("Scalar") and isinstance(v, torch.Tensor):
            return False
    return len(args) <= len(pos)


def cases(qual: str, dtype: torch.dtype) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every quick case of the op's registry entry (and its variants) that fits the schema,
    smallest first."""
    name = qual.split(".")[0]
    src = SOURCE.get(qual, name)
    entries = [src] + [v for v, op in VARIANTS.items() if op == name]
    out = []
    for e in entries:
        spec = registry.REGISTRY.get(e)
        if spec is None or dtype not in spec.dtypes:
            continue
        for c in spec.cases(True, dtype):
            if name in _DETERMINISTIC and c.args[1] != 0.0:
                continue
            a, k = _put_scalars(c)
            conv = _to_schema(qual, a, k)
            if conv is None or not _fits(qual, *conv):
                continue
            if any(isinstance(t, torch.Tensor) and (t.numel() == 0 or (t.is_floating_point() and
                                                                      not bool(t.isfinite().all())))
                   for t in conv[0]):
                continue   # size 0 / NaN cases: opcheck compares runs with ==
            out.append(conv)
    out.sort(key=lambda ak: _size(ak[0]) + _size(list(ak[1].values())))
    return out


def sample(qual: str, dtype: torch.dtype = torch.float32) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The smallest quick case of `qual` at `dtype` (IndexError if the registry has none)."""
    return cases(qual, dtype)[0]


def extra_sample(qual: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Samples of the ops no registry case feeds."""
    if qual == "npu_apply_adam_w.out":
        t = [torch.randn(37) for _ in range(4)]
        t[3] = t[3].abs()
        return (0.9 ** 2, 0.999 ** 2, 0.01, 0.1, 0.9, 0.999, 1e-8, t[0], None, False, False), \
            {"var": t[1], "m": t[2], "v": t[3]}
    if qual == "npu_fusion_attention_grad":
        q, k, v = torch.randn(2, 2, 7, 16), torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
        out, smax, ssum, *_ = torch.ops.npu.npu_fusion_attention(q, k, v, 2, "BNSD", scale=0.25)
        return (q, k, v, torch.randn_like(out), 2, "BNSD"), {"softmax_max": smax, "softmax_sum": ssum,
                                                             "attention_in": out, "scale_value": 0.25}
    raise KeyError(qual)
