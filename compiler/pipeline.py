"""The compiler's pipeline, in order: each stage a pure function from one IR to the next, each in
its room of `compiler/`.

    stage          where                  does
    parse          dsl/parser.py          kernel source -> AST (at `@dsl.kernel`, before any of this)
    lower          frontend/lower.py      AST -> Tile IR: what the kernel computes, on tiles
    split_cores    passes/split.py        the outer tile loop shared out over the cores
    assign_units   passes/units.py        every op bound to a pipe and an instruction
    chunk_epilogues passes/chunk.py       cube epilogues that do not fit UB stream L0C in row chunks
    place_buffers  passes/place.py        every buffer given a memory, an offset and ping-pong slots
    insert_sync    passes/sync.py         flags between the pipes: Core IR
                   passes/verify.py       each stage's promises, checked after every pass in tests
    codegen        backend/codegen.py     Core IR -> LLVM IR text (vector, element, streaming and cube
                                          emitters, the math library)
    jit            jit.py                 LLVM IR -> O3 machine code for the host CPU, cached in memory
                                          and on disk (keyed by `cache_key`)

`interp/` runs the Core IR in numpy instead of the last two stages (`VINCI_INTERPRET=1`).
`compile_kernel` runs them all; `emit` stops at any stage for `vinci compile --emit`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from compiler import jit
from dsl.errors import SourceLoc

if TYPE_CHECKING:
    from compiler.ir import Kernel, ParamSpec
    from dsl import ast as A
    from simulator.config import HwConfig


def stages() -> list[tuple[str, Any]]:
    """The schedule, in order: (name, fn(kernel, cfg) -> kernel). Imported on first compile only:
    a launch served from the cache never loads the compiler's passes."""
    from compiler.passes.chunk import chunk_epilogues
    from compiler.passes.place import place_buffers
    from compiler.passes.split import split_cores
    from compiler.passes.sync import insert_sync
    from compiler.passes.units import assign_units
    from compiler.passes.views import place_views

    return [
        ("split_cores", lambda k, cfg: split_cores(k)),
        ("assign_units", lambda k, cfg: assign_units(k)),
        ("chunk_epilogues", chunk_epilogues),
        ("place_buffers", lambda k, cfg: place_views(place_buffers(k, cfg))),  # sub-windows inside their roots
        ("insert_sync", lambda k, cfg: insert_sync(k)),
    ]
EMITS = ("ast", "tile", "core", "llvm", "asm")


@dataclass
class Plan:
    """What the launcher needs from a compiled kernel (pickled next to the object in the cache)."""

    name: str
    symbol: str
    params: list[ParamSpec]
    nwords: int
    checks: list[Any]  # compiler.backend.gen.CheckInfo
    locs: list[SourceLoc]
    strings: dict = field(default_factory=dict)
    prints: bool = True  # the kernel calls dsl.print (the launcher then installs a print callback)
    timings: dict[str, float] = field(default_factory=dict)


def to_core(fdef: A.FunctionDef, env: dict, params: list[ParamSpec], options: dict, cfg: HwConfig,
            stop: str | None = None, timings: dict[str, float] | None = None, hints: bool = True) -> Kernel:
    from compiler.frontend.lower import lower
    from dsl.errors import KernelError

    t = time.perf_counter()
    k = lower(fdef, env, params, options)
    if timings is not None:
        timings["lower"] = (time.perf_counter() - t) * 1e3
    if stop == "tile":
        return k
    try:
        for name, fn in stages():
            t = time.perf_counter()
            k = fn(k, cfg)
            if timings is not None:
                timings[name] = (time.perf_counter() - t) * 1e3
    except KernelError as e:
        if not hints or e.code != "E301":
            raise
        from compiler.passes.budget import refine

        def compiles(const: str, value: int) -> bool:  # the kernel with one Const changed places
            ps = [dataclasses.replace(p, value=value) if p.kind == "const" and p.name == const else p for p in params]
            try:
                to_core(fdef, env, ps, options, cfg, hints=False)
            except KernelError:
                return False
            return True

        raise refine(e, compiles) from None
    return k


def cache_key(source: str, spec: tuple, options: dict, cfg: HwConfig, stream: bool = True) -> str:
    h = hashlib.sha256()
    from compiler.backend.cube import host_isa

    for part in (source, repr(spec), repr(sorted(options.items())), cfg.fingerprint(), jit.source_hash(),
                 jit.host_fingerprint(), host_isa(), f"stream={stream}"):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def symbol_for(name: str, key: str) -> str:
    return f"vinci_{name}_{key[:16]}"


def compile_kernel(fdef: A.FunctionDef, source: str, env: dict, params: list[ParamSpec], spec: tuple,
                   options: dict, cfg: HwConfig) -> tuple[jit.Compiled, Plan]:
    from compiler.config import CONFIG

    stream = CONFIG.stream  # read once: the key and the code must agree
    key = cache_key(source, spec, options, cfg, stream)
    sym = symbol_for(fdef.name, key)

    def build() -> tuple[str, Plan]:
        from compiler.backend.codegen import generate

        timings: dict[str, float] = {}
        k = to_core(fdef, env, params, options, cfg, timings=timings)
        t = time.perf_counter()
        text, checks, strings = generate(k, sym, stream)
        timings["codegen"] = (time.perf_counter() - t) * 1e3
        from compiler.ir import Print, walk

        prints = any(isinstance(x, Print) for x in walk(k.body))
        return text, Plan(fdef.name, sym, params, k.nwords, checks, k.locs, strings, prints, timings)

    compiled, meta = jit.get_or_compile(key, sym, build)
    return compiled, cast(Plan, meta)  # the cache holds what build() returned


def emit(stage: str, fdef: A.FunctionDef, env: dict, params: list[ParamSpec], options: dict, cfg: HwConfig,
         shapes: dict[str, tuple[int, ...]] | None = None) -> str:
    """Text of one stage, for `vinci compile --emit`; the tile and core dumps show sizes for `shapes`
    (GM parameter name -> shape) when given."""
    from compiler.backend.codegen import generate
    from compiler.ir import dump
    from dsl import ast as A

    if stage == "ast":
        return A.dump(fdef)
    if stage == "tile":
        return dump(to_core(fdef, env, params, options, cfg, stop="tile"), shapes=shapes)
    k = to_core(fdef, env, params, options, cfg)
    if stage == "core":
        return dump(k, core=True, shapes=shapes)
    from compiler.config import CONFIG

    text, _, _ = generate(k, f"vinci_{fdef.name}", CONFIG.stream)
    if stage == "llvm":
        return jit.optimize_to_object(text)[1]
    if stage == "asm":
        return jit.assembly(text)
    raise ValueError(f"unknown stage {stage!r}; choose from {', '.join(EMITS)}")
