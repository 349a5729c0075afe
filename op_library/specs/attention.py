"""Registry entries (op_library.registry) for op_library.attention."""
from __future__ import annotations
