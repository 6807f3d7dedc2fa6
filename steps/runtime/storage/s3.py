"""One way to build S3 clients, so every step talks to MinIO the same way."""

from __future__ import annotations

import os
from urllib.parse import urlparse

import boto3
from botocore.config import Config


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> (`bucket`, `a/b`)."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"{uri!r} is not an s3://bucket/prefix URI")
    return parsed.netloc, parsed.path.lstrip("/")


def client(endpoint_url: str | None = None, region: str | None = None, exact: bool = False):  # type: ignore[no-untyped-def]
    """A boto3 S3 client for AWS or any S3 endpoint (MinIO in production).

    `S3_ENDPOINT_URL` / `AWS_ENDPOINT_URL` override the configured endpoint, which is the pipeline's default store's
    (`storage.endpoint_url`, what the pods' environment says too); `exact` keeps `endpoint_url` as given: the
    endpoint a region names for its own store (configs/regions `store_endpoint_url`). Checksums are sent only
    when an operation requires them: boto3 >= 1.36 otherwise sends CRC32 trailers that older MinIO
    releases reject. Path-style addressing because MinIO is usually reached by service name.
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
    )
