"""LayerNorm, RMSNorm, GroupNorm and BatchNorm1d / 2d on the torch.ops.npu norm kernels."""
from __future__ import annotations

import torch

__all__ = ["LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d"]


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm on `torch.ops.npu.layer_norm` (statistics in f32)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.layer_norm(input, list(self.normalized_shape), self.weight, self.bias, self.eps)


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm. Over the last dim with a weight and an eps given it is torch_npu's fused
    `torch.ops.npu.npu_rms_norm(x, weight, eps)` (the same function, rstd kept for the backward);
    otherwise `torch.ops.npu.rms_norm` (eps=None: torch's default)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is not None and len(self.normalized_shape) == 1 and self.eps is not None:
            return torch.ops.npu.npu_rms_norm(x, self.weight, self.eps)[0]
        return torch.ops.npu.rms_norm(x, list(self.normalized_shape), self.weight, self.eps)


class GroupNorm(torch.nn.GroupNorm):
    """torch.nn.GroupNorm on `torch.ops.npu.group_norm`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)


class _BatchNormNpu:
    """torch.nn.modules.batchnorm._BatchNorm.forward with the F.batch_norm call on
    `torch.ops.npu.batch_norm` (which updates running_mean / running_var in place in training)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        m: torch.nn.modules.batchnorm._BatchNorm = self  # type: ignore[assignment]
        m._check_input_dim(input)
        factor = 0.0 if m.momentum is None else m.momentum
        if m.training and m.track_running_stats and m.num_batches_tracked is not None:
            # a scalar counter, as torch.nn does it (host bookkeeping, not a result)
            m.num_batches_tracked.add_(1)
            factor = 1.0 / float(m.num_batches_tracked) if m.momentum is None else m.momentum
        use_batch = m.training or (m.running_mean is None and m.running_var is None)
        track = not m.training or m.track_running_stats
        return torch.ops.npu.batch_norm(input, m.running_mean if track else None, m.running_var if track else None,
                                        m.weight, m.bias, use_batch, factor, m.eps)


class BatchNorm1d(_BatchNormNpu, torch.nn.BatchNorm1d):
    """torch.nn.BatchNorm1d on `torch.ops.npu.batch_norm` ((N, C) or (N, C, L) input)."""


class BatchNorm2d(_BatchNormNpu, torch.nn.BatchNorm2d):
    """torch.nn.BatchNorm2d on `torch.ops.npu.batch_norm` ((N, C, H, W) input)."""
