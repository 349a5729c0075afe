"""The launcher: run a compiled kernel's `block_dim` cores on a pool of host threads.

Each core gets a context (see `abi`) with its core id, the base addresses of its on-chip
memories and, when profiling, a trace buffer that the kernel fills with one record per issued
instruction. The ctypes call releases the GIL, so host threads run cores truly in parallel.
Contexts, memories and thread pools are made once and reused: a launch costs a few microseconds
of Python plus the kernel itself. A launch that moves little data (`INLINE_BYTES`) runs all its
cores on the calling thread: handing work to a pool costs more than such a kernel.
"""
from __future__ import annotations

import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np

from simulator import abi
from simulator.config import HwConfig
from simulator.isa import EVENT_DTYPE, EVENT_WORDS, Mem
from simulator.memory import get_memories

KERNEL_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
FLUSH_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
PRINT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, *([ctypes.c_int64] * 8))
TRACE_CAP = 1 << 16  # events per core before a flush
INLINE_BYTES = 1 << 18  # GM bytes below which a launch runs on the calling thread only


@dataclass
class LaunchError:
    """A check that failed inside the kernel (no memory was touched past it)."""

    core: int
    check: int
    values: list[int]


class Contexts:
    """The per-core contexts of one (config, block_dim): an int64 array [block_dim, CTX_WORDS]."""

    def __init__(self, cfg: HwConfig, n: int):
        self.n = n
        self.mems = get_memories(cfg, n)
        self.words = np.zeros((n, abi.CTX_WORDS), dtype=np.int64)
        self.words[:, abi.CORE_ID] = np.arange(n)
        self.words[:, abi.NUM_CORES] = n
        for name, word in abi.MEM_WORD.items():
            self.words[:, word] = self.mems.bases(Mem[name])
        self.scratch = np.zeros(n * abi.SCRATCH_BYTES + 64, dtype=np.uint8)
        base = self.scratch.ctypes.data + (-self.scratch.ctypes.data) % 64
        self.words[:, abi.SCRATCH] = [base + i * abi.SCRATCH_BYTES for i in range(n)]
        self.ptr = self.words.ctypes.data
        self.lock = threading.Lock()  # one launch at a time uses these memories
        self.failed = False  # a core wrote its error words in the last launch

    def core_of(self, ctx_addr: int) -> int:
        return (ctx_addr - self.ptr) // (abi.CTX_WORDS * 8)


_CTX: dict[tuple[str, str, int], Contexts] = {}
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def contexts(cfg: HwConfig, n: int) -> Contexts:
    key = (cfg.name, cfg.fingerprint(), n)
    c = _CTX.get(key)
    if c is None:
        c = _CTX[key] = Contexts(cfg, n)
    return c


def _pool(threads: int) -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < threads:
            _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="vinci-core")
        return _POOL


_FN_CACHE: dict[int, Callable] = {}


def kernel_fn(address: int) -> Callable:
    fn = _FN_CACHE.get(address)
    if fn is None:
        fn = _FN_CACHE[address] = KERNEL_FN(address)
    return fn


def run_cores(fn: Callable, argp: int, ctxs: Contexts, n: int, threads: int) -> LaunchError | None:
    """Cores 0..n-1 of `fn` on up to `threads` host threads, no trace, no prints: the launch's hot
    path (`run`, and the prepared launches of `dsl.kernel` call it directly)."""
    with ctxs.lock:
        if ctxs.failed:  # error words are only ever written by a failing core
            ctxs.words[:, abi.ERR_CODE] = 0
            ctxs.failed = False
        if threads <= 1 or n == 1:
            if fn(argp, ctxs.ptr, 0, n) == 0:
                return None
            return _error(ctxs)
        return _run_threads(fn, argp, ctxs, n, threads)


def _run_threads(fn: Callable, argp: int, ctxs: Contexts, n: int, threads: int) -> LaunchError | None:
    nthreads = max(1, min(threads, n))
    if nthreads == 1:
        rcs = [fn(argp, ctxs.ptr, 0, n)]
    else:
        bounds = [n * i // nthreads for i in range(nthreads + 1)]
        pool = _pool(nthreads)
        futs = [pool.submit(fn, argp, ctxs.ptr, bounds[i], bounds[i + 1]) for i in range(1, nthreads)]
        rcs = [fn(argp, ctxs.ptr, bounds[0], bounds[1])] + [f.result() for f in futs]
    return _error(ctxs) if any(rcs) else None


def _error(ctxs: Contexts) -> LaunchError:
    """The first failing core's error words (the caller holds the contexts' lock)."""
    w = ctxs.words
    ctxs.failed = True
    bad = np.nonzero(w[:, abi.ERR_CODE])[0]
    c = int(bad[0]) if len(bad) else 0
    return LaunchError(c, int(w[c, abi.ERR_CHECK]), [int(v) for v in w[c, abi.ERR_VALUES:abi.ERR_VALUES + abi.N_ERR_VALUES]])


def run(address: int, args: ctypes.Array | int, cfg: HwConfig, n: int, threads: int,
        on_print: Callable[[int, list[int]], None] | None = None,
        trace: bool = False, nbytes: int | None = None) -> tuple[LaunchError | None, list[np.ndarray] | None]:
    """Run cores 0..n-1 of the kernel at `address`. Returns (first error, per-core event arrays).
    `nbytes` (the GM bytes of the arguments): below `INLINE_BYTES` the calling thread runs every core."""
    fn = kernel_fn(address)
    ctxs = contexts(cfg, n)
    argp = args if isinstance(args, int) else ctypes.addressof(args)
    if nbytes is not None and nbytes < INLINE_BYTES:
        threads = 1
    if on_print is None and not trace:
        return run_cores(fn, argp, ctxs, n, threads), None
    with ctxs.lock:
        w = ctxs.words
        if ctxs.failed:  # error words are only ever written by a failing core
            w[:, abi.ERR_CODE] = 0
            ctxs.failed = False
        keep: list[object] = []
        chunks: list[list[np.ndarray]] = [[] for _ in range(n)] if trace else []
        bufs: list[np.ndarray] = []
        if on_print is not None:
            def _print(ctx: int, *vals: int) -> None:
                on_print(ctxs.core_of(ctx), list(vals))
            pf = PRINT_FN(_print)
            keep.append(pf)
            pf_addr = ctypes.cast(pf, ctypes.c_void_p).value
            assert pf_addr is not None  # a ctypes callback is never NULL
            w[:, abi.PRINT_FN] = pf_addr
        if trace:
            def _flush(ctx: int) -> None:
                c = ctxs.core_of(ctx)
                cnt = int(w[c, abi.TRACE_COUNT])
                chunks[c].append(bufs[c][:cnt].copy())
                w[c, abi.TRACE_COUNT] = 0
            ff = FLUSH_FN(_flush)
            keep.append(ff)
            for c in range(n):
                bufs.append(np.empty((TRACE_CAP, EVENT_WORDS), dtype=np.int64))
            w[:, abi.TRACE_PTR] = [b.ctypes.data for b in bufs]
            w[:, abi.TRACE_COUNT] = 0
            w[:, abi.TRACE_CAP] = TRACE_CAP
            ff_addr = ctypes.cast(ff, ctypes.c_void_p).value
            assert ff_addr is not None  # a ctypes callback is never NULL
            w[:, abi.TRACE_FLUSH] = ff_addr
        try:
            error = _run_threads(fn, argp, ctxs, n, threads)
            events = None
            if trace:
                events = []
                for c in range(n):
                    cnt = int(w[c, abi.TRACE_COUNT])
                    parts = chunks[c] + [bufs[c][:cnt]]
                    arr = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
                    events.append(np.ascontiguousarray(arr).view(EVENT_DTYPE).reshape(-1))
            return error, events
        finally:
            if trace:
                w[:, abi.TRACE_PTR] = 0
            if on_print is not None:
                w[:, abi.PRINT_FN] = 0
            del keep
