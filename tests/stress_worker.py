"""Random small kernels over dtype pairs and tail shapes, checked against torch.

Run by tests/compiler/test_stress.py in a subprocess, once per VINCI_HOST_ISA level the host can
run, so that a kernel that kills the process shows up as a signal rather than a lost test run.
Usage: python tests/stress_worker.py SEED COUNT  (prints one line per launch, then "ok N").
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dsl  # noqa: E402
from dsl import GM, Const, f32, i32  # noqa: E402

TD = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32, "i8": torch.int8}
FLOATS = ("f32", "f16", "bf16")
SIZES = (0, 1, 2, 3, 15, 16, 17, 31, 97, 257, 1021)


@dsl.kernel
def cast(x: GM, y: GM, TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.cast(x[t], y.dtype)


@dsl.kernel
def binary(x: GM, y: GM, z: GM, OP: Const[str] = "add", TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        if OP == "add":
            z[t] = dsl.cast(x[t] + y[t], z.dtype)
        elif OP == "mul":
            z[t] = dsl.cast(x[t] * y[t], z.dtype)
        elif OP == "max":
            z[t] = dsl.cast(dsl.maximum(x[t], y[t]), z.dtype)
        elif OP == "where":
            z[t] = dsl.cast(dsl.where(x[t] > y[t], x[t], y[t]), z.dtype)


@dsl.kernel
def rows(x: GM, y: GM, s: GM, R: Const[int] = 8):
    for r in dsl.tiles(x.shape[0], R):
        v = x[r, :]
        y[r, :] = dsl.cast(v * 2 + dsl.max(v, axis=1, keepdims=True), y.dtype)
        s[r] = dsl.cast(dsl.sum(dsl.cast(v, f32), axis=1), s.dtype)


@dsl.kernel
def matmul(a: GM, b: GM, c: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = 32):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[k, n]
        c[m, n] = dsl.cast(acc, c.dtype)


@dsl.kernel
def matmul_i8(a: GM, b: GM, c: GM, BM: Const[int] = 32, BN: Const[int] = 32, BK: Const[int] = 64):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), i32)
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[k, n]
        c[m, n] = acc


def rand(n: int | tuple[int, ...], dt: str, g: torch.Generator) -> torch.Tensor:
    shape = (n,) if isinstance(n, int) else n
    if dt in FLOATS:
        return (torch.randn(shape, generator=g) * 4).to(TD[dt])
    return torch.randint(-100, 100, shape, generator=g, dtype=torch.int32).to(TD[dt])


def close(got: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    if not torch.allclose(got.double(), ref.double(), atol=tol, rtol=tol, equal_nan=True):
        bad = (got.double() - ref.double()).abs().max().item() if got.numel() else 0
        raise AssertionError(f"mismatch {bad}")


def say(what: str) -> None:
    print(what, flush=True)


def one(rnd: random.Random, g: torch.Generator) -> None:
    kind = rnd.choice(["cast", "binary", "rows", "matmul"])
    cores = rnd.choice([1, 2, 3, 24])
    if kind == "cast":
        src, dst = rnd.choice(list(TD)), rnd.choice(list(TD))
        n = rnd.choice(SIZES)
        say(f"cast {src}->{dst} n={n} cores={cores}")
        x, y = rand(n, src, g), torch.empty(n, dtype=TD[dst])
        cast[cores](x, y, TILE=rnd.choice([16, 64, 256]))
        ref = x.to(TD[dst])
        if src in FLOATS and dst not in FLOATS:
            info = torch.iinfo(TD[dst])
            ref = x.float().round().clamp(info.min, info.max).to(TD[dst])
        assert torch.equal(y, ref), (y, ref)
    if kind == "binary":
        dt, out = rnd.choice(FLOATS + ("i32",)), rnd.choice(list(TD))
        op = rnd.choice(["add", "mul", "max", "where"])
        n = rnd.choice(SIZES)
        say(f"binary {op} {dt}->{out} n={n} cores={cores}")
        x, y, z = rand(n, dt, g), rand(n, dt, g), torch.empty(n, dtype=TD[out])
        binary[cores](x, y, z, OP=op, TILE=rnd.choice([16, 64, 256]))
        f = {"add": torch.add, "mul": torch.mul, "max": torch.maximum,
             "where": lambda a, b: torch.where(a > b, a, b)}[op]
        ref = f(x, y)
        if dt in FLOATS and out not in FLOATS:
            info = torch.iinfo(TD[out])
            ref = ref.float().round().clamp(info.min, info.max)
        close(z, ref.to(TD[out]), 0)
    if kind == "rows":
        dt = rnd.choice(FLOATS)
        r, c = rnd.choice(SIZES[:8]), rnd.choice(SIZES[1:9])
        say(f"rows {dt} {r}x{c} cores={cores}")
        x, y, s = rand((r, c), dt, g), torch.empty(r, c, dtype=TD[dt]), torch.empty(r, dtype=torch.float32)
        rows[cores](x, y, s, R=rnd.choice([1, 4, 8]))
        xf = x.float()
        close(y, (xf * 2 + xf.amax(1, keepdim=True)).to(TD[dt]), 0)
        close(s, xf.sum(1), 1e-5)
    dt = rnd.choice(FLOATS + ("i8",))
    out = "i32" if dt == "i8" else rnd.choice(FLOATS)
    m, k, n = rnd.choice(SIZES[1:9]), rnd.choice(SIZES[1:10]), rnd.choice(SIZES[1:9])
    say(f"matmul {dt}->{out} {m}x{k}x{n} cores={cores}")
    a, b, c = rand((m, k), dt, g), rand((k, n), dt, g), torch.empty(m, n, dtype=TD[out])
    if dt == "i8":
        matmul_i8[cores](a, b, c)
    else:
        matmul[cores](a, b, c, BK=rnd.choice([32, 64]))
    ref = a.double() @ b.double()
    close(c, ref.to(TD[out]) if dt == "i8" else ref, 0 if dt == "i8" else {"f32": 1e-4, "f16": 2e-3, "bf16": 2e-2}[out])


def main() -> None:
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    rnd, g = random.Random(seed), torch.Generator().manual_seed(seed)
    for i in range(count):
        print(f"{i}: ", end="", flush=True)
        one(rnd, g)
    print(f"ok {count}")


if __name__ == "__main__":
    main()
