"""DSL kernels behind op_library.elementwise: one broadcasting elementwise kernel, a cast kernel and
the reductions behind `sum_to_size`.

The broadcasting kernel (`ew_kernel`) works in a frame of three logical dimensions (P, M, N) that the
host collapses the broadcast shape into (op_library.elementwise._plan). Each of up to three operands
is a GM view (Pa, Ma, Na) whose every dimension is either the frame's or 1: a compile-time layout
`L` says which of M and N (bit 2 M broadcast, bit 4 N broadcast; `L == 8` the operand is a runtime
scalar, `s*` for floats, `i*` for integers; `L == 16` it is absent), the runtime `q*` P (1: the
operand has P planes, 0: one plane for all; a scalar index either way, so it costs no variant). Broadcast dimensions
are static windows (`0:1`, index 0), so the vector unit broadcasts them as `(C,)` rows and `(R, 1)`
columns and the host streams every window in one pass. Blocks are R rows x C columns of an (M, N)
plane, dealt over the cores together with P (`tiles2d((P * MB, N), (1, C))`).

`CA`/`CB`/`CC` cast an operand in UB before the op (0: as loaded, 1: to f32, 2: to i32): the host
decides where torch's type promotion lands exactly that way; `CO` casts the result to the output's
dtype (the output is the common dtype, or bool for comparisons).
"""
from __future__ import annotations

import dsl
from dsl import GM, Const, f32, i32


@dsl.kernel
def ew_kernel(a: GM, b: GM, c: GM, out: GM, sa: float, sb: float, sc: float, ia: int, ib: int, ic: int,
              s1: float, n1: int, qa: int, qb: int, qc: int, OP: Const[str] = "add", LA: Const[int] = 0, LB: Const[int] = 0, LC: Const[int] = 16,
              CA: Const[int] = 0, CB: Const[int] = 0, CC: Const[int] = 0, CO: Const[int] = 0,
              INT: Const[int] = 0, R: Const[int] = 1, C: Const[int] = 4096):
    """out[p, m, n] = OP(a, b, c) over the (P, M, N) frame (module docstring)."""
    P = out.shape[0]
    M = out.shape[1]
    MB = (M + R - 1) // R
    for pm, cb in dsl.tiles2d((P * MB, out.shape[2]), (1, C)):
        p = pm.start // MB
        m0 = (pm.start % MB) * R
        m1 = dsl.min(m0 + R, M)
        # ---- operand a
        if LA == 8:
            if INT == 1:
                x = ia
            else:
                x = sa
        elif LA < 8:
            pa = p * qa
            if LA // 2 % 4 == 0:
                x = a[pa, m0:m1, cb]
            elif LA // 2 % 4 == 1:
                x = a[pa, 0:1, cb]
            elif LA // 2 % 4 == 2:
                x = a[pa, m0:m1, 0:1]
            else:
                x = a[pa, 0:1, 0:1]
            if CA == 1:
                x = dsl.cast(x, f32)
            elif CA == 2:
                x = dsl.cast(x, i32)
        # ---- operand b
        if LB == 8:
            if INT == 1:
                y = ib
            else:
                y = sb
        elif LB < 8:
            pb = p * qb
            if LB // 2 % 4 == 0:
                y = b[pb, m0:m1, cb]
            elif LB // 2 % 4 == 1:
                y = b[pb, 0:1, cb]
            elif LB // 2 % 4 == 2:
                y = b[pb, m0:m1, 0:1]
            else:
                y = b[pb, 0:1, 0:1]
            if CB == 1:
                y = dsl.cast(y, f32)
            elif CB == 2:
                y = dsl.cast(y, i32)
        # ---- operand c
        if LC == 8:
            if INT == 1:
                z = ic
            else:
                z = sc
        elif LC < 8:
            pc = p * qc
            if LC // 2 % 4 == 0:
                z = c[pc, m0:m1, cb]
            elif LC // 2 % 4 == 1:
                z = c[pc, 0:1, cb]
            elif LC // 2 % 4 == 2:
                z = c[pc, m0:m1, 0:1]
            else:
                z = c[pc, 0:1, 0:1]
            if CC == 1:
                z = dsl.cast(z, f32)
            elif CC == 2:
                z = dsl.cast(z, i32)
        # ---- the op
        if OP == "add":
            r = x + y
        elif OP == "add_alpha":
            if INT == 1:
                r = x + y * n1
            else:
                r = x + y * s1
        elif OP == "sub":
            r = x - y
        elif OP == "sub_alpha":
            if INT == 1:
                r = x - y * n1
            else:
                r = x - y * s1
        elif OP == "mul":
            r = x * y
        elif OP == "div":
            r = x / y
        elif OP == "div_trunc":
            r = dsl.trunc(x / y)
        elif OP == "div_floor":
            # floor(a / b), one step down where a / b rounded up onto the integer (torch's
            # div_floor_floating takes the quotient from fmod; the remainder's sign decides)
            # exact remainder a - q*b: q*b = p + e exactly (Dekker's product, Veltkamp splits), and
            # a - p is exact because p is close to a
            q = dsl.floor(x / y)
            pq = q * y
            cq = q * 4097.0
            qh = cq - (cq - q)
            ql = q - qh
            cy = y * 4097.0
            yh = cy - (cy - y)
            yl = y - yh
            e = ((qh * yh - pq) + qh * yl + ql * yh) + ql * yl
            rem = (x - pq) - e
            r = dsl.where((rem != 0.0) & ((rem < 0.0) != (y < 0.0)), q - 1.0, q)
        elif OP == "idiv_floor":
            r = x // y
        elif OP == "idiv_trunc":
            q = x // y
            r = dsl.where((q * y != x) & (q < 0), q + 1, q)
        elif OP == "maximum":
            r = dsl.maximum(x, y)
        elif OP == "minimum":
            r = dsl.minimum(x, y)
        elif OP == "pow":
            r = x ** y
        elif OP == "eq":
            r = x == y
        elif OP == "ne":
            r = x != y
        elif OP == "lt":
            r = x < y
        elif OP == "le":
            r = x <= y
        elif OP == "gt":
            r = x > y
        elif OP == "ge":
            r = x >= y
        elif OP == "logical_and":
            r = (x != 0) & (y != 0)
        elif OP == "logical_or":
            r = (x != 0) | (y != 0)
        elif OP == "logical_xor":
            r = (x != 0) != (y != 0)
        elif OP == "logical_not":
            r = x == 0
        elif OP == "where":             # a: condition
            r = dsl.where(x, y, z)
        elif OP == "clamp":             # a: input, b: min, c: max
            r = dsl.minimum(dsl.maximum(x, y), z)
        elif OP == "clamp_min":
            r = dsl.maximum(x, y)
        elif OP == "clamp_max":
            r = dsl.minimum(x, z)
        # ---- backward rules (a: grad, b and c: the forward's operands or output)
        elif OP == "neg_mul":           # -g * s1
            r = x * (0.0 - s1)
        elif OP == "scale":             # g * s1
            r = x * s1
        elif OP == "div_grad_b":        # -g * ((a / b) / b), torch's order
            r = (0.0 - x) * (y / z / z)
        elif OP == "max_grad":          # g where a > b, g / 2 where a == b, else 0 (torch's maximum rule)
            r = dsl.where(y == z, x * 0.5, dsl.where(y < z, 0.0, x))
        elif OP == "min_grad":          # the same with a < b
            r = dsl.where(y == z, x * 0.5, dsl.where(y > z, 0.0, x))
        elif OP == "pow_grad_base":     # g * e * a^(e - 1), 0 where e == 0
            r = dsl.where(z == 0.0, 0.0, x * (z * y ** (z - 1.0)))
        elif OP == "pow_grad_base_s":   # scalar exponent s1 (not 0)
            r = x * (s1 * y ** (s1 - 1.0))
        elif OP == "pow_grad_exp":      # g * out * log(a), 0 where a == 0 and e >= 0  (b: a, c: e; s1 unused)
            r = x * dsl.where((y == 0.0) & (z >= 0.0), 0.0, dsl.pow(y, z) * dsl.log(y))
        elif OP == "pow_grad_exp_s":    # scalar base s1 > 0 or != 0: g * out * log(s1) (b: out)
            r = x * (y * s1)
        elif OP == "pow_grad_exp_s0":   # scalar base 0: 0 where e >= 0, else g * out * log(0)
            r = dsl.where(z >= 0.0, 0.0, x * (y * s1))
        elif OP == "mask_zero":         # g where not mask (b: mask)
            r = dsl.where(y, 0.0, x)
        elif OP == "mask_keep":         # g where mask
            r = dsl.where(y, x, 0.0)
        elif OP == "clamp_grad":        # g where s1 <= a <= c (b: the input, c: the upper bound)
            r = dsl.where((y >= s1) & (y <= z), x, 0.0)
        elif OP == "where_ss":          # two scalar values
            if INT == 1:
                r = dsl.where(x, dsl.full((m1 - m0, cb.len), ib, i32), z)
            else:
                r = dsl.where(x, dsl.full((m1 - m0, cb.len), sb, f32), z)
        elif OP == "fill":
            r = dsl.full((m1 - m0, cb.len), s1, f32)
        else:
            r = x
        if CO == 1:
            out[p, m0:m1, cb] = dsl.cast(r, out.dtype)
        else:
            out[p, m0:m1, cb] = r


@dsl.kernel
def cast_kernel(x: GM, y: GM, MODE: Const[int] = 0, TILE: Const[int] = 8192):
    """y = x converted to y's dtype. MODE 0: dsl.cast (floats round to nearest even, ints wrap, bool
    is != 0); MODE 1: float -> integer as torch on x86: truncate toward zero, and NaN, inf and values
    outside i32 give INT_MIN (cvttss2si), whose low byte an i8 keeps."""
    for t in dsl.tiles(y.shape[0], TILE):
        if MODE == 0:
            y[t] = dsl.cast(x[t], y.dtype)
        else:
            v = dsl.cast(x[t], f32)
            ok = dsl.abs(v) < 2147483648.0
            w = dsl.where(ok, dsl.cast(dsl.trunc(v), i32), -2147483648)
            y[t] = dsl.cast(w, y.dtype)


@dsl.kernel
def rowsum_kernel(x: GM, y: GM, WIDEN: Const[int] = 1, R: Const[int] = 8, C: Const[int] = 4096):
    """y[r, 0] = sum over the columns of x[r, :] (f32 accumulation; WIDEN casts f16/bf16 to f32
    first), blocks of R rows, C columns at a time."""
    N = x.shape[1]
    for r in dsl.tiles(x.shape[0], R):
        acc = dsl.zeros((r.len, 1), f32)
        for c in dsl.range(0, N, C):
            if WIDEN == 1:
                acc += dsl.sum(dsl.cast(x[r, c], f32), axis=1, keepdims=True)
            else:
                acc += dsl.sum(x[r, c], axis=1, keepdims=True)
        y[r, 0:1] = dsl.cast(acc, y.dtype)


@dsl.kernel
def colsum_kernel(x: GM, y: GM, WIDEN: Const[int] = 1, RC: Const[int] = 512, R: Const[int] = 8,
                  C: Const[int] = 512):
    """y[p, k, n] = sum of x[p, k*RC:(k+1)*RC, n] over those rows (f32 accumulation): column sums of
    each plane p in chunks of RC rows (the host sums the chunks with a second launch when there are
    several). Blocks of R rows are added elementwise into an (R, C) f32 accumulator, reduced over its
    rows once at the end; the last rows that make no full block are added one by one."""
    M = x.shape[1]
    K = y.shape[1]
    for pk, cb in dsl.tiles2d((x.shape[0] * K, x.shape[2]), (1, C)):
        p = pk.start // K
        k = pk.start % K
        r0 = k * RC
        r1 = dsl.min(r0 + RC, M)
        nfull = (r1 - r0) // R
        acc = dsl.zeros((R, cb.len), f32)
        for j in dsl.range(nfull):
            m = r0 + j * R
            if WIDEN == 1:
                acc += dsl.cast(x[p, m:m + R, cb], f32)
            else:
                acc += x[p, m:m + R, cb]
        s = dsl.sum(acc, axis=0, keepdims=True)
        for m in dsl.range(r0 + nfull * R, r1):
            if WIDEN == 1:
                s += dsl.cast(x[p, m:m + 1, cb], f32)
            else:
                s += x[p, m:m + 1, cb]
        y[p, k:k + 1, cb] = dsl.cast(s, y.dtype)
