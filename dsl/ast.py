"""The kernel AST: what the lark parser produces from a kernel's source.

Nodes are small frozen dataclasses; `loc` (a `SourceLoc` in the user's real file) is excluded
from equality so two parses of the same text compare equal wherever they sit.
Operators are kept as their Python spelling ("+", "<=", "not", "@", ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dsl.errors import UNKNOWN, SourceLoc


def _loc() -> SourceLoc:
    return field(default=UNKNOWN, compare=False, repr=False)


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Expr:
    if TYPE_CHECKING:
        # every expression node has a `loc` field; declared here for the type checker only, so it
        # does not become a (leading, default-less) dataclass field of every subclass
        @property
        def loc(self) -> SourceLoc: ...


@dataclass(frozen=True)
class Name(Expr):
    id: str
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Constant(Expr):
    value: int | float | bool | str | None
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class BinOp(Expr):
    op: str  # + - * / // % ** @ & | ^ << >>
    left: Expr
    right: Expr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class UnaryOp(Expr):
    op: str  # - + not ~
    operand: Expr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class BoolOp(Expr):
    op: str  # and / or
    values: tuple[Expr, ...]
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Compare(Expr):
    """A single comparison `left op right` (chains are rejected by the parser)."""

    op: str  # == != < <= > >=
    left: Expr
    right: Expr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class IfExp(Expr):
    test: Expr
    body: Expr
    orelse: Expr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Keyword:
    name: str
    value: Expr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Call(Expr):
    func: Expr
    args: tuple[Expr, ...]
    kwargs: tuple[Keyword, ...] = ()
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Attribute(Expr):
    value: Expr
    attr: str
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Slice(Expr):
    lower: Expr | None
    upper: Expr | None
    step: Expr | None
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Subscript(Expr):
    """`value[index]`; a multi-dimensional index is a `Tuple` of expressions / `Slice`s."""

    value: Expr
    index: Expr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Tuple(Expr):
    elts: tuple[Expr, ...]
    loc: SourceLoc = _loc()


# ---------------------------------------------------------------- statements
@dataclass(frozen=True)
class Stmt:
    pass


@dataclass(frozen=True)
class Assign(Stmt):
    """`a = b`, `a, b = c, d`, `x[t] = e`, chained `a = b = e` (several targets)."""

    targets: tuple[Expr, ...]
    value: Expr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class AugAssign(Stmt):
    target: Expr
    op: str  # the binary operator: + - * / ...
    value: Expr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class ExprStmt(Stmt):
    value: Expr
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class For(Stmt):
    target: Expr  # Name or Tuple of Names
    iter: Expr
    body: tuple[Stmt, ...]
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class If(Stmt):
    test: Expr
    body: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]  # `elif` arrives as a nested If in orelse
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Pass(Stmt):
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class Return(Stmt):
    value: Expr | None
    loc: SourceLoc = _loc()


# ---------------------------------------------------------------- the kernel
@dataclass(frozen=True)
class Param:
    name: str
    annotation: Expr | None
    default: Expr | None
    loc: SourceLoc = _loc()


@dataclass(frozen=True)
class FunctionDef:
    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    docstring: str | None = None
    decorators: tuple[Expr, ...] = ()
    loc: SourceLoc = _loc()


def dump(node: object, indent: int = 0) -> str:
    """Readable multi-line dump of an AST (used by `vinci compile --emit ast`)."""
    pad = "  " * indent
    if isinstance(node, tuple):
        if not node:
            return pad + "()"
        return "\n".join(dump(n, indent) for n in node)
    if not hasattr(node, "__dataclass_fields__"):
        return pad + repr(node)
    fields = [f for f in node.__dataclass_fields__ if f != "loc"]
    simple, nested = [], []
    for f in fields:
        v = getattr(node, f)
        if isinstance(v, (Expr, Stmt, Param, Keyword)) or (isinstance(v, tuple) and v and not isinstance(v[0], (str, int, float))):
            nested.append((f, v))
        else:
            simple.append(f"{f}={v!r}")
    loc = getattr(node, "loc", None)
    where = f"  @{loc.line}:{loc.col}" if loc is not None and loc.line else ""
    out = [f"{pad}{type(node).__name__}({', '.join(simple)}){where}"]
    for f, v in nested:
        out.append(f"{pad}  {f}:")
        out.append(dump(v, indent + 2))
    return "\n".join(out)
