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
}
UNARY = {
    "exp": "e**x", "log": "natural log", "sqrt": "square root", "rsqrt": "1/sqrt(x)", "abs": "absolute value",
    "neg": "-x", "relu": "max(x, 0)", "sigmoid": "1/(1+exp(-x))", "tanh": "hyperbolic tangent",
    "gelu": "x*Phi(x): approximate='none' (erf form, the default, as torch) or 'tanh'", "reciprocal": "1/x",
    "erf": "error function", "sin": "sine", "cos": "cosine",
    "softplus": "log(1 + exp(x)), x where x > 20 (torch's beta=1, threshold=20)",
}
for _n, _d in UNARY.items():
    SPECS[_n] = (("x",), {}, _d)
SPECS["gelu"] = (("x",), {"approximate": "none"}, UNARY["gelu"])

BUILTINS: dict[str, Builtin] = {n: Builtin(n, spec[2]) for n, spec in SPECS.items()}
