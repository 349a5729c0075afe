"""Registry entries (op_library.registry) for op_library.data."""
from __future__ import annotations
