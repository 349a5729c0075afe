"""codegen of the cube's statements: Mmad, the moves into and out of the cube's buffers (L1 ->
L0A/L0B on MTE1, L0C -> UB on FIX), and host-side MTE2 -> MTE1 forwarding (`forwarding`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from compiler.backend import cube
from compiler.backend.codegen_elem import i64_of, scalar_as
from compiler.ir import CUBE_TYPE, Buf, Check, Flag, For, If, Load, Mmad, Move, Stmt, access_counts, accesses
from compiler.passes.place import fractal_pad
from compiler.passes.views import rows_pad
from dsl.types import Mem, f32
from simulator import abi
from simulator.isa import INFO, Instr, Pipe

if TYPE_CHECKING:
    from compiler.backend.gen import Gen


def gen_cube_mmad(g: Gen, s: Mmad) -> None:
    m, n, k = (i64_of(g, e) for e in (s.m, s.n, s.k))
    g.event(Instr.MMAD, Pipe.M, s.loc, m, n, k, int(CUBE_TYPE[s.a.dtype.name]))
    c, _ = g.buf_ptr(s.dst)
    a, _ = g.buf_ptr(s.a)
    b, _ = g.buf_ptr(s.b)
    m_pad = i64_of(g, fractal_pad(s.dst)[0])
    k_pad = i64_of(g, fractal_pad(s.a)[1])
    n_pad = i64_of(g, fractal_pad(s.b)[1])
    scratch = g.op(f"inttoptr i64 {g.ctx_load(abi.SCRATCH)} to ptr")
    cube.gen_mmad(g, c, a, b, m, n, k, m_pad, k_pad, n_pad, s.a.dtype, i64_of(g, s.init), scratch)


def gen_cube_move(g: Gen, s: Move) -> None:
    """Moves that involve a cube memory: L1 -> L0A/L0B (MTE1), L0C -> UB (FIX)."""
    d, src = s.dst, s.src
    dp, ds = g.buf_ptr(d)
    sp, _ = g.buf_ptr(src)
    assert s.instr is not None, "units are assigned by the schedule"
    if src.mem == Mem.L0C:
        rows, cols = i64_of(g, src.ext[0]), i64_of(g, src.ext[1])
        if s.row0 is not None:  # a chunk of rows: row r of NZ column block j is at (j * m_pad + r) * 16 elements
            rows = i64_of(g, d.ext[0])
            sp = g.op(f"getelementptr i8, ptr {sp}, i64 {g.op(f'mul i64 {i64_of(g, s.row0)}, {16 * src.dtype.itemsize}')}")
        g.event(s.instr, INFO[s.instr][1], s.loc, g.op(f"mul i64 {cols}, {d.dtype.itemsize}"), rows, -1, 0, 0)
        fix = s.fix
        assert fix is not None, "a move out of L0C without a FIX conversion"
        cube.gen_fix(g, dp, sp, rows, cols, ds, i64_of(g, fractal_pad(src)[0]), src.dtype, fix.dtype, fix.relu,
                     None if fix.scale is None else scalar_as(g, fix.scale, f32))
        return
    rp, cp = (i64_of(g, e) for e in fractal_pad(d))
    nbytes = g.op(f"mul i64 {g.op(f'mul i64 {rp}, {cp}')}, {d.dtype.itemsize}")
    g.event(s.instr, INFO[s.instr][1], s.loc, nbytes, 1, -1, 0, 0)
    if g.forward.get(src.id) is s:
        return  # the load that filled `src` already wrote `d` (forwarding)
    r, c = i64_of(g, d.ext[0]), i64_of(g, d.ext[1])
    # a sub-window of an L1 panel keeps its root's column-block stride (passes/views.py)
    srp = i64_of(g, rows_pad(src)) if src.parent is not None else None
    if d.mem == Mem.L0A:
        cube.gen_l1_to_l0a(g, dp, sp, r, c, rp, cp, d.dtype, s.transpose, srp)
    else:
        cube.gen_l1_to_l0b(g, dp, sp, r, c, rp, cp, d.dtype, s.transpose, srp)


def forwarding(body: tuple[Stmt, ...]) -> dict[int, Move]:
    """L1 staging buffers whose GM -> L1 load can write the L0A / L0B move's destination directly.

    `a[m, k] @ b[k, n]` stages each operand GM -> L1 (MTE2) -> L0A/L0B (MTE1). On the host both
    are copies, and when the L1 buffer is written by that one load, read by that one move (not
    transposing), and only flags, checks and other copies stand between them, the L1 copy is never
    observed: the load lays the window out in the L0 layout itself and the move does no work. (The
    destination is not touched in between, so writing it at the load is writing it at the move.)
    Both still issue
    their instructions (events, timing, trace) exactly as before; the interpreter keeps both copies
    and the results agree bit for bit."""
    count = access_counts(body)  # only L1 buffers are looked up
    out: dict[int, Move] = {}

    def pair(b: tuple[Stmt, ...]) -> None:
        for i, s in enumerate(b):
            if isinstance(s, For):
                pair(s.body)
            elif isinstance(s, If):
                pair(s.then)
                pair(s.orelse)
            elif (isinstance(s, Load) and s.dst.mem == Mem.L1 and s.src.step is None
                  and count.get(s.dst.id) == [1, 1]):
                j = next((j for j in range(i + 1, len(b)) if any(x is s.dst for x, _ in _all_accesses(b[j]))), None)
                mv = b[j] if j is not None else None
                if not (isinstance(mv, Move) and mv.src is s.dst and mv.dst.mem in (Mem.L0A, Mem.L0B)
                        and not mv.transpose and mv.fix is None):
                    continue
                if mv.dst.ext != (s.src.rows, s.src.cols):  # the move must cover exactly the loaded window
                    continue
                # between them only flags, checks and other copies, none touching the destination
                if all(isinstance(t, (Flag, Check, Load, Move)) and not any(x is mv.dst for x, _ in accesses(t))
                       for t in b[i + 1: j]):
                    out[s.dst.id] = mv

    pair(body)
    return out


def _all_accesses(s: Stmt) -> list[tuple[Buf, bool]]:
    """accesses() of a statement and, for a loop or branch, of everything inside it."""
    if isinstance(s, For):
        return [a for t in s.body for a in _all_accesses(t)]
    if isinstance(s, If):
        return [a for t in (*s.then, *s.orelse) for a in _all_accesses(t)]
    return accesses(s)
