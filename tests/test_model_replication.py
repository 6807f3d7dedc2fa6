"""Models served from their own region's store (#39 item 5, #60 item 3), on moto's S3 server (production: one MinIO
per region).

Two regions with stores of their own (configs/regions `store`, `store_endpoint_url`, `store_credentials_secret`):
cn-north holds the pipeline's store, where the model is published; cn-east has its own bucket and its own keys. The
rollout copies the version into cn-east's store, signed with cn-east's keys, before any region changes
(content-addressed bodies, manifest last and byte for byte the same), points cn-east's predictor at that copy through
cn-east's endpoint with cn-east's Secret, and a rerun sends nothing. The predictor then loads the model from cn-east's
store with the north copy gone. A region whose store cannot hold the model fails the rollout naming region and store,
with no region changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from paddle_mlops_core.config.loader import load_config, load_regions
from paddle_mlops_core.config.serving import ServingConfig
from steps import rollout
from steps.runtime.release import inference_service as isvc
from steps.runtime.serving import model_server as serving
from steps.runtime.storage import region_stores, s3
from steps.runtime.storage.objectstore import manifest, publish
from steps.runtime.storage.objectstore.manifest import AlreadyPublishedError
from steps.runtime.storage.objectstore.replication import Place, replicate
from tests.kserve_standin import KServeStandIn
from tests.region_sites import copy_configs, export_region_keys, region_keys
from tests.rollout_doubles import FakeProbe
from tests.s3server import moto_s3_server
from tests.serving_fixtures import shared_tiny_export

ROOT = Path(__file__).resolve().parents[1]
NORTH, EAST = "s3://north/models", "s3://east/models"
DIGEST = "sha256:" + "5e" * 32
DEAD = "http://127.0.0.1:9"  # S3_ENDPOINT_URL of the pods names the default store; regions' own must win


class Registry:
    def __init__(self) -> None:
        self.tags: dict[str, dict[str, str]] = {}
        self.promoted: list[str] = []

    def champion(self) -> None:
        return None

    def promote(self, version: str) -> None:
        self.promoted.append(version)

    def served_image_digest(self) -> None:
        return None

    def tag(self, version: str, key: str, value: str) -> None:
        self.tags.setdefault(version, {})[key] = value


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    with moto_s3_server() as url:
        httpx.post(f"{url}/moto-api/reset").raise_for_status()  # moto's state is per process, not per server
        for bucket in ("north", "east"):
            s3.client(url, exact=True).create_bucket(Bucket=bucket)
        monkeypatch.setenv("S3_ENDPOINT_URL", DEAD)
        yield url


@pytest.fixture
def site(tmp_path: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """configs/ with both regions' stores on their own endpoint (one moto server, two buckets), cn-east with keys of
    its own (in the variables its Secret fills in a pod)."""
    stores = {
        "cn-north": {"store": NORTH, "store_endpoint_url": endpoint},
        "cn-east": {"store": EAST, "store_endpoint_url": endpoint, "store_credentials_secret": "minio-cn-east-keys"},
    }
    export_region_keys(monkeypatch, "cn-east")
    monkeypatch.delenv("PADDLE_MLOPS_REGION", raising=False)
    return copy_configs(tmp_path / "configs", stores)


@pytest.fixture
def signed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """(bucket, access key) of every S3 request any client of s3.client sends: who signed what."""
    seen: list[tuple[str, str]] = []
    made = s3.client

    def record(request: Any, **_: Any) -> None:
        auth = request.headers.get("Authorization", b"")
        auth = auth.decode() if isinstance(auth, bytes) else auth
        key = auth.partition("Credential=")[2].partition("/")[0]
        seen.append((request.url.split("/")[3].partition("?")[0], key))

    def client(*args: Any, **kwargs: Any) -> Any:
        c = made(*args, **kwargs)
        c.meta.events.register("before-send.s3", record)
        return c

    monkeypatch.setattr(s3, "client", client)
    yield seen


def overrides(endpoint: str) -> list[str]:
    return [
        f"storage.uri={NORTH}",
        f"storage.endpoint_url={endpoint}",
        "serving.canary_window_seconds=0",
        "serving.ready_timeout_seconds=5",
    ]


def publish_north(endpoint: str) -> str:
    result = publish(shared_tiny_export(), NORTH, "ernie-sentiment", "v1", endpoint_url=endpoint, exact=True)
    return result.model_uri


def keys(bucket: str, endpoint: str) -> dict[str, Any]:
    listing = s3.client(endpoint, exact=True).list_objects_v2(Bucket=bucket)
    return {o["Key"]: o["LastModified"] for o in listing.get("Contents", [])}


def roll_out(site: Path, endpoint: str, uri: str, api: KServeStandIn, tmp_path: Path) -> int:
    args = ["--config", str(site), "--env", "prod", "--overrides", json.dumps(overrides(endpoint))]
    args += ["--model-uri", uri, "--model-version", "1", "--image-digest", DIGEST, "--outputs-dir", str(tmp_path)]
    return rollout.main(args, registry=Registry(), api=api, probe=FakeProbe())


def test_published_in_one_region_served_from_anothers_store(
    site: Path, endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signed: list[tuple[str, str]]
) -> None:
    """A model served in cn-east is fetched from cn-east's store with cn-east's secret: the rollout copies it there
    with cn-east's keys, and cn-east's predictor reads that copy through cn-east's endpoint with the keys of
    cn-east's Secret (steps/runtime/release/inference_service.py; no storageUri, so KServe injects no storage
    initializer and no credentials of its own: kserve pkg/webhook/admission/pod/storage_initializer_injector.go
    InjectStorageInitializer returns without the source-URI annotation; the variables are the ones
    pkg/credentials/s3/s3_secret.go BuildSecretEnvs would set)."""
    east_key = region_keys("cn-east")[0]
    uri = publish_north(endpoint)
    api = KServeStandIn(lag=False, ready_after=0)
    signed.clear()
    assert roll_out(site, endpoint, uri, api, tmp_path) == 0
    assert {key for bucket, key in signed if bucket == "east"} == {east_key}  # cn-east's store: cn-east's keys only
    assert east_key not in {key for bucket, key in signed if bucket == "north"}  # the pipeline's: its own
    cfg = load_config(site, "prod", overrides(endpoint))
    regions = load_regions(site.parent)
    east = isvc.service_name(cfg, regions["cn-east"])
    assert api.model_uri(east) == f"{EAST}/ernie-sentiment/v1"
    container = api.objects[east]["spec"]["predictor"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert env["S3_ENDPOINT_URL"] == endpoint
    assert refs == {k: {"name": "minio-cn-east-keys", "key": k} for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    north = isvc.service_name(cfg, regions["cn-north"])
    assert api.model_uri(north) == uri  # the publishing region reads its own
    north_env = api.objects[north]["spec"]["predictor"]["containers"][0]["env"]
    north_refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in north_env if "valueFrom" in e}
    assert north_refs == {cfg.storage.credentials_secret}  # a region without a Secret of its own: storage's
    north_manifest = s3.client(endpoint, exact=True).get_object(
        Bucket="north", Key="models/ernie-sentiment/v1/manifest.json"
    )
    east_manifest = s3.client(endpoint, exact=True).get_object(
        Bucket="east", Key="models/ernie-sentiment/v1/manifest.json"
    )
    assert east_manifest["Body"].read() == north_manifest["Body"].read()  # the same manifest, same sha256

    # cn-east's predictor, as its pod starts it: the model URI and S3_ENDPOINT_URL of its InferenceService and the
    # keys its Secret holds, with the published copy in cn-north gone.
    for key in keys("north", endpoint):
        s3.client(endpoint, exact=True).delete_object(Bucket="north", Key=key)
    monkeypatch.setenv("S3_ENDPOINT_URL", env["S3_ENDPOINT_URL"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", east_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", region_keys("cn-east")[1])
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # a new process: credentials read from this environment
    signed.clear()
    model = serving.ErnieModel("ernie-sentiment", ServingConfig(), model_uri=api.model_uri(east))
    assert model.load()
    assert signed and set(signed) == {("east", east_key)}
    (prediction,) = model._run_batch(["这个手机质量很好，非常满意"])
    assert set(prediction["probabilities"]) == {"negative", "positive"}


def test_a_region_whose_store_lacks_the_model_fails_the_rollout_naming_it_and_no_region_changes(
    site: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cn-east's store refuses the copy (its bucket is gone): the rollout step fails (exit 1: the store may come
    back, a retry may clear it; not the rolled-back verdict, which says the model was tried) naming cn-east and its
    store, before cn-north, which comes first, is changed."""
    uri = publish_north(endpoint)
    s3.client(endpoint, exact=True).delete_bucket(Bucket="east")
    api = KServeStandIn(lag=False, ready_after=0)
    assert roll_out(site, endpoint, uri, api, tmp_path) == 1
    err = capsys.readouterr().err
    assert "region cn-east" in err and f"{EAST} at {endpoint}" in err and "does not hold" in err
    assert api.objects == {}  # no region touched, cn-north included
    assert not (tmp_path / "outcome").exists() or "rolled-back" not in (tmp_path / "outcome").read_text()


def test_a_regions_own_keys_missing_from_the_pod_is_named(
    site: Path, endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The region names a Secret but the pod has not got its keys: an error naming the region, the Secret's field
    and the variables, never the default keys sent to cn-east's MinIO."""
    uri = publish_north(endpoint)
    monkeypatch.delenv("PADDLE_MLOPS_STORE_CN_EAST_AWS_ACCESS_KEY_ID")
    api = KServeStandIn(lag=False, ready_after=0)
    assert roll_out(site, endpoint, uri, api, tmp_path) == 2  # a missing Secret: no retry sets it
    err = capsys.readouterr().err
    assert "region cn-east" in err and "store_credentials_secret" in err
    assert "PADDLE_MLOPS_STORE_CN_EAST_AWS_ACCESS_KEY_ID" in err
    assert api.objects == {}


def test_a_rerun_sends_nothing(site: Path, endpoint: str, tmp_path: Path) -> None:
    uri = publish_north(endpoint)
    cfg = load_config(site, "prod", overrides(endpoint))
    regions = [load_regions(site.parent)[n] for n in ("cn-north", "cn-east")]
    source = region_stores.store_of_uri(cfg, uri, {r.name: r for r in regions})
    first = replicate(uri, source, region_stores.of_region(cfg, regions[1]))
    files = manifest.parse(_manifest(endpoint), uri)["files"]
    assert (first.copied, first.present, first.bytes_sent) == (len(files), 0, sum(f["size"] for f in files))
    before = keys("east", endpoint)
    again = replicate(uri, source, region_stores.of_region(cfg, regions[1]))
    assert (again.bytes_sent, again.copied, again.present) == (0, 0, len(files))
    assert keys("east", endpoint) == before  # nothing rewritten
    api = KServeStandIn(lag=False, ready_after=0)
    assert roll_out(site, endpoint, uri, api, tmp_path) == 0  # the rollout's own copy: 0 bytes too
    assert keys("east", endpoint) == before


def test_a_damaged_copy_is_sent_again_and_a_different_manifest_is_refused(site: Path, endpoint: str) -> None:
    uri = publish_north(endpoint)
    source, target = Place(NORTH, endpoint, exact=True), Place(EAST, endpoint, exact=True)
    replicate(uri, source, target)
    body = next(k for k in keys("east", endpoint) if "/objects/" in k)
    s3.client(endpoint, exact=True).put_object(Bucket="east", Key=body, Body=b"bit rot")
    repaired = replicate(uri, source, target)
    assert repaired.copied == 1 and repaired.bytes_sent > 0
    key = "models/ernie-sentiment/v1/manifest.json"
    s3.client(endpoint, exact=True).put_object(Bucket="east", Key=key, Body=b'{"schema": 1, "files": []}')
    with pytest.raises(AlreadyPublishedError, match="differs"):
        replicate(uri, source, target)


def test_a_copy_into_a_directory_store_and_the_manifest_comes_last(tmp_path: Path) -> None:
    """Local stores follow the same rules: every body in place before the manifest appears."""
    uri = publish(shared_tiny_export(), str(tmp_path / "north"), "ernie-sentiment", "v1", progress=False).model_uri
    replica = replicate(uri, Place(str(tmp_path / "north")), Place(str(tmp_path / "east")))
    east = tmp_path / "east"
    assert replica.model_uri == f"{east}/ernie-sentiment/v1" and (east / "ernie-sentiment/v1/manifest.json").is_file()
    files = json.loads((east / "ernie-sentiment/v1/manifest.json").read_text())["files"]
    assert all((east / "objects/sha256" / f["sha256"]).stat().st_size == f["size"] for f in files)
    assert replicate(uri, Place(str(tmp_path / "north")), Place(str(tmp_path / "north"))).bytes_sent == 0


def _manifest(endpoint: str) -> bytes:
    return (
        s3.client(endpoint, exact=True)
        .get_object(Bucket="north", Key="models/ernie-sentiment/v1/manifest.json")["Body"]
        .read()
    )


def test_data_in_a_regions_store_is_read_through_that_regions_endpoint(
    site: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prepare-data reads data.source from data.region's store through the endpoint that region names, not the
    default one the pods' S3_ENDPOINT_URL names (here a dead port)."""
    from steps.runtime.data import area

    s3.client(endpoint, exact=True).put_object(Bucket="east", Key="datasets/reviews.jsonl", Body=b'{"text": "x"}\n')
    monkeypatch.chdir(site.parent.parent)  # load_regions() reads ./configs/regions
    cfg = load_config(site, "prod", [*overrides(endpoint), "data.source=s3://east/datasets/reviews.jsonl"])
    assert b"".join(area.open_source(cfg).chunks) == b'{"text": "x"}\n'
