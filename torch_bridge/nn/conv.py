"""Conv2d and the 2-D pools on torch.ops.npu.conv2d / max_pool2d / avg_pool2d / adaptive_avg_pool2d."""
from __future__ import annotations

import torch

__all__ = ["Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d"]


def _pair(v: int | tuple[int, ...]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _batched(input: torch.Tensor, what: str) -> tuple[torch.Tensor, bool]:
    """(4-D input, was unbatched): torch takes (C, H, W) too; the kernels take (N, C, H, W)."""
    if input.dim() == 3:
        return input.unsqueeze(0), True
    if input.dim() != 4:
        raise RuntimeError(f"Expected 3D (unbatched) or 4D (batched) input to {what}, but got input of size: "
                           f"{list(input.shape)}")
    return input, False


class Conv2d(torch.nn.Conv2d):
    """torch.nn.Conv2d on `torch.ops.npu.conv2d`. padding='valid' / 'same' become explicit padding
    (an even kernel's asymmetric 'same' padding by `torch.ops.npu.pad` first, as torch does);
    padding_mode other than 'zeros' is not supported (NotImplementedError at construction)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        why = self.unsupported(self)
        if why:
            raise NotImplementedError(f"Conv2d: {why}")

    @staticmethod
    def unsupported(m: torch.nn.Module) -> str | None:
        """Why a torch.nn.Conv2d with these settings cannot run on the op (None: it can)."""
        assert isinstance(m, torch.nn.Conv2d)
        if m.padding_mode != "zeros":
            return f"padding_mode={m.padding_mode!r} is not supported (torch.ops.npu.pad has constant mode only)"
        return None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        input, unbatched = _batched(input, "conv2d")
        pad: tuple[int, int] = (0, 0)
        if self.padding == "valid":
            pass
        elif self.padding == "same":
            total = [d * (k - 1) for d, k in zip(_pair(self.dilation), _pair(self.kernel_size), strict=True)]
            lo = [t // 2 for t in total]
            if any(t % 2 for t in total):   # asymmetric: the extra row / column goes after, as torch
                input = torch.ops.npu.pad(input, [lo[1], total[1] - lo[1], lo[0], total[0] - lo[0]])
                lo = [0, 0]
            pad = (lo[0], lo[1])
        else:
            pad = _pair(self.padding)  # type: ignore[arg-type]
        y = torch.ops.npu.conv2d(input, self.weight, self.bias, list(_pair(self.stride)), list(_pair(pad)),
                                 list(_pair(self.dilation)), self.groups)
        return y.squeeze(0) if unbatched else y


class MaxPool2d(torch.nn.MaxPool2d):
    """torch.nn.MaxPool2d on `torch.ops.npu.max_pool2d` (which always returns the indices too:
    return_indices picks whether the module does)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        input, unbatched = _batched(input, "max_pool2d")
        ks = list(_pair(self.kernel_size))
        stride = list(_pair(self.stride)) if self.stride is not None else ks
        y, idx = torch.ops.npu.max_pool2d(input, ks, stride, list(_pair(self.padding)), list(_pair(self.dilation)),
                                          self.ceil_mode)
        if unbatched:
            y, idx = y.squeeze(0), idx.squeeze(0)
        return (y, idx) if self.return_indices else y


class AvgPool2d(torch.nn.AvgPool2d):
    """torch.nn.AvgPool2d on `torch.ops.npu.avg_pool2d`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        input, unbatched = _batched(input, "avg_pool2d")
        ks = list(_pair(self.kernel_size))
        stride = list(_pair(self.stride)) if self.stride is not None else ks
        y = torch.ops.npu.avg_pool2d(input, ks, stride, list(_pair(self.padding)), self.ceil_mode,
                                     self.count_include_pad, self.divisor_override)
        return y.squeeze(0) if unbatched else y


class AdaptiveAvgPool2d(torch.nn.AdaptiveAvgPool2d):
    """torch.nn.AdaptiveAvgPool2d on `torch.ops.npu.adaptive_avg_pool2d` (None in output_size keeps
    the input's size, as torch)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        osz = self.output_size if isinstance(self.output_size, (tuple, list)) else (self.output_size,) * 2
        size = [int(input.shape[-2 + i]) if s is None else int(s) for i, s in enumerate(osz)]
        return torch.ops.npu.adaptive_avg_pool2d(input, size)
