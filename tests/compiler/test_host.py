"""The host target (VINCI_HOST_ISA), conversions that need no runtime helper, and the JIT's refusal
to load an object with a symbol it cannot resolve."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from compiler import jit
from compiler.backend import convert, cube
from compiler.backend.gen import Gen
from compiler.config import CONFIG
from compiler.host import LEVELS, HostISAError, make_target, runnable_levels
from compiler.ir import Kernel

LEVELS_HERE = runnable_levels()
_keep: list[object] = []


@pytest.fixture(params=LEVELS_HERE)
def level(request, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(CONFIG, "host_isa", request.param)
    return request.param


def _convert_fn(direction: str):  # type: ignore[no-untyped-def]
    """dst[i] = convert(src[i]) for i < 16 n, 16 lanes at a time."""
    g = Gen(k=Kernel("t", [], (), 0, []), sym="t")
    st, dt = ("i16", "float") if direction == "up" else ("float", "i16")

    def body(i: str) -> None:
        e = g.op(f"mul i64 {i}, 16")
        v = g.op(f"load <16 x {st}>, ptr {g.op(f'getelementptr {st}, ptr %src, i64 {e}')}, align 2")
        r = convert.f16_bits_to_f32(g, v, 16) if direction == "up" else convert.f32_to_f16_bits(g, v, 16)
        g.emit(f"store <16 x {dt}> {r}, ptr {g.op(f'getelementptr {dt}, ptr %dst, i64 {e}')}, align 2")

    g.loop("%n", body)
    obj, _ = jit.optimize_to_object(cube.module(g, "t", "ptr %dst, ptr %src, i64 %n"))
    assert [s for s in jit.undefined_symbols(obj) if s != "_GLOBAL_OFFSET_TABLE_"] == []
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(jit.load_object(obj, "t"))
    _keep.append(fn)
    return fn


def _up(h: np.ndarray) -> np.ndarray:
    out = np.empty(len(h), np.float32)
    _convert_fn("up")(out.ctypes.data, h.ctypes.data, len(h) // 16)
    return out.view(np.uint32)


def _down(x: np.ndarray) -> np.ndarray:
    out = np.empty(len(x), np.uint16)
    _convert_fn("down")(out.ctypes.data, x.ctypes.data, len(x) // 16)
    return out


def test_f16_to_f32_every_pattern(level: str) -> None:
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = _up(h)
    ref = h.view(np.float16).astype(np.float32).view(np.uint32)
    nan = np.isnan(h.view(np.float16))
    assert np.array_equal(got[~nan], ref[~nan])
    assert np.array_equal(got[nan], ref[nan] | 0x400000)  # NaNs come out quiet, payload kept (as vcvtph2ps)


def test_f32_to_f16_sweep(level: str) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32),
                        rng.integers(0, 2**32, 2**16, dtype=np.uint32),
                        np.array([0, 0x80000000, 1, 0x007FFFFF, 0x33000000, 0x33000001, 0x387FE000, 0x477FEFFF,
                                  0x477FF000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001], np.uint32)])
    x = np.resize(x, (len(x) + 15) // 16 * 16)
    got = _down(x)
    xf = x.view(np.float32)
    with np.errstate(over="ignore"):
        ref = xf.astype(np.float16).view(np.uint16)
    nan = np.isnan(xf)
    assert np.array_equal(got[~nan], ref[~nan])
    assert np.array_equal(got[nan], ((x[nan] >> 16) & 0x8000 | 0x7E00 | (x[nan] >> 13) & 0x3FF).astype(np.uint16))


def test_f16_software_matches_f16c(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    if "x86-64-v2" not in LEVELS_HERE or not make_target("native").has("f16c"):
        pytest.skip("needs a host with F16C (compares the instruction with the software path)")
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    x = np.random.default_rng(1).integers(0, 2**32, 2**18, dtype=np.uint32)
    monkeypatch.setattr(CONFIG, "host_isa", "native")
    hw = _up(h), _down(x)
    monkeypatch.setattr(CONFIG, "host_isa", "x86-64-v2")
    sw = _up(h), _down(x)
    assert np.array_equal(hw[0], sw[0]) and np.array_equal(hw[1], sw[1])


CASTS = [("i32", "bf16"), ("i32", "f16"), ("f32", "bf16"), ("f32", "f16"), ("bf16", "f16"), ("f16", "bf16"),
         ("i8", "bf16"), ("bf16", "i32"), ("f16", "i8")]


@pytest.mark.parametrize("src,dst", CASTS)
def test_casts_on_every_level(source, level, src, dst) -> None:  # type: ignore[no-untyped-def]
    """The casts that used to call compiler-rt helpers (__truncsfbf2 ...) on hosts without the
    instruction, at every level this host can run, with tails: torch's casts are the reference."""
    import torch

    m = source("""
        @dsl.kernel
        def cast(x: GM, y: GM, TILE: Const[int] = 64):
            for t in dsl.tiles(x.shape[0], TILE):
                y[t] = dsl.cast(x[t], y.dtype)
    """)
    td = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32, "i8": torch.int8}
    for n in (0, 1, 17, 1000):
        x = (torch.randn(n) * (300 if src in ("i32", "i8") else 3)).clamp(-100, 100).to(td[src])
        y = torch.empty(n, dtype=td[dst])
        m.cast[2](x, y)
        ref = x.to(td[dst])
        if td[src].is_floating_point and not td[dst].is_floating_point:  # dsl.cast rounds half to even, saturates
            info = torch.iinfo(td[dst])
            ref = x.float().round().clamp(info.min, info.max).to(td[dst])
        assert torch.equal(y, ref), (n, y, ref)


def test_unresolved_symbol_is_refused() -> None:
    text = ("declare float @vinci_no_such_helper(float)\n"
            "define float @uses_it(float %x) {\n  %r = call float @vinci_no_such_helper(float %x)\n  ret float %r\n}\n")
    obj, _ = jit.optimize_to_object(text)
    assert "vinci_no_such_helper" in jit.undefined_symbols(obj)
    with pytest.raises(jit.JITLinkError, match=r"kernel uses_it needs vinci_no_such_helper, which this process"):
        jit.load_object(obj, "uses_it")


def test_levels_and_errors(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(HostISAError, match=r"VINCI_HOST_ISA='avx9': expected one of native, x86-64-v2"):
        make_target("avx9")
    native = make_target("native")
    for lv in LEVELS:
        if lv in LEVELS_HERE:
            t = make_target(lv)
            assert t.cpu == lv and t.level.startswith(lv)
        else:
            with pytest.raises(HostISAError, match=rf"'{lv}': this host lacks .*\(it reaches x86-64"):
                make_target(lv)
    assert make_target("x86-64-v2").vector_bits == 128 and not make_target("x86-64-v2").has("fma")
    assert native.name == "native"
    # the target is part of every cache key, and caps the Mmad path
    from compiler.pipeline import cache_key
    from simulator.config import load_config

    cfg = load_config()
    keys = set()
    for lv in LEVELS_HERE:
        monkeypatch.setattr(CONFIG, "host_isa", lv)
        keys.add(cache_key("src", ("spec",), {}, cfg))
        if lv != "native":
            assert cube.host_isa() == "generic"
    assert len(keys) == len(LEVELS_HERE)


def test_changing_the_target_in_a_process_recompiles(source, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A kernel launched again after VINCI_HOST_ISA (CONFIG.host_isa) changed runs code for the new
    target, not the code its in-memory caches hold for the old one."""
    import torch

    m = source("""
        @dsl.kernel
        def scale(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 256):
                y[t] = x[t] * 3.0
    """)
    x, y = torch.randn(1000), torch.empty(1000)
    for lv in LEVELS_HERE:
        monkeypatch.setattr(CONFIG, "host_isa", lv)
        m.scale[2](x, y)
        m.scale[2](x, y)  # the launch fast path too
        assert torch.equal(y, x * 3.0)
    assert len(m.scale._compiled) == len(LEVELS_HERE)


def test_above_answers_from_the_runnable_levels() -> None:
    """`python -m compiler.host --above L` (make test's choice of a capped rerun) exits 0 exactly
    when the host runs a level above L."""
    from compiler.host import _main

    runs = [lv for lv in runnable_levels() if lv in LEVELS]
    for lv in LEVELS:
        assert _main(["--above", lv]) == (0 if any(LEVELS.index(r) > LEVELS.index(lv) for r in runs) else 1)
    assert _main(["--above", "x86-64-v2"]) == 0 or runs == ["x86-64-v2"]
