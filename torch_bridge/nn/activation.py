"""Activations, softmax and dropout on torch.ops.npu kernels.

torch.nn's `inplace=True` flags are honoured as out-of-place calls (same values; the input is not
overwritten), which autograd handles like any other op."""
from __future__ import annotations

import warnings

import torch

__all__ = ["ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "LeakyReLU", "ELU", "Hardswish", "Softplus", "Softmax",
           "LogSoftmax", "Dropout"]


class ReLU(torch.nn.ReLU):
    """torch.nn.ReLU on `torch.ops.npu.relu`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.relu(input)


class GELU(torch.nn.GELU):
    """torch.nn.GELU on `torch.ops.npu.gelu` (approximate 'none' or 'tanh')."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.gelu(input, approximate=self.approximate)


class SiLU(torch.nn.SiLU):
    """torch.nn.SiLU on `torch.ops.npu.silu`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.silu(input)


class Sigmoid(torch.nn.Sigmoid):
    """torch.nn.Sigmoid on `torch.ops.npu.sigmoid`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.sigmoid(input)


class Tanh(torch.nn.Tanh):
    """torch.nn.Tanh on `torch.ops.npu.tanh`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.tanh(input)


class LeakyReLU(torch.nn.LeakyReLU):
    """torch.nn.LeakyReLU on `torch.ops.npu.leaky_relu`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.leaky_relu(input, self.negative_slope)


class ELU(torch.nn.ELU):
    """torch.nn.ELU on `torch.ops.npu.elu`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.elu(input, self.alpha)


class Hardswish(torch.nn.Hardswish):
    """torch.nn.Hardswish on `torch.ops.npu.hardswish`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.hardswish(input)


class Softplus(torch.nn.Softplus):
    """torch.nn.Softplus on `torch.ops.npu.softplus`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.softplus(input, self.beta, self.threshold)


def _legacy_dim(ndim: int, name: str) -> int:
    """torch.nn.functional._get_softmax_dim: the dim an implicit-dim softmax picks (with torch's warning)."""
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  "as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(torch.nn.Softmax):
    """torch.nn.Softmax on `torch.ops.npu.softmax`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        dim = self.dim if self.dim is not None else _legacy_dim(input.dim(), "softmax")
        return torch.ops.npu.softmax(input, dim)


class LogSoftmax(torch.nn.LogSoftmax):
    """torch.nn.LogSoftmax on `torch.ops.npu.log_softmax`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        dim = self.dim if self.dim is not None else _legacy_dim(input.dim(), "log_softmax")
        return torch.ops.npu.log_softmax(input, dim)


class Dropout(torch.nn.Dropout):
    """torch.nn.Dropout on `torch.ops.npu.dropout` (the kernel's own counter-based random numbers, so
    the kept elements differ from torch's generator; the distribution and scaling are torch's)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.dropout(input, self.p, self.training)
