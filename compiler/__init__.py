"""Vinci's compiler: a kernel's AST -> Tile IR -> the schedule passes -> Core IR -> LLVM IR -> machine code.

Its rooms, in pipeline order (`compiler.pipeline` lists the stages):

    frontend/   lowering: AST -> Tile IR
    passes/     the schedule: Tile IR -> Core IR, one pure function per file; the verifier
    backend/    Core IR -> LLVM IR text: codegen, the cube's micro-kernels, the math library
    jit.py      LLVM IR -> loaded machine code, and the compile cache
    interp/     the reference interpreter: Core IR run in numpy (`VINCI_INTERPRET=1`)

and beside them the IR (`ir.py`, `sexpr.py`; `gathers.py`: the rules of scalar reads and gathers that
lowering, codegen and the interpreter share), every setting (`config.py`), the JIT's target
(`host.py`), the `vinci` command (`cli.py`) and its demo (`demo.py`).

This package is the one door the language (dsl/) uses: `CONFIG`, `declare_params`, `ParamSpec`,
`compile_kernel`, `emit`, `to_core` and `interpret`. Only `CONFIG` is imported with the package;
the rest load on first use, so `import dsl` stays cheap (no llvmlite) and a launch served from
the cache never loads the front end or the passes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compiler.config import CONFIG

if TYPE_CHECKING:
    from compiler.frontend.lower import declare_params
    from compiler.interp.interpret import interpret
    from compiler.ir import ParamSpec
    from compiler.pipeline import compile_kernel, emit, to_core

__all__ = ["CONFIG", "ParamSpec", "compile_kernel", "declare_params", "emit", "interpret", "to_core"]


def __getattr__(name: str) -> Any:
    """The rest of the door, imported when first asked for."""
    if name in ("compile_kernel", "emit", "to_core"):  # AST -> machine code, any stage's text, Core IR
        from compiler import pipeline

        return getattr(pipeline, name)
    if name == "declare_params":  # a kernel's parameters, read from its signature
        from compiler.frontend import lower

        return lower.declare_params
    if name == "ParamSpec":  # one parameter of a specialisation
        from compiler import ir

        return ir.ParamSpec
    if name == "interpret":  # a launch run by the reference interpreter
        from compiler.interp import interpret as interpreter

        return interpreter.interpret
    raise AttributeError(f"module 'compiler' has no attribute {name!r}")
