"""A calculator tool that is safe to give model text to: :func:`safe_eval` and :func:`calc`.

The expression is parsed with :mod:`ast` and walked by hand (never ``eval``/``exec``): only
int and float literals, ``+ - * / // % **``, unary ``+``/``-`` and parentheses. Every bound
holds before any work that could grow: the text is at most :data:`MAX_CHARS` characters and
:data:`MAX_NODES` syntax nodes, a power is refused when its exponent exceeds
:data:`MAX_EXPONENT` in magnitude or its result would have more than :data:`MAX_DIGITS`
digits, and every intermediate int with more than :data:`MAX_DIGITS` digits (or a float that
is not finite) ends the evaluation. So no input makes it use more than a few microseconds and
bytes per node. Errors are :class:`CalcError` with a short message a model can act on.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

MAX_CHARS = 200
MAX_NODES = 256
MAX_EXPONENT = 100
MAX_DIGITS = 100
SIGNIFICANT_DIGITS = 10
_INT_LIMIT = 10**MAX_DIGITS
_BINARY: dict[type[ast.operator], Callable[[object, object], object]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_HINTS = {ast.BitXor: " (use ** for powers)"}

Number = int | float


class CalcError(ValueError):
    """An expression the calculator refuses or cannot evaluate; the message is for the model."""


def _describe(node: ast.AST) -> str:
    """A short name of a syntax node for error messages (``Name 'x'``, ``Call``, ``str 'a'``)."""
    if isinstance(node, ast.Name):
        return f"Name {node.id[:40]!r}"
    if isinstance(node, ast.Constant):
        return f"{type(node.value).__name__} {repr(node.value)[:40]}"
    return type(node).__name__


def _checked(value: object) -> Number:
    """``value`` if it is a number within the bounds, else :class:`CalcError`."""
    if isinstance(value, complex):
        raise CalcError("result is a complex number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalcError("result too large")
    if isinstance(value, int) and abs(value) >= _INT_LIMIT:
        raise CalcError(f"result too large (more than {MAX_DIGITS} digits)")
    assert isinstance(value, (int, float))
    return value


def _power(base: Number, exponent: Number) -> Number:
    """``base ** exponent``, refused before computing when it would be too large."""
    if abs(exponent) > MAX_EXPONENT:
        raise CalcError(f"exponent too large (at most {MAX_EXPONENT} in magnitude)")
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > MAX_DIGITS:
        raise CalcError(f"result too large (more than {MAX_DIGITS} digits)")
    try:
        return _checked(base**exponent)
    except ZeroDivisionError:
        raise CalcError("division by zero") from None
    except OverflowError:
        raise CalcError("result too large") from None


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        op = type(node.op)
        if op is not ast.Pow and op not in _BINARY:
            raise CalcError(f"unsupported operator: {op.__name__}{_HINTS.get(op, '')}")
        left, right = _eval(node.left), _eval(node.right)
        if op is ast.Pow:
            return _power(left, right)
        try:
            return _checked(_BINARY[op](left, right))
        except ZeroDivisionError:
            raise CalcError("division by zero") from None
        except OverflowError:
            raise CalcError("result too large") from None
    raise CalcError(f"unsupported syntax: {_describe(node)}")


def safe_eval(expression: str) -> Number:
    """The value of an arithmetic expression (``"2 * (3 + 4) ** 2"`` -> 98).

    Ints stay exact (``/`` gives a float, as in Python). Raises :class:`CalcError` for text
    longer than :data:`MAX_CHARS`, non-ASCII characters (so ``"١٢"`` is refused rather than
    read as 12), syntax errors, anything but number literals and the arithmetic operators,
    more than :data:`MAX_NODES` syntax nodes, division by zero, and results out of bounds
    (see the module docstring).
    """
    if not isinstance(expression, str):
        raise CalcError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_CHARS:
        raise CalcError(f"expression too long ({len(expression)} > {MAX_CHARS} characters)")
    if not expression.isascii():
        bad = next(c for c in expression if not c.isascii())
        raise CalcError(f"unsupported character {bad!r} (use ASCII digits and operators)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as err:
        raise CalcError(f"syntax error: {err.msg}") from None
    except (ValueError, RecursionError, MemoryError):
        raise CalcError("syntax error") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalcError(f"expression too complex (more than {MAX_NODES} syntax nodes)")
    return _eval(tree.body)


def format_number(x: Number) -> str:
    """``x`` as a model should read it: ints exactly, floats to :data:`SIGNIFICANT_DIGITS`
    significant digits, integral floats below 1e16 without a decimal point (``12.0`` ->
    ``"12"``, ``0.1 + 0.2`` -> ``"0.3"``, ``2 / 3`` -> ``"0.6666666667"``, ``1e20`` ->
    ``"1e+20"``)."""
    if isinstance(x, int):
        return str(x)
    text = f"{x:.{SIGNIFICANT_DIGITS}g}"
    rounded = float(text)
    if rounded.is_integer() and abs(rounded) < 1e16:
        return str(int(rounded))
    return text


def calc(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: numbers combined with + - * / // % ** and parentheses, e.g. "(2 + 3) * 4".
    """
    return format_number(safe_eval(expression))
