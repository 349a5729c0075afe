"""The shape of the code: imports run one way (no circles), dsl/ reaches the compiler through the
`compiler` package alone, and no file grows into a mega-file.

The import graph is read from the AST of every module in dsl/, compiler/ and simulator/, one node
per module. An edge is a module-level import (what runs when the module is imported; imports
under `if TYPE_CHECKING:` never run and are left out) or a function-local one (runs on first
call). Both kinds must be free of circles: a function-local import that closes a circle only
moves the circle from import time to call time.
"""
from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dsl", "compiler", "simulator")
MAX_LINES = 800

def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the three packages."""
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


MODULES = modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _target(name: str) -> str | None:
    """The module of ours that importing `name` loads last (its longest known prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(module: str) -> Iterator[tuple[str, str, int]]:
    """(imported module, kind, line) for each import in `module`; kind is "module" (runs at import),
    "local" (inside a function) or "typing" (under `if TYPE_CHECKING:`, never runs)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, kind: str) -> Iterator[tuple[str, str, int]]:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from visit(child, "typing")
            for child in node.orelse:
                yield from visit(child, kind)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and kind == "module":
            kind = "local"
        if isinstance(node, ast.Import):
            for a in node.names:
                t = _target(a.name)
                if t is not None:
                    yield t, kind, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package up
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                t = f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else _target(base)
                if t is not None:
                    yield t, kind, node.lineno
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Name) and node.func.id == "__import__")
                   or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"))):
            t = _target(node.args[0].value)  # __import__("pkg.mod") / importlib.import_module("pkg.mod")
            if t is not None:
                yield t, "local" if kind == "module" else kind, node.lineno
        for child in ast.iter_child_nodes(node):
            yield from visit(child, kind)

    yield from visit(ast.parse(path.read_text(), str(path)), "module")


def graph(kinds: tuple[str, ...]) -> dict[str, dict[str, tuple[str, int]]]:
    """module -> {imported module: (kind, line)} over edges of the given kinds (module-level first)."""
    g: dict[str, dict[str, tuple[str, int]]] = {m: {} for m in MODULES}
    for m in MODULES:
        for t, kind, line in imports(m):
            if kind in kinds and t != m and (t not in g[m] or g[m][t][0] != "module"):
                g[m][t] = (kind, line)
    return g


def find_cycle(g: dict[str, dict[str, tuple[str, int]]]) -> list[str] | None:
    """One circle of `g` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for t in sorted(g[m]):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state:
                found = dfs(t)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state:
            found = dfs(m)
            if found:
                return found
    return None


def describe(cycle: list[str], g: dict[str, dict[str, tuple[str, int]]]) -> str:
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        kind, line = g[a][b]
        steps.append(f"  {MODULES[a].relative_to(ROOT)}:{line}  {a} -> {b}" + ("  (function-local)" if kind == "local" else ""))
    return "\n".join(steps)


def test_module_level_imports_have_no_circles() -> None:
    g = graph(("module",))
    cycle = find_cycle(g)
    assert cycle is None, "import circle at module level:\n" + describe(cycle, g)


def test_function_local_imports_close_no_circles() -> None:
    g = graph(("module", "local"))
    cycle = find_cycle(g)
    assert cycle is None, "import circle through function-local imports:\n" + describe(cycle, g)


def test_dsl_reaches_the_compiler_through_its_package() -> None:
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line}: imports {t}" + (f" ({kind})" if kind != "module" else "")
           for m in MODULES if m == "dsl" or m.startswith("dsl.")
           for t, kind, line in imports(m) if t.startswith("compiler.")]
    assert not bad, "dsl/ must import `compiler` (the package), never its modules:\n" + "\n".join(bad)


def test_no_file_over_the_limit() -> None:
    sizes = {p.relative_to(ROOT): len(p.read_text().splitlines()) for p in MODULES.values()}
    big = [f"{p}: {n} lines" for p, n in sorted(sizes.items()) if n > MAX_LINES]
    assert not big, f"files over {MAX_LINES} lines (split them along what they do):\n" + "\n".join(big)


def test_every_package_is_installed() -> None:
    """Each folder with an `__init__.py` is in pyproject's package list (else an install leaves it out)."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert packages <= listed, f"missing from [tool.setuptools] packages: {sorted(packages - listed)}"


def test_every_module_imports_first() -> None:
    """Each module imported first in a fresh set of packages: catches circles through package
    `__init__`s, which the graph (one node per module) does not show."""
    names = [m for m in MODULES if not m.endswith("__main__")]
    code = (
        "import importlib, sys, traceback\n"
        f"bad = []\nfor name in {names!r}:\n"
        f"    for m in [m for m in sys.modules if m.split('.')[0] in {PACKAGES!r}]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"
        "        bad.append(name + ':\\n' + traceback.format_exc(limit=-3))\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"modules that fail when imported first:\n{r.stdout}{r.stderr}"
