"""Rollout: the region-staged KServe state machine (stand-in API) and a real local rollout."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from paddle_mlops.config.loader import load_config, load_regions
from paddle_mlops.contracts import EXIT_ROLLED_BACK
from paddle_mlops.contracts import SERVING_REQUEST_LATENCY_SECONDS as LATENCY
from paddle_mlops.contracts import SERVING_REQUESTS_TOTAL as REQUESTS
from steps import rollout
from steps.runtime import inference_service as isvc
from tests.kserve_standin import KServeStandIn as FakeCustomObjectsApi

MODEL_URI = "s3://paddle-mlops/models/ernie-sentiment/8"
IMAGE = "registry.example.com/paddle-mlops/serve@sha256:" + "cd" * 32


class FakeRegistry:
    def __init__(self, champion: str | None = None):
        self.champion = champion
        self.tags: dict[str, dict[str, str]] = {}

    def promote(self, version: str) -> str | None:
        previous, self.champion = self.champion, version
        return previous

    def tag(self, version: str, key: str, value: str) -> None:
        self.tags.setdefault(version, {})[key] = value


def metrics_text(ok: int, errors: int, slow: bool = False) -> str:
    le = "2.5" if slow else "0.05"
    total = ok + errors
    return "\n".join(
        [
            f"# TYPE {REQUESTS} counter",
            f'{REQUESTS}{{protocol="v1",code="200"}} {ok}',
            f'{REQUESTS}{{protocol="v1",code="500"}} {errors}',
            f"# TYPE {LATENCY} histogram",
            f'{LATENCY}_bucket{{protocol="v1",le="0.05"}} {0 if slow else total}',
            f'{LATENCY}_bucket{{protocol="v1",le="{le}"}} {total}' if slow else "",
            f'{LATENCY}_bucket{{protocol="v1",le="+Inf"}} {total}',
            f'{LATENCY}_count{{protocol="v1"}} {total}',
            f'{LATENCY}_sum{{protocol="v1"}} 1.0',
            "",
        ]
    )


class FakeProbe:
    def __init__(self, unhealthy_urls: tuple[str, ...] = ()):
        self.unhealthy = unhealthy_urls
        self.smoked: list[str] = []

    def smoke(self, url: str, model_name: str, texts: Any) -> None:
        self.smoked.append(url)

    def metrics(self, url: str) -> str:
        return metrics_text(90, 10) if any(u in url for u in self.unhealthy) else metrics_text(1000, 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.001)


@pytest.fixture
def cfg() -> Any:
    return load_config(env="prod", overrides=["serving.ready_timeout_seconds=60", "serving.canary_window_seconds=30"])


@pytest.fixture
def regions(cfg: Any) -> list[Any]:
    known = load_regions()
    return [known[name] for name in cfg.serving.regions]


def previous_services(cfg: Any, regions: list[Any]) -> dict[str, dict[str, Any]]:
    return {
        isvc.service_name(cfg, r): isvc.build_inference_service(cfg, r, "s3://paddle-mlops/models/ernie-sentiment/7", IMAGE, "7")
        for r in regions
    }


def run_machine(cfg: Any, regions: list[Any], api: FakeCustomObjectsApi, probe: FakeProbe) -> rollout.Outcome:
    clock = FakeClock()
    machine = rollout.KServeRollout(cfg, api, probe, clock=clock, sleep=clock.sleep, poll_seconds=5)
    return machine.run(regions, MODEL_URI, "8", IMAGE)


def test_ready_canary_is_checked_then_promoted(cfg: Any, regions: list[Any]) -> None:
    api = FakeCustomObjectsApi(existing=previous_services(cfg, regions[:1]))
    probe = FakeProbe()
    outcome = run_machine(cfg, regions[:1], api, probe)
    assert outcome.outcome == rollout.PROMOTED
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
    assert outcome.outcome == rollout.ROLLED_BACK
    assert "Ready with the new spec not reached within 60s" in outcome.reason
    name = isvc.service_name(cfg, regions[0])
    assert api.model_uri(name).endswith("/7")
    assert api.objects[name]["spec"] == existing[name]["spec"]


def test_unhealthy_canary_rolls_back(cfg: Any, regions: list[Any]) -> None:
    existing = previous_services(cfg, regions[:1])
    api = FakeCustomObjectsApi(existing=existing)
    name = isvc.service_name(cfg, regions[0])
    outcome = run_machine(cfg, regions[:1], api, FakeProbe(unhealthy_urls=(name,)))
    assert outcome.outcome == rollout.ROLLED_BACK
    assert "error rate 0.100 > max_error_rate" in outcome.reason
    assert api.objects[name]["spec"] == existing[name]["spec"]


def test_success_in_two_regions(cfg: Any, regions: list[Any]) -> None:
    assert [r.name for r in regions] == ["cn-north", "cn-east"]
    api = FakeCustomObjectsApi(existing=previous_services(cfg, regions))
    outcome = run_machine(cfg, regions, api, FakeProbe())
    assert outcome.outcome == rollout.PROMOTED and outcome.regions == ["cn-north", "cn-east"]
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
    assert outcome.outcome == rollout.ROLLED_BACK and "region cn-east" in outcome.reason
    for region in regions:
        name = isvc.service_name(cfg, region)
        assert api.model_uri(name).endswith("/7"), f"{region.name} not rolled back"
        assert api.objects[name]["spec"] == existing[name]["spec"]


def test_step_outputs_and_tags_keep_champion_on_failure(tmp_path: Path, regions: list[Any]) -> None:
    cfg = load_config(env="prod")
    registry = FakeRegistry(champion="7")
    api = FakeCustomObjectsApi(existing=previous_services(cfg, regions), lag=False, ready_after=0)
    probe = FakeProbe(unhealthy_urls=(isvc.service_name(cfg, regions[1]),))
    common = ["--env", "prod", "--overrides", '["serving.canary_window_seconds=0", "serving.ready_timeout_seconds=1"]']
    args = [*common, "--model-uri", MODEL_URI, "--model-version", "8",
            "--url-out", str(tmp_path / "url"), "--outcome-out", str(tmp_path / "outcome")]
    # A rollback is a verdict, not a transient error: its own exit code, which Argo does not retry.
    assert rollout.main(args, registry=registry, api=api, probe=probe) == EXIT_ROLLED_BACK == 3
    assert (tmp_path / "outcome").read_text() == "rolled-back"
    assert registry.champion == "7" and registry.tags["8"]["rollout.outcome"] == "rolled-back"
    assert "cn-east" in registry.tags["8"]["rollout.reason"]

    api = FakeCustomObjectsApi(existing=previous_services(cfg, regions), lag=False, ready_after=0)
    assert rollout.main(args, registry=registry, api=api, probe=FakeProbe()) == 0
    assert (tmp_path / "outcome").read_text() == "promoted"
    assert (tmp_path / "url").read_text() == f"http://{isvc.service_name(cfg, regions[1])}.ns.example.com"
    assert registry.champion == "8" and registry.tags["8"]["rollout.outcome"] == "promoted"


def test_parse_health_p99() -> None:
    health = rollout.parse_health(metrics_text(100, 0, slow=True))
    assert health.requests == 100 and health.error_rate == 0 and health.p99_ms == 2500


# --------------------------------------------------------------------------- local, real processes


@pytest.mark.slow
def test_local_rollout_failed_smoke_keeps_previous_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_serving import shared_tiny_export

    home = tmp_path / "home"
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(home))
    model_dir = shared_tiny_export()
    registry = FakeRegistry(champion=None)
    out = tmp_path / "out"

    def run(version: str, overrides: list[str]) -> int:
        return rollout.main(
            ["--env", "local", "--overrides", json.dumps(["serving.ready_timeout_seconds=180", *overrides]),
             "--model-uri", str(model_dir), "--model-version", version,
             "--url-out", str(out / "url"), "--outcome-out", str(out / "outcome")],
            registry=registry,
        )

    try:
        assert run("1", []) == 0
        current = json.loads((home / "serving" / "current.json").read_text())
        url = (out / "url").read_text()
        assert current["model_version"] == "1" and current["url"] == url and url.startswith("http://127.0.0.1:")
        assert registry.champion == "1"

        failures: list[str] = []
        sent = [0]
        stop = threading.Event()

        def keep_asking() -> None:
            with httpx.Client(timeout=10) as c:
                while not stop.is_set():
                    try:
                        r = c.post(f"{url}/v1/models/ernie-sentiment:predict", json={"instances": ["很好"]})
                        if r.status_code != 200:
                            failures.append(f"{r.status_code} {r.text[:100]}")
                    except httpx.HTTPError as exc:
                        failures.append(repr(exc))
                    sent[0] += 1
                    time.sleep(0.05)

        traffic = threading.Thread(target=keep_asking)
        traffic.start()
        try:
            # The smoke texts are longer than 2 characters: the new server rejects them, smoke fails.
            assert run("2", ["serving.max_text_chars=2"]) == EXIT_ROLLED_BACK
        finally:
            stop.set()
            traffic.join()
        assert failures == [] and sent[0] > 5
        assert (out / "outcome").read_text() == "rolled-back"
        assert registry.champion == "1"
        assert registry.tags["2"]["rollout.outcome"] == "rolled-back" and "smoke test" in registry.tags["2"]["rollout.reason"]
        assert json.loads((home / "serving" / "current.json").read_text())["pid"] == current["pid"]
        assert httpx.get(f"{url}/v2/health/ready").status_code == 200
        log_text = (home / "serving" / "server-2.log").read_text()
        assert "serving model" in log_text
    finally:
        stopped = rollout.stop_local_server(home)
    assert stopped
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/v2/health/ready", timeout=2)
