"""Operators written in the DSL (forward and backward) and the op test matrix."""
