"""Registry entries (op_library.registry) for op_library.reduce."""
from __future__ import annotations
