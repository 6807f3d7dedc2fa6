"""Serving images by digest (#18 items 3-4): build-image builds the serving image from the commit, every
InferenceService pins it by digest, and a serving-image-only change (image-rollout) goes through the same
region-staged canary as a new model, rolling back on a failed health check.

The KServe side is the stand-in of tests/kserve_standin.py (kserve v0.20.0 ksvc_reconciler.go and
inference_service_status.go behaviour); steps/runtime/release/isvc_status.py `identity` counts the image among what
makes a new revision, so an image change alone creates a canary revision like a model change does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paddle_mlops_core.config.loader import load_config, load_regions
from paddle_mlops_core.contracts import EXIT_ROLLED_BACK, EXIT_USER_ERROR
from pipelines import image_rollout, rollout_template, train_deploy
from steps import rollout
from steps.runtime.release import inference_service as isvc
from tests.kserve_standin import KServeStandIn
from tests.rollout_doubles import IMAGE, FakeProbe, previous_services

OLD_URI = "s3://paddle-mlops/models/ernie-sentiment/7"
NEW_DIGEST = "sha256:" + "9f" * 32
# No region MinIO here: every region reads the pipeline's store (region stores: test_model_replication.py).
FAST = '["serving.canary_window_seconds=0", "serving.ready_timeout_seconds=1", "storage.region_stores=false"]'


class ChampionRegistry:
    """The registry as the rollout sees it, with version 7 as champion."""

    def __init__(self) -> None:
        self.version, self.promoted = "7", []
        self.tags: dict[str, dict[str, str]] = {}

    def champion(self) -> tuple[str, str] | None:
        return (self.version, OLD_URI) if self.version else None

    def promote(self, version: str) -> str | None:
        self.promoted.append(version)
        return self.version

    def served_image_digest(self) -> str | None:
        return self.tags.get(self.version, {}).get("serving.image_digest")

    def tag(self, version: str, key: str, value: str) -> None:
        self.tags.setdefault(version, {})[key] = value


@pytest.fixture
def cfg() -> Any:
    return load_config(env="prod")


@pytest.fixture
def regions(cfg: Any) -> list[Any]:
    known = load_regions()
    return [known[name] for name in cfg.serving.regions]


def _templates(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in doc["spec"]["templates"]}


def _task_arguments(doc: dict[str, Any], task: str) -> dict[str, str]:
    dag = next(t for t in doc["spec"]["templates"] if t["name"] == doc["spec"]["entrypoint"])["dag"]["tasks"]
    found = next(t for t in dag if t["name"] == task)
    return {p["name"]: p["value"] for p in found["arguments"]["parameters"]}


def _image_rollout(cfg: Any, regions: list[Any], tmp_path: Path, *extra: str) -> list[str]:
    order = ",".join(r.name for r in regions)
    return ["--env", "prod", "--overrides", FAST, "--champion", "--regions", order, "--outputs-dir", str(tmp_path),
            *extra]  # fmt: skip


def test_train_deploy_publishes_the_image_built_from_its_commit_and_the_rollout_serves_it(cfg: Any) -> None:
    """train-deploy records build-image's serving digest in the manifest (upload); the rollout that the manifest's
    notification starts reads it back in validate and deploys exactly that digest."""
    doc = train_deploy.build(cfg).to_dict()
    outputs = {p["name"] for p in _templates(doc)["build-image"]["outputs"]["parameters"]}
    assert {"image-digest", "serve-image-digest"} <= outputs
    args = _templates(doc)["build-image"]["container"]["args"]
    assert args[args.index("--serve-image") + 1] == "registry.example.com/paddle-mlops/serve"
    built = "{{tasks.build-image.outputs.parameters.serve-image-digest}}"
    assert _task_arguments(doc, "upload")["serve-image-digest"] == built
    upload_args = _templates(doc)["upload"]["container"]["args"]
    assert upload_args[upload_args.index("--serve-image-digest") + 1] == "{{inputs.parameters.serve-image-digest}}"
    released = rollout_template.build(cfg).to_dict()
    assert _task_arguments(released, "rollout")["image-digest"] == "{{tasks.validate.outputs.parameters.image-digest}}"
    rollout_args = _templates(released)["rollout"]["container"]["args"]
    assert rollout_args[rollout_args.index("--image-digest") + 1] == "{{inputs.parameters.image-digest}}"


def test_the_image_rollout_template_requires_a_digest(cfg: Any) -> None:
    """No default: `argo submit` without `-p image-digest=sha256:…` is refused before anything runs."""
    params = {p["name"]: p for p in image_rollout.build(cfg).to_dict()["spec"]["arguments"]["parameters"]}
    assert "value" not in params["image-digest"]


def test_a_model_published_without_a_digest_is_served_on_the_champions_image(
    cfg: Any, regions: list[Any], tmp_path: Path
) -> None:
    """A model trained elsewhere names no serving image: it goes out on the image the champion is served on."""
    registry = ChampionRegistry()
    registry.tags["7"] = {"serving.image_digest": NEW_DIGEST}
    api = KServeStandIn(existing=previous_services(cfg, regions), lag=False, ready_after=0)
    args = ["--env", "prod", "--overrides", FAST, "--model-uri", "s3://m/e/8", "--model-version", "8",
            "--image-digest", "", "--outputs-dir", str(tmp_path)]  # fmt: skip
    assert rollout.main(args, registry=registry, api=api, probe=FakeProbe()) == 0
    for region in regions:
        body = api.objects[isvc.service_name(cfg, region)]
        assert body["spec"]["predictor"]["containers"][0]["image"].endswith(f"@{NEW_DIGEST}")
    assert registry.tags["8"]["serving.image_digest"] == NEW_DIGEST


def test_a_model_without_a_digest_and_no_champion_image_changes_nothing(
    cfg: Any, regions: list[Any], tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    api = KServeStandIn(existing=previous_services(cfg, regions), lag=False, ready_after=0)
    args = ["--env", "prod", "--model-uri", "s3://m/e/8", "--model-version", "8", "--image-digest", ""]
    assert rollout.main(args, registry=ChampionRegistry(), api=api, probe=FakeProbe()) == EXIT_USER_ERROR
    assert "served on the champion's image" in capsys.readouterr().err and api.calls == []


def test_a_rollout_without_a_digest_changes_nothing(cfg: Any, regions: list[Any], tmp_path: Path, capsys) -> None:  # noqa: ANN001
    api = KServeStandIn(existing=previous_services(cfg, regions), lag=False, ready_after=0)
    args = ["--env", "prod", "--model-uri", "s3://m/e/8", "--model-version", "8", "--image-digest", "0.1.0"]
    assert rollout.main(args, registry=ChampionRegistry(), api=api, probe=FakeProbe()) == EXIT_USER_ERROR
    assert "KServe serves the serving image by digest only" in capsys.readouterr().err
    assert api.calls == []


def test_an_image_only_change_goes_region_by_region(cfg: Any, regions: list[Any], tmp_path: Path) -> None:
    assert len(regions) >= 2, "configs/pipeline.yaml prod should list at least two serving regions"
    registry = ChampionRegistry()
    api = KServeStandIn(existing=previous_services(cfg, regions), lag=False, ready_after=0)
    args = _image_rollout(cfg, regions, tmp_path, "--image-digest", NEW_DIGEST)
    assert rollout.main(args, registry=registry, api=api, probe=FakeProbe()) == 0
    first, second = (isvc.service_name(cfg, r) for r in regions[:2])
    written = [name for _, name in api.calls]
    # Every write to the first region (canary, then promotion) comes before any write to the second.
    assert written.index(second) > max(i for i, name in enumerate(written) if name == first)
    for region in regions:
        body = api.objects[isvc.service_name(cfg, region)]
        assert (
            body["spec"]["predictor"]["containers"][0]["image"]
            == f"registry.example.com/paddle-mlops/serve@{NEW_DIGEST}"
        )
        assert body["metadata"]["annotations"]["paddle-mlops/image-digest"] == NEW_DIGEST
        assert body["metadata"]["annotations"]["paddle-mlops/model-uri"] == OLD_URI  # the model did not change
    assert registry.promoted == ["7"] and registry.tags["7"]["image_rollout.outcome"] == "promoted"
    assert registry.tags["7"]["image_rollout.image_digest"] == NEW_DIGEST


def test_a_failed_health_check_rolls_the_image_back(cfg: Any, regions: list[Any], tmp_path: Path) -> None:
    registry = ChampionRegistry()
    existing = previous_services(cfg, regions)
    api = KServeStandIn(existing=existing, lag=False, ready_after=0)
    first = isvc.service_name(cfg, regions[0])
    args = _image_rollout(cfg, regions, tmp_path, "--image-digest", NEW_DIGEST)
    assert rollout.main(args, registry=registry, api=api, probe=FakeProbe(unhealthy_urls=(first,))) == EXIT_ROLLED_BACK
    assert (tmp_path / "outcome").read_text() == "rolled-back"
    # The first region serves the previous image again; the others were never touched.
    assert api.objects[first]["spec"]["predictor"]["containers"][0]["image"] == IMAGE
    untouched = {isvc.service_name(cfg, r) for r in regions[1:]}
    assert not untouched & {name for _, name in api.calls}
    # The champion model was never at fault: the verdict is the image's, not a model rollout's.
    assert registry.promoted == [] and registry.tags["7"]["image_rollout.outcome"] == "rolled-back"
    assert "rollout.outcome" not in registry.tags["7"]


def test_an_image_rollout_needs_a_champion(cfg: Any, regions: list[Any], tmp_path: Path, capsys) -> None:  # noqa: ANN001
    registry = ChampionRegistry()
    registry.version = ""
    api = KServeStandIn(existing=previous_services(cfg, regions), lag=False, ready_after=0)
    args = _image_rollout(cfg, regions, tmp_path, "--image-digest", NEW_DIGEST)
    assert rollout.main(args, registry=registry, api=api, probe=FakeProbe()) == EXIT_USER_ERROR
    assert "no model version is 'champion' yet" in capsys.readouterr().err and api.calls == []


def test_every_template_running_the_rollout_reports_its_outcome(cfg: Any) -> None:
    """The rolled-back alert and the outcome panel read ROLLOUT_OUTCOME: an image rollback must feed them too."""
    from paddle_mlops_core.contracts import ROLLOUT_OUTCOME

    found = 0
    for module in (rollout_template, image_rollout):
        for template in module.build(cfg).to_dict()["spec"]["templates"]:
            if template.get("container", {}).get("command", [])[2:3] == ["steps.rollout"]:
                found += 1
                names = {metric["name"] for metric in template["metrics"]["prometheus"]}
                assert ROLLOUT_OUTCOME in names, template["name"]
    assert found == 2
