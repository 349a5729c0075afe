"""Registry entries (op_library.registry) for op_library.norm."""
from __future__ import annotations
