"""Operators written in the DSL (forward and backward), with torch's names and signatures.

Each area is one module: the cube ops `matmul`, `bmm`, `linear` (op_library.matmul), `conv2d`
(op_library.conv), pooling (op_library.pool), elementwise arithmetic with broadcasting
(op_library.elementwise), unary math and activations (op_library.activations), reductions
(op_library.reduce), softmax and normalisations (op_library.norm), attention (op_library.attention),
embedding, losses and dropout (op_library.nn), optimizer steps (op_library.optim) and data movement
(op_library.data). Every public op is importable from here: `op_library.softmax(x, dim=-1)`.

The backward of a differentiable op `foo` is `foo_backward(...)` in the same module, and its
registry entry (`op_library.registry.get("foo").backward(grad, out, args, kwargs)`) is the one way
the matrix and autograd reach it. `op_library.registry` holds one `OpSpec` per op; `op_library.matrix`
runs them all against torch (`vinci matrix`).
"""
from typing import Any

from op_library.activations import *  # noqa: F403
from op_library.attention import *  # noqa: F403
from op_library.conv import *  # noqa: F403
from op_library.data import *  # noqa: F403
from op_library.elementwise import *  # noqa: F403
from op_library.matmul import *  # noqa: F403
from op_library.nn import *  # noqa: F403
from op_library.norm import *  # noqa: F403
from op_library.optim import *  # noqa: F403
from op_library.pool import *  # noqa: F403
from op_library.reduce import *  # noqa: F403

_REGISTRY_NAMES = ("REGISTRY", "OpSpec", "Case", "register", "get")


def __getattr__(name: str) -> Any:
    """The registry's names, imported on first use."""
    if name in _REGISTRY_NAMES:
        from op_library import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'op_library' has no attribute {name!r}")
