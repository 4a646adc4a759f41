"""kernel_forge.common.expressions: the whitelisted arithmetic language of shapes, launches, costs and
constraints.  CPU only."""
from __future__ import annotations

import ast
import time

import pytest

from kernel_forge.common import expressions as E
from kernel_forge.common.errors import ExpressionError, InputError

VARS = {"n": 1000, "m": 7, "BLOCK": 256, "zero": 0}


def caret_column(exc: ExpressionError) -> int:
    """The column the caret line of the message points at, relative to the echoed expression."""
    lines = str(exc).splitlines()
    expr_line, caret_line = lines[-2], lines[-1]
    assert caret_line.strip() == "^", str(exc)
    assert expr_line.startswith("    ") and caret_line.startswith("    ")
    return len(caret_line) - 1 - 4


# -- values ----------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, expected", [
    ("1 + 2 * 3", 7),
    ("(1 + 2) * 3", 9),
    ("7 // 2", 3),
    ("7 % 4", 3),
    ("-7 // 2", -4),
    ("2 ** 10", 1024),
    ("1 << 4", 16),
    ("256 >> 3", 32),
    ("6 & 3", 2),
    ("6 | 1", 7),
    ("6 ^ 3", 5),
    ("~5", -6),
    ("-n", -1000),
    ("+m", 7),
    ("n * m + BLOCK", 7256),
    ("cdiv(n, BLOCK)", 4),
    ("cdiv(1024, 256)", 4),
    ("cdiv(1, 256)", 1),
    ("cdiv(0, 256)", 0),
    ("round_up(n, BLOCK)", 1024),
    ("round_up(1024, 256)", 1024),
    ("round_up(1, 32)", 32),
    ("next_pow2(0)", 1),
    ("next_pow2(1)", 1),
    ("next_pow2(2)", 2),
    ("next_pow2(5)", 8),
    ("next_pow2(1000)", 1024),
    ("next_pow2(1024)", 1024),
    ("min(n, BLOCK)", 256),
    ("max(n, BLOCK, 4096)", 4096),
    ("min(3, 1, 2)", 1),
    ("abs(-m)", 7),
    ("ceil(n / 3)", 334),
    ("floor(n / 3)", 333),
    ("int(7.9)", 7),
    ("sqrt(16)", 4.0),
    ("log2(1024)", 10.0),
    ("n if m > 5 else BLOCK", 1000),
    ("n if m > 50 else BLOCK", 256),
])
def test_arithmetic_and_functions(expr, expected):
    value = E.evaluate(expr, VARS)
    assert value == expected
    assert type(value) is type(expected)


def test_true_division_gives_float():
    assert E.evaluate("n / 8", VARS) == 125.0
    assert isinstance(E.evaluate("n / 8", VARS), float)
    assert E.evaluate("m / 2", VARS) == 3.5


def test_cdiv_of_negative_rounds_toward_positive_infinity():
    assert E.evaluate("cdiv(-7, 2)", {}) == -3
    assert E.evaluate("cdiv(7, 2)", {}) == 4


@pytest.mark.parametrize("expr, expected", [
    ("n > BLOCK", True),
    ("n < BLOCK", False),
    ("n == 1000", True),
    ("n != 1000", False),
    ("BLOCK <= 256", True),
    ("BLOCK >= 257", False),
    ("1 < m < n", True),
    ("1 < n < m", False),
    ("3 > 2 > 2", False),
    ("n > 0 and BLOCK <= 1024", True),
    ("n > 0 and BLOCK > 1024", False),
    ("n < 0 or m == 7", True),
    ("n < 0 or m == 8", False),
    ("not n < 0", True),
    ("not (n > 0 and m > 0)", False),
    ("BLOCK % 32 == 0 and BLOCK * 4 <= 49152", True),
])
def test_comparisons_and_boolean_logic(expr, expected):
    assert E.evaluate(expr, VARS) is expected


def test_numbers_pass_through_unchanged():
    assert E.evaluate(5, {}) == 5
    assert E.evaluate(2.5, {}) == 2.5
    assert E.names(5) == set()
    assert E.names(1.5) == set()


def test_booleans_are_not_numbers():
    with pytest.raises(ExpressionError, match="booleans are not numbers"):
        E.evaluate(True, {})


def test_variables_are_read_from_the_mapping():
    assert E.evaluate("a * b", {"a": 3, "b": 4}) == 12
    assert E.evaluate("a * b", {"a": 3.5, "b": 2}) == 7.0


# -- names ---------------------------------------------------------------------------------

def test_names_excludes_function_names():
    assert E.names("cdiv(n, BLOCK) * m + max(a, 2)") == {"n", "BLOCK", "m", "a"}
    assert E.names("next_pow2(k)") == {"k"}
    assert E.names("3 + 4") == set()
    assert E.names("x if y else z") == {"x", "y", "z"}


# -- evaluate_int --------------------------------------------------------------------------

def test_evaluate_int_accepts_whole_floats():
    v = E.evaluate_int("n / 8", VARS)
    assert v == 125 and type(v) is int
    assert E.evaluate_int(" cdiv(n, 256) ", VARS) == 4
    assert E.evaluate_int(4.0, {}) == 4


def test_evaluate_int_rejects_fractions_and_names_what():
    with pytest.raises(ExpressionError) as ei:
        E.evaluate_int("m / 2", VARS, what="grid size")
    msg = str(ei.value)
    assert msg.startswith("grid size must be a whole number, got 3.5")
    assert "'m / 2'" in msg


# -- refusals --------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, message, column", [
    ("a.__class__", "Attribute is not allowed", 0),
    ("n + a.__class__", "Attribute is not allowed", 4),
    ("a[0]", "Subscript is not allowed", 0),
    ("lambda: 1", "Lambda is not allowed", 0),
    ("'x'", "only numbers are allowed as constants", 0),
    ("n + 'x'", "only numbers are allowed as constants", 4),
    ("True", "only numbers are allowed as constants", 0),
    ("None", "only numbers are allowed as constants", 0),
    ("(1, 2)", "Tuple is not allowed", 0),
    ("[1]", "List is not allowed", 0),
    ("f'{n}'", "JoinedStr is not allowed", 0),
    ("n @ m", "operator '@' is not allowed", 0),
    ("n in m", "operator 'in' is not allowed", 0),           # passed the whitelist, then KeyError in the evaluator
    ("n not in m", "operator 'not in' is not allowed", 0),
    ("n is m", "operator 'is' is not allowed", 0),
    ("1 + (n is not m)", "operator 'is not' is not allowed", 5),
    ("__import__('os')", "unknown function '__import__'", 0),
    ("open('x')", "unknown function 'open'", 0),
    ("n + eval('1')", "unknown function 'eval'", 4),
    ("min(n, key=1)", "keyword arguments are not allowed", 0),
])
def test_whitelist_refuses_with_caret(expr, message, column):
    with pytest.raises(ExpressionError) as ei:
        E.parse(expr)
    exc = ei.value
    assert message in str(exc)
    assert exc.expression == expr
    assert exc.column == column
    assert caret_column(exc) == column
    assert f"in expression {expr!r}" in str(exc)


def test_unknown_function_lists_the_allowed_ones():
    with pytest.raises(ExpressionError) as ei:
        E.parse("__import__('os').system('true')")
    msg = str(ei.value)
    assert "allowed: abs, cdiv, ceil, float, floor, int, log2, max, min, next_pow2, round_up, sqrt" in msg


def test_method_calls_are_refused():
    with pytest.raises(ExpressionError, match="unknown function"):
        E.parse("n.bit_length()")


def test_expression_error_is_an_input_error_with_exit_code_2():
    with pytest.raises(InputError) as ei:
        E.evaluate("a.b", {})
    assert ei.value.exit_code == 2


def test_refusal_happens_before_any_evaluation():
    # the refused node sits in an untaken branch; parse() must still refuse it
    with pytest.raises(ExpressionError, match="Attribute is not allowed"):
        E.evaluate("1 if 1 else a.__class__", {"a": 1})


def test_syntax_error_has_message_and_caret():
    with pytest.raises(ExpressionError) as ei:
        E.parse("1 +* 2")
    assert str(ei.value).startswith("syntax error: ")
    assert ei.value.column == 3
    assert caret_column(ei.value) == 3


def test_unclosed_call_is_a_syntax_error():
    with pytest.raises(ExpressionError, match=r"syntax error: .*never closed"):
        E.parse("cdiv(n,")


def test_overlong_expression_is_refused():
    with pytest.raises(ExpressionError, match="longer than 1000 characters"):
        E.parse("n+" * 600 + "1")


def test_non_string_is_refused():
    with pytest.raises(ExpressionError, match="expected a string"):
        E.parse(None)


@pytest.mark.parametrize("expr, message", [
    ("2 ** 1000", "exponent too large"),
    ("n ** 257", "exponent too large"),
    ("10 ** 10 ** 10", "exponent too large"),
    ("2.0 ** 300", "exponent too large"),
    ("1 << 1000", "shift too large"),
])
def test_huge_exponents_and_shifts_are_refused(expr, message):
    t0 = time.perf_counter()
    with pytest.raises(ExpressionError, match=message):
        E.evaluate(expr, VARS)
    assert time.perf_counter() - t0 < 1.0


def test_exponent_at_the_limit_is_allowed():
    assert E.evaluate("2 ** 256", {}) == 2 ** 256
    assert E.evaluate("1 << 256", {}) == 1 << 256


def test_nested_powers_cannot_build_huge_numbers():
    with pytest.raises(ExpressionError, match="too large"):
        E.evaluate("((2**256)**256)**256", {})


# -- evaluation errors -----------------------------------------------------------------------

def test_unknown_variable_lists_known_ones_with_caret():
    with pytest.raises(ExpressionError) as ei:
        E.evaluate("n + q * 2", {"n": 1, "k": 2})
    exc = ei.value
    assert str(exc).startswith("unknown variable 'q' (known: k, n) in expression 'n + q * 2'")
    assert exc.column == 4
    assert caret_column(exc) == 4


def test_unknown_variable_with_no_variables_says_none():
    with pytest.raises(ExpressionError, match=r"unknown variable 'n' \(known: none\)"):
        E.evaluate("n", {})


@pytest.mark.parametrize("expr", ["1 / 0", "n // zero", "n % zero", "cdiv(n, zero)",
                                  "round_up(n, 0)", "1.0 / 0.0"])
def test_division_by_zero_is_an_expression_error(expr):
    with pytest.raises(ExpressionError) as ei:
        E.evaluate(expr, VARS)
    assert str(ei.value).startswith(f"division by zero in expression {expr!r}")


@pytest.mark.parametrize("expr, fragment", [
    ("sqrt(-1)", "math domain error"),
    ("log2(0)", "math domain error"),
    ("int(1e400)", "infinity"),
    ("1 << -1", "negative shift count"),
    ("min()", "min expected at least 1 argument"),
])
def test_runtime_failures_become_expression_errors(expr, fragment):
    with pytest.raises(ExpressionError, match=fragment):
        E.evaluate(expr, {})


def test_float_overflow_becomes_expression_error():
    with pytest.raises(ExpressionError):
        E.evaluate("(10.0 ** 200) ** 2", {})


def test_and_or_short_circuit():
    assert E.evaluate("k > 0 and n % k == 0", {"k": 0, "n": 8}) is False
    assert E.evaluate("k == 0 or n % k == 0", {"k": 0, "n": 8}) is True


def test_caret_aligned_with_leading_whitespace():
    with pytest.raises(ExpressionError) as ei:
        E.parse("  a.__class__")
    lines = str(ei.value).splitlines()
    expr_line, caret_line = lines[-2], lines[-1]
    assert expr_line[caret_line.index("^")] == "a"


#: an expression using each AST class the whitelist admits
ADMITTED_SAMPLES = {
    ast.Expression: "n", ast.Load: "n", ast.Name: "n", ast.Constant: "1", ast.BinOp: "n + 1",
    ast.UnaryOp: "-n", ast.Compare: "n < 4", ast.BoolOp: "n and 2", ast.IfExp: "1 if n else 2",
    ast.Call: "cdiv(n, 2)",
    ast.Add: "n + 1", ast.Sub: "n - 1", ast.Mult: "n * 2", ast.Div: "n / 2", ast.FloorDiv: "n // 2",
    ast.Mod: "n % 2", ast.Pow: "n ** 2", ast.LShift: "n << 1", ast.RShift: "n >> 1", ast.BitAnd: "n & 1",
    ast.BitOr: "n | 4", ast.BitXor: "n ^ 1", ast.Eq: "n == 3", ast.NotEq: "n != 3", ast.Lt: "n < 3",
    ast.LtE: "n <= 3", ast.Gt: "n > 3", ast.GtE: "n >= 3", ast.USub: "-n", ast.UAdd: "+n", ast.Not: "not n",
    ast.Invert: "~n", ast.And: "n and 1", ast.Or: "n or 1",
}
#: an expression using each operator the whitelist refuses
REFUSED_OPERATORS = {ast.MatMult: "n @ n", ast.In: "n in n", ast.NotIn: "n not in n", ast.Is: "n is n",
                     ast.IsNot: "n is not n"}


def test_every_node_the_whitelist_admits_is_one_the_evaluator_handles():
    """Walks every AST class Python has: those the whitelist admits each evaluate to a number
    (none passes the check to fail in the evaluator, as ``in`` did: KeyError, exit 4), and every
    operator it does not admit is refused by parse with its own words."""
    classes = {c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.AST)}
    admitted = {c for c in classes if E.admitted(c)}
    assert admitted == set(ADMITTED_SAMPLES), "a class the whitelist admits needs a sample (and a case in _eval)"
    for cls, text in ADMITTED_SAMPLES.items():
        assert any(type(node) is cls for node in ast.walk(E.parse(text))), (cls, text)
        value = E.evaluate(text, {"n": 3})
        assert isinstance(value, (int, float)), (text, value)
    operators = {c for c in classes if issubclass(c, (ast.operator, ast.cmpop, ast.unaryop, ast.boolop))
                 and c not in (ast.operator, ast.cmpop, ast.unaryop, ast.boolop)}
    assert operators - admitted == set(REFUSED_OPERATORS)
    for cls, text in REFUSED_OPERATORS.items():
        with pytest.raises(ExpressionError, match="is not allowed"):
            E.parse(text)


@pytest.mark.parametrize("name, problem", [
    ("n", None), ("n_2", None), ("BLOCK", None), ("None", "reads as the constant None"),
    ("True", "reads as the constant True"), ("False", "reads as the constant False"),
    ("lambda", "Python keyword"), ("n m", "not an identifier"), (" n", "not an identifier")])
def test_a_variable_name_is_one_an_expression_reads_as_that_name(name, problem):
    said = E.variable_problem(name)
    assert (said is None) if problem is None else (problem in said)
