"""Registry entries (op_library.registry) for op_library.nn: embedding, cross_entropy, nll_loss,
mse_loss, dropout, native_dropout.

Shapes: class counts and widths that are multiples of no tile (37, 1000, 1025; C = 5000 spans three
class windows of 2048), size-0 and size-1 dims, spatial (N, C, d1, d2) inputs, a non-contiguous
input, ignore_index present, class weights, label smoothing, every reduction, NaN / inf where torch
propagates them; with --full one large case at a bench shape (cross_entropy / nll_loss 8192 x 4096,
embedding 8192 tokens x 4096 of a 32000-row table, mse_loss and dropout 4096 x 4096).

The dropout entries are checked against a reference that draws the same seed from torch's generator
(`torch.manual_seed(seed)` before both) and builds the mask from the Philox reference of the
interpreter (compiler.interp.interpret_rng): the op's mask and values must match it exactly /
to rounding.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import op_library.nn as N
from op_library.registry import FLOATS, Case, OpSpec, register


def _r(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


# embedding ---------------------------------------------------------------------------------------

def _embedding_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    out = [Case((torch.randint(0, 50, (3, 7)), _r(50, 37, dtype=dtype)), label="3x7 tokens, 50x37 table",
                k=21),
           Case((torch.randint(0, 10, (13,)), _r(10, 1000, dtype=dtype), 3), label="13 tokens, padding_idx=3",
                k=13),
           Case((torch.randint(0, 7, (30,)), _r(7, 1, dtype=dtype), -1), label="D=1, padding_idx=-1", k=30),
           Case((torch.zeros(0, dtype=torch.long), _r(6, 5, dtype=dtype)), label="no tokens"),
           Case((torch.tensor([2]), _r(3, 9, dtype=dtype)), label="one token"),
           Case((torch.randint(0, 9, (6, 4)).t(), _r(9, 33, dtype=dtype)), label="non-contiguous indices", k=24)]
    if not quick:
        out += [Case((torch.randint(0, 100, (64,)), _r(100, 1025, dtype=dtype), 0), label="64 tokens, 100x1025",
                     k=64),
                Case((torch.randint(0, 32000, (8192,)), _r(32000, 4096, dtype=dtype)),
                     label="8192 tokens, 32000x4096 table", k=8, large=True)]
    return out


def _embedding_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    idx, w = args[0], args[1]
    pad = args[2] if len(args) > 2 else kw.get("padding_idx")
    pad = None if pad is None else pad % w.shape[0]   # F.embedding's -1 is the last row (aten's -1: none)
    return (N.embedding_backward(grad, idx, w.shape[0], pad, kw.get("scale_grad_by_freq", False)),)


# (the f64 gradcheck of F.embedding runs on the smallest case, "one token", which has no padding_idx:
# torch's padding row gets no gradient by definition, which a finite difference would contradict)
register(OpSpec("embedding", N.embedding, F.embedding, FLOATS, _embedding_cases, _embedding_bwd, (1,)))


# cross_entropy / nll_loss ------------------------------------------------------------------------

def _targets(n: tuple[int, ...], C: int, ignore: int | None = None) -> torch.Tensor:
    t = torch.randint(0, max(C, 1), n)
    if ignore is not None and t.numel() > 1:
        t.view(-1)[1] = ignore
    return t


def _loss_cases(quick: bool, dtype: torch.dtype, log_probs: bool) -> list[Case]:
    def x(*shape: int) -> torch.Tensor:
        v = torch.randn(*shape) * 2
        return (torch.log_softmax(v, 0 if v.dim() == 1 else 1) if log_probs else v).to(dtype)

    out: list[Case] = []
    for red in ("mean", "sum", "none"):
        out.append(Case((x(6, 37), _targets((6,), 37, -100)), {"reduction": red}, label=f"6x37 ignore_index, {red}",
                        k=37))
    out += [
        Case((x(5, 1000), _targets((5,), 1000)), {"weight": torch.rand(1000).to(dtype)}, label="5x1000 weight", k=1000),
        Case((x(4, 5000), _targets((4,), 5000, 7)), {"ignore_index": 7, "reduction": "sum"},
             label="4x5000 ignore_index=7 (a class), sum", k=5000),
        Case((x(2, 7, 3, 5), _targets((2, 3, 5), 7, -100)), {"weight": torch.rand(7).to(dtype)},
             label="2x7x3x5 spatial, weight", k=30),
        Case((x(2, 7, 3, 5), _targets((2, 3, 5), 7)), {"reduction": "none"}, label="2x7x3x5 spatial, none", k=7),
        Case((x(1, 1), torch.zeros(1, dtype=torch.long)), label="1x1", k=1),
        Case((x(0, 5), torch.zeros(0, dtype=torch.long)), {"reduction": "sum"}, label="0 rows, sum"),
        Case((x(0, 5), torch.zeros(0, dtype=torch.long)), {"reduction": "none"}, label="0 rows, none"),
        Case((x(37), torch.tensor(3)), label="(C,) input, 0-d target", k=37),
        Case((x(37, 6).t(), _targets((6,), 37)), label="non-contiguous input", k=37),
    ]
    if not log_probs:
        out += [
            Case((x(6, 37), _targets((6,), 37, -100)), {"label_smoothing": 0.1}, label="label_smoothing 0.1", k=37),
            Case((x(6, 37), _targets((6,), 37)), {"label_smoothing": 0.2, "weight": torch.rand(37).to(dtype),
                                                  "reduction": "none"}, label="label_smoothing, weight, none", k=37),
            Case((x(3, 5000), _targets((3,), 5000)), {"label_smoothing": 0.05, "weight": torch.rand(5000).to(dtype)},
                 label="3x5000 label_smoothing, weight", k=5000),
        ]
    special = x(4, 9)
    special[0, 2] = float("nan")          # a NaN logit: row 0's loss is NaN
    special[1, 3] = float("-inf")         # -inf on a class that is not the target: finite
    special[2, 0] = float("inf") if not log_probs else float("-inf")
    t = torch.tensor([2, 5, 1, 4])
    out.append(Case((special, t), {"reduction": "none"}, label="NaN / inf logits, none", k=9))
    if not quick:
        out += [Case((x(33, 129), _targets((33,), 129, -100)), {"reduction": red}, label=f"33x129 {red}", k=129)
                for red in ("mean", "sum")]
        if not log_probs:
            out.append(Case((x(64, 4097), _targets((64,), 4097)), {"label_smoothing": 0.1},
                            label="64x4097 smoothing", k=4097))
        out.append(Case((x(64, 4097), _targets((64,), 4097, -100)), {"reduction": "none"}, label="64x4097 none",
                        k=4097))
        out.append(Case((x(8192, 4096), _targets((8192,), 4096, -100)), label="8192x4096 mean", k=8192, large=True))
    return out


def _ce_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    return (N.cross_entropy_backward(grad, args[0], args[1], **kw),)


def _nll_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    return (N.nll_loss_backward(grad, args[0], args[1], **kw),)


register(OpSpec("cross_entropy", N.cross_entropy, F.cross_entropy, FLOATS,
                lambda q, dt: _loss_cases(q, dt, False), _ce_bwd, (0,)))
register(OpSpec("nll_loss", N.nll_loss, F.nll_loss, FLOATS, lambda q, dt: _loss_cases(q, dt, True), _nll_bwd, (0,)))


# mse_loss ----------------------------------------------------------------------------------------

def _mse_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    out = [Case((_r(37, dtype=dtype), _r(37, dtype=dtype)), {"reduction": red}, label=f"37 {red}", k=37)
           for red in ("mean", "sum", "none")]
    out += [Case((_r(3, 1000, dtype=dtype), _r(3, 1000, dtype=dtype)), label="3x1000 mean", k=3000),
            Case((_r(1, dtype=dtype), _r(1, dtype=dtype)), label="1", k=1),
            Case((_r(2, 0, 3, dtype=dtype), _r(2, 0, 3, dtype=dtype)), {"reduction": "sum"}, label="size 0, sum"),
            Case((_r(40, 33, dtype=dtype).t(), _r(33, 40, dtype=dtype)), {"reduction": "sum"},
                 label="non-contiguous, sum", k=1320)]
    sp = _r(8, dtype=dtype)
    sp[1], sp[4] = float("nan"), float("inf")
    out.append(Case((sp, _r(8, dtype=dtype)), {"reduction": "none"}, label="NaN / inf, none"))
    if not quick:
        out += [Case((_r(8193, dtype=dtype), _r(8193, dtype=dtype)), label="8193 mean", k=8193),
                Case((_r(4096, 4096, dtype=dtype), _r(4096, 4096, dtype=dtype)), label="4096x4096 mean",
                     k=4096 * 4096, large=True)]
    return out


register(OpSpec("mse_loss", N.mse_loss, F.mse_loss, FLOATS, _mse_cases,
                lambda g, out, args, kw: N.mse_loss_backward(g, args[0], args[1], **kw), (0, 1)))


# dropout -----------------------------------------------------------------------------------------

def _philox_keep(seed: int, n: int, p: float) -> torch.Tensor:
    """The keep mask the op draws after torch.manual_seed(seed): the Philox reference of the
    interpreter (compiler.interp.interpret_rng), word i for element i."""
    from compiler.interp.interpret_rng import rng_values

    torch.manual_seed(seed)
    key = N._seed()
    return torch.from_numpy(np.ascontiguousarray(rng_values(True, key, 0, max(n, 1), 1, n)[0] >= p))


def _dropout_seeded(input: torch.Tensor, p: float, training: bool, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return N.dropout(input, p, training)


def _dropout_ref(input: torch.Tensor, p: float, training: bool, seed: int) -> torch.Tensor:
    if not training or p == 0:
        return input * 1
    keep = _philox_keep(seed, input.numel(), p).reshape(input.shape).to(input.dtype)
    return input * (keep / (1 - p) if p < 1 else keep * 0)


def _native_dropout_seeded(input: torch.Tensor, p: float, train: bool, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    return N.native_dropout(input, p, train)


def _native_dropout_ref(input: torch.Tensor, p: float, train: bool, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not train:
        return input * 1, torch.ones(input.shape, dtype=torch.bool)
    keep = _philox_keep(seed, input.numel(), p).reshape(input.shape)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return input * keep.to(input.dtype) * scale, keep


def _dropout_cases(quick: bool, dtype: torch.dtype) -> list[Case]:
    out = [Case((_r(1000, dtype=dtype), 0.3, True, 11), label="1000 p=0.3"),
           Case((_r(3, 37, dtype=dtype), 0.5, True, 12), label="3x37 p=0.5"),
           Case((_r(1, dtype=dtype), 0.1, True, 13), label="1 element"),
           Case((_r(2, 0, dtype=dtype), 0.5, True, 14), label="size 0"),
           Case((_r(37, 9, dtype=dtype).t(), 0.2, True, 15), label="non-contiguous"),
           Case((_r(37, dtype=dtype), 0.0, True, 16), label="p=0"),
           Case((_r(37, dtype=dtype), 1.0, True, 17), label="p=1"),
           Case((_r(37, dtype=dtype), 0.5, False, 18), label="training=False")]
    sp = _r(16, dtype=dtype)
    sp[0], sp[1], sp[2] = float("nan"), float("inf"), float("-inf")
    out.append(Case((sp, 0.5, True, 19), label="NaN / inf"))
    if not quick:
        out += [Case((_r(8193, dtype=dtype), 0.1, True, 20), label="8193 p=0.1"),
                Case((_r(4096, 4096, dtype=dtype), 0.1, True, 21), label="4096x4096 p=0.1", large=True)]
    return out


def _scale(p: float) -> float:
    return 0.0 if p == 1 else 1.0 / (1.0 - p)


def _dropout_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    # dropout returns no mask: native_dropout with the same seed draws the same one (p = 0 or
    # training=False: all kept, scale 1)
    x, p, training, seed = args
    if not training or p == 0:
        return (N.native_dropout_backward(grad, N.native_dropout(x, p, False)[1], 1.0),)
    return (N.native_dropout_backward(grad, _native_dropout_seeded(x, p, True, seed)[1], _scale(p)),)


def _native_dropout_bwd(grad: Any, out: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Sequence[Any]:
    return (N.native_dropout_backward(grad, out[1], _scale(args[1]) if args[2] else 1.0),)


register(OpSpec("dropout", _dropout_seeded, _dropout_ref, FLOATS, _dropout_cases, _dropout_bwd, (0,)))
register(OpSpec("native_dropout", _native_dropout_seeded, _native_dropout_ref, FLOATS, _dropout_cases,
                _native_dropout_bwd, (0,)))
