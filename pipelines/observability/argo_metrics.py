"""Argo custom metrics: the `metrics` block every pipeline template carries, and the names under
which the Argo controller exports them."""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.contracts import GATE_PASSED, ROLLOUT_OUTCOME, STEP_DURATION, STEP_RESULT, VALIDATION_VERDICT

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


def _counted_by_output(
    name: str, help_text: str, output: str, values: tuple[str, ...], when: str = ""
) -> list[dict[str, Any]]:
    """One counter series per value of an output parameter (`{output}` label), counted when `when` also holds."""
    return [
        {
            "name": name,
            "help": help_text,
            "labels": [{"key": output, "value": value}],
            # Quoted: govaluate would read a bare `rolled-back` as a subtraction.
            "when": f"{when}'{{{{outputs.parameters.{output}}}}}' == '{value}'",
            "counter": {"value": "1"},
        }
        for value in values
    ]


def _validation_metrics() -> list[dict[str, Any]]:
    return _counted_by_output(
        VALIDATION_VERDICT,
        "Published models judged by validate, by verdict (passed, refused, duplicate)",
        "verdict",
        ("passed", "refused", "duplicate"),
        when="{{status}} == Succeeded && ",
    )


def _rollout_metrics() -> list[dict[str, Any]]:
    # A rolled-back rollout exits 3 (status Failed) but still writes its outcome file, which
    # Argo saves either way; so the condition reads the outcome, not the status.
    return _counted_by_output(
        ROLLOUT_OUTCOME, "Rollouts by outcome (promoted or rolled-back)", "outcome", ("promoted", "rolled-back")
    )


def argo_exported_names() -> set[str]:
    """Names under which Prometheus sees our Argo custom metrics (with Argo's prefix)."""
    names = {
        m["name"] for t in ("any", "evaluate", "validate", "rollout") for m in argo_template_metrics(t)["prometheus"]
    }
    return {exported(n) for n in names}
