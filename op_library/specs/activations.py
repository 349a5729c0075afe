"""Registry entries (op_library.registry) for op_library.activations."""
from __future__ import annotations
