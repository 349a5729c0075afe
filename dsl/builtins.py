"""The functions a kernel can call (`dsl.exp`, `dsl.tiles`, ...).

They are markers: the compiler recognises them by name; calling one from plain Python raises.
`SPECS` gives each its positional parameters and keywords, for arity errors.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Builtin:
    name: str
    doc: str

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError(f"dsl.{self.name}() can only be used inside a @dsl.kernel function")

    def __repr__(self) -> str:
        return f"<dsl builtin {self.name}>"


#: name -> (required positional names, optional positional/keyword names with defaults, doc)
SPECS: dict[str, tuple[tuple[str, ...], dict[str, object], str]] = {
    "tiles": (("n", "tile"), {}, "this core's share of the tiles [i*tile, min(n, (i+1)*tile))"),
    "tiles2d": (("extents", "tiles"), {}, "this core's share of a 2-D grid of blocks"),
    "range": (("a",), {"b": None, "step": None}, "a scalar loop on every core: range(stop) / range(start, stop[, step])"),
    "core_id": ((), {}, "index of the core running this code (0 .. num_cores()-1)"),
    "num_cores": ((), {}, "number of cores of the launch (block_dim)"),
    "alloc": (("mem", "shape", "dtype"), {"buffers": None, "offset": None}, "an explicit buffer in a memory"),
    "copy": (("dst", "src"), {}, "explicit DMA / move between GM regions and buffers"),
    "atomic_add": (("dst", "src"), {}, "GM window += tile, atomically across cores (UB on MTE3, L0C on FIX)"),
    "print": ((), {}, "print scalars and tiles (from every core, prefixed by the core id)"),
    "zeros": (("shape", "dtype"), {"mem": None}, "a tile of zeros"),
    "full": (("shape", "value", "dtype"), {"mem": None}, "a tile filled with a value"),
    "cast": (("x", "dtype"), {}, "convert to another dtype (round to nearest even)"),
    "where": (("cond", "a", "b"), {}, "elementwise select: a where cond else b"),
    "sum": (("x",), {"axis": None, "keepdims": False}, "sum along an axis (or all)"),
    "max": (("x",), {"y": None, "axis": None, "keepdims": False}, "max(a, b) elementwise, or max(x, axis=...) reduction"),
    "min": (("x",), {"y": None, "axis": None, "keepdims": False}, "min(a, b) elementwise, or min(x, axis=...) reduction"),
    "maximum": (("x", "y"), {}, "elementwise maximum"),
    "minimum": (("x", "y"), {}, "elementwise minimum"),
    "matmul": (("a", "b"), {}, "a @ b on the cube unit"),
    "pow": (("x", "y"), {}, "x ** y elementwise (C powf semantics; y a tile or a scalar)"),
    "arange": (("n",), {"dtype": None}, "the 1-D tile 0, 1, ..., n-1 (i32 unless dtype=f32)"),
    "gather": (("x", "index"), {"axis": None},
               "as torch.gather: out[r, c] = x[r, index[r, c]] (axis=1) or x[index[r, c], c] (axis=0)"),
    "transpose": (("x",), {}, "the transpose of a 2-D tile or GM window (same as x.T), on the vector unit"),
    "rand": (("shape", "seed", "offset"), {"stride": None},
             "uniform f32 in [0, 1): element (r, c) is Philox 4x32-10 draw number offset + r * stride + c of seed"),
    "randint": (("shape", "seed", "offset"), {"stride": None},
                "raw 32-bit Philox 4x32-10 words as i32, numbered as in dsl.rand"),
}
UNARY = {
    "exp": "e**x", "log": "natural log", "sqrt": "square root", "rsqrt": "1/sqrt(x)", "abs": "absolute value",
    "neg": "-x", "relu": "max(x, 0)", "sigmoid": "1/(1+exp(-x))", "tanh": "hyperbolic tangent",
    "gelu": "x*Phi(x): approximate='none' (erf form, the default, as torch) or 'tanh'", "reciprocal": "1/x",
    "erf": "error function", "sin": "sine", "cos": "cosine",
    "softplus": "log(1 + exp(x)), x where x > 20 (torch's beta=1, threshold=20)",
    "floor": "round toward -inf", "ceil": "round toward +inf", "round": "round to nearest, ties to even",
    "trunc": "round toward zero",
}
for _n, _d in UNARY.items():
    SPECS[_n] = (("x",), {}, _d)
SPECS["gelu"] = (("x",), {"approximate": "none"}, UNARY["gelu"])

BUILTINS: dict[str, Builtin] = {n: Builtin(n, spec[2]) for n, spec in SPECS.items()}
