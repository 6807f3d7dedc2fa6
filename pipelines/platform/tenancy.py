"""Tenancy: a namespace per team with quota, default limits and a priority class; the pipeline and
build namespaces with their pod-security levels.

`configs/teams/*.yaml` is the source. The pipeline namespace runs `cluster.team`'s jobs, so it
carries that team's quota too (`paddle-mlops submit` checks it before submitting).
"""

from __future__ import annotations

import re
from typing import Any

from paddle_mlops_core.config import PipelineConfig, TeamConfig, load_teams
from pipelines.labels import TEAM_LABEL
from pipelines.platform.meta import metadata

QUOTA_NAME = "compute-quota"
LIMIT_RANGE_NAME = "container-defaults"
# Pinned to the release the manifests are validated against, so a cluster upgrade cannot
# tighten (or loosen) admission silently.
PSS_VERSION = "v1.30"
# The shared buildkitd daemon (argo/buildkit.yaml) runs rootless BuildKit, which needs seccomp and
# AppArmor `Unconfined` (user namespaces, mounts). The "baseline" profile forbids both, so baseline
# cannot admit it; the build namespace enforces "privileged", warns and audits at "baseline" so every
# other deviation is still reported. Only the exempt daemon belongs there.
BUILD_ENFORCE = "privileged"
BUILD_REASON = (
    "Rootless BuildKit (moby/buildkit rootless) needs seccompProfile and appArmorProfile Unconfined in its "
    "buildkitd container for user namespaces and mounts; Pod Security 'baseline' forbids both, so this "
    "namespace enforces 'privileged' and warns/audits at 'baseline'. Only the image build "
    "(annotated paddle-mlops/pod-security-exempt) runs here; everything else runs 'restricted'."
)


def pod_security_labels(enforce: str, warn: str | None = None, audit: str | None = None) -> dict[str, str]:
    labels = {}
    for mode, level in (("enforce", enforce), ("warn", warn or enforce), ("audit", audit or enforce)):
        labels[f"pod-security.kubernetes.io/{mode}"] = level
        labels[f"pod-security.kubernetes.io/{mode}-version"] = PSS_VERSION
    return labels


def namespace(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata(name, labels=labels, annotations=annotations)}


def scaled(quantity: str | int, factor: float) -> str:
    """`64` × 2 → `128`, `512Gi` × 0.25 → `128Gi` (rounded down to the unit): quota limits from quota
    figures (ResourceQuota limits here, Kueue borrowing/lending limits in kueue.py)."""
    match = re.fullmatch(r"(\d+)([A-Za-z]*)", str(quantity))
    if not match:
        raise ValueError(f"quota quantity {quantity!r} must be an integer with an optional unit (e.g. 64, 512Gi)")
    return f"{int(int(match.group(1)) * factor)}{match.group(2)}"


def resource_quota(team: TeamConfig, namespace_name: str) -> dict[str, Any]:
    """Requests bound what a team may schedule; limits allow bursting to twice that. GPUs cannot be
    overcommitted, so Kubernetes quotas extended resources by `requests.` only."""
    quota = team.quota
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": metadata(QUOTA_NAME, namespace_name, labels={TEAM_LABEL: team.name}),
        "spec": {
            "hard": {
                "requests.cpu": quota.cpu,
                "requests.memory": quota.memory,
                "requests.nvidia.com/gpu": str(quota.gpu),
                "limits.cpu": scaled(quota.cpu, 2),
                "limits.memory": scaled(quota.memory, 2),
                "pods": str(quota.pods),
            }
        },
    }


def limit_range(namespace_name: str) -> dict[str, Any]:
    """A container without resources would be rejected by a quota'd namespace; defaults admit it small."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": metadata(LIMIT_RANGE_NAME, namespace_name),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
                    "default": {"cpu": "1", "memory": "1Gi"},
                }
            ]
        },
    }


def priority_class(team: TeamConfig) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": metadata(team.priority.name, labels={TEAM_LABEL: team.name}),
        "value": team.priority.value,
        "preemptionPolicy": team.priority.preemption,
        "globalDefault": False,
        "description": f"Training and serving pods of team {team.name}.",
    }


def team_documents(team: TeamConfig) -> list[dict[str, Any]]:
    return [
        namespace(team.namespace, {**pod_security_labels("restricted"), TEAM_LABEL: team.name}),
        resource_quota(team, team.namespace),
        limit_range(team.namespace),
        priority_class(team),
    ]


def render(cfg: PipelineConfig, teams: dict[str, TeamConfig] | None = None) -> list[dict[str, Any]]:
    teams = load_teams() if teams is None else teams
    docs: list[dict[str, Any]] = []
    for team in teams.values():
        docs += team_documents(team)
    if cfg.cluster.namespace not in {t.namespace for t in teams.values()}:
        # The team label admits the pipeline namespace to cluster.team's Kueue ClusterQueue (kueue.py).
        team_label = {TEAM_LABEL: cfg.cluster.team} if cfg.cluster.team in teams else {}
        docs.append(namespace(cfg.cluster.namespace, {**pod_security_labels("restricted"), **team_label}))
        if cfg.cluster.team in teams:
            docs.append(resource_quota(teams[cfg.cluster.team], cfg.cluster.namespace))
        docs.append(limit_range(cfg.cluster.namespace))
    docs.append(
        namespace(
            cfg.cluster.build_namespace,
            pod_security_labels(BUILD_ENFORCE, warn="baseline", audit="baseline"),
            annotations={"paddle-mlops/pod-security-reason": BUILD_REASON},
        )
    )
    return docs
