"""A team's file (configs/teams/<team>.yaml): its namespace, quota, priority and its share of each GPU region.

Not part of a pipeline's configuration: the platform templates (Kueue queues, tenancy) are generated from every
team's file, and placement.py checks a run against its team's regions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from paddle_mlops_core.config.strict import DNS_LABEL, Strict


class ResourceQuotaConfig(Strict):
    cpu: str = Field(..., description="requests.cpu")
    memory: str = Field(..., description="requests.memory")
    gpu: int = Field(..., ge=0, description="requests.nvidia.com/gpu")
    pods: int = Field(100, ge=1)


class PriorityConfig(Strict):
    name: str = Field(..., pattern=DNS_LABEL)
    value: int = Field(..., ge=0, le=1_000_000_000)
    preemption: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"


class FlavorQuota(Strict):
    """A team's share of one region's GPU flavor (Kueue ClusterQueue flavor quotas)."""

    region: str = Field(..., description="configs/regions/<region>.yaml")
    gpu: int = Field(..., ge=0, description="nominal nvidia.com/gpu")
    cpu: str = Field(..., description="nominal cpu")
    memory: str = Field(..., description="nominal memory")
    borrowing_limit: float | None = Field(
        None, ge=0, le=1, description="fraction of the nominal quota it may borrow from the cohort; None: no limit"
    )
    lending_limit: float | None = Field(
        None, ge=0, le=1, description="fraction of the nominal quota others may borrow; None: all of it"
    )


class TeamConfig(Strict):
    name: str = Field(..., pattern=DNS_LABEL)
    namespace: str = Field(..., pattern=DNS_LABEL)
    quota: ResourceQuotaConfig
    priority: PriorityConfig
    regions: tuple[FlavorQuota, ...] = Field(
        (), description="GPU regions in preference order: a job goes to the first that has room"
    )

    @model_validator(mode="after")
    def _regions_once(self) -> TeamConfig:
        names = [r.region for r in self.regions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"regions: {', '.join(dupes)} listed more than once")
        return self
