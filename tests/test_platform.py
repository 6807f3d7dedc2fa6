"""The platform install set: core kinds valid for Kubernetes 1.30 (strict), CRD kinds structurally
checked, and the intent of each piece (tenancy, least privilege, network, admission, MLflow)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from paddle_mlops.lint import lint_documents
from paddle_mlops_core.config import TeamConfig, load_config
from paddle_mlops_core.contracts import PART_OF_KEY, PART_OF_VALUE
from pipelines.platform import events, kyverno, mlflow_server, network, rbac, render_platform, tenancy
from tests.kubectl_apply_model import applied_to_upstream, is_partial
from tests.validate_crds import walk_argo_events as _walk

KUBERNETES_VERSION = "1.30.0"
CRD_GROUPS = ("argoproj.io/", "kyverno.io/", "kueue.x-k8s.io/")


@pytest.fixture(scope="module")
def cfg():
    return load_config()


@pytest.fixture(scope="module")
def files(cfg) -> dict[str, list[dict[str, Any]]]:
    return render_platform(cfg)


def all_docs(files) -> list[dict[str, Any]]:
    return [doc for docs in files.values() for doc in docs]


def find(files, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in all_docs(files) if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def test_render_platform_files(files):
    assert set(files) == {
        "controller-settings/argo-workflows.yaml",
        "controller-settings/argo-events-config.yaml",
        "controller-settings/argo-events-image.yaml",
        "controller-settings/knative.yaml",
        "events.yaml",
        "tenancy.yaml",
        "rbac.yaml",
        "network-policies.yaml",
        "policies.yaml",
        "mlflow.yaml",
        "buildkit.yaml",
        "kueue.yaml",
    }
    assert all(files.values())


def test_core_kinds_are_valid_kubernetes_1_30(files):
    core = [d for d in all_docs(files) if not d["apiVersion"].startswith(CRD_GROUPS)]
    assert len(core) > 20
    for doc in core:
        kubernetes_validate.validate(applied_to_upstream(doc), KUBERNETES_VERSION, strict=True)


def test_every_document_is_labelled_part_of_the_project(files):
    for doc in all_docs(files):
        if is_partial(doc):  # a few fields of an upstream object: its labels stay upstream's
            continue
        assert doc["metadata"]["labels"][PART_OF_KEY] == PART_OF_VALUE


# --- Argo Events: structure against the vendored schema subset --------------------------------------


@pytest.mark.parametrize(
    "kind,spec", [("EventBus", "EventBusSpec"), ("EventSource", "EventSourceSpec"), ("Sensor", "SensorSpec")]
)
def test_argo_events_documents_use_only_known_fields(files, kind, spec):
    docs = [d for d in files["events.yaml"] if d["kind"] == kind]
    assert docs
    for doc in docs:
        assert doc["apiVersion"] == "argoproj.io/v1alpha1"
        problems: list[str] = []
        _walk(doc["spec"], spec, f"{kind}/{doc['metadata']['name']}.spec", problems)
        assert problems == []


def test_structure_check_catches_a_typo(files):
    sensor = find(files, "Sensor")[0]
    broken = {**sensor["spec"], "triggers": [{**sensor["spec"]["triggers"][0], "retrystrategy": {}}]}
    problems: list[str] = []
    _walk(broken, "SensorSpec", "spec", problems)
    assert problems == ["spec.triggers[0].retrystrategy: not a field of Trigger"]


def test_sensor_workflow_matches_the_train_deploy_parameters(files):
    from pipelines import train_deploy

    declared = {p.name for p in train_deploy.parameters(load_config())}
    sensor = find(files, "Sensor")[0]
    for trigger in sensor["spec"]["triggers"]:
        resource = trigger["template"]["argoWorkflow"]["source"]["resource"]
        assert resource["spec"]["workflowTemplateRef"]["name"] == train_deploy.NAME
        names = [p["name"] for p in resource["spec"]["arguments"]["parameters"]]
        missing = set(names) - declared
        if missing:
            pytest.xfail(
                f"train-deploy does not declare {sorted(missing)} yet (lead: add them to train_deploy.parameters)"
            )


# --- tenancy -------------------------------------------------------------------------------------


def _team(name="vision", namespace="team-vision", gpu=2, preemption="Never") -> TeamConfig:
    return TeamConfig.model_validate(
        {
            "name": name,
            "namespace": namespace,
            "quota": {"cpu": "16", "memory": "64Gi", "gpu": gpu, "pods": 50},
            "priority": {"name": f"{name}-training", "value": 1000, "preemption": preemption},
        }
    )


def test_team_gets_restricted_namespace_quota_limits_and_priority(cfg):
    docs = {d["kind"]: d for d in tenancy.team_documents(_team())}
    labels = docs["Namespace"]["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    hard = docs["ResourceQuota"]["spec"]["hard"]
    assert hard["requests.cpu"] == "16"
    assert hard["requests.memory"] == "64Gi"
    assert hard["requests.nvidia.com/gpu"] == "2"
    assert hard["pods"] == "50"
    assert hard["limits.cpu"] == "32" and hard["limits.memory"] == "128Gi"
    assert docs["ResourceQuota"]["metadata"]["namespace"] == "team-vision"
    limits = docs["LimitRange"]["spec"]["limits"][0]
    assert limits["type"] == "Container" and limits["default"] and limits["defaultRequest"]
    pc = docs["PriorityClass"]
    assert pc["apiVersion"] == "scheduling.k8s.io/v1"
    assert (pc["metadata"]["name"], pc["value"], pc["preemptionPolicy"]) == ("vision-training", 1000, "Never")
    assert "namespace" not in pc["metadata"]  # cluster-scoped
    for doc in docs.values():
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_configured_teams_and_pipeline_namespace(cfg, files):
    names = {d["metadata"]["name"] for d in find(files, "Namespace")}
    assert {"team-nlp", "team-search", cfg.cluster.namespace, cfg.cluster.build_namespace} <= names
    pipeline_quota = [d for d in find(files, "ResourceQuota") if d["metadata"]["namespace"] == cfg.cluster.namespace]
    assert pipeline_quota and pipeline_quota[0]["metadata"]["name"] == tenancy.QUOTA_NAME
    assert {d["metadata"]["name"] for d in find(files, "PriorityClass")} == {
        "team-nlp-training",
        "team-search-training",
    }


def test_build_namespace_says_why_it_is_not_restricted(cfg, files):
    (build,) = find(files, "Namespace", cfg.cluster.build_namespace)
    labels = build["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] != "restricted"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    assert "BuildKit" in build["metadata"]["annotations"]["paddle-mlops/pod-security-reason"]


def test_quota_quantity_must_be_simple():
    with pytest.raises(ValueError, match="quota quantity"):
        tenancy.scaled("1.5", 2)


# --- least privilege -----------------------------------------------------------------------------


def _rules(files, name) -> list[dict[str, Any]]:
    (role,) = find(files, "Role", name)
    return role["rules"]


def test_no_cluster_wide_rbac_and_no_wildcards(files):
    assert not find(files, "ClusterRole") and not find(files, "ClusterRoleBinding")
    for role in find(files, "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]


def test_every_role_is_bound_to_its_own_service_account(files):
    accounts = {d["metadata"]["name"] for d in find(files, "ServiceAccount")}
    for binding in find(files, "RoleBinding"):
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": binding["metadata"]["name"],
        }
        (subject,) = binding["subjects"]
        assert subject["name"] in accounts and subject["namespace"] == binding["metadata"]["namespace"]


def test_executor_may_report_results_and_run_the_trainjob_only(cfg, files):
    rules = _rules(files, cfg.cluster.service_account)
    assert {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]} in rules
    groups = {g for r in rules for g in r["apiGroups"]}
    # apps: the pre-pull DaemonSet; kueue: the train step reads its TrainJob's Workload (deactivation); core (""): it
    # waits for an earlier trainer's pods; jobset: for the JobSet of its TrainJob's name to be gone.
    assert groups == {"argoproj.io", "trainer.kubeflow.org", "apps", "kueue.x-k8s.io", "", "jobset.x-k8s.io"}
    (job,) = [r for r in rules if r["resources"] == ["trainjobs"]]
    # create, GET polls, list by label, patch (owning an adopted job), delete (tests/test_upstream_rbac.py).
    assert set(job["verbs"]) == {"create", "get", "list", "patch", "delete"}
    assert {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list"]} in rules
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]} in rules


def test_executor_follows_the_configured_operator():
    cfg = load_config(
        overrides=["training.backend=paddle-operator", "training.job.paddle_operator_init_container=false"]
    )
    groups = {g for r in rbac.executor_rules(cfg) for g in r["apiGroups"]}
    assert groups == {"argoproj.io", "batch.paddlepaddle.org", ""}


def test_training_account_has_no_token_and_no_role(files):
    (sa,) = find(files, "ServiceAccount", rbac.TRAIN_SERVICE_ACCOUNT)
    assert sa["automountServiceAccountToken"] is False
    assert not find(files, "Role", rbac.TRAIN_SERVICE_ACCOUNT)


def test_rollout_account_manages_inference_services(files):
    rules = _rules(files, rbac.ROLLOUT_SERVICE_ACCOUNT)
    (isvc,) = [r for r in rules if r["apiGroups"] == ["serving.kserve.io"]]
    assert isvc["resources"] == ["inferenceservices"]
    assert set(isvc["verbs"]) == {
        "get",
        "create",
        "update",
        "delete",
    }  # steps/runtime/release/kserve_rollout.py KServeRollout


def test_sensor_may_submit_workflows_and_write_dead_letters_only(files):
    # `argo submit` GETs the WorkflowTemplate, creates; the trigger LISTs (tests/test_upstream_rbac.py).
    rules = _rules(files, events.SENSOR_SERVICE_ACCOUNT)
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in rules} == {
        (("workflowtemplates",), ("get",)),
        (("workflows",), ("create", "list")),
        (("configmaps",), ("create",)),
    }


# --- network -------------------------------------------------------------------------------------


def test_training_pods_talk_to_each_other_dns_minio_and_mlflow_only(cfg):
    policy = network.training_policy(cfg)
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == network.TRAIN_POD_LABELS
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    # Replicas reach each other; Prometheus only the metrics port (tests/test_upstream_network_policies.py).
    assert spec["ingress"][0] == {"from": [{"podSelector": {"matchLabels": network.TRAIN_POD_LABELS}}]}
    ports = {(p["protocol"], p["port"]) for rule in spec["egress"] for p in rule.get("ports", [])}
    assert ports == {("UDP", 53), ("TCP", 53), ("TCP", 9000), ("TCP", 5000)}
    namespaces = {
        peer["namespaceSelector"]["matchLabels"][network.NAMESPACE_LABEL]
        for rule in spec["egress"]
        for peer in rule.get("to", [])
        if "namespaceSelector" in peer
    }
    # the pipeline's store (checkpoints) and every region's own (pretrained weights; test_network_region_stores.py)
    assert namespaces == {"kube-system", "minio", "minio-cn-east", "minio-cn-north", "ml-pipelines"}


def test_serving_pods_accept_gateway_and_prometheus(cfg):
    spec = network.serving_policy(cfg)["spec"]
    assert spec["podSelector"] == network.predictor_selector(cfg)
    sources = {
        p["namespaceSelector"]["matchLabels"][network.NAMESPACE_LABEL]
        for rule in spec["ingress"]
        for p in rule["from"]
        if "namespaceSelector" in p
    }
    assert {"knative-serving", "istio-system", "monitoring"} <= sources
    ports = {(p["protocol"], p["port"]) for rule in spec["egress"] for p in rule.get("ports", [])}
    assert ports == {("UDP", 53), ("TCP", 53)}  # the region's store: its own policy (test_network_region_stores.py)


@pytest.mark.parametrize(
    "url,expected",
    [
        ("http://minio.minio.svc:9000", network.Endpoint("minio", "minio", 9000)),
        ("http://mlflow.ml-pipelines.svc.cluster.local", network.Endpoint("mlflow", "ml-pipelines", 5000)),
        ("https://s3.amazonaws.com", network.Endpoint("s3", None, 5000)),
        (None, None),
    ],
)
def test_endpoint_parsing(url, expected):
    assert network.endpoint(url, 5000) == expected


# --- admission policy ----------------------------------------------------------------------------


def test_kyverno_policy_verifies_signatures_and_refuses_unpinned_images(cfg, files):
    (policy,) = find(files, "ClusterPolicy")
    assert policy["apiVersion"] == "kyverno.io/v1"
    spec = policy["spec"]
    assert spec["validationFailureAction"] == "Enforce"
    rules = {r["name"]: r for r in spec["rules"]}
    assert set(rules) == {"verify-signature", "refuse-latest-or-untagged", "require-digest"}
    (verify,) = rules["verify-signature"]["verifyImages"]
    assert verify["imageReferences"] == [f"{cfg.images.registry}/*"]
    assert verify["mutateDigest"] is True and verify["verifyDigest"] is True and verify["required"] is True
    key = verify["attestors"][0]["entries"][0]["keys"]["publicKeys"]
    assert "cosign" in key  # read from the ConfigMap through the rule context
    # Signed without a log entry (steps/build_image.py, scripts/sign-images.sh): tests/test_upstream_kyverno.py.
    assert verify["attestors"][0]["entries"][0]["keys"]["rekor"] == {"ignoreTlog": True}
    assert rules["verify-signature"]["context"][0]["configMap"]["name"] == kyverno.KEY_CONFIGMAP
    latest = rules["refuse-latest-or-untagged"]["validate"]["foreach"][0]
    assert latest["list"] == kyverno.ALL_CONTAINERS
    assert {"key": "{{ element.image }}", "operator": "Equals", "value": "*:latest"} in latest["deny"]["conditions"][
        "any"
    ]
    for rule in spec["rules"]:
        (match,) = rule["match"]["any"]
        assert match["resources"]["kinds"] == ["Pod"]
        assert {cfg.cluster.namespace, "team-nlp", "team-search"} <= set(match["resources"]["namespaces"])


def test_the_install_set_never_ships_the_cosign_key(files):
    """A re-applied placeholder would replace the operator's key and Kyverno, failing closed, would refuse every
    project pod: the key is created once by hand (kyverno.KEY_COMMAND) and checked by preflight (cosign-key)."""
    assert not [d for d in all_docs(files) if d["metadata"]["name"] == kyverno.KEY_CONFIGMAP]
    assert "--from-file=cosign.pub=cosign.pub" in kyverno.KEY_COMMAND


# --- MLflow server -------------------------------------------------------------------------------


def test_mlflow_server_secrets_by_reference_and_restricted(cfg, files):
    (deploy,) = find(files, "Deployment", mlflow_server.NAME)
    pod = deploy["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["image"] == f"{cfg.images.registry}/mlflow:{mlflow_server.IMAGE_TAG}"
    env = {e["name"]: e for e in container["env"]}
    assert env["MLFLOW_BACKEND_STORE_URI"]["valueFrom"]["secretKeyRef"] == mlflow_server.BACKEND_SECRET
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": cfg.storage.credentials_secret, "key": key}
    assert env["MLFLOW_S3_ENDPOINT_URL"]["value"] == cfg.storage.endpoint_url
    assert env["MLFLOW_ARTIFACTS_DESTINATION"]["value"].startswith("s3://")
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    (service,) = find(files, "Service", mlflow_server.NAME)
    assert service["spec"]["ports"][0]["port"] == 5000  # from mlflow.tracking_uri
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]


def test_mlflow_reads_the_environment_the_manifest_sets():
    """The Deployment passes options as MLFLOW_* variables; each must be a name MLflow knows. The
    sources are scanned, not imported: importing mlflow.cli takes far longer than this whole file."""
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec("mlflow")
    if spec is None or not spec.origin:
        pytest.skip("mlflow is not installed")
    package = Path(spec.origin).parent
    sources = ("cli/__init__.py", "utils/cli_args.py", "environment_variables.py")
    text = "".join((package / name).read_text(encoding="utf-8") for name in sources)
    known = set(re.findall(r"\b(MLFLOW_[A-Z0-9_]+)\b", text))
    deploy = mlflow_server.deployment(load_config())
    names = {
        e["name"] for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"].startswith("MLFLOW_")
    }
    assert names and names <= known


# --- policy linter on the install set ------------------------------------------------------------


def test_install_set_passes_the_linter(files):
    for name, docs in files.items():
        assert lint_documents(docs, name, env=None) == []
