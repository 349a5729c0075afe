"""Kernel source -> `dsl.ast.FunctionDef`, with lark (LALR, contextual lexer) and `dsl/grammar.lark`.

`parse_function` is the only entry point. Every mistake comes out as a `KernelError` whose
location points into the user's real file:

- E100  syntax error ("expected ':' after the `for` header", "'(' was never closed", ...)
  (the wording of E100/E103 parse failures lives in `dsl.syntax_errors`)
- E101  a Python statement kernels do not support (`while`, `try`, `import`, `break`, ...)
- E102  a Python expression kernels do not support (`lambda`, list literals, `is`, `a < b < c`, ...)
- E103  indentation error (unexpected indent, dedent to no enclosing level, tabs mixed with spaces)

How it is put together, for speed (a 20-line kernel parses in ~2 ms):
- the AST is built by an in-parser transformer (`_ToAst`, called on every LALR reduction), so no
  parse tree is built; node spans come from the tokens the grammar keeps;
- binary/boolean/comparison operators arrive as one flat sequence and `_ToAst.expr_seq` applies
  Python's precedence (see the grammar header);
- keywords used only by unsupported statements are rejected by the post-lexer the moment they
  are read, so errors come in source order and name the construct;
- the parser is built once per process, and its tables are pickled under `VINCI_CACHE_DIR`
  (default ~/.cache/vinci); loading them takes ~15 ms instead of ~150 ms.
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
import unicodedata
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import lark
from lark import Lark, Token, Transformer, Tree
from lark.exceptions import UnexpectedInput
from lark.indenter import Indenter

from dsl import ast as A
from dsl.errors import KernelError, SourceLoc, debug_enabled
from dsl.syntax_errors import CLOSE_OF as _CLOSE_OF
from dsl.syntax_errors import CLOSERS as _CLOSERS
from dsl.syntax_errors import Clause as _Clause
from dsl.syntax_errors import Problem as _Problem
from dsl.syntax_errors import Span as _Span
from dsl.syntax_errors import at as _at
from dsl.syntax_errors import span_of as _span_of
from dsl.syntax_errors import syntax_error as _syntax_error

__all__ = ["parse_function"]

_GRAMMAR_FILE = Path(__file__).with_name("grammar.lark")
_OPTIONS: dict[str, Any] = dict(parser="lalr", lexer="basic", maybe_placeholders=True)

# ------------------------------------------------------------------ what kernels do not support
_NO_EXCEPTIONS = "kernels cannot raise or catch exceptions; test the condition with `if`"
_AS_PARAMETER = "pass the value in as a kernel parameter"
_SYNCHRONOUS = "kernels run synchronously; remove `{}`"
_USE_FOR = "use a `for` loop"
_USE_TUPLE = "use a tuple instead: `(a, b)`"

# Keywords (and tokens) rejected wherever the lexer reads them: terminal -> (code, message, hint).
_KEYWORD_ERRORS: dict[str, tuple[str, str, str]] = {
    "WHILE": ("E101", "`while` loops are not supported in kernels",
              "loop a known number of times: `for i in dsl.range(n):`"),
    "TRY": ("E101", "`try` statements are not supported in kernels", _NO_EXCEPTIONS),
    "EXCEPT": ("E101", "`try`/`except` is not supported in kernels", _NO_EXCEPTIONS),
    "FINALLY": ("E101", "`try`/`finally` is not supported in kernels", _NO_EXCEPTIONS),
    "RAISE": ("E101", "`raise` is not supported in kernels",
              "kernels cannot raise exceptions; validate inputs on the host before launching"),
    "WITH": ("E101", "`with` statements are not supported in kernels",
             "call the functions directly; kernels have no context managers"),
    "CLASS": ("E101", "class definitions are not allowed inside a kernel", "define the class at module level"),
    "IMPORT": ("E101", "`import` is not allowed inside a kernel", "import at module level, outside the kernel"),
    "FROM": ("E101", "`from ... import` is not allowed inside a kernel", "import at module level, outside the kernel"),
    "GLOBAL": ("E101", "`global` is not supported in kernels", _AS_PARAMETER),
    "NONLOCAL": ("E101", "`nonlocal` is not supported in kernels", _AS_PARAMETER),
    "DEL": ("E101", "`del` is not supported in kernels", "remove it; a tile's storage is released when unused"),
    "ASSERT": ("E101", "`assert` is not supported in kernels", "check the condition on the host before launching"),
    "BREAK": ("E101", "`break` is not supported in kernels",
              "loops always run their full trip count; guard the rest of the body with `if`"),
    "CONTINUE": ("E101", "`continue` is not supported in kernels", "guard the rest of the loop body with `if`"),
    "YIELD": ("E101", "`yield` is not supported in kernels", "write results into an output tensor parameter"),
    "ASYNC": ("E101", "`async` is not supported in kernels", _SYNCHRONOUS.format("async")),
    "AWAIT": ("E102", "`await` is not supported in kernels", _SYNCHRONOUS.format("await")),
    "LAMBDA": ("E102", "`lambda` is not supported in kernels", "write the expression inline"),
    "WALRUS": ("E102", "assignment expressions (`:=`) are not supported in kernels",
               "assign the value in its own statement first"),
    "ELLIPSIS": ("E102", "`...` is not supported in kernels", "use `pass` for an empty body, `:` for a full slice"),
    "IMAG_NUMBER": ("E102", "complex numbers are not supported in kernels", "use real values"),
}

# Rules rejected when reduced: rule -> (code, message, hint, where); `where` is "kw" (the first
# token) or "span" (first to last token, when on one line).
_RULE_ERRORS: dict[str, tuple[str, str, str, str]] = {
    "nested_head": ("E101", "nested function definitions are not supported in kernels",
                    "define the helper at module level, or inline its body into the kernel", "kw"),
    "inner_decorator": ("E101", "decorated definitions are not allowed inside a kernel",
                        "define decorated functions at module level, outside the kernel", "kw"),
    "annassign": ("E101", "annotated assignments are not supported in kernels",
                  "drop the annotation (`x = value`); a variable's type comes from its value", "span"),
    "list": ("E102", "list literals are not supported in kernels", _USE_TUPLE, "span"),
    "listcomp": ("E102", "list comprehensions are not supported in kernels", _USE_FOR, "span"),
    "genexp": ("E102", "generator expressions are not supported in kernels", _USE_FOR, "span"),
    "dict": ("E102", "dict literals are not supported in kernels", "use separate variables or parameters", "span"),
    "dictcomp": ("E102", "dict comprehensions are not supported in kernels", _USE_FOR, "span"),
    "set": ("E102", "set literals are not supported in kernels", _USE_TUPLE, "span"),
    "setcomp": ("E102", "set comprehensions are not supported in kernels", _USE_FOR, "span"),
    "star_expr": ("E102", "starred expressions (`*x`) are not supported in kernels", "name each element", "span"),
    "star_arg": ("E102", "argument unpacking (`*args`, `**kwargs`) is not supported in kernels",
                 "pass each argument explicitly", "span"),
    "star_param": ("E102", "`*args` / `**kwargs` parameters are not supported in kernels",
                   "list every parameter by name", "span"),
    "slash_param": ("E102", "positional-only parameters (`/`) are not supported in kernels", "remove the `/`", "span"),
}

_PY_KEYWORDS = frozenset(
    "False None True and as assert async await break class continue def del elif else except finally for from "
    "global if import in is lambda nonlocal not or pass raise return try while with yield".split())

_COMPARE_HINTS = {
    "is": "use `==` (or `!=`) to compare values",
    "is not": "use `!=` to compare values",
    "in": "compare with `==` and combine the tests with `or`",
    "not in": "compare with `!=` and combine the tests with `and`",
}

# Python's precedence for the flat operator sequence of `expr_seq` (higher binds tighter).
_BINARY_PREC = {"or": 1, "and": 2, "|": 5, "^": 6, "&": 7, "<<": 8, ">>": 8,
                "+": 9, "-": 9, "*": 10, "@": 10, "/": 10, "//": 10, "%": 10}
_NOT_PREC = 3
_CMP_PREC = 4
_UNARY_PREC = 11


# ------------------------------------------------------------------ indentation
_OPENERS = {"LPAR": "(", "LSQB": "[", "LBRACE": "{"}


class _KernelIndenter(Indenter):
    """Python's INDENT/DEDENT rules (like lark's PythonIndenter) with located E100/E103 errors.

    Also tracks open brackets: newlines inside them are dropped (implicit line joining) and an
    unmatched closing bracket is reported where it is.
    """

    NL_type = "_NEWLINE"
    OPEN_PAREN_types = list(_OPENERS)
    CLOSE_PAREN_types = list(_CLOSERS)
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8

    def __init__(self) -> None:
        super().__init__()
        self.offsets = (0, 0)  # (line, col) offsets of the parse in progress, for messages
        self.brackets: list[Token] = []
        self.levels: list[tuple[int, int]] = [(0, 0)]  # (width with 8-column tabs, with 1-column tabs)

    # Keep the rejected keywords in every lexer state, so they are read wherever they appear.
    always_accept = ("_NEWLINE", *_KEYWORD_ERRORS)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        self.brackets, self.levels = [], [(0, 0)]
        last = None
        for tok in stream:
            last = tok
            if tok.type == "_NEWLINE":
                if not self.brackets:  # implicit line joining inside brackets
                    yield tok
                    yield from self._indentation(tok)
                continue
            if tok.type in _KEYWORD_ERRORS:  # the lexer read a keyword kernels reject
                code, message, hint = _KEYWORD_ERRORS[tok.type]
                raise _Problem(code, message, *_at(tok), hint)
            if tok.type in _CLOSERS:
                self._close(tok)
            yield tok
            if tok.type in _OPENERS:
                self.brackets.append(tok)
        while len(self.levels) > 1:
            self.levels.pop()
            yield Token.new_borrow_pos("_DEDENT", "", last) if last else Token("_DEDENT", "")

    def _close(self, tok: Token) -> None:
        if not self.brackets:
            raise _Problem("E100", f"unmatched '{tok}'", *_at(tok),
                           "remove it, or add the opening bracket it closes")
        opener = self.brackets.pop()
        if _CLOSERS[tok.type] != opener.value:
            hint = (f"'{opener}' was opened on line {_at(opener)[0] + self.offsets[0]}; "
                    f"close it with '{_CLOSE_OF[opener.value]}'")
            raise _Problem("E100", f"closing '{tok}' does not match the opening '{opener}'",
                           *_at(tok), hint)

    def _indentation(self, nl: Token) -> Iterator[Token]:
        ws = nl.value.rsplit("\n", 1)[1]
        wide = 0
        for ch in ws:
            wide = (wide // 8 + 1) * 8 if ch == "\t" else wide + 1
        narrow = len(ws)
        line, col = _span_of(nl)[2], len(ws) + 1
        top_wide, top_narrow = self.levels[-1]
        tab_error = _Problem("E103", "inconsistent use of tabs and spaces in indentation", line, col,
                             hint="indent with spaces only")
        if wide > top_wide:
            if narrow <= top_narrow:
                raise tab_error
            self.levels.append((wide, narrow))
            yield Token("_INDENT", ws, nl.end_pos, line, col, line, col, nl.end_pos)
            return
        pops = 0
        while wide < self.levels[-1 - pops][0]:
            pops += 1
        target_wide, target_narrow = self.levels[-1 - pops]
        if wide != target_wide:
            known = ", ".join(str(w + self.offsets[1]) for w, _ in self.levels[1:])
            raise _Problem("E103", "this line's indentation does not match any enclosing block", line, col,
                           hint=f"align it with the block it belongs to (indented by {known} columns)")
        if narrow != target_narrow:
            raise tab_error
        for _ in range(pops):
            self.levels.pop()
            yield Token("_DEDENT", ws, nl.end_pos, line, col, line, col, nl.end_pos)


# ------------------------------------------------------------------ literals
_ESCAPE = re.compile(r"\\(\n|[\\'\"abfnrtv]|[0-7]{1,3}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}"
                     r"|U[0-9a-fA-F]{8}|N\{[^}\n]*\}|[xuUN]|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"\n": "", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f",
                   "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _unescape(body: str) -> str:
    """Python's escape sequences in a non-raw string literal; ValueError for a malformed one."""
    def one(m: re.Match[str]) -> str:
        s = m.group(1)
        if s in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[s]
        if s[0] in "01234567":
            return chr(int(s, 8))
        if s[0] in "xuU" and len(s) > 1:
            code = int(s[1:], 16)
            if code > sys.maxunicode:
                raise ValueError(f"\\{s}")
            return chr(code)
        if s[0] == "N" and len(s) > 1:
            try:
                return unicodedata.lookup(s[2:-1])
            except KeyError:
                raise ValueError(f"\\{s}") from None
        if s in "xuUN":
            raise ValueError(f"\\{s}")
        return "\\" + s  # unknown escapes stay as written, like Python

    return _ESCAPE.sub(one, body) if "\\" in body else body


def _split_string(tok: Token) -> tuple[str, str]:
    """A STRING/LONG_STRING token -> (lower-case prefix, text between the quotes)."""
    v = tok.value
    quote = v.find(v[-1])
    q = 3 if len(v) - quote >= 6 and v[quote:quote + 3] in ('"""', "'''") else 1
    return v[:quote].lower(), v[quote + q:len(v) - q]


# ------------------------------------------------------------------ parse results -> AST
class _CmpOp(NamedTuple):
    op: str
    first: Token
    last: Token


_ASSIGNABLE = (A.Name, A.Attribute, A.Subscript)


class _ToAst(Transformer):
    """The in-parser transformer: each method builds `dsl.ast` nodes for one grammar rule.

    Children are AST nodes and the tokens the grammar keeps. `spans` maps id(node) to the node's
    extent including enclosing parentheses (like lark's containers); a node's own `loc` excludes
    them, as in Python's ast. The per-parse fields are set by `parse_function` under its lock.
    """

    def __init__(self) -> None:
        super().__init__()
        self.reset("<unknown>", 0, 0)

    def reset(self, file: str, line_offset: int, col_offset: int) -> None:
        self.file, self.lo, self.co = file, line_offset, col_offset
        self.spans: dict[int, _Span] = {}

    # -- locations
    def span(self, x: Any) -> _Span:
        if isinstance(x, Token):
            return _span_of(x)
        return self.spans[id(x)]

    def loc(self, first: Any, last: Any = None) -> SourceLoc:
        line, col, _, _ = self.span(first)
        _, _, end_line, end_col = self.span(first if last is None else last)
        return SourceLoc(self.file, line + self.lo, col + self.co, end_col + self.co if end_line == line else None)

    def node(self, cls: type, first: Any, last: Any, *fields: Any) -> Any:
        """Build `cls(*fields)` spanning `first`..`last` (tokens or nodes) and record its span."""
        n = cls(*fields, loc=self.loc(first, last))
        self.spans[id(n)] = self.span(first)[:2] + self.span(last)[2:]
        return n

    def error(self, code: str, message: str, first: Any, last: Any = None, hint: str | None = None) -> KernelError:
        return KernelError(code, message, self.loc(first, last), hint)

    # -- lexer callbacks
    def lexer_callbacks(self) -> dict[str, Any]:
        return {"STRING": self.on_string, "LONG_STRING": self.on_string, "NAME": self.on_name}

    def on_name(self, tok: Token) -> Token:
        if tok.value in _PY_KEYWORDS:  # a keyword where the grammar does not accept it
            raise self.error("E100", f"unexpected keyword '{tok}'", tok)
        return tok

    def on_string(self, tok: Token) -> Token:
        prefix, _ = _split_string(tok)
        if "f" in prefix:
            raise self.error("E102", "f-strings are not supported in kernels", tok,
                             hint='pass the values as separate arguments: dsl.print("x =", x)')
        if "b" in prefix:
            raise self.error("E102", "bytes literals are not supported in kernels", tok, hint="use a str literal")
        return tok

    # -- the function
    def start(self, children: list[Any]) -> A.FunctionDef:
        *decorators, fn = children
        return replace(fn, decorators=tuple(decorators))

    def funcdef(self, children: list[Any]) -> A.FunctionDef:
        def_tok, name, params, _returns, body = children  # kernels ignore a return annotation
        docstring = None
        first = body[0] if body else None
        if isinstance(first, A.ExprStmt) and isinstance(first.value, A.Constant) and isinstance(first.value.value, str):
            docstring, body = first.value.value, body[1:]
        return self.node(A.FunctionDef, def_tok, name, str(name), params or (), body, docstring, ())

    def parameters(self, children: list[A.Param]) -> tuple[A.Param, ...]:
        seen: set[str] = set()
        has_default = False
        for p in children:
            if p.name in seen:
                raise KernelError("E100", f"duplicate parameter '{p.name}'", p.loc, "give each parameter its own name")
            seen.add(p.name)
            if p.default is not None:
                has_default = True
            elif has_default:
                raise KernelError("E100", f"parameter '{p.name}' without a default follows a parameter with a default",
                                  p.loc, "give it a default value, or move it before the parameters that have one")
        return tuple(children)

    def param(self, children: list[Any]) -> A.Param:
        name, annotation, default = children
        last = default or annotation or name
        return self.node(A.Param, name, last, str(name), annotation, default)

    # -- statements
    def suite(self, children: list[A.Stmt]) -> tuple[A.Stmt, ...]:
        return tuple(children)

    def expr_stmt(self, children: list[Any]) -> A.ExprStmt:
        return self.node(A.ExprStmt, children[0], children[0], children[0])

    def assign(self, children: list[Any]) -> A.Assign:
        *targets, value = children
        for t in targets:
            self.check_target(t)
        return self.node(A.Assign, targets[0], value, tuple(targets), value)

    def augassign(self, children: list[Any]) -> A.AugAssign:
        target, op, value = children
        if not isinstance(target, _ASSIGNABLE):
            self.check_target(target)  # a better message for literals and calls
            raise self.error("E100", f"cannot use '{op}' on a tuple", target, hint="update each element in its own statement")
        return self.node(A.AugAssign, target, value, target, str(op)[:-1], value)

    def check_target(self, t: A.Expr) -> None:
        if isinstance(t, _ASSIGNABLE):
            return
        if isinstance(t, A.Tuple) and t.elts:
            for e in t.elts:
                self.check_target(e)
            return
        what = {A.Call: "a function call", A.Constant: "a literal", A.Tuple: "an empty tuple"}.get(type(t), "an expression")
        hint = "did you mean '==' ?" if isinstance(t, (A.Call, A.Constant, A.BinOp, A.Compare)) else None
        raise KernelError("E100", f"cannot assign to {what}", t.loc, hint)

    def pass_stmt(self, children: list[Token]) -> A.Pass:
        return self.node(A.Pass, children[0], children[0])

    def return_stmt(self, children: list[Any]) -> A.Return:
        kw, value = children
        return self.node(A.Return, kw, value if value is not None else kw, value)

    def elif_clause(self, children: list[Any]) -> _Clause:
        kw, test, body = children
        return _Clause(kw, body, test)

    def else_clause(self, children: list[Any]) -> _Clause:
        kw, body = children
        return _Clause(kw, body)

    def if_stmt(self, children: list[Any]) -> A.If:
        kw, test, body, *elifs, orelse = children
        tail: tuple[A.Stmt, ...] = orelse.body if orelse is not None else ()
        for clause in reversed(elifs):  # `elif` becomes an If nested in the orelse
            tail = (self.node(A.If, clause.tok, clause.tok, clause.test, clause.body, tail),)
        return self.node(A.If, kw, kw, test, body, tail)

    def for_stmt(self, children: list[Any]) -> A.For:
        kw, target, iterable, body, orelse = children
        if orelse is not None:
            raise self.error("E101", "`for ... else` is not supported in kernels", orelse.tok,
                             hint="move the `else` body after the loop")
        for n in target.elts if isinstance(target, A.Tuple) else (target,):
            if not isinstance(n, A.Name):
                self.check_target(n)
                raise KernelError("E102", "a loop variable must be a name or a tuple of names", n.loc,
                                  "assign to it inside the loop body instead")
        return self.node(A.For, kw, kw, target, iterable, body)

    # -- expressions
    def ifexp(self, children: list[Any]) -> A.IfExp:
        body, test, orelse = children
        return self.node(A.IfExp, body, orelse, test, body, orelse)

    def comp_op(self, children: list[Token]) -> _CmpOp:
        return _CmpOp(" ".join(str(t) for t in children), children[0], children[-1])

    def expr_seq(self, items: list[Any]) -> A.Expr:
        """Apply Python's precedence to `[prefix*] operand (op [prefix*] operand)*` (precedence climbing)."""
        pos = 0
        fresh: set[int] = set()  # nodes built here (a parenthesised Compare/BoolOp is not extended)

        def operand(min_prec: int) -> A.Expr:
            nonlocal pos
            item = items[pos]
            pos += 1
            if not isinstance(item, Token):
                return item
            op = str(item)
            if op == "not":
                if min_prec > _NOT_PREC:
                    raise self.error("E100", "`not` needs parentheses after an operator", item,
                                     hint="write it as `(not ...)`")
                value = climb(_NOT_PREC)
            else:
                value = operand(_UNARY_PREC + 1)
            return self.node(A.UnaryOp, item, value, op, value)

        def climb(min_prec: int) -> A.Expr:
            nonlocal pos
            left = operand(min_prec)
            while pos < len(items):
                item = items[pos]
                if isinstance(item, _CmpOp):
                    op, prec, first, last = item.op, _CMP_PREC, item.first, item.last
                else:
                    op, prec, first, last = str(item), _BINARY_PREC[str(item)], item, item
                if prec < min_prec:
                    break
                pos += 1
                if prec == _CMP_PREC:
                    if op in _COMPARE_HINTS:
                        kind = "identity" if op.startswith("is") else "membership"
                        raise self.error("E102", f"`{op}` ({kind} test) is not supported in kernels", first, last,
                                         hint=_COMPARE_HINTS[op])
                    if isinstance(left, A.Compare) and id(left) in fresh:
                        raise self.error("E102", "chained comparisons are not supported in kernels", first, last,
                                         hint=f"split it with `and`: `a {left.op} b and b {op} c`")
                right = climb(prec + 1)
                if prec <= 2:
                    values = (*left.values, right) if (
                        isinstance(left, A.BoolOp) and left.op == op and id(left) in fresh) else (left, right)
                    left = self.node(A.BoolOp, left, right, op, values)
                elif prec == _CMP_PREC:
                    left = self.node(A.Compare, left, right, op, left, right)
                else:
                    left = self.node(A.BinOp, left, right, op, left, right)
                fresh.add(id(left))
            return left

        return climb(0)

    def binop(self, children: list[Any]) -> A.BinOp:
        left, op, right = children
        return self.node(A.BinOp, left, right, str(op), left, right)

    def unary(self, children: list[Any]) -> A.UnaryOp:
        op, operand = children
        return self.node(A.UnaryOp, op, operand, str(op), operand)

    def call(self, children: list[Any]) -> A.Call:
        func, arguments, rpar = children
        args, kwargs = arguments if arguments is not None else ((), ())
        return self.node(A.Call, func, rpar, func, args, kwargs)

    def arguments(self, children: list[Any]) -> tuple[tuple[A.Expr, ...], tuple[A.Keyword, ...]]:
        args: list[A.Expr] = []
        kwargs: list[A.Keyword] = []
        for c in children:
            if isinstance(c, A.Keyword):
                if any(k.name == c.name for k in kwargs):
                    raise KernelError("E100", f"keyword argument '{c.name}' repeated", c.loc, "pass it only once")
                kwargs.append(c)
            elif kwargs:
                raise KernelError("E100", "positional argument follows keyword argument", c.loc,
                                  "put positional arguments before keyword arguments")
            else:
                args.append(c)
        return tuple(args), tuple(kwargs)

    def kwarg(self, children: list[Any]) -> A.Keyword:
        name, value = children
        if not isinstance(name, A.Name):
            raise KernelError("E100", "a keyword argument needs a plain name before '='", name.loc, "did you mean '==' ?")
        return self.node(A.Keyword, name, value, name.id, value)

    def getitem(self, children: list[Any]) -> A.Subscript:
        value, index, rsqb = children
        return self.node(A.Subscript, value, rsqb, value, index)

    def getattr(self, children: list[Any]) -> A.Attribute:
        value, name = children
        return self.node(A.Attribute, value, name, value, str(name))

    def slice(self, children: list[Any]) -> A.Slice:
        lower, colon, upper, step = children  # step: (colon, value | None) from sliceop, or None
        parts = [p for p in (colon, upper, step and step[0], step and step[1]) if p is not None]
        last = max(parts, key=lambda p: self.span(p)[2:])
        return self.node(A.Slice, lower if lower is not None else colon, last,
                         lower, upper, step[1] if step else None)

    def sliceop(self, children: list[Any]) -> tuple[Token, A.Expr | None]:
        return children[0], children[1]

    def paren(self, children: list[Any]) -> A.Expr:
        lpar, inner, rpar = children
        self.spans[id(inner)] = (lpar.line, lpar.column, rpar.end_line, rpar.end_column)
        return inner

    def tuple(self, children: list[Any]) -> A.Tuple:
        elts = tuple(c for c in children if not isinstance(c, Token))
        return self.node(A.Tuple, children[0], children[-1], elts)

    def name(self, children: list[Token]) -> A.Name:
        return self.node(A.Name, children[0], children[0], str(children[0]))

    def const(self, children: list[Token]) -> A.Constant:
        tok = children[0]
        return self.node(A.Constant, tok, tok, {"NONE": None, "TRUE": True, "FALSE": False}[tok.type])

    def number(self, children: list[Token]) -> A.Constant:
        tok = children[0]
        value = float(tok.replace("_", "")) if tok.type == "FLOAT_NUMBER" else int(tok, 0)
        return self.node(A.Constant, tok, tok, value)

    def string(self, children: list[Token]) -> A.Constant:
        parts = []
        for tok in children:
            prefix, body = _split_string(tok)
            if "r" not in prefix:
                try:
                    body = _unescape(body)
                except ValueError as e:
                    raise self.error("E100", f"invalid escape sequence '{e}' in string literal", tok,
                                     hint="write a literal backslash as '\\\\'") from None
            parts.append(body)
        return self.node(A.Constant, children[0], children[-1], "".join(parts))


def _located_leaves(conv: _ToAst, children: list[Any]) -> Iterator[Any]:
    """Tokens and AST nodes among `children`, looking inside the plain trees of rejected constructs."""
    for c in children:
        if isinstance(c, Tree):
            yield from _located_leaves(conv, c.children)
        elif isinstance(c, Token) or id(c) in conv.spans:
            yield c


def _rejecting(rule: str) -> Any:
    code, message, hint, where = _RULE_ERRORS[rule]

    def method(self: _ToAst, children: list[Any]) -> Any:
        located = list(_located_leaves(self, children))
        first = located[0]
        raise self.error(code, message, first, first if where == "kw" else located[-1], hint=hint)

    method.__name__ = rule
    return method


for _rule in _RULE_ERRORS:
    setattr(_ToAst, _rule, _rejecting(_rule))


# ------------------------------------------------------------------ building the parser
_build_lock = threading.Lock()
_parse_lock = threading.Lock()  # the transformer and the indenter hold per-parse state
_parser: tuple[Lark, _ToAst, _KernelIndenter] | None = None


def _cache_dir() -> str:
    return os.environ.get("VINCI_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "vinci")


def _build() -> Lark:
    """The LALR parser, from the disk cache when possible.

    The cache holds `Lark.save()` of the whole parser (its transformer, post-lexer and lexer
    callbacks are pickled with it), keyed by the grammar, this file, lark's and Python's versions.
    Writes are atomic; an unreadable entry is rebuilt.
    """
    grammar = _GRAMMAR_FILE.read_text(encoding="utf-8")
    key_text = "\0".join((grammar, Path(__file__).read_text(encoding="utf-8"), lark.__version__, sys.version))
    path = os.path.join(_cache_dir(), f"kernel-parser-{hashlib.sha256(key_text.encode()).hexdigest()[:20]}.pickle")
    try:
        with open(path, "rb") as f:
            parser = Lark.load(f)
        if isinstance(parser.options.transformer, _ToAst) and isinstance(parser.options.postlex, _KernelIndenter):
            return parser
    except Exception:  # missing, stale or corrupt: rebuild below
        pass
    conv = _ToAst()
    parser = Lark(grammar, transformer=conv, postlex=_KernelIndenter(),
                  lexer_callbacks=conv.lexer_callbacks(), **_OPTIONS)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            parser.save(f)
        os.replace(tmp, path)
    except Exception:  # a read-only or full cache only costs speed
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return parser


def _get_parser() -> tuple[Lark, _ToAst, _KernelIndenter]:
    global _parser
    if _parser is None:
        with _build_lock:
            if _parser is None:
                p = _build()
                conv, indenter = p.options.transformer, p.options.postlex
                assert isinstance(conv, _ToAst) and isinstance(indenter, _KernelIndenter)
                _parser = (p, conv, indenter)
    return _parser


# ------------------------------------------------------------------ entry point
def parse_function(source: str, filename: str, line_offset: int = 0, col_offset: int = 0) -> A.FunctionDef:
    """Parse the source of one kernel function (decorators allowed) into a `dsl.ast.FunctionDef`.

    `source` is what `inspect.getsource` + `textwrap.dedent` return. `line_offset` is added to
    every line (source line 1 is file line `1 + line_offset`) and `col_offset` to every column
    (the indentation dedent removed), so locations point into `filename`. Raises `KernelError`
    (E100 syntax, E101 unsupported statement, E102 unsupported expression, E103 indentation)
    and nothing else. The caller registers the file's text for error rendering.
    """
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    if not text.endswith("\n"):
        text += "\n"
    parser, conv, indenter = _get_parser()

    def located(p: _Problem) -> KernelError:
        end = p.end_col + col_offset if p.end_col is not None else None
        return KernelError(p.code, p.message, SourceLoc(filename, p.line + line_offset, p.col + col_offset, end), p.hint)

    with _parse_lock:
        conv.reset(filename, line_offset, col_offset)
        indenter.offsets = (line_offset, col_offset)
        try:
            return parser.parse(text)  # type: ignore[return-value]
        except KernelError as e:
            err = e
        except _Problem as p:
            err = located(p)
        except UnexpectedInput as e:
            err = located(_syntax_error(e, text, indenter))
        except RecursionError:
            err = KernelError("E102", "expression is nested too deeply", SourceLoc(filename, 1 + line_offset, 1),
                              "split it into several statements")
        finally:
            conv.reset("<unknown>", 0, 0)
    if not debug_enabled():
        err.with_traceback(None)  # hide lark's and the parser's frames
    raise err from None
