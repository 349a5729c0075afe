"""Source locations and the one error type users see: `KernelError`.

Every mistake in a kernel, whether found by the parser, the checker, the scheduler or at
launch, is a `KernelError` rendered the same way::

    vadd.py:12:16: error[E204]: dtype mismatch: f32 + f16
        z[t] = x[t] + h[t]
               ^~~~~~~~~~~
    hint: cast one side first, e.g. dsl.cast(h[t], f32)
"""
from __future__ import annotations

import linecache
import os
from dataclasses import dataclass, field

_SOURCES: dict[str, list[str]] = {}


def register_source(filename: str, text: str) -> None:
    """Make `text` the source of `filename` for error rendering (kernels built from strings)."""
    _SOURCES[filename] = text.splitlines()


def source_line(filename: str, line: int) -> str | None:
    lines = _SOURCES.get(filename)
    if lines is not None:
        return lines[line - 1] if 0 < line <= len(lines) else None
    text = linecache.getline(filename, line)
    return text.rstrip("\n") if text else None


@dataclass(frozen=True)
class SourceLoc:
    """A position in the user's file: 1-based line and column, optional end column on the same line."""

    file: str
    line: int
    col: int
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


UNKNOWN = SourceLoc("<unknown>", 0, 0)


@dataclass(eq=False)
class KernelError(Exception):
    """A user-facing error with a code, a location, the offending source line and a hint."""

    code: str
    message: str
    loc: SourceLoc | None = None
    hint: str | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(self.render())

    def render(self) -> str:
        where = f"{self.loc}: " if self.loc is not None and self.loc.line > 0 else ""
        out = [f"{where}error[{self.code}]: {self.message}"]
        if self.loc is not None and self.loc.line > 0:
            text = source_line(self.loc.file, self.loc.line)
            if text is not None:
                out.append("    " + text.expandtabs(4).rstrip())
                col = max(self.loc.col, 1)
                width = 1
                if self.loc.end_col is not None and self.loc.end_col > col:
                    width = len(text[col - 1:self.loc.end_col - 1].expandtabs(4))
                pad = len(text[:col - 1].expandtabs(4))  # columns count a tab as one character
                out.append("    " + " " * pad + "^" + "~" * (width - 1))
        out.extend(f"note: {n}" for n in self.notes)
        if self.hint:
            out.append(f"hint: {self.hint}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.render()


def debug_enabled() -> bool:
    return os.environ.get("VINCI_DEBUG", "") not in ("", "0")


def fmt_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; exact bytes are always given too by callers that need them."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"
