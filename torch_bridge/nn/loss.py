"""CrossEntropyLoss, NLLLoss and MSELoss on torch.ops.npu.cross_entropy / nll_loss / mse_loss."""
from __future__ import annotations

import torch

__all__ = ["CrossEntropyLoss", "NLLLoss", "MSELoss"]


class CrossEntropyLoss(torch.nn.CrossEntropyLoss):
    """torch.nn.CrossEntropyLoss (class-index targets) on `torch.ops.npu.cross_entropy`."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                                           reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(torch.nn.NLLLoss):
    """torch.nn.NLLLoss on `torch.ops.npu.nll_loss`."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                                      reduction=self.reduction)


class MSELoss(torch.nn.MSELoss):
    """torch.nn.MSELoss on `torch.ops.npu.mse_loss`."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.mse_loss(input, target, reduction=self.reduction)
