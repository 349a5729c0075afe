"""Operators written in the DSL (forward and backward), with their reference semantics.

Offers the cube ops: `matmul`, `bmm`, `linear` and their backwards (`op_library.matmul`).
"""
from op_library.matmul import bmm, bmm_backward, linear, linear_backward, matmul, matmul_backward

__all__ = ["matmul", "matmul_backward", "bmm", "bmm_backward", "linear", "linear_backward"]
