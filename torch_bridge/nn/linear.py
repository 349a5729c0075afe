"""Linear and Embedding on torch.ops.npu.linear / embedding."""
from __future__ import annotations

import torch

__all__ = ["Linear", "Embedding"]


class Linear(torch.nn.Linear):
    """torch.nn.Linear on `torch.ops.npu.linear` (one cube matmul with the bias added on V)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if input.dim() == 0 or input.shape[-1] != self.in_features:
            # torch's message (the kernel would stop on it too, as a DSL error without torch's wording)
            rows = input.numel() // max(1, input.shape[-1]) if input.dim() else 1
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x"
                               f"{input.shape[-1] if input.dim() else 1} and {self.in_features}x{self.out_features})")
        if input.dtype != self.weight.dtype:
            raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {_tname(input.dtype)} and "
                               f"{_tname(self.weight.dtype)}")
        return torch.ops.npu.linear(input, self.weight, self.bias)


def _tname(dt: torch.dtype) -> str:
    """torch's short dtype name in messages: Float, Long, BFloat16 ..."""
    return {torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.int64: "Long",
            torch.int32: "Int", torch.float64: "Double"}.get(dt, str(dt))


class Embedding(torch.nn.Embedding):
    """torch.nn.Embedding on `torch.ops.npu.embedding` (a gather kernel; the backward scatters on the
    device). max_norm (in-place renormalisation of rows) and sparse=True are not supported and raise
    NotImplementedError at construction."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        why = self.unsupported(self)
        if why:
            raise NotImplementedError(f"Embedding: {why}")

    @staticmethod
    def unsupported(m: torch.nn.Module) -> str | None:
        """Why a torch.nn.Embedding with these settings cannot run on the op (None: it can)."""
        assert isinstance(m, torch.nn.Embedding)
        if m.max_norm is not None:
            return "max_norm (in-place renormalisation of weight) is not supported by torch.ops.npu.embedding"
        if m.sparse:
            return "sparse=True (a sparse gradient) is not supported by torch.ops.npu.embedding"
        return None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                                       self.scale_grad_by_freq, self.sparse)
