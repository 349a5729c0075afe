"""The shared L2 of the timing model: which 128-byte GM lines are resident (see `timing`'s
docstring for the rules: FIFO eviction once the capacity is exceeded, residency looked up once
per DMA)."""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from simulator.config import HwConfig


class L2Model:
    """Residency of GM lines in the shared L2: one byte per line and GM argument (a bytearray,
    so the common contiguous access is a few C calls), FIFO eviction."""

    def __init__(self, cfg: HwConfig, gm_nbytes: Sequence[int] | None = None) -> None:
        self.line = cfg.l2.line_bytes
        self.capacity_lines = cfg.l2.capacity // self.line
        self.maps: dict[int, bytearray] = {}
        for arg, nbytes in enumerate(gm_nbytes or ()):
            self.maps[arg] = bytearray(-(-int(nbytes) // self.line))
        self.fifo: deque[tuple[int, tuple[int, int] | np.ndarray]] = deque()
        self.resident_lines = 0

    @property
    def resident_bytes(self) -> int:
        return self.resident_lines * self.line

    def _bitmap(self, arg: int, last_line: int) -> bytearray:
        m = self.maps.get(arg)
        if m is None:
            m = self.maps[arg] = bytearray(last_line + 1)
        elif len(m) <= last_line:
            grown = bytearray(max(last_line + 1, 2 * len(m)))
            grown[:len(m)] = m
            m = self.maps[arg] = grown
        return m

    def touch(self, arg: int, offset: int, length: int, count: int, stride: int) -> int:
        """Access `count` ranges of `length` bytes at `offset + i * stride` of GM argument
        `arg`; mark their lines resident. Returns how many of the bytes were resident before."""
        if length <= 0 or count <= 0:
            return 0
        line = self.line
        if count == 1 or stride == length:  # one contiguous range
            lo, hi = offset, offset + length * count
            if lo < 0:
                raise ValueError(f"GM access at negative offset {lo} of argument {arg}")
            l0, l1 = lo // line, (hi - 1) // line + 1
            m = self._bitmap(arg, l1 - 1)
            n_res = m.count(1, l0, l1)
            if n_res == 0:
                m[l0:l1] = b"\x01" * (l1 - l0)
                self._admit(arg, (l0, l1), l1 - l0)
                return 0
            hit = n_res * line
            if m[l0]:
                hit -= lo - l0 * line
            if m[l1 - 1]:
                hit -= l1 * line - hi
            if n_res < l1 - l0:
                seg = np.frombuffer(m, dtype=np.uint8)[l0:l1]
                new = np.flatnonzero(seg == 0) + l0
                seg[:] = 1
                self._admit(arg, new, new.size)
            return hit
        if offset < 0:
            raise ValueError(f"GM access at negative offset {offset} of argument {arg}")
        span = (offset % line + length - 1) // line + 1  # lines per burst
        if stride > 0 and stride % line == 0 and span <= stride // line:
            return self._touch_rows(arg, offset, length, count, stride // line, span)
        starts = offset + np.arange(count, dtype=np.int64) * stride
        if int(starts.min()) < 0:
            raise ValueError(f"GM access at negative offset {int(starts.min())} of argument {arg}")
        ends = starts + length
        first, last = starts // line, (ends - 1) // line
        k = int((last - first).max()) + 1
        lines = first[:, None] + np.arange(k, dtype=np.int64)
        valid = lines <= last[:, None]
        overlap = (np.minimum(ends[:, None], (lines + 1) * line)
                   - np.maximum(starts[:, None], lines * line))
        lines, overlap = lines[valid], overlap[valid]
        bits = np.frombuffer(self._bitmap(arg, int(lines.max())), dtype=np.uint8)
        resident = bits[lines] != 0
        # a line touched by several bursts of this DMA can only miss on its first touch
        uniq, first_touch = np.unique(lines, return_index=True)
        if uniq.size < lines.size:
            again = np.ones(lines.size, dtype=bool)
            again[first_touch] = False
            resident |= again
        hit = int(overlap[resident].sum())
        new = uniq[bits[uniq] == 0]
        if new.size:
            bits[new] = 1
            self._admit(arg, new, new.size)
        return hit

    def _touch_rows(self, arg: int, offset: int, length: int, count: int, step: int,
                    span: int) -> int:
        """Bursts a whole number of lines apart that share no line: every burst covers `span`
        lines at the same position within them, so the lines form a (count, span) strided
        view of the bitmap."""
        line = self.line
        l0 = offset // line
        m = np.frombuffer(self._bitmap(arg, l0 + count * step - 1), dtype=np.uint8)
        rows = m[l0:l0 + count * step].reshape(count, step)[:, :span]
        n_res = int(np.count_nonzero(rows))
        hit = n_res * line
        if n_res:
            head = offset % line  # bytes of the first line before each burst
            tail = span * line - head - length  # bytes of the last line after it
            if head:
                hit -= head * int(np.count_nonzero(rows[:, 0]))
            if tail:
                hit -= tail * int(np.count_nonzero(rows[:, -1]))
        if n_res < rows.size:
            lines = (l0 + step * np.arange(count, dtype=np.int64))[:, None] + np.arange(span)
            new = lines[rows == 0] if n_res else lines.reshape(-1)
            rows[:] = 1
            self._admit(arg, new, new.size)
        return hit

    def _admit(self, arg: int, lines: tuple[int, int] | np.ndarray, count: int) -> None:
        """Lines just made resident: a range (lo, hi) or an array of line numbers."""
        self.fifo.append((arg, lines))
        self.resident_lines += count
        excess = self.resident_lines - self.capacity_lines
        while excess > 0:
            victim_arg, victims = self.fifo.popleft()
            m = self.maps[victim_arg]
            if isinstance(victims, tuple):
                lo, hi = victims
                if hi - lo > excess:
                    self.fifo.appendleft((victim_arg, (lo + excess, hi)))
                    hi = lo + excess
                m[lo:hi] = bytes(hi - lo)
                k = hi - lo
            else:
                if victims.size > excess:
                    self.fifo.appendleft((victim_arg, victims[excess:]))
                    victims = victims[:excess]
                np.frombuffer(m, dtype=np.uint8)[victims] = 0
                k = int(victims.size)
            self.resident_lines -= k
            excess -= k
