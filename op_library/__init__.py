"""Operators written in the DSL (forward and backward), with their reference semantics.

Offers the cube ops `matmul`, `bmm`, `linear` (op_library.matmul), `conv2d` by img2col onto the
cube (op_library.conv), `max_pool2d` / `avg_pool2d` (op_library.pool), each with its backward.
"""
from op_library.conv import conv2d, conv2d_backward
from op_library.matmul import bmm, bmm_backward, linear, linear_backward, matmul, matmul_backward
from op_library.pool import avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward

__all__ = ["matmul", "matmul_backward", "bmm", "bmm_backward", "linear", "linear_backward", "conv2d",
           "conv2d_backward", "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward"]
