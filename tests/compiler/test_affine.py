"""Integer scalar expressions have one affine normal form, whatever the association: sums of
constant multiples of terms collect like terms and fold constants (compiler/sexpr.py), so
`x[j:j + 999 * C + 1]` is a window of static-per-launch size however it is written (no E207)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import sexpr as S
from compiler.interp.interpret_rules import seval

# the terms: loop variables, launch arguments (shapes), and non-linear subexpressions
TERMS = [S.var("j"), S.var("i"), S.arg(2), S.arg(5), S.binary("//", S.var("h"), 3),
         S.binary("*", S.var("i"), S.arg(2)), S.smin(S.var("j"), S.arg(5))]
ENV_VARS = ("j", "i", "h")
MASK = (1 << 64) - 1


def wrap(v: int) -> int:
    v &= MASK
    return v - (1 << 64) if v >> 63 else v


# A random expression tree over + - neg and multiplication by a constant, as nested tuples; its
# meaning (a linear form) is computed by `linear` below, independently of compiler/sexpr.py.
leaves = st.one_of(st.integers(0, len(TERMS) - 1).map(lambda i: ("t", i)),
                   st.integers(-1000, 1000).map(lambda c: ("c", c)))


def extend(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.sampled_from(["+", "-"]), children, children),
        st.tuples(st.just("neg"), children),
        st.tuples(st.sampled_from(["*l", "*r"]), st.integers(-9, 9), children),
    )


trees = st.recursive(leaves, extend, max_leaves=12)


def build(t: tuple) -> S.SExpr:
    """The tree built through the folding constructors, association as written."""
    if t[0] == "t":
        return TERMS[t[1]]
    if t[0] == "c":
        return S.const(t[1])
    if t[0] == "neg":
        return S.unary("neg", build(t[1]))
    if t[0] == "*l":
        return S.mul(t[1], build(t[2]))
    if t[0] == "*r":
        return S.mul(build(t[2]), t[1])
    return S.binary(t[0], build(t[1]), build(t[2]))


def linear(t: tuple) -> tuple[dict[int, int], int]:
    """The tree's meaning: coefficient per term index, and the constant."""
    if t[0] == "t":
        return {t[1]: 1}, 0
    if t[0] == "c":
        return {}, t[1]
    if t[0] == "neg":
        return scale(linear(t[1]), -1)
    if t[0] in ("*l", "*r"):
        return scale(linear(t[2]), t[1])
    (a, ka), (b, kb) = linear(t[1]), linear(t[2])
    sign = 1 if t[0] == "+" else -1
    out = dict(a)
    for i, c in b.items():
        out[i] = out.get(i, 0) + sign * c
    return out, ka + sign * kb


def scale(lin: tuple[dict[int, int], int], f: int) -> tuple[dict[int, int], int]:
    return {i: f * c for i, c in lin[0].items()}, f * lin[1]


def value(lin: tuple[dict[int, int], int], env: dict, argv: list[int]) -> int:
    return wrap(sum(c * seval(TERMS[i], env, argv) for i, c in lin[0].items()) + lin[1])


envs = st.fixed_dictionaries({v: st.integers(-(1 << 40), 1 << 40) for v in ENV_VARS})
argvs = st.lists(st.integers(0, 1 << 20), min_size=6, max_size=6)


@settings(max_examples=300, deadline=None)
@given(trees, envs, argvs)
def test_normal_form_evaluates_like_the_tree(t: tuple, env: dict, argv: list[int]) -> None:
    e = build(t)
    assert seval(e, env, argv) == value(linear(t), env, argv)
    assert S.normalize(e) == e  # constructors already give the normal form


@settings(max_examples=300, deadline=None)
@given(trees, st.randoms(use_true_random=False))
def test_any_association_normalises_identically(t: tuple, rnd) -> None:  # type: ignore[no-untyped-def]
    """The tree, and its linear form summed in a random order with random association, are the
    same SExpr."""
    terms, k = linear(t)
    pieces = [S.mul(c, TERMS[i]) if rnd.random() < 0.5 else S.mul(TERMS[i], c) for i, c in terms.items()]
    pieces.append(S.const(k))
    rnd.shuffle(pieces)
    while len(pieces) > 1:  # combine two random neighbours: random association
        n = rnd.randrange(len(pieces) - 1)
        a, b = pieces[n], pieces[n + 1]
        pieces[n:n + 2] = [S.add(a, b) if rnd.random() < 0.5 else S.sub(a, S.unary("neg", b))]
    assert pieces[0] == build(t)
    # and the difference of two spellings of the same terms is the constant difference
    assert S.sub(build(t), S.sub(pieces[0], 7)) == S.const(7)


@settings(max_examples=200, deadline=None)
@given(trees, trees)
def test_a_difference_is_constant_exactly_when_the_terms_cancel(a: tuple, b: tuple) -> None:
    d = S.sub(build(a), build(b))
    (ta, ka), (tb, kb) = linear(a), linear(b)
    cancels = all(ta.get(i, 0) == tb.get(i, 0) for i in set(ta) | set(tb))
    assert d.is_const == cancels
    if cancels:
        assert d.value == wrap(ka - kb)


def test_the_issue_spellings_are_one_expression() -> None:
    j, c = S.var("j"), S.arg(4)
    forms = [
        S.add(S.add(j, S.mul(999, c)), 1),                       # j + 999 * C + 1
        S.add(j, S.add(S.mul(999, c), 1)),                       # j + (999 * C + 1)
        S.add(S.add(1, j), S.mul(c, 999)),                       # 1 + j + C * 999
        S.add(S.sub(j, S.mul(S.unary("neg", c), 999)), 1),       # j - (-C) * 999 + 1
        S.add(S.sub(S.add(j, S.mul(c, 1000)), c), 1),            # j + C * 1000 - C + 1
    ]
    assert all(f == forms[0] for f in forms)
    assert S.sub(forms[0], j) == S.add(S.mul(c, 999), 1)
    assert not S.free_vars(S.sub(forms[2], j))
    assert S.fmt(forms[0]) == "((j + (arg[4] * 999)) + 1)"


def test_coefficients_wrap_like_i64() -> None:
    x = S.var("x")
    big = S.mul(S.mul(x, 1 << 40), 1 << 30)  # 2^70 x == 0 (mod 2^64)
    assert big == S.const(0)
    e = S.add(S.mul(x, (1 << 63) - 1), x)  # (2^63 - 1) x + x == -2^63 x
    assert seval(e, {"x": 3}, []) == wrap(3 << 63)


def test_upper_bounds_and_ceil_division_survive_normalisation() -> None:
    lo, n = S.var("lo"), S.arg(2)
    for ln in (S.sub(S.smin(S.add(lo, 8), n), lo), S.sub(S.smin(S.add(8, lo), n), S.add(lo, 0)),
               S.add(S.unary("neg", lo), S.smin(n, S.add(S.sub(lo, 1), 9)))):
        assert S.upper_bound(ln) == S.const(8)
    assert S.fmt(S.ceil_div(S.var("m"), 16)) == "cdiv(m, 16)"
    assert S.fmt(S.ceil_div(S.var("m"), n)) == "cdiv(m, arg[2])"
    assert S.fmt(S.binary("//", S.var("m"), 2)) == "(m // 2)"


# ------------------------------------------------------------------ in kernels
SPELLINGS = ["j + 999 * C + 1", "j + (999 * C + 1)", "1 + j + C * 999", "(j + 999 * C) + 1",
             "j - (-C) * 999 + 1", "j + C * 1000 - C + 1", "j + 999 * x.shape[0] // 4000 + 1"]


@pytest.mark.parametrize("stop", SPELLINGS)
def test_windows_from_any_spelling_compile_and_agree(source, stop: str) -> None:  # type: ignore[no-untyped-def]
    from tests.compiler.test_interpret import both, same, same_runs

    m = source(f"""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], C: int):
            for t in dsl.tiles(x.shape[0] // 1000, 1):
                j = t.start * 1000
                y[j:{stop}] = x[j:{stop}] * 2.0
    """)
    x = np.random.default_rng(1).random(4000).astype(np.float32)
    na, ia, nr, ir = both(m.k[2], [x, np.zeros_like(x), 1], profile=True)
    np.testing.assert_array_equal(na[1], x * 2.0)
    same(na[1], ia[1])
    same_runs(nr, ir)


def test_tile_dump_shows_the_normal_form(source) -> None:  # type: ignore[no-untyped-def]
    m = source("""
        @dsl.kernel
        def k(x: GM[f32], y: GM[f32], C: int):
            for t in dsl.tiles(x.shape[0] // 1000, 1):
                j = t.start * 1000
                y[j:1 + j + C * 999] = x[j:(j + 999 * C) + 1] * 2.0
    """)
    x = np.zeros(4000, np.float32)
    text = m.k.emit("tile", x, x, 1)
    load = next(line for line in text.splitlines() if "<- x[" in line)
    store = next(line for line in text.splitlines() if line.strip().startswith("y["))
    for line in (load, store):  # both windows: 1 x (999 C + 1) from j = t * 1000, however spelled
        assert "1x((C * 999) + 1)" in line, text
