"""The on-chip memory budget, as the user sees it: E301 texts whose hints name what would help, and
the bytes a placed kernel uses per memory (`usage`, for tests and reports).

A hint names the `Const` parameters whose value sizes the tile and the largest halving of each that
makes the tile fit where it failed (`BN=64`), suggests `buffers=1` only when double buffering is on
and one buffer would fit, and says when an accumulator is too big for L0C itself.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compiler import sexpr as S
from compiler.ir import Buf, Kernel
from compiler.sexpr import SExpr
from dsl.errors import KernelError, fmt_bytes
from dsl.types import Mem

ALIGN = 32


def pretty_shape(b: Buf, k: Kernel) -> str:
    """'8xn' style, naming shape words after the tensor they come from (x.shape[1])."""
    names = {}
    for p in k.params:
        if p.kind == "gm":
            for i in range(p.rank):
                names[p.slot + 2 + i] = f"{p.name}.shape[{i}]"

    def one(e: SExpr) -> str:
        if e.op == "arg" and e.args[0] in names:
            return names[e.args[0]]
        if e.op == "const":
            return str(e.value)
        return S.fmt(e)

    dims = b.cap if b.rank == 2 else b.cap[1:]
    if all(x.is_const for x in dims):
        return "x".join(one(x) for x in dims)
    return "[" + ", ".join(one(x) for x in dims) + "]"


def what(b: Buf) -> str:
    name = b.name.split(".")[0]
    return "" if name.startswith("t") and name[1:].isdigit() else f" for '{name}'"


def tile_bytes(b: Buf, rows: int, cols: int) -> int:
    """Bytes of one slot of b if its capacity were rows x cols (the padding of `place`)."""
    es = b.dtype.itemsize
    if b.mem in (Mem.L1, Mem.L0A, Mem.L0B, Mem.L0C):
        p = 16 if b.mem == Mem.L0C else max(16, ALIGN // es)
        rows, cols = -(-rows // p) * p, -(-cols // p) * p
    else:
        per = ALIGN // es
        cols = -(-cols // per) * per
    return -(-(rows * cols * es) // ALIGN) * ALIGN


def sizing_consts(b: Buf, k: Kernel) -> list[tuple[str, int, int]]:
    """(Const name, its value, dim index) for each static dim of b equal to an int Const."""
    out = []
    dims = (0, 1) if b.rank == 2 else (1,)
    for p in k.params:
        if p.kind != "const" or isinstance(p.value, bool) or not isinstance(p.value, int) or p.value < 2:
            continue
        for i in dims:
            if b.cap[i].is_const and b.cap[i].value == p.value:
                out.append((p.name, p.value, i))
    return out


def const_fixes(b: Buf, slots: int, free: int, k: Kernel) -> list[str]:
    """'BN=64' for each Const sizing b: the largest halving of it with which b's slots fit `free`."""
    fixes: list[str] = []
    for name, v, i in sizing_consts(b, k):
        dims = [int(b.cap[0].value) if b.cap[0].is_const else 0, int(b.cap[1].value) if b.cap[1].is_const else 0]
        if 0 in dims:
            continue
        w = v // 2
        while w >= 1:
            dims[i] = w
            if tile_bytes(b, dims[0], dims[1]) * slots <= free:
                break
            w //= 2
        fix = f"{name}={w}" if w >= 1 else None
        if fix and fix not in fixes:
            fixes.append(fix)
    return fixes


@dataclass
class Fit:
    """What an E301 hint is made of (attached to the error as `fit`, for `refine`)."""

    consts: list[str]  # the Const parameters that size the tile
    values: dict[str, int]  # their values
    fixes: list[str]  # 'BN=64': a value of each with which the tile fits (an estimate until refined)
    others: list[str]  # the other suggestions (buffers=1)
    note: str = ""  # said last (the accumulator must fit L0C)

    def text(self) -> str:
        if self.fixes:
            names = [f.split("=")[0] for f in self.fixes]
            first = f"lower the tile size: {' or '.join(names)} ({' or '.join(self.fixes)} fits)"
        elif self.consts:
            first = f"lower the tile size: {' or '.join(self.consts)}"
        else:
            first = "lower the tile size (a smaller Const)"
        return "; or ".join([first] + self.others) + (f"; {self.note}" if self.note else "")


def overflow(b: Buf, slots: int, want_slots: int, total: int, free: int, freed_by_one: int, mem: Mem,
             k: Kernel) -> KernelError:
    """E301 for a buffer of constant size: `total` bytes in `slots` slots do not fit `free`.
    `want_slots`: the slots it asked for (double buffering, before any fallback); `freed_by_one`:
    bytes other live double-buffered buffers would give back with buffers=1."""
    shape = pretty_shape(b, k)
    per = f" ({slots} buffers of {fmt_bytes(total // slots)})" if slots > 1 else ""
    one = total // slots
    others = []
    if slots > 1 and one <= free:
        others.append(f"use buffers=1 for this tile (one buffer of {fmt_bytes(one)} fits)")
    elif k.options.get("buffers", 2) != 1 and freed_by_one and one <= free + freed_by_one:
        others.append(f"use buffers=1 (@dsl.kernel(buffers=1) single-buffers the other tiles, which frees "
                      f"{fmt_bytes(freed_by_one)})")
    note = f"the accumulator itself must fit L0C ({fmt_bytes(one)} here)" if mem == Mem.L0C else ""
    consts = list(dict.fromkeys(name for name, _, _ in sizing_consts(b, k)))
    values = {name: v for name, v, _ in sizing_consts(b, k)}
    fit = Fit(consts, values, const_fixes(b, want_slots, free, k) or const_fixes(b, 1, free, k), others, note)
    e = KernelError("E301", f"tile of {shape} {b.dtype}{what(b)} needs {fmt_bytes(total)} "
                    f"({total} bytes){per} but {mem.value} has {fmt_bytes(free)} ({free} bytes) free", b.loc,
                    fit.text())
    e.fit = fit  # type: ignore[attr-defined]
    return e


def refine(e: KernelError, compiles: Callable[[str, int], bool], trials: int = 12) -> KernelError:
    """An E301 whose Const suggestions are checked by compiling the kernel again: for each Const that
    sizes the tile, the largest halving of its value with which the whole kernel places (the
    estimate only counted this tile; the others shrink too). At most `trials` compiles."""
    fit: Fit | None = getattr(e, "fit", None)
    if e.code != "E301" or fit is None or not fit.consts:
        return e
    found: dict[str, int] = {}
    tried = dict(fit.values)
    while trials > 0:  # halve each Const in turn, so one that cannot help does not use up the trials
        todo = [n for n, w in tried.items() if n not in found and w > 1]
        if not todo:
            break
        for name in todo[:trials]:
            tried[name] //= 2
            trials -= 1
            if compiles(name, tried[name]):
                found[name] = tried[name]
    fixes = [f"{name}={w}" for name, w in found.items()]
    if not fixes:
        return e
    fit = Fit(fit.consts, fit.values, fixes, fit.others, fit.note)
    out = dataclasses.replace(e, hint=fit.text())
    out.fit = fit  # type: ignore[attr-defined]
    return out


def runtime_hint(b: Buf, k: Kernel, option: str, fit: int) -> str:
    """The hint of a runtime E301 check (shape-sized tiles): `option` ('buffers=1') gives the tile
    the `fit` slots that would fit ('' when even one does not)."""
    consts = [name for name, _, i in sizing_consts(b, k) if i == 0 and b.rank == 2]
    if consts:
        hint = (f"lower the tile size: {' or '.join(dict.fromkeys(consts))} (the tile's rows) to the rows that fit, "
                f"or tile the columns too if none does")
    else:
        hint = "lower the tile size (a smaller Const)"
    if option:
        room = "one buffer of this tile fits" if fit == 1 else f"{fit} buffers of this tile fit"
        hint += f"; or use {option} ({room})"
    return hint


def usage(k: Kernel, argv: Sequence[int] = ()) -> dict[Mem, int]:
    """Bytes used in each on-chip memory by a placed kernel: the end of its last buffer (all slots),
    runtime sizes evaluated with the launch words `argv` (`argv_for`)."""
    def leaf(e: SExpr) -> SExpr:
        return S.const(argv[e.args[0]]) if e.op == "arg" else e

    out: dict[Mem, int] = {}
    for p in k.placement.values():
        end = S.normalize(S.add(p.offset, S.mul(p.slot_bytes, p.slots)), leaf)
        if not end.is_const:
            raise ValueError(f"buffer end {S.fmt(end)} depends on more than the shapes")
        out[p.mem] = max(out.get(p.mem, 0), int(end.value))
    return out


def argv_for(k: Kernel, shapes: dict[str, tuple[int, ...]]) -> list[int]:
    """Launch words good enough to size buffers: each GM parameter's numel and shape (no pointers)."""
    words = [0] * max(k.nwords, 1)
    for p in k.params:
        if p.kind == "gm" and p.name in shapes:
            shape = shapes[p.name]
            n = 1
            for x in shape:
                n *= x
            words[p.slot + 1] = n
            for i, x in enumerate(shape):
                words[p.slot + 2 + i] = x
    return words
