"""Loop metadata ids never collide with the fixed ids of the LLVM text: a kernel whose interleaved
loops were numbered past 900 once redefined !900, the !nontemporal node of the streaming stores
("Metadata id is already used" from the LLVM parser). Found by npu_swiglu in bf16."""
from __future__ import annotations

import torch

import dsl
from dsl import GM, Const, f32


@dsl.kernel
def swiglu3d(x: GM, y: GM, C: Const[int] = 256):
    for i, c in dsl.tiles2d((y.shape[0], y.shape[1]), (1, C)):
        p = i.start
        u = dsl.cast(x[p, 0, c], f32)
        w = dsl.cast(x[p, 1, c], f32)
        y[p, c] = dsl.cast(u * dsl.sigmoid(u) * w, y.dtype)


def test_many_loops_and_nontemporal_stores_parse() -> None:
    x = torch.randn(3, 2, 300).to(torch.bfloat16)
    y = torch.empty(3, 300, dtype=torch.bfloat16)
    text = swiglu3d.emit("llvm", x, y)
    assert text.count("llvm.loop") > 0
    swiglu3d[2](x, y)
    u, w = x[:, 0].float(), x[:, 1].float()
    torch.testing.assert_close(y.float(), (u * torch.sigmoid(u) * w).to(torch.bfloat16).float(), rtol=1.6e-2,
                               atol=1e-5)
