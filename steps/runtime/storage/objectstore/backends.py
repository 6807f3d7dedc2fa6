"""Where published bytes live: a local directory or an S3 bucket, behind the few operations publishing needs."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from steps.runtime import runner
from steps.runtime.storage import s3
from steps.runtime.storage.objectstore.manifest import CHUNK, sha256_file

# Large model files go up in parallel parts; 16 MiB parts keep a failed part cheap to resend.
DEFAULT_TRANSFER = TransferConfig(
    multipart_threshold=64 * 1024 * 1024, multipart_chunksize=16 * 1024 * 1024, max_concurrency=8
)
_NOT_FOUND = ("404", "NoSuchKey", "NotFound")

Callback = Callable[[int], None]


class Backend(Protocol):
    """The few operations publishing needs; keys are relative to the store root."""

    root: str

    def has_object(self, key: str, size: int, sha256: str) -> bool: ...
    def put_file(self, path: Path, key: str, sha256: str, callback: Callback) -> None: ...
    def get_file(self, key: str, dest: Path, callback: Callback) -> None: ...
    def create_exclusive(self, key: str, data: bytes) -> bool: ...
    def read(self, key: str) -> bytes | None: ...
    def read_tagged(self, key: str) -> tuple[bytes, str] | None: ...
    def children(self, prefix: str) -> list[str]: ...
    def delete_prefix(self, prefix: str) -> None: ...


class LocalBackend:
    """A directory as the store (the embedded default)."""

    def __init__(self, root: str | Path) -> None:
        self.root = str(Path(root).resolve())

    def _path(self, key: str) -> Path:
        return Path(self.root, *key.split("/"))

    def has_object(self, key: str, size: int, sha256: str) -> bool:
        path = self._path(key)
        # Re-hash rather than trust the name: a truncated or edited object must be re-sent.
        return path.is_file() and path.stat().st_size == size and sha256_file(path) == sha256

    def put_file(self, path: Path, key: str, sha256: str, callback: Callback) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
                for block in iter(lambda: src.read(CHUNK), b""):
                    out.write(block)
                    callback(len(block))
                out.flush()
                os.fsync(out.fileno())
            # Readers see the old object or the whole new one, never a partial write.
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get_file(self, key: str, dest: Path, callback: Callback) -> None:
        src = self._path(key)
        if not src.is_file():
            raise FileNotFoundError(key)
        shutil.copyfile(src, dest)
        callback(dest.stat().st_size)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            # link(2) fails if the name exists: an atomic create-without-overwrite of a complete file.
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def read(self, key: str) -> bytes | None:
        path = self._path(key)
        return path.read_bytes() if path.is_file() else None

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        """The bytes and their entity tag: MD5, what an S3 single-part PUT (and the local notification) reports."""
        data = self.read(key)
        return None if data is None else (data, hashlib.md5(data, usedforsecurity=False).hexdigest())

    def children(self, prefix: str) -> list[str]:
        """The names one level below `prefix` (a listing of "folders"), sorted."""
        path = self._path(prefix)
        return sorted(p.name for p in path.iterdir() if not p.name.startswith(".")) if path.is_dir() else []

    def delete_prefix(self, prefix: str) -> None:
        """Everything under `prefix` (a "folder"), gone; nothing there is no error."""
        shutil.rmtree(self._path(prefix), ignore_errors=True)


def _error_code(exc: ClientError) -> str | None:
    return exc.response.get("Error", {}).get("Code")


class S3Backend:
    """Any S3 endpoint (MinIO in production) through boto3's managed transfers."""

    def __init__(
        self,
        uri: str,
        endpoint_url: str | None = None,
        transfer: TransferConfig | None = None,
        exact: bool = False,
        credentials: str | None = None,
    ) -> None:
        self.root = uri.rstrip("/")
        self.bucket, self.prefix = s3.split_s3(self.root)
        self.client = s3.client(endpoint_url, exact=exact, credentials=credentials)
        self.transfer = transfer or DEFAULT_TRANSFER

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=self._key(key), ChecksumMode="ENABLED")
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND:
                return None
            raise

    def has_object(self, key: str, size: int, sha256: str) -> bool:
        head = self._head(key)
        if head is None or head["ContentLength"] != size or head.get("Metadata", {}).get("sha256") != sha256:
            return False
        # Metadata is only a claim. The server-computed checksum is the evidence: publish always
        # sends one, so an object without it was written by someone else and is sent again.
        stored = head.get("ChecksumSHA256")
        if not stored:
            return False
        if "-" in head.get("ETag", ""):
            # Multipart: the checksum covers the parts, each verified by the server on arrival.
            return True
        return base64.b64decode(stored).hex() == sha256

    def put_file(self, path: Path, key: str, sha256: str, callback: Callback) -> None:
        # ChecksumAlgorithm makes the server check every part as it arrives; the sha256 metadata
        # records the whole-file digest, which a multipart checksum is not.
        self.client.upload_file(
            str(path),
            self.bucket,
            self._key(key),
            ExtraArgs={"Metadata": {"sha256": sha256}, "ChecksumAlgorithm": "SHA256"},
            Config=self.transfer,
            Callback=callback,
        )

    def get_file(self, key: str, dest: Path, callback: Callback) -> None:
        try:
            self.client.download_file(self.bucket, self._key(key), str(dest), Config=self.transfer, Callback=callback)
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND:
                raise FileNotFoundError(key) from None
            raise

    def create_exclusive(self, key: str, data: bytes) -> bool:
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*", ContentType="application/json"
            )
            return True
        except ClientError as exc:
            # 412: the key exists; 409: a concurrent conditional write is in flight and won.
            if _error_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise

    def read(self, key: str) -> bytes | None:
        tagged = self.read_tagged(key)
        return None if tagged is None else tagged[0]

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        """The bytes and the ETag of the same GET (not always an MD5: multipart uploads, SSE-KMS, SSE-C)."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND:
                return None
            raise
        return response["Body"].read(), str(response.get("ETag") or "").strip('"')

    def children(self, prefix: str) -> list[str]:
        """The names one level below `prefix` (common prefixes and objects), sorted."""
        base = "/".join(p for p in (self.prefix, prefix.strip("/")) if p) + "/"
        base = "" if base == "/" else base
        names: set[str] = set()
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=base, Delimiter="/"
        ):
            names.update(p["Prefix"][len(base) :].rstrip("/") for p in page.get("CommonPrefixes", []))
            names.update(o["Key"][len(base) :] for o in page.get("Contents", []))
        return sorted(n for n in names if n)

    def delete_prefix(self, prefix: str) -> None:
        """Every object under `prefix/`, deleted 1000 at a time (DeleteObjects' limit); nothing there is no error."""
        base = "/".join(p for p in (self.prefix, prefix.strip("/")) if p) + "/"
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})


def resolve_root(store_uri: str) -> str:
    """`local` means `<PADDLE_MLOPS_HOME>/store`; anything else is a directory or an s3:// URI."""
    if store_uri == "local":
        return str(runner.home_dir() / "store")
    return store_uri if s3.is_s3(store_uri) else str(Path(store_uri).resolve())


def open_backend(
    root: str,
    endpoint_url: str | None = None,
    transfer: TransferConfig | None = None,
    exact: bool = False,
    credentials: str | None = None,
) -> Backend:
    """The store at `root`; `exact`: reach it through `endpoint_url` whatever S3_ENDPOINT_URL says, `credentials`:
    with that region's own keys (s3.client)."""
    if s3.is_s3(root):
        return S3Backend(root, endpoint_url, transfer, exact, credentials)
    return LocalBackend(root)
