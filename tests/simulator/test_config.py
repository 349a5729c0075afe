"""Hardware descriptions (simulator/configs/*.toml) and the on-chip memory arenas."""
import hashlib
from pathlib import Path

import numpy as np
import pytest

from simulator import (
    ConfigError,
    CubeType,
    Instr,
    Mem,
    get_memories,
    known_configs,
    load_config,
)
from simulator.config import CONFIG_DIR, config_path
from simulator.memory import CoreMemories

DEFAULT = CONFIG_DIR / "ascend910b1.toml"


def test_default_config_numbers():
    cfg = load_config("ascend910b1")
    assert (cfg.name, cfg.cores, cfg.clock_mhz, cfg.clock_hz) == ("ascend910b1", 24, 1850, 1.85e9)
    assert [cfg.size(m) >> 10 for m in (Mem.L1, Mem.L0A, Mem.L0B, Mem.L0C, Mem.UB)] == [
        512, 64, 64, 128, 192]
    assert cfg.reserved(Mem.UB) == 8192 and cfg.reserved(Mem.L1) == 0
    assert cfg.capacity(Mem.UB) == 192 * 1024 - 8192
    assert cfg.capacity(Mem.L0C) == 128 * 1024
    assert cfg.capacity(Mem.GM) == 64 << 30
    assert cfg.l2.capacity == 192 << 20
    assert cfg.alignment == 32 and cfg.event_ids_per_pair == 8
    assert cfg.dma.rate(Instr.COPY_L1_L0A) == 512 and cfg.dma.rate(Instr.COPY_L0C_GM) == 128
    assert (cfg.cube_rate("bf16").macs_per_cycle, cfg.cube_rate(CubeType.I8).k0,
            cfg.cube_rate("f32").k0) == (4096, 32, 8)
    assert cfg.peak_flops("f16") == pytest.approx(2 * 4096 * 24 * 1.85e9)
    assert cfg.peak_flops("i8") == 2 * cfg.peak_flops("f16")
    assert cfg.peak_flops("f32") == cfg.peak_flops("f16") / 2 == cfg.peak_flops(CubeType.F32)
    assert cfg.hbm_bandwidth() == pytest.approx(32 * 24 * 1.85e9)
    with pytest.raises(ValueError, match="no cube rate for dtype 'f64'"):
        cfg.cube_rate("f64")


def test_310p_config():
    cfg = load_config("ascend310p")
    assert (cfg.name, cfg.cores, cfg.clock_mhz) == ("ascend310p", 8, 1060)
    assert [cfg.size(m) >> 10 for m in (Mem.L1, Mem.L0A, Mem.L0B, Mem.L0C, Mem.UB)] == [
        1024, 64, 64, 256, 256]
    assert cfg.l2.capacity == 16 << 20
    assert cfg.fingerprint() != load_config("ascend910b1").fingerprint()
    assert set(known_configs()) >= {"ascend910b1", "ascend310p"}


def test_default_name_env_and_cache(monkeypatch):
    monkeypatch.delenv("VINCI_CONFIG", raising=False)
    assert load_config().name == "ascend910b1"
    assert load_config() is load_config("ascend910b1")  # cached
    monkeypatch.setenv("VINCI_CONFIG", "ascend310p")
    assert load_config().name == "ascend310p"
    assert load_config(str(DEFAULT)) is load_config("ascend910b1")  # a path works too
    assert config_path("ascend310p") == CONFIG_DIR / "ascend310p.toml"


def test_fingerprint_follows_file_content(tmp_path):
    path = tmp_path / "chip.toml"
    text = DEFAULT.read_text()
    path.write_text(text)
    first = load_config(str(path))
    assert first.fingerprint() == hashlib.sha256(text.encode()).hexdigest()
    assert first.fingerprint() == load_config("ascend910b1").fingerprint()
    path.write_text(text.replace("dma = 12 ", "dma = 13 "))
    second = load_config(str(path))
    assert second.overhead.dma == 13 and second.fingerprint() != first.fingerprint()
    path.write_text(text)
    assert load_config(str(path)).fingerprint() == first.fingerprint()


def _broken(tmp_path: Path, old: str, new: str) -> str:
    text = DEFAULT.read_text()
    assert old in text
    path = tmp_path / "broken.toml"
    path.write_text(text.replace(old, new, 1))
    return str(path)


def test_missing_field_names_file_and_field(tmp_path):
    path = _broken(tmp_path, "UB = 196608", "")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: missing field 'memory.UB'"


@pytest.mark.parametrize(("old", "new", "message"), [
    ("[l2]", "[l2x]", "unknown field 'l2x' (typo?)"),
    ("clock_mhz = 1850", "clock_mhz = \"fast\"",
     "field 'core.clock_mhz' must be an integer, got 'fast'"),
    ("f16 = [16, 16, 16]", "f16 = [16, 16]",
     "field 'cube.f16' must be [m0, k0, n0] positive integers, got [16, 16]"),
    ("L1_L0A = 512", "L1_L0A = 0", "field 'dma.L1_L0A' must be > 0"),
    ("L1_L0A = 512", "L1_L0A = 512\nL1_L0X = 1", "unknown field 'dma.L1_L0X' (typo?)"),
    ("UB_reserved = 8192", "UB_reserved = 300000",
     "field 'memory.UB_reserved' must be smaller than memory.UB"),
    ("L0A = 65536", "L0A = 65537", "field 'memory.L0A' must be a multiple of 64 bytes"),
    ("name = ", "name = = ", "not valid TOML"),
])
def test_bad_fields(tmp_path, old, new, message):
    path = _broken(tmp_path, old, new)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_unknown_config_name():
    with pytest.raises(ConfigError, match=r"no such hardware config \(known: .*ascend310p"):
        load_config("ascend999")


# ---------------------------------------------------------------------------- memories

def test_memory_arenas_aligned_sized_and_pooled():
    cfg = load_config("ascend910b1")
    mems = get_memories(cfg, 3)
    assert get_memories(cfg, 3) is mems
    assert get_memories(cfg, 2) is not mems
    for mem in (Mem.L1, Mem.L0A, Mem.L0B, Mem.L0C, Mem.UB):
        bases = mems.bases(mem)
        assert len(bases) == 3 and all(b % 64 == 0 for b in bases)
        assert [b - bases[0] for b in bases] == [0, cfg.size(mem), 2 * cfg.size(mem)]
        for core in range(3):
            view = mems.view(mem, core)
            assert view.dtype == np.uint8 and view.nbytes == cfg.size(mem)
            assert view.ctypes.data == mems.base(mem, core)
        assert mems.base_tables[mem].tolist() == bases
    mems.view(Mem.UB, 1)[:4] = [1, 2, 3, 4]
    assert mems.arenas[Mem.UB][cfg.size(Mem.UB):][:4].tolist() == [1, 2, 3, 4]
    mems.clear(0xCD)
    assert int(mems.view(Mem.L0C, 2).min()) == 0xCD


def test_memory_follows_config():
    cfg = load_config("ascend310p")
    mems = CoreMemories(cfg, 1)
    assert mems.view(Mem.L1, 0).nbytes == 1 << 20 and mems.view(Mem.UB, 0).nbytes == 256 << 10
    assert mems.nbytes == (1024 + 64 + 64 + 256 + 256) << 10
    with pytest.raises(ValueError, match="at least one core"):
        CoreMemories(cfg, 0)
