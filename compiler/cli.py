"""The `vinci` command: compile (dump any stage), profile (random inputs on the timing model), tune, demo."""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dsl.errors import KernelError


def load_kernel(target: str) -> Any:
    """'path/to/file.py::name' -> the dsl.Kernel object."""
    from dsl.kernel import Kernel

    if "::" not in target:
        raise SystemExit(f"vinci: expected FILE::KERNEL, got {target!r}")
    path, name = target.rsplit("::", 1)
    p = Path(path)
    if not p.exists():
        raise SystemExit(f"vinci: no such file: {path}")
    sys.path.insert(0, str(p.resolve().parent))
    spec = importlib.util.spec_from_file_location(p.stem, p)
    if spec is None or spec.loader is None:  # not a Python source file
        raise SystemExit(f"vinci: cannot import {path} as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[p.stem] = mod
    spec.loader.exec_module(mod)
    k = getattr(mod, name, None)
    if not isinstance(k, Kernel):
        kernels = [n for n, v in vars(mod).items() if isinstance(v, Kernel)]
        raise SystemExit(f"vinci: {path} has no kernel {name!r} (kernels: {', '.join(kernels) or 'none'})")
    return k


def _kv(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise SystemExit(f"vinci: {what} must be NAME=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _value(v: str) -> Any:
    import dsl.types as T

    if v in T.DTYPES:
        return T.DTYPES[v]
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(v, v)


def make_args(k: Any, shapes: dict[str, str], dtypes: dict[str, str], consts: dict[str, str],
              seed: int = 0) -> tuple[list[Any], dict[str, Any]]:
    """Random inputs for every GM parameter (shape from --shape, dtype from the annotation or --dtype)."""
    import dsl.types as T

    rng = np.random.default_rng(seed)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for d in k.decls:
        if d.kind == "gm":
            dims = shapes.get(d.name)
            if dims is None:
                dims = "1" if d.rank in (None, 1) else ",".join(["1"] * d.rank)
            shape = tuple(int(x) for x in dims.replace("x", ",").split(",") if x)
            dt = T.DTYPES[dtypes[d.name]] if d.name in dtypes else (d.dtype or T.f32)
            if dt.is_float:
                a = rng.standard_normal(shape).astype(np.float32).astype(dt.np)
            else:
                a = rng.integers(-100, 100, size=shape).astype(dt.np)
            args.append(a)
        elif d.name in consts:
            kwargs[d.name] = _value(consts[d.name])
            args.append(kwargs.pop(d.name))
        elif d.has_default:
            args.append(d.default)
        else:
            raise SystemExit(f"vinci: give a value for '{d.name}' with --const {d.name}=VALUE")
    return args, kwargs


def cmd_compile(ns: argparse.Namespace) -> int:
    k = load_kernel(ns.target)
    if ns.buffers:
        k = k.with_options(buffers=ns.buffers)
    args, kwargs = make_args(k, _kv(ns.shape, "--shape"), _kv(ns.dtype, "--dtype"), _kv(ns.const, "--const"))
    print(k.emit(ns.emit, *args, config=ns.config, **kwargs))
    return 0


def cmd_profile(ns: argparse.Namespace) -> int:
    from compiler.tune import tuned_args

    k = load_kernel(ns.target)
    if ns.buffers:
        k = k.with_options(buffers=ns.buffers)
    shapes, dtypes = _kv(ns.shape, "--shape"), _kv(ns.dtype, "--dtype")
    args, kwargs = tuned_args(k, _kv(ns.const, "--const"), lambda kern, consts: make_args(kern, shapes, dtypes, consts))
    launch = k[ns.cores] if ns.cores else k[_cores(ns.config)]
    if ns.config:
        launch = launch.on(ns.config)
    run = launch.profile(*args, **kwargs)
    print(f"{k.__name__}[{run.block_dim}] on " + run.report())
    if ns.trace:
        run.save_trace(ns.trace)
        print(f"trace written to {ns.trace} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def cmd_tune(ns: argparse.Namespace) -> int:
    from compiler.tune import tune_command

    k = load_kernel(ns.target)
    if ns.buffers:
        k = k.with_options(buffers=ns.buffers)
    space = {n: [_value(v) for v in vals.split(",") if v] for n, vals in _kv(ns.space, "--space").items()}
    shapes, dtypes = _kv(ns.shape, "--shape"), _kv(ns.dtype, "--dtype")
    return tune_command(k, space, _kv(ns.const, "--const"), lambda kern, consts: make_args(kern, shapes, dtypes, consts),
                        ns.cores or _cores(ns.config), ns.config, ns.force, ns.top)


def _cores(config: str | None) -> int:
    from compiler.config import CONFIG
    from simulator.config import load_config

    return load_config(config or CONFIG.hw).cores


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vinci", description="Vinci: kernels for a simulated Da Vinci-style AI core")
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("target", help="FILE::KERNEL")
        sp.add_argument("--shape", action="append", metavar="NAME=DIMS", help="e.g. x=1024,1024 (repeatable)")
        sp.add_argument("--dtype", action="append", metavar="NAME=DTYPE", help="for GM params without one")
        sp.add_argument("--const", action="append", metavar="NAME=VALUE", help="Const or scalar parameter value")
        sp.add_argument("--config", default=None, help="hardware config name or path (default ascend910b1)")
        sp.add_argument("--buffers", type=int, default=None, help="1 or 2: buffers per tile (default 2)")

    c = sub.add_parser("compile", help="compile a kernel and print one stage")
    common(c)
    c.add_argument("--emit", choices=("ast", "tile", "core", "llvm", "asm"), default="core")
    c.set_defaults(fn=cmd_compile)
    pr = sub.add_parser("profile", help="run a kernel on random inputs through the timing model")
    common(pr)
    pr.add_argument("--cores", type=int, default=None, help="block_dim (default: all cores of the config)")
    pr.add_argument("--trace", default=None, metavar="OUT.json", help="write a Chrome/Perfetto trace")
    pr.set_defaults(fn=cmd_profile)
    from compiler.tune import add_arguments as tune_arguments

    tu = sub.add_parser("tune", help="autotune a kernel's Const values on the timing model, print the ranked table")
    common(tu)
    tune_arguments(tu)
    tu.set_defaults(fn=cmd_tune)
    d = sub.add_parser("demo", help="compile, check and profile the example kernels")
    d.add_argument("--quick", action="store_true", help="smaller sizes")
    d.set_defaults(fn=lambda ns: __import__("compiler.demo", fromlist=["main"]).main(ns.quick))
    ns = p.parse_args(argv)
    try:
        return int(ns.fn(ns) or 0)
    except KernelError as e:
        print(e.render(), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
