"""One way to build S3 clients, so every step talks to MinIO the same way."""

from __future__ import annotations

import os
from urllib.parse import urlparse

import boto3
from botocore.config import Config

from paddle_mlops_core.contracts import store_credentials_env
from steps.runtime.runner import StepError


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> (`bucket`, `a/b`)."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"{uri!r} is not an s3://bucket/prefix URI")
    return parsed.netloc, parsed.path.lstrip("/")


def client(  # type: ignore[no-untyped-def]
    endpoint_url: str | None = None, region: str | None = None, exact: bool = False, credentials: str | None = None
):
    """A boto3 S3 client for AWS or any S3 endpoint (MinIO in production).

    `S3_ENDPOINT_URL` / `AWS_ENDPOINT_URL` override the configured endpoint, which is the pipeline's default store's
    (`storage.endpoint_url`, what the pods' environment says too); `exact` keeps `endpoint_url` as given: the
    endpoint a region names for its own store (configs/regions `store_endpoint_url`). Checksums are sent only
    when an operation requires them: boto3 >= 1.36 otherwise sends CRC32 trailers that older MinIO
    releases reject. Path-style addressing because MinIO is usually reached by service name.

    `credentials`: the region whose own keys sign the requests (configs/regions `store_credentials_secret`, carried
    in the variables contracts.store_credentials_env names); None: boto3's default chain (AWS_ACCESS_KEY_ID...).
    """
    endpoint = endpoint_url if exact else os.environ.get("S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
    endpoint = endpoint or endpoint_url
    config = Config(
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        retries={"max_attempts": 5, "mode": "standard"},
        s3={"addressing_style": "path"},
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        config=config,
        **_keys(credentials),
    )


class MissingCredentials(StepError):
    """A region's own store credentials are not in this process's environment (exit 2: no retry sets them)."""


def _keys(region: str | None) -> dict[str, str]:
    """boto3's key arguments for `region`'s own credentials; none for the default chain."""
    if region is None:
        return {}
    names = store_credentials_env(region)
    missing = [name for name in names.values() if not os.environ.get(name)]
    if missing:
        raise MissingCredentials(
            f"the store of region {region} has credentials of its own (configs/regions/{region}.yaml "
            f"store_credentials_secret) but {' and '.join(missing)} is not set here: on the cluster the pods get them "
            "from that Secret, so create it in the pods' namespace; elsewhere export the region store's keys under "
            "these names"
        )
    return {
        "aws_access_key_id": os.environ[names["AWS_ACCESS_KEY_ID"]],
        "aws_secret_access_key": os.environ[names["AWS_SECRET_ACCESS_KEY"]],
    }
