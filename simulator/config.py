"""Hardware descriptions: one TOML file per chip in `simulator/configs/`, loaded as `HwConfig`.

    cfg = load_config()                    # $VINCI_CONFIG or "ascend910b1"
    cfg = load_config("ascend310p")        # simulator/configs/ascend310p.toml
    cfg = load_config("/path/to/chip.toml")
    cfg.capacity(Mem.UB), cfg.clock_hz, cfg.peak_flops("f16"), cfg.fingerprint()

Every field of the file is required and checked; a missing or mistyped field raises
`ConfigError` naming the file and the field (``ascend910b1.toml: missing field 'memory.UB'``).
Loaded configs are cached per file content, so an edited file is picked up at the next load.
"""
from __future__ import annotations

import hashlib
import os
import threading
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from simulator.isa import CubeType, Instr, Mem

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_CONFIG = "ascend910b1"
ENV_VAR = "VINCI_CONFIG"


class ConfigError(ValueError):
    """A hardware description file is missing, unreadable or has a bad field."""


@dataclass(frozen=True)
class CubeRate:
    """One cube step: C[m0, n0] += A[m0, k0] @ B[k0, n0] per cycle."""

    m0: int
    k0: int
    n0: int

    @property
    def macs_per_cycle(self) -> int:
        return self.m0 * self.k0 * self.n0


@dataclass(frozen=True)
class Memories:
    """On-chip memory sizes per core, in bytes (UB_reserved is part of UB)."""

    L1: int
    L0A: int
    L0B: int
    L0C: int
    UB: int
    UB_reserved: int


@dataclass(frozen=True)
class L2Config:
    """The L2 cache shared by all cores and the HBM behind it (rates per core)."""

    capacity: int
    line_bytes: int
    read_bytes_per_cycle: int
    write_bytes_per_cycle: int
    hbm_bytes_per_cycle: int
    hbm_capacity: int


@dataclass(frozen=True)
class DmaRates:
    """Bytes per cycle per core of each DMA route (field = route of `Instr.COPY_<route>`)."""

    GM_UB: int
    GM_L1: int
    UB_GM: int
    UB_L1: int
    L1_UB: int
    L1_L0A: int
    L1_L0B: int
    L0C_GM: int
    L0C_UB: int
    L0C_L1: int
    UB_UB: int

    def rate(self, instr: Instr) -> int:
        """The route rate of a `COPY_*` instruction (an atomic copy moves at its route's rate)."""
        return int(getattr(self, instr.name.removeprefix("COPY_").removesuffix("_ATOMIC")))


@dataclass(frozen=True)
class Overheads:
    """Fixed cycles: scalar issue per instruction, start-up per instruction class, flag latency."""

    issue: int
    dma: int
    vector: int
    cube: int
    scalar: int
    flag_latency: int


@dataclass(frozen=True)
class HwConfig:
    """A chip: core count and clock, memories, unit rates, DMA routes, L2 and overheads."""

    name: str
    description: str
    path: str
    digest: str
    cores: int
    clock_mhz: int
    alignment: int
    event_ids_per_pair: int
    memory: Memories
    cube_f16: CubeRate  # also bf16 (same rate; an mmad record does not tell them apart)
    cube_i8: CubeRate
    cube_f32: CubeRate
    vector_bytes_per_repeat: int
    vector_max_repeat: int
    l2: L2Config
    dma: DmaRates
    overhead: Overheads

    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6

    def fingerprint(self) -> str:
        """sha256 of the description file's bytes: part of every compile-cache key."""
        return self.digest

    def size(self, mem: Mem) -> int:
        """Physical size of `mem` per core (GM: the HBM size), reserved scratch included."""
        if mem == Mem.GM:
            return self.l2.hbm_capacity
        return int(getattr(self.memory, Mem(mem).name))

    def reserved(self, mem: Mem) -> int:
        """Bytes at the top of `mem` reserved as scratch (only UB has some)."""
        return self.memory.UB_reserved if mem == Mem.UB else 0

    def capacity(self, mem: Mem) -> int:
        """Bytes of `mem` the buffer allocator may use: size minus the reserved scratch."""
        return self.size(mem) - self.reserved(mem)

    def cube_rate(self, ctype: CubeType | str) -> CubeRate:
        """The cube step for an operand type: `CubeType` or a dtype name (f16, bf16, i8, f32)."""
        if isinstance(ctype, str):
            key = {"f16": CubeType.F16, "float16": CubeType.F16, "bf16": CubeType.F16,
                   "bfloat16": CubeType.F16, "i8": CubeType.I8, "int8": CubeType.I8,
                   "f32": CubeType.F32, "float32": CubeType.F32}.get(ctype)
            if key is None:
                raise ValueError(f"no cube rate for dtype {ctype!r} (f16, bf16, i8, f32)")
            ctype = key
        return {CubeType.F16: self.cube_f16, CubeType.I8: self.cube_i8,
                CubeType.F32: self.cube_f32}[CubeType(ctype)]

    def peak_flops(self, dtype: CubeType | str = "f16") -> float:
        """Chip peak of the cube units in FLOP/s (2 per MAC) for `dtype`, all cores: the
        [cube] rate of that dtype (f32 runs at half the f16 rate on the default config)."""
        return 2.0 * self.cube_rate(dtype).macs_per_cycle * self.cores * self.clock_hz

    def peak_vector_bytes(self) -> float:
        """Chip peak of the vector units in bytes of operand per second, all cores."""
        return float(self.vector_bytes_per_repeat) * self.cores * self.clock_hz

    def hbm_bandwidth(self) -> float:
        """Chip HBM bandwidth in bytes per second (the L2-miss rate times cores)."""
        return float(self.l2.hbm_bytes_per_cycle) * self.cores * self.clock_hz

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / self.clock_mhz


# --------------------------------------------------------------------------------------------
# loading and validation

def _field(data: dict[str, Any], table: str, key: str, where: str, kind: type = int) -> Any:
    name = f"{table}.{key}" if table else key
    if key not in data:
        raise ConfigError(f"{where}: missing field '{name}'")
    value = data[key]
    if kind is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{where}: field '{name}' must be an integer, got {value!r}")
        if value < 0:
            raise ConfigError(f"{where}: field '{name}' must be >= 0, got {value}")
    elif kind is str and not isinstance(value, str):
        raise ConfigError(f"{where}: field '{name}' must be a string, got {value!r}")
    return value


def _table(data: dict[str, Any], table: str, where: str) -> dict[str, Any]:
    if table not in data:
        raise ConfigError(f"{where}: missing table '[{table}]'")
    value = data[table]
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: '{table}' must be a table")
    return value


def _check_unknown(data: dict[str, Any], known: set[str], table: str, where: str) -> None:
    extra = sorted(set(data) - known)
    if extra:
        name = f"{table}.{extra[0]}" if table else extra[0]
        raise ConfigError(f"{where}: unknown field '{name}' (typo?)")


def _ints(cls: type, data: dict[str, Any], table: str, where: str, *, positive: bool = True,
          zero_ok: tuple[str, ...] = ()) -> Any:
    names = [f.name for f in fields(cls)]
    _check_unknown(data, set(names), table, where)
    values = {}
    for n in names:
        v = _field(data, table, n, where)
        if positive and v == 0 and n not in zero_ok:
            raise ConfigError(f"{where}: field '{table}.{n}' must be > 0")
        values[n] = v
    return cls(**values)


def _cube(data: dict[str, Any], key: str, where: str) -> CubeRate:
    v = _field(data, "cube", key, where, kind=list)
    if (not isinstance(v, list) or len(v) != 3
            or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v)):
        raise ConfigError(f"{where}: field 'cube.{key}' must be [m0, k0, n0] positive integers, "
                          f"got {v!r}")
    return CubeRate(*v)


def parse_config(text: bytes, where: str) -> HwConfig:
    """Build an `HwConfig` from the bytes of a description file; `where` names it in errors."""
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: not valid TOML: {e}") from None
    tables = {"core", "memory", "cube", "vector", "l2", "dma", "overhead"}
    _check_unknown(data, tables | {"name", "description"}, "", where)
    core = _table(data, "core", where)
    _check_unknown(core, {"count", "clock_mhz", "alignment", "event_ids_per_pair"}, "core", where)
    cube = _table(data, "cube", where)
    _check_unknown(cube, {"f16", "i8", "f32"}, "cube", where)
    vector = _table(data, "vector", where)
    _check_unknown(vector, {"bytes_per_repeat", "max_repeat"}, "vector", where)
    values: dict[str, Any] = {
        "name": _field(data, "", "name", where, kind=str),
        "description": _field(data, "", "description", where, kind=str),
        "cores": _field(core, "core", "count", where),
        "clock_mhz": _field(core, "core", "clock_mhz", where),
        "alignment": _field(core, "core", "alignment", where),
        "event_ids_per_pair": _field(core, "core", "event_ids_per_pair", where),
        "memory": _ints(Memories, _table(data, "memory", where), "memory", where,
                        zero_ok=("UB_reserved",)),
        "cube_f16": _cube(cube, "f16", where),
        "cube_i8": _cube(cube, "i8", where),
        "cube_f32": _cube(cube, "f32", where),
        "vector_bytes_per_repeat": _field(vector, "vector", "bytes_per_repeat", where),
        "vector_max_repeat": _field(vector, "vector", "max_repeat", where),
        "l2": _ints(L2Config, _table(data, "l2", where), "l2", where),
        "dma": _ints(DmaRates, _table(data, "dma", where), "dma", where),
        "overhead": _ints(Overheads, _table(data, "overhead", where), "overhead", where,
                          positive=False),
    }
    for key in ("cores", "clock_mhz", "alignment", "event_ids_per_pair",
                "vector_bytes_per_repeat", "vector_max_repeat"):
        if values[key] == 0:
            raise ConfigError(f"{where}: field for {key} must be > 0")
    mem: Memories = values["memory"]
    for f in fields(Memories):
        if f.name != "UB_reserved" and getattr(mem, f.name) % 64:
            raise ConfigError(f"{where}: field 'memory.{f.name}' must be a multiple of 64 bytes")
    if mem.UB_reserved >= mem.UB:
        raise ConfigError(f"{where}: field 'memory.UB_reserved' must be smaller than memory.UB")
    if values["alignment"] & (values["alignment"] - 1):
        raise ConfigError(f"{where}: field 'core.alignment' must be a power of two")
    return HwConfig(path=where, digest=hashlib.sha256(text).hexdigest(), **values)


def config_path(name_or_path: str | None = None) -> Path:
    """The file a config name refers to: None -> $VINCI_CONFIG or the default; a bare name ->
    `simulator/configs/NAME.toml`; anything with a slash or a .toml suffix -> that path."""
    if name_or_path is None:
        name_or_path = os.environ.get(ENV_VAR) or DEFAULT_CONFIG
    if os.sep in name_or_path or "/" in name_or_path or name_or_path.endswith(".toml"):
        return Path(name_or_path).expanduser().resolve()
    return CONFIG_DIR / f"{name_or_path}.toml"


_cache: dict[tuple[Path, str], HwConfig] = {}
_lock = threading.Lock()


def load_config(name_or_path: str | None = None) -> HwConfig:
    """Load a hardware description; see `config_path` for how names resolve.

    The result is cached per file and content: the file is re-read (a few KB) and hashed on
    every call, so an edited file is never served stale and an unchanged one gives the same
    `HwConfig` object.
    """
    path = config_path(name_or_path)
    try:
        text = path.read_bytes()
    except OSError:
        known = ", ".join(known_configs())
        raise ConfigError(f"{path}: no such hardware config (known: {known})") from None
    key = (path, hashlib.sha256(text).hexdigest())
    with _lock:
        cfg = _cache.get(key)
    if cfg is None:
        cfg = parse_config(text, str(path))
        with _lock:
            cfg = _cache.setdefault(key, cfg)
    return cfg


def known_configs() -> list[str]:
    """Names of the description files shipped in `simulator/configs/`."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))
