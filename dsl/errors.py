"""Source locations and the one error type users see: `KernelError`.

Every mistake in a kernel, whether found by the parser, the checker, the scheduler or at
launch, is a `KernelError` rendered the same way::

    vadd.py:12:16: error[E204]: dtype mismatch: f32 + f16
        z[t] = x[t] + h[t]
               ^~~~~~~~~~~
    hint: cast one side first, e.g. dsl.cast(h[t], f32)

`CODES` lists every code the compiler raises with what it means; the families are E1xx syntax,
E2xx language, E3xx memory placement, E4xx launch and bounds, E5xx cube, E6xx autotune.
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

# Every code raised in dsl/, compiler/, simulator/ and op_library/, one line each. The README's
# table is written from this and tests/dsl/test_error_codes.py keeps the three in step.
CODES: dict[str, str] = {
    # E1xx syntax: found by the parser, before anything is compiled
    "E100": "syntax error: what the parser expected (a missing ':', an unclosed bracket), a duplicate "
            "parameter or keyword argument, an invalid assignment target",
    "E101": "a Python statement kernels do not support (`while`, `try`, `import`, `break`, `return`, "
            "nested `def`, `for ... else`, ...)",
    "E102": "a Python expression kernels do not support (`lambda`, list/dict/set literals, comprehensions, "
            "f-strings, `is`, chained comparisons, `*args`, ...)",
    "E103": "indentation error: unexpected indent, a missing indented block, a dedent to no enclosing "
            "level, tabs mixed with spaces",
    # E2xx language: names, types and shapes, found while lowering the kernel
    "E201": "an unknown name, or a module-level value a kernel cannot use",
    "E202": "an unknown `dsl.` builtin, or a Python function a kernel cannot call (`range`, `print`, ...)",
    "E203": "wrong arguments to a builtin: too many, missing, or an unknown keyword",
    "E204": "a dtype mismatch: operands, stores, copies, atomic adds or `dsl.where` of different dtypes, "
            "or a float where an integer is needed",
    "E205": "a shape or rank mismatch: tile shapes that differ (at compile time or run time), too many "
            "indices, a tile of more than two dimensions, an axis out of range, unpacking the wrong count",
    "E206": "assigning to a name that is frozen (a parameter or loop variable)",
    "E207": "a value that must be a compile-time (or bounded) integer is not, or is out of its range: "
            "tile shapes, steps, `buffers=`",
    "E208": "a kernel parameter with a missing or unsupported annotation, or a GM tensor with a default",
    "E209": "a value of the wrong kind for its place: a tile where a scalar is needed or the reverse, "
            "a dtype or memory argument that is neither",
    "E210": "a construct the kernel language does not support: a loop not over `dsl.tiles`/`dsl.range`, "
            "subscripting or calling a value that allows neither, writing single elements",
    "E211": "a `dsl.alloc(..., buffers=2)` buffer whose value a loop carries from one iteration to the "
            "next (read before that iteration writes it): its slots cannot alternate",
    # E3xx memory placement: on-chip buffers, data paths and synchronisation
    "E301": "a tile or window does not fit its on-chip memory or buffer (at compile time when static, "
            "at launch / run time otherwise)",
    "E302": "an on-chip buffer's explicit offset or an L1 sub-window that is misaligned, overlaps another "
            "buffer, or comes with a runtime size",
    "E303": "an illegal placement: data in a memory the unit cannot read or write (no data path between "
            "the two memories)",
    "E304": "a loop needs more event ids between two pipes than the hardware has",
    # E4xx launch and bounds: the arguments of a launch, and every access checked before it happens
    "E401": "a kernel launched with the wrong arguments: too many, missing, unknown or repeated",
    "E402": "a kernel argument of the wrong type, dtype, rank or device",
    "E403": "a tensor argument that is not contiguous",
    "E404": "an index or window outside its tensor or buffer (checked at compile time when static, "
            "at launch / run time otherwise, before anything is written)",
    "E405": "an atomic add into a tensor whose data is not aligned to its elements",
    "E406": "a Const argument that is not an int, float, bool or dtype",
    # E5xx cube: matrix multiplication
    "E501": "a matmul with mismatched inner dimensions (columns of A != rows of B)",
    "E502": "a matmul with operand or accumulator dtypes the cube does not support",
    # E6xx autotune
    "E601": "a malformed autotune search space (empty, both configs= and lists, a name that is not a "
            "Const parameter)",
    "E602": "no autotune candidate compiled and fit; each one's error is listed",
}


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
