"""When Argo Workflows v4.1.2 retries a step, and what `argo retry` runs again: the decisions tests/argo_model.py makes
as the controller does, and the step retry expression evaluated the way Argo evaluates it.

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
from tests import argo_model
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


# --- retry eligibility: the node's phase, maxDuration, the limit (tests/argo_model.py next_attempt) ---------------


@pytest.mark.parametrize(
    ("policy", "fate", "retried"),
    [
        ("OnError", "evicted", False),  # Failed: a pod with a status message (inferFailedReason)
        ("OnError", "oom-killed", False),  # Failed: main exited 137
        ("OnError", "deleted", True),  # Error: "pod deleted"
        ("OnFailure", "deleted", False),
        ("OnFailure", "evicted", True),
        ("Always", "evicted", True),
        ("Always", "deleted", True),
        ("Always", "oom-killed", True),
    ],
)
def test_retry_eligibility_is_by_the_nodes_phase(policy: str, fate: str, retried: bool) -> None:
    """operator.go processNodeRetries: OnError retries phase Error only, OnFailure Failed only, Always both; an
    evicted or OOM-killed pod is Failed, a vanished one Error (inferFailedReason, the "pod deleted" path)."""
    strategy = {"limit": 5, "retryPolicy": policy}
    decision = argo_model.next_attempt(strategy, [argo_model.attempt(fate, 0, 60)], 60)
    assert (not isinstance(decision, str)) is retried, decision


def test_max_duration_counts_from_the_first_attempt_and_refuses_every_later_retry() -> None:
    """processNodeRetries: `maxDurationDeadline = firstChildNode.StartedAt + maxDuration`; past it no retry, whatever
    the policy and the limit; a backoff that would end past it is refused too."""
    strategy = {"limit": 100, "retryPolicy": "Always", "backoff": {"duration": "1m", "factor": 2, "maxDuration": "30m"}}
    first = argo_model.attempt("evicted", 0, 5 * 60)  # a wait pod evicted at minute 5
    assert argo_model.next_attempt(strategy, [first], 5 * 60) == 6 * 60  # retried after 1 minute
    late = argo_model.attempt("evicted", 0, 5 * 3600)  # at hour 5: "Max duration limit exceeded"
    assert argo_model.next_attempt(strategy, [late], 5 * 3600) == "Max duration limit exceeded"
    near = argo_model.attempt("evicted", 0, 29.5 * 60)
    assert argo_model.next_attempt(strategy, [near], 29.5 * 60) == "Backoff would exceed max duration limit"


def test_the_backoff_doubles_up_to_its_cap_and_the_limit_counts_attempts() -> None:
    strategy = {"limit": 3, "retryPolicy": "Always", "backoff": {"duration": "10s", "factor": 2, "cap": "30s"}}
    attempts: list[argo_model.Attempt] = []
    waits = []
    for n in range(4):
        attempts.append(argo_model.attempt("deleted", n * 100, n * 100 + 50))
        decision = argo_model.next_attempt(strategy, attempts, n * 100 + 50)
        waits.append(decision if isinstance(decision, str) else decision - (n * 100 + 50))
    assert waits == [10, 20, 30, "No more retries left"]  # `len(children) > limit`: limit + 1 attempts in all


def test_retries_in_an_expression_is_the_attempt_number_as_a_string() -> None:
    """buildRetryStrategyLocalScope: `retries` = len(children) - 1 as a string (and executeTemplate sets it for each
    attempt's own template the same way): an expression comparing it needs a string or asInt."""
    strategy = {"limit": 10, "expression": "retries == '1'"}  # RetryPolicyActual: Always with an expression
    attempts = [argo_model.attempt("api-error", 0, 1)]
    assert isinstance(argo_model.next_attempt(strategy, attempts, 1), str)  # retries == '0'
    attempts.append(argo_model.attempt("api-error", 2, 3))
    assert not isinstance(argo_model.next_attempt(strategy, attempts, 3), str)  # retries == '1'
    assert evaluate("retries == 1", {"retries": "1"}) is False  # no coercion in expr-lang


# --- `argo retry` and lifecycle hooks (workflow/util/util.go FormulateRetryWorkflow) ---------------------------


def test_argo_retry_keeps_a_failed_task_whose_exit_hook_succeeded() -> None:
    """isDescendantNodeSucceeded counts the hook node `<task>.onExit` among the failed task's children: a hook that
    succeeded (it deleted the job, say) keeps the task from being reset, so `argo retry` never runs it again
    (argoproj/argo-workflows#13184, open at v4.1.2); without a hook the failed task is reset to attempt 0."""
    failed = {"train(0)": "Failed", "train(1)": "Failed"}
    assert argo_model.reset_by_argo_retry("Failed", {**failed, "train.onExit": "Succeeded"}) is False
    assert argo_model.reset_by_argo_retry("Failed", {**failed, "train.onExit": "Failed"}) is True
    assert argo_model.reset_by_argo_retry("Failed", failed) is True
    assert argo_model.reset_by_argo_retry("Succeeded", {}) is False  # succeeded nodes are kept, never rerun
