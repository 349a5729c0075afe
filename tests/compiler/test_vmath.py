"""compiler.backend.vmath: the vector builtins' accuracy (the ulp bounds of its docstring, on a strided sweep of
all f32 bit patterns plus the edges), their edge values against torch, bit-identity of native code
and the interpreter, on this host and on x86-64-v2 (no FMA), no libm call in the object code, and
the guarded sin / cos (fast recipe below 2^20, exact one beyond) vectorised through their variants."""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dsl
from compiler.backend import vmath as M
from compiler.config import CONFIG
from compiler.host import runnable_levels
from dsl import GM, Const, f32
from dsl.errors import KernelError
from simulator.isa import Instr


@dsl.kernel
def vm(x: GM[f32], y: GM[f32], OP: Const[str] = "exp", TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        a = x[t]
        if OP == "exp":
            y[t] = dsl.exp(a)
        elif OP == "log":
            y[t] = dsl.log(a)
        elif OP == "tanh":
            y[t] = dsl.tanh(a)
        elif OP == "sigmoid":
            y[t] = dsl.sigmoid(a)
        elif OP == "erf":
            y[t] = dsl.erf(a)
        elif OP == "gelu":
            y[t] = dsl.gelu(a)
        elif OP == "gelu_tanh":
            y[t] = dsl.gelu(a, approximate="tanh")
        elif OP == "softplus":
            y[t] = dsl.softplus(a)
        elif OP == "sin":
            y[t] = dsl.sin(a)
        elif OP == "cos":
            y[t] = dsl.cos(a)
        elif OP == "sqrt":
            y[t] = dsl.sqrt(a)
        elif OP == "rsqrt":
            y[t] = dsl.rsqrt(a)
        elif OP == "reciprocal":
            y[t] = dsl.reciprocal(a)


@dsl.kernel
def vpow(x: GM[f32], e: GM[f32], y: GM[f32], TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = dsl.pow(x[t], e[t])


@dsl.kernel
def vpow_scalar(x: GM[f32], y: GM[f32], p: float, TILE: Const[int] = 2048):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = x[t] ** p


OPS = {"exp": Instr.VEXP, "log": Instr.VLOG, "tanh": Instr.VTANH, "sigmoid": Instr.VSIGMOID, "erf": Instr.VERF,
       "gelu": Instr.VGELU, "gelu_tanh": Instr.VGELU_TANH, "softplus": Instr.VSOFTPLUS, "sin": Instr.VSIN,
       "cos": Instr.VCOS, "sqrt": Instr.VSQRT, "rsqrt": Instr.VRSQRT, "reciprocal": Instr.VRECIP}
SLOW_REF = {"erf", "gelu"}  # math.erf(c) per element: a coarser sweep
NO_FMA = "x86-64-v2"
LEVELS = [lv for lv in ("native", NO_FMA) if lv in runnable_levels()]


@contextlib.contextmanager
def host_isa(level: str) -> Iterator[None]:
    old = CONFIG.host_isa
    CONFIG.host_isa = level
    try:
        yield
    finally:
        CONFIG.host_isa = old


@contextlib.contextmanager
def interpreting() -> Iterator[None]:
    old = CONFIG.interpret
    CONFIG.interpret = True
    try:
        yield
    finally:
        CONFIG.interpret = old


_PER_LEVEL: dict[str, tuple[dsl.Kernel, dsl.Kernel]] = {}


def kernels() -> tuple[dsl.Kernel, dsl.Kernel]:
    """(vm, vpow) for CONFIG.host_isa: a Kernel's in-memory specialisations are not keyed by the
    target (yet), so each level gets its own kernel objects."""
    lv = CONFIG.host_isa
    if lv == "native":
        return vm, vpow
    if lv not in _PER_LEVEL:
        _PER_LEVEL[lv] = (dsl.kernel(vm.fn), dsl.kernel(vpow.fn))
    return _PER_LEVEL[lv]


def run(op: str, x: np.ndarray) -> np.ndarray:
    y = np.empty_like(x)
    kernels()[0][2](x, y, OP=op)
    return y


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("op", list(OPS))
def test_ulp_bound(op: str, level: str) -> None:
    step = 4001 if op in SLOW_REF else 997
    if level != "native":
        step *= 4
    x = M.sweep(step)
    with host_isa(level):
        y = run(op, x)
    with np.errstate(all="ignore"):
        err = M.ulp_error(y, M.REFERENCE[OPS[op]](x.astype(np.float64)))
    i = int(np.argmax(err))
    assert err[i] <= M.BOUND[OPS[op]], f"{op}: {err[i]:.3f} ulp at x={x[i]!r} (got {y[i]!r})"


@pytest.mark.parametrize("level", LEVELS)
def test_pow_ulp_bound(level: str) -> None:
    rng = np.random.default_rng(1)
    x = np.abs(M.sweep(2003 if level == "native" else 8009))
    e = (rng.standard_normal(x.size) * 8).astype(np.float32)
    xn = (rng.standard_normal(200_000) * 4).astype(np.float32)  # negative bases with integer exponents
    en = np.round(rng.standard_normal(xn.size) * 8).astype(np.float32)
    x, e = np.concatenate([x, xn]), np.concatenate([e, en])
    y = np.empty_like(x)
    with host_isa(level):
        kernels()[1][2](x, e, y)
    with np.errstate(all="ignore"):
        err = M.ulp_error(y, np.power(x.astype(np.float64), e.astype(np.float64)))
    i = int(np.argmax(err))
    assert err[i] <= M.BOUND[Instr.VPOW], f"pow: {err[i]:.3f} ulp at {x[i]!r} ** {e[i]!r} (got {y[i]!r})"


SPECIAL = np.array([0.0, -0.0, 2.0 ** -149, -(2.0 ** -149), 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 2.5, -2.5,
                    3.0, -3.0, 20.0, 21.0, -20.0, 89.0, -89.0, -104.0, 1e10, -1e10, 1e30, -1e30, np.inf, -np.inf,
                    np.nan], np.float32)

TORCH = {"exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf,
         "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "softplus": F.softplus,
         "sin": torch.sin, "cos": torch.cos, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal}


@pytest.mark.parametrize("op", list(OPS))
def test_edges_as_torch(op: str) -> None:
    """NaN, infinities and zeros where torch has them; elsewhere within the bound of the exact value."""
    y = run(op, SPECIAL)
    # element by element: torch's scalar path. Its vector path is not the same function at the edges
    # (torch 2.13's vectorised gelu gives NaN for +inf, its scalar tail +inf), so whether torch answers
    # NaN would depend on where the lane boundaries fall, which differs between AVX2 and AVX-512.
    t = torch.from_numpy(SPECIAL)
    want = torch.cat([TORCH[op](t[i:i + 1]) for i in range(len(t))]).numpy()
    assert np.array_equal(np.isnan(y), np.isnan(want)), (op, SPECIAL, y, want)
    inf = np.isinf(want)
    assert np.array_equal(y[inf], want[inf]), (op, y, want)
    with np.errstate(all="ignore"):
        err = M.ulp_error(y, M.REFERENCE[OPS[op]](SPECIAL.astype(np.float64)))
    fin = np.isfinite(want)
    assert np.all(err[fin] <= M.BOUND[OPS[op]]), (op, SPECIAL[fin], y[fin], err[fin])


def test_pow_edges_as_torch() -> None:
    """C99 powf special cases (signed zeros, infinities, negative bases, NaN with x == 1 or y == 0)."""
    sp = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, np.inf, -np.inf, np.nan,
                   2.0 ** -149, -(2.0 ** -149), 1e30], np.float32)
    xg, eg = (a.ravel().copy() for a in np.meshgrid(sp, sp))
    y = np.empty_like(xg)
    vpow[1](xg, eg, y)
    want = torch.pow(torch.from_numpy(xg), torch.from_numpy(eg)).numpy()
    same = (y == want) & (np.signbit(y) == np.signbit(want)) | np.isnan(y) & np.isnan(want)
    bad = ~same
    assert not bad.any(), list(zip(xg[bad], eg[bad], y[bad], want[bad]))


def test_pow_scalar_exponent() -> None:
    x = np.abs(np.random.default_rng(2).standard_normal(5000)).astype(np.float32) * 10
    for p in (2.0, 0.5, -1.0, 3.0, 1.7):
        y = np.empty_like(x)
        vpow_scalar[1](x, y, p)
        err = M.ulp_error(y, np.power(x.astype(np.float64), float(np.float32(p))))  # p meets f32 tiles as f32
        assert err.max() <= M.BOUND[Instr.VPOW], p


def _sample() -> np.ndarray:
    rng = np.random.default_rng(3)
    return np.concatenate([M.sweep(1_000_003), SPECIAL, (rng.standard_normal(4000) * 6).astype(np.float32),
                           (rng.standard_normal(2000) * 30).astype(np.float32)])


@pytest.mark.parametrize("level", LEVELS)
def test_interpreter_bit_identical(level: str) -> None:
    """The interpreter runs the same recipe in numpy: equal bits (fused or not, as the target)."""
    x = _sample()
    e = np.resize(SPECIAL, x.size)
    with host_isa(level):
        for op in OPS:
            native = run(op, x)
            with interpreting():
                interp = run(op, x)
            assert np.array_equal(native.view(np.int32), interp.view(np.int32)) or \
                np.array_equal(native, interp, equal_nan=True), op
        yn, yi = np.empty_like(x), np.empty_like(x)
        kernels()[1][2](x, e, yn)
        with interpreting():
            kernels()[1][2](x, e, yi)
        assert np.array_equal(yn, yi, equal_nan=True)


@pytest.mark.parametrize("op", ["exp", "tanh", "gelu", "sin", "softplus"])
def test_no_libm_calls(op: str) -> None:
    """No call to a named function (libm, compiler-rt) remains in the code: everything is inline but
    sin / cos, which call the kernel's own internal functions (through the GOT, not by name)."""
    x = np.zeros(64, np.float32)
    asm = vm.emit("asm", x, np.empty_like(x), OP=op)
    named = set(re.findall(r"\bcall\w*\s+([A-Za-z_.$][\w.$@]*)", asm))
    assert not named, named
    assert "ymm" in asm or "xmm" in asm


def test_half_inputs_compute_in_f32() -> None:
    """f16 tiles compute in f32 and round once at the store, as torch's CPU kernels do."""
    @dsl.kernel
    def g16(x: GM, y: GM, TILE: Const[int] = 256):
        for t in dsl.tiles(x.shape[0], TILE):
            y[t] = dsl.gelu(x[t])

    x = torch.randn(3000).half()
    y = torch.empty_like(x)
    g16[2](x, y)
    assert torch.equal(y, F.gelu(x.float()).half()) or torch.allclose(y.float(), F.gelu(x.float()), rtol=1e-3, atol=1e-6)


def test_gelu_mode_error() -> None:
    @dsl.kernel
    def bad(x: GM[f32], y: GM[f32], TILE: Const[int] = 256):
        for t in dsl.tiles(x.shape[0], TILE):
            y[t] = dsl.gelu(x[t], approximate="fast")

    x = np.zeros(16, np.float32)
    with pytest.raises(KernelError, match="expected 'none' or 'tanh'"):
        bad[1](x, np.empty_like(x))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("op", ["sin", "cos"])
def test_guarded_mixed_vectors(op: str, level: str) -> None:
    """Lanes on both sides of the 2^20 guard in one vector, a lone large lane among small ones, and the
    scalar tail: every element as the reference, and as the interpreter bit for bit."""
    rng = np.random.default_rng(4)
    edge = np.float32(2.0 ** 20)
    near = [np.nextafter(edge, np.float32(0)), edge, np.nextafter(edge, np.float32(np.inf))]
    x = (rng.standard_normal(4099) * 4).astype(np.float32)
    x[::37] = rng.choice(near + [np.float32(1e30), np.float32(-3e9), np.float32(np.inf), np.float32(np.nan)], x[::37].size)
    x[-3:] = near  # in the scalar tail
    x = np.concatenate([x, -x])
    with host_isa(level):
        y = run(op, x)
        with interpreting():
            yi = run(op, x)
    assert np.array_equal(y, yi, equal_nan=True)
    with np.errstate(all="ignore"):
        err = M.ulp_error(y, M.REFERENCE[OPS[op]](x.astype(np.float64)))
    assert err.max() <= M.BOUND[OPS[op]], (op, x[np.argmax(err)])


def test_guarded_functions_vectorise() -> None:
    """The loop calls a vector variant of the sin function (not the scalar one per element)."""
    x = np.zeros(4096, np.float32)
    ir = vm.emit("llvm", x, np.empty_like(x), OP="sin")
    assert "vector-function-abi-variant" in ir and "@llvm.compiler.used" in ir
    asm = vm.emit("asm", x, np.empty_like(x), OP="sin")
    assert re.search(r"vinci_vsin_v(4|8|16)@", asm), "no call of a vector variant"
