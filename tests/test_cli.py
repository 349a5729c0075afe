"""`vinci compile | profile` from the command line's entry point: output and errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.cli import main

ROOT = Path(__file__).resolve().parent.parent
VADD = str(ROOT / "examples" / "kernels" / "vadd.py") + "::vadd"
MATMUL = str(ROOT / "examples" / "kernels" / "matmul.py") + "::matmul"


def run(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compile_emits_each_stage(capsys) -> None:  # type: ignore[no-untyped-def]
    shapes = ("--shape", "x=4096", "--shape", "y=4096", "--shape", "z=4096")
    _, core, _ = run(capsys, "compile", VADD, *shapes)
    assert "COPY_GM_UB" in core and "set_flag(MTE2->V" in core
    _, llvm, _ = run(capsys, "compile", VADD, *shapes, "--emit", "llvm")
    from compiler.host import target

    lanes = target().vector_bits // 32
    assert "@vinci_vadd_core(" in llvm and f"<{lanes} x float>" in llvm  # optimised, vectorised for the target
    _, asm, _ = run(capsys, "compile", VADD, *shapes, "--emit", "asm")
    assert "ret" in asm


def test_profile_reports_cycles_and_writes_a_trace(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "mm.json"
    code, out, _ = run(capsys, "profile", MATMUL, "--shape", "a=256,256", "--shape", "b=256,256",
                       "--shape", "c=256,256", "--dtype", "a=f16", "--dtype", "b=f16", "--dtype", "c=f32",
                       "--cores", "4", "--trace", str(trace))
    assert code == 0
    assert "matmul[4] on ascend910b1" in out and "efficiency" in out and "TFLOPS" in out
    events = json.loads(trace.read_text())
    names = {e.get("name") for e in (events["traceEvents"] if isinstance(events, dict) else events)}
    assert {"MMAD", "COPY_GM_L1", "COPY_L1_L0A"} <= names


@pytest.mark.parametrize("target,message", [
    ("examples/kernels/vadd.py", "expected FILE::KERNEL"),
    ("nowhere.py::k", "no such file"),
    (VADD.replace("::vadd", "::nope"), "has no kernel 'nope' (kernels: vadd, vadd_any)"),
])
def test_bad_targets_say_what_is_wrong(capsys, target: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as ei:
        main(["compile", target])
    assert message in str(ei.value)


def test_a_file_that_is_not_python(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "kernels.txt"
    f.write_text("not python")
    with pytest.raises(SystemExit, match="cannot import .* as a Python module"):
        main(["compile", f"{f}::k"])


def test_kernel_errors_are_rendered_not_raised(capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run(capsys, "compile", VADD, "--shape", "x=4096", "--shape", "y=4096", "--shape", "z=4096",
                       "--dtype", "x=f32", "--const", "TILE=100000")
    assert code == 1
    assert "error[E301]" in err and "vadd.py:" in err and "^" in err
