"""On-chip memories of the simulated cores, as host arrays the compiled kernels address.

For a launch over `n` cores, `get_memories(cfg, n)` gives a `CoreMemories` holding one
64-byte-aligned uint8 arena per on-chip memory (L1, L0A, L0B, L0C, UB). Core `i`'s L1 is
bytes `[i * size, (i + 1) * size)` of the L1 arena, so every per-core base address is
64-byte aligned too (sizes are multiples of 64, checked by the config loader). The UB region
of each core includes its reserved scratch at the top (`cfg.capacity(Mem.UB)` onwards).

Arenas are pooled by (config, n) and reused across launches: contents are NOT cleared between
launches (kernels never read on-chip memory they did not write; call `clear()` to debug that).
GM is not here: GM tensors are the launch's arguments.
"""
from __future__ import annotations

import threading

import numpy as np

from simulator.config import HwConfig
from simulator.isa import Mem

#: on-chip memories with an arena, in address order
ON_CHIP: tuple[Mem, ...] = (Mem.L1, Mem.L0A, Mem.L0B, Mem.L0C, Mem.UB)
ARENA_ALIGN = 64


def aligned_empty(nbytes: int, align: int = ARENA_ALIGN) -> np.ndarray:
    """An uninitialised uint8 array of `nbytes` whose data pointer is a multiple of `align`."""
    raw = np.empty(nbytes + align, dtype=np.uint8)
    skip = (-raw.ctypes.data) % align
    out = raw[skip:skip + nbytes]
    assert out.ctypes.data % align == 0
    return out


class CoreMemories:
    """The L1 / L0A / L0B / L0C / UB arenas of `n` cores for one config."""

    def __init__(self, cfg: HwConfig, n: int) -> None:
        if n < 1:
            raise ValueError(f"need at least one core, got {n}")
        self.cfg = cfg
        self.n = n
        self.sizes: dict[Mem, int] = {m: cfg.size(m) for m in ON_CHIP}
        self.arenas: dict[Mem, np.ndarray] = {
            m: aligned_empty(self.sizes[m] * n) for m in ON_CHIP}
        self._bases: dict[Mem, list[int]] = {
            m: [self.arenas[m].ctypes.data + i * self.sizes[m] for i in range(n)]
            for m in ON_CHIP}
        # the per-memory base tables, ready to hand to native code as a pointer
        self.base_tables: dict[Mem, np.ndarray] = {
            m: np.array(self._bases[m], dtype=np.uint64) for m in ON_CHIP}

    def base(self, mem: Mem, core: int) -> int:
        """Host address of byte 0 of `mem` on `core`."""
        return self._bases[Mem(mem)][core]

    def bases(self, mem: Mem) -> list[int]:
        """Host addresses of byte 0 of `mem` on every core."""
        return list(self._bases[Mem(mem)])

    def view(self, mem: Mem, core: int) -> np.ndarray:
        """The uint8 bytes of `mem` on `core` (a view: writes go to the arena)."""
        size = self.sizes[Mem(mem)]
        return self.arenas[Mem(mem)][core * size:(core + 1) * size]

    def clear(self, value: int = 0) -> None:
        """Fill every arena with `value` (e.g. 0xCD to catch reads of unwritten memory)."""
        for arena in self.arenas.values():
            arena.fill(value)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arenas.values())

    def __repr__(self) -> str:
        return f"CoreMemories({self.cfg.name}, n={self.n}, {self.nbytes >> 10} KiB)"


_pool: dict[tuple[str, str, int], CoreMemories] = {}
_lock = threading.Lock()


def get_memories(cfg: HwConfig, n: int) -> CoreMemories:
    """The pooled arenas for `n` cores of `cfg` (allocated on first use, then reused)."""
    key = (cfg.name, cfg.fingerprint(), n)
    with _lock:
        mems = _pool.get(key)
        if mems is None:
            mems = _pool[key] = CoreMemories(cfg, n)
    return mems


def release_memories() -> None:
    """Drop every pooled arena (tests, or to give memory back after a large launch)."""
    with _lock:
        _pool.clear()
