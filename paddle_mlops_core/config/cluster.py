"""The cluster the pipeline runs on (`cluster:`) and the pushes that start it there (`trigger:`).

Namespaces, service account, deadlines and retries, the scheduled retrain, Kueue's priority classes and network
topology; and which branches and repositories trigger a run through Argo Events.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from paddle_mlops_core.config.strict import DNS_LABEL, Strict


class ClusterConfig(Strict):
    namespace: str = "ml-pipelines"
    build_namespace: str = "ml-build"
    service_account: str = "paddle-mlops-workflow"
    team: str = "nlp"
    region: str = "cn-north"
    workflow_deadline_seconds: int = Field(12 * 3600, gt=0)
    step_deadline_seconds: int = Field(3600, gt=0)
    retry_limit: int = Field(2, ge=0)
    ttl_seconds_after_completion: int = Field(7 * 24 * 3600, ge=0)
    retrain_schedule: str = Field("0 3 * * 1", description="CronWorkflow schedule for scheduled retraining")
    retrain_repository: str = Field(
        "https://git.example.com/ml/paddle-mlops.git", description="git URL (https) the scheduled retrain builds from"
    )
    retrain_branch: str = Field(
        "main", min_length=1, description="branch whose head commit the scheduled retrain builds"
    )
    multikueue: bool = Field(
        False,
        description="regions are separate worker clusters: generate MultiKueueConfig/MultiKueueCluster and the "
        "AdmissionCheck (each region's `worker_cluster` names its kubeconfig Secret)",
    )
    priority_classes: dict[str, int] = Field(
        {"urgent": 10000, "normal": 1000, "batch": 100},
        description="Kueue WorkloadPriorityClasses a run picks with the `priority` parameter (name: value)",
    )
    topology_levels: tuple[str, ...] = Field(
        ("cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"),
        min_length=1,
        description="node labels of the network topology, widest first (Kueue Topology levels)",
    )

    @field_validator("priority_classes")
    @classmethod
    def _priority_names(cls, v: dict[str, int]) -> dict[str, int]:
        for name, value in v.items():
            if not re.fullmatch(DNS_LABEL, name):
                raise ValueError(f"priority class name {name!r} must be a DNS label (lower case, digits, '-')")
            if not -2_000_000_000 <= value <= 1_000_000_000:
                raise ValueError(f"priority class {name!r}: value {value} is outside -2e9..1e9")
        if not v:
            raise ValueError("at least one priority class is needed")
        return v


class TriggerConfig(Strict):
    """Which pushes start the pipeline (Argo Events, argo/events.yaml)."""

    branches: tuple[str, ...] = Field(("main",), min_length=1, description="branches whose pushes trigger a run")
    bot_accounts: tuple[str, ...] = Field(
        ("dependabot[bot]", "renovate[bot]", "paddle-mlops-bot"), description="pushers whose commits never trigger"
    )
    github_owner: str = "example-org"
    github_repositories: tuple[str, ...] = ("paddle-mlops",)
    webhook_url: str = Field("https://events.example.com", description="public URL the forges deliver webhooks to")
