"""The instruction set of the simulated core, as the timing model sees it.

Compiled kernels record, when profiling, one `EVENT_DTYPE` record per issued instruction in
program order (per core). The meaning of the payload fields a..e depends on the instruction's
`Kind`:

=========  =====================================================================
kind       payload
=========  =====================================================================
FLAG       SET_FLAG: pipe = producer pipe, a = consumer pipe, b = event id.
           WAIT_FLAG: pipe = waiting (consumer) pipe, a = producer pipe, b = event id.
BARRIER    pipe = Pipe.ALL; every pipe waits until every earlier instruction is done.
DMA        a = bytes per burst (row), b = bursts (rows), c = GM argument index or -1,
           d = byte offset in that GM tensor of the first burst, e = GM stride between bursts.
           The `*_ATOMIC` copies add into GM instead of overwriting it (cost: see `ATOMIC`).
VECTOR     a = elements, b = bytes per element of the widest operand, c = rows.
CUBE       a = m, b = n, c = k, d = CubeType.
SCALAR     a = count of scalar operations (loop bookkeeping, prints).
=========  =====================================================================

`loc` is an index into the kernel's table of source locations so traces can name the DSL line.
"""
from __future__ import annotations

import enum

import numpy as np


class Pipe(enum.IntEnum):
    S = 0
    V = 1
    M = 2
    MTE1 = 3
    MTE2 = 4
    MTE3 = 5
    FIX = 6
    ALL = 7


PIPES = (Pipe.S, Pipe.V, Pipe.M, Pipe.MTE1, Pipe.MTE2, Pipe.MTE3, Pipe.FIX)
EVENT_IDS_PER_PAIR = 8


class Mem(enum.IntEnum):
    GM = 0
    L1 = 1
    L0A = 2
    L0B = 3
    L0C = 4
    UB = 5


class Kind(enum.IntEnum):
    FLAG = 0
    BARRIER = 1
    DMA = 2
    VECTOR = 3
    CUBE = 4
    SCALAR = 5


class CubeType(enum.IntEnum):
    """Operand type of an mmad; its rate per cycle is the config's [cube] entry of the same
    name in lower case (the one source of cube rates)."""

    F16 = 0  # f16 / bf16 in, f32 accumulate
    I8 = 1  # i8 in, i32 accumulate
    F32 = 2  # f32 in, f32 accumulate


class Instr(enum.IntEnum):
    SET_FLAG = 0
    WAIT_FLAG = 1
    BARRIER = 2
    # DMA, named by route
    COPY_GM_UB = 10
    COPY_UB_GM = 11
    COPY_GM_L1 = 12
    COPY_UB_L1 = 13
    COPY_L1_UB = 14
    COPY_L1_L0A = 15
    COPY_L1_L0B = 16
    COPY_L0C_GM = 17
    COPY_L0C_UB = 18
    COPY_L0C_L1 = 19
    COPY_UB_UB = 20
    # atomic accumulation into GM (SetAtomicAdd + DataCopy / Fixpipe): GM += the data, per element
    COPY_UB_GM_ATOMIC = 21
    COPY_L0C_GM_ATOMIC = 22
    # vector
    VADD = 40
    VSUB = 41
    VMUL = 42
    VDIV = 43
    VMAX = 44
    VMIN = 45
    VEXP = 46
    VLOG = 47
    VSQRT = 48
    VRSQRT = 49
    VABS = 50
    VNEG = 51
    VRELU = 52
    VSIGMOID = 53
    VTANH = 54
    VCMP = 55
    VSEL = 56
    VCAST = 57
    VREDUCE_SUM = 58
    VREDUCE_MAX = 59
    VREDUCE_MIN = 60
    VDUP = 61
    VCOPY = 62
    VAND = 63
    VOR = 64
    VNOT = 65
    VPOW = 66
    VGELU = 67
    VRECIP = 68
    VMOD = 69
    VFLOORDIV = 70
    VXOR = 71
    VSHL = 72
    VSHR = 73
    VERF = 74
    VSIN = 75
    VCOS = 76
    VSOFTPLUS = 77
    VGELU_TANH = 78
    VFLOOR = 79  # dsl.floor / ceil / round (half to even) / trunc: Ascend's Cast with a rounding mode
    VCEIL = 80
    VRINT = 81
    VTRUNC = 87
    VRAND = 82  # dsl.rand: Philox 4x32-10 uniform f32 in [0, 1) (cost: see RNG below)
    VRANDINT = 83  # dsl.randint: Philox 4x32-10 raw 32-bit words
    VTRANSPOSE = 86  # 2-D tile transpose in 16 x 16 blocks of 16-bit lanes (cost: TRANSPOSE_BLOCK)
    VGATHER = 84  # dsl.gather: dst[j] = src[index[j]] within UB (Ascend's Gather; cost: see below)
    VARANGE = 85  # dsl.arange: dst[j] = j (Ascend's CreateVecIndex)
    # cube
    MMAD = 90
    # scalar
    SCALAR = 100
    PRINT = 101
    LOAD_GM_S = 104  # one GM element into a scalar register (GlobalTensor::GetValue; a GM read on S)


#: instr -> (kind, pipe). Pipe.ALL for the barrier; flags carry their pipe in the event.
INFO: dict[Instr, tuple[Kind, Pipe]] = {
    Instr.SET_FLAG: (Kind.FLAG, Pipe.S),
    Instr.WAIT_FLAG: (Kind.FLAG, Pipe.S),
    Instr.BARRIER: (Kind.BARRIER, Pipe.ALL),
    Instr.COPY_GM_UB: (Kind.DMA, Pipe.MTE2),
    Instr.COPY_UB_GM: (Kind.DMA, Pipe.MTE3),
    Instr.COPY_GM_L1: (Kind.DMA, Pipe.MTE2),
    Instr.COPY_UB_L1: (Kind.DMA, Pipe.MTE3),
    Instr.COPY_L1_UB: (Kind.DMA, Pipe.MTE2),
    Instr.COPY_L1_L0A: (Kind.DMA, Pipe.MTE1),
    Instr.COPY_L1_L0B: (Kind.DMA, Pipe.MTE1),
    Instr.COPY_L0C_GM: (Kind.DMA, Pipe.FIX),
    Instr.COPY_L0C_UB: (Kind.DMA, Pipe.FIX),
    Instr.COPY_L0C_L1: (Kind.DMA, Pipe.FIX),
    Instr.COPY_UB_UB: (Kind.DMA, Pipe.V),
    Instr.COPY_UB_GM_ATOMIC: (Kind.DMA, Pipe.MTE3),
    Instr.COPY_L0C_GM_ATOMIC: (Kind.DMA, Pipe.FIX),
    Instr.MMAD: (Kind.CUBE, Pipe.M),
    Instr.SCALAR: (Kind.SCALAR, Pipe.S),
    Instr.PRINT: (Kind.SCALAR, Pipe.S),
    # a DMA-like record (a = element bytes, b = 1, c = GM argument, d = byte offset) timed as a GM
    # read of one block through the L2 on the scalar unit, which waits for it (timing.py)
    Instr.LOAD_GM_S: (Kind.DMA, Pipe.S),
}
for _i in Instr:
    if 40 <= _i < 90:
        INFO[_i] = (Kind.VECTOR, Pipe.V)

#: DMA instr -> (source memory, destination memory)
ROUTE: dict[Instr, tuple[Mem, Mem]] = {
    Instr.COPY_GM_UB: (Mem.GM, Mem.UB),
    Instr.COPY_UB_GM: (Mem.UB, Mem.GM),
    Instr.COPY_GM_L1: (Mem.GM, Mem.L1),
    Instr.COPY_UB_L1: (Mem.UB, Mem.L1),
    Instr.COPY_L1_UB: (Mem.L1, Mem.UB),
    Instr.COPY_L1_L0A: (Mem.L1, Mem.L0A),
    Instr.COPY_L1_L0B: (Mem.L1, Mem.L0B),
    Instr.COPY_L0C_GM: (Mem.L0C, Mem.GM),
    Instr.COPY_L0C_UB: (Mem.L0C, Mem.UB),
    Instr.COPY_L0C_L1: (Mem.L0C, Mem.L1),
    Instr.COPY_UB_UB: (Mem.UB, Mem.UB),
    Instr.COPY_UB_GM_ATOMIC: (Mem.UB, Mem.GM),
    Instr.COPY_L0C_GM_ATOMIC: (Mem.L0C, Mem.GM),
}

#: plain GM write -> its atomic-add form (same route, same pipe, same rate).
#: Cost (simulator/timing.py): the add happens in the L2, which must read every destination line
#: before it writes the sum back, so an atomic DMA costs the plain write PLUS a GM read of its
#: window: ``ceil(hit / l2.read + miss / hbm) + ceil(bytes / min(route, l2.write))`` cycles of work
#: (lines not resident in L2 come from HBM first). On the 910B1 numbers a 4 KiB f32 row from UB
#: that hits L2 takes 38 + 64 = 102 cycles of work instead of 64 (1.6x); one that misses 128 + 64 (3x).
#: Contention between cores adding into the same lines is not modelled (nor is any other).
ATOMIC: dict[Instr, Instr] = {Instr.COPY_UB_GM: Instr.COPY_UB_GM_ATOMIC, Instr.COPY_L0C_GM: Instr.COPY_L0C_GM_ATOMIC}

#: Vector cycles per 256-byte repeat, relative to a simple add (composite ops cost more).
VECTOR_REPEAT_COST: dict[Instr, int] = {i: 1 for i in Instr if INFO[i][0] == Kind.VECTOR}
VECTOR_REPEAT_COST.update({
    Instr.VDIV: 2, Instr.VEXP: 2, Instr.VLOG: 2, Instr.VSQRT: 2, Instr.VRSQRT: 2,
    Instr.VRECIP: 2, Instr.VPOW: 4, Instr.VSIGMOID: 4, Instr.VTANH: 4, Instr.VGELU: 6,
    Instr.VERF: 4, Instr.VSIN: 4, Instr.VCOS: 4, Instr.VSOFTPLUS: 4, Instr.VGELU_TANH: 6,
    Instr.VREDUCE_SUM: 2, Instr.VREDUCE_MAX: 2, Instr.VREDUCE_MIN: 2, Instr.VMOD: 2,
    Instr.VFLOORDIV: 2,
})
#: RNG: a Philox 4x32-10 block (4 values) is 10 rounds of 2 32x32->64 multiplies (2 lane ops each:
#: low and high halves) and 4 xors = 80 lane ops, + 2 for its counter (the key schedule is the same
#: for every lane: scalar) = 20.5 lane ops per 32-bit value, + 1 to put the 4 words of a block in
#: order. A 256-byte repeat is 64 such lanes: 22 repeat-cycles of VRANDINT; VRAND adds 3 per value
#: (shift, int -> float, scale): 25. (Both round up.)
VECTOR_REPEAT_COST.update({Instr.VRANDINT: 22, Instr.VRAND: 25})
#: VGATHER (Ascend's vgather: 64 b32 or 128 b16 elements per repeat, each from its own UB address
#: given by a 32-bit offset) reads every element from an arbitrary 32-byte block, where an
#: elementwise repeat reads 8 consecutive blocks at once: 8 repeat-cycles per 256 bytes of
#: output. Its record's b is the widest of the element and the 4-byte offset. VARANGE
#: (CreateVecIndex) writes its lanes like a VDUP: 1.
VECTOR_REPEAT_COST.update({Instr.VGATHER: 8, Instr.VARANGE: 1})

#: VTRANSPOSE (Ascend's Transpose / TransDataTo5HD) works on blocks of 16 rows x 16 lanes of 16 bits
#: (512 bytes: two 256-byte repeats). An R x C tile of b-byte elements (event a = R * C, b, c = R)
#: costs ``ceil(R / 16) * ceil(C * max(b, 2) / 32)`` blocks of TRANSPOSE_REPEATS repeats each:
#: 2-byte data (f16, bf16) 16 x 16 elements per block, the unit's own case; 4-byte data (f32, i32)
#: 16 x 8 per block, each element two 16-bit lanes moving together (the b32 mode), the same bytes
#: per block; 1-byte data (i8, bool) 16 x 16 per block, half the bytes, since there are no 8-bit
#: lanes: each byte takes a 16-bit lane (the b8 mode writes half blocks, two passes per block).
TRANSPOSE_BLOCK = (16, 32)  # rows x bytes of one block, elements narrower than 2 bytes widened to 2
TRANSPOSE_REPEATS = 2  # 256-byte repeats per 512-byte block

#: One profiling record. The compiled kernel writes these as 8 x int64, in this field order.
EVENT_FIELDS = ("instr", "pipe", "loc", "a", "b", "c", "d", "e")
EVENT_DTYPE = np.dtype([(f, np.int64) for f in EVENT_FIELDS])
EVENT_WORDS = len(EVENT_FIELDS)
