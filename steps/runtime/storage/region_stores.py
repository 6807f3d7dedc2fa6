"""Each region's object store: where its pods read models and pretrained weights, and through which endpoint.

`configs/regions/<r>.yaml` `store` (an s3://bucket/prefix or a directory, the region's equivalent of `storage.uri`),
`store_endpoint_url` (its S3 endpoint, its own MinIO) and `store_credentials_secret` (its own keys); each left out
falls back to `storage.uri` / `storage.endpoint_url` / `storage.credentials_secret`, and `storage.region_stores:
false` (a laptop) makes every region read the pipeline's store. A region's own endpoint is used exactly as named
(s3.client `exact`): the pods' environment names the default store's endpoint; its own keys come from the variables
contracts.store_credentials_env names. The same layout holds in every store: models at `<store>/<model>/<version>/`,
pretrained weights under `<store>/pretrained/`, bodies content-addressed under `objects/sha256/`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.region_store_rules import has_own_store, own_credentials, store_endpoint
from paddle_mlops_core.config.regions import RegionConfig
from steps.runtime.runner import StepError, StepFailed
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
    """The store `region`'s pods read (paddle_mlops_core/config/region_store_rules.py)."""
    if not has_own_store(cfg, region):
        return RegionStore(resolve_root(cfg.storage.uri), cfg.storage.endpoint_url, region=region.name)
    return RegionStore(
        resolve_root(region.store or cfg.storage.uri),
        store_endpoint(cfg, region),
        exact=region.store_endpoint_url is not None,
        credentials=region.name if own_credentials(cfg, region) else None,
        region=region.name,
    )


def describe(store: Place) -> str:
    """`s3://east/models at http://minio.cn-east.svc:9000`: a store as an error message names it."""
    return f"{store.root} at {store.endpoint_url}" if store.endpoint_url else store.root


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
    """The store a published URI lives in, and how to reach it: a region's own store when the URI is in one that
    names its own endpoint, else the pipeline's (published versions are there)."""
    root, _, _ = split_model_uri(model_uri)
    return place_of(cfg, root, regions) or Place(root, cfg.storage.endpoint_url)


class RegionStoreMissing(StepFailed):
    """A region's store does not hold the complete model: that region cannot roll out (exit 1, a retry may clear a
    store that was down)."""


def replicate_to(cfg: PipelineConfig, model_uri: str, regions: list[RegionConfig]) -> dict[str, str]:
    """The version published at `model_uri`, copied into the store of each region (0 bytes where it is already
    complete); region name → the URI its predictors read. RegionStoreMissing, naming the region and its store, when
    one cannot be made to hold it: raised before the caller changes any region. A region without a store of its own
    reads the publishing store, which holds the version by construction (manifest last)."""
    source = store_of_uri(cfg, model_uri, {r.name: r for r in regions})
    placed = {}
    for region in regions:
        target = of_region(cfg, region)
        try:
            # A region without a store of its own shares the pipeline's: it reads the version where it was published.
            # replicate() leaves the target complete (every body verified, the published manifest last) or raises.
            replica = replicate(model_uri, source, target) if has_own_store(cfg, region) else None
        except s3.MissingCredentials:
            raise  # a Secret missing from the pod: exit 2, no retry sets it
        except (StepError, OSError, ClientError, BotoCoreError) as exc:
            raise RegionStoreMissing(
                f"region {region.name}: its store {describe(target)} does not hold {model_uri} ({exc}); nothing was "
                "changed in any region. Check that store (configs/regions/"
                f"{region.name}.yaml store, store_endpoint_url, store_credentials_secret) and run the rollout again"
            ) from None
        if replica is None or replica.model_uri == model_uri:
            log.info("region %s reads %s from the store it was published to", region.name, model_uri)
        else:
            log.info(
                "region %s reads %s from %s: %d bytes sent, %d objects copied, %d already there",
                region.name, replica.model_uri, describe(target), replica.bytes_sent, replica.copied, replica.present,
            )  # fmt: skip
        placed[region.name] = model_uri if replica is None else replica.model_uri
    return placed
