"""A GPU region's file (configs/regions/<region>.yaml): its node labels, taints, worker cluster and object store.

Each region is one Kueue ResourceFlavor (per GPU type); a training job's node selection and tolerations come from
the region it is admitted in.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from paddle_mlops_core.config.strict import DNS_LABEL, DNS_SUBDOMAIN, Strict


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
    store_credentials_secret: str | None = Field(
        None,
        pattern=DNS_SUBDOMAIN,
        description="Secret (in the namespaces of the serving and training pods) with the AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY of `store`, as storage.credentials_secret; the region's predictors and every pod that "
        "reads or writes this store sign with it; null: storage.credentials_secret",
    )

    @model_validator(mode="after")
    def _store_named(self) -> RegionConfig:
        if self.store is None and (self.store_endpoint_url is not None or self.store_credentials_secret is not None):
            given = "store_endpoint_url" if self.store_endpoint_url is not None else "store_credentials_secret"
            raise ValueError(
                f"{given} is set but `store` is not: name the region's own store (s3://bucket/prefix) it applies to, "
                f"or remove {given} (the region then uses storage.uri and its endpoint and credentials)"
            )
        return self

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
