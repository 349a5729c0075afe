"""GELU, tanh form, written out: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch's
F.gelu(x, approximate="tanh"). (`dsl.gelu(x, approximate="tanh")` is the builtin for the same.)"""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def gelu_tanh(x: GM[f32], y: GM[f32], TILE: Const[int] = 4096):
    for t in dsl.tiles(x.shape[0], TILE):
        v = x[t]
        y[t] = 0.5 * v * (1.0 + dsl.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
