"""Argo custom metrics: the `metrics` block every pipeline template carries, and the names under
which the Argo controller exports them."""

from __future__ import annotations

from typing import Any

from paddle_mlops.contracts import GATE_PASSED, ROLLOUT_OUTCOME, STEP_DURATION, STEP_RESULT, VALIDATION_VERDICT

# Argo prepends this to every metric name, its own and custom ones alike, when it exports them
# (v4.1.2 workflow/controller/controller.go passes `argo_workflows` to util/telemetry
# prometheusMetricsExporter as the namespace; no `_total`/unit suffixes are added).
ARGO_CUSTOM_PREFIX = "argo_workflows_"


def exported(name: str) -> str:
    """The name Prometheus sees for one of our Argo custom metrics."""
    return ARGO_CUSTOM_PREFIX + name


# The templates that run `steps.rollout` (a new model, or the champion on a new serving image): their
# outcome feeds the rolled-back alert and the outcome panel.
ROLLOUT_TEMPLATES = ("rollout", "image-rollout")


def argo_template_metrics(template_name: str) -> dict[str, Any]:
    """Argo `metrics` for one template: duration and result of every step, plus the gate decision
    (evaluate), the verdict on a published model (validate) and the rollout outcome (rollout) from their
    output parameters.

    Labels carry the template name and status only: a workflow name would make one series per run.
    """
    step = {"key": "step", "value": template_name}
    metrics: list[dict[str, Any]] = [
        {
            "name": STEP_DURATION,
            "help": "Duration of the last run of a paddle-mlops pipeline step",
            "labels": [step],
            "gauge": {"value": "{{duration}}", "realtime": False},
        },
        {
            "name": STEP_RESULT,
            "help": "paddle-mlops pipeline step runs by final status",
            "labels": [step, {"key": "status", "value": "{{status}}"}],
            "counter": {"value": "1"},
        },
    ]
    if template_name == "evaluate":
        metrics += _gate_metrics()
    if template_name == "validate":
        metrics += _validation_metrics()
    if template_name in ROLLOUT_TEMPLATES:
        metrics += _rollout_metrics()
    return {"prometheus": metrics}


def _gate_metrics() -> list[dict[str, Any]]:
    return [
        {
            "name": GATE_PASSED,
            "help": "1 if the last evaluation passed the gate, else 0",
            "when": f"{{{{status}}}} == Succeeded && {{{{outputs.parameters.gate-passed}}}} == {passed}",
            "gauge": {"value": value, "realtime": False},
        }
        for value, passed in (("1", "true"), ("0", "false"))
    ]


def _validation_metrics() -> list[dict[str, Any]]:
    return [
        {
            "name": VALIDATION_VERDICT,
            "help": "Published models judged by validate, by verdict (passed, refused, duplicate)",
            "labels": [{"key": "verdict", "value": verdict}],
            "when": f"{{{{status}}}} == Succeeded && '{{{{outputs.parameters.verdict}}}}' == '{verdict}'",
            "counter": {"value": "1"},
        }
        for verdict in ("passed", "refused", "duplicate")
    ]


def _rollout_metrics() -> list[dict[str, Any]]:
    # A rolled-back rollout exits 3 (status Failed) but still writes its outcome file, which
    # Argo saves either way; so the condition reads the outcome, not the status.
    return [
        {
            "name": ROLLOUT_OUTCOME,
            "help": "Rollouts by outcome (promoted or rolled-back)",
            "labels": [{"key": "outcome", "value": outcome}],
            # Quoted: govaluate would read a bare `rolled-back` as a subtraction.
            "when": f"'{{{{outputs.parameters.outcome}}}}' == '{outcome}'",
            "counter": {"value": "1"},
        }
        for outcome in ("promoted", "rolled-back")
    ]


def argo_exported_names() -> set[str]:
    """Names under which Prometheus sees our Argo custom metrics (with Argo's prefix)."""
    names = {
        m["name"] for t in ("any", "evaluate", "validate", "rollout") for m in argo_template_metrics(t)["prometheus"]
    }
    return {exported(n) for n in names}
