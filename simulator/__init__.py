"""The simulated Da Vinci-style chip: hardware configs, on-chip memories, the timing model.

- `load_config(name_or_path=None) -> HwConfig`: a chip described as data
  (`simulator/configs/*.toml`; default $VINCI_CONFIG or "ascend910b1").
- `get_memories(cfg, n) -> CoreMemories`: pooled, 64-byte-aligned L1/L0A/L0B/L0C/UB arenas.
- `simulate(cores, cfg, locs, gm_nbytes) -> Profile`: replay per-core instruction records
  (`isa.EVENT_DTYPE`) on the pipe / flag / L2 model; `Profile.report()` prints the summary,
  `Profile.save_trace(path)` writes a Chrome / Perfetto trace.
- `isa`: the instruction set and the event record format.
"""
from simulator import isa
from simulator.config import (
    ConfigError,
    CubeRate,
    DmaRates,
    HwConfig,
    L2Config,
    Memories,
    Overheads,
    known_configs,
    load_config,
)
from simulator.isa import EVENT_DTYPE, CubeType, Instr, Kind, Mem, Pipe
from simulator.l2 import L2Model
from simulator.memory import CoreMemories, get_memories, release_memories
from simulator.timing import CoreProfile, Profile, SyncError, simulate
from simulator.trace import chrome_trace_events, write_chrome_trace

__all__ = [
    "EVENT_DTYPE",
    "ConfigError",
    "CoreMemories",
    "CoreProfile",
    "CubeRate",
    "CubeType",
    "DmaRates",
    "HwConfig",
    "Instr",
    "Kind",
    "L2Config",
    "L2Model",
    "Mem",
    "Memories",
    "Overheads",
    "Pipe",
    "Profile",
    "SyncError",
    "chrome_trace_events",
    "get_memories",
    "isa",
    "known_configs",
    "load_config",
    "release_memories",
    "simulate",
    "write_chrome_trace",
]
