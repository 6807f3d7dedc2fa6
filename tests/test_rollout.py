"""Rollout: the region-staged KServe state machine (stand-in API) and a real local rollout."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from paddle_mlops_core.config.loader import load_config
from paddle_mlops_core.contracts import EXIT_ROLLED_BACK
from steps import rollout
from steps.runtime.release import inference_service as isvc
from steps.runtime.release.health import parse_health
from steps.runtime.release.rollout_outcome import PROMOTED, ROLLED_BACK
from steps.runtime.serving import local_server
from tests import rollout_doubles
from tests.kserve_standin import KServeStandIn as FakeCustomObjectsApi
from tests.rollout_doubles import IMAGE, MODEL_URI, FakeProbe, metrics_text, previous_services, run_machine

cfg, regions = rollout_doubles.cfg, rollout_doubles.regions  # the shared fixtures


class FakeRegistry:
    def __init__(self, champion: str | None = None):
        self.champion = champion
        self.tags: dict[str, dict[str, str]] = {}

    def promote(self, version: str) -> str | None:
        previous, self.champion = self.champion, version
        return previous

    def served_image_digest(self) -> str | None:
        return None

    def tag(self, version: str, key: str, value: str) -> None:
        self.tags.setdefault(version, {})[key] = value


def test_ready_canary_is_checked_then_promoted(cfg: Any, regions: list[Any]) -> None:
    api = FakeCustomObjectsApi(existing=previous_services(cfg, regions[:1]))
    probe = FakeProbe()
    outcome = run_machine(cfg, regions[:1], api, probe)
    assert outcome.outcome == PROMOTED
    name = isvc.service_name(cfg, regions[0])
    # First the canary at canary_percent, then the promotion without canaryTrafficPercent.
    assert api.calls == [("replace", name), ("replace", name)]
    assert "canaryTrafficPercent" not in api.objects[name]["spec"]["predictor"]
    assert api.model_uri(name) == MODEL_URI
    assert probe.smoked == [f"http://latest-{name}-predictor.ns.example.com"]


def test_not_ready_past_deadline_rolls_back(cfg: Any, regions: list[Any]) -> None:
    existing = previous_services(cfg, regions[:1])
    api = FakeCustomObjectsApi(ready=lambda name, body: MODEL_URI not in json.dumps(body), existing=existing)
    outcome = run_machine(cfg, regions[:1], api, FakeProbe())
    assert outcome.outcome == ROLLED_BACK
    assert "Ready with the new spec not reached within 60s" in outcome.reason
    name = isvc.service_name(cfg, regions[0])
    assert api.model_uri(name).endswith("/7")
    assert api.objects[name]["spec"] == existing[name]["spec"]


def test_unhealthy_canary_rolls_back(cfg: Any, regions: list[Any]) -> None:
    existing = previous_services(cfg, regions[:1])
    api = FakeCustomObjectsApi(existing=existing)
    name = isvc.service_name(cfg, regions[0])
    outcome = run_machine(cfg, regions[:1], api, FakeProbe(unhealthy_urls=(name,)))
    assert outcome.outcome == ROLLED_BACK
    assert "error rate 0.100 > max_error_rate" in outcome.reason
    assert api.objects[name]["spec"] == existing[name]["spec"]


def test_success_in_two_regions(cfg: Any, regions: list[Any]) -> None:
    assert [r.name for r in regions] == ["cn-north", "cn-east"]
    api = FakeCustomObjectsApi(existing=previous_services(cfg, regions))
    outcome = run_machine(cfg, regions, api, FakeProbe())
    assert outcome.outcome == PROMOTED and outcome.regions == ["cn-north", "cn-east"]
    names = [isvc.service_name(cfg, r) for r in regions]
    # Region by region: cn-north is fully promoted before cn-east is touched.
    assert [n for _, n in api.calls] == [names[0], names[0], names[1], names[1]]
    for name in names:
        assert api.model_uri(name) == MODEL_URI
        assert "canaryTrafficPercent" not in api.objects[name]["spec"]["predictor"]


def test_failure_in_second_region_rolls_back_the_first(cfg: Any, regions: list[Any]) -> None:
    existing = previous_services(cfg, regions)
    api = FakeCustomObjectsApi(existing=existing)
    second = isvc.service_name(cfg, regions[1])
    outcome = run_machine(cfg, regions, api, FakeProbe(unhealthy_urls=(second,)))
    assert outcome.outcome == ROLLED_BACK and "region cn-east" in outcome.reason
    for region in regions:
        name = isvc.service_name(cfg, region)
        assert api.model_uri(name).endswith("/7"), f"{region.name} not rolled back"
        assert api.objects[name]["spec"] == existing[name]["spec"]


def test_step_outputs_and_tags_keep_champion_on_failure(tmp_path: Path, regions: list[Any]) -> None:
    cfg = load_config(env="prod")
    registry = FakeRegistry(champion="7")
    api = FakeCustomObjectsApi(existing=previous_services(cfg, regions), lag=False, ready_after=0)
    probe = FakeProbe(unhealthy_urls=(isvc.service_name(cfg, regions[1]),))
    # No region MinIO here: every region reads the pipeline's store (region stores: test_model_replication.py).
    fast = '["serving.canary_window_seconds=0", "serving.ready_timeout_seconds=1", "storage.region_stores=false"]'
    common = ["--env", "prod", "--overrides", fast]
    args = [
        *common,
        "--model-uri",
        MODEL_URI,
        "--model-version",
        "8",
        "--image-digest",
        IMAGE.partition("@")[2],
        "--outputs-dir",
        str(tmp_path),
    ]
    # A rollback is a verdict, not a transient error: its own exit code, which Argo does not retry.
    assert rollout.main(args, registry=registry, api=api, probe=probe) == EXIT_ROLLED_BACK == 3
    assert (tmp_path / "outcome").read_text() == "rolled-back"
    assert registry.champion == "7" and registry.tags["8"]["rollout.outcome"] == "rolled-back"
    assert "cn-east" in registry.tags["8"]["rollout.reason"]

    api = FakeCustomObjectsApi(existing=previous_services(cfg, regions), lag=False, ready_after=0)
    assert rollout.main(args, registry=registry, api=api, probe=FakeProbe()) == 0
    assert (tmp_path / "outcome").read_text() == "promoted"
    assert (tmp_path / "serving-url").read_text() == f"http://{isvc.service_name(cfg, regions[1])}.ns.example.com"
    assert registry.champion == "8" and registry.tags["8"]["rollout.outcome"] == "promoted"


def test_parse_health_p99() -> None:
    health = parse_health(metrics_text(100, 0, slow=True))
    assert health.requests == 100 and health.error_rate == 0 and health.p99_ms == 2500


# --------------------------------------------------------------------------- local, real processes


@dataclass
class SteadyTraffic:
    """What a client sending predict requests every 50 ms saw: how many it sent, and each failure."""

    sent: int = 0
    failures: list[str] = field(default_factory=list)


@contextmanager
def steady_traffic(url: str) -> Iterator[SteadyTraffic]:
    """Send predict requests to `url` from a thread for as long as the block runs."""
    seen, stop = SteadyTraffic(), threading.Event()

    def keep_asking() -> None:
        with httpx.Client(timeout=10) as c:
            while not stop.is_set():
                try:
                    r = c.post(f"{url}/v1/models/ernie-sentiment:predict", json={"instances": ["很好"]})
                    if r.status_code != 200:
                        seen.failures.append(f"{r.status_code} {r.text[:100]}")
                except httpx.HTTPError as exc:
                    seen.failures.append(repr(exc))
                seen.sent += 1
                time.sleep(0.05)

    thread = threading.Thread(target=keep_asking)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


def local_rollout(registry: FakeRegistry, model_dir: Path, out: Path, version: str, overrides: list[str]) -> int:
    """`steps.rollout` in the local environment: `model_dir` as model `version`, outputs in `out`."""
    overrides_json = json.dumps(["serving.ready_timeout_seconds=180", *overrides])
    args = ["--env", "local", "--overrides", overrides_json, "--model-uri", str(model_dir), "--model-version", version]
    return rollout.main([*args, "--outputs-dir", str(out)], registry=registry)


@pytest.mark.slow
def test_local_rollout_failed_smoke_keeps_previous_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.serving_fixtures import shared_tiny_export

    home = tmp_path / "home"
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(home))
    registry = FakeRegistry(champion=None)
    out = tmp_path / "out"
    run = functools.partial(local_rollout, registry, shared_tiny_export(), out)
    try:
        assert run("1", []) == 0
        current = json.loads((home / "serving" / "ernie-sentiment" / "current.json").read_text())
        url = (out / "serving-url").read_text()
        assert current["model_version"] == "1" and current["url"] == url and url.startswith("http://127.0.0.1:")
        assert registry.champion == "1"

        with steady_traffic(url) as traffic:
            # The smoke texts are longer than 2 characters: the new server rejects them, smoke fails.
            assert run("2", ["serving.max_text_chars=2"]) == EXIT_ROLLED_BACK
        assert traffic.failures == [] and traffic.sent > 5
        assert (out / "outcome").read_text() == "rolled-back"
        assert registry.champion == "1"
        assert (
            registry.tags["2"]["rollout.outcome"] == "rolled-back"
            and "smoke test" in registry.tags["2"]["rollout.reason"]
        )
        assert json.loads((home / "serving" / "ernie-sentiment" / "current.json").read_text())["pid"] == current["pid"]
        assert httpx.get(f"{url}/v2/health/ready").status_code == 200
        log_text = (home / "serving" / "ernie-sentiment" / "server-2.log").read_text()
        assert "serving model" in log_text
    finally:
        stopped = local_server.stop_local_server(home)
    assert stopped
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/v2/health/ready", timeout=2)


class ChampionRegistry:
    """A registry whose `champion` alias is read (Registry.champion), never moved or tagged by an ensure-served
    rollout."""

    def __init__(self, found: tuple[str, str] | None):
        self.found = found

    def champion(self) -> tuple[str, str] | None:
        return self.found

    def promote(self, version: str) -> str | None:
        raise AssertionError("--ensure-served must not move 'champion'")

    def tag(self, version: str, key: str, value: str) -> None:
        raise AssertionError("--ensure-served must not tag a version")


def test_ensure_served_without_a_champion_serves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(tmp_path / "home"))
    out = tmp_path / "out"
    args = ["--env", "local", "--champion", "--ensure-served", "--outputs-dir", str(out)]
    assert rollout.main(args, registry=ChampionRegistry(None)) == 0
    assert (out / "serving-url").read_text() == "" and not (tmp_path / "home" / "serving").exists()


def test_ensure_served_is_local_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--champion", "--ensure-served", "--overrides", '["serving.target=kserve"]', "--outputs-dir", str(tmp_path)]
    assert rollout.main(args, registry=ChampionRegistry(("1", MODEL_URI))) == 2
    assert "--ensure-served needs --champion and serving.target=local" in capsys.readouterr().err


def test_the_local_rollout_workflow_keeps_the_champion_served_when_nothing_is_rolled_out() -> None:
    """serving.target=local: a duplicate or refused model ends at serve-champion; a cluster's workflow has no such task
    (its InferenceService keeps serving)."""
    from paddle_mlops_core.config.loader import load_config
    from pipelines import rollout_template

    def tasks(env: str | None) -> dict[str, Any]:
        doc = rollout_template.build(load_config(None, env)).to_dict()
        (main,) = [t for t in doc["spec"]["templates"] if t["name"] == "main"]
        return {t["name"]: t for t in main["dag"]["tasks"]}

    local = tasks("local")[rollout_template.SERVE_CHAMPION]
    assert local["when"] == "{{tasks.validate.outputs.parameters.verdict}} != passed"
    assert rollout_template.SERVE_CHAMPION not in tasks(None)
