"""The compile cache: keys cover what changes the code, entries are atomic, bad entries recompile."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import jit

ROOT = Path(__file__).resolve().parents[2]

KERNEL = """
import dsl
from dsl import GM, Const, f32

SCALE = {scale}

@dsl.kernel
def k(x: GM[f32], y: GM[f32], TILE: Const[int] = 256):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = x[t] * SCALE + {bias}
"""

RUN = """
import sys, time, json
sys.path.insert(0, {root!r}); sys.path.insert(0, {dir!r})
import numpy as np
t0 = time.perf_counter()
import mod
x = np.arange(1000, dtype=np.float32); y = np.zeros_like(x)
t1 = time.perf_counter()
mod.k[4](x, y)
t2 = time.perf_counter()
compiled, plan = next(iter(mod.k._compiled.values()))
print(json.dumps({{"y0": float(y[1]), "from": compiled.from_cache, "launch_ms": (t2 - t1) * 1e3}}))
"""


def run(tmp: Path, scale: str = "2.0", bias: str = "1.0") -> dict:
    import json

    (tmp / "mod.py").write_text(KERNEL.format(scale=scale, bias=bias))
    env = dict(os.environ, VINCI_CACHE_DIR=str(tmp / "cache"), VINCI_DISK_CACHE="1")
    out = subprocess.run([sys.executable, "-c", RUN.format(root=str(ROOT), dir=str(tmp))], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_from_disk(tmp_path: Path) -> None:
    first = run(tmp_path)
    assert first["from"] == "" and first["y0"] == 3.0
    second = run(tmp_path)
    assert second["from"] == "disk" and second["y0"] == 3.0


def test_editing_the_kernel_invalidates_its_entry(tmp_path: Path) -> None:
    run(tmp_path)
    edited = run(tmp_path, bias="5.0")
    assert edited["from"] == "" and edited["y0"] == 7.0


def test_module_constants_are_part_of_the_key(tmp_path: Path) -> None:
    run(tmp_path)
    changed = run(tmp_path, scale="3.0")
    assert changed["from"] == "" and changed["y0"] == 4.0


def test_corrupted_and_foreign_entries_are_recompiled(tmp_path: Path) -> None:
    run(tmp_path)
    entries = list((tmp_path / "cache").rglob("*.bin"))
    assert entries
    for e in entries:
        e.write_bytes(e.read_bytes()[:100] + b"garbage")
    again = run(tmp_path)
    assert again["from"] == "" and again["y0"] == 3.0
    assert run(tmp_path)["from"] == "disk"  # the recompiled entry was written back


def test_read_entry_rejects_foreign_key(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from compiler.config import CONFIG

    monkeypatch.setattr(CONFIG, "cache_dir", str(tmp_path))
    jit.write_entry("a" * 64, b"obj", {"meta": 1})
    assert jit.read_entry("a" * 64) == (b"obj", {"meta": 1})
    src = jit.disk_path("a" * 64)
    dst = jit.disk_path("b" * 64)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())
    assert jit.read_entry("b" * 64) is None  # foreign entry: refused and removed
    assert not dst.exists()
    src.write_bytes(b"VINCI-OBJ-1\n" + b"\0" * 40)
    assert jit.read_entry("a" * 64) is None  # checksum mismatch


def test_writes_are_atomic(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from compiler.config import CONFIG

    monkeypatch.setattr(CONFIG, "cache_dir", str(tmp_path))
    jit.write_entry("c" * 64, b"x" * 1000, None)
    leftovers = [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")]
    assert not leftovers


def test_key_covers_compiler_host_and_config() -> None:
    from compiler.pipeline import cache_key
    from simulator.config import load_config

    a = cache_key("src", ("spec",), {}, load_config("ascend910b1"))
    b = cache_key("src", ("spec",), {}, load_config("ascend310p"))
    c = cache_key("src", ("spec",), {"buffers": 1}, load_config("ascend910b1"))
    d = cache_key("src2", ("spec",), {}, load_config("ascend910b1"))
    assert len({a, b, c, d}) == 4
    assert "llvmlite" in jit.host_fingerprint()


def test_key_covers_the_mmad_path(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from compiler.backend import cube
    from compiler.config import CONFIG
    from compiler.pipeline import cache_key
    from simulator.config import load_config

    cfg = load_config("ascend910b1")
    best, best_isa = cache_key("src", ("spec",), {}, cfg), cube.host_isa()
    monkeypatch.setattr(CONFIG, "cube_isa", "generic")
    assert cube.host_isa() == "generic"
    if best_isa != "generic":
        assert cache_key("src", ("spec",), {}, cfg) != best
    monkeypatch.setattr(CONFIG, "cube_isa", "sse2")
    with pytest.raises(ValueError, match="expected one of generic, avx512, amx"):
        cube.host_isa()
