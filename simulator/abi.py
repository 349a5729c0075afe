"""The calling convention between compiled kernels and the launcher.

A compiled kernel exports `NAME(args, ctxs, first_core, end_core) -> i32`, running the cores in
[first_core, end_core) one after another (the launcher gives each host thread a range). `args`
is one int64 block per launch (pointers, numels, shapes, scalars); `ctxs` holds one context of
`CTX_WORDS` int64 per core. A nonzero return is an error the kernel detected before doing
anything unsafe; the context's error words say which check failed and with what values.
"""
CTX_WORDS = 24

CORE_ID = 0
NUM_CORES = 1
MEM_BASE = 2  # 2..6: L1, L0A, L0B, L0C, UB base addresses (in isa.Mem order minus GM)
TRACE_PTR = 7
TRACE_COUNT = 8
TRACE_CAP = 9
TRACE_FLUSH = 10  # void(ptr ctx): drains the trace buffer, resets TRACE_COUNT
PRINT_FN = 11  # void(ptr ctx, i64 loc, i64 item, i64 kind, i64 a, i64 b, i64 c, i64 d, i64 e)
ERR_CODE = 12
ERR_CHECK = 13
ERR_VALUES = 14  # 14..19
N_ERR_VALUES = 6
SCRATCH = 20  # host scratch for the cube's operand conversions (not a simulated memory)
SCRATCH_BYTES = 1 << 20

#: memory -> context word holding its base address
MEM_WORD = {"L1": 2, "L0A": 3, "L0B": 4, "L0C": 5, "UB": 6}

PRINT_INT, PRINT_FLOAT, PRINT_TILE, PRINT_STR, PRINT_END = 0, 1, 2, 3, 4
