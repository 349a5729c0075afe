"""Registry entries (op_library.registry) for op_library.elementwise.

One case builder serves every binary op (`_binary_cases`): same shapes with a tail (37 x 100),
a row broadcast ((37, 100) with (100,)), an outer broadcast ((3, 37, 1) with (1, 100)), size 1,
size 0, a non-contiguous (transposed) operand, a Python scalar operand, a 0-dim tensor operand and
special values (NaN, +-inf, +-0 against a shuffled copy); with --full a 1-D tail past one block
(4097), a five-dimensional broadcast that merges to more than three dimensions (the host loops the
leading one), a size-1 tensor against 8193 elements and the large case, 4096 x 4096 with a (4096,)
row (the bench shape). Operand values are drawn in each op's domain (`_VALUES`): divisors away from
0, positive pow bases, maximum / minimum with ties in a quarter of the elements.

A Python scalar operand cannot be an argument the matrix differentiates, so such cases pass None
in its place and the scalar in `kwargs["scalars"]` ({position: value}); `_call` puts it back for the
op, the reference and the backward alike. `k` is the longest sum in a backward: the number of
output elements each broadcast operand's gradient sums.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

import op_library.elementwise as E
from op_library.registry import FLOATS, INTS, Case, OpSpec, register

Args = tuple[Any, ...]


def _split(args: Args, kw: dict[str, Any]) -> tuple[Args, dict[str, Any]]:
    kw = dict(kw)
    sc = kw.pop("scalars", None) or {}
    return tuple(sc.get(i, a) if a is None else a for i, a in enumerate(args)), kw


def _call(f: Callable[..., Any]) -> Callable[..., Any]:
    """f with the case's `scalars` put back into their positions."""
    def g(*args: Any, **kw: Any) -> Any:
        a, k = _split(args, kw)
        return f(*a, **k)
    g.__name__ = getattr(f, "__name__", "op")
    return g


# ------------------------------------------------------------------ values
def _num(shape: Sequence[int], dtype: torch.dtype, scale: float = 2.0) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(tuple(shape)) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(tuple(shape)) * scale).to(dtype)
    return torch.randint(-40, 41, tuple(shape), dtype=torch.int32).to(dtype)


def _divisor(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(tuple(shape)) if dtype.is_floating_point else torch.randint(-9, 10, tuple(shape)).float()
    x = torch.where(x >= 0, x.abs() + (0.25 if dtype.is_floating_point else 1), -(x.abs() + 0.25) if
                    dtype.is_floating_point else x - 1 * (x == 0))
    return x.to(dtype)


def _positive(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    return (torch.rand(tuple(shape)) * 2 + 0.25).to(dtype)


# per op: (first operand, second operand) generators
_VALUES: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "div": (lambda s, d: _num(s, d, 4.0), _divisor),
    "pow": (_positive, lambda s, d: _num(s, d, 1.5)),
}

_SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 1e30, -1e-30, 7.0]


def _ties(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """b with a quarter of its elements equal to a's (where they line up)."""
    if a.shape != b.shape or a.numel() == 0:
        return b
    mask = (torch.arange(a.numel()) % 4 == 0).view(a.shape)
    return torch.where(mask, a, b)


def _pair(op: str, sa: Sequence[int], sb: Sequence[int], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    ga, gb = _VALUES.get(op, (_num, _num))
    a, b = ga(sa, dtype), gb(sb, dtype)
    if op in ("maximum", "minimum", "eq", "ne", "le", "ge"):
        b = _ties(a, b)
    return a, b


def _k(out: Sequence[int], *shapes: Sequence[int]) -> int:
    n = math.prod(out)
    return max([1] + [n // max(1, math.prod(s)) for s in shapes])


def _bshape(*shapes: Sequence[int]) -> tuple[int, ...]:
    return tuple(torch.broadcast_shapes(*[tuple(s) for s in shapes]))


def _binary_cases(op: str, kwargs: Sequence[dict[str, Any]] = ({},), scalar: float | None = 1.5,
                  special: bool = True) -> Callable[[bool, torch.dtype], list[Case]]:
    def cases(quick: bool, dtype: torch.dtype) -> list[Case]:
        shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = [
            ((37, 100), (37, 100)), ((37, 100), (100,)), ((3, 37, 1), (1, 100)), ((1,), (1,)), ((0, 5), (5,))]
        if not quick:
            shapes += [((4097,), (4097,)), ((2, 3, 4, 5, 6), (3, 1, 5, 1)), ((8193,), (1,)), ((5, 1), (5, 7))]
        out: list[Case] = []
        for i, (sa, sb) in enumerate(shapes):
            a, b = _pair(op, sa, sb, dtype)
            kw = dict(kwargs[i % len(kwargs)])
            out.append(Case((a, b), kw, label=f"{sa} {sb} {kw or ''}".strip(), k=_k(_bshape(sa, sb), sa, sb)))
        a, b = _pair(op, (100, 37), (37, 1), dtype)
        out.append(Case((a.t(), b), dict(kwargs[-1]), label="(37, 100) non-contiguous, (37, 1)", k=100))
        if scalar is not None:
            a, _ = _pair(op, (37, 10), (1,), dtype)
            s: Any = scalar if dtype.is_floating_point else int(scalar + 1.5)
            out.append(Case((a, None), dict(kwargs[0], scalars={1: s}), label=f"(37, 10) and scalar {s}"))
        a, b = _pair(op, (37, 10), (), dtype)
        out.append(Case((a, b), dict(kwargs[0]), label="(37, 10) and a 0-dim tensor", k=370))
        if special and dtype.is_floating_point:
            x = torch.tensor(_SPECIAL).to(dtype)
            y = x[torch.randperm(len(_SPECIAL))]
            if op == "pow":
                x = x.abs()
            out.append(Case((x, y), dict(kwargs[0]), label="NaN, inf, zeros"))
        if not quick:
            a, b = _pair(op, (4096, 4096), (4096,), dtype)
            out.append(Case((a, b), dict(kwargs[0]), label="(4096, 4096) and (4096,)", k=4096, large=True))
        return out
    return cases


# ------------------------------------------------------------------ arithmetic
def _bwd2(f: Callable[..., Any], *names: str) -> Callable[..., Any]:
    def backward(grad: Any, out: Any, args: Args, kw: dict[str, Any]) -> Any:
        a, k = _split(args, kw)
        return f(grad, *a, *(k[n] for n in names if n in k))
    return backward


def _reg_binary(name: str, fn: Callable[..., Any], ref: Callable[..., Any], dtypes: tuple[torch.dtype, ...],
                cases: Callable[[bool, torch.dtype], list[Case]], bwd: Callable[..., Any] | None = None,
                grad_args: tuple[int, ...] = (0, 1), fd: bool = True) -> None:
    register(OpSpec(name, _call(fn), _call(ref), dtypes, cases, bwd, grad_args if bwd else (), fd_check=fd))


_reg_binary("add", E.add, torch.add, FLOATS + INTS, _binary_cases("add", ({}, {"alpha": 2})),
            _bwd2(E.add_backward, "alpha"))
_reg_binary("sub", E.sub, torch.sub, FLOATS + INTS, _binary_cases("sub", ({}, {"alpha": 3})),
            _bwd2(E.sub_backward, "alpha"))
_reg_binary("mul", E.mul, torch.mul, FLOATS + INTS, _binary_cases("mul"), _bwd2(E.mul_backward))
_reg_binary("div", E.div, torch.div, FLOATS + INTS,
            _binary_cases("div", ({}, {"rounding_mode": "floor"}, {}, {"rounding_mode": "trunc"})),
            _bwd2(E.div_backward, "rounding_mode"))
# ties: torch's rule splits the gradient in halves where the operands are equal (not differentiable
# there, so the finite-difference check of the reference does not apply)
_reg_binary("maximum", E.maximum, torch.maximum, FLOATS + INTS, _binary_cases("maximum", scalar=None),
            _bwd2(E.maximum_backward), fd=False)
_reg_binary("minimum", E.minimum, torch.minimum, FLOATS + INTS, _binary_cases("minimum", scalar=None),
            _bwd2(E.minimum_backward), fd=False)


def _pow_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    out = _binary_cases("pow", scalar=None)(quick, dtype)
    x = _positive((37, 10), dtype)
    for e in (2.0, 0.5, 3, 0.0, -1.5):
        out.append(Case((x, None), {"scalars": {1: e}}, label=f"exponent scalar {e}"))
    out.append(Case((None, _num((37, 10), dtype, 1.5)), {"scalars": {0: 2.0}}, label="base scalar 2.0"))
    out.append(Case((None, _num((5, 3), dtype, 1.5)), {"scalars": {0: 0.5}}, label="base scalar 0.5"))
    return out


def _pow_bwd(grad: Any, out: Any, args: Args, kw: dict[str, Any]) -> Any:
    a, _ = _split(args, kw)
    return E.pow_backward(grad, a[0], a[1], out)


register(OpSpec("pow", _call(E.pow), _call(torch.pow), FLOATS, _pow_cases, _pow_bwd, (0, 1)))


# ------------------------------------------------------------------ where, masked_fill, clamp
def _where_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    geo = [((37, 100), (37, 100), (37, 100)), ((37, 1), (100,), (37, 100)), ((100,), (3, 37, 1), (1, 100)),
           ((1,), (1,), (1,)), ((0, 5), (5,), (1,))]
    if not quick:
        geo += [((4097,), (4097,), (4097,)), ((2, 1, 4, 1, 6), (3, 1, 5, 1), (2, 3, 1, 5, 6))]
    out = []
    for sc, sa, sb in geo:
        o = _bshape(sc, sa, sb)
        out.append(Case((torch.rand(*sc) > 0.5, _num(sa, dtype), _num(sb, dtype)), label=f"{sc} {sa} {sb}",
                        k=_k(o, sa, sb)))
    out.append(Case(((torch.rand(100, 37) > 0.5).t(), _num((100, 37), dtype).t(), _num((37, 1), dtype)),
                    label="non-contiguous condition and input", k=100))
    s: Any = 2.5 if dtype.is_floating_point else (True if dtype == torch.bool else 3)
    out.append(Case((torch.rand(37, 10) > 0.5, None, _num((37, 10), dtype)), {"scalars": {1: s}},
                    label="input scalar"))
    if dtype.is_floating_point:
        x = torch.tensor(_SPECIAL).to(dtype)
        out.append(Case((torch.arange(len(_SPECIAL)) % 2 == 0, x, x.flip(0)), label="NaN, inf"))
    if not quick:
        out.append(Case((torch.rand(4096, 4096) > 0.5, _num((4096, 4096), dtype), _num((4096,), dtype)),
                        label="(4096, 4096) and (4096,)", k=4096, large=True))
    return out


def _where_ss(quick: bool, dtype: torch.dtype) -> list[Case]:
    return []


register(OpSpec("where", _call(E.where), _call(torch.where), FLOATS + INTS + (torch.bool,), _where_cases,
                _bwd2(E.where_backward), (1, 2)))


def _masked_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    geo = [((37, 100), (37, 100)), ((37, 100), (100,)), ((3, 37, 100), (37, 1)), ((1,), (1,)), ((0, 5), (5,)),
           ((100,), (37, 1))]   # the last: the mask broadcasts the input (out of place, torch allows it)
    if not quick:
        geo += [((4097,), (4097,)), ((2, 3, 4, 5, 6), (3, 1, 5, 1))]
    out = []
    fill: Any = -1.5 if dtype.is_floating_point else 7
    for i, (sx, sm) in enumerate(geo):
        x, m = _num(sx, dtype), torch.rand(*sm) > 0.5
        if i % 2:
            out.append(Case((x, m, torch.tensor(fill).to(dtype)), label=f"{sx} {sm} 0-dim value",
                            k=math.prod(_bshape(sx, sm))))
        else:
            out.append(Case((x, m, None), {"scalars": {2: fill}}, label=f"{sx} {sm} value {fill}",
                            k=_k(_bshape(sx, sm), sx)))
    out.append(Case((_num((100, 37), dtype).t(), torch.rand(37, 1) > 0.5, None), {"scalars": {2: fill}},
                    label="non-contiguous input"))
    if dtype.is_floating_point:
        x = torch.tensor(_SPECIAL).to(dtype)
        out.append(Case((x, torch.arange(len(_SPECIAL)) % 3 == 0, None), {"scalars": {2: float("nan")}},
                        label="NaN, inf; value NaN"))
    if not quick:
        out.append(Case((_num((4096, 4096), dtype), torch.rand(4096) > 0.5, None), {"scalars": {2: fill}},
                        label="(4096, 4096) mask (4096,)", large=True))
    return out


def _masked_bwd(grad: Any, out: Any, args: Args, kw: dict[str, Any]) -> Any:
    a, _ = _split(args, kw)
    return E.masked_fill_backward(grad, a[0], a[1], a[2])


register(OpSpec("masked_fill", _call(E.masked_fill), _call(torch.masked_fill), FLOATS + INTS + (torch.bool,),
                _masked_cases, _masked_bwd, (0, 2)))


def _clamp_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    lo: Any = -0.7 if dtype.is_floating_point else -10
    hi: Any = 0.9 if dtype.is_floating_point else 12
    out = [Case((_num((37, 100), dtype), None, None), {"scalars": {1: lo, 2: hi}}, label="scalar bounds"),
           Case((_num((37, 100), dtype), None, None), {"scalars": {1: lo}}, label="min only"),
           Case((_num((37, 100), dtype), None, None), {"scalars": {2: hi}}, label="max only"),
           Case((_num((37, 100), dtype), _num((100,), dtype), _num((37, 1), dtype) + 1), label="tensor bounds",
                k=100),
           Case((_num((37, 100), dtype), _num((37, 100), dtype), _num((37, 100), dtype)),
                label="tensor bounds, min > max in places"),
           Case((_num((37, 100), dtype), _num((100,), dtype), None), label="tensor min", k=37),
           Case((_num((3, 37, 1), dtype), None, _num((1, 100), dtype)), label="tensor max, outer", k=111),
           Case((_num((0, 5), dtype), None, None), {"scalars": {1: lo, 2: hi}}, label="size 0"),
           Case((_num((1,), dtype), _num((1,), dtype), None), label="size 1"),
           Case((_num((100, 37), dtype).t(), None, None), {"scalars": {1: lo, 2: hi}}, label="non-contiguous")]
    if dtype.is_floating_point:
        x = torch.tensor(_SPECIAL).to(dtype)
        out.append(Case((x, None, None), {"scalars": {1: lo, 2: hi}}, label="NaN, inf"))
    if not quick:
        out.append(Case((_num((4097,), dtype), _num((4097,), dtype), None), label="4097 tensor min"))
        out.append(Case((_num((4096, 4096), dtype), None, None), {"scalars": {1: lo, 2: hi}},
                        label="(4096, 4096) scalar bounds", large=True))
    return out


def _clamp_bwd(grad: Any, out: Any, args: Args, kw: dict[str, Any]) -> Any:
    a, _ = _split(args, kw)
    return E.clamp_backward(grad, *a)


register(OpSpec("clamp", _call(E.clamp), _call(torch.clamp), FLOATS + INTS, _clamp_cases, _clamp_bwd, (0, 1, 2),
                fd_check=False))   # clamp bounds where min > max are not differentiable points of torch's rule


# ------------------------------------------------------------------ comparisons and logic
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _reg_binary(_name, getattr(E, _name), getattr(torch, _name), FLOATS + INTS, _binary_cases(_name))
for _name in ("logical_and", "logical_or", "logical_xor"):
    _reg_binary(_name, getattr(E, _name), getattr(torch, _name), FLOATS + INTS + (torch.bool,),
                _binary_cases(_name, scalar=None))


def _not_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    out = [Case((_num(s, dtype),), label=str(s)) for s in [(37, 100), (1,), (0, 5)]]
    out.append(Case((_num((100, 37), dtype).t(),), label="non-contiguous"))
    if dtype.is_floating_point:
        out.append(Case((torch.tensor(_SPECIAL).to(dtype),), label="NaN, inf, zeros"))
    if not quick:
        out.append(Case((_num((4096, 4096), dtype),), label="(4096, 4096)", large=True))
    return out


register(OpSpec("logical_not", E.logical_not, torch.logical_not, FLOATS + INTS + (torch.bool,), _not_cases))


# ------------------------------------------------------------------ casts and sum_to_size
_TARGETS = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.bool)


def _cast_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    out = []
    for i, t in enumerate(_TARGETS):
        s = [(37, 100), (1,), (0, 5), (1000,), (3, 5, 7), (4097,)][i]
        x = _num(s, dtype, 60.0)
        out.append(Case((x, t), label=f"{s} -> {str(t).removeprefix('torch.')}"))
    out.append(Case((_num((100, 37), dtype, 60.0).t(), torch.int32), label="non-contiguous -> int32"))
    if dtype.is_floating_point:
        x = torch.tensor(_SPECIAL + [200.7, -200.7, 127.9, 128.5, -0.7, 3e9]).to(dtype)
        out += [Case((x, t), label=f"NaN, inf, out of range -> {str(t).removeprefix('torch.')}") for t in _TARGETS]
    if not quick:
        out.append(Case((_num((4096, 4096), dtype, 60.0), torch.float16 if dtype != torch.float16 else torch.float32),
                        label="(4096, 4096)", large=True))
    return out


register(OpSpec("npu_dtype_cast", E.npu_dtype_cast, lambda x, dtype: x.to(dtype), FLOATS + INTS + (torch.bool,),
                _cast_cases))


def _sum_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    geo = [((37, 100), (100,)), ((37, 100), (37, 1)), ((3, 37, 100), (3, 1, 100)), ((3, 37, 100), (1, 37, 1)),
           ((3, 37, 100), ()), ((37, 100), (37, 100)), ((0, 5), (5,)), ((1,), (1,)), ((2000, 3), (3,))]
    if not quick:
        geo += [((2, 3, 4, 5, 6), (3, 1, 5, 1)), ((5000, 7), (1, 7)), ((3, 9000), (3, 1))]
    out = [Case((_num(g, dtype), s), label=f"{g} -> {s}", k=_k(g, s)) for g, s in geo]
    out.append(Case((_num((100, 37), dtype).t(), (37, 1)), label="non-contiguous (37, 100) -> (37, 1)", k=100))
    if not quick:
        out.append(Case((_num((4096, 4096), dtype), (4096,)), label="(4096, 4096) -> (4096,)", k=4096, large=True))
    return out


register(OpSpec("sum_to_size", E.sum_to_size, lambda g, size: g.sum_to_size(size) if size else g.sum(), FLOATS,
                _sum_cases))
