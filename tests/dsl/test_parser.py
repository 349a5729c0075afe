"""The kernel parser: source text -> dsl.ast, locations, and the text of every syntax error."""
from __future__ import annotations

import itertools
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsl.parser as P
from dsl import ast as A
from dsl.errors import KernelError, SourceLoc, register_source
from dsl.parser import parse_function

_files = itertools.count()


def parse(src: str, line_offset: int = 0, col_offset: int = 0) -> A.FunctionDef:
    name = f"<test-{next(_files)}>"
    register_source(name, src)
    return parse_function(src, name, line_offset, col_offset)


def error(src: str, filename: str = "k.py") -> str:
    """The rendered KernelError for `src` (registered as `filename`)."""
    src = textwrap.dedent(src)
    register_source(filename, src)
    with pytest.raises(KernelError) as info:
        parse_function(src, filename)
    return str(info.value)


def body(stmts: str) -> tuple[A.Stmt, ...]:
    return parse("def k():\n" + textwrap.indent(textwrap.dedent(stmts), "    ")).body


def expr(text: str) -> A.Expr:
    (stmt,) = body(f"_ = {text}\n")
    assert isinstance(stmt, A.Assign)
    return stmt.value


# short constructors for expected trees (locations are ignored by ==)
def N(i: str) -> A.Name:
    return A.Name(i)


def C(v: object) -> A.Constant:
    return A.Constant(v)  # type: ignore[arg-type]


def B(op: str, a: A.Expr, b: A.Expr) -> A.BinOp:
    return A.BinOp(op, a, b)


def U(op: str, a: A.Expr) -> A.UnaryOp:
    return A.UnaryOp(op, a)


def T(*elts: A.Expr) -> A.Tuple:
    return A.Tuple(elts)


def S(lo: A.Expr | None = None, hi: A.Expr | None = None, step: A.Expr | None = None) -> A.Slice:
    return A.Slice(lo, hi, step)


a, b, c, d, e, x = N("a"), N("b"), N("c"), N("d"), N("e"), N("x")


# ------------------------------------------------------------------ expressions
@pytest.mark.parametrize("text, tree", [
    ("a + b * c", B("+", a, B("*", b, c))),
    ("(a + b) * c", B("*", B("+", a, b), c)),
    ("a - b - c", B("-", B("-", a, b), c)),
    ("a ** b ** c", B("**", a, B("**", b, c))),
    ("-x ** 2", U("-", B("**", x, C(2)))),
    ("2 ** -x", B("**", C(2), U("-", x))),
    ("-a * b", B("*", U("-", a), b)),
    ("- -a", U("-", U("-", a))),
    ("~a & b | c ^ d", B("|", B("&", U("~", a), b), B("^", c, d))),
    ("a << 1 + b >> c", B(">>", B("<<", a, B("+", C(1), b)), c)),
    ("a @ b / c // d % e", B("%", B("//", B("/", B("@", a, b), c), d), e)),
    ("+a", U("+", a)),
    ("not a == b", U("not", A.Compare("==", a, b))),
    ("not not a", U("not", U("not", a))),
    ("a and not b or c", A.BoolOp("or", (A.BoolOp("and", (a, U("not", b))), c))),
    ("a or b or c", A.BoolOp("or", (a, b, c))),
    ("(a or b) or c", A.BoolOp("or", (A.BoolOp("or", (a, b)), c))),
    ("a and b and c", A.BoolOp("and", (a, b, c))),
    ("a < b + 1 and c", A.BoolOp("and", (A.Compare("<", a, B("+", b, C(1))), c))),
    ("(a < b) == c", A.Compare("==", A.Compare("<", a, b), c)),
    ("a if c else b", A.IfExp(c, a, b)),
    ("a if c else b if d else e", A.IfExp(c, a, A.IfExp(d, b, e))),
    ("a + 1 if c > 0 else b", A.IfExp(A.Compare(">", c, C(0)), B("+", a, C(1)), b)),
    ("f(a, b, k=1, m=x + 1)", A.Call(N("f"), (a, b), (A.Keyword("k", C(1)), A.Keyword("m", B("+", x, C(1)))))),
    ("f()", A.Call(N("f"), ())),
    ("f(a,)", A.Call(N("f"), (a,))),
    ("print('x =', x)", A.Call(N("print"), (C("x ="), x))),
    ("a.b.c", A.Attribute(A.Attribute(a, "b"), "c")),
    ("dsl.GM[dsl.f16]", A.Subscript(A.Attribute(N("dsl"), "GM"), A.Attribute(N("dsl"), "f16"))),
    ("f(a)(b)[c].d", A.Attribute(A.Subscript(A.Call(A.Call(N("f"), (a,)), (b,)), c), "d")),
    ("x[a]", A.Subscript(x, a)),
    ("x[a, :]", A.Subscript(x, T(a, S()))),
    ("x[a:b]", A.Subscript(x, S(a, b))),
    ("x[::2]", A.Subscript(x, S(None, None, C(2)))),
    ("x[a, b:c]", A.Subscript(x, T(a, S(b, c)))),
    ("x[:]", A.Subscript(x, S())),
    ("x[1:]", A.Subscript(x, S(C(1)))),
    ("x[:b]", A.Subscript(x, S(None, b))),
    ("x[a:b:c]", A.Subscript(x, S(a, b, c))),
    ("x[a::]", A.Subscript(x, S(a))),
    ("x[None, :]", A.Subscript(x, T(C(None), S()))),
    ("x[a,]", A.Subscript(x, T(a))),
    ("(a, b)", T(a, b)),
    ("(a,)", T(a)),
    ("()", T()),
    ("a, b", T(a, b)),
    ("a, b,", T(a, b)),
    ("((a))", a),
    ("10", C(10)),
    ("0", C(0)),
    ("0x1F", C(31)),
    ("0b101", C(5)),
    ("0o17", C(15)),
    ("1_000_000", C(1000000)),
    ("1.0", C(1.0)),
    ("1e-5", C(1e-5)),
    (".5", C(0.5)),
    ("1.", C(1.0)),
    ("2.5E3", C(2500.0)),
    ("True", C(True)),
    ("False", C(False)),
    ("None", C(None)),
    ("'a'", C("a")),
    ('"b"', C("b")),
    ("'''c'd'''", C("c'd")),
    ('"""q"""', C("q")),
    ("'a' \"b\"", C("ab")),
    (r"'\n\t\x41\u00e9\N{BULLET}\''", C("\n\tA\u00e9\u2022'")),
    (r"r'\n'", C("\\n")),
    (r"'\q'", C("\\q")),
    ("u'x'", C("x")),
    ("''", C("")),
])
def test_expression(text: str, tree: A.Expr) -> None:
    assert expr(text) == tree


def test_comparison_operators() -> None:
    for op in ("==", "!=", "<", "<=", ">", ">="):
        assert expr(f"a {op} b") == A.Compare(op, a, b)


# ------------------------------------------------------------------ statements
def test_assignments() -> None:
    assert body("a = b = 1\n") == (A.Assign((a, b), C(1)),)
    assert body("a, b = e\n") == (A.Assign((T(a, b),), e),)
    assert body("(a, b) = c, d\n") == (A.Assign((T(a, b),), T(c, d)),)
    assert body("x[a, :] = e\n") == (A.Assign((A.Subscript(x, T(a, S())),), e),)
    assert body("x.a = e\n") == (A.Assign((A.Attribute(x, "a"),), e),)
    assert body("a = 1; b = 2;\n") == (A.Assign((a,), C(1)), A.Assign((b,), C(2)))


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%", "**", "@", "&", "|", "^", "<<", ">>"])
def test_augmented_assignment(op: str) -> None:
    assert body(f"x[a] {op}= b\n") == (A.AugAssign(A.Subscript(x, a), op, b),)


def test_simple_statements() -> None:
    assert body("f(x)\npass\nreturn\n") == (A.ExprStmt(A.Call(N("f"), (x,))), A.Pass(), A.Return(None))
    assert body("return a, b\n") == (A.Return(T(a, b)),)
    assert body("'not a docstring'\n'a string statement'\n") == (A.ExprStmt(C("a string statement")),)


def test_for_and_if() -> None:
    src = """\
        for i in dsl.range(4):
            pass
        for a, b in c:
            if a:
                x = 1
            elif b:
                x = 2
            elif c:
                pass
            else:
                x = 3
        """
    loop = A.For(N("i"), A.Call(A.Attribute(N("dsl"), "range"), (C(4),)), (A.Pass(),))
    inner = A.If(a, (A.Assign((x,), C(1)),),
                 (A.If(b, (A.Assign((x,), C(2)),), (A.If(c, (A.Pass(),), (A.Assign((x,), C(3)),)),)),))
    assert body(src) == (loop, A.For(T(a, b), c, (inner,)))
    assert body("for (a, b) in c: pass\nif a: pass\n") == (A.For(T(a, b), c, (A.Pass(),)), A.If(a, (A.Pass(),), ()))


def test_function_header() -> None:
    fd = parse(textwrap.dedent("""\
        @dsl.kernel
        @kernel(grid=8)
        def vadd(x, y: GM[f32], eps: dsl.f32 = -1e-5, n=3,):
            '''Add.'''
        """))
    assert fd.name == "vadd" and fd.docstring == "Add." and fd.body == ()
    assert fd.decorators == (A.Attribute(N("dsl"), "kernel"), A.Call(N("kernel"), (), (A.Keyword("grid", C(8)),)))
    assert fd.params == (
        A.Param("x", None, None),
        A.Param("y", A.Subscript(N("GM"), N("f32")), None),
        A.Param("eps", A.Attribute(N("dsl"), "f32"), U("-", C(1e-5))),
        A.Param("n", None, C(3)),
    )
    assert parse("def f(): return 1").body == (A.Return(C(1)),)
    assert parse("def f() -> None:\n    pass").params == ()


def test_layer_norm_example() -> None:
    fd = parse(textwrap.dedent('''\
        @dsl.kernel
        def layer_norm(x: GM[f32], w: GM[f32], b: GM[f32], y: GM[f32], eps: f32 = 1e-5, ROWS: Const[int] = 8):
            """Row-wise layer norm."""
            d = x.shape[1]
            for r in dsl.tiles(x.shape[0], ROWS):   # row blocks
                xt = x[r, :]
                mean = dsl.sum(xt, axis=1, keepdims=True) / d
                xc = xt - mean
                var = dsl.sum(xc * xc, axis=1, keepdims=True) / d
                y[r, :] = xc * dsl.rsqrt(var + eps) * w[None, :] if d > 0 else xc
                if dsl.core_id() == 0 and r.start == 0:
                    dsl.print("first block", mean)
                a, b2 = 1, 2.5
                a += -b2 ** 2
        '''))
    assert fd.name == "layer_norm" and fd.docstring == "Row-wise layer norm." and len(fd.params) == 6
    loop = fd.body[1]
    assert isinstance(loop, A.For) and len(loop.body) == 8
    r, xc, w = N("r"), N("xc"), N("w")
    dsl_ = N("dsl")
    value = A.IfExp(
        A.Compare(">", N("d"), C(0)),
        B("*", B("*", xc, A.Call(A.Attribute(dsl_, "rsqrt"), (B("+", N("var"), N("eps")),))),
          A.Subscript(w, T(C(None), S()))),
        xc)
    assert loop.body[4] == A.Assign((A.Subscript(N("y"), T(r, S())),), value)
    assert loop.body[5] == A.If(
        A.BoolOp("and", (A.Compare("==", A.Call(A.Attribute(dsl_, "core_id"), ()), C(0)),
                         A.Compare("==", A.Attribute(r, "start"), C(0)))),
        (A.ExprStmt(A.Call(A.Attribute(dsl_, "print"), (C("first block"), N("mean")))),), ())
    assert loop.body[7] == A.AugAssign(a, "+", U("-", B("**", N("b2"), C(2))))


def test_comments_docstring_blank_lines_and_continuations() -> None:
    fd = parse(textwrap.dedent('''\
        # a comment before the kernel

        @dsl.kernel  # trailing comment
        def k(x,      # parameters on several lines
              y):
            """Docstring
            on two lines."""

            # comment at body level
                # comment indented deeper: not an indent
            z = x + \\
                y
            w = f(x,
                  y,   # inside a call
            )
        # comment at column 0 inside the body
            t = (1 +
                 2)
        '''))
    assert fd.docstring == "Docstring\n    on two lines."
    assert fd.body == (
        A.Assign((N("z"),), B("+", x, N("y"))),
        A.Assign((N("w"),), A.Call(N("f"), (x, N("y")))),
        A.Assign((N("t"),), B("+", C(1), C(2))),
    )


def test_tabs_and_crlf() -> None:
    assert parse("def k():\r\n\tif a:\r\n\t\tpass\r\n").body == (A.If(a, (A.Pass(),), ()),)


def test_deep_nesting() -> None:
    assert expr("(" * 300 + "a" + ")" * 300) == a


# ------------------------------------------------------------------ locations
def test_locations_with_offsets() -> None:
    src = textwrap.dedent("""\
        @dsl.kernel
        def k(x: GM[f32], n: int = 4):
            y = x[0] + f(n,
                         2)
            for i in dsl.range(n):
                z = (a + b) * c
            if n:
                pass
            elif y:
                return n
        """)
    fd = parse_function(src, "f.py", line_offset=10, col_offset=4)
    L = lambda line, col, end=None: SourceLoc("f.py", line, col, end)  # noqa: E731
    assert fd.loc == L(12, 5, 10)                       # `def k`
    assert fd.decorators[0].loc == L(11, 6, 16)         # `dsl.kernel`
    assert fd.params[0].loc == L(12, 11, 21)            # `x: GM[f32]`
    assert fd.params[1].loc == L(12, 23, 33)            # `n: int = 4`
    assert fd.params[1].default.loc == L(12, 32, 33)    # type: ignore[union-attr]
    assign, loop, cond = fd.body
    assert isinstance(assign, A.Assign) and isinstance(assign.value, A.BinOp)
    assert assign.loc == L(13, 9)                       # spans two lines: no end column
    assert assign.value.loc == L(13, 13)
    assert assign.value.left.loc == L(13, 13, 17)       # `x[0]`
    assert assign.value.right.loc == L(13, 20)          # the call runs onto the next line
    assert isinstance(loop, A.For)
    assert loop.loc == L(15, 9, 12)                     # the `for` keyword
    assert loop.iter.loc == L(15, 18, 30)               # `dsl.range(n)`
    (inner,) = loop.body
    assert isinstance(inner, A.Assign) and isinstance(inner.value, A.BinOp)
    assert inner.loc == L(16, 13, 28)                   # `z = (a + b) * c`
    assert inner.value.loc == L(16, 17, 28)             # `(a + b) * c`, from the parenthesis
    assert inner.value.left.loc == L(16, 18, 23)        # `a + b`, without the parentheses
    assert isinstance(cond, A.If)
    assert cond.loc == L(17, 9, 11)                     # `if`
    (elif_,) = cond.orelse
    assert isinstance(elif_, A.If) and elif_.loc == L(19, 9, 13)  # `elif`
    assert elif_.body[0].loc == L(20, 13, 21)           # `return n`


def test_slice_and_tuple_locations() -> None:
    (stmt,) = body("y = x[:, 1:]\n")
    assert isinstance(stmt, A.Assign) and isinstance(stmt.value, A.Subscript)
    index = stmt.value.index
    assert isinstance(index, A.Tuple)
    assert (index.loc.col, index.loc.end_col) == (11, 16)
    assert [(s.loc.col, s.loc.end_col) for s in index.elts] == [(11, 12), (14, 16)]


# ------------------------------------------------------------------ errors: full text
def test_while_full_text() -> None:
    assert error("""\
        def k(x):
            while x > 0:
                x = x - 1
        """) == (
        "k.py:2:5: error[E101]: `while` loops are not supported in kernels\n"
        "        while x > 0:\n"
        "        ^~~~~\n"
        "hint: loop a known number of times: `for i in dsl.range(n):`")


def test_missing_colon_full_text() -> None:
    assert error("""\
        def k(x):
            for i in dsl.range(3)   # no colon
                pass
        """) == (
        "k.py:2:26: error[E100]: expected ':' after the `for` header\n"
        "        for i in dsl.range(3)   # no colon\n"
        "                             ^\n"
        "hint: end the `for` line with ':'")


def test_chained_comparison_full_text() -> None:
    assert error("""\
        def k(x):
            if 0 < x <= 5:
                pass
        """) == (
        "k.py:2:14: error[E102]: chained comparisons are not supported in kernels\n"
        "        if 0 < x <= 5:\n"
        "                 ^~\n"
        "hint: split it with `and`: `a < b and b <= c`")


def test_error_with_offsets_points_into_the_real_file() -> None:
    text = "class Ops:\n    @dsl.kernel\n    def k(x):\n        y = [x]\n"
    register_source("real.py", text)
    src = textwrap.dedent("\n".join(text.splitlines()[1:]))
    with pytest.raises(KernelError) as info:
        parse_function(src, "real.py", line_offset=1, col_offset=4)
    assert str(info.value) == (
        "real.py:4:13: error[E102]: list literals are not supported in kernels\n"
        "            y = [x]\n"
        "                ^~~\n"
        "hint: use a tuple instead: `(a, b)`")


# ------------------------------------------------------------------ errors: code, place, message, hint
@pytest.mark.parametrize("src, where, caret, parts", [
    ("try:\n    x = 1\nexcept Exception:\n    pass", "2:5", "^~~", ["E101", "`try` statements", "cannot raise or catch"]),
    ("with open(x) as f:\n    pass", "2:5", "^~~~", ["E101", "`with` statements", "context managers"]),
    ("class A:\n    pass", "2:5", "^~~~~", ["E101", "class definitions", "module level"]),
    ("def g(y):\n    return y", "2:5", "^~~", ["E101", "nested function definitions", "inline its body"]),
    ("@dsl.kernel\ndef g(y):\n    return y", "2:5", "^", ["E101", "decorated definitions"]),
    ("import numpy as np", "2:5", "^~~~~~", ["E101", "`import` is not allowed", "import at module level"]),
    ("from a import b", "2:5", "^~~~", ["E101", "`from ... import`", "import at module level"]),
    ("f = lambda y: y + 1", "2:9", "^~~~~~", ["E102", "`lambda`", "inline"]),
    ("y = [1, 2]", "2:9", "^~~~~~", ["E102", "list literals", "tuple"]),
    ("y = [i for i in x]", "2:9", "^~~~~~~~~~~~~~", ["E102", "list comprehensions", "`for` loop"]),
    ("y = sum(i for i in x)", "2:13", "^~~~~~~~~~~~", ["E102", "generator expressions"]),
    ("y = {'a': 1}", "2:9", "^~~~~~~~", ["E102", "dict literals"]),
    ("y = {1, 2}", "2:9", "^~~~~~", ["E102", "set literals"]),
    ('dsl.print(f"x = {x}")', "2:15", "^~~~~~~~~~", ["E102", "f-strings", 'dsl.print("x =", x)']),
    ("y = b'x'", "2:9", "^~~~", ["E102", "bytes literals"]),
    ("if x is None:\n    pass", "2:10", "^~", ["E102", "`is` (identity test)", "use `==`"]),
    ("if x is not None:\n    pass", "2:10", "^~~~~~", ["E102", "`is not`", "use `!=`"]),
    ("y = x in z", "2:11", "^~", ["E102", "`in` (membership test)"]),
    ("y = x not in z", "2:11", "^~~~~~", ["E102", "`not in`"]),
    ("for i in x:\n    break", "3:9", "^~~~~", ["E101", "`break`", "guard the rest of the body with `if`"]),
    ("for i in x:\n    continue", "3:9", "^~~~~~~~", ["E101", "`continue`", "`if`"]),
    ("global y", "2:5", "^~~~~~", ["E101", "`global`", "kernel parameter"]),
    ("nonlocal y", "2:5", "^~~~~~~~", ["E101", "`nonlocal`"]),
    ("del x", "2:5", "^~~", ["E101", "`del`"]),
    ("assert x > 0, 'bad'", "2:5", "^~~~~~", ["E101", "`assert`", "host"]),
    ("raise ValueError(x)", "2:5", "^~~~~", ["E101", "`raise`", "cannot raise"]),
    ("yield x", "2:5", "^~~~~", ["E101", "`yield`", "output tensor"]),
    ("y = yield", "2:9", "^~~~~", ["E101", "`yield`"]),
    ("async for i in x:\n    pass", "2:5", "^~~~~", ["E101", "`async`"]),
    ("y = await x", "2:9", "^~~~~", ["E102", "`await`"]),
    ("if (n := x) > 0:\n    pass", "2:11", "^~", ["E102", "assignment expressions (`:=`)", "own statement"]),
    ("f(*x)", "2:7", "^~", ["E102", "argument unpacking"]),
    ("f(**x)", "2:7", "^~~", ["E102", "argument unpacking"]),
    ("*a, b = x", "2:5", "^~", ["E102", "starred expressions"]),
    ("y = x[...]", "2:11", "^~~", ["E102", "`...`"]),
    ("y = 1j", "2:9", "^~", ["E102", "complex numbers"]),
    ("y: f32 = 1.0", "2:5", "^~~~~~~~~~~~", ["E101", "annotated assignments", "drop the annotation"]),
    ("for i in x:\n    pass\nelse:\n    pass", "4:5", "^~~~", ["E101", "`for ... else`", "after the loop"]),
    ("while True:\n    break", "2:5", "^~~~~", ["E101", "`while`"]),  # the outer construct comes first
    ("y = f(x, (1 + 2)\nz = 3", "2:10", "^", ["E100", "'(' was never closed", "add the missing ')'"]),
    ("y = (1 +", "2:9", "^", ["E100", "'(' was never closed"]),
    ("y = f(x))", "2:13", "^", ["E100", "unmatched ')'"]),
    ("y = f(x]", "2:12", "^", ["E100", "closing ']' does not match the opening '('", "opened on line 2"]),
    ("y = 1\n  z = 2", "3:7", "^", ["E103", "unexpected indent"]),
    ("if x:\n        y = 1\n    z = 2", "4:9", "^", ["E103", "does not match any enclosing block",
                                                       "indented by 4, 12 columns"]),
    ("for i in x:\ny = 2", "3:5", "^", ["E103", "expected an indented block after the `for` header on line 2"]),
    ("if x:\n\ty = 1\n    z = 2", "4:9", "^", ["E103", "inconsistent use of tabs and spaces"]),
    ("y = x z", "2:11", "^", ["E100", "unexpected name 'z'", "operator or ',' missing"]),
    ("y = f(a b)", "2:13", "^", ["E100", "unexpected name 'b'; expected ',' or ')'"]),
    ("y = x +", "2:12", "^", ["E100", "unexpected end of line; expected an expression"]),
    ("y = 1 if x", "2:15", "^", ["E100", "expected 'else'"]),
    ("for i range(3):\n    pass", "2:11", "^~~~~", ["E100", "unexpected name 'range'; expected 'in'"]),
    ("if x\n    pass", "2:9", "^", ["E100", "expected ':' after the `if` header"]),
    ("if x:\n    pass\nelse\n    pass", "4:9", "^", ["E100", "expected ':' after the `else` header"]),
    ("y = 'abc", "2:9", "^", ["E100", "unterminated string literal"]),
    ("y = $x", "2:9", "^", ["E100", "unexpected character '$'"]),
    ("y = 1 \\ 2", "2:11", "^", ["E100", "after line continuation"]),
    ("y = x.", "2:11", "^", ["E100", "expected a name"]),
    ("y = '\\x4'", "2:9", "^~~~~", ["E100", "invalid escape sequence '\\x'"]),
    ("f(a=1, a=2)", "2:12", "^~~", ["E100", "keyword argument 'a' repeated"]),
    ("f(a=1, 2)", "2:12", "^", ["E100", "positional argument follows keyword argument"]),
    ("f(x.y=2)", "2:7", "^~~", ["E100", "plain name before '='", "'=='"]),
    ("f(x) = 2", "2:5", "^~~~", ["E100", "cannot assign to a function call"]),
    ("1 = x", "2:5", "^", ["E100", "cannot assign to a literal"]),
    ("a + b += 1", "2:5", "^~~~~", ["E100", "cannot assign to an expression"]),
    ("a, b += 1", "2:5", "^~~~", ["E100", "cannot use '+=' on a tuple"]),
    ("for x.a in y:\n    pass", "2:9", "^~~", ["E102", "loop variable must be a name"]),
    ("y = a == not b", "2:14", "^~~", ["E100", "`not` needs parentheses"]),
    ("y = for", "2:9", "^~~", ["E100", "unexpected keyword 'for'"]),
    ("for = 1", "2:9", "^", ["E100"]),
])
def test_bad_kernel_body(src: str, where: str, caret: str, parts: list[str]) -> None:
    text = error("def k(x):\n" + textwrap.indent(src, "    ") + "\n")
    first, _, caret_line, *_ = text.splitlines()
    assert first.startswith(f"k.py:{where}: error[{parts[0]}]: "), text
    for part in parts[1:]:
        assert part in text, text
    col = int(where.split(":")[1])
    assert caret_line == "    " + " " * (col - 1) + caret, text


@pytest.mark.parametrize("src, parts", [
    ("def k(*args):\n    pass", ["k.py:1:7: error[E102]", "`*args` / `**kwargs` parameters", "^~~~~"]),
    ("def k(x, /, y):\n    pass", ["k.py:1:10: error[E102]", "positional-only"]),
    ("def k(x, x):\n    pass", ["k.py:1:10: error[E100]", "duplicate parameter 'x'"]),
    ("def k(x=1, y):\n    pass", ["k.py:1:12: error[E100]", "'y' without a default follows"]),
    ("def k(x)\n    pass", ["k.py:1:9: error[E100]", "expected ':' after the function signature"]),
    ("def k(x):\n", ["k.py:1:10: error[E103]", "expected an indented block after the function signature"]),
    ("def (x):\n    pass", ["k.py:1:5: error[E100]", "unexpected '('; expected a name"]),
    ("def k(x):\n    pass\ny = 1\n", ["k.py:3:1: error[E100]", "after the end of the kernel function",
                                      "exactly one function"]),
    ("", ["error[E100]: expected a kernel function definition"]),
    ("# only a comment\n", ["k.py:1:1: error[E100]", "expected a kernel function definition"]),
    ("x = 1\n", ["k.py:1:1: error[E100]", "expected a kernel function definition"]),
])
def test_bad_kernel_header(src: str, parts: list[str]) -> None:
    text = error(src)
    for part in parts:
        assert part in text, text


def test_errors_never_leak_lark_types() -> None:
    for src in ["def k(:\n", "def k():\n    x = (\n", "@\n", "def k():\n    x = 1 +* 2\n", "\x00", "def k():\n  \tx\n        y\n"]:
        with pytest.raises(KernelError):
            parse_function(src, "k.py")


def test_too_deep_is_a_kernel_error() -> None:
    with pytest.raises(KernelError, match="E102.*nested too deeply"):
        parse_function("def k():\n    x = " + "-" * 5000 + "1\n", "k.py")


# ------------------------------------------------------------------ robustness (hypothesis)
_VALID = textwrap.dedent("""\
    @dsl.kernel
    def k(x: GM[f32], y: GM[f32], n: Const[int] = 8):
        '''Doc.'''
        for t in dsl.tiles(x.shape[0], n):   # tiles
            a, b = x[t, :], -y[t] ** 2
            if a.start == 0 and not b:
                y[t] = a * 0.5 if n > 1 else dsl.exp(b)
            elif a:
                y[t] += f(a, k=1,
                          m=(b, 2))
            else:
                pass
        return
    """)
_SNIPPETS = ["(", ")", "[", "]", "{", "}", ":", ",", ".", "=", "+", "*", "**", "'", '"', "'''", "#", "\\", "\n",
             "\t", " ", "    ", "\n    ", "\\\n", "while ", "lambda", "for ", " in ", "if ", "else", "not ", "is ",
             "def ", "@", ":=", "...", "0x", "1e", "j", "f'", "yield", "\r", "\x0c", "é", "_"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=120))
def test_random_text_raises_only_kernel_errors(text: str) -> None:
    for src in (text, "def k():\n    " + text):
        try:
            parse_function(src, "fuzz.py")
        except KernelError as err:
            assert err.code in ("E100", "E101", "E102", "E103")
            err.render()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(_VALID)), st.integers(0, 6), st.sampled_from(_SNIPPETS)),
                min_size=1, max_size=4))
def test_mutated_kernel_raises_only_kernel_errors(edits: list[tuple[int, int, str]]) -> None:
    src = _VALID
    for pos, cut, snippet in edits:
        src = src[:pos] + snippet + src[pos + cut:]
    register_source("mut.py", src)
    try:
        fd = parse_function(src, "mut.py", 2, 4)
    except KernelError as err:
        assert err.loc is not None and err.loc.line >= 3 and err.loc.col >= 5, err
        err.render()
    else:
        assert isinstance(fd, A.FunctionDef)


# ------------------------------------------------------------------ the parser cache
def test_parser_tables_are_cached_on_disk(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("VINCI_CACHE_DIR", str(tmp_path))
    first = P._build()
    (entry,) = tmp_path.glob("kernel-parser-*.pickle")
    assert not list(tmp_path.glob("*.tmp"))
    second = P._build()  # loaded from the file
    assert second is not first and isinstance(second.options.transformer, P._ToAst)
    entry.write_bytes(b"corrupt")
    third = P._build()  # rebuilt and rewritten
    assert entry.stat().st_size > 1000
    for parser in (first, second, third):
        conv = parser.options.transformer
        conv.reset("c.py", 0, 0)
        assert parser.parse("def k(): pass\n") == A.FunctionDef("k", (), (A.Pass(),))
