"""Models served from their own region's store (#39 item 5), on moto's S3 server (production: one MinIO per region).

Two regions with stores of their own (configs/regions `store`, `store_endpoint_url`): cn-north holds the pipeline's
store, where the model is published; cn-east has its own bucket. The rollout copies the version into cn-east's
store before any region changes (content-addressed bodies, manifest last and byte for byte the same), points
cn-east's predictor at that copy through cn-east's endpoint, and a rerun sends nothing. The predictor then loads the
model from cn-east's store with the north copy gone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

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
    """configs/ with both regions' stores on their own endpoint (one moto server, two buckets)."""
    configs = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", configs)
    for region, store in (("cn-north", NORTH), ("cn-east", EAST)):
        path = configs / "regions" / f"{region}.yaml"
        path.write_text(path.read_text() + f"store: {store}\nstore_endpoint_url: {endpoint}\n", encoding="utf-8")
    monkeypatch.delenv("PADDLE_MLOPS_REGION", raising=False)
    return configs / "pipeline.yaml"


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
    site: Path, endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = publish_north(endpoint)
    api = KServeStandIn(lag=False, ready_after=0)
    assert roll_out(site, endpoint, uri, api, tmp_path) == 0
    cfg = load_config(site, "prod", overrides(endpoint))
    regions = load_regions(site.parent)
    east = isvc.service_name(cfg, regions["cn-east"])
    assert api.model_uri(east) == f"{EAST}/ernie-sentiment/v1"
    env = {e["name"]: e.get("value") for e in api.objects[east]["spec"]["predictor"]["containers"][0]["env"]}
    assert env["S3_ENDPOINT_URL"] == endpoint
    assert api.model_uri(isvc.service_name(cfg, regions["cn-north"])) == uri  # the publishing region reads its own
    north_manifest = s3.client(endpoint, exact=True).get_object(
        Bucket="north", Key="models/ernie-sentiment/v1/manifest.json"
    )
    east_manifest = s3.client(endpoint, exact=True).get_object(
        Bucket="east", Key="models/ernie-sentiment/v1/manifest.json"
    )
    assert east_manifest["Body"].read() == north_manifest["Body"].read()  # the same manifest, same sha256

    # cn-east's predictor, as its pod starts it: the model URI and S3_ENDPOINT_URL of its InferenceService, with
    # the published copy in cn-north gone.
    for key in keys("north", endpoint):
        s3.client(endpoint, exact=True).delete_object(Bucket="north", Key=key)
    monkeypatch.setenv("S3_ENDPOINT_URL", env["S3_ENDPOINT_URL"])
    model = serving.ErnieModel("ernie-sentiment", ServingConfig(), model_uri=api.model_uri(east))
    assert model.load()
    (prediction,) = model._run_batch(["这个手机质量很好，非常满意"])
    assert set(prediction["probabilities"]) == {"negative", "positive"}


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
    assert area.source_bytes(cfg) == b'{"text": "x"}\n'
