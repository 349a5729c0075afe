"""Rotary position embedding (the "half" layout of torch_npu's npu_rotary_mul and LLaMA):
y = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])."""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def rotary(x: GM[f32, 2], cos: GM[f32, 2], sin: GM[f32, 2], y: GM[f32, 2], R: Const[int] = 16):
    h = x.shape[1] // 2
    for r in dsl.tiles(x.shape[0], R):
        x1 = x[r, 0:h]
        x2 = x[r, h:2 * h]
        y[r, 0:h] = x1 * cos[r, 0:h] - x2 * sin[r, 0:h]
        y[r, h:2 * h] = x2 * cos[r, h:2 * h] + x1 * sin[r, h:2 * h]
