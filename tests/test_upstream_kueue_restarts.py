"""Kueue stopping and restarting a TrainJob: preemption and waitForPodsReady, and preflight's check of the latter.

Upstream behaviour encoded here (kubernetes-sigs/kueue v0.19.2):
- pkg/controller/jobframework/reconciler.go ReconcileGenericJob: an Evicted workload (Preempted, PodsReadyTimeout,
  …) is stopped with stopJob, which suspends the job in place; once admitted again startJob unsuspends it
  (RunWithPodSetsInfo). pkg/controller/jobs/trainjob/trainjob_controller.go: Stop sets spec.suspend and clears the
  replicatedJobs of Kueue's runtime patch (manager kueue.x-k8s.io/manager); RunWithPodSetsInfo writes them and
  unsuspends. The TrainJob is never deleted or renamed: its pods, recreated by Trainer and JobSet, run the same
  command with the same run id, so they resume from the run's checkpoints.
- apis/config/v1beta2/defaults.go: waitForPodsReady is filled in when absent (timeout 30m, recoveryTimeout =
  timeout, requeuingStrategy without backoffLimitCount: requeued forever); pkg/util/waitforpodsready
  Enabled: off only with the DisableWaitForPodsReady feature gate (pkg/features/kube_features.go), set by
  --feature-gates or the configuration's featureGates; apis/config/v1beta1/configuration_conversion.go: a v1beta1
  configuration has it only with `enable: true`.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops.cluster_requirements import Requirements
from paddle_mlops.compile import default_compile_config, dump
from paddle_mlops.preflight.pods_ready import check_kueue_pods_ready
from pipelines import train_deploy
from pipelines.platform import kueue_config
from steps.runtime.cluster.job_state import job_state
from tests.kubernetes_standin import CONTROLLER_DEPLOYMENTS, api_for, deployment, kueue_manager_config, ready_cluster
from tests.test_upstream_training_operator import train_manifest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "training.md"
KUEUE_PATCH = "kueue.x-k8s.io/manager"
REQ = Requirements(kueue_frameworks=("trainer.kubeflow.org/trainjob",))


def _trainjob() -> dict[str, Any]:
    manifest = train_manifest(dump([train_deploy.build(default_compile_config()).to_dict()]))
    text = re.sub(r"\{\{[^}]*\}\}", "x", yaml.safe_dump(manifest).replace("{{workflow.name}}", "wf-a1b2c"))
    job = yaml.safe_load(text)
    job["spec"]["runtimePatches"].append({"manager": KUEUE_PATCH, "trainingRuntimeSpec": {"template": {"spec": {}}}})
    return job


def _admit(job: dict[str, Any]) -> None:
    """trainjob_controller.go RunWithPodSetsInfo: Kueue's patch gets the flavor's placement, then unsuspend."""
    patch = next(p for p in job["spec"]["runtimePatches"] if p["manager"] == KUEUE_PATCH)
    placement = {"nodeSelector": {"region": "cn-north", "gpu-type": "a100"}}
    patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = [
        {"name": "node", "template": {"spec": {"template": {"spec": placement}}}}
    ]
    job["spec"]["suspend"] = False


def _evict(job: dict[str, Any]) -> None:
    """trainjob_controller.go Stop: suspend, and RestorePodSetsInfo clears Kueue's replicatedJobs."""
    job["spec"]["suspend"] = True
    patch = next(p for p in job["spec"]["runtimePatches"] if p["manager"] == KUEUE_PATCH)
    patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = None


def test_a_preempted_trainjob_is_suspended_and_readmitted_under_its_name() -> None:
    job = _trainjob()
    created = copy.deepcopy(job)
    conditions: list[dict[str, str]] = [{"type": "Suspended", "status": "True"}]
    for _ in range(3):  # admitted, preempted (or evicted after PodsReadyTimeout), admitted again...
        _admit(job)
        conditions[0]["status"] = "False"
        _evict(job)
        conditions[0]["status"] = "True"
        status = {**job, "status": {"conditions": conditions, "jobsStatus": [{"name": "node", "succeeded": 0}]}}
        assert job_state(status).phase == "queued"  # the train step keeps waiting on it (suspended again)
    assert job["metadata"]["name"] == created["metadata"]["name"] == "wf-a1b2c-train"
    # The same command, so the same run id and checkpoint root: every admission resumes the same run.
    assert job["spec"]["trainer"] == created["spec"]["trainer"]
    command = job["spec"]["trainer"]["command"]
    assert command[command.index("--run-id") + 1] == "x"  # {{workflow.parameters.run-id}}, rendered once
    assert job["spec"]["runtimePatches"][0] == created["spec"]["runtimePatches"][0]  # our placement untouched


def _statuses(config: Any, args: list[str] | None = None) -> list[tuple[str, str]]:
    cluster = ready_cluster()
    cluster.config_maps[("kueue-system", "kueue-manager-config")] = config
    if args is not None:
        namespace, name, image, _, labels = CONTROLLER_DEPLOYMENTS["kueue"]
        cluster.deployments["kueue"] = deployment(namespace, name, image, args, labels)
    return [(r.status, r.message) for r in check_kueue_pods_ready(api_for(cluster), REQ)]


FRAMEWORKS = ["trainer.kubeflow.org/trainjob"]


def test_preflight_accepts_the_documented_wait_for_pods_ready() -> None:
    ((status, message),) = _statuses(kueue_manager_config(FRAMEWORKS))
    assert status == "ok" and "timeout 20m" in message and "backoffLimitCount 5" in message


@pytest.mark.parametrize(
    "config,args",
    [
        pytest.param(kueue_manager_config(FRAMEWORKS, apiVersion=kueue_config.V1BETA1, waitForPodsReady=None), None,
                     id="v1beta1-without-it"),
        pytest.param(kueue_manager_config(FRAMEWORKS, apiVersion=kueue_config.V1BETA1,
                                          waitForPodsReady={"enable": False, "timeout": "20m"}), None,
                     id="v1beta1-disabled"),
        pytest.param(kueue_manager_config(FRAMEWORKS), ["--config=/c", "--feature-gates=DisableWaitForPodsReady=true"],
                     id="feature-gate-flag"),
        pytest.param(kueue_manager_config(FRAMEWORKS, featureGates={"DisableWaitForPodsReady": True}), None,
                     id="feature-gate-config"),
    ],
)  # fmt: skip
def test_preflight_reports_a_kueue_without_wait_for_pods_ready(config: Any, args: list[str] | None) -> None:
    ((status, message),) = _statuses(config, args)
    assert status == "finding" and "waitForPodsReady is off" in message


def test_preflight_reports_settings_that_evict_starting_runs_or_requeue_forever() -> None:
    upstream_sample = {"timeout": "5m", "recoveryTimeout": "3m"}  # config/components/manager's commented example
    ((status, message),) = _statuses(kueue_manager_config(FRAMEWORKS, waitForPodsReady=upstream_sample))
    assert status == "finding" and "shorter than an image pull and the rendezvous (20m)" in message
    # v1beta2 without the block: on by default, 30 minutes, but a run that can never start is requeued forever.
    ((status, message),) = _statuses(kueue_manager_config(FRAMEWORKS, waitForPodsReady=None))
    assert status == "warning" and "backoffLimitCount is unset" in message
    no_recovery = {**kueue_config.WAIT_FOR_PODS_READY, "recoveryTimeout": "0s"}
    ((status, message),) = _statuses(kueue_manager_config(FRAMEWORKS, waitForPodsReady=no_recovery))
    assert status == "warning" and "recoveryTimeout is 0s" in message


@pytest.mark.parametrize(
    ("retention", "status"), [(None, "ok"), ("10m", "ok"), ("5m", "ok"), ("1m", "warning"), ("0s", "warning")]
)
def test_preflight_checks_kueue_keeps_a_deactivated_trainjob_long_enough_to_read_why(
    retention: str | None, status: str
) -> None:
    """jobframework/reconciler.go handleWorkloadAfterDeactivatedPolicy deletes the job `afterDeactivatedByKueue`
    after Kueue deactivated its Workload: the train step reads the Workload's reason only while the job is there
    (its poll and its retries' backoff: kueue_config.DEACTIVATED_RETENTION_SECONDS)."""
    policies = {"workloads": {"afterDeactivatedByKueue": retention}} if retention else None
    ((got, message),) = _statuses(kueue_manager_config(FRAMEWORKS, objectRetentionPolicies=policies))
    assert got == status, message
    if status == "warning":
        assert f"afterDeactivatedByKueue {retention} deletes a deactivated TrainJob" in message


def test_the_documented_manager_configuration_is_the_one_preflight_expects() -> None:
    text = DOCS.read_text(encoding="utf-8")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    documented = next(b for b in blocks if isinstance(b, dict) and "waitForPodsReady" in b)
    assert documented["waitForPodsReady"] == kueue_config.WAIT_FOR_PODS_READY
    assert kueue_config.TRAINJOB_FRAMEWORK in documented["integrations"]["frameworks"]
