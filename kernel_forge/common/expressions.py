"""Safe evaluation of shape, launch, cost and constraint expressions.

Expressions are a tiny arithmetic language parsed with :mod:`ast` and walked by a whitelist:
numbers, variable names, ``+ - * / // % ** << >> & | ^``, comparisons, ``and/or/not``,
conditional expressions and the functions in :data:`FUNCTIONS`.  Nothing is ever passed to
``eval``; attribute access, subscripts, lambdas and every other node are refused.
"""
from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from functools import lru_cache

from kernel_forge.common.errors import ExpressionError

Number = int | float


def _cdiv(a: Number, b: Number) -> int:
    if b == 0:
        raise ZeroDivisionError("cdiv by zero")
    return -(-int(a) // int(b))


def _next_pow2(a: Number) -> int:
    a = int(a)
    return 1 if a <= 1 else 1 << (a - 1).bit_length()


def _round_up(a: Number, b: Number) -> int:
    return _cdiv(a, b) * int(b)


FUNCTIONS = {
    "cdiv": _cdiv,
    "round_up": _round_up,
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "float": float,
    "ceil": math.ceil,
    "floor": math.floor,
    "sqrt": math.sqrt,
    "log2": math.log2,
    "next_pow2": _next_pow2,
}

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_UNOPS = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
          ast.Invert: operator.invert}
_MAX_POW = 256
_MAX_BITS = 4096
#: deepest nesting of operators and calls an expression may have (the evaluator recurses)
MAX_DEPTH = 64


def _depth(tree: ast.AST) -> int:
    """Nesting depth of ``tree``, computed without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


#: the AST nodes the evaluator handles, besides its operator tables (every other node is refused)
_NODES = (ast.Expression, ast.Load, ast.Constant, ast.Name, ast.BinOp, ast.UnaryOp, ast.Compare,
          ast.BoolOp, ast.IfExp, ast.Call)
#: every operator the evaluator handles (its tables; ``and``/``or`` short-circuit in _eval itself)
_OPERATORS = {**_BINOPS, **_CMPOPS, **_UNOPS, ast.And: None, ast.Or: None}
#: operators Python has and the evaluator does not, as a message spells them
_REFUSED_WORDS = {ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.MatMult: "@"}


def admitted(node_type: type) -> bool:
    """Whether the whitelist lets an AST node of this type through: exactly the node types and
    operators :func:`_eval` handles (one table for both, so that nothing passes the check and
    then fails in the evaluator)."""
    return node_type in _NODES or node_type in _OPERATORS


def _check(tree: ast.AST, expression: str) -> None:
    for node in ast.walk(tree):
        kind = type(node)
        if isinstance(node, (ast.operator, ast.cmpop, ast.unaryop, ast.boolop)):
            continue                     # judged with the node that holds them, which has a column
        if not admitted(kind):
            raise ExpressionError(f"{kind.__name__} is not allowed", expression=expression,
                                  column=getattr(node, "col_offset", None))
        ops = (node.ops if isinstance(node, ast.Compare) else
               [node.op] if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp)) else [])
        for op in ops:
            if not admitted(type(op)):
                word = _REFUSED_WORDS.get(type(op), type(op).__name__)
                raise ExpressionError(f"operator {word!r} is not allowed (comparisons: == != < <= > >=)"
                                      if isinstance(op, ast.cmpop) else f"operator {word!r} is not allowed",
                                      expression=expression, column=node.col_offset)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise ExpressionError("only numbers are allowed as constants",
                                      expression=expression, column=node.col_offset)
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                name = getattr(node.func, "id", type(node.func).__name__)
                raise ExpressionError(
                    f"unknown function {name!r} (allowed: {', '.join(sorted(FUNCTIONS))})",
                    expression=expression, column=node.col_offset)
            if node.keywords:
                raise ExpressionError("keyword arguments are not allowed",
                                      expression=expression, column=node.col_offset)


@lru_cache(maxsize=4096)
def parse(expression: str) -> ast.Expression:
    """Parse and whitelist-check an expression; raise :class:`ExpressionError` if refused."""
    if not isinstance(expression, str):
        raise ExpressionError("expected a string", expression=str(expression))
    if len(expression) > 1000:
        raise ExpressionError("expression longer than 1000 characters", expression=expression[:40])
    expression = expression.strip()
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        col = (exc.offset or 1) - 1
        raise ExpressionError(f"syntax error: {exc.msg}", expression=expression, column=col) from None
    except (RecursionError, MemoryError):
        raise ExpressionError(f"nested more than {MAX_DEPTH} levels deep", expression=expression[:40]) from None
    if _depth(tree) > MAX_DEPTH:
        raise ExpressionError(f"nested more than {MAX_DEPTH} levels deep (simplify it)",
                              expression=expression if len(expression) <= 80 else expression[:77] + "...")
    _check(tree, expression)
    return tree


def variable_problem(name: str) -> str | None:
    """Why ``name`` cannot be a variable of an expression (a case variable, a scalar argument),
    or None when it can: it must read as that one name (``None``, ``True`` and ``False`` read as
    constants, ``lambda`` as a keyword)."""
    try:
        tree = ast.parse(name, mode="eval") if isinstance(name, str) and name.strip() == name else None
    except SyntaxError:
        tree = None
    if tree is None:
        return "is not a name an expression can use (a Python keyword or not an identifier)"
    if isinstance(tree.body, ast.Constant):
        return f"reads as the constant {tree.body.value!r} in an expression, not as a variable"
    if not isinstance(tree.body, ast.Name) or tree.body.id != name:
        return "is not a name an expression can use (a Python keyword or not an identifier)"
    return None


def names(expression: str | Number) -> set[str]:
    """The variable names an expression refers to (function names excluded)."""
    if isinstance(expression, (int, float)):
        return set()
    tree = parse(expression)
    funcs = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - funcs


def evaluate(expression: str | Number, variables: Mapping[str, Number]) -> Number:
    """Evaluate ``expression`` with ``variables``; numbers pass through unchanged."""
    if isinstance(expression, bool):
        raise ExpressionError("booleans are not numbers", expression=str(expression))
    if isinstance(expression, (int, float)):
        return expression
    tree = parse(expression)
    try:
        value = _eval(tree.body, variables, expression)
    except ExpressionError:
        raise
    except ZeroDivisionError:
        raise ExpressionError("division by zero", expression=expression) from None
    except (OverflowError, ValueError, TypeError) as exc:
        raise ExpressionError(str(exc), expression=expression) from None
    except RecursionError:
        raise ExpressionError("nested too deeply", expression=expression) from None
    if not isinstance(value, (int, float)):   # bool is an int; complex ((-1)**0.5) is not a number here
        raise ExpressionError(f"the result is not a real number ({type(value).__name__} {value!r})",
                              expression=expression)
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(f"the result is not finite ({value})", expression=expression)
    return value


def evaluate_number(expression: str | Number, variables: Mapping[str, Number], *,
                    what: str = "value") -> Number:
    """Evaluate an expression that must give a number: a comparison such as ``n > 0`` (a truth
    value) is refused, so that a shape, a launch dimension or a cost is never silently 1."""
    value = evaluate(expression, variables)
    if isinstance(value, bool):
        raise ExpressionError(f"{what} must be a number, but the expression is a condition "
                              f"(it gives {value})", expression=str(expression))
    return value


def evaluate_int(expression: str | Number, variables: Mapping[str, Number], *,
                 what: str = "value") -> int:
    """Evaluate and require a whole number (a float like 4.0 is accepted; a truth value is not)."""
    value = evaluate_number(expression, variables, what=what)
    if isinstance(value, float):
        if not value.is_integer():
            raise ExpressionError(f"{what} must be a whole number, got {value}",
                                  expression=str(expression))
        value = int(value)
    return int(value)


def _eval(node: ast.AST, env: Mapping[str, Number], src: str) -> Number:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            known = ", ".join(sorted(env)) or "none"
            raise ExpressionError(f"unknown variable {node.id!r} (known: {known})",
                                  expression=src, column=node.col_offset)
        return env[node.id]
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, env, src)
        right = _eval(node.right, env, src)
        if isinstance(node.op, ast.Pow):
            if abs(right) > _MAX_POW:
                raise ExpressionError("exponent too large", expression=src, column=node.col_offset)
            if isinstance(left, int) and isinstance(right, int) and right > 0 and \
                    abs(left).bit_length() * right > _MAX_BITS:
                raise ExpressionError(f"result too large (over {_MAX_BITS} bits)", expression=src,
                                      column=node.col_offset)
        if isinstance(node.op, ast.LShift) and (right > _MAX_POW or
                                                (isinstance(left, int) and abs(left).bit_length() + right > _MAX_BITS)):
            raise ExpressionError("shift too large", expression=src, column=node.col_offset)
        if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int) and \
                abs(left).bit_length() + abs(right).bit_length() > _MAX_BITS:
            raise ExpressionError(f"result too large (over {_MAX_BITS} bits)", expression=src, column=node.col_offset)
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNOPS[type(node.op)](_eval(node.operand, env, src))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, src)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, src)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):   # short-circuit, like Python and C
        if isinstance(node.op, ast.And):
            result = True
            for v in node.values:
                result = _eval(v, env, src)
                if not result:
                    return result
            return result
        result = False
        for v in node.values:
            result = _eval(v, env, src)
            if result:
                return result
        return result
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env, src) if _eval(node.test, env, src) else _eval(node.orelse, env, src)
    if isinstance(node, ast.Call):
        args = [_eval(a, env, src) for a in node.args]
        return FUNCTIONS[node.func.id](*args)
    raise ExpressionError(f"{type(node).__name__} is not allowed", expression=src)
