"""codegen: Core IR -> LLVM IR text, one function per kernel.

Written as text rather than with llvmlite.ir because the IR needs `bfloat`. Scalars live in
allocas (mem2reg promotes them); every vector instruction becomes a loop nest over its
destination's extent whose inner loop LLVM vectorises for the host's widest vectors. f16/bf16
operate in f32 and round per instruction, as the vector unit and torch's CPU kernels do.
Every DMA checks its GM window against the tensor before touching memory (always on); the
trace of issued instructions is written only when the launch asked for a profile.
"""
from __future__ import annotations

from compiler import sexpr as S
from compiler.backend.codegen_atomic import gen_atomic
from compiler.backend.codegen_cube import forwarding, gen_cube_mmad
from compiler.backend.codegen_elem import i64_of
from compiler.backend.codegen_gather import gen_indexed, gen_load_scalar
from compiler.backend.codegen_gm_index import gen_gm_indexed
from compiler.backend.codegen_stream import Streams, gen_member
from compiler.backend.codegen_vector import gen_dma, gen_move, gen_vop
from compiler.backend.gen import LL, CheckInfo, Gen
from compiler.ir import (
    Barrier,
    Check,
    Flag,
    For,
    GMGather,
    GMScatter,
    If,
    Kernel,
    Load,
    LoadScalar,
    Mmad,
    Move,
    Print,
    SetVar,
    Stmt,
    Store,
    VIndexed,
    VOp,
)
from compiler.sexpr import F64, SExpr
from simulator import abi
from simulator.isa import Instr, Pipe


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
    elif isinstance(s, (GMGather, GMScatter)):
        gen_gm_indexed(g, s)
    elif isinstance(s, Load):
        assert s.instr is not None, "units are assigned by the schedule"
        gen_dma(g, s.instr, s.src, s.dst, True, s.loc)
    elif isinstance(s, Store) and s.atomic:
        gen_atomic(g, s)
    elif isinstance(s, Store):
        assert s.instr is not None, "units are assigned by the schedule"
        gen_dma(g, s.instr, s.dst, s.src, False, s.loc, s.fix)
    elif isinstance(s, Move):
        gen_move(g, s)
    elif isinstance(s, VOp):
        gen_vop(g, s)
    elif isinstance(s, LoadScalar):
        gen_load_scalar(g, s)
    elif isinstance(s, VIndexed):
        gen_indexed(g, s)
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
        elif isinstance(x, LoadScalar):
            out.add(x.var)
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
    # %alone: this call runs every core of the launch (no other host thread does): atomic stores
    # may then use plain, vectorisable adds (codegen_atomic)
    head = [f"define internal i32 @{sym}_core(ptr noalias %args, ptr noalias %ctx, i1 %alone) #0 {{", "entry:"]
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
  %ncp = getelementptr i64, ptr %ctxs, i64 {abi.NUM_CORES}
  %nc = load i64, ptr %ncp, align 8
  %all = icmp eq i64 %c1, %nc
  %from0 = icmp eq i64 %c0, 0
  %alone = and i1 %all, %from0
  br label %head
head:
  %c = phi i64 [%c0, %entry], [%cn, %next]
  %more = icmp slt i64 %c, %c1
  br i1 %more, label %run, label %done
run:
  %off = mul i64 %c, {abi.CTX_WORDS}
  %ctx = getelementptr i64, ptr %ctxs, i64 %off
  %r = call i32 @{sym}_core(ptr %args, ptr %ctx, i1 %alone)
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
