"""Values carried across a loop's back edge, for `place_buffers`.

A buffer with several slots takes slot `it % slots` in its innermost loop, so each iteration works
on a different copy. That is only right when every iteration writes the buffer before it reads
it. When an iteration may read what an earlier one left (the write is conditional, sits in an
inner loop that may not run, or comes after the read), the slots must not rotate: the read would
find the other slot. `carried_read` finds such a read.

The analysis walks one iteration of the loop body in order with one fact, "written in this
iteration": a read before it is exposed. Both arms of an `if` must write for the fact to hold
after it; an inner loop's body is walked from the state before it (so a read it makes before its
own write, on its first iteration, sees the state from before the loop) and counts as writing only
when it runs at least once for certain. A write through a sub-window (`a1[:, k]`) is partial and
never counts as a write of the whole buffer. A cube accumulator started by `dsl.zeros` is written
by the statement that raises its "next mmad overwrites" flag (`SetVar(flag, 1)`): its value from
then on belongs to this iteration, whether or not the first mmad has run.
"""
from __future__ import annotations

from compiler.ir import Buf, For, If, Mmad, SetVar, Stmt, accesses, walk


def carried_read(loop: For, members: set[int], flags: dict[str, set[int]]) -> Stmt | None:
    """The first statement in `loop`'s body that may read the storage of `members` (buffer ids,
    roots) before the same iteration has written it, or None when every iteration writes first.
    `flags` maps each mmad "overwrite" flag variable to the accumulators it starts (`init_flags`)."""
    found: list[Stmt] = []
    _walk(loop.body, False, members, flags, found)
    return found[0] if found else None


def init_flags(body: tuple[Stmt, ...]) -> dict[str, set[int]]:
    """Flag variable -> ids of the accumulators whose first mmad it makes an overwrite."""
    out: dict[str, set[int]] = {}
    for s in walk(body):
        if isinstance(s, Mmad) and not s.init.is_const and s.init.op == "var":
            out.setdefault(str(s.init.args[0]), set()).add(s.dst.root.id)
    return out


def _walk(body: tuple[Stmt, ...], written: bool, members: set[int], flags: dict[str, set[int]],
          found: list[Stmt]) -> bool:
    """Walk statements from state `written`; record exposed reads in `found`; the state after."""
    for s in body:
        if isinstance(s, For):
            inner = _walk(s.body, written, members, flags, found)
            written = written or (inner and _runs(s))
        elif isinstance(s, If):
            then = _walk(s.then, written, members, flags, found)
            orelse = _walk(s.orelse, written, members, flags, found)
            written = then and orelse
        elif isinstance(s, SetVar):
            if members & flags.get(s.name, set()) and s.value.is_const and s.value.value != 0:
                written = True  # acc = dsl.zeros(...): the next mmad overwrites it
        else:
            reads = any(b.id in members and not w for b, w in _reads(s))
            if reads and not written:
                found.append(s)
            if _writes_whole(s, members):
                written = True
    return written


def _reads(s: Stmt) -> list[tuple[Buf, bool]]:
    """The accesses of `s`, less C of an mmad with a constant nonzero init (it overwrites C)."""
    if isinstance(s, Mmad) and s.init.is_const and s.init.value != 0:
        return [(s.a.root, False), (s.b.root, False), (s.dst.root, True)]
    return accesses(s)


def _writes_whole(s: Stmt, members: set[int]) -> bool:
    """Whether `s` writes a member buffer as a whole (not through a sub-window)."""
    dst = getattr(s, "dst", None)  # a store's dst is GM
    return isinstance(dst, Buf) and dst.parent is None and dst.id in members


def _runs(loop: For) -> bool:
    """Whether the loop runs at least once whatever the launch (constant bounds only)."""
    if not (loop.start.is_const and loop.stop.is_const and loop.step.is_const):
        return False
    return (loop.step.value > 0 and loop.start.value < loop.stop.value) or \
        (loop.step.value < 0 and loop.start.value > loop.stop.value)
