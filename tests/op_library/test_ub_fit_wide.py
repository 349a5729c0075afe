"""Blocks the host picks must fit UB for every variant of a kernel, not only the variants the quick
matrix reaches: the full matrix found div(rounding_mode='floor') on rows wider than 1024 and the
f16 / bf16 attention backward at head dim 64 with a mask overflowing UB (E301)."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import op_library as L
from compiler.pipeline import to_core
from dsl.errors import KernelError
from op_library.elementwise import _block
from op_library.elementwise_kernels import ew_kernel
from simulator.config import load_config

_OPS = sorted(set(re.findall(r'OP == "([a-z_0-9]+)"',
                             (Path(L.__file__).parent / "elementwise_kernels.py").read_text())))


def _place(op: str, dt: torch.dtype, code: int, is_int: int, cond: int | None = None) -> None:
    """Compile ew_kernel for `op` with three full-row tensor operands (the most live tiles; operand
    `cond` a bool condition / mask) at the block `_block` picks for a 5000-wide row, through
    placement (where E301 is raised)."""
    t = torch.zeros(1, 1, 5000, dtype=dt)
    m = torch.zeros(1, 1, 5000, dtype=torch.bool)
    a, b, c = (m if cond == i else t for i in range(3))
    codes = [0 if cond == i else code for i in range(3)]
    out = torch.zeros(1, 1, 5000, dtype=torch.int32 if is_int else torch.float32)
    C, R = _block(1, 5000, op)
    kw = dict(OP=op, LA=0, LB=0, LC=0, CA=codes[0], CB=codes[1], CC=codes[2], CO=int(dt == torch.float16), INT=is_int,
              R=R, C=C)
    values, infos = ew_kernel.bind((a, b, c, out, 0.0, 0.0, 0.0, 0, 0, 0, 0.0, 0, 0, 0, 0), kw)
    params, _ = ew_kernel.params_for(values, infos)
    to_core(ew_kernel.fdef, ew_kernel.env, params, ew_kernel.options, load_config("ascend910b1"))


@pytest.mark.parametrize("op", _OPS)
def test_every_elementwise_op_fits_ub_at_the_widest_block(op: str) -> None:
    """f32, f16 operands widened to f32 (more tiles) and i32, each also with a bool first or second operand;
    a variant the frontend rejects for its operand types (e.g. where() with a float condition) is
    not one the host launches, but at least one must compile, and none may overflow UB."""
    placed = 0
    for (dt, code, is_int), cond in itertools.product(((torch.float32, 0, 0), (torch.float16, 1, 0),
                                                       (torch.int32, 0, 1)), (None, 0, 1)):
        try:
            _place(op, dt, code, is_int, cond)
            placed += 1
        except KernelError as e:
            assert e.code != "E301", f"{op} with {dt} operands: {e}"
    assert placed, f"no variant of {op} compiled"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_div_floor_on_wide_rows(dtype: torch.dtype) -> None:
    a = (torch.randn(3, 5000) * 50).to(dtype)
    b = (torch.randn(3, 5000) * 3).to(dtype)
    b[b == 0] = 1
    got = L.div(a, b, rounding_mode="floor")
    if dtype == torch.float32:
        torch.testing.assert_close(got, torch.div(a, b, rounding_mode="floor"), rtol=0, atol=0)
    else:   # bit for bit what narrower blocks give (against torch the matrix checks f16 / bf16 with
        # its tolerance: a quotient near a tie of the half grid may round to the other neighbour)
        parts = [L.div(a[:, i:i + 1000], b[:, i:i + 1000], rounding_mode="floor") for i in range(0, 5000, 1000)]
        assert torch.equal(got, torch.cat(parts, dim=1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mask", ["float", "bool causal", "dropout"])
def test_half_attention_backward_with_masks_at_head_dim_64(dtype: torch.dtype, mask: str) -> None:
    B, H, Lq, S, D = 2, 2, 37, 100, 64
    q, k, v = (torch.randn(B, H, n, D).to(dtype) for n in (Lq, S, S))
    m = torch.randn(Lq, S).to(dtype) if mask == "float" else torch.rand(Lq, S) > 0.3 if mask == "bool causal" \
        else None
    causal = mask == "bool causal"
    p = 0.2 if mask == "dropout" else 0.0
    out = L.scaled_dot_product_attention(q, k, v, m, dropout_p=p, is_causal=causal)
    g = torch.randn_like(out)
    dq, dk, dv = L.scaled_dot_product_attention_backward(g, q, k, v, out, m, dropout_p=p, is_causal=causal, seed=3)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    if p:   # the dropout draws are the kernel's own: finite gradients are the check here (test_attention
        assert all(torch.isfinite(t.float()).all() for t in (dq, dk, dv))   # checks their consistency)
        return
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaves, attn_mask=None if m is None else m.float() if mask == "float"
                                         else m, is_causal=causal)
    ref.backward(g.float())
    tol = dict(rtol=0.05, atol=0.05) if dtype == torch.float16 else dict(rtol=0.1, atol=0.1)
    for got, leaf in zip((dq, dk, dv), leaves, strict=True):
        torch.testing.assert_close(got.float(), leaf.grad, **tol)
