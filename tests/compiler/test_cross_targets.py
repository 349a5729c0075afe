"""Code for hosts this machine is not: x86-64-v2/v3/v4, AVX-512 with BF16/FP16 (Zen 4) and AMX
(Sapphire Rapids) targets generate kernels whose objects call nothing the JIT does not provide.

The other native suites run only on the levels this host can execute (`runnable_levels`); this
one cross-compiles, so an AVX2 developer machine still proves that the AVX-512 and AMX code paths
lower without compiler-rt helpers (the `__truncsfbf2` jump to address 0 of issue 7). It does not
run that code: the AMX and AVX-512 tests in test_cube_native.py do, on hosts that have them.
"""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

import dsl
from compiler import CONFIG, host, jit
from compiler.backend import cube
from dsl import GM, Const, f32

_V4 = host.LEVEL_FEATURES["x86-64-v4"]
TARGETS = {
    "x86-64-v2": host.HostTarget("cross-v2", "x86-64-v2", "", host.LEVEL_FEATURES["x86-64-v2"]),
    "x86-64-v3": host.HostTarget("cross-v3", "x86-64-v3", "", host.LEVEL_FEATURES["x86-64-v3"]),
    "x86-64-v4": host.HostTarget("cross-v4", "x86-64-v4", "", _V4),
    "znver4": host.HostTarget("cross-znver4", "znver4", "", _V4 | {"avx512bf16", "avx512vnni"}),
    "sapphirerapids": host.HostTarget("cross-spr", "sapphirerapids", "",
                                      _V4 | {"avx512bf16", "avx512fp16", "avx512vnni", "amx-tile",
                                             "amx-bf16", "amx-int8"}),
}
DTYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i8": np.int8}


@dsl.kernel
def cast_all(x: GM, y: GM, TILE: Const[int] = 256):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.cast(x[t], y.dtype)


@dsl.kernel
def math_all(x: GM[f32], y: GM[f32], TILE: Const[int] = 512):
    for t in dsl.tiles(x.shape[0], TILE):
        v = x[t]
        y[t] = (dsl.exp(v) + dsl.log(v) + dsl.tanh(v) + dsl.sigmoid(v) + dsl.erf(v)
                + dsl.gelu(v) + dsl.gelu(v, approximate="tanh") + dsl.softplus(v) + dsl.sin(v)
                + dsl.cos(v) + dsl.sqrt(v) + dsl.rsqrt(v) + dsl.reciprocal(v) + dsl.pow(v, v))


@dsl.kernel
def mm(a: GM, b: GM, c: GM, BM: Const[int] = 64, BN: Const[int] = 32, BK: Const[int] = 32):
    for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), c.dtype)  # f32, or i32 for i8 inputs
        for k in dsl.range(0, a.shape[1], BK):
            acc += a[m, k] @ b[k, n]
        c[m, n] = acc


@pytest.fixture(params=list(TARGETS))
def cross(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> host.HostTarget:
    """Make `compiler.host.target()` answer a target this host may not be able to run."""
    t = TARGETS[request.param]
    real = host.make_target
    monkeypatch.setattr(host, "make_target", lambda name: t if name == t.name else real(name))
    monkeypatch.setattr(CONFIG, "host_isa", t.name)
    monkeypatch.setattr(CONFIG, "cube_isa", "")
    return t


def foreign_symbols(ir_text: str, t: host.HostTarget) -> list[str]:
    """Compile for `t` at O3 as the JIT would; the undefined symbols this process cannot resolve."""
    tm = jit._machine(t)
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    pb = llvm.create_pass_builder(tm, jit._tuning())
    pb.getModulePassManager().run(mod, pb)
    obj = tm.emit_object(mod)
    return sorted({s for s in jit.undefined_symbols(obj) if s != "_GLOBAL_OFFSET_TABLE_"
                   and not jit._in_process(s)})


def bf16(n: int) -> object:
    import torch

    return torch.zeros(n, dtype=torch.bfloat16)


def array(dtype: str, n: int) -> object:
    return bf16(n) if dtype == "bf16" else np.zeros(n, dtype=DTYPES[dtype])


@pytest.mark.parametrize("src", ["f32", "f16", "bf16", "i32", "i8"])
def test_casts_need_no_helpers(cross: host.HostTarget, src: str) -> None:
    for dst in ("f32", "f16", "bf16", "i32", "i8"):
        text = cast_all.emit("llvm", array(src, 1000), array(dst, 1000))
        assert foreign_symbols(text, cross) == [], f"{cross.cpu}: cast {src} -> {dst}"


def test_vector_math_needs_no_helpers(cross: host.HostTarget) -> None:
    x = np.ones(4096, dtype=np.float32)
    assert foreign_symbols(math_all.emit("llvm", x, x.copy()), cross) == []


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i8"])
def test_every_mmad_path_needs_no_helpers(cross: host.HostTarget, monkeypatch: pytest.MonkeyPatch,
                                          dtype: str) -> None:
    import torch

    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i8": torch.int8}[dtype]
    a, b = torch.zeros(70, 90, dtype=tdt), torch.zeros(90, 50, dtype=tdt)
    c = torch.zeros(70, 50, dtype=torch.int32 if dtype == "i8" else torch.float32)
    best = ("amx" if cross.has("amx-tile", "amx-bf16") else "avx512") \
        if cross.has("avx512f", "avx512bf16", "avx512vnni") else "generic"
    paths = cube.ISAS[:cube.ISAS.index(best) + 1]  # every path the target may take (cube.py's rule)
    for path in paths:
        monkeypatch.setattr(CONFIG, "cube_isa", path)
        assert foreign_symbols(mm.emit("llvm", a, b, c), cross) == [], f"{cross.cpu} {path} {dtype}"
