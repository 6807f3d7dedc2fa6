"""Each region's object store: where its pods read models and pretrained weights, and through which endpoint.

`configs/regions/<r>.yaml` `store` (an s3://bucket/prefix or a directory, the region's equivalent of `storage.uri`)
and `store_endpoint_url` (its S3 endpoint, its own MinIO); either left out falls back to `storage.uri` /
`storage.endpoint_url`. A region's own endpoint is used exactly as named (s3.client `exact`): the pods' environment
names the default store's endpoint. The same layout holds in every store: models at `<store>/<model>/<version>/`,
pretrained weights under `<store>/pretrained/`, bodies content-addressed under `objects/sha256/`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.regions import RegionConfig
from steps.runtime.storage import s3
from steps.runtime.storage.objectstore.backends import resolve_root
from steps.runtime.storage.objectstore.manifest import split_model_uri
from steps.runtime.storage.objectstore.replication import Place, replicate

log = logging.getLogger("steps.region_stores")


@dataclass(frozen=True)
class RegionStore(Place):
    """A region's store (`Place`: root, endpoint, whether that endpoint is the region's own)."""

    region: str | None = None


def of_region(cfg: PipelineConfig, region: RegionConfig) -> RegionStore:
    own_endpoint = region.store_endpoint_url is not None
    return RegionStore(
        resolve_root(region.store or cfg.storage.uri),
        region.store_endpoint_url if own_endpoint else cfg.storage.endpoint_url,
        exact=own_endpoint,
        region=region.name,
    )


def place_of(
    cfg: PipelineConfig, uri: str, regions: dict[str, RegionConfig], prefer: str | None = None
) -> RegionStore | None:
    """The region whose own endpoint serves `uri`'s bucket (an s3:// object or prefix; that MinIO holds the
    bucket), `prefer` first where two regions name the same bucket: the endpoint to read it through. None: the
    pipeline's endpoint reaches it."""
    if not s3.is_s3(uri):
        return None
    bucket = s3.split_s3(uri)[0]
    ordered = sorted(regions.values(), key=lambda r: r.name != prefer)
    for region in ordered:
        store = of_region(cfg, region)
        if store.exact and s3.is_s3(store.root) and s3.split_s3(store.root)[0] == bucket:
            return store
    return None


def store_of_uri(cfg: PipelineConfig, model_uri: str, regions: dict[str, RegionConfig]) -> Place:
    """The store a published URI lives in, and its endpoint: a region's own store when the URI is in one that names
    its own endpoint, else the pipeline's (published versions are there)."""
    root, _, _ = split_model_uri(model_uri)
    return place_of(cfg, root, regions) or Place(root, cfg.storage.endpoint_url)


def replicate_to(cfg: PipelineConfig, model_uri: str, regions: list[RegionConfig]) -> dict[str, str]:
    """The version published at `model_uri`, copied into the store of each region (0 bytes where it is already
    complete); region name → the URI its predictors read."""
    source = store_of_uri(cfg, model_uri, {r.name: r for r in regions})
    placed = {}
    for region in regions:
        # A region without a store of its own shares the pipeline's: it reads the version where it was published.
        own = region.store is not None or region.store_endpoint_url is not None
        replica = replicate(model_uri, source, of_region(cfg, region)) if own else None
        if replica is None or replica.model_uri == model_uri:
            log.info("region %s reads %s from the store it was published to", region.name, model_uri)
        else:
            log.info(
                "region %s reads %s: %d bytes sent, %d objects copied, %d already there",
                region.name, replica.model_uri, replica.bytes_sent, replica.copied, replica.present,
            )  # fmt: skip
        placed[region.name] = model_uri if replica is None else replica.model_uri
    return placed
