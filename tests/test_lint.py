"""`paddle-mlops lint`: one small bad manifest per rule, the exact finding it produces, and the CLI.
The real manifests are linted in test_lint_install_set.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from paddle_mlops import lint
from paddle_mlops.lint import Finding, lint_documents, lint_paths, main
from paddle_mlops_core.contracts import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, PLACEHOLDER_DIGEST
from pipelines.platform import argo_controller

IMAGE = "registry.example.com/paddle-mlops/tools:0.1.0"
DIGEST = "registry.example.com/paddle-mlops/tools@sha256:" + "a" * 64
# The controller's executor setting the install ships (argo/argo-controller.yaml).
SHIPPED_EXECUTOR = argo_controller.executor()


def lint_argo(docs: list[dict[str, Any]]) -> list[Finding]:
    """Lint Argo documents as they run under the shipped controller settings."""
    return lint_documents(docs, executor=SHIPPED_EXECUTOR)


def good_container(name: str = "main") -> dict[str, Any]:
    return {
        "name": name,
        "image": IMAGE,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "env": [{"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    }


def deployment(container: dict[str, Any] | None = None, **pod: Any) -> dict[str, Any]:
    spec = {"serviceAccountName": "app", "containers": [container or good_container()], **pod}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"selector": {}, "template": {"metadata": {}, "spec": spec}},
    }


def workflow_template(template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "wt"},
        "spec": {"serviceAccountName": "runner", "entrypoint": template["name"], "templates": [template], **spec},
    }


def argo_container(**extra: Any) -> dict[str, Any]:
    container = good_container()
    container.pop("name")
    return {
        "name": "step",
        "container": container,
        "retryStrategy": {"limit": 2},
        "activeDeadlineSeconds": 600,
        **extra,
    }


def rules(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.container, f.rule) for f in findings]


def with_security(**changes: Any) -> dict[str, Any]:
    container = good_container()
    container["securityContext"].update(changes)
    return container


def test_clean_deployment_has_no_findings():
    assert lint_documents([deployment()]) == []


@pytest.mark.parametrize(
    "container,rule,message",
    [
        (with_security(runAsNonRoot=False), "run-as-non-root", "runAsNonRoot is not true"),
        (with_security(runAsUser=0), "run-as-user", "runs as uid 0"),
        (
            with_security(allowPrivilegeEscalation=True),
            "allow-privilege-escalation",
            "allowPrivilegeEscalation is not false",
        ),
        (with_security(capabilities={"drop": ["NET_RAW"]}), "capabilities", "capabilities are not dropped"),
        (
            with_security(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
            "capabilities",
            "adds capabilities ['SYS_ADMIN']",
        ),
        (with_security(seccompProfile={"type": "Unconfined"}), "seccomp", "seccompProfile is Unconfined"),
    ],
)
def test_restricted_controls(container, rule, message):
    (finding,) = lint_documents([deployment(container)], "deploy.yaml")
    assert finding == Finding("deploy.yaml", "Deployment/web", "pod/main", rule, message, finding.fix)
    assert finding.fix


def test_pod_level_security_context_counts():
    container = good_container()
    del container["securityContext"]["runAsNonRoot"], container["securityContext"]["seccompProfile"]
    pod_ctx = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert lint_documents([deployment(container, securityContext=pod_ctx)]) == []
    assert rules(lint_documents([deployment(container)])) == [("pod/main", "run-as-non-root"), ("pod/main", "seccomp")]


def test_volume_types():
    doc = deployment(volumes=[{"name": "host", "hostPath": {"path": "/var/run"}}, {"name": "ok", "emptyDir": {}}])
    (finding,) = lint_documents([doc])
    assert (finding.container, finding.rule, finding.message) == (
        "pod",
        "volume-types",
        "volume host is of type hostPath",
    )


@pytest.mark.parametrize(
    "image,env,message",
    [
        ("busybox:latest", None, "image busybox:latest uses ':latest'"),
        ("busybox", None, "image busybox has no tag or digest"),
        (IMAGE, "prod", f"image {IMAGE} is not pinned by digest (--env prod)"),
        (
            f"{IMAGE.split(':')[0]}@{PLACEHOLDER_DIGEST}",
            "prod",
            f"image {IMAGE.split(':')[0]}@{PLACEHOLDER_DIGEST} carries the placeholder digest: the overlay was never "
            "filled by a release",
        ),
    ],
)
def test_image_pinning(image, env, message):
    container = good_container()
    container["image"] = image
    (finding,) = lint_documents([deployment(container)], env=env)
    assert finding.rule in ("image-pinned", "image-digest") and finding.message == message


def test_digest_pinned_image_passes_prod_and_argo_digest_parameter_counts_as_digest():
    container = good_container()
    container["image"] = DIGEST
    assert lint_documents([deployment(container)], env="prod") == []
    container["image"] = "registry.example.com/paddle-mlops/train@{{inputs.parameters.image-digest}}"
    assert lint_documents([deployment(container)], env="prod") == []


def test_requests_and_limits():
    container = good_container()
    container["resources"] = {"requests": {"cpu": "1"}}
    assert [(f.rule, f.message) for f in lint_documents([deployment(container)])] == [
        ("resources", "no requests for memory"),
        ("resources", "no limits for cpu, memory"),
    ]


def test_secret_literal_but_not_lookalikes():
    container = good_container()
    container["env"] = [
        {"name": "DB_PASSWORD", "value": "hunter2"},
        {"name": "TOKENIZERS_PARALLELISM", "value": "false"},
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    (finding,) = lint_documents([deployment(container)])
    assert (finding.rule, finding.message) == ("secret-literal", "env DB_PASSWORD holds a literal value")


def test_default_service_account_only_when_a_token_is_mounted():
    doc = deployment()
    del doc["spec"]["template"]["spec"]["serviceAccountName"]
    (finding,) = lint_documents([doc])
    assert (finding.container, finding.rule) == ("pod", "service-account")
    doc["spec"]["template"]["spec"]["automountServiceAccountToken"] = False
    assert lint_documents([doc]) == []


def test_argo_template_needs_retry_and_deadline():
    template = argo_container()
    del template["retryStrategy"], template["activeDeadlineSeconds"]
    assert rules(lint_argo([workflow_template(template)])) == [
        ("template step", "retry"),
        ("template step", "deadline"),
    ]
    defaults = {"retryStrategy": {"limit": 1}, "activeDeadlineSeconds": 60}
    assert lint_argo([workflow_template(template, templateDefaults=defaults)]) == []


def test_argo_workflow_security_context_and_service_account_apply_to_templates():
    template = argo_container()
    del template["container"]["securityContext"]["runAsNonRoot"]
    doc = workflow_template(template)
    assert rules(lint_argo([doc])) == [("template step/main", "run-as-non-root")]
    doc["spec"]["securityContext"] = {"runAsNonRoot": True}
    assert lint_argo([doc]) == []
    del doc["spec"]["serviceAccountName"]
    assert rules(lint_argo([doc])) == [("template step", "service-account")]


def test_argo_executor_containers_take_the_controller_settings_or_none():
    """argo-workflows v4.1.2 workflow/controller/workflowpod.go: `init` and `wait` get the controller's
    `executor` securityContext and resources, nil without one; the shipped ConfigMap sets both."""
    doc = workflow_template(argo_container())
    bare = rules(lint_documents([doc]))
    for container in ("template step/init", "template step/wait"):
        assert (container, "allow-privilege-escalation") in bare and (container, "capabilities") in bare
        assert (container, "resources") in bare
    assert not any(c == "template step/main" for c, _ in bare)
    assert all("workflow-controller-configmap" in f.fix for f in lint_documents([doc]))  # the fix says where
    configmap = argo_controller.controller_configmap(None)  # type: ignore[arg-type]
    assert lint_documents([configmap, doc]) == []
    # The single-`config`-key form (the Helm chart's) is read too.
    single = dict(configmap, data={"config": yaml.safe_dump(argo_controller.controller_settings())})
    assert lint_documents([single, doc]) == []


def test_resource_template_executor_pod_gets_upstreams_locked_down_default():
    template = {
        "name": "train",
        "resource": {"action": "create", "manifest": yaml.safe_dump(_paddlejob(good_container()))},
        "retryStrategy": {"limit": 1},
        "activeDeadlineSeconds": 60,
    }
    # common.MinimalCtrSC passes the restricted rules; only the (unset) resources remain.
    assert rules(lint_documents([workflow_template(template)])) == [
        ("template train/init", "resources"),
        ("template train/init", "resources"),
        ("template train/main", "resources"),
        ("template train/main", "resources"),
    ]
    assert lint_argo([workflow_template(template)]) == []


def test_lint_paths_applies_a_controller_configmap_from_another_file(tmp_path):
    (tmp_path / "wf.yaml").write_text(yaml.safe_dump(workflow_template(argo_container())))
    assert any(f.container == "template step/wait" for f in lint_paths([tmp_path]))
    (tmp_path / "controller.yaml").write_text(yaml.safe_dump(argo_controller.controller_configmap(None)))  # type: ignore[arg-type]
    assert lint_paths([tmp_path]) == []


def test_exempt_template_skips_only_the_restricted_rules():
    sidecar = good_container("buildkitd")
    sidecar["securityContext"]["seccompProfile"] = {"type": "Unconfined"}
    sidecar["image"] = "moby/buildkit:latest"
    template = argo_container(sidecars=[sidecar])
    doc = workflow_template(template)
    assert rules(lint_argo([doc])) == [
        ("template step/buildkitd", "seccomp"),
        ("template step/buildkitd", "image-pinned"),
    ]
    template["metadata"] = {"annotations": {lint.EXEMPT_ANNOTATION: "rootless BuildKit"}}
    assert rules(lint_argo([doc])) == [("template step/buildkitd", "image-pinned")]


def _paddlejob(container: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PaddleJob",
        "metadata": {"generateName": "train-"},
        "spec": {
            "paddleReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "template": {"spec": {"automountServiceAccountToken": False, "containers": [container]}},
                }
            }
        },
    }


def test_resource_template_manifest_is_rendered():
    bad = with_security(allowPrivilegeEscalation=True)
    template = {
        "name": "train",
        "resource": {"action": "create", "manifest": yaml.safe_dump(_paddlejob(bad))},
        "retryStrategy": {"limit": 1},
        "activeDeadlineSeconds": 60,
    }
    (finding,) = lint_argo([workflow_template(template)])
    assert finding.container == "template train > PaddleJob/train- replica Worker/main"
    assert finding.rule == "allow-privilege-escalation"


def test_paddle_operator_and_inference_service_pods_are_rendered():
    job = {
        "apiVersion": "batch.paddlepaddle.org/v1",
        "kind": "PaddleJob",
        "metadata": {"name": "j"},
        "spec": {
            "worker": {
                "replicas": 1,
                "template": {"spec": {"containers": [good_container("train")], "serviceAccountName": "t"}},
            },
            "ps": {
                "replicas": 1,
                "template": {"spec": {"containers": [with_security(runAsUser=0)], "serviceAccountName": "t"}},
            },
        },
    }
    assert rules(lint_documents([job])) == [("replica ps/main", "run-as-user")]
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "m"},
        "spec": {"predictor": {"serviceAccountName": "s", "containers": [with_security(capabilities={})]}},
    }
    assert rules(lint_documents([isvc])) == [("predictor/main", "capabilities")]


def test_cron_workflow_and_job_kinds_are_rendered():
    template = argo_container()
    del template["retryStrategy"]
    cron = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "CronWorkflow",
        "metadata": {"name": "c"},
        "spec": {"workflowSpec": workflow_template(template)["spec"]},
    }
    assert rules(lint_argo([cron])) == [("template step", "retry")]
    cronjob = {
        "kind": "CronJob",
        "metadata": {"name": "cj"},
        "spec": {"jobTemplate": {"spec": {"template": deployment()["spec"]["template"]}}},
    }
    assert lint_documents([cronjob]) == []


# --- CLI -------------------------------------------------------------------------------


def test_main_text_and_json_and_exit_codes(tmp_path, capsys):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(deployment()))
    container = good_container()
    container["image"] = "busybox:latest"
    bad.write_text(yaml.safe_dump_all([deployment(), deployment(container)]))
    assert main([str(good)]) == EXIT_OK
    assert "No findings." in capsys.readouterr().out
    assert main([str(tmp_path), "--format", "json"]) == EXIT_FINDINGS
    (record,) = json.loads(capsys.readouterr().out)
    assert record == {
        "file": str(bad),
        "document": "Deployment/web",
        "container": "pod/main",
        "rule": "image-pinned",
        "message": "image busybox:latest uses ':latest'",
        "fix": "pin a version tag or an @sha256 digest",
    }
    assert main([str(bad)]) == EXIT_FINDINGS
    out = capsys.readouterr().out
    assert "[image-pinned]" in out and "fix: pin a version tag" in out and "1 finding(s)." in out


def test_bad_input_is_a_clear_usage_error(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    assert main([str(broken)]) == EXIT_USAGE
    assert "is not valid YAML" in capsys.readouterr().err


def test_documents_are_not_mutated():
    doc = deployment()
    before = copy.deepcopy(doc)
    lint_documents([doc])
    assert doc == before


def test_digests_are_required_where_the_environment_says_so():
    """`--env` reads images.require_digest from that environment's configuration: prod sets it, dev does not."""
    container = good_container()
    container["image"] = IMAGE
    assert lint_documents([deployment(container)], env="dev") == []
    assert [f.rule for f in lint_documents([deployment(container)], env="prod")] == ["image-digest"]
