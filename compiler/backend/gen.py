"""The LLVM IR text builder every emitter writes into (`Gen`), and the small pieces they share:
folded i64 arithmetic, masks, branches and loops with carried values.

`codegen` (the top: Core IR statements -> a kernel's module) makes one `Gen` per kernel; the
vector, element, streaming and cube emitters (`codegen_*`, `cube*`, `vmath`) take it as their
first argument. Nothing here knows about statements, so every emitter can import it.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compiler import sexpr as S
from compiler.ir import Buf, Kernel
from compiler.sexpr import F64, I64, SExpr
from dsl.errors import SourceLoc
from dsl.types import DType
from simulator import abi
from simulator.isa import Instr, Pipe

if TYPE_CHECKING:
    from compiler.backend.codegen_stream import Streams


def ffloat(v: float) -> str:
    """An LLVM double literal, exact (hex form)."""
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


LL = {"i64": "i64", "f64": "double"}


@dataclass
class CheckInfo:
    code: str
    message: str
    hint: str
    loc: object


@dataclass
class Gen:
    k: Kernel
    sym: str
    lines: list[str] = field(default_factory=list)
    allocas: list[str] = field(default_factory=list)
    n: int = 0
    checks: list[CheckInfo] = field(default_factory=list)
    cache: list[dict] = field(default_factory=lambda: [{}])
    decls: set[str] = field(default_factory=set)
    args_used: set = field(default_factory=set)
    strings: dict = field(default_factory=dict)
    # host-side MTE2 -> MTE1 forwarding (see `forwarding`): L1 buffer id -> the move it feeds
    forward: dict = field(default_factory=dict)
    # host-side streaming of UB windows (see `codegen_stream`); None: every instruction on its own
    streams: Streams | None = None
    # set by compiler.backend.vmath when it inlines a long math recipe: the innermost loop around it asks
    # the vectoriser to interleave two vectors (two dependency chains in flight; see `loop`)
    heavy: bool = False

    # ------------------------------------------------------------ text helpers
    def tmp(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def label(self, hint: str) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def op(self, text: str) -> str:
        t = self.tmp()
        self.emit(f"{t} = {text}")
        return t

    def block(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def br(self, target: str) -> None:
        self.emit(f"br label %{target}")

    def cbr(self, cond: str, a: str, b: str) -> None:
        self.emit(f"br i1 {cond}, label %{a}, label %{b}")

    def intrinsic(self, decl: str) -> None:
        self.decls.add(decl)

    # ------------------------------------------------------------ context
    def ctx_word(self, i: int) -> str:
        p = self.op(f"getelementptr i64, ptr %ctx, i64 {i}")
        return p

    def ctx_load(self, i: int) -> str:
        return self.op(f"load i64, ptr {self.ctx_word(i)}, align 8")

    def var_ptr(self, name: str) -> str:
        return "%var." + name.replace(".", "_").replace("%", "_")

    # ------------------------------------------------------------ scalars
    def sval(self, e: SExpr) -> str:
        """SSA value (or literal) for a scalar expression, typed i64 or double."""
        if e.op == "const":
            return str(int(e.value)) if e.ty == I64 else ffloat(float(e.value))
        for c in reversed(self.cache):
            if e in c:
                return c[e]
        v = self._sval(e)
        self.cache[-1][e] = v
        return v

    def _sval(self, e: SExpr) -> str:
        op, ty = e.op, LL[e.ty]
        if op == "var":
            name = e.args[0]
            return self.op(f"load {ty}, ptr {self.var_ptr(name)}, align 8")
        if op == "arg":
            self.args_used.add(e)
            return f"%arg{e.args[0]}"
        if op == "core_id":
            return "%core_id"
        if op == "num_cores":
            return "%num_cores"
        if op == "select":
            c = self.truth(e.args[0])
            return self.op(f"select i1 {c}, {ty} {self.sval(e.args[1])}, {ty} {self.sval(e.args[2])}")
        if len(e.args) == 2:
            return self.sbinary(op, e.args[0], e.args[1], e.ty)
        a = e.args[0]
        x = self.sval(a)
        at = LL[a.ty]
        if op == "neg":
            return self.op(f"sub i64 0, {x}") if e.ty == I64 else self.op(f"fneg double {x}")
        if op == "not":
            c = self.op(f"icmp eq {at} {x}, 0") if a.ty == I64 else self.op(f"fcmp oeq double {x}, 0.0")
            return self.op(f"zext i1 {c} to i64")
        if op == "abs":
            if e.ty == I64:
                self.intrinsic("declare i64 @llvm.abs.i64(i64, i1)")
                return self.op(f"call i64 @llvm.abs.i64(i64 {x}, i1 false)")
            return self.fcall("fabs", x)
        if op == "i2f":
            return self.op(f"sitofp i64 {x} to double")
        if op == "f2i":
            self.intrinsic("declare i64 @llvm.fptosi.sat.i64.f64(double)")
            return self.op(f"call i64 @llvm.fptosi.sat.i64.f64(double {x})")
        if op in ("exp", "log", "sqrt", "rint"):
            return self.fcall(op, x)
        if op == "rsqrt":
            return self.op(f"fdiv double 1.0, {self.fcall('sqrt', x)}")
        raise AssertionError(f"scalar op {op}")

    def fcall(self, name: str, x: str, ty: str = "double") -> str:
        suffix = {"double": "f64", "float": "f32"}[ty]
        self.intrinsic(f"declare {ty} @llvm.{name}.{suffix}({ty})")
        return self.op(f"call {ty} @llvm.{name}.{suffix}({ty} {x})")

    def truth(self, e: SExpr) -> str:
        x = self.sval(e)
        if e.ty == I64:
            return self.op(f"icmp ne i64 {x}, 0")
        return self.op(f"fcmp une double {x}, 0.0")

    def sbinary(self, op: str, a: SExpr, b: SExpr, ty: str) -> str:
        if op in ("and", "or"):
            x, y = self.truth(a), self.truth(b)
            return self.op(f"zext i1 {self.op(f'{op} i1 {x}, {y}')} to i64")
        x, y = self.sval(a), self.sval(b)
        if a.ty == F64:
            if op in S.COMPARE:
                cc = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}[op]
                return self.op(f"zext i1 {self.op(f'fcmp {cc} double {x}, {y}')} to i64")
            if op in ("+", "-", "*", "/"):
                ins = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}[op]
                return self.op(f"{ins} double {x}, {y}")
            if op in ("min", "max"):
                name = {"min": "minimum", "max": "maximum"}[op]
                self.intrinsic(f"declare double @llvm.{name}.f64(double, double)")
                return self.op(f"call double @llvm.{name}.f64(double {x}, double {y})")
            if op == "**":
                self.intrinsic("declare double @llvm.pow.f64(double, double)")
                return self.op(f"call double @llvm.pow.f64(double {x}, double {y})")
            if op == "//":
                return self.fcall("floor", self.op(f"fdiv double {x}, {y}"))
            if op == "%":
                q = self.fcall("floor", self.op(f"fdiv double {x}, {y}"))
                return self.op(f"fsub double {x}, {self.op(f'fmul double {q}, {y}')}")
            raise AssertionError(op)
        if op in S.COMPARE:
            cc = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}[op]
            return self.op(f"zext i1 {self.op(f'icmp {cc} i64 {x}, {y}')} to i64")
        simple = {"+": "add", "-": "sub", "*": "mul", "&": "and", "|": "or", "^": "xor", "<<": "shl", ">>": "ashr"}
        if op in simple:
            return self.op(f"{simple[op]} i64 {x}, {y}")
        if op in ("min", "max"):
            name = {"min": "smin", "max": "smax"}[op]
            self.intrinsic(f"declare i64 @llvm.{name}.i64(i64, i64)")
            return self.op(f"call i64 @llvm.{name}.i64(i64 {x}, i64 {y})")
        if op in ("//", "%"):
            return self.int_divmod(op, x, y, "i64")
        if op == "**":
            fx, fy = self.op(f"sitofp i64 {x} to double"), self.op(f"sitofp i64 {y} to double")
            self.intrinsic("declare double @llvm.pow.f64(double, double)")
            r = self.op(f"call double @llvm.pow.f64(double {fx}, double {fy})")
            return self.op(f"fptosi double {r} to i64")
        raise AssertionError(op)

    def int_divmod(self, op: str, x: str, y: str, ty: str) -> str:
        """Python floor division / modulo; x // 0 and x % 0 give 0 instead of trapping."""
        z = self.op(f"icmp eq {ty} {y}, 0")
        m1 = self.op(f"icmp eq {ty} {y}, -1")
        bad = self.op(f"or i1 {z}, {m1}")
        d = self.op(f"select i1 {bad}, {ty} 1, {ty} {y}")
        q = self.op(f"sdiv {ty} {x}, {d}")
        r = self.op(f"srem {ty} {x}, {d}")
        rnz = self.op(f"icmp ne {ty} {r}, 0")
        rneg = self.op(f"icmp slt {ty} {r}, 0")
        dneg = self.op(f"icmp slt {ty} {d}, 0")
        diff = self.op(f"xor i1 {rneg}, {dneg}")
        fix = self.op(f"and i1 {rnz}, {diff}")
        if op == "//":
            qq = self.op(f"sub {ty} {q}, {self.op(f'zext i1 {fix} to {ty}')}")
            neg = self.op(f"sub {ty} 0, {x}")
            out = self.op(f"select i1 {m1}, {ty} {neg}, {ty} {qq}")
            return self.op(f"select i1 {z}, {ty} 0, {ty} {out}")
        rr = self.op(f"select i1 {fix}, {ty} {self.op(f'add {ty} {r}, {d}')}, {ty} {r}")
        return self.op(f"select i1 {bad}, {ty} 0, {ty} {rr}")

    # ------------------------------------------------------------ trace / errors
    def event(self, instr: Instr, pipe: Pipe, loc: SourceLoc, *vals: str | int) -> None:
        words = [str(int(instr)), str(int(pipe)), str(self.k.loc_id(loc))]
        for v in vals:
            words.append(v if isinstance(v, str) else str(int(v)))
        words += ["0"] * (8 - len(words))
        on, done = self.label("trace"), self.label("traced")
        self.cbr("%tracing", on, done)
        self.block(on)
        self.emit(f"call void @{self.sym}_event(ptr %ctx, " + ", ".join(f"i64 {w}" for w in words) + ")")
        self.br(done)
        self.block(done)

    def guard(self, cond: str, code: str, message: str, values: list[str], hint: str, loc: object) -> None:
        """Fail the launch with a KernelError unless `cond` (i1) holds."""
        self.checks.append(CheckInfo(code, message, hint, loc))
        cid = len(self.checks) - 1
        ok, fail = self.label("ok"), self.label("fail")
        self.cbr(cond, ok, fail)
        self.block(fail)
        self.emit(f"store i64 1, ptr {self.ctx_word(abi.ERR_CODE)}, align 8")
        self.emit(f"store i64 {cid}, ptr {self.ctx_word(abi.ERR_CHECK)}, align 8")
        for i, v in enumerate(values[: abi.N_ERR_VALUES]):
            self.emit(f"store i64 {v}, ptr {self.ctx_word(abi.ERR_VALUES + i)}, align 8")
        self.emit("ret i32 1")
        self.block(ok)

    # ------------------------------------------------------------ buffers
    def buf_ptr(self, b: Buf) -> tuple[str, str]:
        """(pointer to the current slot, row stride in elements)."""
        p = self.k.placement[b.id]
        off = p.offset
        if p.slots > 1 and p.slot_of is not None:
            off = S.add(off, S.mul(p.slot_of, p.slot_bytes))
        base = f"%mem.{p.mem.value}"
        ptr = self.op(f"getelementptr i8, ptr {base}, i64 {self.sval(off)}")
        return ptr, self.sval(p.row_stride)

    def gm_ptr(self, slot: int) -> str:
        return f"%gm{slot}"

    # ------------------------------------------------------------ loops
    def loop(self, count: str, body: Callable[[str], object], name: str = "i") -> None:
        """for i in 0..count (count is i64): body(i)."""
        pre = self.label("pre")
        self.br(pre)
        self.block(pre)
        head, bod, done = self.label("head"), self.label("body"), self.label("done")
        self.br(head)
        self.block(head)
        i = self.tmp()
        nxt = self.tmp()
        # the phi's back edge comes from the block that ends the body; filled after
        phi_at = len(self.lines)
        self.lines.append("")
        c = self.op(f"icmp slt i64 {i}, {count}")
        self.cbr(c, bod, done)
        self.block(bod)
        self.cache.append({})
        outer_heavy, self.heavy = self.heavy, False
        body(i)
        self.cache.pop()
        self.emit(f"{nxt} = add nuw nsw i64 {i}, 1")
        latch = self.label("latch")
        self.br(latch)
        self.block(latch)
        if self.heavy:  # interleaving is off by default (jit._tuning): force it where it pays
            self.n += 1
            md = f"!{1000 + self.n}"  # above the fixed ids (!0 here, !900 nt_copy's !nontemporal)
            self.decls.add(f"{md} = distinct !{{{md}, !0}}")
            self.decls.add('!0 = !{!"llvm.loop.interleave.count", i32 2}')
            self.emit(f"br label %{head}, !llvm.loop {md}")
        else:
            self.br(head)
        self.heavy = outer_heavy
        self.lines[phi_at] = f"  {i} = phi i64 [0, %{pre}], [{nxt}, %{latch}]"
        self.block(done)


# ------------------------------------------------------------------ layout
def c0_of(d: DType) -> int:
    """Elements per 32-byte fractal row (the cube's layouts: see `cube`)."""
    return 32 // d.itemsize


# ------------------------------------------------------------------ i64 arithmetic, folded
def _lit(x: object) -> int | None:
    if isinstance(x, int):
        return x
    try:
        return int(str(x))
    except ValueError:
        return None


def _add(g: Gen, a: object, b: object) -> str:
    x, y = _lit(a), _lit(b)
    if x is not None and y is not None:
        return str(x + y)
    if x == 0:
        return str(b)
    if y == 0:
        return str(a)
    return g.op(f"add i64 {a}, {b}")


def _sub(g: Gen, a: object, b: object) -> str:
    x, y = _lit(a), _lit(b)
    if x is not None and y is not None:
        return str(x - y)
    if y == 0:
        return str(a)
    return g.op(f"sub i64 {a}, {b}")


def _mul(g: Gen, a: object, b: object) -> str:
    x, y = _lit(a), _lit(b)
    if x is not None and y is not None:
        return str(x * y)
    if x == 0 or y == 0:
        return "0"
    if x == 1:
        return str(b)
    if y == 1:
        return str(a)
    return g.op(f"mul i64 {a}, {b}")


def _shr(g: Gen, a: object, p2: int) -> str:
    """a // p2 for a >= 0 and p2 a power of two."""
    sh = p2.bit_length() - 1
    x = _lit(a)
    if x is not None:
        return str(x >> sh)
    return str(a) if sh == 0 else g.op(f"lshr i64 {a}, {sh}")


def _rem(g: Gen, a: object, p2: int) -> str:
    """a % p2 for a >= 0 and p2 a power of two."""
    x = _lit(a)
    if x is not None:
        return str(x & (p2 - 1))
    return "0" if p2 == 1 else g.op(f"and i64 {a}, {p2 - 1}")


def _ceil(g: Gen, a: object, p2: int) -> str:
    """ceil(a / p2)."""
    return _shr(g, _add(g, a, p2 - 1), p2)


def _round(g: Gen, a: object, p2: int) -> str:
    """a rounded up to a multiple of p2."""
    return _mul(g, _ceil(g, a, p2), p2)


def _ptr(g: Gen, base: str, off_bytes: object) -> str:
    if _lit(off_bytes) == 0:
        return base
    return g.op(f"getelementptr i8, ptr {base}, i64 {off_bytes}")


def _splat(g: Gen, n: int, ty: str, v: str) -> str:
    one = g.op(f"insertelement <{n} x {ty}> poison, {ty} {v}, i64 0")
    return g.op(f"shufflevector <{n} x {ty}> {one}, <{n} x {ty}> poison, <{n} x i32> zeroinitializer")


def _lane_mask(g: Gen, n: int, count: str) -> str:
    """<n x i1>: lane < count (count an i64 in [0, n])."""
    c32 = g.op(f"trunc i64 {count} to i32")
    iota = "<" + ", ".join(f"i32 {i}" for i in range(n)) + ">"
    return g.op(f"icmp ult <{n} x i32> {iota}, {_splat(g, n, 'i32', c32)}")


def _if(g: Gen, cond: str, then: Callable[[], None]) -> None:
    yes, done = g.label("cthen"), g.label("cend")
    g.cbr(cond, yes, done)
    g.block(yes)
    then()
    g.br(done)
    g.block(done)


def _loop_from(g: Gen, start: object, stop: object, body: Callable[[str], None]) -> None:
    """for i in start..stop."""
    g.loop(_sub(g, stop, start), lambda i: body(_add(g, start, i)))


def carry_loop(g: Gen, count: object, carried: list[tuple[str, str]],
               body: Callable[[str, list[str]], list[str]]) -> list[str]:
    """for i in 0..count with loop-carried SSA values (phis): `carried` is [(type, initial)],
    body(i, values) returns the next values; returns the values after the loop."""
    pre, head, bod, done = g.label("cpre"), g.label("chead"), g.label("cbody"), g.label("cdone")
    g.br(pre)
    g.block(pre)
    g.br(head)
    g.block(head)
    i, nxt = g.tmp(), g.tmp()
    vals = [g.tmp() for _ in carried]
    at = len(g.lines)
    g.lines.extend([""] * (1 + len(carried)))
    g.cbr(g.op(f"icmp slt i64 {i}, {count}"), bod, done)
    g.block(bod)
    g.cache.append({})
    new = body(i, vals)
    g.cache.pop()
    g.emit(f"{nxt} = add nuw nsw i64 {i}, 1")
    latch = g.label("clatch")
    g.br(latch)
    g.block(latch)
    g.br(head)
    g.lines[at] = f"  {i} = phi i64 [0, %{pre}], [{nxt}, %{latch}]"
    for j, ((ty, init), v, nv) in enumerate(zip(carried, vals, new)):
        g.lines[at + 1 + j] = f"  {v} = phi {ty} [{init}, %{pre}], [{nv}, %{latch}]"
    g.block(done)
    return vals


def _copy_bytes(g: Gen, dst: str, src: str, nbytes: int, align: int = 32) -> None:
    """Copy a fixed small block (a multiple of 32 bytes) with 64/32-byte vector moves."""
    off = 0
    while off < nbytes:
        w = 64 if nbytes - off >= 64 else 32
        t = f"<{w // 4} x i32>"
        v = g.op(f"load {t}, ptr {_ptr(g, src, off)}, align {align}")
        g.emit(f"store {t} {v}, ptr {_ptr(g, dst, off)}, align {align}")
        off += w
