"""Registry entries (op_library.registry) for op_library.nn."""
from __future__ import annotations
