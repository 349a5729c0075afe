"""codegen of GM windows picked by a UB index tile (`GMGather`: `x[idx, :]`, `x[t, idx]` on MTE2;
`GMScatter`: `dsl.atomic_add(y[idx, :], tile)` on MTE3), the rules in `compiler.gathers`.

Before any byte moves: the tile fits its buffer (E301), every index lies in [0, size) of the
dimension it picks (an OR over each row of the index tile, vectorisable, then a scalar pass that
stops at the first bad index with its value and position: E404), and the span the indices can
reach lies inside the tensor (E404, as a DMA's window check). Then one trace record (one burst per
row or element, `burst_shape`) and the data: a gather copies a row per index (`copy_elems`) or an
element's bits per index; a scatter adds element by element as `codegen_atomic` does (its plain
path when the call runs every core of the launch, else one atomic read-modify-write each), after
the same alignment check (E405).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from compiler.backend.codegen_atomic import MISALIGNED, MISALIGNED_HINT, Add, atomic_add, plain_add
from compiler.backend.codegen_elem import i64_of
from compiler.backend.codegen_vector import copy_elems
from compiler.backend.convert import widen_bits
from compiler.backend.gen import _if, carry_loop
from compiler.gathers import DMA_HINT, DMA_MESSAGE, INDEX_HINT, contiguous, index_at, index_message, two_d_positions
from compiler.ir import GMGather, GMScatter, Indexed
from compiler.sexpr import const
from simulator.isa import INFO

if TYPE_CHECKING:
    from compiler.backend.gen import Gen

BITS = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}


class _Index:
    """Reads of the index tile: the i64 index that addresses tile element (r, c)."""

    def __init__(self, g: Gen, by: Indexed) -> None:
        self.g, self.by = g, by
        self.ptr, self.stride = g.buf_ptr(by.index)
        self.ty = by.index.dtype.llvm

    def __call__(self, r: str, c: str) -> str:
        g = self.g
        ir, ic = index_at(self.by, r, c)
        at = str(ic) if ir == 0 else g.op(f"add i64 {g.op(f'mul i64 {ir}, {self.stride}')}, {ic}")
        p = g.op(f"getelementptr {self.ty}, ptr {self.ptr}, i64 {at}")
        v = g.op(f"load {self.ty}, ptr {p}, align {self.by.index.dtype.itemsize}")
        return g.op(f"sext {self.ty} {v} to i64")


def gen_gm_indexed(g: Gen, s: GMGather | GMScatter) -> None:
    is_load = isinstance(s, GMGather)
    ref, buf = (s.src, s.dst) if isinstance(s, GMGather) else (s.dst, s.src)
    by = s.by
    assert s.instr is not None and ref.step is not None, "a routed indexed DMA"
    es = ref.dtype.itemsize
    off, rows, cols, rstride, numel, step = (i64_of(g, e) for e in (ref.offset, ref.rows, ref.cols, ref.stride,
                                                                     ref.numel, ref.step))
    istride, bound = i64_of(g, by.istride), i64_of(g, by.bound)
    cap_r, cap_c = (i64_of(g, e) for e in buf.cap)
    fits = g.op(f"and i1 {g.op(f'icmp sle i64 {rows}, {cap_r}')}, {g.op(f'icmp sle i64 {cols}, {cap_c}')}")
    g.guard(fits, "E301", f"a window of %d x %d elements does not fit buffer '{buf.name}' of %d x %d",
            [rows, cols, cap_r, cap_c], "the buffer is smaller than the window copied into it", s.loc)
    index = _Index(g, by)
    gm = g.gm_ptr(ref.arg)

    def gm_elem(r: str, c: str) -> str:
        """Pointer to the GM element under tile element (r, c)."""
        at = g.op(f"add i64 {off}, {g.op(f'mul i64 {r}, {rstride}')}")
        if ref.step != const(0):
            at = g.op(f"add i64 {at}, {g.op(f'mul i64 {c}, {step}')}")
        at = g.op(f"add i64 {at}, {g.op(f'mul i64 {index(r, c)}, {istride}')}")
        return g.op(f"getelementptr i8, ptr {gm}, i64 {g.op(f'mul i64 {at}, {es}')}")

    _check_indices(g, by, index, rows, "1" if by.per_row else cols, bound, ref.name, s.loc)
    # the span the indices can reach: every index is now in [0, bound)
    nz = g.op(f"and i1 {g.op(f'icmp sgt i64 {rows}, 0')}, {g.op(f'icmp sgt i64 {cols}, 0')}")
    rspan = g.op(f"mul i64 {g.op(f'sub i64 {rows}, 1')}, {rstride}")
    cspan = g.op(f"mul i64 {g.op(f'sub i64 {cols}, 1')}, {step}")
    ispan = g.op(f"mul i64 {g.op(f'sub i64 {bound}, 1')}, {istride}")
    reach = g.op(f"add i64 {g.op(f'add i64 {rspan}, {cspan}')}, {ispan}")
    last = g.op(f"add i64 {g.op(f'add i64 {off}, {reach}')}, 1")
    inside = g.op(f"and i1 {g.op(f'icmp sge i64 {off}, 0')}, {g.op(f'icmp sle i64 {last}, {numel}')}")
    g.guard(g.op(f"or i1 {g.op(f'xor i1 {nz}, true')}, {inside}"), "E404",
            DMA_MESSAGE.format(verb="read" if is_load else "write", name=ref.name, dtype=ref.dtype),
            [off, last, numel], DMA_HINT, s.loc)
    if not is_load:
        addr = g.op(f"ptrtoint ptr {g.gm_ptr(ref.arg)} to i64")
        g.guard(g.op(f"icmp eq i64 {g.op(f'and i64 {addr}, {es - 1}')}, 0"), "E405", MISALIGNED.format(
            name=ref.name, dtype=ref.dtype, es=es), [], MISALIGNED_HINT, s.loc)
    # the trace record: one instruction, a burst per row (or element)
    first = g.op(f"select i1 {nz}, i64 {index('0', '0')}, i64 0")
    first_at = g.op(f"add i64 {off}, {g.op(f'mul i64 {first}, {istride}')}")
    d = g.op(f"mul i64 {first_at}, {es}")
    if contiguous(by, ref):
        a, b = g.op(f"mul i64 {cols}, {es}"), rows
        e = g.op(f"select i1 {g.op(f'icmp ne i64 {rstride}, 0')}, i64 {rstride}, i64 {istride}")
    else:
        a, b = str(es), g.op(f"mul i64 {rows}, {cols}")
        e = g.op(f"select i1 {g.op(f'icmp ne i64 {step}, 0')}, i64 {step}, i64 {istride}")
    gm_index = [p.slot for p in g.k.params if p.kind == "gm"].index(ref.arg)
    g.event(s.instr, INFO[s.instr][1], s.loc, a, b, gm_index, d, g.op(f"mul i64 {e}, {es}"))

    bptr, bstride = g.buf_ptr(buf)

    def ub_elem(r: str, c: str) -> str:
        at = g.op(f"add i64 {g.op(f'mul i64 {r}, {bstride}')}, {c}")
        return g.op(f"getelementptr i8, ptr {bptr}, i64 {g.op(f'mul i64 {at}, {es}')}")

    if is_load:
        if contiguous(by, ref):
            g.loop(rows, lambda r: copy_elems(g, ub_elem(r, "0"), gm_elem(r, "0"), cols, ref.dtype))
            return
        bt = BITS[es]

        def one(r: str, c: str) -> None:
            v = g.op(f"load {bt}, ptr {gm_elem(r, c)}, align {es}")
            g.emit(f"store {bt} {v}, ptr {ub_elem(r, c)}, align {es}")

        g.loop(rows, lambda r: g.loop(cols, lambda c: one(r, c)))
        return
    # scatter-add: one add per element, in row-major order (repeated indices add up in that order)
    dt = ref.dtype
    fast, locked, done = g.label("scatter.alone"), g.label("scatter.shared"), g.label("scatter.done")
    g.cbr("%alone", fast, locked)
    for lab, add in ((fast, plain_add), (locked, atomic_add)):
        g.block(lab)
        g.cache.append({})

        def row(r: str, add: Add = add) -> None:
            def col(c: str) -> None:
                sp = ub_elem(r, c)
                v = widen_bits(g, g.op(f"load i16, ptr {sp}, align 2"), dt.llvm) if es == 2 else \
                    g.op(f"load {dt.llvm}, ptr {sp}, align {es}")
                add(g, gm_elem(r, c), v, dt)

            g.loop(cols, col)

        g.loop(rows, row)
        g.cache.pop()
        g.br(done)
    g.block(done)


def _check_indices(g: Gen, by: Indexed, index: _Index, rows: str, cols: str, bound: str, name: str,
                   loc: object) -> None:
    """Every index in [0, bound) before anything moves; the first bad one (row-major) reported."""
    msg = index_message(by, name)
    two_d = two_d_positions(by)

    def row(r: str) -> None:
        def any_bad(c: str, acc: list[str]) -> list[str]:
            out = g.op(f"icmp uge i64 {index(r, c)}, {bound}")  # unsigned: negative indices too
            return [g.op(f"or i8 {acc[0]}, {g.op(f'zext i1 {out} to i8')}")]

        (bad,) = carry_loop(g, cols, [("i8", "0")], any_bad)

        def find_first() -> None:
            def one(c: str) -> None:
                v = index(r, c)
                pos = [r, c] if two_d else [r if by.per_row else c]
                g.guard(g.op(f"icmp ult i64 {v}, {bound}"), "E404", msg, [v, *pos, bound], INDEX_HINT, loc)

            g.loop(cols, one)

        g.cache.append({})
        _if(g, g.op(f"icmp ne i8 {bad}, 0"), find_first)
        g.cache.pop()

    g.loop(rows, row)
