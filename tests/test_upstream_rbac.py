"""Every Kubernetes API call made on the project's behalf is allowed by the Role of the account
that makes it, and each Role grants nothing beyond those calls.

The calls, each with the code that makes it:
- argoproj/argo-workflows v4.1.2 workflow/executor/taskresult.go: the `wait` container of every
  workflow pod creates and patches its WorkflowTaskResult (docs/workflow-rbac.md, ">= v3.4");
  executor.go's other calls (pod annotation patch, configmap get) serve features the project does
  not use (nothing calls AddAnnotation; GetConfigMapKey is for HDFS Kerberos artifacts);
- workflow/executor/resource.go (v4.1.2): a resource template runs `kubectl <action> -f` (create),
  polls the object with GET for success/failure conditions, and `kubectl get` for outputs;
  workflow/controller/operator.go executeResource: `setOwnerReference` adds a controller reference
  (blockOwnerDeletion: true), which kubernetes plugin/pkg/admission/gc/gc_admission.go
  (OwnerReferencesPermissionEnforcement) lets only an account that may `update workflows/finalizers` set;
- argoproj/argo-events v1.9.11 pkg/sensors/triggers/argo-workflow/argo-workflow.go: operation
  `submit` runs the argo CLI shipped in the sensor image (Dockerfile ARGO_VERSION=v3.7.9;
  v1.9.10: v3.7.7), then LISTs workflows by the labels it added;
- argo-workflows v3.7.9 cmd/argo/commands/submit.go -> pkg/apiclient/argo-kube-client.go ->
  server/workflow/workflow_server.go CreateWorkflow: validate.ValidateWorkflow GETs the
  WorkflowTemplate a `workflowTemplateRef` names, then CREATEs the Workflow. ClusterWorkflowTemplates
  are read only when SelfSubjectAccessReviews (allowed to every account) say get/list/watch are
  granted (util/rbac/rbac.go); otherwise a null store is used, so no ClusterRole is needed;
- argo-events pkg/sensors/triggers/standard-k8s/standard-k8s.go: the dead-letter trigger's
  operation `create` is one CREATE of its resource;
- our own rollout step: the CustomObjectsApi calls found in steps/runtime/release/kserve_rollout.py and the AppsV1Api
  calls of steps/runtime/release/raw_deployment.py (RawDeployment: the predictor Deployment's rollout) and the split
  routes of steps/runtime/release/canary_route.py (RawDeployment's live canary), read here, not copied;
- our own train step and exit handler (steps/train_job.py, steps/release_train_jobs.py, through
  steps/runtime/cluster/objects.py): their calls are recorded while they run through every path against the API
  stand-in (tests/test_train_job.py exercised_calls); the ownerReference to the Workflow the placed job carries has
  blockOwnerDeletion, which needs `update workflows/finalizers` as above.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.platform import events, publish_events
from pipelines.train_step import placed_manifest

ROOT = Path(__file__).resolve().parents[1]
ARGO = ROOT / "argo"
STEPS = ROOT / "steps"

# CustomObjectsApi method prefix -> RBAC verb (kubernetes-client: replace is PUT = update).
CUSTOM_OBJECT_VERBS = {
    "get": "get",
    "list": "list",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
}
# Typed-client methods the steps call -> (group, resource, verb).
TYPED_CALLS = {"read_namespaced_deployment": ("apps", "deployments", "get")}
# Steps that call the Kubernetes API -> the modules under steps/ that import the client and make the calls.
API_STEPS = {
    "rollout": ("runtime/release/kserve_rollout", "runtime/release/raw_deployment", "runtime/release/canary_route"),
    "train_job": ("runtime/cluster/objects",),
    "release_train_jobs": ("runtime/cluster/objects",),
}
# Steps whose calls are recorded running, not read from their source (their kinds are data: the placed manifest's).
RECORDED_STEPS = ("train_job", "release_train_jobs")


@dataclass(frozen=True)
class Call:
    account: str
    group: str
    resource: str
    verb: str
    by: str


# Every WorkflowTemplate of the install set: their pods' calls are what the Roles must grant.
WORKFLOW_TEMPLATES = ("train-deploy", "rollout", "image-rollout")


def load(directory: Path = ARGO) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [d for d in yaml.safe_load_all((directory / f"{name}.yaml").read_text()) if d]
        for name in ("rbac", "events", *WORKFLOW_TEMPLATES)
    }


# --- RBAC evaluation (k8s.io/apiserver rbac rule matching, no wildcards needed) ----------------------


def allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
        for r in rules
    )


def roles_by_account(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "Role"}
    bound: dict[str, list[dict[str, Any]]] = {}
    for b in (d for d in docs if d["kind"] == "RoleBinding"):
        for subject in b["subjects"]:
            bound.setdefault(subject["name"], []).extend(roles[b["roleRef"]["name"]])
    return bound


# --- the calls -------------------------------------------------------------------------------------


def _plural(kind: str) -> str:
    return kind.lower() + "s"  # every kind the project creates pluralises this way


def workflow_calls(template: dict[str, Any]) -> list[Call]:
    """Calls the pods of a WorkflowTemplate make: task results, resource templates, API steps."""
    default = template["spec"].get("serviceAccountName", "default")
    calls: list[Call] = []
    for t in template["spec"]["templates"]:
        if not ({"container", "script", "resource"} & set(t)):
            continue  # dag/steps templates run no pod
        account = t.get("serviceAccountName", default)
        name = t["name"]
        for verb in ("create", "patch"):
            calls.append(Call(account, "argoproj.io", "workflowtaskresults", verb, f"executor taskresult.go ({name})"))
        if "resource" in t:
            calls += _resource_calls(account, name, t)
        placed = placed_manifest(t)
        if placed is not None and any(o.get("blockOwnerDeletion") for o in placed["metadata"]["ownerReferences"]):
            calls.append(Call(account, "argoproj.io", "workflows/finalizers", "update", f"gc_admission.go ({name})"))
        for module in _step_modules(t):
            calls += [Call(account, *c, by=f"steps/{module}.py ({name})") for c in step_api_calls(module)]
    return calls


def _resource_calls(account: str, name: str, t: dict[str, Any]) -> list[Call]:
    """resource.go getKubectlArguments: `kubectl <action> [flags] [-f manifest]`, then WaitResource."""
    res = t["resource"]
    flags = res.get("flags", [])
    if res.get("manifest"):
        manifest = yaml.safe_load(res["manifest"])
        group, plural = manifest["apiVersion"].rpartition("/")[0], _plural(manifest["kind"])
    else:  # `kubectl <action> TYPE[.group][/name] …` from the flags alone
        resource_type = next(f for f in flags if not f.startswith("-") and "=" not in f).split("/")[0]
        plural, _, group = resource_type.partition(".")
    by = f"executor resource.go ({name})"
    verbs = {"create": ["create"], "delete": ["delete"], "get": ["get"], "apply": ["get", "create", "patch"]}
    # An expression (the train step's get-or-create, resource_templates.TRAIN_ACTION) may evaluate to any action
    # it names.
    actions = re.findall(r"'([a-z]+)'", res["action"]) if res["action"].startswith("{{=") else [res["action"]]
    calls = [Call(account, group, plural, verb, by) for action in actions for verb in verbs[action]]
    if res["action"] == "delete":
        # A selector makes kubectl LIST the matches; --wait (on by default) then watches them go.
        if {"--selector", "-l", "--all"} & {f.split("=")[0] for f in flags}:
            calls.append(Call(account, group, plural, "list", f"kubectl delete --selector ({name})"))
        if "--wait=false" not in flags:
            calls += [Call(account, group, plural, v, f"kubectl delete --wait ({name})") for v in ("list", "watch")]
    if res.get("successCondition") or res.get("failureCondition") or t.get("outputs", {}).get("parameters"):
        calls.append(Call(account, group, plural, "get", by))
    if res.get("setOwnerReference"):
        calls.append(Call(account, "argoproj.io", "workflows/finalizers", "update", f"gc_admission.go ({name})"))
    return calls


def _step_modules(t: dict[str, Any]) -> list[str]:
    words = [*t.get("container", {}).get("command", []), *t.get("container", {}).get("args", [])]
    return [w.removeprefix("steps.") for w in words if w.startswith("steps.")]


def step_api_calls(step: str) -> list[tuple[str, str, str]]:
    """(group, resource, verb) of each `<verb>_namespaced_custom_object` or TYPED_CALLS call of the step's modules
    (API_STEPS), or of the calls it made running through every path (RECORDED_STEPS)."""
    if step in RECORDED_STEPS:
        from tests.test_train_job import exercised_calls

        return sorted(exercised_calls())
    return [call for module in API_STEPS.get(step, (step,)) for call in _module_api_calls(module)]


def _module_api_calls(module: str) -> list[tuple[str, str, str]]:
    path = STEPS / f"{module}.py"
    tree = ast.parse(path.read_text())
    namespace = vars(importlib.import_module(f"steps.{module.replace('/', '.')}"))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        if method in TYPED_CALLS:
            found.append(TYPED_CALLS[method])
            continue
        if "_cluster_custom_object" in method:
            pytest.fail(
                f"steps/{module}.py line {node.lineno}: {method} is cluster-scoped; the install has no ClusterRoles"
            )
        if not method.endswith("_namespaced_custom_object"):
            continue
        verb = CUSTOM_OBJECT_VERBS[method.removesuffix("_namespaced_custom_object")]
        group, _version, _ns, plural = (_resolve(a, namespace) for a in node.args[:4])
        found.append((group, plural, verb))
    return found


def _resolve(node: ast.expr, namespace: dict[str, Any]) -> Any:
    """A constant, a module-level name, or `module.NAME`; attributes of `self` (the namespace) are None."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return namespace[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return None if node.value.id == "self" else getattr(namespace[node.value.id], node.attr)
    raise AssertionError(f"cannot read a Kubernetes API argument: {ast.unparse(node)}")


def sensor_calls(sensor: dict[str, Any]) -> list[Call]:
    account = sensor["spec"]["template"]["serviceAccountName"]
    calls = []
    for trigger in sensor["spec"]["triggers"]:
        for tmpl in (trigger["template"], trigger.get("dlqTrigger", {}).get("template", {})):
            if "argoWorkflow" in tmpl:
                assert tmpl["argoWorkflow"]["operation"] == "submit"
                resource = tmpl["argoWorkflow"]["source"]["resource"]
                calls.append(Call(account, "argoproj.io", "workflows", "create", "argo CLI submit.go"))
                calls.append(Call(account, "argoproj.io", "workflows", "list", "argo-events argo-workflow.go Execute"))
                if "workflowTemplateRef" in resource["spec"]:
                    assert not resource["spec"]["workflowTemplateRef"].get("clusterScope")
                    calls.append(Call(account, "argoproj.io", "workflowtemplates", "get", "argo validate.go"))
            if "k8s" in tmpl:
                k8s = tmpl["k8s"]
                assert k8s.get("operation", "create") == "create" and not k8s.get("liveObject")
                resource = k8s["source"]["resource"]
                group = resource["apiVersion"].rpartition("/")[0]
                calls.append(Call(account, group, _plural(resource["kind"]), "create", "standard-k8s.go Execute"))
    return calls


def all_calls(docs: dict[str, list[dict[str, Any]]]) -> list[Call]:
    templates = [d for name in WORKFLOW_TEMPLATES for d in docs[name] if d["kind"] == "WorkflowTemplate"]
    sensors = [d for d in docs["events"] if d["kind"] == "Sensor"]
    return [c for t in templates for c in workflow_calls(t)] + [c for s in sensors for c in sensor_calls(s)]


def sensors(docs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every Sensor: the push one (train-deploy) and the publish one (rollout)."""
    found = [d for d in docs["events"] if d["kind"] == "Sensor"]
    assert {s["metadata"]["name"] for s in found} == {events.SENSOR, publish_events.SENSOR}
    return found


def missing_grants(docs: dict[str, list[dict[str, Any]]]) -> list[Call]:
    roles = roles_by_account(docs["rbac"])
    return [c for c in all_calls(docs) if not allows(roles.get(c.account, []), c.group, c.resource, c.verb)]


def unused_grants(docs: dict[str, list[dict[str, Any]]]) -> list[tuple[str, str, str, str]]:
    used = {(c.account, c.group, c.resource, c.verb) for c in all_calls(docs)}
    granted = {
        (account, g, r, v)
        for account, rules in roles_by_account(docs["rbac"]).items()
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    return sorted(granted - used)


# --- tests ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs() -> dict[str, list[dict[str, Any]]]:
    return load()


def test_every_call_is_allowed(docs):
    assert missing_grants(docs) == []


def test_no_role_grants_more_than_its_calls(docs):
    assert unused_grants(docs) == []


def test_the_sensor_may_submit_from_the_template_and_list_what_it_made(docs):
    calls = {(c.resource, c.verb) for c in sensor_calls(next(d for d in docs["events"] if d["kind"] == "Sensor"))}
    assert calls == {
        ("workflows", "create"),
        ("workflows", "list"),
        ("workflowtemplates", "get"),
        ("configmaps", "create"),
    }


def test_the_train_job_owner_reference_is_allowed(docs):
    (template,) = [d for d in docs["train-deploy"] if d["kind"] == "WorkflowTemplate"]
    calls = [c for c in workflow_calls(template) if c.resource == "workflows/finalizers"]
    assert calls, "the job the train step places is no longer owned by its Workflow"
    assert not [c for c in missing_grants(docs) if c.resource == "workflows/finalizers"]


def test_rollout_calls_are_read_from_the_step_source():
    calls = set(step_api_calls("rollout"))
    assert ("serving.kserve.io", "inferenceservices", "get") in calls
    assert ("serving.kserve.io", "inferenceservices", "create") in calls
    # RawDeployment: the rollout reads the predictor Deployment (steps/runtime/release/raw_deployment.py), read-only.
    assert ("apps", "deployments", "get") in calls
    assert {c for c in calls if c[0] == "apps"} == {("apps", "deployments", "get")}


def test_only_the_known_steps_call_the_kubernetes_api():
    def calls_api(path: Path) -> bool:
        imports = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in imports if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in imports if isinstance(n, ast.ImportFrom)]
        return any(name == "kubernetes" or name.startswith("kubernetes.") for name in names)

    callers = {str(p.relative_to(STEPS).with_suffix("")) for p in STEPS.rglob("*.py") if calls_api(p)}
    known = {module for modules in API_STEPS.values() for module in modules}
    assert callers <= known, f"steps calling the API without a row in this table: {sorted(callers - known)}"


def test_a_retried_push_or_publish_creates_one_workflow(docs):
    """argo-events listener.go retries the whole trigger: with a call denied after the create, every
    attempt makes another Workflow (the six-runs-per-push of issue #15)."""
    roles = roles_by_account(docs["rbac"])
    for sensor in sensors(docs):
        assert simulate_push(sensor, roles[events.SENSOR_SERVICE_ACCOUNT]) == 1, sensor["metadata"]["name"]


def simulate_push(sensor: dict[str, Any], rules: list[dict[str, Any]]) -> int:
    """Workflows created by one push: each attempt runs argo submit (get template, create), then list."""
    trigger = sensor["spec"]["triggers"][0]
    steps = trigger["retryStrategy"]["steps"]
    created = 0
    for _ in range(steps):
        if not allows(rules, "argoproj.io", "workflowtemplates", "get"):
            continue
        if not allows(rules, "argoproj.io", "workflows", "create"):
            continue
        created += 1
        if allows(rules, "argoproj.io", "workflows", "list"):
            break
    return created


def test_the_simulation_reproduces_the_reported_failures(docs):
    (sensor,) = [d for d in sensors(docs) if d["metadata"]["name"] == events.SENSOR]
    create_only = [{"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["create"]}]
    assert simulate_push(sensor, create_only) == 0  # argo submit cannot read the template
    with_get = [*create_only, {"apiGroups": ["argoproj.io"], "resources": ["workflowtemplates"], "verbs": ["get"]}]
    assert simulate_push(sensor, with_get) == sensor["spec"]["triggers"][0]["retryStrategy"]["steps"]
