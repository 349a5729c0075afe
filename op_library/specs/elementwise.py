"""Registry entries (op_library.registry) for op_library.elementwise."""
from __future__ import annotations
