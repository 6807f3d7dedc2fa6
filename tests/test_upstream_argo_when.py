"""Every `when` the release templates carry, as the Argo controller evaluates it after substitution.

argo-workflows v4.1.2 workflow/controller/operator.go (and the metrics `when` through the same
ShouldExecute): the substituted text goes to govaluate, whose tokens that are VARIABLEs are turned into
strings, so `passed != duplicate` compares two words; anything else unquoted is parsed as an expression,
so a bare `rolled-back` is a subtraction of two variables and the comparison silently means something else.
Every operand must therefore be a quoted string or a bare identifier, for every value the output can take.
Also encoded: operator.go takes the workflow-level lock from the merged WorkflowTemplate spec
(`woc.execWf.Spec.Synchronization`), so the template's mutex holds for Workflows created from it; before it does,
setExecWorkflow -> substituteGlobalVariables renders `{{workflow.parameters.*}}` into the whole spec but its
templates (json.Marshal of the spec, template.Replace), so the mutex is named per task.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops.local.dag import evaluate_when

ARGO = Path(__file__).resolve().parents[1] / "argo"
# The values each output that a condition reads can take (steps/validate.py, steps/rollout.py) and Argo's statuses.
VALUES = {
    "{{tasks.validate.outputs.parameters.verdict}}": ("passed", "refused", "duplicate"),
    "{{outputs.parameters.verdict}}": ("passed", "refused", "duplicate"),
    "{{outputs.parameters.outcome}}": ("promoted", "rolled-back"),
    "{{outputs.parameters.gate-passed}}": ("true", "false"),
    "{{tasks.evaluate.outputs.parameters.gate-passed}}": ("true", "false"),
    "{{tasks.train-cache.outputs.parameters.reused}}": ("true", "false"),
    "{{tasks.training-image.outputs.parameters.allowed}}": ("true", "false"),  # steps/training_image.py
    "{{status}}": ("Succeeded", "Failed", "Error"),
}
_OPERAND = re.compile(r"^('[^']*'|\"[^\"]*\"|[A-Za-z_][A-Za-z0-9_]*)$")


def conditions(name: str) -> list[str]:
    (doc,) = [d for d in yaml.safe_load_all((ARGO / f"{name}.yaml").read_text()) if d["kind"] == "WorkflowTemplate"]
    found = []
    for template in doc["spec"]["templates"]:
        found += [t["when"] for t in (template.get("dag") or {}).get("tasks", []) if t.get("when")]
        found += [m["when"] for m in (template.get("metrics") or {}).get("prometheus", []) if m.get("when")]
    return found


def substitutions(condition: str) -> list[str]:
    texts = [condition]
    for placeholder, values in VALUES.items():
        texts = [t.replace(placeholder, v) for t in texts for v in values] if placeholder in condition else texts
    assert "{{" not in texts[0], f"a placeholder without known values in {condition!r}"
    return texts


def govaluate_problems(text: str) -> list[str]:
    """Clauses joined by &&, each `a == b` / `a != b` with string or identifier operands."""
    problems = []
    for clause in text.split("&&"):
        parts = re.split(r"==|!=", clause)
        if len(parts) != 2:
            problems.append(f"{clause.strip()!r} is not one comparison")
        problems += [f"{p.strip()!r} is not a string or an identifier" for p in parts if not _OPERAND.match(p.strip())]
    return problems


@pytest.mark.parametrize("name", ["train-deploy", "rollout", "image-rollout"])
def test_every_condition_compares_strings_for_every_value(name: str) -> None:
    found = conditions(name)
    assert found
    for condition in found:
        for text in substitutions(condition):
            assert govaluate_problems(text) == [], f"{name}: {condition!r} becomes {text!r}"


def test_the_check_catches_an_unquoted_hyphenated_value() -> None:
    assert govaluate_problems("rolled-back == promoted") == ["'rolled-back' is not a string or an identifier"]
    assert govaluate_problems("Succeeded == Succeeded && 'rolled-back' == 'rolled-back'") == []


def test_the_release_runs_register_and_rollout_on_the_verdicts_only() -> None:
    whens = {
        t["name"]: t.get("when", "")
        for d in yaml.safe_load_all((ARGO / "rollout.yaml").read_text())
        if d["kind"] == "WorkflowTemplate"
        for tmpl in d["spec"]["templates"]
        for t in (tmpl.get("dag") or {}).get("tasks", [])
    }
    runs: dict[str, Any] = {
        verdict: {task: evaluate_when(substitutions(w)[i]) if w else True for task, w in whens.items()}
        for i, verdict in enumerate(VALUES["{{tasks.validate.outputs.parameters.verdict}}"])
    }
    assert runs["passed"] == {"validate": True, "register": True, "rollout": True}
    assert runs["refused"] == {"validate": True, "register": True, "rollout": False}
    assert runs["duplicate"] == {"validate": True, "register": False, "rollout": False}


def _global_substituted(spec: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """operator.go substituteGlobalVariables: `{{workflow.parameters.X}}` replaced in the spec without templates."""
    import json

    given = {p["name"]: p.get("value", "") for p in spec["arguments"]["parameters"]} | parameters
    text = json.dumps({k: v for k, v in spec.items() if k != "templates"})
    return json.loads(re.sub(r"\{\{workflow\.parameters\.([-\w]+)\}\}", lambda m: given[m.group(1)], text))


@pytest.mark.parametrize("name", ["rollout", "image-rollout"])
def test_the_lock_is_on_the_template_the_controller_merges(name: str) -> None:
    (doc,) = [d for d in yaml.safe_load_all((ARGO / f"{name}.yaml").read_text()) if d["kind"] == "WorkflowTemplate"]
    assert doc["spec"]["synchronization"] == {"mutexes": [{"name": "rollout-{{workflow.parameters.task}}"}]}
    # The lock the controller takes: one per task, the same for both templates of a task.
    held = {
        task: _global_substituted(doc["spec"], {"task": task})["synchronization"]["mutexes"][0]["name"]
        for task in ("sentiment", "ner")
    }
    assert held == {"sentiment": "rollout-sentiment", "ner": "rollout-ner"}
