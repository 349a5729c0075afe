"""Shared test helpers: kernels from source text in real files, so errors point at real lines."""
from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "kernels"))
os.environ.setdefault("VINCI_CACHE_DIR", str(ROOT / ".vinci_cache" / "tests"))

_counter = itertools.count()

HEADER = "import dsl\nfrom dsl import GM, Const, f32, f16, bf16, i32, i8\n\n"


def load_source(tmp_path: Path, src: str, name: str | None = None):  # type: ignore[no-untyped-def]
    """Write `src` (a module with kernels) to a file and import it; returns the module."""
    mod_name = f"k_{next(_counter)}"
    path = tmp_path / f"{mod_name}.py"
    path.write_text(HEADER + textwrap.dedent(src))
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.fixture
def source(tmp_path):  # type: ignore[no-untyped-def]
    return lambda src: load_source(tmp_path, src)


def pytest_addoption(parser):  # type: ignore[no-untyped-def]
    parser.addoption("--matrix-full", action="store_true", default=False,
                     help="op test matrix (tests/op_library/test_matrix.py): every case, the large ones too "
                          "(default: the quick cases; VINCI_MATRIX=full does the same)")
