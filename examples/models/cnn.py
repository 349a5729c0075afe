"""The CNN conv(3->16, 3x3, pad 1) -> relu -> maxpool 2 -> conv(16->32) -> relu -> maxpool 2 ->
linear(2048->10) on 32x32 inputs, trained on torch.ops.npu with the fused AdamW next to stock torch.

    python examples/models/cnn.py --steps 20 --batch 16 [--bf16]
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from examples.models import common  # noqa: E402

LR = 1e-3   # the AdamW learning rate the example and the tests use


def build(nn: Any, size: int = 32, classes: int = 10) -> torch.nn.Module:
    """The issue's CNN from `nn` (torch.nn or torch_bridge.nn); `size` is the input's height and width
    (32 gives the 2048-wide linear layer)."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (size // 4) ** 2, classes))


def loss(nn: Any) -> common.LossFn:
    return nn.CrossEntropyLoss()


def data(steps: int, batch: int, size: int = 32, classes: int = 10, seed: int = 0) -> list[common.Batch]:
    return common.classification_data(steps, batch, (3, size, size), classes, seed, spread=0.5)


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = common.parser(__doc__)
    p.add_argument("--size", type=int, default=32, help="input height and width")
    p.add_argument("--classes", type=int, default=10)
    p.set_defaults(lr=LR)
    a = p.parse_args(argv)
    sizes = dict(size=a.size, classes=a.classes)
    return common.run(a, build, sizes, data(a.steps, a.batch, a.size, a.classes, a.seed), loss)


if __name__ == "__main__":
    main()
