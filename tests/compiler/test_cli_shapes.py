"""`vinci compile | profile | tune` need a shape for every tensor parameter (the CLI never invents
one; only `--emit ast`, the parsed kernel, works without), check the names it is given, and dump
the tile and core IR with sizes as numbers for the shapes given."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from compiler.cli import main

ROOT = Path(__file__).resolve().parents[2]
MATMUL = str(ROOT / "examples" / "kernels" / "matmul.py") + "::matmul"
VADD = str(ROOT / "examples" / "kernels" / "vadd.py") + "::vadd"
SOFTMAX = str(ROOT / "examples" / "kernels" / "softmax.py") + "::softmax"
MM_SHAPES = ("--shape", "a=64,32", "--shape", "b=32,48", "--shape", "c=64,48")


def cli(*argv: str, entry: bool = False) -> subprocess.CompletedProcess:
    """The command in a fresh process: `python -m compiler.cli`, or the installed `vinci` script."""
    exe = [str(Path(sys.executable).parent / "vinci")] if entry else [sys.executable, "-m", "compiler.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*exe, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def exits_with(argv: list[str], message: str) -> str:
    with pytest.raises(SystemExit) as ei:
        main(argv)
    text = str(ei.value)
    assert message in text, text
    return text


def test_the_issue_command_names_every_missing_shape() -> None:
    r = cli("compile", "examples/kernels/matmul.py::matmul", "--emit", "core")
    assert r.returncode != 0
    assert ("vinci: no shape for tensor parameters 'a', 'b', 'c' of matmul: give --shape a=DIMS --shape b=DIMS "
            "--shape c=DIMS") in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "out of range" not in r.stderr and r.stdout == ""


def test_the_vinci_entry_point_says_the_same() -> None:
    r = cli("profile", "examples/kernels/vadd.py::vadd", "--shape", "x=4096", "--shape", "y=4096", entry=True)
    assert r.returncode != 0
    assert "no shape for tensor parameter 'z' of vadd: give --shape z=DIMS" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("argv", [
    ["compile", MATMUL, "--emit", "tile"], ["compile", MATMUL, "--emit", "core"],
    ["compile", MATMUL, "--emit", "llvm"], ["compile", MATMUL, "--emit", "asm"], ["compile", MATMUL],
    ["profile", MATMUL, "--cores", "2"], ["tune", MATMUL, "--space", "BK=32,64"],
])
def test_every_stage_that_compiles_needs_every_shape(argv: list[str]) -> None:
    exits_with([*argv, "--shape", "a=64,32", "--shape", "b=32,48"],
               "no shape for tensor parameter 'c' of matmul: give --shape c=DIMS")


def test_the_ast_needs_no_shapes(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["compile", MATMUL, "--emit", "ast"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("FunctionDef(name='matmul'") and "shape" in out  # a.shape[0] from the source
    assert main(["compile", MATMUL, "--emit", "ast", *MM_SHAPES]) == 0
    assert capsys.readouterr().out == out  # the same text whatever the shapes


def test_core_dump_prints_sizes_for_the_shapes(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["compile", SOFTMAX, "--shape", "x=64,1000", "--shape", "y=64,1000", "--emit", "core"]) == 0
    core = capsys.readouterr().out
    buffers = [line for line in core.splitlines() if line.lstrip().startswith("buffer %")]
    assert buffers and all("shape" not in line and "numel" not in line for line in buffers), core
    # ROWS=4 rows of 1000 f32: 16000 bytes a slot (however many slots the placement gives it)
    assert any(re.search(r"\[4x1000\] in UB @ \d+ \(16000 B( x\d)?, row stride 1000\)", line) for line in buffers), core
    assert "x.shape" not in core and "y.shape" not in core, core
    assert "(16 // num_cores())" in core, core  # 64 rows / ROWS=4: sixteen tiles over the cores


def test_tile_dump_prints_sizes_for_the_shapes(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["compile", VADD, "--shape", "x=5000", "--shape", "y=5000", "--shape", "z=5000", "--emit",
                 "tile"]) == 0
    tile = capsys.readouterr().out
    assert "range(0, 3, 1)" in tile and "x.shape" not in tile, tile  # cdiv(5000, 2048) tiles


def test_the_python_api_dump_is_symbolic_only_without_shapes() -> None:
    import examples.kernels.softmax as sm
    from compiler.pipeline import emit
    from simulator.config import load_config

    x = np.zeros((8, 300), np.float32)
    assert "[4x300]" in sm.softmax.emit("core", x, x)
    values, infos = sm.softmax.bind((x, x), {})
    params, _ = sm.softmax.params_for(values, infos)
    symbolic = emit("core", sm.softmax.fdef, sm.softmax.env, params, {}, load_config("ascend910b1"))
    assert "[4xx.shape[1]]" in symbolic, symbolic


@pytest.mark.parametrize("extra,message", [
    (["--shape", "w=3,3"], "--shape w=...: matmul has no tensor parameter 'w' (tensor parameters: a, b, c)"),
    (["--dtype", "BM=f16"], "--dtype BM=...: matmul has no tensor parameter 'BM'"),
    (["--const", "a=3"], "--const a=...: matmul has no Const or scalar parameter 'a' (Const or scalar parameters: "
                         "BM, BN, BK); 'a' is a tensor: give --shape a=DIMS"),
    (["--dtype", "a=f64"], "--dtype a=f64: unknown dtype (one of f32, f16, bf16, i32, i8"),
])
def test_names_and_values_are_checked(extra: list[str], message: str) -> None:
    exits_with(["compile", MATMUL, *MM_SHAPES, *extra], message)


@pytest.mark.parametrize("dims", ["64,a", "", "-4,3", "64,,3"])
def test_bad_dims_say_how_to_write_them(dims: str) -> None:
    exits_with(["compile", MATMUL, "--shape", f"a={dims}", "--shape", "b=32,48", "--shape", "c=64,48"],
               f"--shape a={dims}: DIMS are sizes >= 0 separated by commas, e.g. --shape a=1024,1024")


def test_a_shape_of_the_wrong_rank_points_at_the_parameter(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "ranked.py"
    f.write_text(textwrap.dedent("""\
        import dsl
        from dsl import GM, f32


        @dsl.kernel
        def rows(x: GM[f32, 2], y: GM[f32, 2]):
            for r in dsl.tiles(x.shape[0], 4):
                y[r, :] = x[r, :] * 2.0
    """))
    code = main(["compile", f"{f}::rows", "--shape", "x=8", "--shape", "y=8,16"])
    err = capsys.readouterr().err
    assert code == 1
    first = err.splitlines()[0]
    assert first.startswith(f"{f}:6:10: error[E402]: argument 'x' has rank 1 but the kernel declares rank 2"), err
    assert "^" in err


def test_compile_imports_the_file_so_scripts_guard_their_main(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What the README says: `vinci compile` runs the module's top level; a guarded main does not run."""
    f = tmp_path / "script.py"
    f.write_text(textwrap.dedent("""\
        import dsl
        from dsl import GM, f32

        print("top level ran")


        @dsl.kernel
        def double(x: GM[f32], y: GM[f32]):
            for t in dsl.tiles(x.shape[0], 64):
                y[t] = x[t] * 2.0


        if __name__ == "__main__":
            print("main ran")
    """))
    r = cli("compile", f"{f}::double", "--shape", "x=100", "--shape", "y=100", "--emit", "tile")
    assert r.returncode == 0, r.stderr
    assert "top level ran" in r.stdout and "main ran" not in r.stdout
    assert "range(0, 2, 1)" in r.stdout, r.stdout
