"""Recording the kernels a piece of Python launches: `with dsl.record() as rec: op(...)`.

Inside the block every launch (plain, `kernel[n](...)`, prepared) runs traced, so the timing
model sees it, and its `Run` is appended to `rec.runs` with the kernel's name. An op made of
several kernels is then measured as a whole: `rec.cycles` is the sum of the kernels' cycles (one
after another on the core, as a stream runs them), `rec.bound` the sum of their roofline bounds,
`rec.efficiency` their ratio. The op test matrix, the bench and the torch profiler read it.

Recording is per thread and nests (an inner block's runs also reach the outer one). Outside a
block launches take the untraced fast path and pay nothing for this.

`record(timed=True)` is the cheap kind the npu device's stream timeline uses: it needs each launch's
time, not a fresh trace of it, so a launch like an earlier one (same kernel specialisation, core
count, shapes and integer scalars; only the tensors' addresses and float scalars differ) runs untraced and
reuses the earlier launch's `Run` (timed without its per-instruction timeline). Only when every open
recording is timed do launches take that path; a profile open at the same time still sees every
launch traced. A kernel whose timing depends on its data (a gather's addresses, atomics) or on a
float scalar's value is timed on the data of its first launch of that shape.
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
    #: only the launches' times are needed: an identical earlier launch's Run may stand in
    timed: bool = False

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


def timing_only(stack: list[Recording]) -> bool:
    """True when every open recording is a timed one (launches may reuse an earlier identical Run)."""
    for rec in stack:
        if not rec.timed:
            return False
    return True


def add(name: str, run: Any) -> None:
    for rec in _LOCAL.stack or ():
        rec.runs.append((name, run))


@contextmanager
def record(timed: bool = False) -> Iterator[Recording]:
    """Record every kernel launched by this thread inside the block (module docstring)."""
    stack = _LOCAL.stack
    if stack is None:
        stack = _LOCAL.stack = []
    rec = Recording(timed=timed)
    stack.append(rec)
    try:
        yield rec
    finally:
        stack.remove(rec)


# the Runs of timed launches (dsl.kernel reads and fills them)
class Times:
    """The Runs of timed launches (dsl.record(timed=True)) by `_timing_key`: bounded, the oldest
    entries dropped first."""

    LIMIT = 8192

    def __init__(self) -> None:
        self.runs: dict[tuple, Any] = {}

    def get(self, key: tuple) -> Any:
        return self.runs.get(key)

    def put(self, key: tuple, run: Any) -> None:
        runs = self.runs
        if len(runs) >= self.LIMIT:
            for old in list(runs)[: self.LIMIT // 4]:
                del runs[old]
        runs[key] = run   # the Run holds its plan, whose id is in the key: the id is not reused

    def clear(self) -> None:
        self.runs.clear()


TIMES = Times()
_ZERO_WORD = bytes(8)


def timing_key(plan: Any, n: int, words: Any) -> tuple:
    """What makes two launches take the same time on the model: the specialisation (its plan), the
    core count and the argument words (shapes, integer scalars) with the tensors' addresses and the
    float scalars' values blanked (a float argument scales data; an optimizer's step-dependent
    factors would otherwise make every step a new launch). The plan is keyed by identity (plans
    compare by value); the kept Run holds it alive."""
    w = bytearray(words)
    for p in plan.params:
        if p.kind == "gm" or (p.kind == "scalar" and p.scalar_ty == "f64"):
            w[8 * p.slot: 8 * p.slot + 8] = _ZERO_WORD
    return (id(plan), n, bytes(w))
