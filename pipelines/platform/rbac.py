"""Least privilege: one ServiceAccount per role, each with a namespaced Role listing only what that
role's code calls (tests/test_upstream_rbac.py lists each call and the upstream file that makes it).
No ClusterRoles: nothing below calls a cluster-scoped API.

- workflow executor (`cluster.service_account`): Argo >= 3.4's executor reports outputs through
  `workflowtaskresults` (create, patch); the `train` step creates its TrainJob (or PaddleJob) or re-attaches to it
  and polls it and its Kueue Workload, reads its Workflow on SIGTERM, and deletes the job on a person's stop; the
  exit handler releases the run's jobs by label.
- training (`paddle-mlops-train`): no API access at all; its token is not even mounted.
- rollout (`paddle-mlops-rollout`): the rollout step's KServe calls (get/create/replace/delete of
  InferenceServices, get of a RawDeployment predictor's Deployment) plus the executor's task results, since the
  executor runs as the pod's account.
- sensor: `argo submit` of the Workflow (reads the WorkflowTemplate to validate, creates), the
  trigger's list of what it created, and dead-letter ConfigMaps; event sources: nothing.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig
from pipelines.platform import events
from pipelines.platform.meta import metadata
from pipelines.service_accounts import ROLLOUT_SERVICE_ACCOUNT, TRAIN_SERVICE_ACCOUNT
from pipelines.training_backend import training_job

TASK_RESULTS = {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]}


def service_account(name: str, namespace: str, automount: bool, purpose: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name, namespace, annotations={"paddle-mlops/purpose": purpose}),
        "automountServiceAccountToken": automount,
    }


def role(name: str, namespace: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(name, namespace),
        "rules": rules,
    }


def role_binding(name: str, namespace: str, service_account_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account_name, "namespace": namespace}],
    }


def executor_rules(cfg: PipelineConfig) -> list[dict[str, Any]]:
    resource, group = training_job(cfg).resource.split(".", 1)
    return [
        TASK_RESULTS,
        # `train` (steps/runtime/cluster/train_job.py): create the job; get it when it exists, and every poll; list
        # the run's jobs by label (another live trainer of the run), and patch one it adopts (its ownerReferences);
        # delete it on a person's stop, past its deadline, or a failed one before creating it again.
        # `release-train-jobs` (the exit handler): list by label, delete.
        {"apiGroups": [group], "resources": [resource], "verbs": ["create", "get", "list", "patch", "delete"]},
        # `train` waits for an earlier trainer's pods of the run (its label) to be gone before it starts one.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        # `train` reads the Workflow it runs in on SIGTERM: spec.shutdown (a person's stop) and the deadline tell a
        # stop from an eviction (steps/runtime/cluster/workflow_stop.py); so does the exit handler.
        {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["get"]},
        *_kueue_rules(cfg),
        *_prepull_rules(cfg),
        # The training job's ownerReference to the Workflow has blockOwnerDeletion, which clusters running the
        # OwnerReferencesPermissionEnforcement admission plugin (OpenShift does) allow only to whoever may update the
        # owner's finalizers (kubernetes plugin/pkg/admission/gc/gc_admission.go).
        {"apiGroups": ["argoproj.io"], "resources": ["workflows/finalizers"], "verbs": ["update"]},
    ]


def _kueue_rules(cfg: PipelineConfig) -> list[dict[str, Any]]:
    # `train` lists its TrainJob's Workload (label kueue.x-k8s.io/job-uid) for Kueue's deactivation
    # (steps/runtime/cluster/job_state.py deactivated), and gets the JobSet of its name, which a TrainJob created again
    # under that name must not find (trainer v2.3.0 plugins/jobset/jobset.go Build). Only the TrainJob backend.
    if cfg.training.backend != "trainjob":
        return []
    return [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list"]},
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]},
    ]


def _prepull_rules(cfg: PipelineConfig) -> list[dict[str, Any]]:
    # `prepull-image` creates the run's DaemonSet (kubectl create -f), `release-prepull` deletes it by
    # label (list, delete); pipelines/prepull.py. Only the TrainJob backend warms images.
    if cfg.training.backend != "trainjob":
        return []
    return [{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["create", "list", "delete"]}]


def rollout_rules() -> list[dict[str, Any]]:
    return [
        TASK_RESULTS,
        # steps/runtime/release/kserve_rollout.py KServeRollout: get, create, replace (= update), delete; it polls,
        # never watches.
        {
            "apiGroups": ["serving.kserve.io"],
            "resources": ["inferenceservices"],
            "verbs": ["get", "create", "update", "delete"],
        },
        # steps/runtime/release/raw_deployment.py: in RawDeployment mode Ready comes from the old pods' Available
        # condition during a rolling update, so the rollout reads the predictor Deployment (get, by name) until it is
        # rolled out.
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
        # steps/runtime/release/canary_route.py: RawDeployment's live canary reads KServe's HTTPRoute of the service and
        # creates, re-weights and deletes its own split route (`serving.canary_router`: an HTTPRoute or an Istio
        # VirtualService) in the serving namespace.
        {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes"],
         "verbs": ["get", "create", "update", "delete"]},
        {"apiGroups": ["networking.istio.io"], "resources": ["virtualservices"],
         "verbs": ["get", "create", "update", "delete"]},
    ]  # fmt: skip


def sensor_rules() -> list[dict[str, Any]]:
    return [
        # `argo submit` (the CLI in the sensor image) validates the Workflow against the
        # WorkflowTemplate it references (get), then creates it; the trigger then lists Workflows by
        # its own labels to report what it made (argo-events argo-workflow.go Execute). The CLI asks
        # whether it may read ClusterWorkflowTemplates (a SelfSubjectAccessReview, which every
        # account may make) and, told no, skips them: no ClusterRole.
        {"apiGroups": ["argoproj.io"], "resources": ["workflowtemplates"], "verbs": ["get"]},
        {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["create", "list"]},
        # The dead-letter trigger (k8s operation create).
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    ]


def _with_role(name: str, namespace: str, rules: list[dict[str, Any]], sa: str) -> list[dict[str, Any]]:
    return [role(name, namespace, rules), role_binding(name, namespace, sa)]


def render(cfg: PipelineConfig) -> list[dict[str, Any]]:
    ns = cfg.cluster.namespace
    executor = cfg.cluster.service_account
    return [
        service_account(executor, ns, True, "Argo workflow pods: executor task results, the train job"),
        *_with_role(executor, ns, executor_rules(cfg), executor),
        service_account(TRAIN_SERVICE_ACCOUNT, ns, False, "training pods: no Kubernetes API access"),
        service_account(ROLLOUT_SERVICE_ACCOUNT, ns, True, "rollout step: KServe InferenceServices"),
        *_with_role(ROLLOUT_SERVICE_ACCOUNT, ns, rollout_rules(), ROLLOUT_SERVICE_ACCOUNT),
        service_account(events.SENSOR_SERVICE_ACCOUNT, ns, True, "Argo Events sensor: submits train-deploy"),
        *_with_role(events.SENSOR_SERVICE_ACCOUNT, ns, sensor_rules(), events.SENSOR_SERVICE_ACCOUNT),
        service_account(events.EVENTSOURCE_SERVICE_ACCOUNT, ns, False, "Argo Events webhooks: no API access"),
        service_account(events.EVENTBUS_SERVICE_ACCOUNT, ns, False, "Argo Events bus (NATS): no API access"),
    ]
