"""The npu caching allocator: simulated HBM (host memory) handed out as PyTorch's CUDA allocator does.

Segments are host buffers (CPU uint8 tensors, so a zero-copy CPU alias of any block is a view of
one). Each request is rounded up to 512 bytes and served from one of two pools:

- small pool: requests <= 1 MiB, carved out of 2 MiB segments;
- large pool: bigger requests, from 20 MiB segments (requests < 10 MiB) or a segment of the request
  rounded up to 2 MiB.

A free block of the right pool and stream (best fit: the smallest that is big enough) is split when
the rest is worth keeping (>= 512 bytes in the small pool, > 1 MiB in the large one); a freed block
merges with its free neighbours in the segment. Blocks are reused only by the stream they were
allocated on (the stream id is part of the pool key), so work queued on another stream never sees
its memory reused under it. The sum of the segments (reserved memory) is capped at the device's HBM
size (`VINCI_NPU_HBM` or the hardware config's `l2.hbm_capacity`, times
`set_per_process_memory_fraction`); a request past the cap first releases the cached free segments
and retries, then raises `torch.OutOfMemoryError` naming the sizes, leaving every live block as it
was.
"""
from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

ROUND = 512                  # every block is a multiple of this (also its alignment in the segment)
SMALL_SIZE = 1 << 20         # requests up to this go to the small pool
SMALL_BUFFER = 2 << 20       # small-pool segment size
LARGE_BUFFER = 20 << 20      # large-pool segment for requests under MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20        # bigger segments are rounded to this

POOLS = ("small_pool", "large_pool")


def round_size(nbytes: int) -> int:
    """Bytes a request of `nbytes` occupies (at least 512, a multiple of 512)."""
    return ROUND if nbytes < ROUND else -(-nbytes // ROUND) * ROUND


def segment_size(size: int) -> int:
    """Bytes of the segment allocated for a rounded request of `size` none of the cached blocks fits."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def format_size(n: int) -> str:
    """Bytes as torch.cuda's messages print them (``2.00 MiB``)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"


@dataclass(eq=False)
class Segment:
    """One host buffer (a "cudaMalloc") and its first block."""

    cpu: torch.UntypedStorage   # the host memory (CPU storage; CPU aliases are views of it)
    base: int
    size: int
    pool: int                   # 0 small, 1 large
    stream: int
    adopted: bool = False       # an op result's own buffer (see DeviceAllocator.adopt)


@dataclass(eq=False)
class Block:
    """A piece of a segment; allocated blocks back exactly one npu storage."""

    segment: Segment
    ptr: int
    size: int
    stream: int
    pool: int
    requested: int = 0
    allocated: bool = False
    prev: Block | None = None
    next: Block | None = None
    uses: tuple[int, ...] = ()   # other streams the block's tensor was used on (Tensor.record_stream)
    ready: int = 0               # simulated cycle before which a new user must not start (set on free)

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.stream, self.size, self.ptr)


STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
         "inactive_split_bytes", "requested_bytes")
_KINDS = ("current", "peak", "allocated", "freed")
_POOL_COL = {"all": 0, "small_pool": 4, "large_pool": 8}


def _bump(c: list[int], j: int, n: int) -> None:
    """Add n to a stat's "all" counters (c[0:4]) and its pool's (c[j:j+4])."""
    c[0] += n
    c[j] += n
    if n > 0:
        c[2] += n
        c[j + 2] += n
        if c[0] > c[1]:
            c[1] = c[0]
        if c[j] > c[j + 1]:
            c[j + 1] = c[j]
    else:
        c[3] -= n
        c[j + 3] -= n


class _Stats:
    """torch.cuda's counters: per stat 12 ints, (current, peak, allocated, freed) x (all, small, large)."""

    def __init__(self) -> None:
        self.c: dict[str, list[int]] = {name: [0] * 12 for name in STATS}
        self.num_alloc_retries = 0
        self.num_ooms = 0

    def add(self, name: str, pool: int, n: int) -> None:
        _bump(self.c[name], 4 * pool + 4, n)

    def block(self, pool: int, size: int, requested: int, sign: int) -> None:
        """An allocation (sign 1) or free (sign -1) of a block. (Blocks are active exactly while
        allocated here: nothing waits for another stream, so active_* are allocation's counters.)"""
        j = 4 * pool + 4
        c = self.c
        _bump(c["allocated_bytes"], j, sign * size)
        _bump(c["requested_bytes"], j, sign * requested)
        _bump(c["allocation"], j, sign)

    def get(self, name: str, pool: str = "all", kind: str = "current") -> int:
        name = {"active_bytes": "allocated_bytes", "active": "allocation"}.get(name, name)
        return self.c[name][_POOL_COL[pool] + _KINDS.index(kind)]


class DeviceAllocator:
    """The caching allocator of one npu device (see the module docstring)."""

    def __init__(self, index: int, capacity: int) -> None:
        self.index = index
        self.capacity = capacity
        self.fraction = 1.0
        self.segments: list[Segment] = []
        self._free: tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]] = ([], [])
        self._blocks: dict[int, Block] = {}      # ptr -> free block (the entries of _free)
        self.live: dict[int, Segment] = {}       # ptr -> segment of every allocated block (for CPU aliases)
        self.stats = _Stats()
        self._lock = threading.RLock()
        self._busy = False
        self._deferred: list[Block] = []          # frees that arrived (from GC) inside malloc
        self._allocated: dict[int, Block] = {}   # ptr -> allocated block
        #: the streams' simulated time (torch_bridge.device.streams sets these): a stream's position,
        #: and "make stream s wait until cycle c"
        self.stream_clock: Callable[[int], int] | None = None
        self.stream_wait: Callable[[int, int], None] | None = None

    # ------------------------------------------------------------------ limits
    @property
    def limit(self) -> int:
        """Bytes the device may reserve: HBM size times the per-process fraction."""
        return int(self.capacity * self.fraction)

    def reserved(self) -> int:
        return self.stats.c["reserved_bytes"][0]

    def allocated(self) -> int:
        return self.stats.c["allocated_bytes"][0]

    # ------------------------------------------------------------------ free lists
    def _insert_free(self, b: Block) -> None:
        bisect.insort(self._free[b.pool], b.key)
        self._blocks[b.ptr] = b

    def _remove_free(self, b: Block) -> None:
        lst = self._free[b.pool]
        i = bisect.bisect_left(lst, b.key)
        del lst[i]
        del self._blocks[b.ptr]

    def _find_free(self, pool: int, stream: int, size: int) -> Block | None:
        lst = self._free[pool]
        i = bisect.bisect_left(lst, (stream, size, -1))
        if i < len(lst) and lst[i][0] == stream:
            return self._blocks[lst[i][2]]
        return None

    # ------------------------------------------------------------------ malloc / free
    def malloc(self, nbytes: int, stream: int = 0) -> Block:
        """A block of at least `nbytes` for work on `stream`; raises torch.OutOfMemoryError past the cap."""
        with self._lock:
            self._busy = True
            try:
                return self._malloc(nbytes, stream)
            finally:
                self._busy = False
                while self._deferred:
                    self._free_block(self._deferred.pop())

    def _malloc(self, nbytes: int, stream: int) -> Block:
        size = round_size(nbytes)
        pool = 0 if size <= SMALL_SIZE else 1
        b = self._find_free(pool, stream, size)
        if b is None:
            b = self._new_segment(size, pool, stream, nbytes)
        else:
            self._remove_free(b)
            if b.prev is not None or b.next is not None:
                self.stats.add("inactive_split_bytes", pool, -b.size)
                self.stats.add("inactive_split", pool, -1)
            if b.ready and self.stream_wait is not None:
                # the block's last tensor was used on other streams: its new user waits for them
                self.stream_wait(stream, b.ready)
        rest = b.size - size
        if (pool == 0 and rest >= ROUND) or (pool == 1 and rest > SMALL_SIZE):
            tail = Block(b.segment, b.ptr + size, rest, stream, pool, prev=b, next=b.next, ready=b.ready)
            if b.next is not None:
                b.next.prev = tail
            b.next = tail
            b.size = size
            self._insert_free(tail)
            self.stats.add("inactive_split_bytes", pool, rest)
            self.stats.add("inactive_split", pool, 1)
        b.allocated = True
        b.requested = nbytes
        b.ready = 0
        self.stats.block(pool, b.size, nbytes, 1)
        self.live[b.ptr] = b.segment
        self._allocated[b.ptr] = b
        return b

    def record_stream(self, ptr: int, stream: int) -> None:
        """Note that the tensor in the block at `ptr` is used on `stream` (Tensor.record_stream): when
        it is freed, the block's next user waits for the work queued on `stream` by then."""
        with self._lock:
            b = self._allocated.get(ptr)
            if b is not None and stream != b.stream and stream not in b.uses:
                b.uses = b.uses + (stream,)

    def adopt(self, buf: torch.UntypedStorage, stream: int = 0) -> Block:
        """Take host buffer `buf` (the CPU storage an op library kernel just wrote its result into) as a
        segment of its own holding one allocated block: the result becomes device memory without a copy.
        Adopted segments are not cached (nor listed in `segments`): the segment goes back to the host as
        soon as its block is freed."""
        nbytes = buf.nbytes()
        pool = 0 if nbytes <= SMALL_SIZE else 1
        with self._lock:
            if self.reserved() + nbytes > self.limit:
                self.stats.num_alloc_retries += 1
                self._release_cached()
                if self.reserved() + nbytes > self.limit:
                    self._oom(nbytes, nbytes)
            seg = Segment(buf, buf.data_ptr(), nbytes, pool, stream, adopted=True)
            st = self.stats
            st.add("reserved_bytes", pool, nbytes)
            st.add("segment", pool, 1)
            b = Block(seg, seg.base, nbytes, stream, pool, requested=nbytes, allocated=True)
            st.block(pool, nbytes, nbytes, 1)
            self.live[b.ptr] = seg
            self._allocated[b.ptr] = b
            return b

    def _release_adopted(self, b: Block) -> None:
        seg = b.segment
        self.stats.add("reserved_bytes", seg.pool, -seg.size)
        self.stats.add("segment", seg.pool, -1)

    def _new_segment(self, size: int, pool: int, stream: int, nbytes: int) -> Block:
        seg_size = segment_size(size)
        if self.reserved() + seg_size > self.limit:
            # as CUDA: give the cached free segments back and retry once before failing
            self.stats.num_alloc_retries += 1
            self._release_cached()
            if self.reserved() + seg_size > self.limit:
                self._oom(nbytes, seg_size)
        try:
            buf = torch.UntypedStorage(seg_size)
        except RuntimeError as e:   # the host itself is out of memory
            self._oom(nbytes, seg_size, host=str(e))
        seg = Segment(buf, buf.data_ptr(), seg_size, pool, stream)
        self.segments.append(seg)
        self.stats.add("reserved_bytes", pool, seg_size)
        self.stats.add("segment", pool, 1)
        return Block(seg, seg.base, seg_size, stream, pool)

    def _oom(self, nbytes: int, seg_size: int, host: str = "") -> None:
        self.stats.num_ooms += 1
        reserved, allocated = self.reserved(), self.allocated()
        free = max(self.limit - reserved, 0)
        why = f" The host could not provide it ({host})." if host else ""
        raise torch.OutOfMemoryError(
            f"NPU out of memory. Tried to allocate {format_size(round_size(nbytes))} (a new segment of "
            f"{format_size(seg_size)}). NPU {self.index} has a total capacity of {format_size(self.limit)} of which "
            f"{format_size(free)} is free. Of the allocated memory {format_size(allocated)} is allocated by "
            f"PyTorch, and {format_size(reserved - allocated)} is reserved by PyTorch but unallocated.{why} "
            f"Tensors already on the device are unaffected; free some (del, torch.npu.empty_cache()) or lower "
            f"the batch size.")

    def free(self, b: Block) -> None:
        """Give a block back to its pool (called when its storage dies)."""
        with self._lock:
            if self._busy:          # a GC inside our own malloc: finish the malloc first
                self._deferred.append(b)
                return
            self._free_block(b)

    def _free_block(self, b: Block) -> None:
        pool = b.pool
        st = self.stats
        st.block(pool, b.size, b.requested, -1)
        del self.live[b.ptr]
        del self._allocated[b.ptr]
        b.allocated = False
        b.requested = 0
        if b.uses:
            if self.stream_clock is not None:
                b.ready = max([b.ready] + [self.stream_clock(u) for u in b.uses])
            b.uses = ()
        if b.segment.adopted:
            self._release_adopted(b)
            return
        for nb in (b.prev, b.next):
            if nb is not None and not nb.allocated:
                self._remove_free(nb)
                st.add("inactive_split_bytes", pool, -nb.size)
                st.add("inactive_split", pool, -1)
                if nb is b.prev:
                    b.ptr, b.prev = nb.ptr, nb.prev
                    if nb.prev is not None:
                        nb.prev.next = b
                else:
                    b.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = b
                b.size += nb.size
                b.ready = max(b.ready, nb.ready)
        if b.prev is not None or b.next is not None:
            st.add("inactive_split_bytes", pool, b.size)
            st.add("inactive_split", pool, 1)
        self._insert_free(b)

    # ------------------------------------------------------------------ cache
    def _release_cached(self) -> None:
        keep = []
        for seg in self.segments:
            b = self._blocks.get(seg.base)
            if b is not None and b.prev is None and b.next is None:   # the whole segment is one free block
                self._remove_free(b)
                self.stats.add("reserved_bytes", seg.pool, -seg.size)
                self.stats.add("segment", seg.pool, -1)
            else:
                keep.append(seg)
        self.segments = keep

    def empty_cache(self) -> None:
        """Release every segment that has no allocated block (torch.cuda.empty_cache)."""
        with self._lock:
            self._release_cached()

    def reset_peak(self) -> None:
        for c in self.stats.c.values():
            for j in (0, 4, 8):
                c[j + 1] = c[j]

    def reset_accumulated(self) -> None:
        for c in self.stats.c.values():
            for j in (0, 4, 8):
                c[j + 2] = c[j + 3] = 0
        self.stats.num_alloc_retries = self.stats.num_ooms = 0

    # ------------------------------------------------------------------ reports
    def memory_stats(self) -> dict[str, Any]:
        """torch.cuda.memory_stats's flat dict: ``"allocated_bytes.all.current"`` ..."""
        out: dict[str, Any] = {}
        for name in STATS:
            for p in ("all",) + POOLS:
                for k in _KINDS:
                    out[f"{name}.{p}.{k}"] = self.stats.get(name, p, k)
        out["num_alloc_retries"] = self.stats.num_alloc_retries
        out["num_ooms"] = self.stats.num_ooms
        out["num_device_alloc"] = self.stats.get("segment", "all", "allocated")
        out["num_device_free"] = self.stats.get("segment", "all", "freed")
        return dict(sorted(out.items()))

    def memory_summary(self) -> str:
        """A table like torch.cuda.memory_summary's."""
        get = self.stats.get
        lines = ["=" * 75, f" NPU memory summary, device ID {self.index:<3d} (capacity {format_size(self.limit)})",
                 "-" * 75,
                 f" {'Metric':<26}| {'Cur Usage':>10} | {'Peak Usage':>10} | {'Tot Alloc':>10} | {'Tot Freed':>10}",
                 "-" * 75]
        rows = (("Allocated memory", "allocated_bytes", True), ("Active memory", "active_bytes", True),
                ("Requested memory", "requested_bytes", True), ("NPU reserved memory", "reserved_bytes", True),
                ("Non-releasable memory", "inactive_split_bytes", True), ("Allocations", "allocation", False),
                ("Active allocs", "active", False), ("NPU reserved segments", "segment", False),
                ("Non-releasable allocs", "inactive_split", False))
        for title, name, is_bytes in rows:
            for p in ("all",) + POOLS:
                f = format_size if is_bytes else str
                label = title if p == "all" else f"      from {p.replace('_pool', '')} pool"
                cur, peak, tot, freed = (f(get(name, p, k)) for k in _KINDS)
                lines.append(f" {label:<26}| {cur:>10} | {peak:>10} | {tot:>10} | {freed:>10}")
            lines.append("-" * 75)
        lines.append(f" Allocation retries: {self.stats.num_alloc_retries}    OOMs: {self.stats.num_ooms}")
        lines.append("=" * 75)
        return "\n".join(lines) + "\n"
