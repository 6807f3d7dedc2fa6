"""The subset of expr-lang that Argo retry expressions use, evaluated for tests.

argoproj/argo-workflows v4.1.2 util/expr/argoexpr/eval.go `EvalBool`: expr-lang, the result must be a
bool. util/expr/env/env.go `GetFuncMap`: `asInt` is expr-lang's builtin `int`, which parses strings with
strconv.Atoi (expr-lang builtin/lib.go `Int`). expr-lang compares values of different types as unequal
and does not coerce. Supported: `&&`/`and`, `||`/`or`, `!`/`not`, comparisons, `in [...]`, `asInt(...)`,
the conditional `c ? a : b` (expr-lang's ternary), member access (`a.b`, `a["b"]`), int and string literals;
anything else raises.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Token = tuple[str, Any]  # (kind, value); kind is num, str, name, op or end

_TOKEN = re.compile(r"\s*(?:(\d+)|(\"[^\"]*\"|'[^']*')|([A-Za-z_][A-Za-z0-9_]*)|(&&|\|\||==|!=|<=|>=|[<>!().,\[\]?:]))")

Operators = dict[str, Callable[[Any, Any], Any]]
_OR: Operators = {op: lambda a, b: bool(a) or bool(b) for op in ("||", "or")}
_AND: Operators = {op: lambda a, b: bool(a) and bool(b) for op in ("&&", "and")}
_COMPARE: Operators = {
    "==": lambda a, b: type(a) is type(b) and a == b,
    "!=": lambda a, b: not (type(a) is type(b) and a == b),
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "in": lambda a, b: a in b,
}


def _as_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"invalid operation: int({type(value).__name__})")
    if isinstance(value, str) and not re.fullmatch(r"[+-]?\d+", value):
        raise ValueError(f"invalid operation: int({value})")  # strconv.Atoi
    return int(value)


def tokenize(expression: str) -> list[Token]:
    """The expression's tokens, closed by an ("end", None) token."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(expression.rstrip()):
        m = _TOKEN.match(expression, pos)
        if not m:
            raise SyntaxError(f"unexpected input at {pos}: {expression[pos:]!r}")
        number, string, name, op = m.groups()
        if number:
            tokens.append(("num", int(number)))
        elif string:
            tokens.append(("str", string[1:-1]))
        else:
            tokens.append(("name", name) if name else ("op", op))
        pos = m.end()
    tokens.append(("end", None))
    return tokens


class _Parser:
    """Recursive descent over one token list, one method per precedence level, lowest first."""

    def __init__(self, tokens: list[Token], scope: dict[str, Any]) -> None:
        self.tokens = tokens
        self.i = 0
        self.scope = scope

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self, value: str | None = None) -> Token:
        tok = self.tokens[self.i]
        if value is not None and tok[1] != value:
            raise SyntaxError(f"expected {value!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def _binary(self, operand: Callable[[], Any], operators: Operators) -> Any:
        """Left-associative `operand (op operand)*`; both sides are always evaluated."""
        left = operand()
        while self.peek()[1] in operators:
            op = self.take()[1]
            left = operators[op](left, operand())
        return left

    def conditional(self) -> Any:
        """`condition ? then : otherwise` (both branches are parsed and evaluated: the ones used here are literals)."""
        condition = self.disjunction()
        if self.peek()[1] != "?":
            return condition
        self.take("?")
        if not isinstance(condition, bool):
            raise TypeError(f"non-bool {condition!r} used as condition")
        then = self.conditional()
        self.take(":")
        otherwise = self.conditional()
        return then if condition else otherwise

    def disjunction(self) -> Any:
        return self._binary(self.conjunction, _OR)

    def conjunction(self) -> Any:
        return self._binary(self.comparison, _AND)

    def comparison(self) -> Any:
        return self._binary(self.unary, _COMPARE)

    def unary(self) -> Any:
        if self.peek()[1] in ("!", "not"):
            self.take()
            operand = self.unary()
            assert isinstance(operand, bool)
            return not operand
        return self.primary()

    def primary(self) -> Any:
        kind, value = self.take()
        if kind in ("num", "str"):
            return value
        if kind == "op" and value == "(":
            result = self.disjunction()
            self.take(")")
            return result
        if kind == "op" and value == "[":
            return self.list_items()
        if kind == "name":
            return self.call(value) if self.peek()[1] == "(" else self.member(value)
        raise SyntaxError(f"unexpected {value!r}")

    def list_items(self) -> list[Any]:
        """The items of `[a, b, ...]` after its opening bracket."""
        items = []
        while self.peek()[1] != "]":
            items.append(self.disjunction())
            if self.peek()[1] == ",":
                self.take(",")
        self.take("]")
        return items

    def call(self, name: str) -> int:
        """`name(arg)`: only `asInt` exists; the argument is evaluated before the name is checked."""
        self.take("(")
        arg = self.disjunction()
        self.take(")")
        if name != "asInt":
            raise NameError(name)
        return _as_int(arg)

    def member(self, name: str) -> Any:
        """`name.key["key"]...` looked up in the scope (member access by name or by string index)."""
        result = self.scope[name]
        while self.peek()[1] in (".", "["):
            if self.take()[1] == ".":
                result = result[self.take()[1]]
                continue
            kind, key = self.take()
            if kind != "str":
                raise SyntaxError(f"only string indexes are supported, got {key!r}")
            self.take("]")
            result = result[key]
        return result


def value(expression: str, scope: dict[str, Any]) -> Any:
    """The value of `expression` (expr-lang semantics for the operators supported); anything else raises."""
    parser = _Parser(tokenize(expression), scope)
    result = parser.conditional()
    if parser.peek()[0] != "end":
        raise SyntaxError(f"trailing input: {parser.tokens[parser.i :]}")
    return result


def evaluate(expression: str, scope: dict[str, Any]) -> bool:
    """expr-lang semantics for the operators Argo retry expressions use; anything else raises."""
    result = value(expression, scope)
    if not isinstance(result, bool):
        raise TypeError(f"unable to cast expression result '{result}' to bool")
    return result
