"""Syntax errors (E100 / E103) from lark's parse failures: what the parser expected, said in words
about the kernel's own text ("expected ':' after the `for` header", "'(' was never closed")."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from dsl import ast as A

if TYPE_CHECKING:
    from dsl.parser import _KernelIndenter

# closing token type -> its opening bracket; opening bracket -> its closer
CLOSERS = {"RPAR": "(", "RSQB": "[", "RBRACE": "{"}
CLOSE_OF = {"(": ")", "[": "]", "{": "}"}


@dataclass(eq=False)
class Problem(Exception):
    """A syntax problem found while lexing or on a parse error, before file offsets are applied."""

    code: str
    message: str
    line: int
    col: int
    end_col: int | None = None
    hint: str | None = None


# ------------------------------------------------------------------ what the parser and its errors share
Span = tuple[int, int, int, int]  # line, col, end_line, end_col (1-based, end exclusive), unshifted


def span_of(tok: Token) -> Span:
    """A lexed token's (line, col, end_line, end_col): lark types them Optional, the lexer always sets them."""
    line, col, end_line, end_col = tok.line, tok.column, tok.end_line, tok.end_column
    assert line is not None and col is not None and end_line is not None and end_col is not None
    return line, col, end_line, end_col


def at(tok: Token) -> tuple[int, int, int]:
    """(line, col, end_col) of a lexed token, for a `Problem`."""
    line, col, _, end_col = span_of(tok)
    return line, col, end_col


@dataclass
class Clause:
    """`elif test: body` / `else: body`, on its way into an If (or an error): an entry of the
    parser's value stack that `_header` recognises."""

    tok: Token
    body: tuple[A.Stmt, ...]
    test: A.Expr | None = None


# ------------------------------------------------------------------ syntax errors
_HEADERS = {"FOR", "IF", "ELIF", "ELSE", "DEF"}
_EXPRESSION_STARTS = {"NAME", "DEC_NUMBER", "FLOAT_NUMBER", "STRING", "LPAR", "MINUS", "TILDE"}
_KEYWORDS_EXPECTED = ("IN", "ELSE")

_BRACKET_SCAN = re.compile("|".join((
    r"'{3}[\s\S]*?'{3}", r'"{3}[\s\S]*?"{3}', r"'(?:\\[\s\S]|[^'\\\n])*'", r'"(?:\\[\s\S]|[^"\\\n])*"', r"#[^\n]*", r"[()\[\]{}]")))


def _unclosed_bracket(text: str) -> tuple[int, int, str] | None:
    """(line, col, char) of the innermost bracket still open at the end of `text` (strings and comments skipped)."""
    stack: list[int] = []
    for m in _BRACKET_SCAN.finditer(text):
        ch = m.group()
        if ch in "([{":
            stack.append(m.start())
        elif ch in ")]}" and stack and CLOSE_OF[text[stack[-1]]] == ch:
            stack.pop()
    if not stack:
        return None
    pos = stack[-1]
    return text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1, text[pos]


def _header(stack: list[Any]) -> tuple[str, int] | None:
    """The compound statement whose header is being parsed: (keyword, line), if any."""
    for i in range(len(stack) - 1, -1, -1):
        tok = stack[i]
        if isinstance(tok, Token) and tok.type in _HEADERS:
            prev = stack[i - 1] if i else None
            if tok.type in ("DEF", "ELIF") or prev is None or isinstance(prev, (A.Stmt, tuple, Clause)) or (
                    isinstance(prev, Token) and prev.type in ("_NEWLINE", "_INDENT", "_DEDENT")):
                return str(tok), at(tok)[0]
    return None


def _header_words(kw: str) -> str:
    return "the function signature" if kw == "def" else f"the `{kw}` header"


def _describe(tok: Token) -> str:
    if tok.type in ("NAME", "STRING", "LONG_STRING") or tok.type.endswith("_NUMBER"):
        return {"NAME": f"name '{tok}'", "STRING": "string literal", "LONG_STRING": "string literal"}.get(
            tok.type, f"number {tok}")
    return f"keyword '{tok}'" if tok.value.isalpha() else f"'{tok}'"


def _expected_words(expected: set[str]) -> str | None:
    words = [f"'{t.lower()}'" for t in _KEYWORDS_EXPECTED
             if t in expected and not (t == "IN" and "LESSTHAN" in expected)]  # `in` as an operator is noise
    if "COLON" in expected:
        words.append("':'")
    closers = [t for t in ("RPAR", "RSQB", "RBRACE") if t in expected]
    if closers:
        if "COMMA" in expected:
            words.append("','")
        words.extend(f"'{CLOSE_OF[CLOSERS[t]]}'" for t in closers)
    if len(expected & _EXPRESSION_STARTS) >= 3:
        words.append("an expression")
    elif "NAME" in expected:
        words.append("a name")
    if "EQUAL" in expected and "PLUS" not in expected and not words:
        words.append("'='")
    if not words:
        return None
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _end_of_code(text: str, tok: Token) -> tuple[int, int]:
    """(line, col) just after the last code character before `tok`, skipping blank and comment-only lines."""
    lines = (text[:tok.start_pos] if tok.type != "$END" else text).split("\n")
    for line in range(len(lines), 1, -1):
        code = lines[line - 1] if line == len(lines) and tok.type != "$END" else lines[line - 1].split("#", 1)[0]
        if code.strip():  # ('#' in a string on an earlier line can misplace the caret; rare)
            return line, len(code.rstrip()) + 1
    return 1, len(lines[0].split("#", 1)[0].rstrip()) + 1


def syntax_error(e: UnexpectedInput, text: str, indenter: _KernelIndenter) -> Problem:
    if isinstance(e, UnexpectedCharacters):
        ch = e.char
        if ch in "'\"":
            return Problem("E100", "unterminated string literal", e.line, e.column, None,
                            "close the string on the same line, or use triple quotes for several lines")
        if ch == "\\":
            return Problem("E100", "unexpected character after line continuation '\\'", e.line, e.column,
                            e.column + 1, "a '\\' that continues a line must be the last character on it")
        return Problem("E100", f"unexpected character {ch!r}", e.line, e.column, e.column + 1)
    if not isinstance(e, UnexpectedToken):  # LALR reports the end of input as a token; just in case
        return Problem("E100", "unexpected end of kernel", 1, 1)
    tok = e.token
    ip = e.interactive_parser
    stack = ip.parser_state.value_stack if ip is not None else []
    try:
        expected = set(ip.accepts()) if ip is not None else set(e.expected)
    except Exception:  # accepts() replays the parser; fall back to the table's guess
        expected = set(e.expected)
    if tok.type == "_INDENT":
        return Problem("E103", "unexpected indent", tok.line, tok.column, None,
                        "indent this line like the statement before it")
    unclosed = _unclosed_bracket(text) if indenter.brackets else None
    if unclosed is not None:
        line, col, ch = unclosed
        return Problem("E100", f"'{ch}' was never closed", line, col, col + 1, f"add the missing '{CLOSE_OF[ch]}'")
    header = _header(stack)
    if "_INDENT" in expected and header is not None:
        kw, line = header
        return Problem("E103", f"expected an indented block after {_header_words(kw)} on line {line + indenter.offsets[0]}",
                        tok.line, tok.column, None, "indent the body, or write `pass` for an empty one")
    if "DEF" in expected and tok.type not in ("_NEWLINE", "$END", "_DEDENT"):
        return Problem("E100", "expected a kernel function definition (`def name(...):`)",
                        tok.line, tok.column, tok.end_column if tok.end_line == tok.line else None)
    if tok.type in ("_NEWLINE", "$END", "_DEDENT"):
        line, col = _end_of_code(text, tok)
        if "COLON" in expected and header is not None:
            return Problem("E100", f"expected ':' after {_header_words(header[0])}", line, col, None,
                            f"end the `{header[0]}` line with ':'")
        if "DEF" in expected:
            return Problem("E100", "expected a kernel function definition (`def name(...):`)", line, col)
        words = _expected_words(expected)
        what = "unexpected end of kernel" if tok.type == "$END" else "unexpected end of line"
        return Problem("E100", f"{what}; expected {words}" if words else what, line, col)
    if expected == {"$END"}:
        return Problem("E100", f"unexpected {_describe(tok)} after the end of the kernel function",
                        tok.line, tok.column, tok.end_column,
                        "the source must hold exactly one function; check the indentation of this line")
    words = _expected_words(expected)
    message = f"unexpected {_describe(tok)}"
    hint = "is an operator or ',' missing before it?" if tok.type in _EXPRESSION_STARTS and "PLUS" in expected else None
    return Problem("E100", f"{message}; expected {words}" if words else message,
                    tok.line, tok.column, tok.end_column if tok.end_line == tok.line else None, hint)
