"""Per-run workspace: a local directory or an s3:// prefix where steps hand data to each other.

Steps read inputs with `stage_in` (an s3 prefix is downloaded to a local directory; a local path is
used where it is) and publish outputs with `stage_out`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from steps.runtime.storage import s3

_TRANSFER = TransferConfig(multipart_threshold=64 * 1024 * 1024, max_concurrency=8)


def join(uri: str, *parts: str) -> str:
    """Join path parts onto a local path or an s3:// URI."""
    if s3.is_s3(uri):
        return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])
    return str(Path(uri, *parts))


def stage_in(uri: str, local_dir: Path | None = None, endpoint_url: str | None = None) -> Path:
    """Make the contents of `uri` available as a local directory and return it."""
    if not s3.is_s3(uri):
        path = Path(uri)
        if not path.exists():
            raise FileNotFoundError(f"{uri} does not exist")
        return path
    bucket, prefix = s3.split_s3(uri)
    target = local_dir or Path(tempfile.mkdtemp(prefix="stage-in-"))
    cli = s3.client(endpoint_url)
    found = False
    for page in cli.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/"):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix.rstrip("/")) + 1 :]
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            cli.download_file(bucket, obj["Key"], str(dest), Config=_TRANSFER)
            found = True
    if not found:
        raise FileNotFoundError(f"{uri} holds no objects")
    return target


def stage_out(
    local_dir: Path,
    uri: str,
    endpoint_url: str | None = None,
    only: Iterable[str] | None = None,
    removed: Iterable[str] = (),
) -> None:
    """Copy a local directory to `uri` (no-op when `uri` is that same local directory); `only`: just these files
    (paths relative to it); `removed`: files deleted from the local copy since it was staged in, deleted at
    `uri` too (a later step must not find them there)."""
    gone = sorted(set(removed))
    if not s3.is_s3(uri):
        dest = Path(uri)
        if dest.resolve() == Path(local_dir).resolve():
            return
        import shutil

        shutil.copytree(local_dir, dest, dirs_exist_ok=True)
        for name in gone:
            (dest / name).unlink(missing_ok=True)
        return
    bucket, prefix = s3.split_s3(uri)
    cli = s3.client(endpoint_url)
    chosen = None if only is None else {Path(local_dir) / name for name in only}
    for file in sorted(Path(local_dir).rglob("*")):
        if file.is_file() and (chosen is None or file in chosen):
            cli.upload_file(str(file), bucket, _key(prefix, file.relative_to(local_dir).as_posix()), Config=_TRANSFER)
    for start in range(0, len(gone), 1000):  # DeleteObjects takes at most 1000 keys
        batch = [{"Key": _key(prefix, name)} for name in gone[start : start + 1000]]
        cli.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})


def _key(prefix: str, relative: str) -> str:
    return "/".join([prefix.rstrip("/"), relative]).lstrip("/")


def read_json(uri: str, endpoint_url: str | None = None) -> Any:
    """The JSON document at `uri` (a local file or an s3:// object), or None when there is none."""
    try:
        if s3.is_s3(uri):
            bucket, key = s3.split_s3(uri)
            body = s3.client(endpoint_url).get_object(Bucket=bucket, Key=key)["Body"].read()
        else:
            body = Path(uri).read_bytes()
    except (OSError, ClientError):
        return None
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return None
