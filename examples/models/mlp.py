"""An MLP classifier trained on torch.ops.npu with the fused AdamW, next to the same model on stock torch.

    python examples/models/mlp.py --steps 20 --inp 64 --hidden 128 --classes 10 [--bf16]
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from examples.models import common  # noqa: E402

LR = 3e-3   # the AdamW learning rate the example and the tests use


def build(nn: Any, inp: int = 64, hidden: int = 128, classes: int = 10) -> torch.nn.Module:
    """Linear -> ReLU -> Linear -> GELU -> Linear, from `nn` (torch.nn or torch_bridge.nn)."""
    return nn.Sequential(nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, classes))


def loss(nn: Any) -> common.LossFn:
    return nn.CrossEntropyLoss()


def data(steps: int, batch: int, inp: int = 64, classes: int = 10, seed: int = 0) -> list[common.Batch]:
    return common.classification_data(steps, batch, (inp,), classes, seed)


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = common.parser(__doc__)
    p.add_argument("--inp", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--classes", type=int, default=10)
    p.set_defaults(lr=LR)
    a = p.parse_args(argv)
    sizes = dict(inp=a.inp, hidden=a.hidden, classes=a.classes)
    return common.run(a, build, sizes, data(a.steps, a.batch, a.inp, a.classes, a.seed), loss)


if __name__ == "__main__":
    main()
