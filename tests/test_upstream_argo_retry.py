"""The step retry expression, evaluated the way Argo Workflows v4.1.2 evaluates it.

argoproj/argo-workflows v4.1.2:
- workflow/controller/operator.go `processNodeRetries`: with `retryStrategy.expression` set, a failed
  attempt is retried only while the expression is true ("retryStrategy.expression evaluated to false").
- workflow/controller/operator.go `buildRetryStrategyLocalScope`: `lastRetry.exitCode` is the exit
  code as a *string*, "-1" when the attempt left none; `lastRetry.status`, `.duration`, `.message`.
- util/expr/env/env.go `GetFuncMap`: the dotted keys are expanded into nested maps and `asInt` is
  expr-lang's builtin `int`, which parses strings with strconv.Atoi (expr-lang builtin/lib.go `Int`).
- util/expr/argoexpr/eval.go `EvalBool`: expr-lang, the result must be a bool.

No Go here: `evaluate` (tests/expr_lang.py) is the small part of expr-lang the expression uses (`&&`,
`||`, `!`, comparisons, `in [...]`, `asInt`, member access), strict about anything else.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from paddle_mlops_core.config.loader import load_config
from paddle_mlops_core.contracts import EXIT_ROLLED_BACK, EXIT_USER_ERROR
from pipelines import k8s
from tests.expr_lang import evaluate


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
    """The expression in argo/rollout.yaml and argo/image-rollout.yaml, as generated."""
    for path in ("argo/rollout.yaml", "argo/image-rollout.yaml"):
        with open(path, encoding="utf-8") as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        templates = [t for d in docs for t in d["spec"]["templates"] if t["name"] in ("rollout", "image-rollout")]
        assert templates, path
        for template in templates:
            strategy = template["retryStrategy"]
            assert strategy["retryPolicy"] == "Always", path
            assert evaluate(strategy["expression"], retry_scope("1")) is True, path
            assert evaluate(strategy["expression"], retry_scope(str(EXIT_ROLLED_BACK))) is False, path
