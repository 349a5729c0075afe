"""The table of error codes (`dsl.errors.CODES`) stays in step with the sources and the README:
every code raised is listed, every listed code is raised, and the README names every one."""
from __future__ import annotations

import re
from pathlib import Path

from dsl.errors import CODES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dsl", "compiler", "simulator", "op_library")
TABLE = ROOT / "dsl" / "errors.py"  # defines the codes; it does not use them
# A code in a string literal: "E404" or 'E404' (not `noqa: E402`, not hex such as 0x3E70...).
CODE_LITERAL = re.compile(r"""["'](E\d{3})["']""")
CODE_WORD = re.compile(r"\bE\d{3}\b")


def codes_in_sources() -> dict[str, list[str]]:
    """Each code found in a string literal of the packages -> the places ('file:line') it appears."""
    found: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path == TABLE:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                for code in CODE_LITERAL.findall(line):
                    found.setdefault(code, []).append(f"{path.relative_to(ROOT)}:{n}")
    return found


def readme_errors_section() -> str:
    """The README's DSL-tour text from its **Errors** paragraph up to the next heading."""
    text = (ROOT / "README.md").read_text()
    start = text.index("**Errors** look like this")
    end = text.find("\n## ", start)
    return text[start:] if end < 0 else text[start:end]


def test_codes_are_well_formed() -> None:
    for code, meaning in CODES.items():
        assert re.fullmatch(r"E\d{3}", code), code
        assert meaning and "\n" not in meaning, code


def test_every_raised_code_is_listed() -> None:
    used = codes_in_sources()
    assert used, "the scan found no codes at all: the pattern or the paths are wrong"
    missing = {code: places for code, places in used.items() if code not in CODES}
    assert not missing, f"codes raised but missing from dsl.errors.CODES: {missing}"


def test_every_listed_code_is_raised() -> None:
    unused = sorted(set(CODES) - set(codes_in_sources()))
    assert not unused, f"codes in dsl.errors.CODES that nothing raises: {unused}"


def test_readme_lists_every_code() -> None:
    section = readme_errors_section()
    named = set(CODE_WORD.findall(section))
    assert not sorted(set(CODES) - named), f"codes missing from the README's Errors table: {sorted(set(CODES) - named)}"
    assert not sorted(named - set(CODES)), f"README names codes not in dsl.errors.CODES: {sorted(named - set(CODES))}"
