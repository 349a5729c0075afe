"""Registry entries (op_library.registry) for op_library.optim."""
from __future__ import annotations
