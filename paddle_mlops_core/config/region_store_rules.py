"""Which regions read a store of their own, and with which credentials: one rule for the pods the pipelines
generate (their env and NetworkPolicies) and the steps that read and write those stores.

A region reads its own store when it names one (configs/regions `store`) and `storage.region_stores` is on (off on a
laptop: nothing leaves the machine); it then signs with `store_credentials_secret` where it names one, else with
storage.credentials_secret. Every other region reads the pipeline's store (`storage.*`).
"""

from __future__ import annotations

from collections.abc import Iterable

from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.config.regions import RegionConfig


def has_own_store(cfg: PipelineConfig, region: RegionConfig) -> bool:
    """Whether `region` reads a store of its own (else the pipeline's, `storage.*`)."""
    return cfg.storage.region_stores and region.store is not None


def own_credentials(cfg: PipelineConfig, region: RegionConfig) -> str | None:
    """The Secret holding the keys of `region`'s own store, when it names one (else storage.credentials_secret)."""
    return region.store_credentials_secret if has_own_store(cfg, region) else None


def store_endpoint(cfg: PipelineConfig, region: RegionConfig) -> str | None:
    """The S3 endpoint `region`'s pods read their store through."""
    if has_own_store(cfg, region) and region.store_endpoint_url is not None:
        return region.store_endpoint_url
    return cfg.storage.endpoint_url


def credential_secrets(cfg: PipelineConfig, regions: Iterable[RegionConfig]) -> dict[str, str]:
    """Region name → the Secret of its own store's keys, for the regions among `regions` that name one."""
    return {r.name: secret for r in regions if (secret := own_credentials(cfg, r)) is not None}
