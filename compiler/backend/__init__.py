"""The back end: Core IR -> LLVM IR text, for `jit` to compile for the host CPU.

    codegen.py         `generate` (the entry): a kernel's statements, its module and launcher
    gen.py             `Gen`, the IR text builder every emitter writes into, and the helpers
                       they share (folded i64 arithmetic, masks, loops with carried values)
    codegen_vector.py  the UB side: DMA (bounds-checked), moves through UB, vector instructions
    codegen_elem.py    one element of each vector instruction; reductions
    codegen_transpose.py  VTRANSPOSE: 2-D tiles transposed in register blocks (shufflevector)
    codegen_stream.py  a window's loads, vector instructions and store fused into one pass
    codegen_cube.py    the cube's statements: Mmad, moves in and out of L1 / L0, forwarding
    codegen_atomic.py  atomic stores (dsl.atomic_add): one lock-prefixed add per element
    codegen_gather.py  scalar reads of GM (LoadScalar) and VARANGE / VGATHER (every index checked first)
    cube.py            native code for the cube: ND <-> NZ layouts, Mmad, Fixpipe (`host_isa`)
    cube_micro.py      the Mmad micro-kernel, generated for the target's vector ISA
    cube_amx.py        Mmad on AMX tiles (bf16)
    vmath.py           the transcendental functions, one recipe for LLVM IR and numpy
    vmath_build.py     the two builders the recipes are written against
    vmath_trig.py      sin and cos
    convert.py         f16 / bf16 <-> f32 conversions that need no runtime symbol

`codegen` is the top (nothing here imports it) and `gen` the bottom (it imports none of the
others); `gen` refers to `codegen_stream` only for a type.
"""
