"""The DSL kernels behind op_library.activations (one forward kernel, one backward kernel, one
fill and the swiglu pair); the public ops and their docs are in op_library.activations.

Every kernel walks the flat tensors in 1-D tiles dealt over the cores (`dsl.tiles`): MTE2 loads a
tile into UB, V computes in f32 (f16 / bf16 are cast up on load and rounded once on the way out,
as torch's CPU kernels do), MTE3 stores; the compiler double-buffers the tiles and streams the
whole window in one pass on the host. `OP` (a Const[str]) picks the formula at compile time,
so each op is its own specialisation with no run-time branching; `a`, `b` are the op's float
parameters (negative_slope, alpha, beta / threshold, 10**decimals).
"""
from __future__ import annotations

import dsl
from dsl import GM, Const, f32

FLT_MAX = 3.4028234663852886e38   # u > FLT_MAX holds for +inf only
SQRT1_2 = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327    # torch's kBeta of the erf gelu: M_2_SQRTPI * M_SQRT1_2 * 0.5
TANH_BETA = 0.7978845608028654       # sqrt(2 / pi), torch's kBeta of the tanh gelu
TANH_KAPPA = 0.044715
TWO_SQRT_PI = 1.1283791670955126     # 2 / sqrt(pi): d erf / dx = TWO_SQRT_PI exp(-x^2)


@dsl.kernel
def unary_kernel(x: GM, y: GM, a: float, b: float, OP: Const[str] = "exp", FLOAT: Const[bool] = True,
                 TILE: Const[int] = 8192):
    """y = OP(x) over the flat tensors. FLOAT: compute in f32 and cast to y's dtype (int inputs of
    the float functions are promoted); else the integer ops on the integer tile itself."""
    for t in dsl.tiles(x.shape[0], TILE):
        if FLOAT:
            v = dsl.cast(x[t], f32)
            if OP == "neg":
                r = -v
            elif OP == "abs":
                r = dsl.abs(v)
            elif OP == "sign":   # torch: (0 < x) - (x < 0): sign(NaN) = sign(-0) = +0
                r = dsl.cast(v > 0.0, f32) - dsl.cast(v < 0.0, f32)
            elif OP == "exp":
                r = dsl.exp(v)
            elif OP == "expm1" or OP == "elu":
                # Kahan: expm1(x) = (u - 1) x / log(u), u = exp(x) (the rounding error of u cancels;
                # x / log(u) first, so that u near FLT_MAX does not overflow); u == 1: x. Clamps
                # instead of selects (fewer V instructions): x below -18 gives -1 as it should (e^-18
                # is under half an ulp of 1; u subnormal would lose bits), u = inf becomes FLT_MAX and
                # the product overflows to inf; NaN passes both (maximum / minimum propagate it)
                w = dsl.maximum(v, -18.0)
                u = dsl.minimum(dsl.exp(w), FLT_MAX)
                r = dsl.where(u == 1.0, w, (u - 1.0) * (w / dsl.log(u)))
                if OP == "elu":   # torch: x > 0 ? x : alpha * expm1(x)
                    r = dsl.where(v > 0.0, v, r * a)
            elif OP == "log":
                r = dsl.log(v)
            elif OP == "log1p":
                # u = 1 + x rounded; log1p(x) = log(u) - ((u - 1) - x) / u (first-order correction of
                # the rounding); u == 1: x (log1p(x) rounds to x there, and -0 stays -0); u == 0
                # (x == -1): -inf; u == inf: inf; x < -1: NaN from log
                # (the correction uses u clamped to [1e-30, FLT_MAX]: 0 at u == 0 and -inf at
                # u == inf, so log's -inf / inf come through without selects)
                u = v + 1.0
                lu = dsl.log(u)
                d = dsl.minimum(dsl.maximum(u, 1e-30), FLT_MAX)
                r = dsl.where(u == 1.0, v, lu - ((d - 1.0) - v) / d)
            elif OP == "sqrt":
                r = dsl.sqrt(v)
            elif OP == "rsqrt":
                r = dsl.rsqrt(v)
            elif OP == "reciprocal":
                r = dsl.reciprocal(v)
            elif OP == "sin":
                r = dsl.sin(v)
            elif OP == "cos":
                r = dsl.cos(v)
            elif OP == "tanh":
                r = dsl.tanh(v)
            elif OP == "erf":
                r = dsl.erf(v)
            elif OP == "sigmoid":
                r = dsl.sigmoid(v)
            elif OP == "relu":   # as torch: relu(-0) = -0, relu(NaN) = NaN
                r = dsl.where(v < 0.0, 0.0, v)
            elif OP == "leaky_relu":   # torch: x > 0 ? x : x * slope (NaN stays NaN)
                r = dsl.where(v > 0.0, v, v * a)
            elif OP == "gelu":
                r = dsl.gelu(v)
            elif OP == "gelu_tanh":
                r = dsl.gelu(v, approximate="tanh")
            elif OP == "silu":
                r = v * dsl.sigmoid(v)
            elif OP == "softplus":   # torch: x * beta > threshold ? x : log1p(exp(x * beta)) / beta
                z = v * a
                r = dsl.where(z > b, v, dsl.softplus(z) / a)
            elif OP == "softplus1":   # beta == 1: dsl.softplus is log1p(exp(x)) with threshold 20 built in
                r = dsl.where(v > b, v, dsl.softplus(v))
            elif OP == "hardswish":   # torch: x * min(max(x + 3, 0), 6) / 6
                r = v * dsl.minimum(dsl.maximum(v + 3.0, 0.0), 6.0) / 6.0
            elif OP == "floor":
                r = dsl.floor(v)
            elif OP == "ceil":
                r = dsl.ceil(v)
            elif OP == "round":
                r = dsl.round(v)
            elif OP == "round_up":    # torch's decimals > 0: nearbyint(x * 10^d) / 10^d, in f32
                r = dsl.round(v * a) / a
            elif OP == "round_down":  # decimals < 0: nearbyint(x / 10^-d) * 10^-d
                r = dsl.round(v / a) * a
            else:
                r = dsl.trunc(v)
            y[t] = dsl.cast(r, y.dtype)
        else:
            w = x[t]
            if OP == "neg":
                y[t] = -w
            elif OP == "abs":
                y[t] = dsl.abs(w)
            elif OP == "sign":
                y[t] = dsl.cast(w > 0, y.dtype) - dsl.cast(w < 0, y.dtype)
            elif OP == "relu":
                y[t] = dsl.relu(w)
            else:   # floor / ceil / round / trunc of an integer: itself
                y[t] = w


@dsl.kernel
def unary_backward_kernel(g: GM, s: GM, dx: GM, a: float, b: float, OP: Const[str] = "exp",
                          TILE: Const[int] = 8192):
    """dx = the gradient of OP at the saved tensor s (the forward's input or output, per torch's
    formula), times g; in f32, rounded once to dx's dtype."""
    for t in dsl.tiles(g.shape[0], TILE):
        gv = dsl.cast(g[t], f32)
        v = dsl.cast(s[t], f32)
        if OP == "neg":
            r = -gv
        elif OP == "abs":   # grad * sgn(x)
            r = gv * (dsl.cast(v > 0.0, f32) - dsl.cast(v < 0.0, f32))
        elif OP == "exp":   # s = result
            r = gv * v
        elif OP == "expm1":   # s = result: grad * (result + 1)
            r = gv * (v + 1.0)
        elif OP == "log":
            r = gv / v
        elif OP == "log1p":
            r = gv / (v + 1.0)
        elif OP == "sqrt":   # s = result: grad / (2 result)
            r = gv / (2.0 * v)
        elif OP == "rsqrt":   # s = result: -0.5 grad result^3
            r = (-0.5 * gv) * (v * v * v)
        elif OP == "reciprocal":   # s = result: -grad result^2
            r = -gv * (v * v)
        elif OP == "sin":
            r = gv * dsl.cos(v)
        elif OP == "cos":
            r = gv * -dsl.sin(v)
        elif OP == "tanh":   # s = result
            r = gv * (1.0 - v * v)
        elif OP == "erf":
            r = TWO_SQRT_PI * dsl.exp(-(v * v)) * gv
        elif OP == "sigmoid":   # s = result
            r = gv * (1.0 - v) * v
        elif OP == "relu":   # s = result: threshold_backward(grad, result, 0)
            r = dsl.where(v <= 0.0, 0.0, gv)
        elif OP == "leaky_relu":
            r = dsl.where(v > 0.0, gv, gv * a)
        elif OP == "elu":   # torch: x <= 0 ? grad * alpha * exp(x) : grad (so a NaN input passes grad)
            r = dsl.where(v <= 0.0, gv * a * dsl.exp(v), gv)
        elif OP == "gelu":
            cdf = 0.5 * (1.0 + dsl.erf(v * SQRT1_2))
            pdf = dsl.exp(-0.5 * v * v) * INV_SQRT_2PI
            r = gv * (cdf + v * pdf)
        elif OP == "gelu_tanh":
            x2 = v * v
            th = dsl.tanh(TANH_BETA * (v + TANH_KAPPA * x2 * v))
            left = 0.5 * v
            dleft = 0.5 * (1.0 + th)
            dright = left * (1.0 - th * th) * TANH_BETA * (1.0 + 3.0 * TANH_KAPPA * x2)
            r = gv * (dleft + dright)
        elif OP == "silu":
            sg = dsl.sigmoid(v)
            r = gv * sg * (1.0 + v * (1.0 - sg))
        elif OP == "softplus":   # z = exp(x beta): x beta > threshold ? grad : grad z / (z + 1)
            z = dsl.exp(v * a)
            r = dsl.where(v * a > b, gv, gv * z / (z + 1.0))
        else:   # hardswish, torch: x <= -3 ? 0 : x < 3 ? grad (x / 3 + 0.5) : grad (a NaN input passes grad)
            r = dsl.where(v <= -3.0, 0.0, dsl.where(v < 3.0, gv * (v / 3.0 + 0.5), gv))
        dx[t] = dsl.cast(r, dx.dtype)


@dsl.kernel
def zeros_kernel(y: GM, TILE: Const[int] = 8192):
    """y = 0: the gradient of the piecewise-constant ops (sign, floor, ceil, round, trunc)."""
    for t in dsl.tiles(y.shape[0], TILE):
        y[t] = 0.0


@dsl.kernel
def swiglu_kernel(x: GM, y: GM, C: Const[int] = 4096):
    """x viewed (outer, 2, L), y (outer, L): y = silu(x[:, 0]) * x[:, 1], blocks of (1, C) over the cores."""
    for i, c in dsl.tiles2d((y.shape[0], y.shape[1]), (1, C)):
        p = i.start
        u = dsl.cast(x[p, 0, c], f32)
        w = dsl.cast(x[p, 1, c], f32)
        y[p, c] = dsl.cast(u * dsl.sigmoid(u) * w, y.dtype)


@dsl.kernel
def swiglu_backward_kernel(g: GM, x: GM, dx: GM, C: Const[int] = 4096):
    """dx[:, 0] = g * x1 * s (1 + x0 (1 - s)), dx[:, 1] = g * silu(x0), s = sigmoid(x0)."""
    for i, c in dsl.tiles2d((g.shape[0], g.shape[1]), (1, C)):
        p = i.start
        gv = dsl.cast(g[p, c], f32)
        u = dsl.cast(x[p, 0, c], f32)
        w = dsl.cast(x[p, 1, c], f32)
        s = dsl.sigmoid(u)
        dx[p, 0, c] = dsl.cast(gv * w * s * (1.0 + u * (1.0 - s)), dx.dtype)
        dx[p, 1, c] = dsl.cast(gv * (u * s), dx.dtype)
