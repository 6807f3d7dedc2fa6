"""A GPU region's file (configs/regions/<region>.yaml): its node labels, taints, worker cluster and object store.

Each region is one Kueue ResourceFlavor (per GPU type); a training job's node selection and tolerations come from
the region it is admitted in.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from paddle_mlops_core.config.strict import DNS_LABEL, Strict


class Toleration(Strict):
    key: str
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class RegionLabels(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    region: str
    gpu_type: str = Field(..., alias="gpu-type")
    cost_tier: str = Field(..., alias="cost-tier")


class RegionConfig(Strict):
    name: str = Field(..., pattern=DNS_LABEL)
    labels: RegionLabels
    tolerations: tuple[Toleration, ...] = ()
    worker_cluster: str | None = Field(
        None,
        pattern=DNS_LABEL,
        description="with cluster.multikueue: Secret (in Kueue's namespace) holding the kubeconfig of this "
        "region's worker cluster, key `kubeconfig`",
    )
    store: str | None = Field(
        None,
        description="this region's object store (s3://bucket/prefix, or a directory): pretrained weights are "
        "staged to and read from it by runs that train here, and the rollout replicates each model it serves here "
        "into it; null: storage.uri",
    )
    store_endpoint_url: str | None = Field(
        None,
        description="S3 endpoint of `store` (the region's own MinIO), used as named whatever S3_ENDPOINT_URL says; "
        "null: storage.endpoint_url",
    )

    @property
    def flavor(self) -> str:
        """Kueue ResourceFlavor name: one per region × GPU type."""
        return f"{self.name}-{self.labels.gpu_type}"

    def node_selector(self) -> dict[str, str]:
        return {
            "region": self.labels.region,
            "gpu-type": self.labels.gpu_type,
            "cost-tier": self.labels.cost_tier,
        }
