"""The `vinci` command: compile (dump any stage), profile (random inputs on the timing model), tune, demo."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
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


def check_names(k: Any, shapes: dict[str, str], dtypes: dict[str, str], consts: dict[str, str]) -> None:
    """Every --shape / --dtype names a tensor parameter of `k`, every --const another parameter."""
    gm = [d.name for d in k.decls if d.kind == "gm"]
    other = [d.name for d in k.decls if d.kind != "gm"]
    for flag, given, allowed, what in (("--shape", shapes, gm, "tensor"), ("--dtype", dtypes, gm, "tensor"),
                                       ("--const", consts, other, "Const or scalar")):
        for name in given:
            if name not in allowed:
                also = f"; '{name}' is a tensor: give --shape {name}=DIMS" if name in gm else ""
                raise SystemExit(f"vinci: {flag} {name}=...: {k.__name__} has no {what} parameter {name!r} "
                                 f"({what} parameters: {', '.join(allowed) or 'none'}){also}")


def require_shapes(k: Any, shapes: dict[str, str]) -> None:
    """Every tensor parameter needs --shape: the CLI never invents one."""
    missing = [d.name for d in k.decls if d.kind == "gm" and d.name not in shapes]
    if missing:
        which = ", ".join(repr(n) for n in missing)
        give = " ".join(f"--shape {n}=DIMS" for n in missing)
        raise SystemExit(f"vinci: no shape for tensor parameter{'s' if len(missing) > 1 else ''} {which} of "
                         f"{k.__name__}: give {give} (DIMS as in --shape {missing[0]}=1024,1024)")


def _dims(name: str, text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(x) for x in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not shape or any(n < 0 for n in shape):
        raise SystemExit(f"vinci: --shape {name}={text}: DIMS are sizes >= 0 separated by commas, "
                         f"e.g. --shape {name}=1024,1024")
    return shape


def make_args(k: Any, shapes: dict[str, str], dtypes: dict[str, str], consts: dict[str, str],
              seed: int = 0) -> tuple[list[Any], dict[str, Any]]:
    """Random inputs for every GM parameter (shape from --shape, required; dtype from the annotation,
    else --dtype, else f32)."""
    import dsl.types as T

    check_names(k, shapes, dtypes, consts)
    require_shapes(k, shapes)
    rng = np.random.default_rng(seed)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for d in k.decls:
        if d.kind == "gm":
            shape = _dims(d.name, shapes[d.name])
            if d.name in dtypes and dtypes[d.name] not in T.DTYPES:
                raise SystemExit(f"vinci: --dtype {d.name}={dtypes[d.name]}: unknown dtype "
                                 f"(one of {', '.join(T.DTYPES)})")
            dt = T.DTYPES[dtypes[d.name]] if d.name in dtypes else (d.dtype or T.f32)
            if dt.is_float:
                a = rng.standard_normal(shape).astype(np.float32).astype(dt.np)
            else:
                a = rng.integers(-100, 100, size=shape).astype(dt.np)
            args.append(a)
        elif d.name in consts:
            args.append(_value(consts[d.name]))
        elif d.has_default:
            args.append(d.default)
        else:
            raise SystemExit(f"vinci: give a value for '{d.name}' with --const {d.name}=VALUE")
    return args, kwargs


def cmd_compile(ns: argparse.Namespace) -> int:
    k = load_kernel(ns.target)
    if ns.buffers:
        k = k.with_options(buffers=ns.buffers)
    shapes, dtypes, consts = _kv(ns.shape, "--shape"), _kv(ns.dtype, "--dtype"), _kv(ns.const, "--const")
    if ns.emit == "ast":  # the parsed kernel: the same for every shape, dtype and Const
        from dsl import ast as A

        check_names(k, shapes, dtypes, consts)
        print(A.dump(k.fdef))
        return 0
    args, kwargs = make_args(k, shapes, dtypes, consts)
    print(k.emit(ns.emit, *args, config=ns.config, **kwargs))  # tile and core dumps: sizes for these shapes
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


def cmd_matrix(argv: list[str]) -> int:
    """`vinci matrix ...`: delegates to op_library.matrix, imported here (it loads torch and every op)
    and by name, so that mypy does not follow it into op_library's DSL kernel bodies (left out of
    type checking on purpose: see pyproject.toml)."""
    return int(importlib.import_module("op_library.matrix").main(argv))


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
        sp.add_argument("--buffers", type=int, default=None, help="1 or 2: buffers per tile (default 2, or 3 for a tile loaded, rewritten in place and stored)")

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
    # listed for --help; `vinci matrix ...` is dispatched below, its options live in op_library.matrix
    sub.add_parser("matrix", help="run the op test matrix (op x dtype x case) against torch; "
                   "vinci matrix --help for its options")
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["matrix"]:
        return cmd_matrix(args[1:])
    ns = p.parse_args(argv)
    try:
        return int(ns.fn(ns) or 0)
    except KernelError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except BrokenPipeError:  # `vinci compile ... | head`: the reader left, no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
