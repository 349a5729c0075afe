"""Mmad on AMX tiles (bf16), for hosts that have them (`cube.host_isa() == "amx"`).

Eight tile registers, all configured 16 rows x 64 bytes: C 2x2 tiles in tmm0-3 (16 x 16 f32
each, straight from L0C: a C fractal is 16 rows of 64 bytes), A in tmm4-5 (16 rows x 32 k),
B in tmm6-7 (16 k-pairs x 16 n, pair-interleaved). A and B are repacked into 1 KiB tiles in
scratch, zero past k, so every tile multiplies whole 32-k steps. Linux grants AMX state per
process on request (arch_prctl), asked once by the code itself; if refused, the fallback runs.
"""
from __future__ import annotations

from typing import Callable

from compiler.backend.gen import Gen, _add, _ceil, _if, _lane_mask, _mul, _ptr, _rem, _shr, _splat, _sub

_AMX_CFG = "@vinci_amx_cfg"
_AMX_STATE = "@vinci_amx_state"
ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA, SYS_ARCH_PRCTL = 0x1023, 18, 158


def _amx_decls(g: Gen) -> None:
    import llvmlite.binding as llvm

    llvm.initialize_native_asmparser()  # the emitted code holds inline asm (the syscall)
    cfg = bytearray(64)
    cfg[0] = 1  # palette 1
    for t in range(8):
        cfg[16 + 2 * t] = 64  # bytes per row
        cfg[48 + t] = 16  # rows
    text = "".join(f"\\{x:02X}" for x in cfg)
    g.intrinsic(f'{_AMX_CFG} = private unnamed_addr constant [64 x i8] c"{text}", align 64')
    g.intrinsic(f"{_AMX_STATE} = internal global i32 0, align 4")  # 0 unknown, 1 usable, 2 refused
    for d in ("declare void @llvm.x86.ldtilecfg(ptr)", "declare void @llvm.x86.tilerelease()",
              "declare void @llvm.x86.tilezero(i8 immarg)", "declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)",
              "declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)",
              "declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)"):
        g.intrinsic(d)


def _amx_usable(g: Gen) -> str:
    """i1: AMX tile data may be used. Linux hands out AMX state only on request (arch_prctl), once
    per process; the answer is remembered in a global."""
    st = g.op(f"load i32, ptr {_AMX_STATE}, align 4")
    before, ask, done = g.label("amxk"), g.label("amxask"), g.label("amxknown")
    g.br(before)
    g.block(before)
    g.cbr(g.op(f"icmp eq i32 {st}, 0"), ask, done)
    g.block(ask)
    r = g.op('call i64 asm sideeffect "syscall", "={rax},{rax},{rdi},{rsi},~{rcx},~{r11},~{memory},~{dirflag},'
             f'~{{fpsr}},~{{flags}}"(i64 {SYS_ARCH_PRCTL}, i64 {ARCH_REQ_XCOMP_PERM}, i64 {XFEATURE_XTILEDATA})')
    got = g.op(f"select i1 {g.op(f'icmp eq i64 {r}, 0')}, i32 1, i32 2")
    g.emit(f"store i32 {got}, ptr {_AMX_STATE}, align 4")
    g.br(done)
    g.block(done)
    now = g.op(f"phi i32 [{st}, %{before}], [{got}, %{ask}]")
    return g.op(f"icmp eq i32 {now}, 1")


def mmad_amx(g: Gen, c: str, a: str, b: str, m: str, n: str, k: str, m_pad: str, k_pad: str, n_pad: str, init: str,
              scratch: str, fallback: Callable[[], None]) -> None:
    _amx_decls(g)
    yes, no, done = g.label("amx"), g.label("noamx"), g.label("amxdone")
    g.cbr(_amx_usable(g), yes, no)
    g.block(no)
    fallback()
    g.br(done)
    g.block(yes)
    mb_n, nb_n, kt_n = _ceil(g, m, 16), _ceil(g, n, 16), _ceil(g, k, 32)
    kb_pad, nb_pad = _shr(g, k_pad, 16), _shr(g, n_pad, 16)
    sa = scratch
    sb = _ptr(g, scratch, _mul(g, _mul(g, m_pad, _add(g, k_pad, 16)), 2))
    _amx_pack_a(g, sa, a, k, mb_n, kt_n, kb_pad)
    _amx_pack_b(g, sb, b, k, kt_n, nb_n, nb_pad)
    g.emit(f"call void @llvm.x86.ldtilecfg(ptr {_AMX_CFG})")
    zero = g.op(f"icmp ne i64 {init}, 0")

    def block(mb0: str, nb0: str, mt: int, nt: int) -> None:
        ctile = lambda i, j: 2 * i + j
        cp = {(i, j): _ptr(g, c, _mul(g, _add(g, _mul(g, _add(g, nb0, j), m_pad), _mul(g, _add(g, mb0, i), 16)), 64))
              for i in range(mt) for j in range(nt)}
        z, l, go = g.label("czero"), g.label("cload"), g.label("cgo")
        g.cbr(zero, z, l)
        for lab, load in ((z, False), (l, True)):
            g.block(lab)
            for (i, j), p in cp.items():
                if load:
                    g.emit(f"call void @llvm.x86.tileloadd64(i8 {ctile(i, j)}, ptr {p}, i64 64)")
                else:
                    g.emit(f"call void @llvm.x86.tilezero(i8 {ctile(i, j)})")
            g.br(go)
        g.block(go)

        def step(kt: str) -> None:
            for i in range(mt):
                p = _ptr(g, sa, _mul(g, _add(g, _mul(g, _add(g, mb0, i), kt_n), kt), 1024))
                g.emit(f"call void @llvm.x86.tileloadd64(i8 {4 + i}, ptr {p}, i64 64)")
            for j in range(nt):
                p = _ptr(g, sb, _mul(g, _add(g, _mul(g, kt, nb_n), _add(g, nb0, j)), 1024))
                g.emit(f"call void @llvm.x86.tileloadd64(i8 {6 + j}, ptr {p}, i64 64)")
            for i in range(mt):
                for j in range(nt):
                    g.emit(f"call void @llvm.x86.tdpbf16ps(i8 {ctile(i, j)}, i8 {4 + i}, i8 {6 + j})")

        g.loop(kt_n, step)
        for (i, j), p in cp.items():
            g.emit(f"call void @llvm.x86.tilestored64(i8 {ctile(i, j)}, ptr {p}, i64 64)")

    mp, np_ = _shr(g, mb_n, 2), _shr(g, nb_n, 2)
    m_odd = g.op(f"icmp ne i64 {_rem(g, mb_n, 2)}, 0")
    n_odd = g.op(f"icmp ne i64 {_rem(g, nb_n, 2)}, 0")
    last_m, last_n = _sub(g, mb_n, 1), _sub(g, nb_n, 1)

    def ncol(q: str) -> None:
        nb0 = _mul(g, q, 2)
        g.loop(mp, lambda t: block(_mul(g, t, 2), nb0, 2, 2))
        _if(g, m_odd, lambda: block(last_m, nb0, 1, 2))

    g.loop(np_, ncol)

    def last_col() -> None:
        g.loop(mp, lambda t: block(_mul(g, t, 2), last_n, 2, 1))
        _if(g, m_odd, lambda: block(last_m, last_n, 1, 1))

    _if(g, n_odd, last_col)
    g.emit("call void @llvm.x86.tilerelease()")
    g.br(done)
    g.block(done)


def _masked_load(g: Gen, n: int, ty: str, p: str, mask: str, align: int) -> str:
    g.intrinsic(f"declare <{n} x {ty}> @llvm.masked.load.v{n}{ty}.p0(ptr, <{n} x i1>, <{n} x {ty}>)")
    return g.op(f"call <{n} x {ty}> @llvm.masked.load.v{n}{ty}.p0(ptr align {align} {p}, <{n} x i1> {mask}, "
                f"<{n} x {ty}> zeroinitializer)")


def _amx_pack_a(g: Gen, dst: str, a: str, k: str, mb_n: str, kt_n: str, kb_pad: str) -> None:
    """L0A (zZ, bf16) -> A tiles: tile (mb, kt) at (mb * kt_n + kt) KiB, row r = row r of fractals
    (mb, 2kt) and (mb, 2kt + 1); columns k and beyond are zero (masked loads: no read past k)."""
    def tile(mb: str, kt: str) -> None:
        left = _sub(g, k, _mul(g, kt, 32))
        lo = _lane_mask(g, 16, g.op(f"call i64 @llvm.umin.i64(i64 {left}, i64 16)"))
        hi = _lane_mask(g, 16, g.op(f"call i64 @llvm.umin.i64(i64 {g.op(f'call i64 @llvm.usub.sat.i64(i64 {left}, i64 16)')}, i64 16)"))
        src = _ptr(g, a, _mul(g, _add(g, _mul(g, mb, kb_pad), _mul(g, kt, 2)), 512))
        d = _ptr(g, dst, _mul(g, _add(g, _mul(g, mb, kt_n), kt), 1024))
        cat = "<" + ", ".join(f"i32 {i}" for i in range(32)) + ">"
        for r in range(16):
            x = _masked_load(g, 16, "i16", _ptr(g, src, r * 32), lo, 32)
            y = _masked_load(g, 16, "i16", _ptr(g, src, 512 + r * 32), hi, 32)
            v = g.op(f"shufflevector <16 x i16> {x}, <16 x i16> {y}, <32 x i32> {cat}")
            g.emit(f"store <32 x i16> {v}, ptr {_ptr(g, d, r * 64)}, align 32")

    g.intrinsic("declare i64 @llvm.umin.i64(i64, i64)")
    g.intrinsic("declare i64 @llvm.usub.sat.i64(i64, i64)")
    g.loop(mb_n, lambda mb: g.loop(kt_n, lambda kt: tile(mb, kt)))


def _amx_pack_b(g: Gen, dst: str, b: str, k: str, kt_n: str, nb_n: str, nb_pad: str) -> None:
    """L0B (bf16) -> B tiles: tile (kt, nb) at (kt * nb_n + nb) KiB, row p = k rows 2p, 2p + 1 of the
    tile interleaved per n; rows k and beyond are zero."""
    inter = "<" + ", ".join(f"i32 {i // 2 + 16 * (i % 2)}" for i in range(32)) + ">"

    def tile(kt: str, nb: str) -> None:
        left = g.op(f"trunc i64 {g.op(f'call i64 @llvm.umin.i64(i64 {_sub(g, k, _mul(g, kt, 32))}, i64 32)')} to i32")
        lv = _splat(g, 32, "i32", left)
        d = _ptr(g, dst, _mul(g, _add(g, _mul(g, kt, nb_n), nb), 1024))
        for h in (0, 1):  # the tile's two k fractals
            src = _ptr(g, b, _mul(g, _add(g, _mul(g, _add(g, _mul(g, kt, 2), h), nb_pad), nb), 512))
            for q in range(8):
                kk = 16 * h + 2 * q
                rows = "<" + ", ".join(f"i32 {kk + i // 16}" for i in range(32)) + ">"
                live = g.op(f"icmp slt <32 x i32> {rows}, {lv}")
                x = _masked_load(g, 32, "i16", _ptr(g, src, q * 64), live, 32)
                v = g.op(f"shufflevector <32 x i16> {x}, <32 x i16> poison, <32 x i32> {inter}")
                g.emit(f"store <32 x i16> {v}, ptr {_ptr(g, d, (8 * h + q) * 64)}, align 32")

    g.loop(kt_n, lambda kt: g.loop(nb_n, lambda nb: tile(kt, nb)))
