"""The Python tools Tools-v0 ships: a knowledge base, a calculator and calendar arithmetic.

Each is a plain function whose type hints and docstring become its tool schema
(see `envs.tools.functions`). They raise on bad input; the env shows the
message to the model as a tool error.
"""

from __future__ import annotations

import ast
import datetime as dt
import operator

from agentgym.envs.tools import knowledge

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_MAX_EXPRESSION = 500


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
            raise ValueError("exponent or base too large; keep powers below base 1e6 and exponent 64")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"unsupported expression element {type(node).__name__}; use numbers, + - * / // % ** and ()")


def format_number(value: float | int) -> str:
    """Integers without a decimal point, other numbers to at most 6 decimals."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:.6f}".rstrip("0").rstrip(".")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: numbers with + - * / // % ** and parentheses, e.g. "(17 * 24) + 9".
    """
    if len(expression) > _MAX_EXPRESSION:
        raise ValueError(f"the expression is {len(expression)} characters; the limit is {_MAX_EXPRESSION}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot parse {expression!r}: {exc.msg}") from None
    try:
        return format_number(_evaluate(tree))
    except ZeroDivisionError:
        raise ValueError("division by zero") from None


def _date(text: str, name: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{name} must be a date as YYYY-MM-DD, got {text!r}") from None


def date_add(date: str, days: int) -> str:
    """The date a number of days after (or before, if negative) a date.

    Args:
        date: the start date as YYYY-MM-DD.
        days: how many days to add; negative to go back.
    """
    if abs(days) > 1_000_000:
        raise ValueError(f"days must be within +-1,000,000, got {days}")
    return (_date(date, "date") + dt.timedelta(days=days)).isoformat()


def days_between(start: str, end: str) -> int:
    """The number of days from start to end (negative when end is earlier).

    Args:
        start: the first date as YYYY-MM-DD.
        end: the second date as YYYY-MM-DD.
    """
    return (_date(end, "end") - _date(start, "start")).days


def weekday(date: str) -> str:
    """The English name of the weekday of a date.

    Args:
        date: a date as YYYY-MM-DD.
    """
    return _date(date, "date").strftime("%A")


def kb_lookup(entity: str, attribute: str) -> str:
    """Look up one attribute of a person, company, city or country in the knowledge base.

    Args:
        entity: the exact name, e.g. "Norwind Labs".
        attribute: person: employer, born_in, birth_year, role; company: headquarters, founded, industry, ceo;
            city: country, population, river; country: capital, currency, continent.
    """
    return knowledge.lookup(entity, attribute)


def kb_search(query: str) -> list[str]:
    """Find entity names in the knowledge base that contain some text.

    Args:
        query: part of a name, e.g. "fen".
    """
    return knowledge.search(query)


BUILTIN_FUNCTIONS = (kb_lookup, kb_search, calculate, date_add, days_between, weekday)
