"""y = relu(x @ w + bias) on the cube: f16/bf16 inputs, f32 accumulation in L0C, and the epilogue
(bias add, relu, cast) on the vector unit: L0C -> UB on FIX in row chunks when a whole block does
not fit UB, so a 128 x 128 f32 accumulator takes it."""
import dsl
from dsl import GM, Const, f32


@dsl.kernel
def linear_bias_relu(x: GM, w: GM, bias: GM[f32], y: GM, BM: Const[int] = 128, BN: Const[int] = 128,
                     BK: Const[int] = 64):
    for m, n in dsl.tiles2d((x.shape[0], w.shape[1]), (BM, BN)):
        acc = dsl.zeros((BM, BN), f32)
        for k in dsl.range(0, x.shape[1], BK):
            acc += x[m, k] @ w[k, n]
        y[m, n] = dsl.cast(dsl.relu(acc + bias[n]), y.dtype)
