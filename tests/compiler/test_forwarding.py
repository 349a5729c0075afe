"""Host-side MTE2 -> MTE1 forwarding (compiler.backend.codegen_cube.forwarding): a GM -> L1 load whose only
reader is the next L1 -> L0A/L0B move writes the L0 layout itself. What it writes must be what the
two copies leave, and it must only apply where nothing else could see the L1 buffer."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from compiler.backend import codegen_cube, cube
from compiler.frontend.lower import lower
from compiler.ir import Load, Move
from compiler.pipeline import stages
from dsl.types import Mem
from simulator.config import load_config
from tests.compiler.test_cube_native import DT, NP, buffer, build, c0, ints, same_bits, to_l0b, to_zz, up


@functools.lru_cache(maxsize=None)
def nd2l0_fn(dt: str, is_a: bool):  # type: ignore[no-untyped-def]
    params = [("d", "ptr"), ("s", "ptr"), ("r", "i64"), ("c", "i64"), ("st", "i64"), ("rp", "i64"), ("cp", "i64")]
    return build(params, lambda g, *a: cube.gen_nd2l0(g, *a, DT[dt], is_a))


@pytest.mark.parametrize("dt", list(DT))
@pytest.mark.parametrize("is_a", [True, False])
@pytest.mark.parametrize("rows,cols", [(1, 1), (17, 31), (16, 32), (5, 97), (32, 64), (3, 33), (48, 16)])
def test_nd2l0_writes_what_the_two_copies_leave(dt: str, is_a: bool, rows: int, cols: int) -> None:
    c = c0(DT[dt])
    fr, w = (16, c) if is_a else (c, 16)  # fractal rows x columns
    rp, cp = up(rows, fr) + fr, up(cols, w) + 2 * w  # spare fractals: they must stay untouched
    stride = cols + 3
    src = ints((rows, stride), dt)
    dst = buffer(rp * cp, NP[dt], fill=7)
    nd2l0_fn(dt, is_a)(dst, src, rows, cols, stride, rp, cp)
    full = (to_zz if is_a else to_l0b)(src[:, :cols], rp, cp, c)
    grid = full.reshape(rp // fr, cp // w, fr, w)
    want = np.full_like(grid, 7)
    covered = (-(-rows // fr), -(-cols // w))  # the fractals an L1 -> L0 move copies
    want[: covered[0], : covered[1]] = grid[: covered[0], : covered[1]]
    assert same_bits(dst, want.reshape(-1))


# ------------------------------------------------------------------ where it applies
def core_ir(kernel, args):  # type: ignore[no-untyped-def]
    cfg = load_config()
    values, infos = kernel.bind(args, {})
    params, _ = kernel.params_for(values, infos)
    ir = lower(kernel.fdef, kernel.env, params, kernel.options)
    for _, fn in stages():
        ir = fn(ir, cfg)
    return ir


def moves(body) -> list:  # type: ignore[no-untyped-def]
    out = []
    for s in body:
        out += moves(getattr(s, "body", ())) + moves(getattr(s, "then", ())) + moves(getattr(s, "orelse", ()))
        if isinstance(s, Move) and s.dst.mem in (Mem.L0A, Mem.L0B):
            out.append(s)
    return out


def test_both_operands_of_a_plain_matmul_are_forwarded() -> None:
    from matmul import matmul

    a = np.zeros((64, 96), np.float16)
    ir = core_ir(matmul, (a, a.T.copy(), np.zeros((64, 64), np.float32)))
    fw = codegen_cube.forwarding(ir.body)
    assert sorted(mv.dst.mem.value for mv in fw.values()) == ["L0A", "L0B"]
    assert all(mv in moves(ir.body) for mv in fw.values())


def test_transposed_operands_and_shared_l1_buffers_are_not(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(a: GM, b: GM, c: GM, d: GM):
            a1 = dsl.alloc(dsl.L1, (32, 16), a.dtype)
            dsl.copy(a1, a[0:32, 0:16])
            acc = dsl.zeros((32, 32), f32)
            acc += a1 @ b.T[0:16, 0:32]
            c[0:32, 0:32] = acc
            acc2 = dsl.zeros((32, 32), f32)
            acc2 += a1 @ b.T[0:16, 32:64]
            d[0:32, 0:32] = acc2
    """)
    a = torch.randn(32, 16).half()
    b = torch.randn(64, 16).half()  # used transposed
    ir = core_ir(m.k, (a.numpy(), b.numpy(), np.zeros((32, 32), np.float32), np.zeros((32, 32), np.float32)))
    assert len(moves(ir.body)) == 4
    assert codegen_cube.forwarding(ir.body) == {}  # a1 is read twice; b's windows are transposed
    c, d = torch.empty(32, 32), torch.empty(32, 32)
    m.k[1](a, b, c, d)
    torch.testing.assert_close(c, a.float() @ b[:32].float().T)
    torch.testing.assert_close(d, a.float() @ b[32:].float().T)


def test_forwarding_stops_at_anything_but_copies_flags_and_checks(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(a: GM, b: GM, c: GM):
            a1 = dsl.alloc(dsl.L1, (16, 16), a.dtype)
            dsl.copy(a1, a[0:16, 0:16])
            acc = dsl.zeros((16, 16), f32)
            acc += a1 @ b[0:16, 0:16]
            c[0:16, 0:16] = acc
    """)
    a = torch.randint(-3, 4, (16, 16)).half()
    b = torch.randint(-3, 4, (16, 16)).half()
    ir = core_ir(m.k, (a.numpy(), b.numpy(), np.zeros((16, 16), np.float32)))
    fw = codegen_cube.forwarding(ir.body)
    loads = {s.dst.name.split(".")[0]: s.dst.id for s in ir.body if isinstance(s, Load) and s.dst.mem == Mem.L1}
    # a1's load and its move have the accumulator's set-up between them; b's staging buffer is next to its move
    assert set(fw) == {loads["b1"]}
    c = torch.empty(16, 16)
    m.k[1](a, b, c)
    assert torch.equal(c, a.float() @ b.float())


def test_a_lesser_mmad_path_computes_the_same(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """VINCI_CUBE_ISA=generic (read at start-up): the plain-FMA path, under its own cache key."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys, torch; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/examples/kernels']\n"
        "from compiler.backend import cube; from matmul import matmul\n"
        "a = torch.randint(-3, 4, (40, 72)).to(torch.bfloat16); b = torch.randint(-3, 4, (72, 33)).to(torch.bfloat16)\n"
        "c = torch.empty(40, 33); matmul[4](a, b, c, BM=32, BN=32, BK=32)\n"
        "print(cube.host_isa(), torch.equal(c, a.float() @ b.float()))\n")
    env = {**os.environ, "VINCI_CUBE_ISA": "generic", "VINCI_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code, str(root)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["generic", "True"]


def test_a_window_smaller_than_its_l1_buffer(source) -> None:  # type: ignore[no-untyped-def]
    """An explicit L1 buffer holding a shorter window than it has room for: the move covers the
    window (its extent), whichever way the host stages it."""
    m = source("""
        @dsl.kernel
        def k(a: GM, b: GM, c: GM):
            a1 = dsl.alloc(dsl.L1, (32, 24), a.dtype)
            dsl.copy(a1, a[0:20, 0:24])
            acc = dsl.zeros((32, 16), f32)
            acc += a1 @ b[0:24, 0:16]
            c[0:20, 0:16] = acc
    """)
    a = torch.randint(-3, 4, (20, 24)).half()
    b = torch.randint(-3, 4, (24, 16)).half()
    c = torch.full((20, 16), float("nan"))
    m.k[1](a, b, c)
    assert torch.equal(c, a.float() @ b.float())
