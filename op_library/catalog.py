"""The op catalogue: docs/ops.md made from the registry, so the list of ops, their signatures, dtypes
and backward never drift from the code.

`python -m op_library.catalog` rewrites docs/ops.md; `--check` exits 1 if the file is stale (the
test suite runs that).
"""
from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

import op_library
from op_library.registry import REGISTRY, OpSpec

OUT = Path(__file__).resolve().parent.parent / "docs" / "ops.md"

_DT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32", torch.int8: "i8",
       torch.int64: "i64", torch.bool: "bool"}


def _area(spec: OpSpec) -> str:
    mod = getattr(spec.fn, "__module__", "") or ""
    fn = getattr(op_library, spec.name, None)
    mod = getattr(fn, "__module__", mod) or mod
    return mod.split(".")[-1].removesuffix("_kernels")


def _signature(spec: OpSpec) -> str:
    fn = getattr(op_library, spec.name, spec.fn)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return f"{spec.name}(...)"
    E = inspect.Parameter.empty
    sig = sig.replace(parameters=[q.replace(annotation=E) for q in sig.parameters.values()], return_annotation=E)
    return f"{spec.name}{sig}"


def _summary(spec: OpSpec) -> str:
    fn = getattr(op_library, spec.name, spec.fn)
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n")[0].replace("\n", " ").replace("|", "\\|")


def render() -> str:
    areas: dict[str, list[OpSpec]] = {}
    for spec in sorted(REGISTRY.values(), key=lambda s: s.name):
        areas.setdefault(_area(spec), []).append(spec)
    lines = ["# The op library", "",
             "Made by `python -m op_library.catalog` from the registry (op_library/registry.py and",
             "op_library/specs/): every op, its signature as `op_library.<name>`, the dtypes the op test",
             "matrix checks, and whether it has a backward (`<name>_backward`, reached through",
             "`op_library.registry.get(name).backward`). Do not edit by hand.", "",
             f"{len(REGISTRY)} ops, {sum(s.backward is not None for s in REGISTRY.values())} with a backward.", ""]
    for area in sorted(areas):
        lines += [f"## {area}", "", "| op | dtypes | backward | what |", "|---|---|---|---|"]
        for s in areas[area]:
            dts = " ".join(_DT.get(d, str(d)) for d in s.dtypes)
            lines.append(f"| `{_signature(s)}` | {dts} | {'yes' if s.backward else '-'} | {_summary(s)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m op_library.catalog", description=__doc__)
    p.add_argument("--check", action="store_true", help="exit 1 if docs/ops.md is not what the registry makes")
    ns = p.parse_args(argv)
    text = render()
    if ns.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python -m op_library.catalog", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(REGISTRY)} ops)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
