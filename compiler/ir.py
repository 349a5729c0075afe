"""Tile IR and Core IR: one family of small statement nodes, two levels.

Tile IR (out of `lower`): what the kernel computes, on tile values (`Buf`) that have a dtype,
a capacity and a runtime extent but no address. Loads/stores name GM regions.
Core IR (out of the schedule passes): the same statements with every op bound to a pipe and
an instruction (`instr`), every buffer placed in a memory at an offset with its ping-pong slots
(`Kernel.placement`), `Flag`/`Barrier` statements between pipes, and the outer tile loops
split over cores.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from compiler.sexpr import SExpr, const, fmt
from dsl.errors import UNKNOWN, SourceLoc
from dsl.types import DType, Mem
from simulator.isa import INFO, CubeType, Instr, Pipe


def _loc() -> SourceLoc:
    return field(default=UNKNOWN, compare=False, repr=False)


@dataclass(eq=False)
class Buf:
    """A tile value / on-chip buffer. Identity is the object (`id` is for printing).

    `cap` is the capacity (rows, cols) in elements that storage is sized for, `ext` the runtime
    extent actually valid (rows, cols); a rank-1 tile is stored as one row.
    """

    id: int
    name: str
    dtype: DType
    rank: int
    cap: tuple[SExpr, SExpr]
    ext: tuple[SExpr, SExpr]
    mem: Mem = Mem.UB
    loc: SourceLoc = UNKNOWN
    explicit: bool = False  # from dsl.alloc
    offset: int | None = None  # explicit byte offset requested by the user
    buffers: int | None = None  # requested slot count (dsl.alloc(..., buffers=N))
    depth: int = 0  # loop depth where it was created
    # a sub-window of another buffer (`a1[:, k]` of an L1 panel): `parent`'s storage from element
    # (row, col) `origin` on; it has no placement of its own (see `compiler.passes.views`)
    parent: Buf | None = None
    origin: tuple[SExpr, SExpr] | None = None

    def __repr__(self) -> str:
        return f"%{self.name}"

    @property
    def root(self) -> Buf:
        """The buffer that owns the storage: self, or the parent of a sub-window."""
        return self if self.parent is None else self.parent.root

    @property
    def shape_str(self) -> str:
        dims = self.cap if self.rank == 2 else self.cap[1:]
        return "x".join(fmt(d) for d in dims)


@dataclass(frozen=True)
class GMRef:
    """A 2-D window of GM argument `arg`: rows x cols elements starting at element `offset`,
    consecutive rows `stride` elements apart. `numel` bounds every access (checked per DMA)."""

    arg: int
    name: str
    dtype: DType
    offset: SExpr
    rows: SExpr
    cols: SExpr
    stride: SExpr
    numel: SExpr
    step: SExpr | None = None  # elements between consecutive columns (None: contiguous)

    def __repr__(self) -> str:
        step = f" step {fmt(self.step)}" if self.step is not None else ""
        return f"{self.name}[+{fmt(self.offset)}: {fmt(self.rows)}x{fmt(self.cols)} /{fmt(self.stride)}{step}]"


Operand = Union[Buf, SExpr]


@dataclass(frozen=True)
class Stmt:
    if TYPE_CHECKING:
        # every statement has a `loc` field; declared here for the type checker only, so it does
        # not become a (leading, default-less) dataclass field of every subclass
        @property
        def loc(self) -> SourceLoc: ...


@dataclass(frozen=True)
class Load(Stmt):
    dst: Buf
    src: GMRef
    instr: Instr | None = None
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Fix:
    """What the FIX pipe applies on its way out of L0C: scale, then relu, then cast to `dtype`."""

    dtype: DType
    relu: bool = False
    scale: SExpr | None = None

    def __repr__(self) -> str:
        parts = ([f"scale {fmt(self.scale)}"] if self.scale is not None else []) + (["relu"] if self.relu else [])
        return " ".join(parts + [f"to {self.dtype}"])


@dataclass(frozen=True)
class Store(Stmt):
    dst: GMRef
    src: Buf
    instr: Instr | None = None
    loc: SourceLoc = _loc()
    fix: Fix | None = None  # stores from L0C
    atomic: bool = False  # dsl.atomic_add: GM += src, element by element, atomically across cores


@dataclass(frozen=True)
class Indexed:
    """How a GM window addressed by a UB index tile finds its elements (`x[idx, :]`, `x[t, idx]`,
    `compiler.gathers`): element (r, c) of the tile is GM element
    ``ref.offset + r * ref.stride + c * ref.step + index[r or (r, c)] * istride``, every index
    checked against `bound` (the size of dimension `dim`) before any byte moves. `per_row`: one
    index per row (a 1-D tile of R, or (R, 1)), the row one burst; else one per element."""

    index: Buf
    istride: SExpr
    bound: SExpr
    dim: int
    per_row: bool

    def __repr__(self) -> str:
        return f" by {self.index!r} (dim {self.dim}{', per row' if self.per_row else ''})"


@dataclass(frozen=True)
class GMGather(Load):
    """A Load whose rows / elements are picked by an index tile (`by`); src.step is set, never None."""

    by: Indexed = None  # type: ignore[assignment]


@dataclass(frozen=True)
class GMScatter(Store):
    """An atomic Store (`dsl.atomic_add(y[idx, :], tile)`) whose rows / elements `by` picks."""

    by: Indexed = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Move(Stmt):
    """On-chip copy between buffers (UB->UB, L1->L0A, L0C->UB, ...)."""

    dst: Buf
    src: Buf
    instr: Instr | None = None
    loc: SourceLoc = _loc()
    transpose: bool = False  # L1 -> L0A/L0B: the L1 buffer holds the operand transposed
    fix: Fix | None = None  # moves out of L0C
    row0: SExpr | None = None  # L0C -> UB in row chunks: the first L0C row moved (dst.ext rows of them)


@dataclass(frozen=True)
class VOp(Stmt):
    """Vector instruction, destination first. `arg`: compare op, reduce axis, cast rounding..."""

    instr: Instr
    dst: Buf
    srcs: tuple[Operand, ...]
    arg: object = None
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Mmad(Stmt):
    """C (L0C) += A (L0A) @ B (L0B) on the cube; m, n, k are runtime extents."""

    dst: Buf
    a: Buf
    b: Buf
    m: SExpr
    n: SExpr
    k: SExpr
    init: SExpr  # 1: overwrite C instead of accumulating
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class SetVar(Stmt):
    name: str
    value: SExpr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class For(Stmt):
    """for var in range(start, stop, step); `it` counts iterations from 0 (drives ping-pong slots).
    kind 'tiles' loops are split over cores by the schedule; `tile` = (TILE, extent total)."""

    var: str
    it: str
    start: SExpr
    stop: SExpr
    step: SExpr
    body: tuple[Stmt, ...]
    kind: str = "range"
    tile: tuple[SExpr, SExpr] | None = None
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class If(Stmt):
    cond: SExpr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Print(Stmt):
    items: tuple[Union[str, SExpr, Buf], ...]
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Check(Stmt):
    """Runtime guard: if `cond` is false the launch fails with KernelError(code, message % values)."""

    cond: SExpr
    code: str
    message: str
    values: tuple[SExpr, ...]
    hint: str = ""
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Flag(Stmt):
    """set_flag (on `src`) / wait_flag (on `dst`) for the pipe pair src->dst, event `event`."""

    wait: bool
    src: Pipe
    dst: Pipe
    event: SExpr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Barrier(Stmt):
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class LoadScalar(Stmt):
    """One element of GM (the 1 x 1 window `src`) into scalar variable `var` on the S pipe: i64 for
    integer tensors, f64 for float ones (`i = idx[r]`). Bounds-checked before it reads."""

    var: str
    src: GMRef
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class VIndexed(Stmt):
    """A vector instruction whose elements depend on their positions, not only on the same element
    of their operands (never streamed or computed in place). VARANGE: dst[r, c] = c (srcs = ()).
    VGATHER: srcs = (table, index); `arg` "cols": dst[r, c] = table[r, index[r, c]] (a 1-D tile is
    one row), "rows": dst[r, c] = table[index[r, c], c]. Every index is checked before any write."""

    instr: Instr
    dst: Buf
    srcs: tuple[Buf, ...]
    arg: object = None
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class ParamSpec:
    """A kernel parameter and where its words live in the launch argument block.

    gm: words [slot] = data pointer, [slot+1] = numel, [slot+2 ...] = shape.
    scalar: word [slot] holds the value (f64 bits for floats). const: no words, `value`.
    """

    name: str
    kind: str  # gm | scalar | const
    dtype: DType | None = None
    rank: int = 0
    slot: int = 0
    value: object = None
    scalar_ty: str = "i64"


@dataclass
class Placement:
    mem: Mem
    offset: SExpr  # bytes from the memory's base, slot 0
    slot_bytes: SExpr
    slots: int
    row_stride: SExpr  # elements between rows
    slot_of: SExpr | None = None  # which slot is current (None: slot 0)
    share: int | None = None  # id of the buffer whose storage this one computes in place in (one hazard key)


@dataclass
class Kernel:
    name: str
    params: list[ParamSpec]
    body: tuple[Stmt, ...]
    nwords: int
    locs: list[SourceLoc]
    bufs: list[Buf] = field(default_factory=list)
    placement: dict[int, Placement] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # user keyword options, any values
    scalar_vars: dict[str, str] = field(default_factory=dict)  # name -> i64/f64

    def loc_id(self, loc: SourceLoc) -> int:
        try:
            return self.locs.index(loc)
        except ValueError:
            self.locs.append(loc)
            return len(self.locs) - 1


def pipe_of(s: Stmt) -> Pipe:
    if isinstance(s, (Load, Store, Move)):
        assert s.instr is not None, "pipes are assigned by the schedule"
        return INFO[s.instr][1]
    if isinstance(s, (VOp, VIndexed)):
        return Pipe.V
    if isinstance(s, Mmad):
        return Pipe.M
    return Pipe.S


REDUCE = (Instr.VREDUCE_SUM, Instr.VREDUCE_MAX, Instr.VREDUCE_MIN)  # the vector reductions
# Philox random numbers (dsl.rand / dsl.randint): srcs = (seed, offset, stride) scalars, no tile operand
RNG = (Instr.VRAND, Instr.VRANDINT)

# the cube type an Mmad runs as (its trace event's operand), by input dtype
CUBE_TYPE = {"f16": CubeType.F16, "bf16": CubeType.F16, "f32": CubeType.F32, "i8": CubeType.I8}


def broadcasts(src: Buf, dst: Buf) -> tuple[bool, bool]:
    """Whether vector operand `src` is broadcast over `dst`'s rows, over its columns (a capacity
    of 1 where the destination has more)."""
    one = const(1)
    return (src.cap[0] == one and dst.cap[0] != one, src.cap[1] == one and dst.cap[1] != one)


def walk(body: tuple[Stmt, ...]):
    for s in body:
        yield s
        if isinstance(s, For):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then)
            yield from walk(s.orelse)


# ------------------------------------------------------------------ printing
def _op(o: object) -> str:
    if isinstance(o, SExpr):
        return fmt(o)
    return repr(o)


def dump(k: Kernel, core: bool = False, shapes: dict[str, tuple[int, ...]] | None = None) -> str:
    """The kernel as text; with `shapes` (GM parameter name -> shape) sizes, offsets and bounds are
    printed as the numbers they are for those shapes."""
    from compiler import sexpr

    names: dict[int, str] = {}
    values: dict[int, int] = {}
    for p in k.params:
        if p.kind == "gm":
            names[p.slot], names[p.slot + 1] = p.name, f"{p.name}.numel"
            names.update({p.slot + 2 + i: f"{p.name}.shape[{i}]" for i in range(p.rank)})
            shape = (shapes or {}).get(p.name)
            if shape is not None and len(shape) == p.rank:
                values[p.slot + 1] = math.prod(shape)
                values.update({p.slot + 2 + i: int(n) for i, n in enumerate(shape)})
        elif p.kind == "scalar":
            names[p.slot] = p.name
    sexpr.ARG_NAMES.clear()
    sexpr.ARG_NAMES.update(names)
    sexpr.ARG_VALUES.clear()
    sexpr.ARG_VALUES.update(values)
    try:
        return _dump(k, core)
    finally:
        sexpr.ARG_NAMES.clear()
        sexpr.ARG_VALUES.clear()


def _dump(k: Kernel, core: bool) -> str:
    out = [f"kernel {k.name}(" + ", ".join(_param(p) for p in k.params) + ")"]
    if core:
        for b in k.bufs:
            p = k.placement.get(b.id)
            if p is None:
                continue
            slots = f" x{p.slots}" if p.slots > 1 else ""
            out.append(f"  buffer %{b.name}: {b.dtype} [{b.shape_str}] in {p.mem.value} @ {fmt(p.offset)}"
                       f" ({fmt(p.slot_bytes)} B{slots}, row stride {fmt(p.row_stride)})")
    _dump_body(k.body, 1, out, core)
    return "\n".join(out)


def _param(p: ParamSpec) -> str:
    if p.kind == "gm":
        return f"{p.name}: GM[{p.dtype}, {p.rank}]"
    if p.kind == "const":
        return f"{p.name} = {p.value!r}"
    return f"{p.name}: {p.scalar_ty}"


def _tag(s: Stmt, core: bool) -> str:
    if not core:
        return ""
    name = getattr(s, "instr", None)
    pipe = pipe_of(s).name
    return f"[{pipe}] {name.name + ' ' if name is not None and not isinstance(s, VOp) else ''}"


def _dump_body(body: tuple[Stmt, ...], ind: int, out: list[str], core: bool) -> None:
    pad = "  " * ind
    for s in body:
        line = f"  # line {s.loc.line}" if s.loc.line else ""
        if isinstance(s, For):
            kind = f" {s.kind}" if s.kind != "range" else ""
            out.append(f"{pad}for{kind} {s.var} in range({fmt(s.start)}, {fmt(s.stop)}, {fmt(s.step)}):{line}")
            _dump_body(s.body, ind + 1, out, core)
        elif isinstance(s, If):
            out.append(f"{pad}if {fmt(s.cond)}:{line}")
            _dump_body(s.then, ind + 1, out, core)
            if s.orelse:
                out.append(f"{pad}else:")
                _dump_body(s.orelse, ind + 1, out, core)
        elif isinstance(s, Load):
            out.append(f"{pad}{_tag(s, core)}{s.dst!r} <- {s.src!r}{getattr(s, 'by', None) or ''}{line}")
        elif isinstance(s, Store):
            fix = f" ({s.fix!r})" if s.fix is not None else ""
            arrow = "+=" if s.atomic else "<-"
            out.append(f"{pad}{_tag(s, core)}{s.dst!r} {arrow} {s.src!r}{fix}{getattr(s, 'by', None) or ''}{line}")
        elif isinstance(s, Move):
            extra = (" (transposed)" if s.transpose else "") + (f" ({s.fix!r})" if s.fix is not None else "")
            extra += f" (rows from {fmt(s.row0)})" if s.row0 is not None else ""
            out.append(f"{pad}{_tag(s, core)}{s.dst!r} <- {s.src!r}{extra}{line}")
        elif isinstance(s, VOp):
            arg = f" ({s.arg})" if s.arg is not None else ""
            ext = "x".join(fmt(e) for e in s.dst.ext)
            out.append(f"{pad}{_tag(s, core)}{s.instr.name.lower()}{arg} {s.dst!r}, "
                       + ", ".join(_op(o) for o in s.srcs) + f"  : {s.dst.dtype}[{ext}]{line}")
        elif isinstance(s, Mmad):
            out.append(f"{pad}{_tag(s, core)}mmad {s.dst!r} += {s.a!r} @ {s.b!r} m={fmt(s.m)} n={fmt(s.n)} "
                       f"k={fmt(s.k)} init={fmt(s.init)}{line}")
        elif isinstance(s, SetVar):
            out.append(f"{pad}{s.name} = {fmt(s.value)}{line}")
        elif isinstance(s, Print):
            out.append(f"{pad}print " + ", ".join(i if isinstance(i, str) else _op(i) for i in s.items) + line)
        elif isinstance(s, Check):
            out.append(f"{pad}check {fmt(s.cond)} else {s.code}{line}")
        elif isinstance(s, Flag):
            verb = "wait_flag" if s.wait else "set_flag"
            out.append(f"{pad}{verb}({s.src.name}->{s.dst.name}, {fmt(s.event)})")
        elif isinstance(s, Barrier):
            out.append(f"{pad}pipe_barrier(ALL)")
        elif isinstance(s, LoadScalar):
            out.append(f"{pad}{'[S] LOAD_GM_S ' if core else ''}{s.var} = {s.src!r}{line}")
        elif isinstance(s, VIndexed):
            arg = f" ({s.arg})" if s.arg is not None else ""
            ext = "x".join(fmt(e) for e in s.dst.ext)
            out.append(f"{pad}{'[V] ' if core else ''}{s.instr.name.lower()}{arg} {s.dst!r}"
                       + "".join(f", {b!r}" for b in s.srcs) + f"  : {s.dst.dtype}[{ext}]{line}")
        else:  # pragma: no cover
            out.append(f"{pad}{s!r}")


def accesses(s: Stmt) -> list[tuple[Buf, bool]]:
    """(buffer, is_write) pairs of one non-compound statement; a sub-window counts as its root."""
    return [(b.root, w) for b, w in _accesses(s)]


def _accesses(s: Stmt) -> list[tuple[Buf, bool]]:
    if isinstance(s, (GMGather, GMScatter)):  # the index tile is read too
        return [(s.dst, True) if isinstance(s, GMGather) else (s.src, False), (s.by.index, False)]
    if isinstance(s, Load):
        return [(s.dst, True)]
    if isinstance(s, Store):
        return [(s.src, False)]
    if isinstance(s, Move):
        return [(s.src, False), (s.dst, True)]
    if isinstance(s, VOp):
        return [(b, False) for b in s.srcs if isinstance(b, Buf)] + [(s.dst, True)]
    if isinstance(s, VIndexed):
        return [(b, False) for b in s.srcs] + [(s.dst, True)]
    if isinstance(s, Mmad):
        return [(s.a, False), (s.b, False), (s.dst, False), (s.dst, True)]
    if isinstance(s, Print):
        return [(b, False) for b in s.items if isinstance(b, Buf)]
    return []


def access_counts(body: tuple[Stmt, ...]) -> dict[int, list[int]]:
    """buffer id -> [reads, writes], counted per occurrence over the whole kernel."""
    count: dict[int, list[int]] = {}

    def walk(b: tuple[Stmt, ...]) -> None:
        for s in b:
            if isinstance(s, For):
                walk(s.body)
            elif isinstance(s, If):
                walk(s.then)
                walk(s.orelse)
            else:
                for buf, w in accesses(s):
                    count.setdefault(buf.id, [0, 0])[w] += 1

    walk(body)
    return count
