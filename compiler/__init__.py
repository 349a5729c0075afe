"""Vinci's compiler: Tile IR, the schedule passes, Core IR, llvmlite codegen and the compile cache.

Entry points: `compiler.pipeline.compile_kernel` (AST -> loaded machine code + launch plan),
`compiler.pipeline.emit` (any stage as text), `compiler.cli.main` (the `vinci` command),
`compiler.interpret` (the numpy reference interpreter, `VINCI_INTERPRET=1`).
"""
