"""Operators written in the DSL (forward and backward), with their reference semantics.

Offers the cube ops `matmul`, `bmm`, `linear` (op_library.matmul), `conv2d` by img2col onto the
cube (op_library.conv), `max_pool2d` / `avg_pool2d` (op_library.pool), each with its backward.

`op_library.registry` holds one `OpSpec` per op (`REGISTRY`, `register`, `get`); `op_library.matrix`
runs them all against torch (`vinci matrix`). Both import torch, so they load on first use.
"""
from typing import Any

from op_library.conv import conv2d, conv2d_backward
from op_library.matmul import bmm, bmm_backward, linear, linear_backward, matmul, matmul_backward
from op_library.pool import avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward

__all__ = ["matmul", "matmul_backward", "bmm", "bmm_backward", "linear", "linear_backward", "conv2d",
           "conv2d_backward", "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward", "REGISTRY", "OpSpec", "Case", "register", "get"]

_REGISTRY_NAMES = ("REGISTRY", "OpSpec", "Case", "register", "get")


def __getattr__(name: str) -> Any:
    """The registry's names, imported on first use (they need torch; the ops do not)."""
    if name in _REGISTRY_NAMES:
        from op_library import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'op_library' has no attribute {name!r}")
