"""The torch.compile backend "npu": `torch.compile(model, backend="npu")`.

Importing this module registers the backend with dynamo (it is not imported by `import torch_bridge`,
because importing torch._dynamo costs about 2 s; `import torch_bridge.compile` first, or pass
`backend=torch_bridge.compile.npu_backend` directly).

What it does today: aot_autograd captures the forward and the joint backward as fx graphs in which every
torch.ops.npu op stays one opaque call (its fake kernel gives the shapes; its backward is the registered
`torch.ops.npu.<op>_backward` op), and the backend runs those graphs as they are, boxed, without
decompositions or codegen. Fusion of neighbouring npu ops into one DSL kernel is a later issue's work;
`graphs()` already lists, per compiled graph, which npu ops it calls and which other (aten) ops are left
in it, i.e. what still runs on stock torch inside a compiled step.

Also tested (tests/torch_bridge/test_compile.py): backend="aot_eager" and backend="inductor" (the npu
ops stay extern calls to their CPU impls; inductor generates C++ only for the aten ops around them,
so it needs a C++ compiler: g++ on this host).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch._dynamo
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

__all__ = ["npu_backend", "GraphInfo", "graphs", "clear_graphs"]


@dataclass
class GraphInfo:
    """One compiled fx graph: 'forward' or 'backward', its npu ops and its other ops (name -> count)."""
    kind: str
    npu_ops: Counter[str] = field(default_factory=Counter)
    other_ops: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        npu = ", ".join(f"{k} x{n}" for k, n in sorted(self.npu_ops.items())) or "-"
        other = ", ".join(f"{k} x{n}" for k, n in sorted(self.other_ops.items())) or "-"
        return f"{self.kind}: npu ops {npu}; other ops {other}"


_GRAPHS: list[GraphInfo] = []
# aten ops that only reshape / view or route values: not computation left on stock torch
_PASSIVE = {"view", "_unsafe_view", "reshape", "expand", "permute", "t", "transpose", "squeeze", "unsqueeze",
            "select", "slice", "alias", "detach", "getitem", "clone", "contiguous", "split", "chunk",
            "as_strided", "unbind", "empty", "empty_like", "view_as", "flatten"}


def graphs() -> list[GraphInfo]:
    """The graphs compiled by the npu backend so far in this process (oldest first)."""
    return list(_GRAPHS)


def clear_graphs() -> None:
    """Forget the recorded graphs."""
    _GRAPHS.clear()


def _describe(gm: torch.fx.GraphModule, kind: str) -> GraphInfo:
    info = GraphInfo(kind)
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        t = node.target
        if isinstance(t, torch._ops.OpOverload):
            ns, name = t.namespace, t._schema.name.split("::")[-1]
            if ns == "npu":
                info.npu_ops[name] += 1
            elif name not in _PASSIVE:
                info.other_ops[f"{ns}.{name}"] += 1
        elif getattr(t, "__name__", "") not in _PASSIVE:
            info.other_ops[getattr(t, "__name__", str(t))] += 1
    return info


def _runner(kind: str) -> Callable[[torch.fx.GraphModule, Sequence[Any]], Any]:
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        _GRAPHS.append(_describe(gm, kind))
        return make_boxed_func(gm.forward)   # run the captured graph as it is: npu ops stay opaque calls
    return compile_graph


npu_backend = aot_autograd(fw_compiler=_runner("forward"), bw_compiler=_runner("backward"))
"""The backend callable (what backend="npu" names)."""

if "npu" not in torch._dynamo.list_backends(exclude_tags=()):
    torch._dynamo.register_backend(npu_backend, name="npu")
