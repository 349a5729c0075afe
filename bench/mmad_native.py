"""A 1024^3 GEMM on one thread built from the cube unit's native pieces, against torch.

For each BM x BN output block, for each BK step of k: the A block (BM x BK) and the B block
(BK x BN) GM -> L0A / L0B in one pass each (as compiled kernels do when the L1 staging buffer
has no other reader: compiler.backend.codegen_cube.forwarding; `--two-pass`: ND->NZ into L1, then L1 -> L0),
Mmad (init on the first step); then Fixpipe of the block to the output. Extents are run-time values and capacities constants, as in a
compiled kernel. Prints GFLOP/s and ratios (torch / ours: 1.0 means as fast as torch); asserts
nothing. Timings are the minimum of interleaved repeats (the host's cores are shared).

    python bench/mmad_native.py                      # f32, f16, bf16 at 128x128x64
    python bench/mmad_native.py --blocks 256x128x128 --dtypes bf16
    python bench/mmad_native.py --sweep              # other block sizes that fit L0A/L0B/L0C
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler import jit  # noqa: E402
from compiler.backend import cube  # noqa: E402
from compiler.backend.gen import Gen  # noqa: E402
from compiler.ir import Kernel  # noqa: E402
from dsl.types import DType, bf16, f16, f32  # noqa: E402

DT = {"f32": f32, "f16": f16, "bf16": bf16}
NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# simulated capacities (910B1): a DSL user's blocks must fit them
L0A, L0B, L0C = 64 << 10, 64 << 10, 128 << 10


def gemm(dt: DType, bm: int, bn: int, bk: int, isa: str | None, two_pass: bool = False):  # type: ignore[no-untyped-def]
    """The compiled GEMM: (A, B, C, L1a, L1b, L0a, L0b, L0c, scratch, M, N, K, m, n, k) -> None."""
    g = Gen(k=Kernel("gemm", [], (), 0, []), sym="gemm")
    names = "A B C l1a l1b l0a l0b l0c s M N K m n k".split()
    A, B, C, l1a, l1b, l0a, l0b, l0c, s, M, N, K, m, n, k = ("%" + x for x in names)
    es = dt.itemsize
    mul, add, ptr = cube._mul, cube._add, cube._ptr

    def block(mo: str, no: str) -> None:
        def step(ko: str) -> None:
            pa = ptr(g, A, mul(g, add(g, mul(g, mul(g, mo, bm), K), mul(g, ko, bk)), es))
            pb = ptr(g, B, mul(g, add(g, mul(g, mul(g, ko, bk), N), mul(g, no, bn)), es))
            if two_pass:
                cube.gen_nd2nz(g, l1a, pa, m, k, K, bm, bk, dt)
                cube.gen_nd2nz(g, l1b, pb, k, n, N, bk, bn, dt)
                cube.gen_l1_to_l0a(g, l0a, l1a, m, k, bm, bk, dt, False)
                cube.gen_l1_to_l0b(g, l0b, l1b, k, n, bk, bn, dt, False)
            else:
                cube.gen_nd2l0(g, l0a, pa, m, k, K, bm, bk, dt, True)
                cube.gen_nd2l0(g, l0b, pb, k, n, N, bk, bn, dt, False)
            init = g.op(f"zext i1 {g.op(f'icmp eq i64 {ko}, 0')} to i64")
            cube.gen_mmad(g, l0c, l0a, l0b, m, n, k, bm, bk, bn, dt, init, s, isa=isa)

        g.loop(g.op(f"sdiv i64 {K}, {bk}"), step)
        pc = ptr(g, C, mul(g, add(g, mul(g, mul(g, mo, bm), N), mul(g, no, bn)), 4))
        cube.gen_fix(g, pc, l0c, m, n, N, bm, f32, f32, False, None)

    g.loop(g.op(f"sdiv i64 {M}, {bm}"), lambda mo: g.loop(g.op(f"sdiv i64 {N}, {bn}"), lambda no: block(mo, no)))
    params = ", ".join([f"ptr %{x}" for x in names[:9]] + [f"i64 %{x}" for x in names[9:]])
    obj, _ = jit.optimize_to_object(cube.module(g, "gemm", params))
    sig = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 9 + [ctypes.c_int64] * 6))
    return sig(jit.load_object(obj, "gemm"))


def aligned(n: int, dtype: object, align: int = 64) -> np.ndarray:
    dt = np.dtype(dtype)
    raw = np.zeros(n * dt.itemsize + 128, np.uint8)
    off = (-raw.ctypes.data) % 64 + (align % 64)
    return raw[off: off + n * dt.itemsize].view(dt)


def best_of(fn, reps: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


class Case:
    """One compiled GEMM with its buffers, ready to time."""

    def __init__(self, name: str, n: int, blocks: tuple[int, int, int], isa: str | None, align: int,
                 two_pass: bool = False) -> None:
        bm, bn, bk = blocks
        d = DT[name]
        self.fn = gemm(d, bm, bn, bk, isa, two_pass)
        rng = np.random.default_rng(0)
        self.a = torch.from_numpy(rng.standard_normal((n, n), np.float32)).to(TORCH[name])
        self.b = torch.from_numpy(rng.standard_normal((n, n), np.float32)).to(TORCH[name])
        ga, gb = aligned(n * n, NP[name]), aligned(n * n, NP[name])
        ga[:] = self.a.float().numpy().astype(NP[name]).reshape(-1)
        gb[:] = self.b.float().numpy().astype(NP[name]).reshape(-1)
        self.c = aligned(n * n, np.float32)
        onchip = [aligned(x, NP[name], align) for x in (bm * bk, bk * bn, bm * bk, bk * bn)]
        l0c = aligned(bm * bn, np.float32, align)
        scratch = aligned(bm * bk + bk * bn + 64, np.float32)
        self.keep = (ga, gb, onchip, l0c, scratch)
        self.args = [x.ctypes.data for x in (ga, gb, self.c, *onchip, l0c, scratch)] + [n, n, n, bm, bn, bk]

    def __call__(self) -> None:
        self.fn(*self.args)

    def error(self) -> float:
        self()
        want = (self.a.float() @ self.b.float()).numpy()
        return float(np.abs(self.c.reshape(want.shape) - want).max() / np.abs(want).max())


def gflops(n: int, sec: float) -> float:
    return 2 * n ** 3 / sec / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--blocks", default="128x128x64", help="BMxBNxBK")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--isa", default=None, help="amx | avx512 | generic (default: the host's best)")
    ap.add_argument("--align", type=int, default=64, help="on-chip buffer alignment (32: split cache lines)")
    ap.add_argument("--sweep", action="store_true", help="also time other block sizes that fit L0A/L0B/L0C")
    ap.add_argument("--two-pass", action="store_true", help="stage through L1 (ND->NZ, then L1 -> L0)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    n = args.n
    blocks = tuple(int(x) for x in args.blocks.split("x"))
    from compiler.backend.cube_micro import describe

    print(f"target: {jit.host_fingerprint().split('|')[0]}, mmad path: {args.isa or cube.host_isa()}, "
          f"micro-tile {describe()}, "
          f"torch {torch.__version__} on 1 thread, {n}^3, min of {args.reps}")
    for name in args.dtypes.split(","):
        case = Case(name, n, blocks, args.isa, args.align, args.two_pass)  # type: ignore[arg-type]
        err = case.error()
        a32, b32 = case.a.float(), case.b.float()
        t_ref32 = lambda: torch.matmul(a32, b32)  # noqa: E731
        t_own = lambda: torch.matmul(case.a, case.b)  # noqa: E731
        ours = ref32 = own = float("inf")
        for rep in range(args.reps):  # interleaved: a busy neighbour hurts both sides alike
            ours = min(ours, best_of(case, 1))
            ref32 = min(ref32, best_of(t_ref32, 1))
            if name != "f16" or rep < 3:  # torch's f16 matmul may be slow: a few runs suffice
                own = min(own, best_of(t_own, 1))
        line = f"{name:5s} {'x'.join(map(str, blocks))}: ours {gflops(n, ours):7.1f} GFLOP/s (max rel err {err:.1e})"
        if name == "f32":
            print(f"{line} | torch f32 {gflops(n, ref32):7.1f} | ratio {ours / ref32:.2f}x")
        elif name == "f16":
            print(f"{line} | torch f32 {gflops(n, ref32):7.1f} | ratio {ours / ref32:.2f}x "
                  f"| torch f16 {gflops(n, own):7.1f} ({ours / own:.2f}x)")
        else:
            print(f"{line} | torch bf16 {gflops(n, own):7.1f} | ratio {ours / own:.2f}x "
                  f"| torch f32 {gflops(n, ref32):7.1f} ({ours / ref32:.2f}x)")
        if args.sweep:
            sweep(name, n, args)


def sweep(name: str, n: int, args: argparse.Namespace) -> None:
    es = DT[name].itemsize
    for bm, bn, bk in [(128, 128, 32), (128, 128, 64), (128, 128, 128), (128, 128, 256), (128, 256, 32),
                       (128, 256, 64), (128, 256, 128), (256, 128, 32), (256, 128, 64), (256, 128, 128),
                       (64, 256, 64), (256, 64, 64)]:
        if bm * bk * es > L0A or bk * bn * es > L0B or bm * bn * 4 > L0C:
            continue
        case = Case(name, n, (bm, bn, bk), args.isa, args.align, args.two_pass)
        t = min(best_of(case, 1) for _ in range(args.reps))
        print(f"      {name:5s} {bm}x{bn}x{bk}: {gflops(n, t):7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
