"""The step retry expression, evaluated the way Argo Workflows v4.1.2 evaluates it.

argoproj/argo-workflows v4.1.2:
- workflow/controller/operator.go `processNodeRetries`: with `retryStrategy.expression` set, a failed
  attempt is retried only while the expression is true ("retryStrategy.expression evaluated to false").
- workflow/controller/operator.go `buildRetryStrategyLocalScope`: `lastRetry.exitCode` is the exit
  code as a *string*, "-1" when the attempt left none; `lastRetry.status`, `.duration`, `.message`.
- util/expr/env/env.go `GetFuncMap`: the dotted keys are expanded into nested maps and `asInt` is
  expr-lang's builtin `int`, which parses strings with strconv.Atoi (expr-lang builtin/lib.go `Int`).
- util/expr/argoexpr/eval.go `EvalBool`: expr-lang, the result must be a bool.

No Go here: `evaluate` below is the small part of expr-lang the expression uses (`&&`, `||`, `!`,
comparisons, `in [...]`, `asInt`, member access), strict about anything else.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from paddle_mlops.config.loader import load_config
from paddle_mlops.contracts import EXIT_ROLLED_BACK, EXIT_USER_ERROR
from pipelines import k8s

_TOKEN = re.compile(r"\s*(?:(\d+)|(\"[^\"]*\"|'[^']*')|([A-Za-z_][A-Za-z0-9_]*)|(&&|\|\||==|!=|<=|>=|[<>!().,\[\]]))")


def _as_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"invalid operation: int({type(value).__name__})")
    if isinstance(value, str) and not re.fullmatch(r"[+-]?\d+", value):
        raise ValueError(f"invalid operation: int({value})")  # strconv.Atoi
    return int(value)


def evaluate(expression: str, scope: dict[str, Any]) -> bool:
    """expr-lang semantics for the operators Argo retry expressions use; anything else raises."""
    tokens: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(expression.rstrip()):
        m = _TOKEN.match(expression, pos)
        if not m:
            raise SyntaxError(f"unexpected input at {pos}: {expression[pos:]!r}")
        number, string, name, op = m.groups()
        tokens.append(("num", int(number)) if number else ("str", string[1:-1]) if string else ("name", name) if name else ("op", op))
        pos = m.end()
    tokens.append(("end", None))
    i = 0

    def peek() -> tuple[str, Any]:
        return tokens[i]

    def take(value: str | None = None) -> tuple[str, Any]:
        nonlocal i
        tok = tokens[i]
        if value is not None and tok[1] != value:
            raise SyntaxError(f"expected {value!r}, got {tok[1]!r}")
        i += 1
        return tok

    def primary() -> Any:
        kind, value = take()
        if kind in ("num", "str"):
            return value
        if kind == "op" and value == "(":
            result = disjunction()
            take(")")
            return result
        if kind == "op" and value == "[":
            items = []
            while peek()[1] != "]":
                items.append(disjunction())
                if peek()[1] == ",":
                    take(",")
            take("]")
            return items
        if kind == "name":
            if peek()[1] == "(":
                take("(")
                arg = disjunction()
                take(")")
                if value != "asInt":
                    raise NameError(value)
                return _as_int(arg)
            result = scope[value]
            while peek()[1] == ".":
                take(".")
                result = result[take()[1]]
            return result
        raise SyntaxError(f"unexpected {value!r}")

    def unary() -> Any:
        if peek()[1] in ("!", "not"):
            take()
            operand = unary()
            assert isinstance(operand, bool)
            return not operand
        return primary()

    def comparison() -> Any:
        left = unary()
        while peek()[1] in ("==", "!=", "<", ">", "<=", ">=", "in"):
            op = take()[1]
            right = unary()
            left = {
                "==": lambda a, b: type(a) is type(b) and a == b,
                "!=": lambda a, b: not (type(a) is type(b) and a == b),
                "<": lambda a, b: a < b,
                ">": lambda a, b: a > b,
                "<=": lambda a, b: a <= b,
                ">=": lambda a, b: a >= b,
                "in": lambda a, b: a in b,
            }[op](left, right)
        return left

    def conjunction() -> Any:
        left = comparison()
        while peek()[1] in ("&&", "and"):
            take()
            right = comparison()
            left = bool(left) and bool(right)
        return left

    def disjunction() -> Any:
        left = conjunction()
        while peek()[1] in ("||", "or"):
            take()
            right = conjunction()
            left = bool(left) or bool(right)
        return left

    result = disjunction()
    if peek()[0] != "end":
        raise SyntaxError(f"trailing input: {tokens[i:]}")
    if not isinstance(result, bool):
        raise TypeError(f"unable to cast expression result '{result}' to bool")
    return result


def retry_scope(exit_code: str) -> dict[str, Any]:
    """buildRetryStrategyLocalScope after one failed attempt, expanded as GetFuncMap does."""
    return {"retries": "0", "lastRetry": {"exitCode": exit_code, "status": "Failed", "duration": "12", "message": ""}}


def test_evaluator_follows_expr_lang() -> None:
    assert evaluate("asInt(lastRetry.exitCode) > 1", retry_scope("2")) is True
    assert evaluate('lastRetry.status != "Error"', retry_scope("1")) is True
    # expr-lang compares int and string as unequal, it does not coerce: why the expression needs asInt.
    assert evaluate("lastRetry.exitCode != 2", retry_scope("2")) is True
    with pytest.raises(ValueError):
        evaluate("asInt(lastRetry.message) == 0", retry_scope("1"))


@pytest.mark.parametrize(
    ("exit_code", "retried"),
    [
        ("1", True),  # a transient failure (API, network, crash)
        ("-1", True),  # no exit code: pod deleted or evicted
        ("137", True),  # killed (OOM)
        (str(EXIT_USER_ERROR), False),  # bad input: the same input fails again
        (str(EXIT_ROLLED_BACK), False),  # a failed canary: rolling it out again is wrong
    ],
)
def test_step_retry_expression(exit_code: str, retried: bool) -> None:
    expression = k8s.retry_strategy(load_config()).expression
    assert expression == k8s.retry_expression()
    assert evaluate(expression, retry_scope(exit_code)) is retried


def test_generated_rollout_template_does_not_retry_a_rollback() -> None:
    """The expression in argo/train-deploy.yaml and argo/rollout.yaml, as generated."""
    for path in ("argo/train-deploy.yaml", "argo/rollout.yaml"):
        with open(path, encoding="utf-8") as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        templates = [t for d in docs for t in d["spec"]["templates"] if t["name"] == "rollout"]
        assert templates, path
        for template in templates:
            strategy = template["retryStrategy"]
            assert strategy["retryPolicy"] == "Always", path
            assert evaluate(strategy["expression"], retry_scope("1")) is True, path
            assert evaluate(strategy["expression"], retry_scope(str(EXIT_ROLLED_BACK))) is False, path
