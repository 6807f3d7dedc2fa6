"""The one supported-version matrix: which release of each cluster component the install set is
written for, and the fields whose existence depends on a version.

`minimum` is the oldest release every generated field works on; `tested` is the release whose
source and CRDs the upstream-behaviour tests encode (tests/test_upstream_*.py name the files).
README "Cluster install" prints this table (`paddle-mlops preflight` checks a live cluster against
it); tests check every version-dependent field the generator writes against `FEATURES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    """One cluster component the install set relies on."""

    key: str
    name: str
    minimum: str
    tested: str
    repository: str
    why: str


MATRIX: dict[str, Component] = {
    c.key: c
    for c in (
        Component(
            "kubernetes",
            "Kubernetes",
            "1.30",
            "1.34",
            "kubernetes/kubernetes",
            "securityContext.appArmorProfile (GA 1.30), Pod Security Admission labels",
        ),
        Component(
            "argo-workflows",
            "Argo Workflows",
            "3.7.0",
            "4.1.2",
            "argoproj/argo-workflows",
            "retryStrategy.backoff.cap (the train step's retries, capped, for as long as it may wait) exists from 3.7; "
            "CronWorkflow spec.schedules, template mutexes and the argo_workflows_* metric names from 3.6",
        ),
        Component(
            "argo-events",
            "Argo Events",
            "1.9.10",
            "1.9.11",
            "argoproj/argo-events",
            "the JetStream version list of the controller config (EventBus jetstream.version)",
        ),
        Component(
            "kubeflow-trainer",
            "Kubeflow Trainer v2 (TrainJob trainer.kubeflow.org/v1alpha1)",
            "2.3.0",
            "2.3.0",
            "kubeflow/trainer",
            "TrainJob spec.runtimePatches (2.2 replaced podTemplateOverrides), Complete/Failed conditions, "
            "status.jobsStatus; 2.3 is the first release that installs JobSet 0.12 (2.2 ships 0.11)",
        ),
        Component(
            "jobset",
            "JobSet (runs every TrainJob)",
            "0.12.0",
            "0.12.0",
            "kubernetes-sigs/jobset",
            "pod hostnames <jobset>-<job>-<index>-<pod> in subdomain <jobset>, the jobset-name pod label",
        ),
        Component(
            "kueue",
            "Kueue (queues, quotas, priorities, regions)",
            "0.19.0",
            "0.19.2",
            "kubernetes-sigs/kueue",
            "kueue.x-k8s.io/v1beta2 (ClusterQueue cohortName, flavorFungibility MayStopSearch/TryNextFlavor, "
            "MultiKueueCluster clusterSource), the TrainJob integration",
        ),
        Component(
            "training-operator",
            "Kubeflow training-operator (PaddleJob kubeflow.org/v1, legacy backend)",
            "1.9.0",
            "1.9.0",
            "kubeflow/training-operator",
            "PaddleJob Succeeded/Failed conditions, runPolicy, schedulingPolicy",
        ),
        Component(
            "paddle-operator",
            "Paddle operator (PaddleJob batch.paddlepaddle.org/v1, legacy backend)",
            "0.3.5",
            "0.3.5",
            "PaddleFlow/paddle-operator",
            "status.phase values; the coord init container (see docs/training.md)",
        ),
        Component(
            "kserve",
            "KServe",
            "0.15.0",
            "0.20.0",
            "kserve/kserve",
            "InferenceService v1beta1: canaryTrafficPercent, status.components.predictor traffic",
        ),
        Component(
            "knative-serving",
            "Knative Serving (KServe Serverless mode)",
            "1.15.0",
            "1.21.0",
            "knative/serving",
            "revision traffic splitting behind canaryTrafficPercent (KServe 0.20 builds on knative.dev/serving "
            "v0.48 = 1.21)",
        ),
        Component(
            "kyverno",
            "Kyverno",
            "1.13.0",
            "1.19.0",
            "kyverno/kyverno",
            "verifyImages key attestor rekor.ignoreTlog and ctlog.ignoreSCT (both since 1.11), mutateDigest",
        ),
        Component(
            "prometheus-operator",
            "Prometheus operator",
            "0.75.0",
            "0.93.0",
            "prometheus-operator/prometheus-operator",
            "PodMonitor/ServiceMonitor/PrometheusRule monitoring.coreos.com/v1",
        ),
        Component(
            "buildkit",
            "BuildKit (rootless daemon)",
            "0.20.0",
            "0.32.2",
            "moby/buildkit",
            "rootless buildkitd with --oci-worker-no-process-sandbox",
        ),
    )
}


# The JobSet release each Trainer release installs and builds against (kubeflow/trainer
# manifests/third-party/jobset/kustomization.yaml and go.mod sigs.k8s.io/jobset at the tag): the matrix's
# Trainer minimum must bring at least the matrix's JobSet minimum.
TRAINER_INSTALLS_JOBSET = {"2.2.0": "0.11.0", "2.3.0": "0.12.0"}


@dataclass(frozen=True)
class Feature:
    """A generated field that exists only from some release of a component on."""

    what: str
    component: str
    since: str
    source: str


FEATURES: tuple[Feature, ...] = (
    Feature(
        "TrainJob spec.runtimePatches",
        "kubeflow-trainer",
        "2.2.0",
        "kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go (v2.0 podSpecOverrides, v2.1 "
        "podTemplateOverrides, v2.2 runtimePatches)",
    ),
    Feature(
        "Kueue v1beta2 API (ClusterQueue cohortName, admissionChecksStrategy; MultiKueueCluster clusterSource)",
        "kueue",
        "0.19.0",
        "kubernetes-sigs/kueue apis/kueue/v1beta2 (the storage version of the v0.19 CRDs)",
    ),
    Feature("CronWorkflow spec.schedules", "argo-workflows", "3.6.0", "argo-workflows docs/cron-workflows.md"),
    Feature("argo_workflows_* controller metric names", "argo-workflows", "3.6.0", "argo-workflows docs/metrics.md"),
    Feature(
        "Workflow spec.synchronization.mutexes",
        "argo-workflows",
        "3.6.0",
        "argo-workflows docs/synchronization.md (v3.6: mutexes/semaphores lists; the singular mutex is removed in 4.x)",
    ),
    Feature(
        "template synchronization.mutexes",
        "argo-workflows",
        "3.6.0",
        "argo-workflows docs/synchronization.md (v3.6: mutexes/semaphores lists on templates too; the lock is held "
        "across the template's retries, workflow/sync/sync_manager.go)",
    ),
    Feature(
        "retryStrategy.backoff.cap",
        "argo-workflows",
        "3.7.0",
        "argo-workflows pkg/apis/workflow/v1alpha1/workflow_types.go Backoff.Cap (absent in v3.6.0, present in v3.7.0)",
    ),
    Feature("securityContext.appArmorProfile", "kubernetes", "1.30", "kubernetes KEP-24 (AppArmor GA in 1.30)"),
    Feature(
        "verifyImages keys.rekor.ignoreTlog and keys.ctlog.ignoreSCT",
        "kyverno",
        "1.11.0",
        "kyverno api/kyverno/v1/image_verification_types.go (Rekor, CTLog; Cosign 2.0 support, kyverno#7248)",
    ),
    Feature(
        "EventBus jetstream.version paddle-mlops-2.10.29",
        "argo-events",
        "1.9.10",
        "argo-events manifests/install.yaml, argo-events-controller-config eventBus.jetstream.versions: the images "
        "and startCommand of upstream's 2.10.29 entry, listed from 1.9.10 (our settings add the entry)",
    ),
)


def parse(version: str) -> tuple[int, ...]:
    """`v1.9.11-rc1` / `1.30+` / `v1.34.2-eks-1` → (1, 9, 11); numbers only, pre-release suffixes dropped."""
    match = re.match(r"^v?(\d+(?:\.\d+)*)", version.strip())
    if not match:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(p) for p in match.group(1).split("."))


def at_least(version: str, minimum: str) -> bool:
    """True when `version` is `minimum` or newer (missing parts count as 0)."""
    have, need = parse(version), parse(minimum)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


def supports(component: str, feature_what: str) -> bool:
    """Does the matrix minimum of `component` have the feature? (Generated fields must.)"""
    feature = next(f for f in FEATURES if f.what == feature_what and f.component == component)
    return at_least(MATRIX[component].minimum, feature.since)


def markdown_table() -> str:
    """The matrix as the Markdown table README shows (a test keeps README in sync)."""
    rows = ["| component | minimum | tested | why the minimum |", "|---|---|---|---|"]
    rows += [f"| {c.name} | {c.minimum} | {c.tested} | {c.why} |" for c in MATRIX.values()]
    return "\n".join(rows)
