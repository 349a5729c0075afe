"""`vinci tune FILE::KERNEL --shape ...`: autotune a kernel on random inputs and print the ranked table.

    vinci tune examples/kernels/matmul.py::matmul --shape a=2048,2048 --shape b=2048,2048 \\
          --shape c=2048,2048 --dtype a=f16 --dtype b=f16 --dtype c=f16 \\
          --space BM=64,128,256 --space BN=64,128,256 --space BK=32,64,128

A kernel decorated with `@dsl.autotune` brings its own search space; `--space` replaces it (and
makes any kernel tunable); `--const` pins a value. The choice is saved like any autotune choice, so
a later launch of the decorated kernel on the same shape class uses it. The command's arguments
are parsed in `compiler.cli` (shared with compile and profile); this module does the tuning, and
`tuned_args` leaves an autotuned kernel's choices out of the random inputs `vinci profile` makes.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

MakeArgs = Callable[[Any, dict[str, str]], tuple[list[Any], dict[str, Any]]]


def add_arguments(t: argparse.ArgumentParser) -> None:
    """The options `vinci tune` has beyond those it shares with compile and profile."""
    t.add_argument("--space", action="append", metavar="NAME=V1,V2,...",
                   help="values to try for a Const parameter (repeatable; replaces the kernel's @dsl.autotune space)")
    t.add_argument("--cores", type=int, default=None, help="block_dim (default: all cores of the config)")
    t.add_argument("--force", action="store_true", help="profile again even if a choice is cached")
    t.add_argument("--top", type=int, default=None, metavar="N", help="print only the N best candidates")


def tuned_args(k: Any, consts: dict[str, str], make_args: MakeArgs) -> tuple[list[Any], dict[str, Any]]:
    """`make_args(k, consts)` for the CLI's random inputs, with the Const values an autotuned kernel
    chooses itself left out (those given with --const stay); positional for any other kernel."""
    from dsl.autotune import Autotuned

    if not isinstance(k, Autotuned):
        return make_args(k, consts)
    # every Const without a default needs a value to build the arguments: the tuned ones get a
    # placeholder, then leave the argument list
    first = k.candidates[0]
    filler = {n: str(first[n]) for n in k.tuned if n not in consts and n in first}
    args, kwargs = make_args(k, {**filler, **consts})
    named = {**dict(zip(k.names, args)), **kwargs}
    for n in k.tuned:
        if n not in consts:
            named.pop(n, None)
    return [], named


def tune_command(k: Any, space: dict[str, list[Any]], consts: dict[str, str], make_args: MakeArgs, block_dim: int,
                 config: str | None, force: bool = False, top: int | None = None) -> int:
    """Tune kernel `k` (a `dsl.Kernel`; `space` replaces or supplies its search space) on the inputs
    `make_args(kernel, consts)` builds, with a progress bar, and print the ranked table."""
    from tqdm import tqdm

    from dsl.autotune import Autotuned, Trial, candidates

    base = k.base if isinstance(k, Autotuned) else k
    if space:
        tuned = Autotuned(base, candidates(base, space, None), None)
    elif isinstance(k, Autotuned):
        tuned = k
    else:
        raise SystemExit(f"vinci: {base.__name__} is not autotuned: give a search space, e.g. --space NAME=1,2,4")
    _, named = tuned_args(tuned, consts, make_args)
    launch = tuned[block_dim] if config is None else tuned[block_dim].on(config)

    total = len(tuned.candidates_for((), named))
    with tqdm(total=total, desc=f"tuning {base.__name__}", unit="config", leave=False) as bar:
        best: list[int] = []

        def progress(trial: Trial) -> None:
            if trial.cycles is not None and (not best or trial.cycles < best[0]):
                best[:] = [trial.cycles]
                bar.set_postfix_str(f"best {trial.cycles} cycles")
            bar.update(1)

        tuning = launch.tune((), named, force=force, progress=progress)
    print(tuning.table(top))
    return 0
