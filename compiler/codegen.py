"""codegen: Core IR -> LLVM IR text, one function per kernel.

Written as text rather than with llvmlite.ir because the IR needs `bfloat`. Scalars live in
allocas (mem2reg promotes them); every vector instruction becomes a loop nest over its
destination's extent whose inner loop LLVM vectorises for the host's widest vectors. f16/bf16
operate in f32 and round per instruction, as the vector unit and torch's CPU kernels do.
Every DMA checks its GM window against the tensor before touching memory (always on); the
trace of issued instructions is written only when the launch asked for a profile.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from compiler import sexpr as S
from compiler.codegen_cube import forwarding, gen_cube_mmad
from compiler.codegen_elem import ffloat, i64_of
from compiler.codegen_stream import Streams, gen_member
from compiler.codegen_vector import REDUCE, _bcast, gen_dma, gen_move, gen_vop  # noqa: F401 (interpret uses these)
from compiler.ir import (
    Barrier,
    Buf,
    Check,
    Flag,
    For,
    If,
    Kernel,
    Load,
    Mmad,
    Move,
    Print,
    SetVar,
    Stmt,
    Store,
    VOp,
)
from compiler.sexpr import F64, I64, SExpr
from dsl.errors import SourceLoc
from simulator import abi
from simulator.isa import Instr, Pipe

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
    # set by compiler.vmath when it inlines a long math recipe: the innermost loop around it asks
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
            md = f"!{self.n}"
            self.decls.add(f"{md} = distinct !{{{md}, !0}}")
            self.decls.add('!0 = !{!"llvm.loop.interleave.count", i32 2}')
            self.emit(f"br label %{head}, !llvm.loop {md}")
        else:
            self.br(head)
        self.heavy = outer_heavy
        self.lines[phi_at] = f"  {i} = phi i64 [0, %{pre}], [{nxt}, %{latch}]"
        self.block(done)


# ------------------------------------------------------------------ statements
def gen_body(g: Gen, body: tuple[Stmt, ...]) -> None:
    groups = g.streams.groups(body) if g.streams is not None else {}
    for i, s in enumerate(body):
        grp = groups.get(i)
        if grp is not None:
            gen_member(g, grp, i, s)  # type: ignore[arg-type]  # members are Load / Store / VOp
        else:
            gen_stmt(g, s)


def gen_stmt(g: Gen, s: Stmt) -> None:
    if isinstance(s, SetVar):
        ty = LL[g.k.scalar_vars.get(s.name, s.value.ty)]
        v = g.sval(s.value if s.value.ty == g.k.scalar_vars.get(s.name, s.value.ty) else S.to_float(s.value))
        g.emit(f"store {ty} {v}, ptr {g.var_ptr(s.name)}, align 8")
        _invalidate(g, s.name)
    elif isinstance(s, For):
        gen_for(g, s)
    elif isinstance(s, If):
        c = g.truth(s.cond)
        a, b, done = g.label("then"), g.label("else"), g.label("endif")
        g.cbr(c, a, b)
        for lab, part in ((a, s.then), (b, s.orelse)):
            g.block(lab)
            g.cache.append({})
            gen_body(g, part)
            g.cache.pop()
            g.br(done)
        g.block(done)
    elif isinstance(s, Check):
        g.guard(g.truth(s.cond), s.code, s.message, [i64_of(g, v) for v in s.values], s.hint, s.loc)
    elif isinstance(s, Flag):
        pipe = s.dst if s.wait else s.src
        other = s.src if s.wait else s.dst
        g.event(Instr.WAIT_FLAG if s.wait else Instr.SET_FLAG, pipe, s.loc, int(other), g.sval(s.event))
    elif isinstance(s, Barrier):
        g.event(Instr.BARRIER, Pipe.ALL, s.loc)
    elif isinstance(s, Load):
        assert s.instr is not None, "units are assigned by the schedule"
        gen_dma(g, s.instr, s.src, s.dst, True, s.loc)
    elif isinstance(s, Store):
        assert s.instr is not None, "units are assigned by the schedule"
        gen_dma(g, s.instr, s.dst, s.src, False, s.loc, s.fix)
    elif isinstance(s, Move):
        gen_move(g, s)
    elif isinstance(s, VOp):
        gen_vop(g, s)
    elif isinstance(s, Print):
        gen_print(g, s)
    elif isinstance(s, Mmad):
        gen_cube_mmad(g, s)
    else:  # pragma: no cover
        raise AssertionError(f"codegen: {type(s).__name__}")


def _invalidate(g: Gen, name: str) -> None:
    for c in g.cache:
        for key in [k for k in c if name in S.free_vars(k)]:
            del c[key]


def _assigned(body: tuple[Stmt, ...]) -> set[str]:
    out: set[str] = set()
    for x in body:
        if isinstance(x, SetVar):
            out.add(x.name)
        elif isinstance(x, For):
            out |= {x.var, x.it} | _assigned(x.body)
        elif isinstance(x, If):
            out |= _assigned(x.then) | _assigned(x.orelse)
    return out


def gen_for(g: Gen, s: For) -> None:
    start, stop, step = g.sval(s.start), g.sval(s.stop), g.sval(s.step)
    for name in _assigned(s.body):  # values cached before the loop are stale on its back edge
        _invalidate(g, name)
    vp, ip = g.var_ptr(s.var), g.var_ptr(s.it)
    g.emit(f"store i64 {start}, ptr {vp}, align 8")
    g.emit(f"store i64 0, ptr {ip}, align 8")
    _invalidate(g, s.var)
    _invalidate(g, s.it)
    head, body, done = g.label("for"), g.label("forbody"), g.label("endfor")
    g.br(head)
    g.block(head)
    v = g.op(f"load i64, ptr {vp}, align 8")
    if s.step.is_const:
        c = g.op(f"icmp {'slt' if s.step.value > 0 else 'sgt'} i64 {v}, {stop}")
    else:
        up = g.op(f"icmp sgt i64 {step}, 0")
        c = g.op(f"select i1 {up}, i1 {g.op(f'icmp slt i64 {v}, {stop}')}, i1 {g.op(f'icmp sgt i64 {v}, {stop}')}")
    g.cbr(c, body, done)
    g.block(body)
    g.cache.append({})
    gen_body(g, s.body)
    g.cache.pop()
    v2 = g.op(f"load i64, ptr {vp}, align 8")
    g.emit(f"store i64 {g.op(f'add i64 {v2}, {step}')}, ptr {vp}, align 8")
    i2 = g.op(f"load i64, ptr {ip}, align 8")
    g.emit(f"store i64 {g.op(f'add i64 {i2}, 1')}, ptr {ip}, align 8")
    g.br(head)
    g.block(done)



def gen_print(g: Gen, s: Print) -> None:
    loc = g.k.loc_id(s.loc)
    fn = g.op(f"inttoptr i64 {g.ctx_load(abi.PRINT_FN)} to ptr")
    sig = "void (ptr, i64, i64, i64, i64, i64, i64, i64, i64)"

    def call(item: int, kind: int, *vals: str) -> None:
        v = list(vals) + ["0"] * (5 - len(vals))
        g.emit(f"call {sig} {fn}(ptr %ctx, i64 {loc}, i64 {item}, i64 {kind}, " + ", ".join(f"i64 {x}" for x in v) + ")")

    for i, it in enumerate(s.items):
        if isinstance(it, str):
            g.strings[(loc, i)] = it
            call(i, abi.PRINT_STR)
        elif isinstance(it, SExpr):
            if it.ty == F64:
                call(i, abi.PRINT_FLOAT, g.op(f"bitcast double {g.sval(it)} to i64"))
            else:
                call(i, abi.PRINT_INT, g.sval(it))
        else:
            p, st = g.buf_ptr(it)
            call(i, abi.PRINT_TILE, g.op(f"ptrtoint ptr {p} to i64"), str(it.dtype.code), i64_of(g, it.ext[0]),
                 i64_of(g, it.ext[1]), st)
    call(len(s.items), abi.PRINT_END)


# ------------------------------------------------------------------ the module
EVENT_FN = """
define internal void @SYM_event(ptr %ctx, i64 %w0, i64 %w1, i64 %w2, i64 %w3, i64 %w4, i64 %w5, i64 %w6, i64 %w7) noinline {
entry:
  %pp = getelementptr i64, ptr %ctx, i64 TRACE_PTR
  %np = getelementptr i64, ptr %ctx, i64 TRACE_COUNT
  %cp = getelementptr i64, ptr %ctx, i64 TRACE_CAP
  %n0 = load i64, ptr %np, align 8
  %cap = load i64, ptr %cp, align 8
  %full = icmp sge i64 %n0, %cap
  br i1 %full, label %flush, label %write
flush:
  %fp = getelementptr i64, ptr %ctx, i64 TRACE_FLUSH
  %fi = load i64, ptr %fp, align 8
  %f = inttoptr i64 %fi to ptr
  call void %f(ptr %ctx)
  br label %write
write:
  %n = load i64, ptr %np, align 8
  %bi = load i64, ptr %pp, align 8
  %b = inttoptr i64 %bi to ptr
  %off = mul i64 %n, 8
  %e = getelementptr i64, ptr %b, i64 %off
  store i64 %w0, ptr %e, align 8
  %e1 = getelementptr i64, ptr %e, i64 1
  store i64 %w1, ptr %e1, align 8
  %e2 = getelementptr i64, ptr %e, i64 2
  store i64 %w2, ptr %e2, align 8
  %e3 = getelementptr i64, ptr %e, i64 3
  store i64 %w3, ptr %e3, align 8
  %e4 = getelementptr i64, ptr %e, i64 4
  store i64 %w4, ptr %e4, align 8
  %e5 = getelementptr i64, ptr %e, i64 5
  store i64 %w5, ptr %e5, align 8
  %e6 = getelementptr i64, ptr %e, i64 6
  store i64 %w6, ptr %e6, align 8
  %e7 = getelementptr i64, ptr %e, i64 7
  store i64 %w7, ptr %e7, align 8
  %n1 = add i64 %n, 1
  store i64 %n1, ptr %np, align 8
  ret void
}
""".replace("TRACE_PTR", str(abi.TRACE_PTR)).replace("TRACE_COUNT", str(abi.TRACE_COUNT)) \
   .replace("TRACE_CAP", str(abi.TRACE_CAP)).replace("TRACE_FLUSH", str(abi.TRACE_FLUSH))


def generate(k: Kernel, sym: str, stream: bool = True) -> tuple[str, list[CheckInfo], dict]:
    """LLVM IR text of kernel `k` exported as `sym`, and the table of its runtime checks.
    `stream`: fuse runs of UB loads, vector instructions and a store into one pass (`codegen_stream`)."""
    g = Gen(k, sym)
    g.forward = forwarding(k.body)
    g.streams = Streams(k) if stream else None
    gen_body(g, k.body)
    head = [f"define internal i32 @{sym}_core(ptr noalias %args, ptr noalias %ctx) #0 {{", "entry:"]
    pro: list[str] = []

    def p(line: str) -> None:
        pro.append("  " + line)

    for name, ty in sorted(k.scalar_vars.items()):
        p(f"{g.var_ptr(name)} = alloca {LL[ty]}, align 8")
    for line in g.allocas:
        p(line)
    p("%cidp = getelementptr i64, ptr %ctx, i64 0")
    p("%core_id = load i64, ptr %cidp, align 8")
    p("%ncp = getelementptr i64, ptr %ctx, i64 1")
    p("%num_cores = load i64, ptr %ncp, align 8")
    p(f"%tpp = getelementptr i64, ptr %ctx, i64 {abi.TRACE_PTR}")
    p("%tp = load i64, ptr %tpp, align 8")
    p("%tracing = icmp ne i64 %tp, 0")
    for mem, word in abi.MEM_WORD.items():
        p(f"%memp.{mem} = getelementptr i64, ptr %ctx, i64 {word}")
        p(f"%memi.{mem} = load i64, ptr %memp.{mem}, align 8")
        p(f"%mem.{mem} = inttoptr i64 %memi.{mem} to ptr")
    for prm in k.params:
        if prm.kind == "gm":
            p(f"%gmp{prm.slot} = getelementptr i64, ptr %args, i64 {prm.slot}")
            p(f"%gmi{prm.slot} = load i64, ptr %gmp{prm.slot}, align 8")
            p(f"%gm{prm.slot} = inttoptr i64 %gmi{prm.slot} to ptr")
    # every argument word the body uses, loaded once up front
    for e in sorted(g.args_used, key=lambda e: e.args[0]):
        v = f"%arg{e.args[0]}"
        p(f"{v}.p = getelementptr i64, ptr %args, i64 {e.args[0]}")
        if e.ty == F64:
            p(f"{v}.i = load i64, ptr {v}.p, align 8")
            p(f"{v} = bitcast i64 {v}.i to double")
        else:
            p(f"{v} = load i64, ptr {v}.p, align 8")
    # non-temporal GM stores are weakly ordered: fence them before the launch reports completion
    body = head + pro + g.lines + ["  fence seq_cst", "  ret i32 0", "}"]
    launcher = f"""
define i32 @{sym}(ptr %args, ptr %ctxs, i64 %c0, i64 %c1) {{
entry:
  br label %head
head:
  %c = phi i64 [%c0, %entry], [%cn, %next]
  %more = icmp slt i64 %c, %c1
  br i1 %more, label %run, label %done
run:
  %off = mul i64 %c, {abi.CTX_WORDS}
  %ctx = getelementptr i64, ptr %ctxs, i64 %off
  %r = call i32 @{sym}_core(ptr %args, ptr %ctx)
  %bad = icmp ne i32 %r, 0
  br i1 %bad, label %fail, label %next
next:
  %cn = add i64 %c, 1
  br label %head
fail:
  ret i32 %r
done:
  ret i32 0
}}
"""
    attrs = 'attributes #0 = { "no-builtins" "prefer-vector-width"="512" "min-legal-vector-width"="512" }\n'
    text = "\n".join(sorted(g.decls)) + "\n" + EVENT_FN.replace("SYM", sym) + "\n".join(body) + "\n" + launcher
    return text + attrs, g.checks, g.strings
