"""Recording the kernels a piece of Python launches: `with dsl.record() as rec: op(...)`.

Inside the block every launch (plain, `kernel[n](...)`, prepared) runs traced, so the timing
model sees it, and its `Run` is appended to `rec.runs` with the kernel's name. An op made of
several kernels is then measured as a whole: `rec.cycles` is the sum of the kernels' cycles (one
after another on the core, as a stream runs them), `rec.bound` the sum of their roofline bounds,
`rec.efficiency` their ratio. The op test matrix, the bench and the torch profiler read it.

Recording is per thread and nests (an inner block's runs also reach the outer one). Outside a
block launches take the untraced fast path and pay nothing for this.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class _Local(threading.local):
    stack: list["Recording"] | None = None   # a class default: reading it never takes an exception path


_LOCAL = _Local()


@dataclass(eq=False)   # compared by identity: nested blocks each remove their own recording
class Recording:
    """The launches made inside one `record()` block, in order: (kernel name, Run)."""
    runs: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        return sum(r.cycles for _, r in self.runs)

    @property
    def bound(self) -> int:
        return sum(r.bound for _, r in self.runs)

    @property
    def efficiency(self) -> float:
        """Roofline bound over cycles for the whole sequence (1.0 = every kernel at its roofline)."""
        c = self.cycles
        return self.bound / c if c else 0.0

    @property
    def seconds(self) -> float:
        return sum(r.seconds for _, r in self.runs)

    def kernels(self) -> list[str]:
        return [name for name, _ in self.runs]


def active() -> list[Recording] | None:
    """The open recordings of this thread (innermost last), or None."""
    return _LOCAL.stack or None


def add(name: str, run: Any) -> None:
    for rec in _LOCAL.stack or ():
        rec.runs.append((name, run))


@contextmanager
def record() -> Iterator[Recording]:
    """Record every kernel launched by this thread inside the block (module docstring)."""
    stack = _LOCAL.stack
    if stack is None:
        stack = _LOCAL.stack = []
    rec = Recording()
    stack.append(rec)
    try:
        yield rec
    finally:
        stack.remove(rec)
