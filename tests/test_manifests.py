"""Every generated document is strictly valid and meets the project's policies.

The checks walk all documents `compile.render_all` produces — for every operator flavour — not a
hand-picked example, so a new template cannot slip past them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from paddle_mlops.compile import default_compile_config, render_all
from paddle_mlops.lint import resource_manifest
from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import TRAINING_JOB_ENV
from pipelines.train_step import env_literal, placed_manifest
from tests.kubectl_apply_model import is_partial
from tests.validate_manifests import pod_templates, validate_document, validate_documents

FLAVOURS = {
    "default": [],  # TrainJob (Kubeflow Trainer v2) admitted by Kueue
    "kubeflow": ["training.backend=kubeflow-paddlejob"],
    "kubeflow-ps": ["training.backend=kubeflow-paddlejob", "training.job.ps_replicas=1"],
    "multikueue": ["cluster.multikueue=true"],
    # The Paddle operator runs without its init container (tests/test_upstream_paddle_operator.py).
    "paddle": ["training.backend=paddle-operator", "training.job.paddle_operator_init_container=false"],
    "paddle-ps": [
        "training.backend=paddle-operator",
        "training.job.paddle_operator_init_container=false",
        "training.job.ps_replicas=2",
    ],
}
CREDENTIAL_NAME = re.compile(r"KEY|SECRET|PASSWORD|TOKEN", re.IGNORECASE)
DIGEST_PARAM = "@{{inputs.parameters.image-digest}}"
BUILD_TEMPLATE = "build-image"
BUILDKIT_DAEMON = "buildkitd"


@pytest.fixture(scope="module", params=list(FLAVOURS))
def rendered(request: pytest.FixtureRequest) -> dict[str, list[dict[str, Any]]]:
    overrides = FLAVOURS[request.param]
    return render_all(load_config(overrides=overrides) if overrides else default_compile_config())


WORKFLOW_KINDS = {"Workflow", "WorkflowTemplate", "CronWorkflow"}
POD_OWNER_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}


def _all_documents(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [doc for docs in rendered.values() for doc in docs]


def _documents(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The Argo workflow documents (templates, cron workflows)."""
    return [doc for doc in _all_documents(rendered) if doc["kind"] in WORKFLOW_KINDS]


def _workflow_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["workflowSpec"] if doc["kind"] == "CronWorkflow" else doc["spec"]


def _templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return _workflow_spec(doc).get("templates", [])


def _pods(rendered: dict[str, list[dict[str, Any]]]) -> Iterator[tuple[str, dict[str, Any] | None, list[dict]]]:
    """(where, pod-level securityContext, containers) for every pod the documents can create."""
    for doc in _all_documents(rendered):
        if doc["kind"] in POD_OWNER_KINDS and not is_partial(doc):  # a patch of an upstream controller: not ours
            pod = doc["spec"]["template"]["spec"]
            yield f"{doc['kind']}/{doc['metadata']['name']}", pod.get("securityContext"), pod["containers"]
        if doc["kind"] == "ClusterTrainingRuntime":  # the TrainJob's pods
            for path, template in pod_templates(doc):
                spec = template["spec"]
                yield (
                    f"ClusterTrainingRuntime/{doc['metadata']['name']}:{path}",
                    spec.get("securityContext"),
                    spec["containers"],
                )
    for doc in _documents(rendered):
        spec = _workflow_spec(doc)
        for t in _templates(doc):
            where = f"{doc['metadata']['name']}/{t['name']}"
            pod_security = t.get("securityContext") or spec.get("securityContext")
            if "container" in t:
                yield where, pod_security, [t["container"], *t.get("sidecars", [])]
            # A delete by selector (release-prepull) has flags and no manifest; a train step places its job.
            manifest = resource_manifest(t)
            if manifest is not None:
                for path, template in pod_templates(manifest):
                    yield f"{where}:{path}", template["spec"].get("securityContext"), template["spec"]["containers"]


def test_every_document_is_strictly_valid(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert validate_documents(rendered) == []


def test_every_executable_template_has_retry_and_deadline(rendered: dict[str, list[dict[str, Any]]]) -> None:
    checked = 0
    for doc in _documents(rendered):
        for t in _templates(doc):
            # DAG templates are exempt: retrying one reruns the whole pipeline, and the workflow's
            # activeDeadlineSeconds bounds it.
            if "dag" in t:
                continue
            checked += 1
            retry = t.get("retryStrategy") or {}
            assert retry.get("limit") is not None and retry.get("retryPolicy"), t["name"]
            assert retry["backoff"]["maxDuration"], t["name"]
            assert t.get("activeDeadlineSeconds") or t.get("timeout"), t["name"]
            if "resource" in t:
                assert t.get("timeout"), t["name"]
            if "container" in t:
                resources = t["container"]["resources"]
                assert resources["requests"] and resources["limits"], t["name"]
    assert checked >= 8


def test_workflows_clean_up_and_end(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for doc in _documents(rendered):
        spec = _workflow_spec(doc)
        name = doc["metadata"]["name"]
        assert spec["podGC"]["strategy"] in {"OnPodCompletion", "OnWorkflowSuccess"}, name
        assert spec["ttlStrategy"]["secondsAfterCompletion"] > 0, name
        assert spec["activeDeadlineSeconds"] > 0, name
        assert spec["onExit"] == "exit-handler", name
        assert spec["serviceAccountName"] == "paddle-mlops-workflow", name
        assert spec["podPriorityClassName"] == "team-nlp-training", name


def _values(node: Any, key: str, kind: type) -> Iterator[Any]:
    """Every value of type `kind` under `key`, anywhere, including inside resource manifests."""
    if isinstance(node, dict):
        for name, value in node.items():
            if name == key and isinstance(value, kind):
                yield value
            elif name == "manifest" and isinstance(value, str):
                yield from _values(yaml.safe_load(value), key, kind)
            else:
                yield from _values(value, key, kind)
    elif isinstance(node, list):
        for item in node:
            yield from _values(item, key, kind)


def test_every_image_is_pinned(rendered: dict[str, list[dict[str, Any]]]) -> None:
    images = list(_values(_all_documents(rendered), "image", str))
    assert len(images) >= 8
    for image in images:
        if image.endswith(DIGEST_PARAM):
            continue  # the train image: pinned by the digest the build step pushed
        name, _, tag = image.rpartition(":")
        assert "@sha256:" in image or (name and "/" not in tag and tag != "latest"), image


def test_credentials_only_by_secret_reference(rendered: dict[str, list[dict[str, Any]]]) -> None:
    env = [var for env in _values(_all_documents(rendered), "env", list) for var in env]
    secret_like = [e for e in env if CREDENTIAL_NAME.search(e["name"])]
    assert {e["name"] for e in secret_like} >= {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    for var in secret_like:
        assert "value" not in var and var["valueFrom"]["secretKeyRef"]["name"], var


def test_restricted_pod_security_everywhere_but_the_buildkit_daemon(rendered: dict[str, list[dict[str, Any]]]) -> None:
    pods = list(_pods(rendered))
    assert any(":spec." in where for where, _, _ in pods), "training pods (TrainJob runtime, PaddleJob replicas) too"
    assert any(where.startswith("Deployment/") for where, _, _ in pods), "install-set Deployments too"
    assert any(where.endswith(f"/{BUILD_TEMPLATE}") for where, _, _ in pods), "the build step is restricted too"
    for where, pod_security, containers in pods:
        if where == f"Deployment/{BUILDKIT_DAEMON}":
            continue  # the one exemption, checked below
        assert pod_security and pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] != 0, where
        assert pod_security["seccompProfile"]["type"] == "RuntimeDefault", where
        for container in containers:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, (where, container.get("name", "main"))
            assert sc["capabilities"]["drop"] == ["ALL"], (where, container.get("name", "main"))
            assert sc["readOnlyRootFilesystem"] is True, (where, container.get("name", "main"))
            assert sc.get("runAsUser", pod_security["runAsUser"]) != 0, (where, container.get("name", "main"))
            assert sc.get("seccompProfile", pod_security["seccompProfile"])["type"] == "RuntimeDefault"


def test_the_one_exempt_pod_says_why_and_lives_outside_the_pipeline_namespace(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    cfg = default_compile_config()
    build = next(t for t in _templates(rendered["train-deploy.yaml"][0]) if t["name"] == BUILD_TEMPLATE)
    assert "sidecars" not in build and "paddle-mlops/pod-security-exempt" not in (build.get("metadata") or {}).get(
        "annotations", {}
    )
    (daemon,) = [d for d in rendered["buildkit.yaml"] if d["kind"] == "Deployment"]
    assert daemon["metadata"]["namespace"] == cfg.cluster.build_namespace != cfg.cluster.namespace
    pod = daemon["spec"]["template"]
    assert "rootless BuildKit" in pod["metadata"]["annotations"]["paddle-mlops/pod-security-exempt"]
    sc = pod["spec"]["containers"][0]["securityContext"]
    # Exempt only as far as rootlesskit needs (tests/test_upstream_buildkit.py): never privileged, never root.
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0 and sc.get("privileged") is not True
    assert not (sc.get("capabilities") or {}).get("add"), "no capability beyond the runtime's defaults"
    assert "newuidmap" in pod["metadata"]["annotations"]["paddle-mlops/pod-security-exempt"]  # why it escalates
    env = {e["name"]: e.get("value") for e in build["container"]["env"]}
    assert env["BUILDKIT_HOST"] == f"tcp://{BUILDKIT_DAEMON}.{cfg.cluster.build_namespace}.svc:1234"


# --- the validator itself catches what it is for ---------------------------------------------


@pytest.fixture(scope="module")
def train_deploy_doc() -> dict[str, Any]:
    return render_all(default_compile_config())["train-deploy.yaml"][0]


def test_typo_in_a_template_key_is_rejected(train_deploy_doc: dict[str, Any]) -> None:
    doc = copy.deepcopy(train_deploy_doc)
    doc["spec"]["templates"][1]["retrystrategy"] = doc["spec"]["templates"][1].pop("retryStrategy")
    (problem,) = validate_document(doc, "train-deploy.yaml")
    assert "spec.templates[1].retrystrategy" in problem and "retryStrategy" in problem


def test_typo_in_a_container_field_is_rejected(train_deploy_doc: dict[str, Any]) -> None:
    doc = copy.deepcopy(train_deploy_doc)
    doc["spec"]["templates"][1]["container"]["securityContext"]["runAsUsr"] = 1000
    (problem,) = validate_document(doc)
    assert "container.securityContext.runAsUsr" in problem


def test_wrong_type_is_rejected(train_deploy_doc: dict[str, Any]) -> None:
    doc = copy.deepcopy(train_deploy_doc)
    doc["spec"]["activeDeadlineSeconds"] = {"hours": 12}
    assert any("activeDeadlineSeconds" in p for p in validate_document(doc))


def _edit_manifest(doc: dict[str, Any], edit: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    train = next(t for t in doc["spec"]["templates"] if t["name"] == "train")
    manifest = placed_manifest(train)
    assert manifest is not None
    edit(manifest)
    (env,) = [e for e in train["container"]["env"] if e["name"] == TRAINING_JOB_ENV]
    env["value"] = env_literal(yaml.safe_dump(manifest))
    return doc


@pytest.fixture(scope="module")
def legacy_train_deploy_doc() -> dict[str, Any]:
    cfg = load_config(None, None, ["training.backend=kubeflow-paddlejob"])
    return render_all(cfg)["train-deploy.yaml"][0]


def test_typo_inside_the_trainjob_is_rejected(train_deploy_doc: dict[str, Any]) -> None:
    doc = _edit_manifest(train_deploy_doc, lambda m: m["spec"]["trainer"].update(numNode=3))
    problems = validate_document(doc)
    assert len(problems) == 1 and "spec.trainer" in problems[0] and "numNode" in problems[0]


def test_typo_inside_the_trainjob_placement_patch_is_rejected(train_deploy_doc: dict[str, Any]) -> None:
    def edit(m: dict[str, Any]) -> None:
        job = m["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        job["template"]["spec"]["template"]["spec"]["nodeSelecter"] = {"region": "cn-north"}

    problems = validate_document(_edit_manifest(train_deploy_doc, edit))
    assert len(problems) == 1 and "nodeSelecter" in problems[0]


def test_typo_inside_the_paddlejob_is_rejected(legacy_train_deploy_doc: dict[str, Any]) -> None:
    doc = _edit_manifest(legacy_train_deploy_doc, lambda m: m["spec"]["runPolicy"].update(backofLimit=3))
    problems = validate_document(doc)
    assert len(problems) == 1 and "runPolicy" in problems[0] and "backofLimit" in problems[0]


def test_typo_inside_a_replica_pod_is_rejected(legacy_train_deploy_doc: dict[str, Any]) -> None:
    def edit(m: dict[str, Any]) -> None:
        m["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "x"

    problems = validate_document(_edit_manifest(legacy_train_deploy_doc, edit))
    assert len(problems) == 1 and "Worker.template (as a Pod)" in problems[0] and "imagePullPolicyy" in problems[0]


def test_core_kinds_are_validated_strictly() -> None:
    ok = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "paddle-mlops-workflow"}}
    assert validate_document(ok) == []
    bad = {**ok, "automountServiceAccountTokn": False}
    assert "automountServiceAccountTokn" in validate_document(bad)[0]
